"""Constant folding of literals: typed string literals, casts of constants and date arithmetic.

PostgreSQL types a quoted literal by its context and evaluates constant
casts while planning (a bad ``DATE 'x'`` fails the statement, not a row);
Loupe does the same, so plans carry typed values (``datetime.date``,
``datetime.datetime``, ``datetime.timedelta``, ``Decimal``) and the engine
never parses text per row for a constant.

Intervals with months or years have no fixed length, so they exist only
while planning (``MonthInterval``): the planner folds them into a date or
timestamp constant, or refuses the query.
"""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from loupe import sqltypes
from loupe.common import jsonb
from loupe.common.errors import LoupeError
from loupe.dataflow.expr import evaluate_closed
from loupe.plan.scalar import Cast, Literal

INVALID_TEXT_REPRESENTATION = "22P02"
INVALID_DATETIME_FORMAT = "22007"
INTERVAL_FIELD_OVERFLOW = "22015"

INTEGER_BOUNDS = {"int2": 2**15, "int4": 2**31, "int8": 2**63}
UNSIGNED_BOUNDS = {"uint2": 2**16, "uint4": 2**32, "uint8": 2**64, "mz_timestamp": 2**64}
# Types whose text input the engine parses exactly (numeric is a float there: parsed here).
ENGINE_PARSED = (
    *INTEGER_BOUNDS,
    *UNSIGNED_BOUNDS,
    "float4",
    "float8",
    "bool",
    "date",
    "timestamp",
    "timestamptz",
    "uuid",
)
FLOATS = ("float4", "float8")

_UNITS_MICROS = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
_UNITS_MONTHS = {"month": 1, "year": 12, "decade": 120, "century": 1200}
_UNIT_SPELLINGS = {
    "us": "microsecond",
    "ms": "millisecond",
    "s": "second",
    "sec": "second",
    "secs": "second",
    "m": "minute",
    "min": "minute",
    "mins": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "d": "day",
    "w": "week",
    "mon": "month",
    "mons": "month",
    "y": "year",
    "yr": "year",
    "yrs": "year",
}
_CLOCK = re.compile(r"^(-?)(\d+):(\d{1,2})(?::(\d{1,2}(?:\.\d+)?))?$")


@dataclass(frozen=True)
class MonthInterval:
    """An interval with a month part: PostgreSQL's (months, days, microseconds)."""

    months: int
    days: int = 0
    micros: int = 0


def _unit(word: str) -> str:
    word = word.lower()
    word = _UNIT_SPELLINGS.get(word, word)
    singular = (
        word[:-1]
        if word.endswith("s") and word[:-1] in {**_UNITS_MICROS, **_UNITS_MONTHS}
        else word
    )
    if singular == "centurie":
        singular = "century"
    if singular not in _UNITS_MICROS and singular not in _UNITS_MONTHS:
        raise LoupeError(
            INVALID_DATETIME_FORMAT, f'invalid input syntax for type interval: "{word}"'
        )
    return singular


def parse_interval(text: str, unit: str | None = None) -> datetime.timedelta | MonthInterval:
    """``'1 day 02:00:00'``, ``'3 months'`` or ``'90'`` with ``unit`` DAY, as PostgreSQL reads them."""
    months, micros = 0, 0
    tokens = text.strip().split()
    if not tokens:
        raise _bad_interval(text)
    if len(tokens) == 1 and unit is not None and _is_number(tokens[0]):
        tokens.append(unit)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        clock = _CLOCK.match(token)
        if clock:
            micros += _clock_micros(clock)
            index += 1
            continue
        if not _is_number(token) or index + 1 >= len(tokens):
            raise _bad_interval(text)
        amount, name = Decimal(token), _unit(tokens[index + 1])
        if name in _UNITS_MONTHS:
            months += int(amount * _UNITS_MONTHS[name])
        else:
            micros += int(amount * _UNITS_MICROS[name])
        index += 2
    days, micros = divmod(micros, _UNITS_MICROS["day"]) if months else (0, micros)
    if months:
        return MonthInterval(months, days, micros)
    return datetime.timedelta(microseconds=micros)


def _clock_micros(match: re.Match[str]) -> int:
    sign, hours, minutes, seconds = match.groups()
    total = (int(hours) * 3600 + int(minutes) * 60) * 1_000_000
    total += int(Decimal(seconds or "0") * 1_000_000)
    return -total if sign else total


def _is_number(token: str) -> bool:
    try:
        Decimal(token)
    except InvalidOperation:
        return False
    return True


def _bad_interval(text: str) -> LoupeError:
    return LoupeError(INVALID_DATETIME_FORMAT, f'invalid input syntax for type interval: "{text}"')


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
    try:
        if type_ == "numeric":
            return Decimal(stripped)
    except (ValueError, InvalidOperation) as error:
        raise _bad(type_, text) from error
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
            return Decimal(str(value))
        if isinstance(value, int):
            return _integer(value, to_type)
    if from_type == "date" and to_type == "timestamp":
        return datetime.datetime.combine(value, datetime.time())
    if from_type == "timestamp" and to_type == "date":
        return value.date()
    raise ValueError(to_type)


def add_interval(
    start: datetime.date | datetime.datetime,
    interval: datetime.timedelta | MonthInterval,
    sign: int,
) -> datetime.datetime:
    """``start ± interval`` as PostgreSQL computes it: months first (clamping the day), then the rest."""
    moment = (
        start
        if isinstance(start, datetime.datetime)
        else datetime.datetime.combine(start, datetime.time())
    )
    if isinstance(interval, datetime.timedelta):
        return moment + sign * interval
    month_index = moment.year * 12 + moment.month - 1 + sign * interval.months
    year, month = divmod(month_index, 12)
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    moment = moment.replace(year=year, month=month + 1, day=day)
    rest = datetime.timedelta(days=interval.days, microseconds=interval.micros)
    return moment + sign * rest
