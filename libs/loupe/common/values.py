"""Python values <-> ``common.v1.Value`` and rows, at the transport edge.

An interval is ``loupe.interval.Interval``; ``format_interval`` (its text) is re-exported here.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from loupe.common.jsonb import Jsonb
from loupe.common.jsonb import text as jsonb_text
from loupe.interval import Interval, format_interval
from loupe.proto.common.v1 import common_pb2

__all__ = ["format_interval", "from_row", "from_value", "to_row", "to_value"]

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_DATE = dt.date(1970, 1, 1)
NAIVE_EPOCH = dt.datetime(1970, 1, 1)


def _time_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def numeric_text(value: Decimal) -> str:
    """A numeric as Materialize prints it: no exponent, no trailing zeros (``1.50`` is ``1.5``)."""
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def to_value(value: Any) -> common_pb2.Value:
    if value is None:
        return common_pb2.Value()
    if isinstance(value, bool):
        return common_pb2.Value(bool_value=value)
    if isinstance(value, int):
        if value >= 2**63:  # only unsigned types reach past int8
            return common_pb2.Value(uint_value=value)
        return common_pb2.Value(int_value=value)
    if isinstance(value, float):
        return common_pb2.Value(float_value=value)
    if isinstance(value, Jsonb):
        return common_pb2.Value(jsonb_value=str(value))
    if isinstance(value, str):
        return common_pb2.Value(text_value=value)
    if isinstance(value, bytes):
        return common_pb2.Value(bytes_value=value)
    if isinstance(value, Decimal):
        return common_pb2.Value(numeric_value=numeric_text(value))
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # timestamp without time zone: stays naive on the other side
            naive = value - NAIVE_EPOCH
            return common_pb2.Value(timestamp_naive_us=naive // dt.timedelta(microseconds=1))
        return common_pb2.Value(timestamp_us=(value - EPOCH) // dt.timedelta(microseconds=1))
    if isinstance(value, dt.date):
        return common_pb2.Value(date_days=(value - EPOCH_DATE).days)
    if isinstance(value, dict):
        return common_pb2.Value(jsonb_value=jsonb_text(value))
    if isinstance(value, list | tuple):
        return common_pb2.Value(
            list_value=common_pb2.ValueList(values=[to_value(v) for v in value])
        )
    if isinstance(value, Interval):
        return common_pb2.Value(interval_value=interval_value(value))
    if isinstance(value, dt.timedelta):  # a duration: an interval of microseconds
        return common_pb2.Value(interval_value=interval_value(Interval.from_timedelta(value)))
    if isinstance(value, dt.time):
        return common_pb2.Value(time_us=_time_micros(value))
    if isinstance(value, uuid.UUID):
        return common_pb2.Value(uuid_value=str(value))
    raise TypeError(f"cannot encode {type(value).__name__} as a Value")


def from_value(value: common_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    raw = getattr(value, kind)
    if kind == "timestamp_us":
        return EPOCH + dt.timedelta(microseconds=raw)
    if kind == "timestamp_naive_us":
        return NAIVE_EPOCH + dt.timedelta(microseconds=raw)
    if kind == "time_us":
        seconds, micros = divmod(raw, 1_000_000)
        return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micros)
    if kind == "date_days":
        return EPOCH_DATE + dt.timedelta(days=raw)
    if kind == "numeric_value":
        return Decimal(raw)
    if kind == "jsonb_value":
        return json.loads(raw)
    if kind == "list_value":
        return [from_value(v) for v in raw.values]
    if kind == "interval_value":
        return Interval(raw.months, raw.days, raw.micros)
    if kind == "uuid_value":
        return uuid.UUID(raw)
    return raw


def interval_value(value: Interval) -> common_pb2.IntervalValue:
    return common_pb2.IntervalValue(months=value.months, days=value.days, micros=value.micros)


def to_row(values: Sequence[Any]) -> common_pb2.Row:
    return common_pb2.Row(values=[to_value(v) for v in values])


def from_row(row: common_pb2.Row) -> tuple[Any, ...]:
    return tuple(from_value(v) for v in row.values)
