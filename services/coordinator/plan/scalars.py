"""SQL expressions (sqlglot) to MIR scalars over a scope, typed and checked against the registry.

Every function call must be in ``loupe.plan.functions`` (the engine
implements exactly those); literals are typed as PostgreSQL types them
(quoted literals by their context) and constant casts and date arithmetic
are folded while planning (``values``). ``now()``, ``current_timestamp``
and ``mz_now()`` fold to the query's time in one-off SELECTs and are
refused (``TemporalError``) where no such time exists, as in views.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from sqlglot import exp

import loupe.plan.mir as mir
from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import parameters
from loupe.coordinator.plan.scope import Scope
from loupe.coordinator.plan.values import fold_cast
from loupe.coordinator.sql.parser import ListAgg
from loupe.dataflow.expr import check_cast, compile_scalar, evaluate_closed
from loupe.interval import parse_interval
from loupe.plan import functions
from loupe.plan.scalar import Call, Case, Cast, Column, Literal, Scalar, columns_of, scalar_type

GROUPING_ERROR = SqlState.GROUPING_ERROR
WINDOWING_ERROR = "42P20"
WRONG_OBJECT_TYPE = "42809"
UNDEFINED_FUNCTION = "42883"
COMPARISONS = {"eq", "neq", "lt", "lte", "gt", "gte", "between"}

_BINARY: dict[type[exp.Expression], str] = {
    exp.EQ: "eq",
    exp.NEQ: "neq",
    exp.LT: "lt",
    exp.LTE: "lte",
    exp.GT: "gt",
    exp.GTE: "gte",
    exp.And: "and",
    exp.Or: "or",
    exp.Add: "add",
    exp.Sub: "sub",
    exp.Mul: "mul",
    exp.Div: "div",
    exp.Mod: "mod",
    exp.Like: "like",
    exp.ILike: "ilike",
    exp.DPipe: "concat",
}
AGGREGATES: dict[type, str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    # bool_and and bool_or are min and max over booleans (false < true; NULLs skipped).
    exp.LogicalAnd: "min",
    exp.LogicalOr: "max",
    # Variance and standard deviation, recomputed per changed group (not accumulated:
    # retracted floats would leave residue that the square root magnifies).
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.GroupConcat: "string_agg",
    exp.ArrayAgg: "array_agg",
    ListAgg: "list_agg",
}
# sqlglot node -> (registry name, the node's argument keys in PostgreSQL's order).
_FUNCTION_ARGS: dict[type[exp.Expression], tuple[str, tuple[str, ...]]] = {
    exp.Substring: ("substr", ("this", "start", "length")),
    exp.StrPosition: ("strpos", ("this", "substr")),
    exp.Left: ("left", ("this", "expression")),
    exp.Right: ("right", ("this", "expression")),
    exp.SplitPart: ("split_part", ("this", "delimiter", "part_index")),
    exp.Replace: ("replace", ("this", "expression", "replacement")),
    exp.StartsWith: ("starts_with", ("this", "expression")),
    exp.Round: ("round", ("this", "decimals")),
    exp.Pow: ("power", ("this", "expression")),
    exp.Length: ("length", ("this",)),
    exp.Nullif: ("nullif", ("this", "expression")),
    exp.Coalesce: ("coalesce", ("this", "expressions")),
    exp.Greatest: ("greatest", ("this", "expressions")),
    exp.Least: ("least", ("this", "expressions")),
    exp.Concat: ("concat_variadic", ("expressions",)),
    exp.ConcatWs: ("concat_ws", ("expressions",)),
    exp.Chr: ("chr", ("expressions",)),
    exp.UnixToTime: ("to_timestamp", ("this",)),
    exp.TimestampFromParts: ("make_timestamp", ("year", "month", "day", "hour", "min", "sec")),
}
TEMPORAL_FUNCTIONS = ("now", "current_timestamp", "mz_now", "current_date")
_CONTAINER_OPERATORS: dict[type[exp.Expression], str] = {
    exp.ArrayContainsAll: "array_contains",
    exp.ArrayContainedBy: "array_contained",
    exp.ArrayOverlaps: "array_overlap",
}


def unsupported(what: str) -> LoupeError:
    """The 0A000 error for a construct the planner does not support."""
    return LoupeError(SqlState.FEATURE_NOT_SUPPORTED, f"{what} not yet supported")


class TemporalError(LoupeError):
    """``now()``/``mz_now()`` where the plan must hold at every time (views, indexes)."""

    def __init__(self, function: str) -> None:
        super().__init__(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"{function}() is not allowed in a view, index or materialized view: "
            "its value changes with time",
        )
        self.function = function


class CorrelatedReference(LoupeError):
    """A subquery refers to a column of the enclosing query where Loupe cannot decorrelate it."""

    def __init__(self, name: str) -> None:
        super().__init__(
            SqlState.FEATURE_NOT_SUPPORTED,
            f'correlated reference to "{name}" not yet supported '
            "(only equalities in the subquery's WHERE)",
        )


@dataclass
class Context:
    """What expression lowering needs from the query being planned."""

    # The enclosing query's scope, when planning a subquery.
    outer: Scope | None = None
    # Milliseconds since the epoch for now()/mz_now(); None where they are refused.
    query_time: int | None = None
    # id() of a scalar subquery node -> the hidden column holding its value.
    subquery_columns: dict[int, int] = field(default_factory=dict)
    # The temporal functions folded into literals; one list shared with subqueries' contexts.
    folded: list[str] = field(default_factory=list)
    # id() of a window function call node -> the column holding its value (``windows``).
    window_columns: dict[int, int] = field(default_factory=dict)
    # The local names given to WITH MUTUALLY RECURSIVE bindings (l0, l1, …); shared too.
    bindings: list[str] = field(default_factory=list)

    @property
    def temporal(self) -> bool:
        """Whether the plan holds the query time (now() or mz_now() was folded)."""
        return bool(self.folded)

    # Scopes further out than ``outer`` (a subquery's subquery may name them).
    farther: tuple[Scope, ...] = ()

    def child(self, outer: Scope | None) -> Context:
        """The context of a subquery whose enclosing query's scope is ``outer``."""
        farther = tuple(s for s in (self.outer, *self.farther) if s is not None)
        return Context(
            outer=outer,
            query_time=self.query_time,
            folded=self.folded,
            bindings=self.bindings,
            farther=farther,
        )

    def encloses(self, table: str | None, name: str) -> bool:
        """Whether an enclosing query (however far out) has the column."""
        scopes = [s for s in (self.outer, *self.farther) if s is not None]
        return any(scope.has(table, name) for scope in scopes)

    def temporal_literal(self, function: str) -> Literal:
        """The value of ``function`` at the query time."""
        if self.query_time is None:
            raise TemporalError(function)
        self.folded.append(function)
        if function == "mz_now":
            return Literal(self.query_time, "mz_timestamp")
        moment = datetime.datetime.fromtimestamp(self.query_time / 1000, tz=datetime.UTC)
        if function == "current_date":
            return Literal(moment.date(), "date")
        return Literal(moment, "timestamptz")


class Grouping:
    """Lowers expressions above a Reduce: group keys and aggregates become its output columns."""

    def __init__(self, keys: tuple[Scalar, ...], below: Scalars) -> None:
        self.keys = keys
        self.below = below
        self.aggregates: list[mir.Aggregate] = []
        # Types of the columns joined after the Reduce's (scalar subqueries in HAVING).
        self.hidden: tuple[str, ...] = ()

    @property
    def types(self) -> tuple[str, ...]:
        """The Reduce's output types so far, then the hidden columns'."""
        below = self.below.types
        keys = tuple(scalar_type(k, below) for k in self.keys)
        return keys + tuple(a.result_type(below) for a in self.aggregates) + self.hidden

    def aggregate(self, node: exp.Expression) -> Column:
        """The output column of the aggregate call ``node``, adding it if new."""
        return self._column(self._lower_aggregate(node))

    def _column(self, aggregate: mir.Aggregate) -> Column:
        if aggregate not in self.aggregates:
            # Columns after the aggregates would move: all must be known first.
            assert not self.hidden, "aggregate found after the Reduce was built"
            self.aggregates.append(aggregate)
        return Column(len(self.keys) + self.aggregates.index(aggregate))

    def _lower_aggregate(self, node: exp.Expression) -> mir.Aggregate:
        condition = None
        if isinstance(node, exp.Filter):  # agg(x) FILTER (WHERE c) is agg(CASE WHEN c THEN x END)
            condition = self.below.lower(node.expression.this)
            node = node.this
        func = AGGREGATES.get(type(node))
        if func is None:
            name = node.sql_name() if isinstance(node, exp.Func) else node.key
            raise unsupported(f"aggregate function {name.lower()}")
        if func == "string_agg":
            return self._string_agg(node, condition)
        if func in ("array_agg", "list_agg"):
            return self._collect(func, node, condition)
        arg = node.this
        if any(isinstance(n, exp.Window) for n in arg.walk()):
            raise LoupeError(
                GROUPING_ERROR, "aggregate function calls cannot contain window function calls"
            )
        if any(isinstance(n, exp.AggFunc) for n in arg.walk()):
            raise LoupeError(GROUPING_ERROR, "aggregate function calls cannot be nested")
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            if func in mir.SPREAD_AGGREGATES:
                raise unsupported(f"{func}(DISTINCT …)")
            arg = arg.expressions[0]
        if isinstance(arg, exp.Star):
            if condition is None:
                return mir.Aggregate("count", None)
            return mir.Aggregate(
                "count", Case(((condition, Literal(True, "bool")),), _null("bool"))
            )
        expr = self.below.lower(arg)
        _check_aggregate_argument(func, self.below.type_of(expr))
        if condition is not None:
            expr = Case(((condition, expr),), _null(self.below.type_of(expr)))
        return mir.Aggregate(func, expr, distinct=distinct)

    def _collect(self, func: str, node: exp.Expression, condition: Scalar | None) -> mir.Aggregate:
        """``array_agg(x [ORDER BY …])`` / ``list_agg``: every row's value, NULLs included;
        FILTER drops rows (its condition is the aggregate's argument after the value)."""
        arg, order, distinct = _ordered_argument(node.this)
        value = self.below.lower(arg)
        value_type = self.below.type_of(value)
        if value_type == "unknown":
            value, value_type = Cast(value, "text"), "text"
        try:
            sqltypes.array_of(value_type) if func == "array_agg" else sqltypes.list_of(value_type)
        except sqltypes.UnknownType:
            raise unsupported(f"{func} of {sqltypes.display_name(value_type)}") from None
        keys = self._order_keys(order, (value,) if distinct else None)
        kept = condition if condition is not None else Literal(True, "bool")
        return mir.Aggregate(func, value, distinct, (kept,), keys)

    def _string_agg(self, node: exp.Expression, condition: Scalar | None) -> mir.Aggregate:
        """``string_agg(value, delimiter [ORDER BY …])``, both text, as PostgreSQL has it."""
        arg, order, distinct = _ordered_argument(node.this)
        separator = node.args.get("separator")
        value = self.below.lower(arg)
        delimiter = self.below.lower(separator) if separator is not None else None
        types = [self.below.type_of(value)]
        if delimiter is not None:
            types.append(self.below.type_of(delimiter))
        if delimiter is None or any(t not in ("text", "unknown") for t in types):
            names = ", ".join(sqltypes.display_name(t) for t in types)
            raise LoupeError(UNDEFINED_FUNCTION, f"function string_agg({names}) does not exist")
        keys = self._order_keys(order, (value, delimiter) if distinct else None)
        if condition is not None:
            value = Case(((condition, value),), _null("text"))
        return mir.Aggregate("string_agg", value, distinct, (delimiter,), keys)

    def _order_keys(
        self, order: Sequence[exp.Ordered], arguments: tuple[Scalar, ...] | None
    ) -> tuple[mir.AggregateOrder, ...]:
        """An aggregate's ORDER BY keys; with DISTINCT (``arguments``) each must be one."""
        keys = []
        for ordered in order:
            key = self.below.lower(ordered.this)
            if arguments is not None and key not in arguments:
                raise LoupeError(
                    "42P10",
                    "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
                )
            desc = bool(ordered.args.get("desc"))
            nulls_first = ordered.args.get("nulls_first")
            # PostgreSQL's default: NULLs sort as the largest value.
            nulls_last = not desc if nulls_first is None else not nulls_first
            keys.append(mir.AggregateOrder(key, desc, nulls_last))
        return tuple(keys)


def _ordered_argument(arg: exp.Expression) -> tuple[exp.Expression, list[exp.Ordered], bool]:
    """An aggregate's argument without its ``ORDER BY`` and ``DISTINCT``, and those."""
    order: list[exp.Ordered] = []
    if isinstance(arg, exp.Order):
        order = list(arg.expressions)
        arg = arg.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        arg = arg.expressions[0]
    if any(isinstance(n, exp.AggFunc) for n in arg.walk()):
        raise LoupeError(GROUPING_ERROR, "aggregate function calls cannot be nested")
    return arg, order, distinct


class Scalars:
    """Lowers sqlglot expressions to MIR scalars over a scope (above a Reduce if ``grouping``)."""

    def __init__(self, context: Context, scope: Scope, grouping: Grouping | None = None) -> None:
        self.context = context
        self.scope = scope
        self.grouping = grouping

    @property
    def types(self) -> tuple[str, ...]:
        return self.grouping.types if self.grouping is not None else self.scope.types

    def type_of(self, scalar: Scalar) -> str:
        return scalar_type(scalar, self.types)

    def lower(self, node: exp.Expression) -> Scalar:
        """The scalar of ``node``."""
        return self._lower(node)

    def _lower(self, node: exp.Expression) -> Scalar:
        if isinstance(node, exp.Window):
            return self._window(node)
        if self.grouping is not None:
            grouped = self._grouped(node, self.grouping)
            if grouped is not None:
                return grouped
        elif isinstance(node, exp.AggFunc | exp.Filter):
            raise LoupeError(GROUPING_ERROR, "aggregate functions are not allowed here")
        return self._structural(node)

    def _grouped(self, node: exp.Expression, grouping: Grouping) -> Scalar | None:
        if isinstance(node, exp.AggFunc) or (
            isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc)
        ):
            return grouping.aggregate(node)
        if (
            node.find(exp.AggFunc) is None
            and node.find(exp.Subquery, exp.Exists, exp.Window) is None
        ):
            below = grouping.below.lower(node)
            if below in grouping.keys:
                return Column(grouping.keys.index(below))
            if isinstance(node, exp.Column):
                raise LoupeError(
                    GROUPING_ERROR,
                    f'column "{".".join(p.name for p in node.parts)}" must appear in the GROUP BY '
                    "clause or be used in an aggregate function",
                )
            if not any(isinstance(n, exp.Column) for n in node.walk()):
                return below  # a constant
        return None

    def _structural(self, node: exp.Expression) -> Scalar:
        if isinstance(node, exp.Paren):
            return self._lower(node.this)
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Literal | exp.Boolean | exp.Null):
            return literal(node)
        if isinstance(node, exp.Parameter) and parameters.active():
            number = parameters.number_of(node)
            if number is not None:
                return parameters.Slot(None, "unknown", number)
        if isinstance(node, exp.Interval):
            return self._interval(node)
        if isinstance(node, exp.Escape) and isinstance(node.this, exp.Like | exp.ILike):
            like = node.this
            args = self._args(like.this, like.expression, node.expression)
            matched = self.call(_BINARY[type(like)], args)
            return self.call("not", [matched]) if like.args.get("negate") else matched
        if isinstance(node, exp.Like | exp.ILike) and node.args.get("negate"):
            return self.call(
                "not", [self.call(_BINARY[type(node)], self._args(node.this, node.expression))]
            )
        if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any):
            container = self._container(node)
            assert container is not None
            return container
        if type(node) in _BINARY:
            return self.call(_BINARY[type(node)], self._args(node.this, node.expression))
        if isinstance(node, exp.Not):
            return self._not(node.this)
        if isinstance(node, exp.Neg):
            return self._negate(self._lower(node.this), constant=_is_constant(node.this))
        if isinstance(node, exp.Is):
            return self._is(node)
        if isinstance(node, exp.NullSafeEQ | exp.NullSafeNEQ):
            return self._not_distinct(node)
        if isinstance(node, exp.Between):
            return self.call("between", self._args(node.this, node.args["low"], node.args["high"]))
        if isinstance(node, exp.In):
            return self._in_list(node)
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.Subquery):
            return self._subquery(node)
        container = self._container(node)
        if container is not None:
            return container
        return self._function(node)

    def _json_key(self, node: exp.Expression) -> Scalar:
        """The key of ``->``/``->>``: sqlglot reads a constant one as a JSON path."""
        if isinstance(node, exp.JSONPath):
            parts = [p for p in node.expressions if not isinstance(p, exp.JSONPathRoot)]
            if len(parts) != 1:
                raise unsupported("this JSON path")
            part = parts[0]
            if isinstance(part, exp.JSONPathSubscript):
                return Literal(int(part.this), "int4")
            if isinstance(part, exp.JSONPathKey):
                return Literal(str(part.this), "text")
            raise unsupported("this JSON path")
        return self._lower(node)

    def _container(self, node: exp.Expression) -> Scalar | None:
        """Arrays and lists: constructors, subscripts, ``= ANY``, containment operators."""
        if isinstance(node, exp.Array | exp.List):
            name = "array" if isinstance(node, exp.Array) else "list"
            if name == "array" and any(isinstance(e, exp.Array) for e in node.expressions):
                raise unsupported("multidimensional arrays")
            if not node.expressions:
                raise LoupeError(
                    "42P18",
                    f"cannot determine type of empty {name}",
                    hint=f"Explicitly cast to the desired type, for example {name.upper()}[]::integer[].",
                )
            return self.call(name, self._args(*node.expressions))
        if isinstance(node, exp.Bracket):
            if len(node.expressions) != 1:
                raise unsupported("multidimensional subscripts")
            index = node.expressions[0]
            if isinstance(index, exp.Slice):
                return self._slice(node.this, index)
            position = (
                Literal(int(index.this) + 1, "int4")  # sqlglot stores a constant 0-based
                if isinstance(index, exp.Literal) and not index.is_string
                else self._lower(index)
            )
            container = self._lower(node.this)
            if sqltypes.element_type(self.type_of(container)) is None:
                raise LoupeError(
                    "42804",
                    f"cannot subscript type {sqltypes.display_name(self.type_of(container))} "
                    "because it does not support subscripting",
                )
            return self.call("subscript", [container, position])
        if isinstance(node, exp.EQ) and isinstance(node.expression, exp.Any):
            target = node.expression.this
            target = target.this if isinstance(target, exp.Paren) else target
            return self.call("eq_any", self._args(node.this, target))
        if isinstance(node, exp.JSONExtract | exp.JSONExtractScalar):
            name = "jsonb_get" if isinstance(node, exp.JSONExtract) else "jsonb_get_text"
            return self.call(name, [self._lower(node.this), self._json_key(node.expression)])
        if isinstance(node, exp.JSONBContainsTopKey):
            return self.call("jsonb_exists", self._args(node.this, node.expression))
        if type(node) in _CONTAINER_OPERATORS:
            args = self._args(node.this, node.expression)
            name = _CONTAINER_OPERATORS[type(node)]
            if "jsonb" in (self.type_of(args[0]), self.type_of(args[1])):
                name = {
                    "array_contains": "jsonb_contains",
                    "array_contained": "jsonb_contained",
                }.get(name, name)
            return self.call(name, args)
        if isinstance(node, exp.ArraySize):
            return self.call("array_length", self._args(*_present(node, ("this", "expression"))))
        if isinstance(node, exp.ArrayToString):
            return self.call(
                "array_to_string", self._args(*_present(node, ("this", "expression", "null")))
            )
        return None

    def _slice(self, container_node: exp.Expression, bounds: exp.Slice) -> Scalar:
        """``l[a:b]``, ``l[:b]``, ``l[a:]`` on a list (Materialize's ``list_slice_linear``)."""
        container = self._lower(container_node)
        if not sqltypes.is_list(self.type_of(container)):
            raise unsupported(f"slices of {sqltypes.display_name(self.type_of(container))}")
        start = bounds.args.get("this")
        end = bounds.args.get("expression")
        first = self._bound(start) if start is not None else Literal(1, "int8")
        last = self._bound(end) if end is not None else Literal(2**63 - 1, "int8")
        return self.call("list_slice", [container, first, last])

    def _bound(self, node: exp.Expression) -> Scalar:
        if isinstance(node, exp.Literal) and not node.is_string:
            return Literal(int(node.this), "int8")
        return Cast(self._lower(node), "int8")

    def _window(self, node: exp.Window) -> Column:
        """The column the planner computed a window function call into."""
        position = self.context.window_columns.get(id(node))
        if position is None:
            raise LoupeError(WINDOWING_ERROR, "window functions are not allowed here")
        return Column(position)

    def _args(self, *nodes: exp.Expression) -> list[Scalar]:
        return [self._lower(n) for n in nodes]

    def _column(self, node: exp.Column) -> Scalar:
        table = node.table or None
        try:
            return Column(self.scope.lookup(table, node.name))
        except LoupeError as error:
            missing = error.code in (SqlState.UNDEFINED_COLUMN, SqlState.UNDEFINED_TABLE)
            if missing and self.context.encloses(table, node.name):
                raise CorrelatedReference(node.sql(dialect="postgres")) from error
            raise

    def _interval(self, node: exp.Interval) -> Literal:
        text = node.this
        unit = node.args.get("unit")
        if not isinstance(text, exp.Literal):
            raise unsupported("non-constant INTERVAL")
        unit_name = None
        if unit is not None:
            unit_name = unit.name if isinstance(unit, exp.Var) else unit.key
        return Literal(parse_interval(str(text.this), unit_name), "interval")

    def _not(self, operand: exp.Expression) -> Scalar:
        # NOT binds looser than IS: NOT x IS NOT NULL is NOT (x IS NOT NULL).
        if (
            isinstance(operand, exp.Is)
            and isinstance(operand.expression, exp.Null)
            and not operand.args.get("negate")
        ):
            return self.call("is_not_null", [self._lower(operand.this)])
        if isinstance(operand, exp.Paren):
            return self._not(operand.this)
        return self.call("not", [self._lower(operand)])

    def _negate(self, operand: Scalar, *, constant: bool = False) -> Scalar:
        if isinstance(operand, Literal) and isinstance(operand.value, int | float | Decimal):
            value = -operand.value
            # A negative constant is typed by its value, as PostgreSQL's parser does:
            # -2147483648 is an integer, -9223372036854775808 a bigint.
            # Written without a decimal point (2147483648 is numeric text, 2.0 is not integral).
            integral = isinstance(value, int) or (
                isinstance(value, Decimal) and value.as_tuple().exponent == 0
            )
            if constant and operand.type in ("int4", "int8", "numeric") and integral:
                if -(2**31) <= value < 2**31:
                    return Literal(int(value), "int4")
                if -(2**63) <= value < 2**63:
                    return Literal(int(value), "int8")
                return Literal(Decimal(value), "numeric")
            return Literal(value, operand.type)
        return self.call("neg", [operand])

    def _is(self, node: exp.Is) -> Scalar:
        operand = self._lower(node.this)
        target = node.expression
        negated = bool(node.args.get("negate"))
        if isinstance(target, exp.Null):
            return self.call("is_not_null" if negated else "is_null", [operand])
        if not isinstance(target, exp.Boolean):
            raise unsupported(f"IS {target.sql(dialect='postgres')}")
        # IS TRUE / IS FALSE are never NULL.
        value = operand if target.this else self.call("not", [operand])
        holds = self.call("coalesce", [value, Literal(False, "bool")])
        return self.call("not", [holds]) if negated else holds

    def _not_distinct(self, node: exp.Expression) -> Scalar:
        """``a IS NOT DISTINCT FROM b``: equal, or both NULL; never NULL itself."""
        left, right = self._args(node.this, node.expression)
        equal = self.call("coalesce", [self.call("eq", [left, right]), Literal(False, "bool")])
        both_null = self.call("and", [self.call("is_null", [left]), self.call("is_null", [right])])
        same = self.call("or", [equal, both_null])
        return same if isinstance(node, exp.NullSafeEQ) else self.call("not", [same])

    def _in_list(self, node: exp.In) -> Scalar:
        if node.args.get("query") is not None:
            return self._subquery(node)
        if node.args.get("unnest") or node.args.get("field"):
            raise unsupported("IN over this kind of list")
        subject = self._lower(node.this)
        tests = [self.call("eq", [subject, self._lower(item)]) for item in node.expressions]
        return tests[0] if len(tests) == 1 else self.call("or", tests)

    def _cast(self, node: exp.Cast) -> Scalar:
        to = cast_type(node.to)
        operand = self._lower(node.this)
        parameters.typed(operand, to)
        modifiers = _numeric_modifiers(node.to) if to == "numeric" else None
        if isinstance(operand, Literal):
            try:
                folded = fold_cast(operand.value, operand.type, to)
            except ValueError:
                pass
            else:
                if modifiers is not None and folded is not None:
                    folded = numeric_with_modifiers(folded, *modifiers)
                return Literal(folded, to)
        if self.type_of(operand) != to:
            check_cast(self.type_of(operand), to)
        cast = operand if self.type_of(operand) == to else Cast(operand, to)
        if modifiers is not None:
            # numeric(p, s): rounded to s decimals (the precision is checked for constants only).
            return Call("round", (cast, Literal(modifiers[1], "int4")))
        return cast

    def _case(self, node: exp.Case) -> Scalar:
        subject = node.this
        whens = []
        for when in node.args.get("ifs") or []:
            condition = when.this if subject is None else exp.EQ(this=subject, expression=when.this)
            whens.append((self._lower(condition), self._lower(when.args["true"])))
        default = node.args.get("default")
        if default is not None:
            return self._folded_case(Case(tuple(whens), self._lower(default)))
        result_type = next(
            (t for t in (self.type_of(r) for _, r in whens) if t != "unknown"), "unknown"
        )
        return self._folded_case(Case(tuple(whens), _null(result_type)))

    def _folded_case(self, case: Case) -> Scalar:
        """``case`` without the WHENs whose condition is a constant, as PostgreSQL folds them:
        false or NULL never match, true ends the CASE (its type stays the whole CASE's)."""
        if not any(isinstance(c, Literal) for c, _ in case.whens):
            return case
        case_type = self.type_of(case)
        kept: list[tuple[Scalar, Scalar]] = []
        otherwise = case.otherwise
        for condition, result in case.whens:
            if isinstance(condition, Literal) and condition.value is True:
                otherwise = result
                break
            if not isinstance(condition, Literal):
                kept.append((condition, result))
        folded = Case(tuple(kept), otherwise) if kept else otherwise
        if self.type_of(folded) == case_type:
            return folded
        if isinstance(folded, Literal) and folded.value is None:
            return Literal(None, case_type)
        return Cast(folded, case_type)

    def _subquery(self, node: exp.Expression) -> Scalar:
        """The hidden column the planner joined a subquery's value into."""
        position = self.context.subquery_columns.get(id(node))
        if position is None:
            raise unsupported("a subquery in this position")
        return Column(position)

    def _function(self, node: exp.Expression) -> Scalar:
        if isinstance(node, exp.AggFunc):
            raise LoupeError(GROUPING_ERROR, "aggregate functions are not allowed here")
        if isinstance(node, exp.Exists):
            return self._subquery(node)
        if isinstance(node, exp.CurrentTimestamp):
            return self.context.temporal_literal("now")
        if isinstance(node, exp.CurrentDate):
            return self.context.temporal_literal("current_date")
        window_name = _window_function_name(node)
        if window_name is not None:
            raise LoupeError(
                WRONG_OBJECT_TYPE, f"window function {window_name} requires an OVER clause"
            )
        if isinstance(node, exp.Anonymous):
            name = str(node.name).lower()
            if name in TEMPORAL_FUNCTIONS and not node.expressions:
                return self.context.temporal_literal(name)
            if name == "age" and len(node.expressions) == 1:
                # age(x) is age(current_date, x): from midnight today (at the query time).
                today = self.context.temporal_literal("current_date")
                return self.call(
                    "age", [Cast(today, "timestamp"), self._lower(node.expressions[0])]
                )
            return self.call(name, self._args(*node.expressions))
        if isinstance(node, exp.Trim):
            position = str(node.args.get("position") or "").upper()
            name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
            return self.call(name, self._args(*_present(node, ("this", "expression"))))
        if isinstance(node, exp.Pad):
            name = "lpad" if node.args.get("is_left") else "rpad"
            return self.call(
                name, self._args(*_present(node, ("this", "expression", "fill_pattern")))
            )
        if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            unit = Literal(_unit_name(node.args["unit"]), "text")
            return self.call("date_trunc", [unit, self._lower(node.this)])
        if isinstance(node, exp.AtTimeZone):
            return self.call("timezone", self._args(node.args["zone"], node.this))
        if isinstance(node, exp.Extract):
            field_name = Literal(_unit_name(node.this), "text")
            return self.call("extract", [field_name, self._lower(node.expression)])
        if type(node) in _FUNCTION_ARGS:
            name, keys = _FUNCTION_ARGS[type(node)]
            return self.call(name, self._args(*_present(node, keys)))
        if isinstance(node, exp.Func):
            keys = tuple(node.arg_types)
            args = _present(node, keys)
            if any(not isinstance(a, exp.Expression) for a in args):
                raise unsupported(f"function {node.sql_name().lower()}")
            return self.call(node.sql_name().lower(), self._args(*args))
        raise unsupported(describe(node))

    # Calls

    def call(self, name: str, args: Sequence[Scalar]) -> Scalar:
        """``name(args)`` checked against the registry, its literals typed, constants folded."""
        function = functions.lookup(name)
        if function is None or name in TEMPORAL_FUNCTIONS:
            raise LoupeError(UNDEFINED_FUNCTION, f"function {name} does not exist")
        if not function.accepts(len(args)):
            raise LoupeError(
                UNDEFINED_FUNCTION, f"function {name} does not take {len(args)} arguments"
            )
        args = self._coerce(function.name, list(args))
        if (function.name in NUMERIC_ONLY_TWO_ARGUMENTS and len(args) == 2) or (
            function.name == "mod"
        ):
            types = [self.type_of(a) for a in args]
            if any(t in ("float4", "float8") for t in types):
                # log(b, x), round(x, n) and trunc(x, n) exist for numeric only,
                # a % b for integers and numeric, and double precision does not
                # cast to numeric implicitly.
                names = ", ".join(sqltypes.display_name(t) for t in types)
                raise LoupeError(UNDEFINED_FUNCTION, f"function {name}({names}) does not exist")
        if function.name == "concat" and any(
            sqltypes.element_type(self.type_of(a)) is not None for a in args
        ):
            return self._container_concat(args)
        if function.name in COMPARISONS:
            _check_comparable([self.type_of(a) for a in args], function.name)
        if function.name == "concat":
            _check_text_operand([self.type_of(a) for a in args])
        if function.name in _OPERATORS:
            _check_arithmetic_operands(function.name, [self.type_of(a) for a in args])
        if function.name == "nullif":  # a is converted when the comparison converts it
            result = self.type_of(Call(function.name, tuple(args)))
            if self.type_of(args[0]) not in (result, "unknown"):
                args[0] = Cast(args[0], result)
        call = Call(function.name, tuple(args))
        # NULL without evaluating the others, as PostgreSQL folds when planning: a strict
        # function of a NULL constant (strpos(NULL, 1 / x) is NULL even where x = 0),
        # NULLIF(NULL, x), and x BETWEEN … with x NULL.
        null_first = function.name in ("between", "nullif") and _is_null(args[0])
        if (null_first or (function.name in functions.STRICT and any(map(_is_null, args)))) and (
            _safe(args)
        ):
            return Literal(None, self.type_of(call))
        if function.name in functions.CHECKED_WHEN_PLANNED:
            # The engine's compiler checks what the registry cannot (argument types, constant
            # formats and zones): a call it refuses fails the statement, not a replica's render.
            compile_scalar(call, self.types)
        return _fold_constant(call) or call

    def _container_concat(self, args: Sequence[Scalar]) -> Scalar:
        """``a || b`` of arrays (or lists): their concatenation, an element appended or
        prepended; a NULL container counts as empty (as array_cat and array_append do)."""
        types = [self.type_of(a) for a in args]
        containers = [t for t in types if sqltypes.element_type(t) is not None]
        result = containers[0]
        if len(set(containers)) > 1:
            names = " || ".join(sqltypes.display_name(t) for t in types)
            raise LoupeError(UNDEFINED_FUNCTION, f"operator does not exist: {names}")
        element = sqltypes.element_type(result)
        assert element is not None
        parts = [
            a if t == result else self._as_element(a, t, element)
            for a, t in zip(args, types, strict=True)
        ]
        return Call("container_concat", tuple(parts))

    def _as_element(self, arg: Scalar, type_: str, element: str) -> Scalar:
        typed = _typed_like(arg, type_, element)
        typed_type = self.type_of(typed)
        if typed_type not in (element, "unknown"):
            if not (typed_type in NUMERIC_TYPES and element in NUMERIC_TYPES):
                names = f"{sqltypes.display_name(element)}[] || {sqltypes.display_name(typed_type)}"
                raise LoupeError(UNDEFINED_FUNCTION, f"operator does not exist: {names}")
            typed = Cast(typed, element)
        return typed

    def _coerce(self, name: str, args: list[Scalar]) -> list[Scalar]:
        """Quoted literals and NULLs take the type of the call's other arguments, as in PostgreSQL
        (or the type of their position, for calls with one signature)."""
        if name in functions.LITERAL_TYPES:
            wanted = functions.LITERAL_TYPES[name]
            return [
                _typed_like(a, self.type_of(a), t) if t is not None else a
                for a, t in zip(args, wanted, strict=False)
            ]
        if name not in functions.COERCING:
            return args
        types = [self.type_of(a) for a in args]
        context = next((t for t in types if t not in ("text", "unknown")), None)
        if context is None:
            return args
        coerced = [_typed_like(a, t, context) for a, t in zip(args, types, strict=True)]
        if name in COMPARISONS:
            return self._compare_dates(coerced)
        return coerced

    def _compare_dates(self, args: list[Scalar]) -> list[Scalar]:
        """Dates and times compared with one another, as PostgreSQL promotes them.

        date < timestamp < timestamptz (UTC here): the others are cast to the
        widest, except constants that convert exactly (a midnight timestamp
        compared with a date column becomes a date, so the column is not cast
        on every row).
        """
        types = [self.type_of(a) for a in args]
        present = [t for t in _TIME_RANK if t in types]
        if len(present) < 2:
            return args
        narrowest = present[0]
        exact = [_narrowed(a, t, narrowest) for a, t in zip(args, types, strict=True)]
        if all(a is not None for a in exact):
            return [a for a in exact if a is not None]
        widest = present[-1]
        return [Cast(a, widest) if t != widest else a for a, t in zip(args, types, strict=True)]


_TIME_RANK = ("date", "timestamp", "timestamptz")


def _window_function_name(node: exp.Expression) -> str | None:
    """The name of a window-only function (row_number, lag, …) ``node`` calls, if it does."""
    if isinstance(node, exp.Anonymous):
        name = str(node.name).lower()
    elif isinstance(node, exp.Func):
        name = node.sql_name().lower()
    else:
        return None
    return name if name in mir.WINDOW_FUNCTIONS else None


def _narrowed(arg: Scalar, type_: str, target: str) -> Scalar | None:
    """``arg`` as a ``target`` value when that is exact: the column itself, or a constant."""
    if type_ == target:
        return arg
    if not isinstance(arg, Literal) or not isinstance(arg.value, datetime.datetime):
        return None
    value = arg.value
    if type_ == "timestamptz":
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    if target == "timestamp":
        return Literal(value, "timestamp")
    if target == "date" and value.time() == datetime.time():
        return Literal(value.date(), "date")
    return None


def _typed_like(arg: Scalar, type_: str, context: str) -> Scalar:
    if not isinstance(arg, Literal):
        return arg
    if arg.value is None:  # an untyped NULL; CAST(NULL AS int8) keeps its type
        if type_ != "unknown":
            return arg
        parameters.typed(arg, context)  # an untyped $n takes the type a NULL would
        return Literal(None, context)
    if type_ != "text" or not isinstance(arg.value, str):
        return arg
    try:
        return Literal(fold_cast(arg.value, "text", context), context)
    except ValueError:
        return arg


# Result types a constant call folds to (their values are exact Python values).
_FOLDABLE = frozenset(
    {"bool", "int2", "int4", "int8", "float8", "text", "date", "timestamp", "interval"}
)


# Calls folded so far, by their repr: it tells 1 from 1.0 and True, and -0.0 from
# 0.0, where equality does not. A statement sent again folds its constants without
# running the engine (about 0.5 ms each). Folding is deterministic: only evaluable
# functions fold, and their value depends on their arguments alone.
_FOLDED: dict[str, Literal | None] = {}
FOLDED_MAX = 4096


def _fold_constant(call: Call) -> Literal | None:
    """A call of constants as the constant it is, as PostgreSQL evaluates it when planning;
    None when it fails (it then fails where it is evaluated) or its type is not foldable."""
    if not all(isinstance(a, Literal) for a in call.args):
        return None
    key = repr(call)
    try:
        return _FOLDED[key]
    except KeyError:
        pass
    folded = _fold_literals(call)
    if len(_FOLDED) >= FOLDED_MAX:
        _FOLDED.clear()
    _FOLDED[key] = folded
    return folded


def _fold_literals(call: Call) -> Literal | None:
    function = functions.lookup(call.func)
    if function is None or not function.evaluable:
        return None
    type_ = scalar_type(call, ())
    container = sqltypes.element_type(type_) in _FOLDABLE
    if type_ not in _FOLDABLE and not container:
        return None
    try:
        value = evaluate_closed(call)
    except LoupeError:
        return None
    return Literal(tuple(value) if isinstance(value, list) else value, type_)


def _is_null(scalar: Scalar) -> bool:
    return isinstance(scalar, Literal) and scalar.value is None


def _safe(args: Sequence[Scalar]) -> bool:
    """Whether no argument is a constant expression that fails (PostgreSQL folds constant
    arguments first, so ``f(NULL, 9223372036854775807 * 2)`` fails rather than being NULL)."""
    for arg in args:
        if isinstance(arg, Literal) or columns_of(arg):
            continue
        try:
            evaluate_closed(arg)
        except LoupeError:
            return False
    return True


NUMERIC_ONLY_TWO_ARGUMENTS = frozenset({"log", "round", "trunc"})


# Types compared only with their own type (PostgreSQL has no cross-type operators for them).
_SELF_COMPARED = frozenset({"uuid", "jsonb"})
NUMERIC_TYPES = frozenset(sqltypes.NUMERIC_RANK)


def _check_aggregate_argument(func: str, type_: str) -> None:
    """min/max of types PostgreSQL has no ordering aggregate for (42883), or Loupe has none
    (arrays and lists: 0A000)."""
    if func not in ("min", "max"):
        return
    if type_ in _SELF_COMPARED:
        raise LoupeError(
            UNDEFINED_FUNCTION, f"function {func}({sqltypes.display_name(type_)}) does not exist"
        )
    if sqltypes.element_type(type_) is not None:
        raise unsupported(f"{func}({sqltypes.display_name(type_)})")


def _check_comparable(types: Sequence[str], name: str) -> None:
    known = {t for t in types if t != "unknown"}
    if "jsonb" in known and name not in ("eq", "neq"):
        # jsonb's order (objects after arrays after scalars, numbers by value…) is not its text's.
        raise unsupported("ordering comparisons of jsonb values")
    if len(known) > 1 and known & _SELF_COMPARED:
        symbol = {"eq": "=", "neq": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}.get(name)
        if symbol is None:
            return
        names = f" {symbol} ".join(sqltypes.display_name(t) for t in types)
        raise LoupeError(UNDEFINED_FUNCTION, f"operator does not exist: {names}")


def _check_text_operand(types: Sequence[str]) -> None:
    """``||`` is ``text || anynonarray`` (either way round): one side must be text (or untyped)."""
    if any(t in ("text", "unknown", "jsonb") for t in types):
        return
    names = " || ".join(sqltypes.display_name(t) for t in types)
    raise LoupeError(UNDEFINED_FUNCTION, f"operator does not exist: {names}")


_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "neg": "-"}
# Types without arithmetic operators (Materialize's mz_timestamp has no operations at all).
_NO_ARITHMETIC = frozenset({"uuid", "mz_timestamp"})


def _check_arithmetic_operands(name: str, types: Sequence[str]) -> None:
    if not any(t in _NO_ARITHMETIC for t in types):
        return
    names = [sqltypes.display_name(t) for t in types]
    shown = (
        f"{_OPERATORS[name]} {names[0]}" if len(names) == 1 else f" {_OPERATORS[name]} ".join(names)
    )
    raise LoupeError(UNDEFINED_FUNCTION, f"operator does not exist: {shown}")


def _is_constant(node: exp.Expression) -> bool:
    """A number literal, perhaps negated or in parentheses: PostgreSQL folds its sign."""
    while isinstance(node, exp.Paren | exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal) and not node.is_string


def _present(node: exp.Expression, keys: Sequence[str]) -> list[exp.Expression]:
    """The node's arguments under ``keys``, in order, lists flattened, absent ones skipped."""
    args: list[exp.Expression] = []
    for key in keys:
        value = node.args.get(key)
        if isinstance(value, list):
            args.extend(value)
        elif value is not None:
            args.append(value)
    return args


def _unit_name(unit: exp.Expression) -> str:
    if isinstance(unit, exp.Literal | exp.Var):
        return str(unit.name).lower()
    return unit.key.lower()


def _null(type_: str) -> Literal:
    return Literal(None, type_)


def literal(node: exp.Expression) -> Literal:
    """A SQL literal: integers as int4 (int8, numeric when larger), decimals as numeric."""
    if isinstance(node, exp.Null):
        return Literal(None, "unknown")
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this), "bool")
    assert isinstance(node, exp.Literal)
    if node.is_string:
        return Literal(node.this, "text")
    text = str(node.this)
    if text.isdigit():
        value = int(text)
        if value < 2**31:
            return Literal(value, "int4")
        if value < 2**63:
            return Literal(value, "int8")
    return Literal(Decimal(text), "numeric")


def _numeric_modifiers(to: exp.DataType) -> tuple[int, int] | None:
    """(precision, scale) of ``numeric(p[, s])``; None for an unconstrained numeric."""
    params = [int(p.name) for p in to.expressions if p.name.isdigit()]
    if not params:
        return None
    return params[0], params[1] if len(params) > 1 else 0


def numeric_with_modifiers(value: Decimal, precision: int, scale: int) -> Decimal:
    """``value`` as a ``numeric(precision, scale)``: rounded; 22003 when it does not fit."""
    rounded = value.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    if rounded and rounded.adjusted() >= precision - scale:
        raise LoupeError(
            "22003",
            "numeric field overflow",
            detail=f"A field with precision {precision}, scale {scale} must round to an"
            f" absolute value less than 10^{precision - scale}.",
        )
    return rounded


def cast_type(to: exp.DataType) -> str:
    """The PostgreSQL type name a cast targets; 0A000 for types Loupe does not have."""
    if to.this in (exp.DataType.Type.ARRAY, exp.DataType.Type.LIST) and to.expressions:
        element = cast_type(to.expressions[0])
        try:
            if to.this == exp.DataType.Type.ARRAY:
                return sqltypes.array_of(element)
            return sqltypes.list_of(element)
        except sqltypes.UnknownType:
            raise unsupported(f"type {to.sql(dialect='postgres').lower()}") from None
    if to.this == exp.DataType.Type.USERDEFINED:
        entry = sqltypes.lookup(to.sql(dialect="postgres"))
    else:
        entry = sqltypes.from_sqlglot(to.this.name)
    if entry is not None and entry.name != "unknown":
        return entry.planned
    raise unsupported(f"type {to.sql(dialect='postgres').lower()}")


def describe(node: exp.Expression) -> str:
    """How an error message names a construct."""
    names = {
        exp.Subquery: "subqueries in expressions",
        exp.In: "IN",
        exp.Exists: "EXISTS",
        exp.Window: "window functions",
    }
    return names.get(
        type(node), node.sql_name().upper() if isinstance(node, exp.Func) else node.key.upper()
    )
