"""Window functions (``f(…) OVER (…)``) in a SELECT list or ORDER BY, lowered to ``mir.Window``.

Windows are computed after FROM, WHERE, GROUP BY and HAVING and before
DISTINCT, ORDER BY and LIMIT, as in PostgreSQL: their partition keys,
order keys and arguments are expressions over the rows a SELECT list sees
(grouped rows in a grouped query, so ``rank() OVER (ORDER BY sum(v))``
ranks groups). Those that are not plain columns are mapped first; calls
with the same PARTITION BY and ORDER BY share one ``mir.Window``, and each
call's value is a column the SELECT list then reads
(``Context.window_columns``).

Errors are PostgreSQL's: window functions outside the SELECT list and
ORDER BY are 42P20, as are nested calls and invalid frames; unknown window
functions 42883; functions that are neither window functions nor
aggregates 42809. RANGE frames with offsets take PostgreSQL's offset types
(numbers of the key's kind; intervals for dates and times).
EXCLUDE is 0A000.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from sqlglot import exp

import loupe.plan.mir as mir
from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan.scalars import AGGREGATES, Scalars, unsupported
from loupe.coordinator.plan.values import fold_cast
from loupe.interval import Interval
from loupe.plan import functions
from loupe.plan.scalar import NUMERIC_RANK, Case, Cast, Column, Literal, Scalar

WINDOWING_ERROR = "42P20"
WRONG_OBJECT_TYPE = "42809"
UNDEFINED_FUNCTION = "42883"
NULL_VALUE_NOT_ALLOWED = "22004"
INVALID_PRECEDING_OR_FOLLOWING_SIZE = "22013"
DATATYPE_MISMATCH = "42804"
INVALID_TEXT_REPRESENTATION = "22P02"

# sqlglot's window function nodes, by PostgreSQL name.
_NAMED: dict[type[exp.Expression], str] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.PercentRank: "percent_rank",
    exp.CumeDist: "cume_dist",
    exp.Ntile: "ntile",
    exp.Lag: "lag",
    exp.Lead: "lead",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.NthValue: "nth_value",
}
_INTEGERS = ("int2", "int4", "unknown")
# Where a window function may not appear: the clause's argument and its name in messages.
_MISPLACED = (("where", "WHERE"), ("group", "GROUP BY"), ("having", "HAVING"))


@dataclass(frozen=True)
class _Spec:
    """A window's PARTITION BY, ORDER BY and frame, as written (a named window merged in)."""

    partition: tuple[exp.Expression, ...]
    order: tuple[exp.Ordered, ...]
    spec: exp.WindowSpec | None


def refuse_misplaced(select: exp.Select) -> None:
    """42P20 for a window function in WHERE, GROUP BY, HAVING or a JOIN condition."""
    for key, clause in _MISPLACED:
        node = select.args.get(key)
        if node is not None and any(True for _ in calls_in(node)):
            raise LoupeError(WINDOWING_ERROR, f"window functions are not allowed in {clause}")
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is not None and any(True for _ in calls_in(on)):
            raise LoupeError(WINDOWING_ERROR, "window functions are not allowed in JOIN conditions")


def calls_in(node: exp.Expression) -> Iterator[exp.Window]:
    """The window function calls of this query level in ``node`` (outermost ones)."""
    if isinstance(node, exp.Window):
        yield node
        return
    for child in node.iter_expressions():
        if not isinstance(child, exp.Subquery | exp.Select | exp.SetOperation):
            yield from calls_in(child)


def window_operands(window: exp.Window) -> list[exp.Expression]:
    """What a window call reads at its query level: the function's arguments (not the
    function: ``sum(x) OVER ()`` is no aggregate of the query), PARTITION BY and ORDER BY,
    those of the named window it refers to included."""
    function = window.this
    operands: list[exp.Expression] = []
    if isinstance(function, exp.Filter):
        operands.append(function.expression)
        function = function.this
    operands.extend(function.iter_expressions())
    spec = _spec(window, _named_windows(window.parent_select))
    operands.extend(spec.partition)
    operands.extend(o.this for o in spec.order)
    return operands


def plan_windows(
    relation: mir.Relation, scalars: Scalars, nodes: Sequence[exp.Expression]
) -> tuple[mir.Relation, Scalars]:
    """``relation`` with a column per window call in ``nodes`` (the SELECT list and ORDER BY
    expressions), and the scalars that read them."""
    found = [c for node in nodes for c in calls_in(node)]
    # Calls written alike (in the SELECT list and again in ORDER BY) are computed once.
    calls = list(dict.fromkeys(found))
    if not calls:
        return relation, scalars
    named = _named_windows(calls[0].parent_select)
    mapped: list[Scalar] = []
    arity = relation.arity

    def column(scalar: Scalar) -> int:
        if isinstance(scalar, Column):
            return scalar.index
        if scalar not in mapped:
            mapped.append(scalar)
        return arity + mapped.index(scalar)

    windows: dict[
        tuple[tuple[int, ...], tuple[mir.OrderKey, ...]], list[tuple[int, mir.WindowFunction]]
    ] = {}
    for position, call in enumerate(calls):
        spec = _spec(call, named)
        partition = tuple(dict.fromkeys(column(scalars.lower(e)) for e in spec.partition))
        order = tuple(
            mir.OrderKey(
                column(scalars.lower(o.this)),
                bool(o.args.get("desc")),
                nulls_last=not o.args.get("nulls_first"),
            )
            for o in spec.order
        )
        func, args = _function(call, scalars)
        frame = _frame(spec, scalars)
        function = mir.WindowFunction(func, tuple(column(a) for a in args), frame)
        windows.setdefault((partition, order), []).append((position, function))
    if mapped:
        relation = mir.Map(relation, tuple(mapped), tuple(f"w{i}" for i in range(len(mapped))))
    added = list(relation.types[arity:])
    columns: dict[int, int] = {}
    for (partition, order), members in windows.items():
        start = relation.arity
        relation = mir.Window(
            relation,
            partition,
            order,
            tuple(f for _, f in members),
            tuple(f"{f.func}{i}" for i, (_, f) in enumerate(members)),
        )
        added += relation.types[start:]
        for offset, (position, _) in enumerate(members):
            columns[position] = start + offset
    for call in found:
        scalars.context.window_columns[id(call)] = columns[calls.index(call)]
    return relation, _extended(scalars, added)


def _extended(scalars: Scalars, types: Sequence[str]) -> Scalars:
    """``scalars`` over the same columns and ``types`` more, nameless ones."""
    if scalars.grouping is not None:
        scalars.grouping.hidden = (*scalars.grouping.hidden, *types)
        return scalars
    scope = scalars.scope
    for type_ in types:
        scope = scope.with_hidden(type_)
    return Scalars(scalars.context, scope)


# Window specifications.


def _named_windows(select: exp.Expression | None) -> dict[str, exp.Window]:
    """The WINDOW clause of ``select``, by name (42P20 when a name is defined twice)."""
    named: dict[str, exp.Window] = {}
    for window in (select.args.get("windows") if select is not None else None) or []:
        name = window.this.name
        if name in named:
            raise LoupeError(WINDOWING_ERROR, f'window "{name}" is already defined')
        named[name] = window
    return named


def _spec(call: exp.Window, named: dict[str, exp.Window]) -> _Spec:
    """The call's window, with the named window it refers to (``OVER w``, ``OVER (w …)``)."""
    partition = tuple(call.args.get("partition_by") or ())
    order_node = call.args.get("order")
    order = tuple(order_node.expressions) if order_node else ()
    spec = call.args.get("spec")
    alias = call.args.get("alias")
    if alias is None:
        return _Spec(partition, order, spec)
    name = alias.name
    base = named.get(name)
    if base is None:
        raise LoupeError(SqlState.UNDEFINED_OBJECT, f'window "{name}" does not exist')
    base_order = base.args.get("order")
    if partition:
        raise LoupeError(WINDOWING_ERROR, f'cannot override PARTITION BY clause of window "{name}"')
    if order and base_order:
        raise LoupeError(WINDOWING_ERROR, f'cannot override ORDER BY clause of window "{name}"')
    if base.args.get("spec") is not None and (order or spec is not None):
        raise LoupeError(
            WINDOWING_ERROR, f'cannot copy window "{name}" because it has a frame clause'
        )
    return _Spec(
        tuple(base.args.get("partition_by") or ()),
        order or (tuple(base_order.expressions) if base_order else ()),
        spec if spec is not None else base.args.get("spec"),
    )


_BOUNDS = {"PRECEDING": "offset_preceding", "FOLLOWING": "offset_following"}


def _frame(spec: _Spec, scalars: Scalars) -> mir.WindowFrame:
    """The call's frame: PostgreSQL's default, or the ROWS/RANGE clause checked as PostgreSQL does."""
    node = spec.spec
    if node is None:
        return mir.WindowFrame()
    exclude = node.args.get("exclude")
    if exclude is not None and str(exclude.name).upper() != "NO OTHERS":
        raise unsupported("EXCLUDE in window frames")
    mode = str(node.args.get("kind") or "RANGE").lower()
    start, start_offset = _bound(
        node.args.get("start"), node.args.get("start_side"), "starting", scalars
    )
    end_node = node.args.get("end")
    end, end_offset = (
        ("current_row", None)
        if end_node is None
        else _bound(end_node, node.args.get("end_side"), "ending", scalars)
    )
    if start == "unbounded_following":
        raise LoupeError(WINDOWING_ERROR, "frame start cannot be UNBOUNDED FOLLOWING")
    if end == "unbounded_preceding":
        raise LoupeError(WINDOWING_ERROR, "frame end cannot be UNBOUNDED PRECEDING")
    if start == "current_row" and end == "offset_preceding":
        raise LoupeError(
            WINDOWING_ERROR, "frame starting from current row cannot have preceding rows"
        )
    if start == "offset_following" and end in ("offset_preceding", "current_row"):
        raise LoupeError(
            WINDOWING_ERROR, "frame starting from following row cannot have preceding rows"
        )
    offsets = start_offset is not None or end_offset is not None
    if mode == "range" and offsets:
        if len(spec.order) != 1:
            raise LoupeError(
                WINDOWING_ERROR,
                "RANGE with offset PRECEDING/FOLLOWING requires exactly one ORDER BY column",
            )
        key_type = scalars.type_of(scalars.lower(spec.order[0].this))
        return mir.WindowFrame(
            mode,
            mir.FrameBound(start, distance=_distance(start_offset, key_type)),
            mir.FrameBound(end, distance=_distance(end_offset, key_type)),
        )
    if mode == "groups":
        if not spec.order:
            raise LoupeError(WINDOWING_ERROR, "GROUPS mode requires an ORDER BY clause")
        if not offsets:
            mode = "range"  # without offsets, a group of peers is what RANGE counts
    return mir.WindowFrame(
        mode, _rows_bound(start, start_offset, "starting"), _rows_bound(end, end_offset, "ending")
    )


def _bound(
    node: exp.Expression | str | None, side: object, which: str, scalars: Scalars
) -> tuple[str, Literal | None]:
    """A frame bound's kind, and its offset when it has one (a constant, not NULL)."""
    side_name = str(side or "").upper()
    if isinstance(node, str) or node is None:
        text = str(node or "").upper()
        if text == "UNBOUNDED":
            return f"unbounded_{side_name.lower()}", None
        return "current_row", None
    offset = scalars.lower(node)
    if not isinstance(offset, Literal):
        raise unsupported("window frame offsets that are not constants")
    if offset.value is None:
        raise LoupeError(NULL_VALUE_NOT_ALLOWED, f"frame {which} offset must not be null")
    return _BOUNDS[side_name], offset


def _rows_bound(kind: str, offset: Literal | None, which: str) -> mir.FrameBound:
    if offset is None:
        return mir.FrameBound(kind)
    rows = _offset_rows(offset)
    if rows < 0:
        raise LoupeError(
            INVALID_PRECEDING_OR_FOLLOWING_SIZE, f"frame {which} offset must not be negative"
        )
    return mir.FrameBound(kind, rows)


# The offset types PostgreSQL's in_range functions take, per ORDER BY key type, and the
# type the offset is taken in.
_RANGE_OFFSETS = {
    **dict.fromkeys(("int2", "int4", "int8"), (("int2", "int4", "int8"), "int8")),
    **dict.fromkeys(
        ("float4", "float8"), (("int2", "int4", "int8", "numeric", "float4", "float8"), "float8")
    ),
    "numeric": (("int2", "int4", "int8", "numeric"), "numeric"),
    **dict.fromkeys(("date", "timestamp", "timestamptz"), (("interval",), "interval")),
}


def _distance(offset: Literal | None, key_type: str) -> Literal | None:
    """A RANGE offset in the type PostgreSQL compares it in (0A000 where it has none)."""
    if offset is None:
        return None
    key_name = sqltypes.display_name(key_type)
    if key_type not in _RANGE_OFFSETS:
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"RANGE with offset PRECEDING/FOLLOWING is not supported for column type {key_name}",
        )
    accepted, target = _RANGE_OFFSETS[key_type]
    value = offset.value
    if offset.type == "text":  # a quoted constant takes the type it is compared in
        try:
            value = fold_cast(value, "text", target)
        except ValueError:
            name = sqltypes.display_name(target)
            raise LoupeError(
                INVALID_TEXT_REPRESENTATION, f'invalid input syntax for type {name}: "{value}"'
            ) from None
    elif offset.type in accepted:
        value = fold_cast(value, offset.type, target)
    else:
        offset_name = sqltypes.display_name(offset.type)
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            "RANGE with offset PRECEDING/FOLLOWING is not supported for column type "
            f"{key_name} and offset type {offset_name}",
            hint="Cast the offset value to an appropriate type.",
        )
    negative = value.span() < 0 if isinstance(value, Interval) else value < 0
    if negative:
        raise LoupeError(
            INVALID_PRECEDING_OR_FOLLOWING_SIZE,
            "invalid preceding or following size in window function",
        )
    return Literal(value, target)


def _offset_rows(offset: Literal) -> int:
    """A ROWS offset as bigint, cast as PostgreSQL casts it (numeric rounds half away from
    zero, float half to even, text is parsed); other types are 42804."""
    value = offset.value
    if offset.type in ("int2", "int4", "int8") and isinstance(value, int):
        return value
    if offset.type == "numeric" and isinstance(value, Decimal | int | float):
        return int(Decimal(value).to_integral_value(rounding=ROUND_HALF_UP))
    if offset.type in ("float4", "float8") and isinstance(value, float | int):
        return round(value)
    if offset.type in ("text", "unknown") and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise LoupeError(
                INVALID_TEXT_REPRESENTATION, f'invalid input syntax for type bigint: "{value}"'
            ) from None
    name = sqltypes.display_name(offset.type)
    raise LoupeError(DATATYPE_MISMATCH, f"argument of ROWS must be type bigint, not type {name}")


# The function.


def _function(call: exp.Window, scalars: Scalars) -> tuple[str, list[Scalar]]:
    """The window function's name and arguments (over the SELECT list's rows), typed."""
    node = call.this
    condition = None
    if isinstance(node, exp.Filter):
        condition = scalars.lower(node.expression.this)
        node = node.this
    for operand in window_operands(call):
        if any(True for _ in calls_in(operand)):
            raise LoupeError(WINDOWING_ERROR, "window function calls cannot be nested")
    if type(node) in AGGREGATES:
        return _aggregate(node, AGGREGATES[type(node)], condition, scalars)
    name = _NAMED.get(type(node))
    arg_nodes = _arguments(node)
    if name is None and isinstance(node, exp.Anonymous):
        name = str(node.name).lower()
    args = [scalars.lower(a) for a in arg_nodes]
    if name not in mir.WINDOW_ARGUMENTS:
        _refuse_unknown(node, name, args, scalars)
    assert name is not None
    if condition is not None:
        raise LoupeError(
            WRONG_OBJECT_TYPE, "FILTER is not implemented for non-aggregate window functions"
        )
    types = [scalars.type_of(a) for a in args]
    if len(args) not in mir.WINDOW_ARGUMENTS[name] or not _integers(name, types):
        raise _undefined(name, types)
    if name in mir.VALUE_FUNCTIONS and types[0] == "unknown":
        raise LoupeError(
            DATATYPE_MISMATCH, "could not determine polymorphic type because input has type unknown"
        )
    if name in ("lag", "lead") and len(args) == 3:
        args = _common_type(name, args, scalars)
    return name, _typed_arguments(name, args, scalars)


def _typed_arguments(name: str, args: list[Scalar], scalars: Scalars) -> list[Scalar]:
    """Integer arguments (ntile's, an offset, nth_value's n) as int4; NULL values as text."""
    typed = []
    for position, arg in enumerate(args):
        type_ = scalars.type_of(arg)
        integer = (name == "ntile" and position == 0) or (name != "ntile" and position == 1)
        if integer and type_ != "int4":
            arg = Literal(arg.value, "int4") if isinstance(arg, Literal) else Cast(arg, "int4")
        elif type_ == "unknown":
            arg = Literal(None, "text") if isinstance(arg, Literal) else arg
        typed.append(arg)
    return typed


def _integers(name: str, types: list[str]) -> bool:
    """Whether the integer arguments are integers (int8 does not cast to integer implicitly)."""
    if name == "ntile":
        return types[0] in _INTEGERS
    if name in ("lag", "lead", "nth_value") and len(types) > 1:
        return types[1] in _INTEGERS
    return True


def _common_type(name: str, args: list[Scalar], scalars: Scalars) -> list[Scalar]:
    """lag/lead's value and default in one type: numbers widened, constants converted."""
    value, offset, default = args
    value_type, default_type = scalars.type_of(value), scalars.type_of(default)
    if value_type == default_type or default_type == "unknown":
        return [value, offset, Literal(None, value_type) if default_type == "unknown" else default]
    if value_type in NUMERIC_RANK and default_type in NUMERIC_RANK:
        wide = sqltypes.common_numeric([value_type, default_type])
        return [_cast(value, value_type, wide), offset, _cast(default, default_type, wide)]
    if isinstance(default, Literal) and default_type == "text":
        try:
            converted = fold_cast(default.value, "text", value_type)
        except ValueError as error:
            name_ = sqltypes.display_name(value_type)
            raise LoupeError(
                INVALID_TEXT_REPRESENTATION,
                f'invalid input syntax for type {name_}: "{default.value}"',
            ) from error
        return [value, offset, Literal(converted, value_type)]
    raise _undefined(name, [value_type, scalars.type_of(offset), default_type])


def _cast(scalar: Scalar, type_: str, to: str) -> Scalar:
    if type_ == to:
        return scalar
    if isinstance(scalar, Literal):
        return Literal(fold_cast(scalar.value, type_, to), to)
    return Cast(scalar, to)


def _aggregate(
    node: exp.Expression, func: str, condition: Scalar | None, scalars: Scalars
) -> tuple[str, list[Scalar]]:
    """An aggregate over the window's frame: its one argument (none for ``count(*)``)."""
    arg = node.this
    if isinstance(arg, exp.Distinct):
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED, "DISTINCT is not implemented for window functions"
        )
    if isinstance(arg, exp.Star):
        if condition is None:
            return "count", []
        return "count", [Case(((condition, Literal(True, "bool")),), Literal(None, "bool"))]
    value = scalars.lower(arg)
    if condition is not None:
        value = Case(((condition, value),), Literal(None, scalars.type_of(value)))
    return func, [value]


def _arguments(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    args: list[exp.Expression] = []
    for key in type(node).arg_types:
        value = node.args.get(key)
        if isinstance(value, list):
            args.extend(value)
        elif isinstance(value, exp.Expression):
            args.append(value)
    return args


def _refuse_unknown(
    node: exp.Expression, name: str | None, args: list[Scalar], scalars: Scalars
) -> None:
    """42809 for a known function that is no window function, 42883 for an unknown one."""
    if name is None:
        name = node.sql_name().lower() if isinstance(node, exp.Func) else node.key
    if functions.lookup(name) is not None:
        raise LoupeError(
            WRONG_OBJECT_TYPE,
            f"OVER specified, but {name} is not a window function nor an aggregate function",
        )
    raise _undefined(name, [scalars.type_of(a) for a in args])


def _undefined(name: str, types: Sequence[str]) -> LoupeError:
    names = ", ".join(sqltypes.display_name(t) for t in types)
    return LoupeError(UNDEFINED_FUNCTION, f"function {name}({names}) does not exist")
