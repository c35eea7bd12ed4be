"""Arrays (PostgreSQL's, one-dimensional) and lists (Materialize's) in the engine.

Both are polars ``List`` columns of their element type's dtype. Their text
output is PostgreSQL's ``array_out``: ``{1,2,NULL}``, an element in double
quotes when it is empty, is ``NULL`` in any case, or holds a brace, comma,
quote, backslash or white space (``"`` and ``\\`` then escaped with a
backslash), booleans as ``t``/``f``. Text input is ``array_in``'s for one
dimension (22P02 ``malformed array literal`` otherwise), each element then
read as the element type. Subscripts are 1-based and NULL outside the
container; comparisons of elements follow SQL's NULLs (a NULL element
matches nothing).

The handlers register themselves with ``loupe.dataflow.expr``, which imports
this module once its own names exist.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import polars as pl

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.dataflow import expr as engine
from loupe.plan.scalar import Call, Literal

INVALID_TEXT = "22P02"
_NEEDS_QUOTES = r'^$|[{}",\\\s]'


# Text output.


def element_text(value: pl.Expr, element: str) -> pl.Expr:
    """An element as its type's output function prints it (booleans ``t``/``f``)."""
    if element == "bool":
        return pl.when(value).then(pl.lit("t")).when(~value).then(pl.lit("f"))
    return engine.to_text(value, element)


def _quoted(text: pl.Expr) -> pl.Expr:
    needs = text.str.contains(_NEEDS_QUOTES) | (text.str.to_lowercase() == "null")
    escaped = text.str.replace_all("\\", "\\\\", literal=True).str.replace_all(
        '"', '\\"', literal=True
    )
    quoted = pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])
    return pl.when(needs).then(quoted).otherwise(text).fill_null("NULL")


def container_text(value: pl.Expr, source: str) -> pl.Expr:
    """``{1,2,NULL}``: PostgreSQL's text of an array (and Materialize's of a list)."""
    element = sqltypes.element_type(source)
    assert element is not None
    text = element_text(pl.element(), element)
    # A list of lists prints its lists bare, as Materialize does: {{1,2},{3}}.
    quoted = text.fill_null("NULL") if sqltypes.is_list(element) else _quoted(text)
    texts = value.list.eval(quoted)
    return pl.concat_str([pl.lit("{"), texts.list.join(","), pl.lit("}")])


# Text input.


class _Malformed(ValueError):
    pass


def split_literal(text: str) -> list[str | None]:
    """The elements of a one-dimensional array literal (``{a,"b c",NULL}``) as text."""
    rest = text.strip()
    if not rest.startswith("{") or not rest.endswith("}"):
        raise _Malformed(text)
    body = rest[1:-1]
    if not body.strip():
        return []
    elements: list[str | None] = []
    index = 0
    while True:
        while index < len(body) and body[index].isspace():
            index += 1
        if index < len(body) and body[index] == '"':
            index += 1
            chars = []
            while index < len(body) and body[index] != '"':
                if body[index] == "\\":
                    index += 1
                if index >= len(body):
                    raise _Malformed(text)
                chars.append(body[index])
                index += 1
            if index >= len(body):
                raise _Malformed(text)
            index += 1
            while index < len(body) and body[index].isspace():
                index += 1
            elements.append("".join(chars))
        else:
            chars = []
            escaped = False
            while index < len(body) and body[index] != ",":
                character = body[index]
                if character in '{}"':
                    raise _Malformed(text)
                if character == "\\":
                    index += 1
                    if index >= len(body):
                        raise _Malformed(text)
                    escaped = True
                    character = body[index]
                chars.append(character)
                index += 1
            word = "".join(chars).strip()
            if not word:
                raise _Malformed(text)
            elements.append(None if word.upper() == "NULL" and not escaped else word)
        if index >= len(body):
            return elements
        if body[index] != ",":
            raise _Malformed(text)
        index += 1


def _split_texts(texts: pl.Series) -> pl.Series:
    """Array literals to lists of element texts, per distinct text (malformed: NULL)."""
    parsed: dict[str, list[str | None] | None] = {}
    for text in texts.unique().drop_nulls():
        try:
            parsed[text] = split_literal(text)
        except _Malformed:
            parsed[text] = None
    return pl.Series(
        texts.name, [None if t is None else parsed[t] for t in texts], dtype=pl.List(pl.Utf8)
    )


def _first_element_error(errors: pl.Expr) -> pl.Expr:
    return errors.list.drop_nulls().list.first()


def parse_container(text: pl.Expr, to: str) -> tuple[pl.Expr, pl.Expr | None]:
    """Text read as the array or list type ``to``: 22P02 when malformed, the element's
    own input error when an element does not read as the element type."""
    element = sqltypes.element_type(to)
    assert element is not None
    pieces = text.map_batches(_split_texts, return_dtype=pl.List(pl.Utf8))
    kind = "array" if sqltypes.is_array(to) else "list"
    malformed = engine._error_when(
        text.is_not_null() & pieces.is_null(),
        INVALID_TEXT,
        pl.concat_str([pl.lit(f'malformed {kind} literal: "'), text, pl.lit('"')]),
    )
    if element == "text":
        return pieces, malformed
    value, error = engine._from_text(pl.element(), element)
    values = pieces.list.eval(value)
    if error is None:
        return values, malformed
    return values, engine._first_error([malformed, _first_element_error(pieces.list.eval(error))])


def cast_elements(value: pl.Expr, source: str, to: str) -> tuple[pl.Expr, pl.Expr | None]:
    """An array or list cast element by element to another container type."""
    source_element, to_element = sqltypes.element_type(source), sqltypes.element_type(to)
    assert source_element is not None
    assert to_element is not None
    if source_element == to_element:
        return value, None
    converted, error = engine._cast_value(pl.element(), source_element, to_element)
    values = value.list.eval(converted)
    if error is None:
        return values, None
    return values, _first_element_error(value.list.eval(error))


# Functions.


def _container_of(compiler: Any, call: Call) -> str:
    return str(compiler.type_of(call))


@engine._handles("array", "list")
def _construct(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``ARRAY[a, b, …]`` / ``LIST[a, b, …]``: NULL arguments are NULL elements."""
    result = _container_of(compiler, call)
    element = sqltypes.element_type(result)
    assert element is not None
    parts = [compiler.as_type(arg, element) for arg in call.args]
    dtype = sqltypes.polars_dtype(element)
    value = pl.concat_list([p.value.cast(dtype) for p in parts])
    return engine.CompiledScalar(value, engine._first_error([p.error for p in parts]), result)


@engine._handles("container_concat")
def _concat(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``a || b``: a NULL container is empty; two NULL containers, NULL (an element is
    appended or prepended to a NULL container: array_append(NULL, x) is {x})."""
    result = _container_of(compiler, call)
    parts = [compiler.compile(arg) for arg in call.args]
    dtype = sqltypes.polars_dtype(result)
    containers = [p for p in parts if p.type == result]
    values = [
        p.value.cast(dtype).fill_null(pl.lit([], dtype)) if p.type == result else p.value
        for p in parts
    ]
    all_null = pl.all_horizontal([p.value.is_null() for p in containers])
    if len(containers) < len(parts):
        all_null = pl.lit(False)
    value = pl.when(all_null).then(None).otherwise(pl.concat_list(values)).cast(dtype)
    return engine.CompiledScalar(value, engine._first_error([p.error for p in parts]), result)


@engine._handles("subscript")
def _subscript(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``a[i]``: the i-th element (from 1); NULL outside the container."""

    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, None]:
        container, index = values[0], values[1].cast(pl.Int64)
        inside = index >= 1
        taken = container.list.get(index - 1, null_on_oob=True)
        return pl.when(inside).then(taken), None

    return engine._strict(compiler, call, body)


@engine._handles("list_slice")
def _list_slice(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``l[a:b]``, Materialize's: a start below 1 counts from 1, an end past the list
    stops there, a start past the end (or past the list) gives the empty list."""

    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, None]:
        container = values[0]
        start = pl.max_horizontal(values[1].cast(pl.Int64), pl.lit(1))
        end = values[2].cast(pl.Int64)
        length = pl.max_horizontal(end - start + 1, pl.lit(0))
        return container.list.slice(start - 1, length), None

    return engine._strict(compiler, call, body, null_guard=True)


@engine._handles("cardinality", "list_length")
def _cardinality(compiler: Any, call: Call) -> engine.CompiledScalar:
    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, None]:
        return values[0].list.len(), None

    return engine._strict(compiler, call, body)


@engine._handles("array_length")
def _array_length(compiler: Any, call: Call) -> engine.CompiledScalar:
    """The length of dimension 1; NULL for any other dimension and for an empty array."""

    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, None]:
        length = values[0].list.len()
        return pl.when((values[1] == 1) & (length > 0)).then(length), None

    return engine._strict(compiler, call, body)


@engine._handles("array_to_string")
def _array_to_string(compiler: Any, call: Call) -> engine.CompiledScalar:
    """Elements' text joined by the delimiter; NULL elements skipped, or replaced by the
    third argument when it is given (and not NULL)."""
    container_type = compiler.type_of(call.args[0])
    element = sqltypes.element_type(container_type)
    if element is None:
        raise LoupeError(
            engine.UNDEFINED_FUNCTION,
            f"function array_to_string({sqltypes.display_name(container_type)}, text) "
            "does not exist",
        )
    replacement: str | None = None
    if len(call.args) == 3:
        given = call.args[2]
        if not isinstance(given, Literal):
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "array_to_string with a NULL replacement that is not a constant",
            )
        replacement = None if given.value is None else str(given.value)
        call = Call(call.func, call.args[:2])
    args = compiler.args(call)
    container, delimiter = args.values[0], args.values[1]
    texts = container.list.eval(element_text(pl.element(), element))
    if replacement is None:
        texts = texts.list.drop_nulls()
    else:
        texts = texts.list.eval(pl.element().fill_null(pl.lit(replacement)))
    joined = texts.list.join(delimiter)
    value = pl.when(container.is_not_null() & delimiter.is_not_null()).then(joined)
    return engine.CompiledScalar(value, args.error, "text")


def _rowwise(
    function: Callable[[list[Any] | None, list[Any] | None], bool | None],
) -> Callable[[pl.Series], pl.Series]:
    def apply(pairs: pl.Series) -> pl.Series:
        left, right = pairs.struct.field("l").to_list(), pairs.struct.field("r").to_list()
        return pl.Series(
            [function(a, b) for a, b in zip(left, right, strict=True)], dtype=pl.Boolean
        )

    return apply


def _contains(left: list[Any] | None, right: list[Any] | None) -> bool | None:
    if left is None or right is None:
        return None
    present = {v for v in left if v is not None}
    return all(v is not None and v in present for v in right)


def _overlaps(left: list[Any] | None, right: list[Any] | None) -> bool | None:
    if left is None or right is None:
        return None
    present = {v for v in left if v is not None}
    return any(v is not None and v in present for v in right)


_SET_OPERATORS = {
    "array_contains": lambda a, b: _contains(a, b),
    "array_contained": lambda a, b: _contains(b, a),
    "array_overlap": _overlaps,
}


@engine._handles(*_SET_OPERATORS)
def _set_operator(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``@>``, ``<@``, ``&&``: containment and overlap, NULL elements matching nothing."""
    _same_element_types(compiler, call)
    function = _SET_OPERATORS[call.func]

    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, None]:
        pairs = pl.struct(values[0].alias("l"), values[1].alias("r"))
        return pairs.map_batches(_rowwise(function), return_dtype=pl.Boolean), None

    return engine._strict(compiler, call, body)


def _same_element_types(compiler: Any, call: Call) -> None:
    types = [compiler.type_of(a) for a in call.args]
    known = [t for t in types if t != "unknown"]
    if len(set(known)) > 1:
        names = f" {_SYMBOLS[call.func]} ".join(sqltypes.display_name(t) for t in types)
        raise LoupeError(engine.UNDEFINED_FUNCTION, f"operator does not exist: {names}")


_SYMBOLS = {"array_contains": "@>", "array_contained": "<@", "array_overlap": "&&"}


@engine._handles("eq_any")
def _eq_any(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``x = ANY(array)``: true if an element equals x; NULL when none does but x or an
    element is NULL; false otherwise (and for an empty array)."""
    container_type = compiler.type_of(call.args[1])
    element = sqltypes.element_type(container_type)
    if element is None:
        raise LoupeError("42809", "op ANY/ALL (array) requires array on right side")
    subject = compiler.as_type(call.args[0], element)
    container = compiler.compile(call.args[1])
    found = container.value.list.contains(subject.value, nulls_equal=False)
    has_null = container.value.list.eval(pl.element().is_null()).list.any()
    empty = container.value.list.len() == 0
    value = (
        pl.when(container.value.is_null())
        .then(None)
        .when(empty)
        .then(False)
        .when(subject.value.is_null())
        .then(None)
        .when(found)
        .then(True)
        .when(has_null)
        .then(None)
        .otherwise(False)
    )
    error = engine._first_error([subject.error, container.error])
    return engine.CompiledScalar(value.cast(pl.Boolean), error, "bool")


# Comparisons: element by element, a NULL element after every value, a prefix first.


def _order_key(values: list[Any]) -> tuple[tuple[int, Any], ...]:
    return tuple((1, None) if v is None else (0, v) for v in values)


def compare(func: str, args: Any) -> engine.CompiledScalar:
    """``a < b`` (and the others) of two arrays or lists, as PostgreSQL orders them."""
    compare_keys = getattr(operator, {"neq": "ne", "lte": "le", "gte": "ge"}.get(func, func))

    def ordered(left: list[Any] | None, right: list[Any] | None) -> bool | None:
        if left is None or right is None:
            return None
        return bool(compare_keys(_order_key(left), _order_key(right)))

    pairs = pl.struct(args.values[0].alias("l"), args.values[1].alias("r"))
    value = pairs.map_batches(_rowwise(ordered), return_dtype=pl.Boolean)
    return engine.CompiledScalar(value, args.error, "bool")
