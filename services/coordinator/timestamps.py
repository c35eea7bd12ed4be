"""``AS OF`` clauses: the timestamp (milliseconds since the Unix epoch) a query reads at.

``AS OF 1712345678901`` reads at that many milliseconds; a timestamp
(``AS OF '2024-04-05 19:34:38+00'``, ``AS OF now() - INTERVAL '1 minute'``)
reads at its instant (UTC when it has no time zone). Any constant expression
works; it is evaluated by the engine (``constant.evaluate_constant``),
with ``now()`` the wall clock's time.
"""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal
from typing import Any

from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.common.values import EPOCH
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.resolve import MZ_NOW

MAX_TIMESTAMP = 2**64 - 1


def as_of_timestamp(expression: exp.Expression, position: int = 0) -> int:
    """The timestamp an ``AS OF`` expression names; 22023 when it names none."""
    for node in expression.walk():
        if isinstance(node, exp.Anonymous) and str(node.name).lower() == MZ_NOW:
            raise _invalid("AS OF cannot use mz_now(): it is the time AS OF chooses", position)
        if isinstance(node, exp.Column | exp.Subquery | exp.Select):
            raise _invalid("AS OF must be a constant expression", position)
    if isinstance(expression, exp.Literal):
        value: Any = expression.this if expression.is_string else Decimal(str(expression.this))
    else:
        try:
            _, rows = evaluate_constant(
                exp.select(expression.copy()), query_time=int(time.time() * 1000)
            )
        except LoupeError as error:
            raise _invalid(f"invalid AS OF expression: {error.message}", position) from None
        value = rows[0][0] if rows else None
    timestamp = _to_millis(value)
    if timestamp is None or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise _invalid(
            f"AS OF must be a timestamp or a number of milliseconds since the Unix epoch,"
            f" not {value!r}",
            position,
        )
    return timestamp


def _to_millis(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float | Decimal):
        return int(value) if value == int(value) else None
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - EPOCH) // dt.timedelta(milliseconds=1)
    return None


def _invalid(message: str, position: int) -> LoupeError:
    return LoupeError(SqlState.INVALID_PARAMETER_VALUE, message, position=position)
