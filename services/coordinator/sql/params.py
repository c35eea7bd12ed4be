"""Positional parameters (``$1``, ``$2``, …): found in a statement and bound as typed literals.

A statement run with parameters (``ExecuteRequest.params``, or ``EXECUTE
name (args)`` of a prepared statement) has each ``$n`` replaced by a literal
of its value before it is resolved and planned, so a bound statement plans
and runs as if the value had been written inline:

=============  ================================================
value type     literal
=============  ================================================
(NULL)         ``NULL`` (``CAST(NULL AS t)`` when typed)
``bool``       ``TRUE`` / ``FALSE``
``int4``       the number, as written inline
``int8`` …     ``CAST(n AS bigint)`` (numbers of other types too)
``float8``     ``CAST('1.5' AS double precision)``
``numeric``    ``CAST('12.50' AS numeric)``
``text``       a string literal (typed like one written inline)
``date``, …    ``CAST('2024-01-02' AS date)``, also time, timestamptz, timestamp
``interval``   ``INTERVAL '1 mon 2 days 03:00:00'`` (its text)
``jsonb``      ``CAST('{…}' AS jsonb)``
``uuid``       ``CAST('…' AS uuid)``
=============  ================================================

A list is an array of its elements' type: ``CAST('{1,2}' AS integer[])``; a list whose
parameter has an array type (``_int2``, as a PostgreSQL-wire client declares it) is an
array of that type, and a NULL of an array type ``CAST(NULL AS smallint[])``.
``bytea`` values are refused (0A000): Loupe has no literal for them.

Where a statement's parameters live: the query of a SELECT (and its ``AS
OF``), the rows and query of INSERT, the assignments and WHERE of UPDATE,
the WHERE of DELETE, the query of EXPLAIN and SUBSCRIBE, and the arguments
of EXECUTE. A ``$n`` anywhere else (a view's definition) has no value, as
in PostgreSQL, whose utility statements take no parameters; the statement
inside ``PREPARE`` keeps its own until it is executed.

Errors are PostgreSQL's: a ``$n`` without a value is 42P02 ``there is no
parameter $n`` at its position; more values than the statement uses is
08P01 ``bind message supplies 3 parameters, but prepared statement ""
requires 2``.

The statement log keeps parameters as text (``text_form``) in a PostgreSQL
array literal (``array_text``): ``{1,NULL,"a b"}``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.common.jsonb import text as jsonb_text
from loupe.coordinator.sql.statements import (
    CreateView,
    Delete,
    Execute,
    Explain,
    Insert,
    Query,
    Statement,
    Subscribe,
    Update,
)
from loupe.interval import Interval, format_interval

UNDEFINED_PARAMETER = "42P02"
PROTOCOL_VIOLATION = "08P01"

# Types a parameter's literal is cast to (int4 is a bare number; interval, bool and text
# have literals of their own; bytea and lists have no literal Loupe reads).
_UNCAST = frozenset({"bytea", "list", "unknown", "varchar"})
_FIRST_MATERIALIZE_OID = 16384


def _cast_type(kind: str) -> exp.DataType | None:
    entry = sqltypes.TYPES.get(kind)
    if entry is None or kind in _UNCAST:
        return None
    # Materialize's own types (uint8) are user-defined types to sqlglot.
    user_defined = entry.oid >= _FIRST_MATERIALIZE_OID
    return exp.DataType.build(entry.display, dialect="postgres", udt=user_defined)


@dataclass(frozen=True)
class Parameter:
    """One parameter's value and its PostgreSQL type (``unknown`` for an untyped NULL)."""

    value: Any
    type: str = "unknown"


def inline_type(value: Any) -> str:
    """The type a literal of ``value`` has when written inline (how a client's value is typed)."""
    return sqltypes.type_of_value(value)


# -- finding parameters -------------------------------------------------------------------


def parameter_number(node: object) -> int | None:
    """``n`` of a ``$n`` node; None for any other node."""
    if not isinstance(node, exp.Parameter):
        return None
    inner = node.this
    if isinstance(inner, exp.Literal) and not inner.is_string and str(inner.this).isdigit():
        return int(inner.this)
    return None


def _position(node: exp.Expression) -> int:
    """1-based position of a ``$n`` in the text its statement was parsed from (0: unknown)."""
    start = node.this.meta.get("start") if isinstance(node.this, exp.Expression) else None
    # The number's token starts one character after the ``$``.
    return int(start) if start is not None else 0


def _trees(statement: Statement) -> Iterator[exp.Expression]:
    """The expression trees of ``statement`` that may hold bindable parameters."""
    match statement:
        case Query():
            yield statement.expression
            if statement.as_of is not None:
                yield statement.as_of
        case Insert():
            for row in statement.rows:
                yield from row
            if statement.query is not None:
                yield from _trees(statement.query)
        case Update():
            for _, _, value in statement.assignments:
                yield value
            if statement.where is not None:
                yield statement.where
        case Delete():
            if statement.where is not None:
                yield statement.where
        case Explain():
            if statement.query is not None:
                yield from _trees(statement.query)
        case Subscribe():
            yield from _trees(statement.query)
            if statement.as_of is not None:
                yield statement.as_of
        case Execute():
            yield from statement.args


def _unbindable_trees(statement: Statement) -> Iterator[exp.Expression]:
    """Trees whose ``$n`` never have a value (a view's definition is stored, not run)."""
    if isinstance(statement, CreateView):
        yield from _trees(statement.query)


def _parameters(trees: Iterator[exp.Expression]) -> Iterator[tuple[int, exp.Parameter]]:
    for tree in trees:
        for node in tree.walk():
            number = parameter_number(node)
            if number is not None:
                assert isinstance(node, exp.Parameter)
                yield number, node


def highest_parameter(statement: Statement) -> int:
    """The highest ``n`` of the ``$n`` the statement uses (0: none): how many it needs."""
    return max((number for number, _ in _parameters(_trees(statement))), default=0)


def no_such_parameter(number: int, position: int = 0) -> LoupeError:
    return LoupeError(UNDEFINED_PARAMETER, f"there is no parameter ${number}", position=position)


# -- binding ------------------------------------------------------------------------------


def bind(
    statement: Statement,
    params: Sequence[Parameter],
    *,
    check_count: bool = True,
    statement_name: str = "",
) -> Statement:
    """``statement`` with its ``$n`` replaced by literals of ``params`` (a new statement).

    ``check_count``: more values than the statement uses is an error (the
    protocol's check; EXECUTE checks its own count first).
    """
    for number, node in _parameters(_unbindable_trees(statement)):
        raise no_such_parameter(number, _position(node))
    found = list(_parameters(_trees(statement)))
    required = max((number for number, _ in found), default=0)
    if check_count and len(params) > required:
        raise LoupeError(
            PROTOCOL_VIOLATION,
            f"bind message supplies {len(params)} parameters, but prepared statement "
            f'"{statement_name}" requires {required}',
        )
    for number, node in found:
        if not 1 <= number <= len(params):
            raise no_such_parameter(number, _position(node))
    if not found:
        return statement
    literals = [literal(parameter) for parameter in params]

    def substitute(tree: exp.Expression) -> exp.Expression:
        def replace(node: exp.Expression) -> exp.Expression:
            number = parameter_number(node)
            return node if number is None else literals[number - 1].copy()

        return tree.transform(replace)  # copies: the prepared statement keeps its $n

    return _rebuild(statement, substitute)


def _rebuild(statement: Statement, substitute: Callable[[exp.Expression], exp.Expression]) -> Any:
    def optional(tree: exp.Expression | None) -> exp.Expression | None:
        return None if tree is None else substitute(tree)

    match statement:
        case Query():
            return dataclasses.replace(
                statement,
                expression=substitute(statement.expression),
                as_of=optional(statement.as_of),
            )
        case Insert():
            return dataclasses.replace(
                statement,
                rows=tuple(tuple(substitute(value) for value in row) for row in statement.rows),
                query=None if statement.query is None else _rebuild(statement.query, substitute),
            )
        case Update():
            return dataclasses.replace(
                statement,
                assignments=tuple(
                    (column, position, substitute(value))
                    for column, position, value in statement.assignments
                ),
                where=optional(statement.where),
            )
        case Delete():
            return dataclasses.replace(statement, where=optional(statement.where))
        case Explain():
            query = statement.query
            return dataclasses.replace(
                statement, query=None if query is None else _rebuild(query, substitute)
            )
        case Subscribe():
            return dataclasses.replace(
                statement,
                query=_rebuild(statement.query, substitute),
                as_of=optional(statement.as_of),
            )
        case Execute():
            return dataclasses.replace(
                statement, args=tuple(substitute(arg) for arg in statement.args)
            )
    return statement


def literal(parameter: Parameter) -> exp.Expression:
    """The typed literal a parameter is bound as (see the module's table)."""
    value, kind = parameter.value, parameter.type
    if kind == "list" and isinstance(value, list | tuple):
        return _array_literal(list(value))
    if sqltypes.is_array(kind) and isinstance(value, list | tuple):
        return _typed_array_literal(list(value), kind)
    if kind in ("bytea", "list"):
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED, f"parameters of type {kind} are not supported"
        )
    if value is None:
        typed = _cast_type(kind)
        return exp.null() if typed is None else exp.cast(exp.null(), typed)
    if kind == "interval":
        interval = value if isinstance(value, Interval) else Interval.from_timedelta(value)
        return exp.Interval(this=exp.Literal.string(format_interval(interval)))
    if kind == "bool":
        return exp.Boolean(this=bool(value))
    if kind == "text":
        return exp.Literal.string(str(value))
    if kind == "int4":
        number = exp.Literal.number(abs(int(value)))
        return exp.Neg(this=number) if value < 0 else number
    typed = _cast_type(kind)
    if typed is None:
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED, f"parameters of type {kind} are not supported"
        )
    text = jsonb_text(value) if kind == "jsonb" else _cast_text(value)
    return exp.cast(exp.Literal.string(text), typed)


def _array_literal(values: list[Any]) -> exp.Expression:
    """A list of values as ``CAST('{…}' AS type[])``: an array of its elements' type
    (bigint if any integer needs it, text for a list of NULLs)."""
    kinds = {sqltypes.type_of_value(v) for v in values if v is not None}
    if kinds == {"int4", "int8"}:
        kinds = {"int8"}
    element = kinds.pop() if len(kinds) == 1 else ("text" if not kinds else "")
    try:
        array = sqltypes.sql_type(sqltypes.array_of(element))
    except sqltypes.UnknownType:
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            "parameters that are lists of mixed or unsupported types are not supported",
        ) from None
    text = array_text([None if v is None else _cast_text(v) for v in values])
    return exp.cast(exp.Literal.string(text), exp.DataType.build(array.display, dialect="postgres"))


def _typed_array_literal(values: list[Any], kind: str) -> exp.Expression:
    """A list given an array type (a PostgreSQL-wire parameter of an array OID):
    ``CAST('{…}' AS type[])`` of its elements' texts."""
    element = sqltypes.element_type(kind)
    texts = [
        None
        if v is None
        else jsonb_text(v)
        if element == "jsonb"
        else format_interval(v)
        if isinstance(v, Interval)
        else _cast_text(v)
        for v in values
    ]
    typed = _cast_type(kind)
    assert typed is not None
    return exp.cast(exp.Literal.string(array_text(texts)), typed)


def _cast_text(value: Any) -> str:
    """A value as the text a cast reads back into the same value."""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else text_form(value) or ""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


# -- the statement log's text form ------------------------------------------------------


def text_form(value: Any, type_: str = "") -> str | None:
    """A parameter's value as PostgreSQL prints it (``t``/``f``, ``Infinity``, ``… +00``); None for NULL."""
    if value is None:
        return None
    if type_ == "jsonb":
        return jsonb_text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
        # PostgreSQL prints a whole-hour offset as ``+00``, not ``+00:00``.
        return text[:-3] if text.endswith(":00") and text[-6] in "+-" else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Interval):
        return format_interval(value)
    if isinstance(value, dt.timedelta):
        return format_interval(Interval.from_timedelta(value))
    if isinstance(value, list | tuple):  # an array, as PostgreSQL prints one
        return array_text([text_form(v) for v in value])
    if isinstance(value, dict):
        return jsonb_text(value)
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return str(value)


_SPECIAL = frozenset('{},"\\')


def array_text(values: Sequence[str | None]) -> str:
    """A PostgreSQL array literal of text: ``{1,NULL,"a b"}`` (what ``text[]`` prints).

    An element is quoted when it is empty, is ``NULL`` in any case, or holds a
    brace, comma, quote, backslash or white space; inside quotes ``"`` and
    ``\\`` are escaped with a backslash. A NULL element is a bare ``NULL``.
    """
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif (
            value == ""
            or value.upper() == "NULL"
            or any(c in _SPECIAL or c.isspace() for c in value)
        ):
            parts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            parts.append(value)
    return "{" + ",".join(parts) + "}"


def params_text(params: Sequence[Parameter]) -> str:
    """The statement log's ``params`` of an execution."""
    return array_text([text_form(parameter.value, parameter.type) for parameter in params])
