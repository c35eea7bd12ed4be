"""Values in PostgreSQL's text and binary wire formats, by Loupe type name.

The contract (the server uses only these):

- ``type_oid(type_name) -> int`` and ``type_size(type_name) -> int`` (``pg_type.typlen``,
  -1 for variable length): what a ``RowDescription`` field says.
- ``encode_text(value, type_name) -> bytes`` and ``encode_binary(value, type_name) ->
  bytes``: a non-NULL result value (as the coordinator's events hold it: Python values,
  ``loupe.interval.Interval``, ``Decimal``, lists for arrays) in the format PostgreSQL
  would send for a column of that type.
- ``decode_text(data, oid) -> Any`` and ``decode_binary(data, oid) -> Any``: a Bind
  parameter in that format, into a Python value the coordinator's ``Parameter`` takes;
  ``oid`` 0 (unspecified) decodes text as text. ``ValueError`` when malformed (the server
  answers 22P02 / 08P01).
- ``param_type_name(oid) -> str | None``: the Loupe type name of a parameter OID.

What goes on the wire is what PostgreSQL 15 sends with ``TimeZone`` UTC, ``DateStyle``
ISO and ``IntervalStyle`` postgres (the test compares byte for byte against a real
server): floats in their shortest round-trip digits (``extra_float_digits`` 1, the default
since PostgreSQL 12), ``NaN``/``Infinity``; numeric as Materialize prints it (no trailing
zeros: its scale is not kept) and, in binary, PostgreSQL's base-10000 digits with sign,
weight and display scale; bytea as ``\\x`` hex; timestamptz as ``… +00``; date, time and
timestamps in binary as days / microseconds since 2000-01-01; interval in binary as
microseconds, days, months; jsonb in binary as version 1 then its text; arrays as
PostgreSQL's ``array_out`` / ``array_send`` (one dimension, lower bound 1). Materialize's
unsigned integers are their digits, or big-endian unsigned in binary. Lists print as
arrays do (a list of lists bare: ``{{1,2},{3}}``); they have no binary format (0A000,
as in Materialize).

Parameters (``decode_*``): the Python value a gRPC client would send for that type, so
``Parameter(value, param_type_name(oid) or inline_type(value))`` binds as the gRPC API
binds: ints, ``float``, ``Decimal``, ``str``, ``bytes``, ``datetime.date`` / ``time`` /
``datetime`` (naive for timestamp, UTC for timestamptz), ``Interval``, ``uuid.UUID``, the
parsed document for json/jsonb, lists for arrays. ``param_type_name`` names a type a
``Parameter`` binds: ``varchar``, ``bpchar`` and ``name`` parameters are ``text``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
import uuid
import zoneinfo
from collections.abc import Callable
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.common.jsonb import InvalidJson
from loupe.common.jsonb import parse as parse_json
from loupe.common.jsonb import text as jsonb_text
from loupe.common.values import numeric_text
from loupe.dataflow.containers import split_literal
from loupe.dataflow.expr import float_text
from loupe.interval import Interval, format_interval, parse_interval

TEXT_OID = 25
UNKNOWN_OID = 705
LIST_OID = 16384

# PostgreSQL types Loupe's type table has no entry for (yet), which catalog relations
# and parameters may still name: name -> (OID, typlen, element name for arrays).
_EXTRA: dict[str, tuple[int, int, str | None]] = {
    "char": (18, 1, None),
    "name": (19, 64, None),
    "regproc": (24, 4, None),
    "oid": (26, 4, None),
    "json": (114, -1, None),
    "bpchar": (1042, -1, None),
    "regclass": (2205, 4, None),
    "regtype": (2206, 4, None),
    "_char": (1002, -1, "char"),
    "_name": (1003, -1, "name"),
    "_bytea": (1001, -1, "bytea"),
    "_float4": (1021, -1, "float4"),
    "_varchar": (1015, -1, "varchar"),
    "_bpchar": (1014, -1, "bpchar"),
    "_oid": (1028, -1, "oid"),
    "_json": (199, -1, "json"),
    "_uint2": (16461, -1, "uint2"),
    "_uint4": (16463, -1, "uint4"),
    "_uint8": (16465, -1, "uint8"),
}

# pg_type.typlen of fixed-size types (everything else is -1, variable length).
_FIXED_SIZES = {
    "bool": 1,
    "int2": 2,
    "int4": 4,
    "int8": 8,
    "uint2": 2,
    "uint4": 4,
    "uint8": 8,
    "mz_timestamp": 8,
    "float4": 4,
    "float8": 8,
    "date": 4,
    "time": 8,
    "timestamp": 8,
    "timestamptz": 8,
    "interval": 16,
    "uuid": 16,
    # unknown's typlen is -2 (a C string) in PostgreSQL.
    "unknown": -2,
}

_POSTGRES_EPOCH = dt.datetime(2000, 1, 1)
_POSTGRES_EPOCH_UTC = _POSTGRES_EPOCH.replace(tzinfo=dt.UTC)
_POSTGRES_EPOCH_DATE = _POSTGRES_EPOCH.date()
_MICROSECOND = dt.timedelta(microseconds=1)


def _entry(type_name: str) -> sqltypes.SqlType | None:
    return sqltypes.TYPES.get(type_name)


def _element(type_name: str) -> str | None:
    entry = _entry(type_name)
    if entry is not None:
        return entry.element
    extra = _EXTRA.get(type_name)
    return extra[2] if extra is not None else None


def _is_list(type_name: str) -> bool:
    return sqltypes.is_list(type_name)


def type_oid(type_name: str) -> int:
    """The OID a ``RowDescription`` gives a column of ``type_name`` (text for unknown names)."""
    entry = _entry(type_name)
    if entry is not None:
        return entry.oid
    extra = _EXTRA.get(type_name)
    return extra[0] if extra is not None else TEXT_OID


def type_size(type_name: str) -> int:
    """``pg_type.typlen`` of ``type_name``: its width in bytes, -1 when variable."""
    if type_name in _FIXED_SIZES:
        return _FIXED_SIZES[type_name]
    extra = _EXTRA.get(type_name)
    return extra[1] if extra is not None else -1


# -- text output ------------------------------------------------------------------------


_FLOAT4_MAX = struct.unpack("!f", b"\x7f\x7f\xff\xff")[0]


def _single(number: float) -> float:
    """``number`` rounded to the nearest float4 (what a real holds), as a Python float."""
    if math.isfinite(number) and abs(number) > _FLOAT4_MAX:
        # Within half a unit of the largest float4 rounds to it; struct refuses those.
        if abs(number) < _FLOAT4_MAX + 2.0**103:
            return math.copysign(_FLOAT4_MAX, number)
        return math.copysign(math.inf, number)
    return struct.unpack("!f", struct.pack("!f", number))[0]


def _float4_text(number: float) -> str:
    """float4out: the shortest digits that read back as the same float4; the exponent form
    below 1e-4 or from 1e6 (FLT_DIG), as PostgreSQL 12+ prints it."""
    if not math.isfinite(number):
        return float_text(number)
    single = _single(number)
    if not math.isfinite(single):
        return float_text(single)
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    for digits in range(1, 10):
        candidate = f"{single:.{digits - 1}e}"
        if _single(float(candidate)) == single:
            break
    mantissa, exponent_text = candidate.split("e")
    exponent = int(exponent_text)
    digits_only = mantissa.replace(".", "").replace("-", "").rstrip("0") or "0"
    sign = "-" if single < 0 else ""
    if -4 <= exponent < 6:
        value = Decimal(f"{sign}{digits_only[0]}.{digits_only[1:] or '0'}e{exponent}")
        text = format(value, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    fraction = f".{digits_only[1:]}" if len(digits_only) > 1 else ""
    return f"{sign}{digits_only[0]}{fraction}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _fraction(micros: int) -> str:
    return f".{micros:06d}".rstrip("0") if micros else ""


def _time_text(value: dt.time) -> str:
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond)}"


def _date_text(value: dt.date) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _timestamp_text(value: dt.datetime) -> str:
    return f"{_date_text(value)} {_time_text(value.time())}"


def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _numeric_text(value: Any) -> str:
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    if number.is_nan():
        return "NaN"
    if number.is_infinite():
        return "Infinity" if number > 0 else "-Infinity"
    return numeric_text(number)


def _scalar_text(value: Any, type_name: str) -> str:
    if type_name == "bool":
        return "t" if value else "f"
    if type_name in ("float8", "float4"):
        return _float4_text(value) if type_name == "float4" else float_text(float(value))
    if type_name == "numeric":
        return _numeric_text(value)
    if type_name == "bytea":
        return "\\x" + bytes(value).hex()
    if type_name == "timestamptz":
        return _timestamp_text(_utc(value)) + "+00"
    if type_name == "timestamp":
        return _timestamp_text(value)
    if type_name == "date":
        return _date_text(value)
    if type_name == "time":
        return _time_text(value)
    if type_name == "interval":
        interval = value if isinstance(value, Interval) else Interval.from_timedelta(value)
        return format_interval(interval)
    if type_name in ("jsonb", "json"):
        return value if isinstance(value, str) else jsonb_text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


def _quoted_element(text: str) -> str:
    """array_out's quoting: empty, ``NULL`` in any case, or holding ``{}",\\`` or ASCII
    white space (array_isspace) is quoted, with ``"`` and ``\\`` escaped."""
    if text == "" or text.upper() == "NULL" or any(c in '{}",\\ \t\n\r\v\f' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _container_text(values: Any, type_name: str) -> str:
    element = _element(type_name)
    assert element is not None
    nested = _element(element) is not None
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
        elif nested:  # a list of lists prints its lists bare, as Materialize does
            parts.append(_container_text(value, element))
        else:
            parts.append(_quoted_element(_scalar_text(value, element)))
    return "{" + ",".join(parts) + "}"


def encode_text(value: Any, type_name: str) -> bytes:
    """A non-NULL value of ``type_name`` in PostgreSQL's text format."""
    if _element(type_name) is not None:
        return _container_text(value, type_name).encode()
    return _scalar_text(value, type_name).encode()


# -- binary output ----------------------------------------------------------------------

_NUMERIC_POSITIVE, _NUMERIC_NEGATIVE, _NUMERIC_NAN = 0x0000, 0x4000, 0xC000
_NUMERIC_PINF, _NUMERIC_NINF = 0xD000, 0xF000
_NUMERIC_DSCALE_MAX = 0x3FFF
# PostgreSQL's numeric holds up to 131072 digits before the point and 16383 after.
_NUMERIC_MAX_DIGITS = 131072 + 16383


def _numeric_binary(value: Any) -> bytes:
    """numeric_send: ndigits, weight (of the first base-10000 digit), sign, dscale, digits."""
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    if number.is_nan():
        return struct.pack("!hhHH", 0, 0, _NUMERIC_NAN, 0)
    if number.is_infinite():
        return struct.pack("!hhHH", 0, 0, _NUMERIC_PINF if number > 0 else _NUMERIC_NINF, 0)
    # Materialize's scale: the value's own digits, trailing zeros dropped (as text prints).
    text = numeric_text(number)
    negative = text.startswith("-")
    integer, _, fraction = text.lstrip("-").partition(".")
    dscale = len(fraction)
    integer = integer.lstrip("0")
    # Pad both sides to whole base-10000 digits around the decimal point.
    integer = "0" * (-len(integer) % 4) + integer
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(integer[i : i + 4]) for i in range(0, len(integer), 4)]
    weight = len(groups) - 1
    groups += [int(fraction[i : i + 4]) for i in range(0, len(fraction), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    sign = _NUMERIC_NEGATIVE if negative and groups else _NUMERIC_POSITIVE
    return struct.pack(f"!hhHH{len(groups)}h", len(groups), weight, sign, dscale, *groups)


def _micros_since(value: dt.datetime, epoch: dt.datetime) -> int:
    return (value - epoch) // _MICROSECOND


def _time_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _text_bytes(value: Any) -> bytes:
    return str(value).encode()


_BINARY: dict[str, Callable[[Any], bytes]] = {
    "bool": lambda v: b"\x01" if v else b"\x00",
    "int2": lambda v: struct.pack("!h", v),
    "int4": lambda v: struct.pack("!i", v),
    "int8": lambda v: struct.pack("!q", v),
    "uint2": lambda v: struct.pack("!H", v),
    "uint4": lambda v: struct.pack("!I", v),
    "uint8": lambda v: struct.pack("!Q", v),
    "mz_timestamp": lambda v: struct.pack("!Q", v),
    "oid": lambda v: struct.pack("!I", v),
    "regclass": lambda v: struct.pack("!I", v),
    "regproc": lambda v: struct.pack("!I", v),
    "regtype": lambda v: struct.pack("!I", v),
    "char": lambda v: v.encode()[:1] if isinstance(v, str) else bytes(v)[:1],
    "float4": lambda v: struct.pack("!f", _single(v)),
    "float8": lambda v: struct.pack("!d", v),
    "numeric": _numeric_binary,
    "text": _text_bytes,
    "varchar": _text_bytes,
    "bpchar": _text_bytes,
    "name": _text_bytes,
    "unknown": _text_bytes,
    "bytea": bytes,
    "date": lambda v: struct.pack("!i", (v - _POSTGRES_EPOCH_DATE).days),
    "time": lambda v: struct.pack("!q", _time_micros(v)),
    "timestamp": lambda v: struct.pack(
        "!q", _micros_since(v.replace(tzinfo=None), _POSTGRES_EPOCH)
    ),
    "timestamptz": lambda v: struct.pack("!q", _micros_since(_utc(v), _POSTGRES_EPOCH_UTC)),
    "interval": lambda v: _interval_binary(
        v if isinstance(v, Interval) else Interval.from_timedelta(v)
    ),
    "uuid": lambda v: (v if isinstance(v, uuid.UUID) else uuid.UUID(str(v))).bytes,
    "jsonb": lambda v: b"\x01" + _scalar_text(v, "jsonb").encode(),
    "json": lambda v: _scalar_text(v, "json").encode(),
}


def _interval_binary(value: Interval) -> bytes:
    return struct.pack("!qii", value.micros, value.days, value.months)


def _no_binary(type_name: str) -> LoupeError:
    return LoupeError(
        SqlState.FEATURE_NOT_SUPPORTED,
        f"binary encoding of {sqltypes.display_name(type_name)} is not implemented",
    )


def encode_binary(value: Any, type_name: str) -> bytes:
    """A non-NULL value of ``type_name`` in PostgreSQL's binary format (``array_send`` for
    arrays); 0A000 for lists and types without one."""
    element = _element(type_name)
    if element is None:
        encode = _BINARY.get(type_name)
        if encode is None:
            raise _no_binary(type_name)
        return encode(value)
    if _is_list(type_name) or element not in _BINARY:
        raise _no_binary(type_name)
    encode = _BINARY[element]
    parts = []
    has_nulls = False
    for item in value:
        if item is None:
            has_nulls = True
            parts.append(struct.pack("!i", -1))
        else:
            data = encode(item)
            parts.append(struct.pack("!i", len(data)) + data)
    element_oid = type_oid(element)
    if not parts:
        return struct.pack("!iii", 0, 0, element_oid)
    header = struct.pack("!iiiii", 1, int(has_nulls), element_oid, len(parts), 1)
    return header + b"".join(parts)


# -- parameters: text ---------------------------------------------------------------------

# boolin: any prefix of these words (``on``/``off`` need two letters), or 1 / 0.
_BOOL_WORDS = (
    ("true", True),
    ("yes", True),
    ("on", True),
    ("false", False),
    ("no", False),
    ("off", False),
)
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
_INTEGER_RANGES = {
    "int2": (-(2**15), 2**15 - 1),
    "int4": (-(2**31), 2**31 - 1),
    "int8": (-(2**63), 2**63 - 1),
    "uint2": (0, 2**16 - 1),
    "uint4": (0, 2**32 - 1),
    "uint8": (0, 2**64 - 1),
    "mz_timestamp": (0, 2**64 - 1),
    "oid": (0, 2**32 - 1),
    "regclass": (0, 2**32 - 1),
    "regproc": (0, 2**32 - 1),
    "regtype": (0, 2**32 - 1),
}
_FLOAT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
_FLOAT_WORDS = {"nan", "infinity", "+infinity", "-infinity", "inf", "+inf", "-inf"}
_DATE = r"(?P<year>\d{4,})-(?P<month>\d{1,2})-(?P<day>\d{1,2})"
_CLOCK = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
_OFFSET = (
    r"\s*(?:(?P<offset>[zZ]|[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?)"
    r"|\s(?P<zone>[A-Za-z][A-Za-z0-9_/+-]*))"
)
_DATE_TEXT = re.compile(rf"\s*{_DATE}\s*")
_TIME_TEXT = re.compile(rf"\s*{_CLOCK}\s*")
_TIMESTAMP_TEXT = re.compile(rf"\s*{_DATE}(?:(?:[tT]|\s+){_CLOCK})?(?:{_OFFSET})?\s*")


def _decode_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in ("1", "0"):
        return word == "1"
    if word[:1] != "o" or len(word) >= 2:
        for spelled, value in _BOOL_WORDS:
            if word and spelled.startswith(word):
                return value
    raise ValueError(f'invalid input syntax for type boolean: "{text}"')


def _decode_integer(text: str, type_name: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(f'invalid input syntax for type {type_name}: "{text}"')
    number = int(text)
    low, high = _INTEGER_RANGES[type_name]
    if not low <= number <= high:
        raise ValueError(f'value "{text}" is out of range for type {type_name}')
    return number


def _decode_float(text: str, type_name: str = "float8") -> float:
    """float8in / float4in: a number or NaN/Infinity; out of the type's range (overflow, or
    nonzero digits that underflow to zero) is an error, as in PostgreSQL."""
    display = sqltypes.display_name(type_name)
    word = text.strip().lower()
    if word in _FLOAT_WORDS:
        return float(word)
    match = _FLOAT.fullmatch(text)
    if match is None:
        raise ValueError(f'invalid input syntax for type {display}: "{text}"')
    number = float(text)
    if type_name == "float4" and math.isfinite(number):
        number = _single(number)
    nonzero = any(c in "123456789" for c in match[1])
    if math.isinf(number) or (number == 0 and nonzero):
        raise ValueError(f'"{text.strip()}" is out of range for type {display}')
    return float(_float4_text(number)) if type_name == "float4" else number


def _decode_numeric(text: str) -> Decimal:
    stripped = text.strip()
    if stripped.lower() not in _FLOAT_WORDS and not _FLOAT.fullmatch(stripped):
        raise ValueError(f'invalid input syntax for type numeric: "{text}"')
    try:
        return Decimal(stripped)
    except InvalidOperation:
        raise ValueError(f'invalid input syntax for type numeric: "{text}"') from None


def _clock_micros(match: re.Match[str]) -> int:
    """Microseconds since midnight; digits past the sixth round half to even (rint)."""
    fraction = Decimal("0." + (match["fraction"] or "0"))
    seconds = (int(match["hour"]) * 60 + int(match["minute"])) * 60 + int(match["second"] or 0)
    if int(match["minute"]) > 59 or int(match["second"] or 0) > 60:
        raise ValueError("date/time field value out of range")
    return seconds * 1_000_000 + round(fraction * 1_000_000)


def _decode_date(text: str) -> dt.date:
    match = _DATE_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f'invalid input syntax for type date: "{text}"')
    return dt.date(int(match["year"]), int(match["month"]), int(match["day"]))


def _decode_time(text: str) -> dt.time:
    match = _TIME_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f'invalid input syntax for type time: "{text}"')
    micros = _clock_micros(match)
    if micros >= 86_400_000_000:  # PostgreSQL's 24:00:00 has no Python time
        raise ValueError(f'date/time field value out of range: "{text}"')
    seconds, micro = divmod(micros, 1_000_000)
    return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micro)


def _offset(text: str) -> dt.timezone:
    if text in ("z", "Z"):
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours = int(digits[:-2] if len(digits) in (3, 4) else digits[:2])
    rest = digits[-2:] if len(digits) in (3, 4) else digits[2:]
    minutes = int(rest[:2] or 0)
    seconds = int(rest[2:4] or 0)
    return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))


def _decode_timestamp(text: str, with_zone: bool) -> dt.datetime:
    match = _TIMESTAMP_TEXT.fullmatch(text)
    if match is None:
        name = "timestamp with time zone" if with_zone else "timestamp"
        raise ValueError(f'invalid input syntax for type {name}: "{text}"')
    day = dt.date(int(match["year"]), int(match["month"]), int(match["day"]))
    micros = _clock_micros(match) if match["hour"] is not None else 0
    naive = dt.datetime.combine(day, dt.time()) + micros * _MICROSECOND
    if not with_zone:
        return naive  # timestamp ignores an offset, as PostgreSQL's input does
    # The session's TimeZone is UTC: a value without an offset is UTC.
    if match["zone"]:
        return _in_zone(naive, match["zone"], text)
    zone = _offset(match["offset"]) if match["offset"] else dt.UTC
    return naive.replace(tzinfo=zone).astimezone(dt.UTC)


def _in_zone(naive: dt.datetime, name: str, text: str) -> dt.datetime:
    """``naive`` as a wall-clock time in the IANA zone ``name`` (``Europe/Paris``, ``UTC``)."""
    try:
        zone = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f'time zone "{name}" not recognized') from None
    return naive.replace(tzinfo=zone).astimezone(dt.UTC)


def _decode_interval(text: str) -> Interval:
    try:
        return parse_interval(text)
    except LoupeError as error:
        raise ValueError(error.message) from None


def _decode_uuid(text: str) -> uuid.UUID:
    stripped = text.strip()
    if stripped.lower().startswith("urn:"):
        raise ValueError(f'invalid input syntax for type uuid: "{text}"')
    try:
        return uuid.UUID(stripped)
    except ValueError:
        raise ValueError(f'invalid input syntax for type uuid: "{text}"') from None


def _decode_json(text: str) -> Any:
    try:
        return parse_json(text)
    except InvalidJson:
        raise ValueError(f"invalid input syntax for type json: {text!r}") from None


def _decode_bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    # The escape format: \\ is a backslash, \nnn an octal byte, anything else itself.
    out = bytearray()
    index = 0
    raw = text.encode()
    while index < len(raw):
        if raw[index : index + 1] != b"\\":
            out.append(raw[index])
            index += 1
        elif raw[index + 1 : index + 2] == b"\\":
            out.append(0x5C)
            index += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", raw[index + 1 : index + 4]):
            out.append(int(raw[index + 1 : index + 4], 8))
            index += 4
        else:
            raise ValueError("invalid input syntax for type bytea")
    return bytes(out)


def _text_decoder(type_name: str) -> Callable[[str], Any]:
    if type_name in _INTEGER_RANGES:
        return lambda text: _decode_integer(text, type_name)
    decoders: dict[str, Callable[[str], Any]] = {
        "bool": _decode_bool,
        "float4": lambda text: _decode_float(text, "float4"),
        "float8": _decode_float,
        "numeric": _decode_numeric,
        "date": _decode_date,
        "time": _decode_time,
        "timestamp": lambda text: _decode_timestamp(text, False),
        "timestamptz": lambda text: _decode_timestamp(text, True),
        "interval": _decode_interval,
        "uuid": _decode_uuid,
        "jsonb": _decode_json,
        "json": _decode_json,
        "bytea": _decode_bytea,
    }
    return decoders.get(type_name, str)


def _type_of_oid(oid: int) -> str | None:
    if oid in (0, UNKNOWN_OID):
        return None
    for name, (extra_oid, _, _) in _EXTRA.items():
        if extra_oid == oid and name not in sqltypes.TYPES:
            return name
    for entry in sqltypes.TYPES.values():
        if entry.oid == oid and oid != LIST_OID:
            return entry.name
    return None


def decode_text(data: bytes, oid: int) -> Any:
    """A Bind parameter in text format; ``oid`` 0 (or unknown, or a list) is text."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError("invalid byte sequence for encoding UTF8") from None
    type_name = _type_of_oid(oid)
    if type_name is None:
        return text
    element = _element(type_name)
    if element is None:
        return _text_decoder(type_name)(text)
    decode = _text_decoder(element)
    return [None if item is None else decode(item) for item in split_literal(text)]


# -- parameters: binary -------------------------------------------------------------------


def _unpack(fmt: str, data: bytes) -> Any:
    try:
        return struct.unpack(fmt, data)[0]
    except struct.error:
        raise ValueError(f"insufficient data left in message ({len(data)} bytes)") from None


def _decode_numeric_binary(data: bytes) -> Decimal:
    if len(data) < 8:
        raise ValueError("insufficient data left in message")
    count, weight, sign, dscale = struct.unpack("!hhHH", data[:8])
    if len(data) != 8 + 2 * count:
        raise ValueError("invalid numeric binary length")
    if sign == _NUMERIC_NAN:
        return Decimal("NaN")
    if sign in (_NUMERIC_PINF, _NUMERIC_NINF):
        return Decimal("Infinity") if sign == _NUMERIC_PINF else Decimal("-Infinity")
    if sign not in (_NUMERIC_POSITIVE, _NUMERIC_NEGATIVE):
        raise ValueError("invalid sign in external numeric value")
    if dscale > _NUMERIC_DSCALE_MAX:
        raise ValueError("invalid scale in external numeric value")
    digits = struct.unpack(f"!{count}h", data[8:])
    if any(not 0 <= d < 10000 for d in digits):
        raise ValueError("invalid digit in external numeric value")
    value = 0
    for digit in digits:
        value = value * 10000 + digit
    # Exact: the digits and the display scale, with no context rounding.
    number = Decimal((0, tuple(int(c) for c in str(value)), 4 * (weight - count + 1)))
    with localcontext() as context:
        context.prec = _NUMERIC_MAX_DIGITS
        number = number.quantize(Decimal((0, (1,), -dscale)))
    return -number if sign == _NUMERIC_NEGATIVE else number


def _decode_jsonb_binary(data: bytes) -> Any:
    if data[:1] != b"\x01":
        raise ValueError("unsupported jsonb version number")
    return _decode_json(data[1:].decode())


def _decode_interval_binary(data: bytes) -> Interval:
    if len(data) != 16:
        raise ValueError("insufficient data left in message")
    micros, days, months = struct.unpack("!qii", data)
    return Interval(months, days, micros)


def _decode_time_binary(data: bytes) -> dt.time:
    micros = _unpack("!q", data)
    if not 0 <= micros < 86_400_000_000:
        raise ValueError("time out of range")
    seconds, micro = divmod(micros, 1_000_000)
    return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micro)


def _decode_uuid_binary(data: bytes) -> uuid.UUID:
    if len(data) != 16:
        raise ValueError("insufficient data left in message")
    return uuid.UUID(bytes=data)


def _decode_utf8(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValueError("invalid byte sequence for encoding UTF8") from None


def _datetime_after(epoch: dt.datetime, micros: int) -> dt.datetime:
    try:
        return epoch + micros * _MICROSECOND
    except OverflowError:
        raise ValueError("timestamp out of range") from None


_BINARY_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "bool": lambda data: _unpack("!?", data),
    "int2": lambda data: _unpack("!h", data),
    "int4": lambda data: _unpack("!i", data),
    "int8": lambda data: _unpack("!q", data),
    "uint2": lambda data: _unpack("!H", data),
    "uint4": lambda data: _unpack("!I", data),
    "uint8": lambda data: _unpack("!Q", data),
    "mz_timestamp": lambda data: _unpack("!Q", data),
    "oid": lambda data: _unpack("!I", data),
    "regclass": lambda data: _unpack("!I", data),
    "regproc": lambda data: _unpack("!I", data),
    "regtype": lambda data: _unpack("!I", data),
    "char": _decode_utf8,
    # Loupe holds a real as the double its shortest digits read as (as from its text).
    "float4": lambda data: float(_float4_text(_unpack("!f", data))),
    "float8": lambda data: _unpack("!d", data),
    "numeric": _decode_numeric_binary,
    "text": _decode_utf8,
    "varchar": _decode_utf8,
    "bpchar": _decode_utf8,
    "name": _decode_utf8,
    "bytea": bytes,
    "date": lambda data: _POSTGRES_EPOCH_DATE + dt.timedelta(days=_unpack("!i", data)),
    "time": _decode_time_binary,
    "timestamp": lambda data: _datetime_after(_POSTGRES_EPOCH, _unpack("!q", data)),
    "timestamptz": lambda data: _datetime_after(_POSTGRES_EPOCH_UTC, _unpack("!q", data)),
    "interval": _decode_interval_binary,
    "uuid": _decode_uuid_binary,
    "jsonb": _decode_jsonb_binary,
    "json": lambda data: _decode_json(_decode_utf8(data)),
}


def _decode_array_binary(data: bytes, element: str) -> list[Any]:
    if len(data) < 12:
        raise ValueError("insufficient data left in message")
    dimensions, _flags, element_oid = struct.unpack("!iii", data[:12])
    if dimensions == 0:
        return []
    if dimensions != 1:
        raise ValueError("only one-dimensional arrays are supported")
    if element_oid != type_oid(element):
        raise ValueError(f"wrong element type: {element_oid}")
    length, _lower = struct.unpack("!ii", data[12:20])
    decode = _BINARY_DECODERS[element]
    values: list[Any] = []
    offset = 20
    for _ in range(length):
        size = _unpack("!i", data[offset : offset + 4])
        offset += 4
        if size == -1:
            values.append(None)
            continue
        if size < 0 or offset + size > len(data):
            raise ValueError("insufficient data left in message")
        values.append(decode(data[offset : offset + size]))
        offset += size
    if offset != len(data):
        raise ValueError("incorrect binary data format in bind parameter")
    return values


def decode_binary(data: bytes, oid: int) -> Any:
    """A Bind parameter in binary format (``array_recv`` for one-dimensional arrays)."""
    type_name = _type_of_oid(oid)
    if type_name is None:
        if oid in (0, UNKNOWN_OID):
            return _decode_utf8(data)
        raise ValueError(f"no binary input function available for type {oid}")
    element = _element(type_name)
    try:
        if element is not None and element in _BINARY_DECODERS:
            return _decode_array_binary(data, element)
        decode = _BINARY_DECODERS.get(type_name)
        if decode is None:
            raise ValueError(f"no binary input function available for type {type_name}")
        return decode(data)
    except (struct.error, OverflowError):
        raise ValueError(f"insufficient data left in message ({len(data)} bytes)") from None


# Parameter types a ``Parameter`` binds as another: character types are text.
_PARAMETER_TYPES = {
    "varchar": "text",
    "bpchar": "text",
    "name": "text",
    "char": "text",
    "json": "jsonb",
}


def param_type_name(oid: int) -> str | None:
    """The Loupe type name a parameter of ``oid`` binds as; None for 0/unknown and OIDs
    Loupe has no type for (the server then types the value as written inline)."""
    type_name = _type_of_oid(oid)
    if type_name is None:
        return None
    if type_name in _PARAMETER_TYPES:
        return _PARAMETER_TYPES[type_name]
    return type_name if type_name in sqltypes.TYPES else None


__all__ = [
    "decode_binary",
    "decode_text",
    "encode_binary",
    "encode_text",
    "param_type_name",
    "type_oid",
    "type_size",
]
