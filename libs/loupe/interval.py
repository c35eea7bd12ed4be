"""PostgreSQL's interval: months (int32), days (int32) and microseconds (int64), kept apart.

A month has no fixed length and a day may have 23 or 25 hours across a
daylight-saving change, so PostgreSQL keeps the three fields separate and
applies them one after the other to a date or timestamp (months first, the
day clamped to the month's end, then days, then microseconds). Comparison,
equality, hashing, grouping and sorting use the interval's total span with a
month counted as 30 days and a day as 24 hours (``interval_cmp_value``), so
``'1 month' = '30 days'`` is true; text output keeps the fields as they are
(``'25:00:00'`` is not ``'1 day 01:00:00'``).

This module holds the value type and the algorithms the engine runs per
value (text input and output, ``age``); the engine holds intervals as a polars
struct of the three fields (``STRUCT``) and evaluates everything else itself,
vectorised (``loupe.dataflow.intervals``): there is one evaluator.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import polars as pl
import pyarrow as pa

from loupe.common.errors import LoupeError

DAYS_PER_MONTH = 30
HOURS_PER_DAY = 24
MICROS_PER_SECOND = 1_000_000
MICROS_PER_MINUTE = 60 * MICROS_PER_SECOND
MICROS_PER_HOUR = 60 * MICROS_PER_MINUTE
MICROS_PER_DAY = HOURS_PER_DAY * MICROS_PER_HOUR
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

DATETIME_OUT_OF_RANGE = "22008"
INVALID_DATETIME_FORMAT = "22007"
FIELD_OVERFLOW = "22015"

# How the engine and persist hold an interval: one struct of the three fields.
FIELDS = ("months", "days", "micros")
STRUCT = pl.Struct({"months": pl.Int32(), "days": pl.Int32(), "micros": pl.Int64()})
ARROW = pa.struct(
    [pa.field("months", pa.int32()), pa.field("days", pa.int32()), pa.field("micros", pa.int64())]
)


def out_of_range() -> LoupeError:
    return LoupeError(DATETIME_OUT_OF_RANGE, "interval out of range")


@dataclass(frozen=True)
class Interval:
    """One interval value. Equal when the fields are equal: PostgreSQL's equality (same
    total span) is ``span``'s; a value keeps the fields it was written with."""

    months: int = 0
    days: int = 0
    micros: int = 0

    @classmethod
    def checked(cls, months: int, days: int, micros: int) -> Interval:
        """An interval of these fields; 22008 when one does not fit its width."""
        if not (
            INT32[0] <= months <= INT32[1]
            and INT32[0] <= days <= INT32[1]
            and INT64[0] <= micros <= INT64[1]
        ):
            raise out_of_range()
        return cls(months, days, micros)

    @classmethod
    def from_timedelta(cls, value: dt.timedelta) -> Interval:
        """A client's duration: its days as days, the rest as microseconds (as psycopg sends
        a ``timedelta``: ``-1 days +23:55:00`` for minus five minutes)."""
        return cls.checked(0, value.days, value.seconds * MICROS_PER_SECOND + value.microseconds)

    @classmethod
    def from_struct(cls, value: Any) -> Interval | None:
        """The engine's struct value (a dict of the fields), or None for NULL."""
        if value is None:
            return None
        if isinstance(value, Interval):
            return value
        return cls(value["months"], value["days"], value["micros"])

    def to_struct(self) -> dict[str, int]:
        return {"months": self.months, "days": self.days, "micros": self.micros}

    def span(self) -> int:
        """``interval_cmp_value``: the total in microseconds, a month as 30 days."""
        return (self.months * DAYS_PER_MONTH + self.days) * MICROS_PER_DAY + self.micros

    def __str__(self) -> str:
        return format_interval(self)


def format_interval(value: Interval) -> str:
    """PostgreSQL's text (IntervalStyle postgres, ``EncodeInterval``): ``1 year 2 mons
    3 days 04:05:06``, ``-1 days +02:00:00``, ``25:00:00``, ``00:00:00``."""
    years, months = _truncated_divmod(value.months, 12)
    hours, rest = _truncated_divmod(value.micros, MICROS_PER_HOUR)
    minutes, rest = _truncated_divmod(rest, MICROS_PER_MINUTE)
    seconds, fraction = _truncated_divmod(rest, MICROS_PER_SECOND)
    parts: list[str] = []
    before = False  # each nonzero field decides whether the next positive one shows "+"
    for amount, unit in ((years, "year"), (months, "mon"), (value.days, "day")):
        if amount == 0:
            continue
        plural = "" if amount == 1 else "s"
        parts.append(f"{'+' if before and amount > 0 else ''}{amount} {unit}{plural}")
        before = amount < 0
    if not parts or value.micros != 0:
        minus = value.micros < 0
        clock = f"{'-' if minus else '+' if before else ''}{abs(hours):02d}:{abs(minutes):02d}:"
        clock += f"{abs(seconds):02d}"
        if fraction:
            clock += f".{abs(fraction):06d}".rstrip("0")
        parts.append(clock)
    return " ".join(parts)


def _truncated_divmod(value: int, divisor: int) -> tuple[int, int]:
    """C's ``/`` and ``%``: the quotient toward zero, the remainder with the dividend's sign."""
    quotient = abs(value) // divisor * (1 if value >= 0 else -1)
    return quotient, value - quotient * divisor


# Input: PostgreSQL's interval syntax (DecodeInterval), as its default IntervalStyle reads it.

_UNITS: dict[str, tuple[str, int]] = {
    # unit -> (field, scale): micros in micros, days in days, months in months.
    "microsecond": ("micros", 1),
    "millisecond": ("micros", 1_000),
    "second": ("micros", MICROS_PER_SECOND),
    "minute": ("micros", MICROS_PER_MINUTE),
    "hour": ("micros", MICROS_PER_HOUR),
    "day": ("days", 1),
    "week": ("days", 7),
    "month": ("months", 1),
    "year": ("months", 12),
    "decade": ("months", 120),
    "century": ("months", 1200),
    "millennium": ("months", 12000),
}
_SPELLINGS = {
    **{unit: unit for unit in _UNITS},
    **{f"{unit}s": unit for unit in _UNITS},
    "us": "microsecond",
    "usec": "microsecond",
    "usecs": "microsecond",
    "useconds": "microsecond",
    "ms": "millisecond",
    "msec": "millisecond",
    "msecs": "millisecond",
    "mseconds": "millisecond",
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
    "centuries": "century",
    "millennia": "millennium",
    "millenniums": "millennium",
}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<clock>[+-]?\d+:\d+(?::\d+(?:\.\d*)?)?)      # hh:mm[:ss[.fff]]
      | (?P<year_month>[+-]?\d+-\d+)(?![\d.])          # SQL's year-month: 1-2
      | (?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>[a-z]+)?
      | (?P<word>[a-z@]+)
    )""",
    re.VERBOSE,
)
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
# ISO 8601 with designators (P1Y2M3DT4H5M6S) and its alternative form (P0001-02-03T04:05:06).
_ISO = re.compile(
    rf"p(?:(?P<year>{_NUMBER})y)?(?:(?P<month>{_NUMBER})m)?(?:(?P<week>{_NUMBER})w)?"
    rf"(?:(?P<day>{_NUMBER})d)?(?:t(?:(?P<hour>{_NUMBER})h)?(?:(?P<minute>{_NUMBER})m)?"
    rf"(?:(?P<second>{_NUMBER})s)?)?"
)
_ISO_ALTERNATIVE = re.compile(r"p(\d+)-(\d+)-(\d+)(?:t(\d+):(\d+):(\d+(?:\.\d*)?))?")


class _Fields:
    """The fields of an interval being read; each unit may be given once (as PostgreSQL)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.months = self.days = 0
        self.micros = Decimal(0)
        self.given: set[str] = set()

    def mark(self, *units: str) -> None:
        if self.given.intersection(units):
            raise _bad(self.text)
        self.given.update(units)

    def add(self, amount: Decimal, unit: str) -> None:
        """``amount`` of ``unit``; a fraction cascades to the next smaller field."""
        self.mark(unit)
        field, scale = _UNITS[unit]
        if field == "micros":
            self.micros += amount * scale
        elif field == "days":
            whole = int(amount * scale)
            self.days += whole
            self.micros += (amount * scale - whole) * MICROS_PER_DAY
        elif unit == "month":
            whole = int(amount)
            self.months += whole
            fraction_days = (amount - whole) * DAYS_PER_MONTH
            self.days += int(fraction_days)
            self.micros += (fraction_days - int(fraction_days)) * MICROS_PER_DAY
        else:  # years and longer: a fraction becomes whole months, rounded
            whole = int(amount)
            self.months += whole * scale + int(((amount - whole) * scale).to_integral_value())

    def interval(self, negate: bool = False) -> Interval:
        sign = -1 if negate else 1
        micros = int(self.micros.to_integral_value())
        try:
            return Interval.checked(sign * self.months, sign * self.days, sign * micros)
        except LoupeError:
            raise LoupeError(
                FIELD_OVERFLOW, f'interval field value out of range: "{self.text}"'
            ) from None


def parse_interval(text: str, unit: str | None = None) -> Interval:
    """PostgreSQL's interval input: ``'1 year 2 mons'``, ``'-1 day +02:00'``, ``'1.5 months'``
    (fractions cascade: a month's to 30 days, a day's to 24 hours), ``'@ 3 days ago'``, SQL's
    ``'1-2'`` (a year and two months), ISO 8601's ``'P1Y2M3DT4H5M6S'``, a bare number as
    seconds or as ``unit`` (``INTERVAL '90' DAY``). Bad text is 22007, fields too big 22015."""
    lowered = text.strip().lower()
    if lowered.startswith("p"):
        return _parse_iso(lowered, text)
    fields = _Fields(text)
    position, seen, ago = 0, False, False
    while position < len(lowered):
        match = _TOKEN.match(lowered, position)
        if match is None or match.end() == position:
            raise _bad(text)
        position = match.end()
        if match["word"] is not None:
            if match["word"] == "@" and not seen:
                continue
            if match["word"] == "ago" and seen and position >= len(lowered.rstrip()):
                ago = True
                continue
            raise _bad(text)
        seen = True
        if match["clock"] is not None:
            fields.mark("hour", "minute", "second")
            fields.micros += _clock(match["clock"])
            continue
        if match["year_month"] is not None:
            negative = match["year_month"].startswith("-")
            years, months = (int(p) for p in match["year_month"].lstrip("+-").split("-"))
            sign = -1 if negative else 1
            fields.mark("year", "month")
            fields.months += sign * (years * 12 + months)
            continue
        name = match["unit"]
        if name is None:
            # A number right before a clock counts days ('1 02:00'); alone, seconds or ``unit``.
            following = _TOKEN.match(lowered, position)
            if following is not None and following["clock"] is not None:
                name = "day"
            else:
                name = unit.lower() if unit is not None else "second"
        canonical = _SPELLINGS.get(name)
        if canonical is None:
            raise _bad(text)
        fields.add(Decimal(match["number"]), canonical)
    if not seen:
        raise _bad(text)
    return fields.interval(negate=ago)


def _parse_iso(lowered: str, text: str) -> Interval:
    fields = _Fields(text)
    alternative = _ISO_ALTERNATIVE.fullmatch(lowered)
    if alternative is not None:
        years, months, days, hours, minutes, seconds = alternative.groups()
        fields.add(Decimal(years), "year")
        fields.add(Decimal(months), "month")
        fields.add(Decimal(days), "day")
        for amount, name in ((hours, "hour"), (minutes, "minute"), (seconds, "second")):
            if amount is not None:
                fields.add(Decimal(amount), name)
        return fields.interval()
    designated = _ISO.fullmatch(lowered)
    if designated is None or not any(designated.groupdict().values()):
        raise _bad(text)
    for name, amount in designated.groupdict().items():
        if amount is not None:
            fields.add(Decimal(amount), name)
    return fields.interval()


def _clock(token: str) -> Decimal:
    sign = -1 if token.startswith("-") else 1
    pieces = token.lstrip("+-").split(":")
    hours, minutes = int(pieces[0]), int(pieces[1])
    seconds = Decimal(pieces[2]) if len(pieces) > 2 else Decimal(0)
    if minutes > 59 or seconds >= 60:
        raise _bad(token)
    return sign * ((hours * 60 + minutes) * MICROS_PER_MINUTE + seconds * MICROS_PER_SECOND)


def _bad(text: str) -> LoupeError:
    return LoupeError(INVALID_DATETIME_FORMAT, f'invalid input syntax for type interval: "{text}"')


def age(later: dt.datetime, earlier: dt.datetime) -> Interval:
    """PostgreSQL's ``age(a, b)``: the field-by-field difference (years, months, days, time),
    negative fields borrowed from the next larger one, a month borrowed as the length of
    the month of the earlier argument (of ``a`` when ``a < b``)."""
    negative = later < earlier
    sign = -1 if negative else 1
    fields = [
        sign * (later.year - earlier.year),
        sign * (later.month - earlier.month),
        sign * (later.day - earlier.day),
        sign * (later.hour - earlier.hour),
        sign * (later.minute - earlier.minute),
        sign * (later.second - earlier.second),
        sign * (later.microsecond - earlier.microsecond),
    ]
    year, month, day, hour, minute, second, micro = fields
    while micro < 0:
        micro += MICROS_PER_SECOND
        second -= 1
    while second < 0:
        second += 60
        minute -= 1
    while minute < 0:
        minute += 60
        hour -= 1
    while hour < 0:
        hour += 24
        day -= 1
    borrowed = later if negative else earlier
    while day < 0:
        day += calendar.monthrange(borrowed.year, borrowed.month)[1]
        month -= 1
    while month < 0:
        month += 12
        year -= 1
    time = ((hour * 60 + minute) * 60 + second) * MICROS_PER_SECOND + micro
    return Interval.checked(sign * (year * 12 + month), sign * day, sign * time)


def python_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """An Arrow column's values as Python values, interval structs as ``Interval``."""
    values = column.to_pylist()
    if column.type != ARROW:
        return values
    return [Interval.from_struct(v) for v in values]


def structs(values: list[Any]) -> list[Any]:
    """Python values with each ``Interval`` (or duration) as the engine's and Arrow's struct."""
    return [
        v.to_struct()
        if isinstance(v, Interval)
        else Interval.from_timedelta(v).to_struct()
        if isinstance(v, dt.timedelta)
        else v
        for v in values
    ]
