"""``to_char(timestamp, format)`` as PostgreSQL's formatting.c does it, as polars expressions.

The format is parsed once (it must be a constant) into literal text and
template patterns (``YYYY``, ``HH24``, ``Month``…, with the ``FM`` prefix
and the ``TH``/``th`` suffix); each pattern becomes a polars expression over
the timestamp column, so formatting is vectorised. Patterns are matched as
PostgreSQL matches them: at each position the first keyword of its table
that the format continues with (longer spellings come first), case as
written (``Month`` → ``March    ``, ``MONTH`` → ``MARCH    ``, ``FMMonth``
→ ``March``). The session time zone is UTC: ``TZ`` is ``UTC`` for a
timestamptz and empty for a timestamp, ``OF`` is ``+00``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

# PostgreSQL's DCH_keywords, in its order: the first that matches wins.
_KEYWORDS = (
    "A.D.", "A.M.", "AD", "AM", "B.C.", "BC", "CC", "DAY", "DDD", "DD", "DY", "Day", "Dy", "D",
    "FF1", "FF2", "FF3", "FF4", "FF5", "FF6", "FX", "HH24", "HH12", "HH", "IDDD", "ID", "IW",
    "IYYY", "IYY", "IY", "I", "J", "MI", "MM", "MONTH", "MON", "MS", "Month", "Mon", "OF",
    "P.M.", "PM", "Q", "RM", "SSSSS", "SSSS", "SS", "TZH", "TZM", "TZ", "US", "WW", "W",
    "Y,YYY", "YYYY", "YYY", "YY", "Y", "a.d.", "a.m.", "ad", "am", "b.c.", "bc", "cc", "day",
    "ddd", "dd", "dy", "d", "ff1", "ff2", "ff3", "ff4", "ff5", "ff6", "fx", "hh24", "hh12", "hh",
    "iddd", "id", "iw", "iyyy", "iyy", "iy", "i", "j", "mi", "mm", "month", "mon", "ms", "of",
    "p.m.", "pm", "q", "rm", "sssss", "ssss", "ss", "tz", "tzh", "tzm", "us", "ww", "w",
    "y,yyy", "yyyy", "yyy", "yy", "y",
)  # fmt: skip
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ROMAN = ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII")
# Days from the Julian day 0 to 1970-01-01.
_UNIX_EPOCH_JULIAN_DAY = 2_440_588


@dataclass(frozen=True)
class _Pattern:
    keyword: str
    fill_mode: bool  # FM: no padding
    ordinal: str  # "", "TH" or "th"


def parse(format_text: str) -> list[str | _Pattern]:
    """The format as literal text and patterns, as PostgreSQL's parse_format reads it."""
    pieces: list[str | _Pattern] = []
    position = 0
    while position < len(format_text):
        fill_mode = False
        if format_text.startswith(("FM", "fm"), position):
            fill_mode, position = True, position + 2
        keyword = next((k for k in _KEYWORDS if format_text.startswith(k, position)), None)
        if keyword is not None:
            position += len(keyword)
            ordinal = ""
            if format_text.startswith(("TH", "th"), position):
                ordinal, position = format_text[position : position + 2], position + 2
            pieces.append(_Pattern(keyword, fill_mode, ordinal))
            continue
        if fill_mode:  # FM before no keyword: nothing (PostgreSQL drops it too)
            continue
        character = format_text[position]
        if character == '"':
            end = position + 1
            quoted = []
            while end < len(format_text) and format_text[end] != '"':
                if format_text[end] == "\\" and end + 1 < len(format_text):
                    end += 1
                quoted.append(format_text[end])
                end += 1
            pieces.append("".join(quoted))
            position = end + 1
            continue
        if character == "\\" and format_text.startswith('"', position + 1):
            pieces.append('"')
            position += 2
            continue
        pieces.append(character)
        position += 1
    return pieces


def to_char(value: pl.Expr, format_text: str, *, with_zone: bool) -> pl.Expr:
    """``to_char(value, format_text)`` for a Datetime column (NULL for an empty format)."""
    pieces = parse(format_text)
    if not pieces:
        return pl.lit(None, pl.Utf8)
    exprs = [
        pl.lit(p) if isinstance(p, str) else _pattern(value, p, with_zone=with_zone) for p in pieces
    ]
    return pl.concat_str(exprs)


def _number(value: pl.Expr, width: int, pattern: _Pattern) -> pl.Expr:
    text = value.cast(pl.Utf8)
    if width < 0:
        padded = text.str.zfill(-width)
    else:
        padded = text if pattern.fill_mode or width <= 1 else text.str.zfill(width)
    if not pattern.ordinal:
        return padded
    return pl.concat_str([padded, _ordinal_suffix(value, upper=pattern.ordinal == "TH")])


def _ordinal_suffix(value: pl.Expr, *, upper: bool) -> pl.Expr:
    last, last_two = value % 10, value % 100
    suffix = (
        pl.when((last_two >= 11) & (last_two <= 13))
        .then(pl.lit("th"))
        .when(last == 1)
        .then(pl.lit("st"))
        .when(last == 2)
        .then(pl.lit("nd"))
        .when(last == 3)
        .then(pl.lit("rd"))
        .otherwise(pl.lit("th"))
    )
    return suffix.str.to_uppercase() if upper else suffix


def _cased(names: pl.Expr, keyword: str) -> pl.Expr:
    """Names in the case the keyword is written in (``MONTH``, ``Month``, ``month``)."""
    if keyword.isupper():
        return names.str.to_uppercase()
    if keyword.islower():
        return names.str.to_lowercase()
    return names


def _name(index: pl.Expr, names: tuple[str, ...], pattern: _Pattern, width: int) -> pl.Expr:
    """A month or day name by 1-based ``index``; blank-padded to ``width`` unless FM."""
    full = index.replace_strict(
        list(range(1, len(names) + 1)), list(names), return_dtype=pl.Utf8, default=None
    )
    cased = _cased(full if width else full.str.slice(0, 3), pattern.keyword)
    return cased if pattern.fill_mode or not width else cased.str.pad_end(width)


def _pattern(value: pl.Expr, pattern: _Pattern, *, with_zone: bool) -> pl.Expr:
    key = pattern.keyword
    upper = key.upper()
    if upper in _TEXT_PATTERNS:
        return _TEXT_PATTERNS[upper](value, pattern, with_zone)
    number, width = _NUMBERS[upper](value)
    return _number(number, width, pattern)


def _meridiem(value: pl.Expr, pattern: _Pattern, _zone: bool) -> pl.Expr:
    key = pattern.keyword
    dotted = "." in key
    morning = "A.M." if dotted else "AM"
    evening = "P.M." if dotted else "PM"
    if key.islower():
        morning, evening = morning.lower(), evening.lower()
    return pl.when(value.dt.hour() < 12).then(pl.lit(morning)).otherwise(pl.lit(evening))


def _era(_value: pl.Expr, pattern: _Pattern, _zone: bool) -> pl.Expr:
    # Loupe's timestamps are all of the common era.
    era = "A.D." if "." in pattern.keyword else "AD"
    return pl.lit(era.lower() if pattern.keyword.islower() else era)


def _zone_name(_value: pl.Expr, pattern: _Pattern, with_zone: bool) -> pl.Expr:
    if not with_zone:
        return pl.lit("")
    return pl.lit("utc" if pattern.keyword.islower() else "UTC")


def _roman_month(value: pl.Expr, pattern: _Pattern, _zone: bool) -> pl.Expr:
    numerals = value.dt.month().replace_strict(
        list(range(1, 13)), list(_ROMAN), return_dtype=pl.Utf8
    )
    numerals = numerals.str.to_lowercase() if pattern.keyword.islower() else numerals
    return numerals if pattern.fill_mode else numerals.str.pad_end(4)


def _thousands(value: pl.Expr, _pattern: _Pattern, _zone: bool) -> pl.Expr:
    year = value.dt.year()
    return pl.concat_str(
        [(year // 1000).cast(pl.Utf8), pl.lit(","), (year % 1000).cast(pl.Utf8).str.zfill(3)]
    )


_TEXT_PATTERNS: dict[str, Callable[[pl.Expr, _Pattern, bool], pl.Expr]] = {
    "MONTH": lambda v, p, _z: _name(v.dt.month(), _MONTHS, p, 9),
    "MON": lambda v, p, _z: _name(v.dt.month(), _MONTHS, p, 0),
    "DAY": lambda v, p, _z: _name(v.dt.weekday(), _DAYS, p, 9),
    "DY": lambda v, p, _z: _name(v.dt.weekday(), _DAYS, p, 0),
    "AM": _meridiem,
    "PM": _meridiem,
    "A.M.": _meridiem,
    "P.M.": _meridiem,
    "AD": _era,
    "BC": _era,
    "A.D.": _era,
    "B.C.": _era,
    "TZ": _zone_name,
    "OF": lambda _v, _p, _z: pl.lit("+00"),
    "TZH": lambda _v, _p, _z: pl.lit("+00"),
    "TZM": lambda _v, _p, _z: pl.lit("00"),
    "RM": _roman_month,
    "Y,YYY": _thousands,
    "FX": lambda _v, _p, _z: pl.lit(""),
}


def _seconds_of_day(value: pl.Expr) -> pl.Expr:
    hour, minute = value.dt.hour().cast(pl.Int32), value.dt.minute().cast(pl.Int32)
    return hour * 3600 + minute * 60 + value.dt.second()


def _fraction(digits: int) -> Callable[[pl.Expr], tuple[pl.Expr, int]]:
    # Fractions keep their width even with FM: they are digits after a point.
    return lambda v: (v.dt.microsecond() // 10 ** (6 - digits), -digits)


def _iso_day_of_year(value: pl.Expr) -> pl.Expr:
    return (value.dt.week() - 1) * 7 + value.dt.weekday()


# Numeric patterns: (value, zero-padded width). A negative width pads even under FM.
_NUMBERS: dict[str, Callable[[pl.Expr], tuple[pl.Expr, int]]] = {
    "YYYY": lambda v: (v.dt.year(), 4),
    "YYY": lambda v: (v.dt.year() % 1000, 3),
    "YY": lambda v: (v.dt.year() % 100, 2),
    "Y": lambda v: (v.dt.year() % 10, 1),
    "IYYY": lambda v: (v.dt.iso_year(), 4),
    "IYY": lambda v: (v.dt.iso_year() % 1000, 3),
    "IY": lambda v: (v.dt.iso_year() % 100, 2),
    "I": lambda v: (v.dt.iso_year() % 10, 1),
    "CC": lambda v: ((v.dt.year() + 99) // 100, 2),
    "Q": lambda v: (v.dt.quarter(), 1),
    "MM": lambda v: (v.dt.month(), 2),
    "WW": lambda v: ((v.dt.ordinal_day() - 1) // 7 + 1, 2),
    "W": lambda v: ((v.dt.day() - 1) // 7 + 1, 1),
    "IW": lambda v: (v.dt.week(), 2),
    "DDD": lambda v: (v.dt.ordinal_day(), 3),
    "IDDD": lambda v: (_iso_day_of_year(v), 3),
    "DD": lambda v: (v.dt.day(), 2),
    "D": lambda v: (v.dt.weekday() % 7 + 1, 1),
    "ID": lambda v: (v.dt.weekday(), 1),
    "J": lambda v: (v.dt.date().cast(pl.Int64) + _UNIX_EPOCH_JULIAN_DAY, 1),
    "HH24": lambda v: (v.dt.hour(), 2),
    "HH12": lambda v: ((v.dt.hour() + 11) % 12 + 1, 2),
    "HH": lambda v: ((v.dt.hour() + 11) % 12 + 1, 2),
    "MI": lambda v: (v.dt.minute(), 2),
    "SS": lambda v: (v.dt.second(), 2),
    "SSSS": lambda v: (_seconds_of_day(v), 1),
    "SSSSS": lambda v: (_seconds_of_day(v), 1),
    "MS": _fraction(3),
    "US": _fraction(6),
    **{f"FF{n}": _fraction(n) for n in range(1, 7)},
}
