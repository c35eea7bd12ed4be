"""How the console writes values: sizes, durations, times, hydration states.

Colour is never the only carrier of a state: ``hydration_state`` gives the word (and
symbol) a page prints beside its colour, so a state reads the same without colour.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

_UNITS = ("bytes", "kB", "MB", "GB", "TB", "PB")


def size(value: Any) -> str:
    """Bytes as ``pg_size_pretty`` writes them (10240 → '10 kB')."""
    if value is None:
        return "—"
    number = int(value)
    magnitude = abs(number)
    unit = 0
    while magnitude >= 10 * 1024 and unit < len(_UNITS) - 1:
        magnitude = (magnitude + 512) // 1024
        unit += 1
    return f"{'-' if number < 0 else ''}{magnitude} {_UNITS[unit]}"


def duration(value: Any) -> str:
    """A duration (``timedelta``, or nanoseconds as a number) as '1.2 s', '350 ms', '2 min 5 s'."""
    if value is None:
        return "—"
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    else:
        seconds = float(value) / 1e9
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def timestamp(value: Any) -> str:
    """A point in time in UTC, to the second ('2026-11-26 17:02:03 UTC')."""
    if value is None:
        return "—"
    if isinstance(value, int | float | decimal.Decimal):
        value = datetime.datetime.fromtimestamp(float(value) / 1000, datetime.UTC)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def iso(value: Any) -> str:
    """A point in time as ISO 8601 (for ``<time datetime=…>``)."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat()
    return "" if value is None else str(value)


def number(value: Any) -> str:
    """An integer with thousands separators ('1,234,567')."""
    if value is None:
        return "—"
    return f"{int(value):,}"


def percent(done: Any, total: Any) -> str:
    if not total:
        return "—"
    return f"{min(100.0, 100.0 * float(done or 0) / float(total)):.0f} %"


HYDRATION_STATES = {
    "hydrated": ("✓", "hydrated"),
    "hydrating": ("◐", "hydrating"),
    "not-started": ("○", "not started"),
    "unknown": ("?", "no report"),
}


def hydration_state(hydrated: bool | None, records_done: Any = None) -> str:
    """The state a node or object is in: hydrated, hydrating (work reported), not-started."""
    if hydrated:
        return "hydrated"
    if hydrated is None:
        return "unknown"
    return "hydrating" if records_done else "not-started"


def state_label(state: str) -> str:
    symbol, word = HYDRATION_STATES.get(state, ("?", state))
    return f"{symbol} {word}"


def json_default(value: Any) -> Any:
    """What ``json.dumps`` cannot write itself: times, durations, decimals."""
    if isinstance(value, datetime.datetime | datetime.date):
        return iso(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


FILTERS = {
    "size": size,
    "duration": duration,
    "timestamp": timestamp,
    "iso": iso,
    "number": number,
    "state_label": state_label,
}
