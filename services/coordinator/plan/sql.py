"""Lower a parsed SELECT (sqlglot, postgres dialect) to MIR.

Supported: FROM with tables, subqueries, inner and comma joins; WHERE; the
SELECT list with expressions, aliases and ``*``; GROUP BY and HAVING with
count, sum, min, max, avg and count(DISTINCT); DISTINCT; ORDER BY with LIMIT
or OFFSET (a TopK); UNION [ALL], EXCEPT [ALL], INTERSECT [ALL]. Anything else
is a 0A000 error naming the construct.

An ORDER BY without LIMIT or OFFSET orders only the result sent to the
client, not a collection, so it is left to the caller (a finishing step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import mir
from loupe.coordinator.plan.scalar import Call, Case, Cast, Column, Literal, Scalar

# resolve(name) -> (qualified_name, [(column, pg_type)]); raises or returns None if unknown.
Resolver = Callable[[str], "tuple[str, Sequence[tuple[str, str]]] | None"]

GROUPING_ERROR = SqlState.GROUPING_ERROR
AMBIGUOUS_COLUMN = SqlState.AMBIGUOUS_COLUMN

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
_AGGREGATES: dict[type, str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
}
_TYPE_NAMES = {
    "int": "int4",
    "integer": "int4",
    "bigint": "int8",
    "smallint": "int2",
    "decimal": "numeric",
    "double precision": "float8",
    "real": "float4",
    "varchar": "text",
    "boolean": "bool",
    "timestamp": "timestamp",
}


def plan_query(query: exp.Expression, resolve: Resolver) -> mir.Relation:
    """The MIR of a SELECT or set operation; raises ``LoupeError`` on unknown names or unsupported SQL."""
    return _Planner(resolve).query(query)


def unsupported(what: str) -> LoupeError:
    """The 0A000 error for a construct the planner does not support."""
    return LoupeError(SqlState.FEATURE_NOT_SUPPORTED, f"{what} not yet supported")


@dataclass(frozen=True)
class _ScopeColumn:
    table: str | None
    name: str


@dataclass(frozen=True)
class Scope:
    """The columns visible to expressions: position in the relation, table alias and name."""

    columns: tuple[_ScopeColumn, ...]

    @classmethod
    def of(cls, table: str | None, relation: mir.Relation) -> Scope:
        return cls(tuple(_ScopeColumn(table, name) for name, _ in relation.columns))

    def __add__(self, other: Scope) -> Scope:
        return Scope(self.columns + other.columns)

    def lookup(self, table: str | None, name: str) -> int:
        """The position of column ``name`` (of ``table`` if given); 42703 or 42702."""
        hits = [
            i
            for i, c in enumerate(self.columns)
            if c.name == name and (table is None or c.table == table)
        ]
        qualified = f"{table}.{name}" if table else name
        if not hits:
            if table is not None and all(c.table != table for c in self.columns):
                raise LoupeError(
                    SqlState.UNDEFINED_TABLE, f'missing FROM-clause entry for table "{table}"'
                )
            raise LoupeError(SqlState.UNDEFINED_COLUMN, f'column "{qualified}" does not exist')
        if len(hits) > 1:
            raise LoupeError(AMBIGUOUS_COLUMN, f'column reference "{qualified}" is ambiguous')
        return hits[0]

    def of_table(self, table: str) -> list[int]:
        """The positions of all columns of ``table`` (for ``t.*``)."""
        positions = [i for i, c in enumerate(self.columns) if c.table == table]
        if not positions:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE, f'missing FROM-clause entry for table "{table}"'
            )
        return positions


class _Grouping:
    """Lowers expressions above a Reduce: group keys and aggregates become its output columns."""

    def __init__(self, keys: tuple[Scalar, ...], below: _Scalars) -> None:
        self.keys = keys
        self.below = below
        self.aggregates: list[mir.Aggregate] = []

    def aggregate(self, node: exp.AggFunc) -> Column:
        """The output column of the aggregate call ``node``, adding it if new."""
        aggregate = self._lower_aggregate(node)
        if aggregate not in self.aggregates:
            self.aggregates.append(aggregate)
        return Column(len(self.keys) + self.aggregates.index(aggregate))

    def _lower_aggregate(self, node: exp.AggFunc) -> mir.Aggregate:
        func = _AGGREGATES.get(type(node))
        if func is None:
            raise unsupported(f"aggregate function {node.sql_name().lower()}")
        arg = node.this
        if any(isinstance(n, exp.AggFunc) for n in arg.walk()):
            raise LoupeError(GROUPING_ERROR, "aggregate function calls cannot be nested")
        if isinstance(arg, exp.Star):
            return mir.Aggregate("count", None)
        if isinstance(arg, exp.Distinct):
            return mir.Aggregate(func, self.below.lower(arg.expressions[0]), distinct=True)
        return mir.Aggregate(func, self.below.lower(arg))


class _Scalars:
    """Lowers sqlglot expressions to MIR scalars over a scope (above a Reduce if ``grouping``)."""

    def __init__(self, scope: Scope, grouping: _Grouping | None = None) -> None:
        self.scope = scope
        self.grouping = grouping

    def lower(self, node: exp.Expression) -> Scalar:
        if self.grouping is not None:
            grouped = self._grouped(node, self.grouping)
            if grouped is not None:
                return grouped
        elif isinstance(node, exp.AggFunc):
            raise LoupeError(GROUPING_ERROR, "aggregate functions are not allowed here")
        return self._structural(node)

    def _grouped(self, node: exp.Expression, grouping: _Grouping) -> Scalar | None:
        if isinstance(node, exp.AggFunc):
            return grouping.aggregate(node)
        if node.find(exp.AggFunc) is None:
            below = grouping.below.lower(node)
            if below in grouping.keys:
                return Column(grouping.keys.index(below))
            if isinstance(node, exp.Column):
                raise LoupeError(
                    GROUPING_ERROR,
                    f'column "{node.sql(dialect="postgres")}" must appear in the GROUP BY '
                    "clause or be used in an aggregate function",
                )
        return None

    def _structural(self, node: exp.Expression) -> Scalar:
        if isinstance(node, exp.Paren):
            return self.lower(node.this)
        if isinstance(node, exp.Column):
            return Column(self.scope.lookup(node.table or None, node.name))
        if isinstance(node, exp.Literal | exp.Boolean | exp.Null):
            return _literal(node)
        if type(node) in _BINARY:
            return Call(_BINARY[type(node)], (self.lower(node.this), self.lower(node.expression)))
        if isinstance(node, exp.Not):
            return self._not(node.this)
        if isinstance(node, exp.Neg):
            return Call("neg", (self.lower(node.this),))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            func = "is_not_null" if node.args.get("negate") else "is_null"
            return Call(func, (self.lower(node.this),))
        if isinstance(node, exp.Cast):
            return Cast(self.lower(node.this), _type_name(node.to))
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.Coalesce):
            return Call("coalesce", tuple(self.lower(a) for a in [node.this, *node.expressions]))
        if isinstance(node, exp.Anonymous):
            return Call(node.name.lower(), tuple(self.lower(a) for a in node.expressions))
        if isinstance(node, exp.Func) and not isinstance(node, exp.AggFunc):
            return self._function(node)
        raise unsupported(_describe(node))

    def _not(self, operand: exp.Expression) -> Scalar:
        if isinstance(operand, exp.Is) and isinstance(operand.expression, exp.Null):
            return Call("is_not_null", (self.lower(operand.this),))
        return Call("not", (self.lower(operand),))

    def _case(self, node: exp.Case) -> Scalar:
        subject = node.this
        whens = []
        for when in node.args.get("ifs") or []:
            condition = when.this if subject is None else exp.EQ(this=subject, expression=when.this)
            whens.append((self.lower(condition), self.lower(when.args["true"])))
        default = node.args.get("default")
        otherwise = self.lower(default) if default is not None else Literal(None, "unknown")
        return Case(tuple(whens), otherwise)

    def _function(self, node: exp.Func) -> Scalar:
        args: list[exp.Expression] = []
        for key in node.arg_types:
            value = node.args.get(key)
            args.extend(value if isinstance(value, list) else [value] if value is not None else [])
        if any(not isinstance(a, exp.Expression) for a in args):
            raise unsupported(f"function {node.sql_name().lower()}")
        return Call(node.sql_name().lower(), tuple(self.lower(a) for a in args))


def _literal(node: exp.Expression) -> Literal:
    if isinstance(node, exp.Null):
        return Literal(None, "unknown")
    if isinstance(node, exp.Boolean):
        return Literal(bool(node.this), "bool")
    assert isinstance(node, exp.Literal)
    if node.is_string:
        return Literal(node.this, "text")
    text = node.this
    if text.isdigit():
        value = int(text)
        return Literal(value, "int4" if value < 2**31 else "int8")
    return Literal(text, "numeric")


def _type_name(to: exp.DataType) -> str:
    name = to.sql(dialect="postgres").lower().split("(")[0]
    return _TYPE_NAMES.get(name, name)


def _describe(node: exp.Expression) -> str:
    names = {
        exp.Subquery: "subqueries in expressions",
        exp.In: "IN",
        exp.Exists: "EXISTS",
        exp.Window: "window functions",
    }
    return names.get(
        type(node), node.sql_name().upper() if isinstance(node, exp.Func) else node.key.upper()
    )


def _output_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Func):
        return node.sql_name().lower() if not isinstance(node, exp.Anonymous) else node.name.lower()
    return "?column?"


def _unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.Paren | exp.Where | exp.Having):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _constant_int(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.expression if isinstance(node, exp.Limit | exp.Offset) else node
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise unsupported(f"non-constant {what}")


class _Planner:
    """SQL to MIR for one query (recursive for subqueries and set operations)."""

    def __init__(self, resolve: Resolver) -> None:
        self.resolve = resolve

    def query(self, node: exp.Expression) -> mir.Relation:
        if isinstance(node, exp.Subquery):
            return self.query(node.this)
        if node.args.get("with_") or node.args.get("with"):
            raise unsupported("WITH")
        if isinstance(node, exp.SetOperation):
            return self._top_k(node, self._set_operation(node), None)
        if isinstance(node, exp.Select):
            return self._select(node)
        raise unsupported(_describe(node))

    # FROM

    def _from(self, select: exp.Select) -> tuple[mir.Relation, Scope, list[exp.Expression]]:
        """The joined FROM relation, its scope and the ON conditions still to apply."""
        from_ = select.args.get("from_")
        if from_ is None:
            one_row = mir.Constant(((),), ())
            return one_row, Scope(()), []
        relation, scope = self._table(from_.this)
        inputs, conditions = [relation], []
        for join in select.args.get("joins") or []:
            if join.side or join.kind not in ("", "INNER", "CROSS") or join.args.get("using"):
                raise unsupported(" ".join(p for p in (join.side, join.kind, "JOIN") if p))
            joined, joined_scope = self._table(join.this)
            inputs.append(joined)
            scope = scope + joined_scope
            conditions.extend(_conjuncts(join.args.get("on")))
        if len(inputs) == 1:
            return relation, scope, conditions
        return mir.Join(tuple(inputs)), scope, conditions

    def _table(self, node: exp.Expression) -> tuple[mir.Relation, Scope]:
        if isinstance(node, exp.Subquery):
            relation = self.query(node.this)
            return relation, Scope.of(node.alias or None, relation)
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise unsupported(f"{_describe(node)} in FROM")
        name = ".".join(p.name for p in node.parts)
        resolved = self.resolve(name)
        if resolved is None:
            raise LoupeError(SqlState.UNDEFINED_TABLE, f'relation "{name}" does not exist')
        qualified, columns = resolved
        relation = mir.Get(qualified, tuple((c, t) for c, t in columns))
        return relation, Scope.of(node.alias_or_name, relation)

    # SELECT

    def _select(self, select: exp.Select) -> mir.Relation:
        relation, scope, conditions = self._from(select)
        relation = self._where(relation, scope, conditions + _conjuncts(select.args.get("where")))
        scalars = _Scalars(scope)
        items = self._expand_star(select.expressions, scope)
        if (
            select.args.get("group")
            or select.args.get("having")
            or any(not isinstance(i, int) and i.find(exp.AggFunc) for i in items)
        ):
            relation, scalars = self._reduce(select, relation, scalars, items)
        relation = self._project(relation, scalars, items)
        if select.args.get("distinct"):
            if select.args["distinct"].args.get("on"):
                raise unsupported("DISTINCT ON")
            relation = mir.Distinct(relation)
        return self._top_k(select, relation, items)

    def _where(
        self, relation: mir.Relation, scope: Scope, conditions: list[exp.Expression]
    ) -> mir.Relation:
        """Filter by ``conditions``; column equalities across join inputs become equivalences."""
        predicates = [_Scalars(scope).lower(c) for c in conditions]
        if isinstance(relation, mir.Join):
            equivalences = tuple(p.args for p in predicates if _is_equijoin(p, relation))
            predicates = [p for p in predicates if not _is_equijoin(p, relation)]
            relation = mir.Join(relation.inputs, equivalences)
        return mir.Filter(relation, tuple(predicates)) if predicates else relation

    def _expand_star(self, items: list[exp.Expression], scope: Scope) -> list[exp.Expression | int]:
        """The SELECT list with ``*`` and ``t.*`` replaced by column positions."""
        expanded: list[exp.Expression | int] = []
        for item in items:
            if isinstance(item, exp.Star):
                expanded.extend(range(len(scope.columns)))
            elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                expanded.extend(scope.of_table(item.table))
            else:
                expanded.append(item)
        return expanded

    def _reduce(
        self,
        select: exp.Select,
        relation: mir.Relation,
        below: _Scalars,
        items: list[exp.Expression | int],
    ) -> tuple[mir.Relation, _Scalars]:
        """A Reduce for GROUP BY and aggregates, then HAVING; returns the scalars above it."""
        if any(isinstance(i, int) for i in items):
            raise LoupeError(GROUPING_ERROR, "SELECT * is not allowed with GROUP BY")
        group = select.args.get("group")
        key_nodes = [self._group_key(k, items) for k in (group.expressions if group else [])]
        keys = tuple(dict.fromkeys(below.lower(k) for k in key_nodes))
        grouping = _Grouping(keys, below)
        above = _Scalars(Scope(()), grouping)
        for item in items:
            if isinstance(item, exp.Expression):  # collect the aggregates in SELECT-list order
                above.lower(_unalias(item))
        having = [above.lower(c) for c in _conjuncts(select.args.get("having"))]
        names = tuple(f"k{i}" for i in range(len(keys)))
        names += tuple(f"{a.func}{i}" for i, a in enumerate(grouping.aggregates))
        reduced: mir.Relation = mir.Reduce(relation, keys, tuple(grouping.aggregates), names)
        if having:
            reduced = mir.Filter(reduced, tuple(having))
        return reduced, above

    @staticmethod
    def _group_key(key: exp.Expression, items: list[exp.Expression | int]) -> exp.Expression:
        """A GROUP BY key, with positions (``GROUP BY 1``) replaced by the SELECT item."""
        position = key.this if isinstance(key, exp.Literal) and not key.is_string else None
        if position is None:
            return key
        item = items[int(position) - 1] if 0 < int(position) <= len(items) else None
        if not isinstance(item, exp.Expression):
            raise LoupeError(
                SqlState.UNDEFINED_COLUMN, f"GROUP BY position {position} is not in select list"
            )
        return _unalias(item)

    @staticmethod
    def _project(
        relation: mir.Relation, scalars: _Scalars, items: list[exp.Expression | int]
    ) -> mir.Relation:
        """Map the SELECT list's expressions and project onto them, named."""
        arity = relation.arity
        outputs: list[int] = []
        maps: list[Scalar] = []
        for item in items:
            if isinstance(item, int):
                outputs.append(item)
                continue
            scalar = scalars.lower(_unalias(item))
            if isinstance(scalar, Column):
                outputs.append(scalar.index)
            else:
                outputs.append(arity + len(maps))
                maps.append(scalar)
        names = tuple(
            relation.columns[item][0] if isinstance(item, int) else _output_name(item)
            for item in items
        )
        if maps:
            relation = mir.Map(relation, tuple(maps), tuple(f"map{i}" for i in range(len(maps))))
        identity = outputs == list(range(relation.arity))
        if identity and names == tuple(name for name, _ in relation.columns):
            return relation
        return mir.Project(relation, tuple(outputs), names)

    # ORDER BY / LIMIT / OFFSET and set operations

    def _top_k(
        self, node: exp.Expression, relation: mir.Relation, items: list[exp.Expression | int] | None
    ) -> mir.Relation:
        limit = _constant_int(node.args.get("limit"), "LIMIT")
        offset = _constant_int(node.args.get("offset"), "OFFSET") or 0
        if limit is None and not offset:
            return relation
        order = node.args.get("order")
        keys = tuple(
            self._order_key(o, relation, items) for o in (order.expressions if order else [])
        )
        return mir.TopK(relation, keys, limit, offset)

    @staticmethod
    def _order_key(
        ordered: exp.Ordered, relation: mir.Relation, items: list[exp.Expression | int] | None
    ) -> mir.OrderKey:
        """An ORDER BY key, which must name an output column by name, position or expression."""
        key = ordered.this
        desc = bool(ordered.args.get("desc"))
        nulls_last = not ordered.args.get("nulls_first")
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit():
            position = int(key.this) - 1
            if not 0 <= position < relation.arity:
                raise LoupeError(
                    SqlState.UNDEFINED_COLUMN, f"ORDER BY position {key.this} is not in select list"
                )
            return mir.OrderKey(position, desc, nulls_last)
        names = [name for name, _ in relation.columns]
        if isinstance(key, exp.Column) and not key.table and names.count(key.name) == 1:
            return mir.OrderKey(names.index(key.name), desc, nulls_last)
        for i, item in enumerate(items or []):
            if isinstance(item, exp.Expression) and _unalias(item) == key:
                return mir.OrderKey(i, desc, nulls_last)
        raise unsupported("ORDER BY an expression that is not in the select list")

    def _set_operation(self, node: exp.SetOperation) -> mir.Relation:
        left, right = self.query(node.this), self.query(node.expression)
        kind = node.key.upper()
        if left.arity != right.arity:
            raise LoupeError(
                SqlState.SYNTAX_ERROR, f"each {kind} query must have the same number of columns"
            )
        distinct = bool(node.args.get("distinct"))
        if isinstance(node, exp.Union):
            union = mir.Union((left, right))
            return mir.Distinct(union) if distinct else union
        if distinct:
            left, right = mir.Distinct(left), mir.Distinct(right)
        except_ = mir.Threshold(mir.Union((left, mir.Negate(right))))
        if isinstance(node, exp.Except):
            return except_
        # INTERSECT: left minus (left minus right).
        return mir.Threshold(mir.Union((left, mir.Negate(except_))))


def _is_equijoin(predicate: Scalar, join: mir.Join) -> bool:
    """Whether ``predicate`` equates columns of two different join inputs."""
    if not (isinstance(predicate, Call) and predicate.func == "eq"):
        return False
    if not all(isinstance(a, Column) for a in predicate.args):
        return False
    starts = [0]
    for relation in join.inputs:
        starts.append(starts[-1] + relation.arity)

    def owner(index: int) -> int:
        return next(i for i in range(len(join.inputs)) if starts[i] <= index < starts[i + 1])

    left, right = (owner(a.index) for a in predicate.args if isinstance(a, Column))
    return left != right


__all__ = ["Resolver", "Scope", "plan_query", "unsupported"]
