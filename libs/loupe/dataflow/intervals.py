"""The engine's intervals: PostgreSQL's algorithms on a polars struct of months, days, micros.

An interval column is a struct (``loupe.interval.STRUCT``). Everything a
dataflow does with intervals often (comparison and sorting by the total span,
fieldwise ``+ - *``, ``date/timestamp ± interval``, ``timestamp - timestamp``,
the justify functions, fields and truncation) is vectorised here; text input
and output and ``age`` run PostgreSQL's algorithms from ``loupe.interval`` per
distinct value.

Each function returns a value and, where it can fail, an error expression in
the engine's ``"code|message"`` form (22008 ``interval out of range``).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import polars as pl

from loupe.common.errors import LoupeError
from loupe.interval import (
    DAYS_PER_MONTH,
    INT32,
    MICROS_PER_DAY,
    MICROS_PER_HOUR,
    MICROS_PER_MINUTE,
    MICROS_PER_SECOND,
    STRUCT,
    Interval,
    age,
    format_interval,
    parse_interval,
)

OUT_OF_RANGE = "22008|interval out of range"
TIMESTAMP_OUT_OF_RANGE = "22008|timestamp out of range"
DIVISION_BY_ZERO = "22012|division by zero"
# Loupe's timestamps: 0001-01-01 to 9999-12-31 23:59:59.999999, in microseconds since 1970.
_TIMESTAMP_MICROS = (-62_135_596_800 * MICROS_PER_SECOND, 253_402_300_800 * MICROS_PER_SECOND - 1)
# More days than any two of those timestamps are apart.
_MAX_DAYS = 3_660_000


def months(value: pl.Expr) -> pl.Expr:
    return value.struct.field("months")


def days(value: pl.Expr) -> pl.Expr:
    return value.struct.field("days")


def micros(value: pl.Expr) -> pl.Expr:
    return value.struct.field("micros")


def field_values(value: pl.Expr) -> list[pl.Expr]:
    """The three fields, for a sort that breaks ties of equal spans."""
    return [months(value), days(value), micros(value)]


def make(month_part: pl.Expr, day_part: pl.Expr, micro_part: pl.Expr) -> pl.Expr:
    """An interval of three fields (NULL where any field is NULL or does not fit its width:
    callers that can overflow check the range first, ``checked``)."""
    month_part = month_part.cast(pl.Int32, strict=False)
    day_part = day_part.cast(pl.Int32, strict=False)
    micro_part = micro_part.cast(pl.Int64, strict=False)
    present = month_part.is_not_null() & day_part.is_not_null() & micro_part.is_not_null()
    return pl.when(present).then(
        pl.struct(month_part.alias("months"), day_part.alias("days"), micro_part.alias("micros"))
    )


def checked(month_part: pl.Expr, day_part: pl.Expr, micro_part: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """An interval of fields computed wide (Int64, Int128): 22008 where one does not fit."""
    fits = (
        month_part.is_between(*INT32)
        & day_part.is_between(*INT32)
        & micro_part.is_between(-(2**63), 2**63 - 1)
    )
    value = pl.when(fits).then(make(month_part, day_part, micro_part))
    return value, _error(fits.not_(), OUT_OF_RANGE)


def _error(condition: pl.Expr, error: str) -> pl.Expr:
    return pl.when(condition.fill_null(False)).then(pl.lit(error)).otherwise(pl.lit(None, pl.Utf8))


def sort_keys(value: pl.Expr) -> list[pl.Expr]:
    """Two Int64 keys that order intervals as ``interval_cmp_value`` does (the total span,
    a month as 30 days, a day as 24 hours): whole days, then the microseconds left."""
    whole = micros(value) // MICROS_PER_DAY
    total_days = months(value).cast(pl.Int64) * DAYS_PER_MONTH + days(value) + whole
    return [total_days, micros(value) - whole * MICROS_PER_DAY]


def compare(op: str, left: pl.Expr, right: pl.Expr) -> pl.Expr:
    """``left op right`` by total span (``'1 month' = '30 days'``)."""
    (left_days, left_rest), (right_days, right_rest) = sort_keys(left), sort_keys(right)
    same_days = left_days == right_days
    if op in ("eq", "neq"):
        equal = same_days & (left_rest == right_rest)
        return equal if op == "eq" else equal.not_()
    if op in ("lt", "gte"):
        less = (left_days < right_days) | (same_days & (left_rest < right_rest))
        return less if op == "lt" else less.not_()
    greater = (left_days > right_days) | (same_days & (left_rest > right_rest))
    return greater if op == "gt" else greater.not_()


def normalized(value: pl.Expr) -> pl.Expr:
    """One representative per total span (months and days folded into micros' days), for
    grouping, DISTINCT and joins: equal intervals get equal keys."""
    total_days, rest = sort_keys(value)
    return pl.when(value.is_not_null()).then(
        pl.struct(total_days.alias("days"), rest.alias("micros"))
    )


def span_value(value: pl.Expr) -> pl.Expr:
    """The interval of ``value``'s total span with days in [0, 30) and time in [0, 24h):
    equal intervals (by ``compare``) map to one value."""
    total_days, rest = sort_keys(value)
    return make(total_days // DAYS_PER_MONTH, total_days % DAYS_PER_MONTH, rest)


# Arithmetic.


def add(left: pl.Expr, right: pl.Expr, sign: int = 1) -> tuple[pl.Expr, pl.Expr]:
    """``left ± right``, field by field."""
    return checked(
        months(left).cast(pl.Int64) + sign * months(right).cast(pl.Int64),
        days(left).cast(pl.Int64) + sign * days(right).cast(pl.Int64),
        micros(left).cast(pl.Int128) + sign * micros(right).cast(pl.Int128),
    )


def negate(value: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    return checked(
        0 - months(value).cast(pl.Int64),
        0 - days(value).cast(pl.Int64),
        0 - micros(value).cast(pl.Int128),
    )


def _tsround(value: pl.Expr) -> pl.Expr:
    return (value * 1e6).round(0, mode="half_to_even") / 1e6


def _truncated(value: pl.Expr) -> pl.Expr:
    """A float's integer part (C's cast), still a float."""
    return pl.when(value < 0).then(value.abs().floor().neg()).otherwise(value.floor())


_RESULT = pl.Struct({"v": STRUCT, "e": pl.Utf8})


def _stepwise(
    inputs: dict[str, pl.Expr], steps: Callable[[pl.DataFrame], pl.DataFrame]
) -> tuple[pl.Expr, pl.Expr]:
    """``steps`` run on the batch's ``inputs`` as a frame, each intermediate a column of its
    own: as one expression, every use of an intermediate would repeat its whole tree (and
    PostgreSQL's cascading arithmetic uses each several times). ``steps`` returns the
    value ``v`` and the error ``e``."""

    def run(packed: pl.Series) -> pl.Series:
        return steps(packed.struct.unnest()).select("v", "e").to_struct()

    packed = pl.struct([expression.alias(name) for name, expression in inputs.items()])
    result = packed.map_batches(run, return_dtype=_RESULT)
    return result.struct.field("v"), result.struct.field("e")


def scale(value: pl.Expr, factor: pl.Expr, divide: bool) -> tuple[pl.Expr, pl.Expr]:
    """``interval_mul`` / ``interval_div``: whole months and days scaled, their fractions
    cascaded down (a month's to 30 days, a day's to seconds)."""
    return _stepwise(
        {"value": value, "factor": factor.cast(pl.Float64)},
        lambda frame: _scale_steps(frame, divide),
    )


def _scale_steps(frame: pl.DataFrame, divide: bool) -> pl.DataFrame:
    value, factor = pl.col("value"), pl.col("factor")
    if divide:
        factor = pl.when(factor != 0).then(factor)

    def apply(x: pl.Expr) -> pl.Expr:
        x = x.cast(pl.Float64)
        return x / factor if divide else x * factor

    month_product, day_product = pl.col("month_product"), pl.col("day_product")
    whole_months, whole_days = pl.col("whole_months"), pl.col("whole_days")
    remainder_days, seconds, carried = (
        pl.col("remainder_days"),
        pl.col("seconds"),
        pl.col("carried"),
    )
    frame = frame.with_columns(
        apply(months(value)).alias("month_product"),
        apply(days(value)).alias("day_product"),
        apply(micros(value)).alias("micro_product"),
    )
    frame = frame.with_columns(
        _truncated(month_product).alias("whole_months"),
        _truncated(day_product).alias("whole_days"),
    )
    frame = frame.with_columns(
        _tsround((month_product - whole_months) * DAYS_PER_MONTH).alias("remainder_days")
    )
    frame = frame.with_columns(
        _tsround(
            (day_product - whole_days + remainder_days - _truncated(remainder_days)) * 86400.0
        ).alias("seconds")
    )
    frame = frame.with_columns(
        pl.when(seconds.abs() >= 86400)
        .then(_truncated(seconds / 86400))
        .otherwise(0.0)
        .alias("carried")
    )
    frame = frame.with_columns(
        (whole_days + carried + _truncated(remainder_days)).alias("total_days"),
        (pl.col("micro_product") + (seconds - carried * 86400) * MICROS_PER_SECOND)
        .round(0, mode="half_to_even")
        .alias("total_micros"),
    )
    fits = (
        month_product.is_between(*INT32)
        & day_product.is_between(*INT32)
        & pl.col("total_days").is_between(*INT32)
        & pl.col("total_micros").is_between(-(2.0**63), 2.0**63, closed="left")
    )
    present = value.is_not_null() & pl.col("factor").is_not_null()
    frame = frame.with_columns(fits.fill_null(False).alias("fits"))
    errors = [_error(present & pl.col("fits").not_(), OUT_OF_RANGE)]
    if divide:
        errors.insert(0, _error(pl.col("factor") == 0, DIVISION_BY_ZERO))
    return frame.select(
        pl.when(pl.col("fits"))
        .then(
            make(
                whole_months.cast(pl.Int64, strict=False),
                pl.col("total_days").cast(pl.Int64, strict=False),
                pl.col("total_micros").cast(pl.Int64, strict=False),
            )
        )
        .alias("v"),
        pl.coalesce(errors).alias("e"),
    )


def add_to_time(moment: pl.Expr, value: pl.Expr, sign: int) -> tuple[pl.Expr, pl.Expr]:
    """``timestamp ± interval``: months first (the day clamped to the month's end), then
    days, then microseconds; a result beyond Loupe's timestamps (years 1 to 9999, the
    clients' range, as for dates) is 22008."""
    month_part = sign * months(value).cast(pl.Int64)
    day_part = sign * days(value).cast(pl.Int64)
    micro_part = sign * micros(value)
    target_month = moment.dt.year().cast(pl.Int64) * 12 + moment.dt.month() - 1 + month_part
    fits = (
        target_month.is_between(12, 9999 * 12 + 11)
        & (day_part.abs() <= _MAX_DAYS)
        & (micro_part.abs() <= _MAX_DAYS * MICROS_PER_DAY)
    ).fill_null(False)
    # Out-of-range parts are left out (the row is an error): polars refuses such shifts.
    month_text = pl.when(fits).then(month_part).otherwise(0).cast(pl.Utf8)
    shifted = moment.dt.offset_by(pl.concat_str([month_text, pl.lit("mo")]))
    result = shifted + pl.duration(
        days=pl.when(fits).then(day_part).otherwise(0),
        microseconds=pl.when(fits).then(micro_part).otherwise(0),
    )
    inside = fits & result.dt.epoch("us").is_between(*_TIMESTAMP_MICROS)
    outside = moment.is_not_null() & value.is_not_null() & inside.not_()
    return pl.when(inside).then(result), _error(outside, TIMESTAMP_OUT_OF_RANGE)


def time_difference(left: pl.Expr, right: pl.Expr) -> pl.Expr:
    """``timestamp - timestamp``: days and microseconds (whole 24 hours as days, one sign),
    never months, as PostgreSQL's ``timestamp_mi``."""
    total = (left - right).dt.total_microseconds()
    whole = (
        pl.when(total < 0).then(-(total.abs() // MICROS_PER_DAY)).otherwise(total // MICROS_PER_DAY)
    )
    return make(pl.lit(0), whole, total - whole * MICROS_PER_DAY)


def of_micros(total: pl.Expr) -> pl.Expr:
    """An interval of microseconds only (``time - time``)."""
    return make(pl.lit(0), pl.lit(0), total)


def add_to_time_of_day(time: pl.Expr, value: pl.Expr, sign: int) -> pl.Expr:
    """``time ± interval``: only the microseconds count, around the clock."""
    nanos = time.cast(pl.Int64) + sign * (micros(value) % MICROS_PER_DAY) * 1000
    return (nanos % (MICROS_PER_DAY * 1000)).cast(pl.Time)


# justify_*: whole units carried up, the fields given one sign.


def _carry(high: pl.Expr, low: pl.Expr, unit: int) -> tuple[pl.Expr, pl.Expr]:
    """(high + low / unit, low % unit), both toward zero as C divides."""
    whole = pl.when(low < 0).then(-(low.abs() // unit)).otherwise(low // unit)
    return high + whole, low - whole * unit


def _one_sign(high: pl.Expr, low: pl.Expr, unit: int) -> tuple[pl.Expr, pl.Expr]:
    borrow_down = (high > 0) & (low < 0)
    borrow_up = (high < 0) & (low > 0)
    return (
        pl.when(borrow_down).then(high - 1).when(borrow_up).then(high + 1).otherwise(high),
        pl.when(borrow_down).then(low + unit).when(borrow_up).then(low - unit).otherwise(low),
    )


def justify(func: str, value: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """justify_hours, justify_days or justify_interval, as PostgreSQL computes them."""
    return _stepwise({"value": value}, lambda frame: _justify_steps(frame, func))


def _justify_steps(frame: pl.DataFrame, func: str) -> pl.DataFrame:
    m, d, u = pl.col("m"), pl.col("d"), pl.col("u")
    frame = frame.with_columns(
        months(pl.col("value")).cast(pl.Int64).alias("m"),
        days(pl.col("value")).cast(pl.Int64).alias("d"),
        micros(pl.col("value")).alias("u"),
    )

    def step(frame: pl.DataFrame, pair: tuple[pl.Expr, pl.Expr], names: str) -> pl.DataFrame:
        return frame.with_columns(pair[0].alias(names[0]), pair[1].alias(names[1]))

    if func == "justify_hours":
        frame = step(frame, _carry(d, u, MICROS_PER_DAY), "du")
        frame = step(frame, _one_sign(d, u, MICROS_PER_DAY), "du")
    elif func == "justify_days":
        frame = step(frame, _carry(m, d, DAYS_PER_MONTH), "md")
        frame = step(frame, _one_sign(m, d, DAYS_PER_MONTH), "md")
    else:
        # Days from the time first only when both have one sign (PostgreSQL: avoids overflow).
        same_sign = ((d > 0) & (u > 0)) | ((d < 0) & (u < 0))
        early_days, early_micros = _carry(d, u, MICROS_PER_DAY)
        frame = step(
            frame,
            (
                pl.when(same_sign).then(early_days).otherwise(d),
                pl.when(same_sign).then(early_micros).otherwise(u),
            ),
            "du",
        )
        frame = step(frame, _carry(m, d, DAYS_PER_MONTH), "md")
        down = (m > 0) & ((d < 0) | ((d == 0) & (u < 0)))
        up = (m < 0) & ((d > 0) | ((d == 0) & (u > 0)))
        frame = step(
            frame,
            (
                pl.when(down).then(m - 1).when(up).then(m + 1).otherwise(m),
                pl.when(down)
                .then(d + DAYS_PER_MONTH)
                .when(up)
                .then(d - DAYS_PER_MONTH)
                .otherwise(d),
            ),
            "md",
        )
        frame = step(frame, _carry(d, u, MICROS_PER_DAY), "du")
        frame = step(frame, _one_sign(d, u, MICROS_PER_DAY), "du")
    value, error = checked(m, d, u)
    return frame.select(value.alias("v"), error.alias("e"))


# Fields (extract, date_part) and date_trunc.


def _c_div(value: pl.Expr, unit: int) -> pl.Expr:
    return pl.when(value < 0).then(-(value.abs() // unit)).otherwise(value // unit)


def _c_mod(value: pl.Expr, unit: int) -> pl.Expr:
    return value - _c_div(value, unit) * unit


def _seconds_part(value: pl.Expr) -> pl.Expr:
    """The microseconds within the minute, with the interval's time sign."""
    return _c_mod(micros(value), MICROS_PER_MINUTE)


FIELDS: dict[str, Callable[[pl.Expr], pl.Expr]] = {
    "microseconds": _seconds_part,
    "milliseconds": lambda v: _seconds_part(v) / 1e3,
    "second": lambda v: _seconds_part(v) / 1e6,
    "minute": lambda v: _c_mod(_c_div(micros(v), MICROS_PER_MINUTE), 60),
    "hour": lambda v: _c_div(micros(v), MICROS_PER_HOUR),
    "day": days,
    "month": lambda v: _c_mod(months(v).cast(pl.Int64), 12),
    "quarter": lambda v: _c_div(_c_mod(months(v).cast(pl.Int64), 12), 3) + 1,
    "year": lambda v: _c_div(months(v).cast(pl.Int64), 12),
    "decade": lambda v: _c_div(_c_div(months(v).cast(pl.Int64), 12), 10),
    "century": lambda v: _c_div(_c_div(months(v).cast(pl.Int64), 12), 100),
    "millennium": lambda v: _c_div(_c_div(months(v).cast(pl.Int64), 12), 1000),
    # A year counts 365.25 days, a month 30.
    "epoch": lambda v: (
        (
            365.25 * _c_div(months(v).cast(pl.Int64), 12)
            + DAYS_PER_MONTH * _c_mod(months(v).cast(pl.Int64), 12)
            + days(v)
        )
        * 86400.0
        + micros(v) / 1e6
    ),
}

_MONTH_UNITS = {
    "month": 1,
    "quarter": 3,
    "year": 12,
    "decade": 120,
    "century": 1200,
    "millennium": 12000,
}
_MICRO_UNITS = {
    "microseconds": 1,
    "milliseconds": 1_000,
    "second": MICROS_PER_SECOND,
    "minute": MICROS_PER_MINUTE,
    "hour": MICROS_PER_HOUR,
}


def truncate(value: pl.Expr, unit: str) -> pl.Expr:
    """``date_trunc(unit, interval)``: the fields below ``unit`` zeroed (toward zero).

    The months split into years and months as PostgreSQL's ``interval2itm`` does, so
    truncating to a year keeps whole years of months.
    """
    month_part = months(value).cast(pl.Int64)
    if unit in _MONTH_UNITS:
        step = _MONTH_UNITS[unit]
        if unit == "quarter":  # the months within the year, to their quarter
            kept = _c_div(month_part, 12) * 12 + _c_div(_c_mod(month_part, 12), 3) * 3
        elif unit == "month":
            kept = month_part
        else:
            kept = _c_div(_c_div(month_part, 12), step // 12) * step
        return make(kept, pl.lit(0), pl.lit(0))
    if unit == "day":
        return make(month_part, days(value), pl.lit(0))
    step = _MICRO_UNITS[unit]
    return make(month_part, days(value), _c_div(micros(value), step) * step)


# Per distinct value, with the algorithms of loupe.interval.


def to_text(value: pl.Expr) -> pl.Expr:
    return value.map_batches(_texts, return_dtype=pl.Utf8)


def _texts(values: pl.Series) -> pl.Series:
    texts = {
        key: format_interval(Interval(*key))
        for key in values.drop_nulls().unique().struct.unnest().rows()
    }
    keys = values.struct.unnest().rows()
    return pl.Series(
        [None if v is None else texts[k] for v, k in zip(values, keys, strict=True)], dtype=pl.Utf8
    )


def from_text(text: pl.Expr) -> pl.Expr:
    """Text as intervals (NULL where it is not one: the caller reports the bad input)."""
    return text.map_batches(_parse_texts, return_dtype=STRUCT)


def _parse_texts(texts: pl.Series) -> pl.Series:
    parsed: dict[str, dict[str, int] | None] = {}
    for text in texts.unique().drop_nulls():
        try:
            parsed[text] = parse_interval(text).to_struct()
        except LoupeError:
            parsed[text] = None
    return pl.Series([None if t is None else parsed[t] for t in texts], dtype=STRUCT)


def ages(later: pl.Expr, earlier: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """PostgreSQL's ``age(a, b)`` per row (years and months borrowed by calendar)."""
    pair = pl.struct(later.alias("a"), earlier.alias("b"))
    result = pair.map_batches(_ages, return_dtype=pl.Struct({"v": STRUCT, "e": pl.Utf8}))
    return result.struct.field("v"), result.struct.field("e")


def _ages(pairs: pl.Series) -> pl.Series:
    out: list[dict[str, object] | None] = []
    for pair in pairs:
        a, b = (pair or {}).get("a"), (pair or {}).get("b")
        if not isinstance(a, datetime.datetime) or not isinstance(b, datetime.datetime):
            out.append({"v": None, "e": None})
            continue
        try:
            out.append({"v": age(a, b).to_struct(), "e": None})
        except LoupeError as error:
            out.append({"v": None, "e": f"{error.code}|{error.message}"})
    return pl.Series(out, dtype=pl.Struct({"v": STRUCT, "e": pl.Utf8}))


def literal(value: Interval) -> pl.Expr:
    return pl.lit(pl.Series([value.to_struct()], dtype=STRUCT)).first()


def is_interval(dtype: pl.DataType) -> bool:
    return dtype == STRUCT


def order_by(
    schema: pl.Schema, keys: list[tuple[str, bool, bool]]
) -> tuple[list[pl.Expr], list[bool], list[bool]]:
    """Sort keys ``(column, descending, nulls_last)`` as polars sort arguments, an interval
    column as its two span keys (so '1 mon' sorts with '30 days', before '31 days')."""
    by: list[pl.Expr] = []
    descending: list[bool] = []
    nulls_last: list[bool] = []
    for column, desc, last in keys:
        expressions = sort_keys(pl.col(column)) if is_interval(schema[column]) else [pl.col(column)]
        by += expressions
        descending += [desc] * len(expressions)
        nulls_last += [last] * len(expressions)
    return by, descending, nulls_last
