"""Constant folding of literals: typed string literals, casts of constants and date arithmetic.

PostgreSQL types a quoted literal by its context and evaluates constant
casts while planning (a bad ``DATE 'x'`` fails the statement, not a row);
Loupe does the same, so plans carry typed values (``datetime.date``,
``datetime.datetime``, ``loupe.interval.Interval``, ``Decimal``) and the engine
never parses text per row for a constant.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from loupe import sqltypes
from loupe.common import jsonb
from loupe.common.errors import LoupeError
from loupe.dataflow.expr import evaluate_closed, numeric_value
from loupe.interval import parse_interval
from loupe.plan.scalar import Cast, Literal

INVALID_TEXT_REPRESENTATION = "22P02"
INVALID_DATETIME_FORMAT = "22007"
INTERVAL_FIELD_OVERFLOW = "22015"

INTEGER_BOUNDS = {"int2": 2**15, "int4": 2**31, "int8": 2**63}
UNSIGNED_BOUNDS = {"uint2": 2**16, "uint4": 2**32, "uint8": 2**64, "mz_timestamp": 2**64}
# Types whose text input the engine parses exactly.
ENGINE_PARSED = (
    *INTEGER_BOUNDS,
    *UNSIGNED_BOUNDS,
    "numeric",
    "time",
    "float4",
    "float8",
    "bool",
    "date",
    "timestamp",
    "timestamptz",
    "uuid",
)
FLOATS = ("float4", "float8")


def _bad(type_: str, text: str) -> LoupeError:
    code = (
        INVALID_DATETIME_FORMAT
        if type_ in ("date", "timestamp", "timestamptz", "interval")
        else INVALID_TEXT_REPRESENTATION
    )
    return LoupeError(code, f'invalid input syntax for type {type_}: "{text}"')


def parse_text(text: str, type_: str) -> Any:
    """The value of the string literal ``text`` read as ``type_``; raises 22P02/22007 if it is not one.

    Raises ``ValueError`` for types not folded here (the engine casts those).
    """
    stripped = text.strip()
    if type_ in ENGINE_PARSED:
        # The engine's own text input, so a constant reads as a column's text would.
        return evaluate_closed(Cast(Literal(text, "text"), type_))
    if sqltypes.element_type(type_) is not None:  # an array or list: a tuple in plans
        return tuple(evaluate_closed(Cast(Literal(text, "text"), type_)))  # type: ignore[arg-type]
    if type_ == "interval":
        return parse_interval(stripped)
    if type_ == "jsonb":
        try:
            return jsonb.canonical(text)
        except jsonb.InvalidJson:
            raise LoupeError(
                INVALID_TEXT_REPRESENTATION, "invalid input syntax for type json"
            ) from None
    if type_ == "text":
        return text
    raise ValueError(type_)


def _integer(value: int, type_: str) -> int:
    bound = INTEGER_BOUNDS.get(type_) or UNSIGNED_BOUNDS[type_]
    low = 0 if type_ in UNSIGNED_BOUNDS else -bound
    if not low <= value < bound:
        raise LoupeError("22003", f"{type_} out of range")
    return value


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("t", "true", "yes", "y", "on", "1"):
        return True
    if lowered in ("f", "false", "no", "n", "off", "0"):
        return False
    raise ValueError(text)


def fold_cast(value: Any, from_type: str, to_type: str) -> Any:
    """``CAST(value AS to_type)`` for a constant; ``ValueError`` when the engine should do it."""
    if value is None or from_type == to_type:
        return value
    if from_type in ("text", "unknown") and isinstance(value, str):
        return parse_text(value, to_type)
    numeric_types = (*INTEGER_BOUNDS, "uint2", "uint4", "uint8", "numeric", *FLOATS)
    if from_type in numeric_types and to_type in numeric_types:
        if to_type in FLOATS:
            return float(value)
        if to_type == "numeric":
            # float8 to numeric keeps 15 significant digits, as PostgreSQL's cast.
            exact = Decimal(f"{value:.15g}") if isinstance(value, float) else value
            return numeric_value(exact)
        if isinstance(value, int):
            return _integer(value, to_type)
    if from_type == "date" and to_type == "timestamp":
        return datetime.datetime.combine(value, datetime.time())
    if from_type == "timestamp" and to_type == "date":
        return value.date()
    raise ValueError(to_type)
