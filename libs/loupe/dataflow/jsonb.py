"""``jsonb`` in the engine: canonical text in Utf8 columns, operators per distinct value.

Values are the canonical text of ``loupe.common.jsonb`` (so equality and
grouping are text equality). Input is parsed and printed canonically
(22P02 for text that is no JSON); ``->``, ``->>``, ``?``, ``@>``,
``jsonb_typeof`` and ``jsonb_array_length`` parse each distinct document
once per batch. The handlers register themselves with
``loupe.dataflow.expr``, which imports this module once its names exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from loupe.common import jsonb as documents
from loupe.dataflow import expr as engine
from loupe.plan.scalar import Call

INVALID_TEXT = "22P02"
INVALID_PARAMETER = "22023"
_ERROR = "\x00error\x00"


def _canonical_texts(texts: pl.Series) -> pl.Series:
    """Canonical jsonb text per distinct input (NULL where it is no JSON)."""
    canonical: dict[str, str | None] = {}
    for text in texts.unique().drop_nulls():
        try:
            canonical[text] = documents.canonical(text)
        except documents.InvalidJson:
            canonical[text] = None
    return texts.replace_strict(canonical, default=None, return_dtype=pl.Utf8)


def parse_jsonb(text: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Text read as jsonb: its canonical text, or 22P02."""
    parsed = text.map_batches(_canonical_texts, return_dtype=pl.Utf8)
    error = engine._error_when(
        text.is_not_null() & parsed.is_null(),
        INVALID_TEXT,
        "invalid input syntax for type json",
    )
    return parsed, error


def _per_row(function: Callable[..., Any], dtype: pl.DataType) -> Callable[[pl.Series], pl.Series]:
    """``function(document, *other arguments)`` over a struct column, once per distinct row."""

    def apply(rows: pl.Series) -> pl.Series:
        fields = [rows.struct.field(name).to_list() for name in rows.struct.fields]
        results: dict[tuple[Any, ...], Any] = {}
        values = []
        parsed: dict[str, Any] = {}
        for args in zip(*fields, strict=True):
            if args not in results:
                if any(a is None for a in args):
                    results[args] = None
                else:
                    document = args[0]
                    if document not in parsed:
                        parsed[document] = documents.parse(document)
                    results[args] = function(parsed[document], *args[1:])
            values.append(results[args])
        return pl.Series(values, dtype=dtype)

    return apply


def _strict_rows(
    compiler: Any, call: Call, function: Callable[..., Any], dtype: pl.DataType
) -> engine.CompiledScalar:
    def body(values: list[pl.Expr], _types: list[str], _result: str) -> tuple[pl.Expr, Any]:
        rows = pl.struct([v.alias(f"a{i}") for i, v in enumerate(values)])
        result = rows.map_batches(_per_row(function, dtype), return_dtype=dtype)
        if dtype != pl.Utf8:
            return result, None
        # A text result carries an error as a marked text: split it off.
        failed = result.str.starts_with(_ERROR)
        error = pl.when(failed).then(result.str.strip_prefix(_ERROR))
        return pl.when(~failed).then(result), error

    return engine._strict(compiler, call, body)


def _get(document: Any, key: Any) -> Any:
    if isinstance(key, str):
        return document.get(key, _MISSING) if isinstance(document, dict) else _MISSING
    if isinstance(document, dict):
        return _MISSING
    if not isinstance(document, list):  # a scalar is indexed as a one-element array
        document = [document]
    index = key + len(document) if key < 0 else key
    return document[index] if 0 <= index < len(document) else _MISSING


_MISSING = object()


@engine._handles("jsonb_get")
def _jsonb_get(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``j -> key`` (an object's member) or ``j -> n`` (an array's element, negative from
    the end): jsonb, NULL when absent."""

    def get(document: Any, key: Any) -> str | None:
        found = _get(document, key)
        return None if found is _MISSING else documents.text(found)

    return _strict_rows(compiler, call, get, pl.Utf8())


@engine._handles("jsonb_get_text")
def _jsonb_get_text(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``j ->> key``: as ``->``, as text (a string unquoted, JSON null as NULL)."""

    def get(document: Any, key: Any) -> str | None:
        found = _get(document, key)
        if found is _MISSING or found is None:
            return None
        return found if isinstance(found, str) else documents.text(found)

    return _strict_rows(compiler, call, get, pl.Utf8())


@engine._handles("jsonb_exists")
def _jsonb_exists(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``j ? key``: a top-level key of an object, a string element of an array, or the
    string itself."""

    def exists(document: Any, key: str) -> bool:
        if isinstance(document, dict):
            return key in document
        if isinstance(document, list):
            return any(isinstance(v, str) and v == key for v in document)
        return isinstance(document, str) and document == key

    return _strict_rows(compiler, call, exists, pl.Boolean())


@engine._handles("jsonb_contains", "jsonb_contained")
def _jsonb_contains(compiler: Any, call: Call) -> engine.CompiledScalar:
    """``a @> b`` (``b <@ a``): PostgreSQL's containment."""
    flip = call.func == "jsonb_contained"

    def contains(document: Any, other: str) -> bool:
        parsed = documents.parse(other)
        return (
            documents.contains(parsed, document) if flip else documents.contains(document, parsed)
        )

    return _strict_rows(compiler, call, contains, pl.Boolean())


@engine._handles("jsonb_typeof")
def _jsonb_typeof(compiler: Any, call: Call) -> engine.CompiledScalar:
    return _strict_rows(compiler, call, documents.type_name, pl.Utf8())


@engine._handles("jsonb_array_length")
def _jsonb_array_length(compiler: Any, call: Call) -> engine.CompiledScalar:
    """The number of elements of an array; 22023 for a scalar or an object."""

    def length(document: Any) -> str:
        if isinstance(document, list):
            return str(len(document))
        what = "an object" if isinstance(document, dict) else "a scalar"
        return f"{_ERROR}{INVALID_PARAMETER}|cannot get array length of {what}"

    compiled = _strict_rows(compiler, call, length, pl.Utf8())
    return engine.CompiledScalar(compiled.value.cast(pl.Int32), compiled.error, "int4")


def equal(func: str, args: Any) -> engine.CompiledScalar:
    """``a = b`` (``<>``) of jsonb values: equal texts are equal; others are compared as
    documents, numbers by value (``2`` = ``2.0``, which print differently)."""
    left, right = args.values

    def same(a: str, b: str) -> bool:
        return documents.equal(documents.parse(a), documents.parse(b))

    def compare(rows: pl.Series) -> pl.Series:
        lefts, rights = rows.struct.field("l").to_list(), rows.struct.field("r").to_list()
        results = [
            None if a is None or b is None else (a == b or same(a, b))
            for a, b in zip(lefts, rights, strict=True)
        ]
        return pl.Series(results, dtype=pl.Boolean)

    pairs = pl.struct(left.alias("l"), right.alias("r"))
    value = (
        pl.when(left == right)
        .then(True)
        .otherwise(pairs.map_batches(compare, return_dtype=pl.Boolean))
    )
    value = pl.when(left.is_null() | right.is_null()).then(None).otherwise(value)
    if func == "neq":
        value = ~value
    return engine.CompiledScalar(value, args.error, "bool")
