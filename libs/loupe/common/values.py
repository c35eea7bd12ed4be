"""Python values <-> ``common.v1.Value`` and rows, at the transport edge."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from loupe.common.jsonb import Jsonb
from loupe.common.jsonb import text as jsonb_text
from loupe.proto.common.v1 import common_pb2

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_DATE = dt.date(1970, 1, 1)
NAIVE_EPOCH = dt.datetime(1970, 1, 1)


def _time_micros(value: dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


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
        return common_pb2.Value(numeric_value=str(value))
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
    if isinstance(value, dt.timedelta):
        return common_pb2.Value(interval_us=value // dt.timedelta(microseconds=1))
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
    if kind == "interval_us":
        return dt.timedelta(microseconds=raw)
    if kind == "uuid_value":
        return uuid.UUID(raw)
    return raw


def format_interval(value: dt.timedelta) -> str:
    """PostgreSQL's text form of an interval: ``1 day 02:03:04.5``."""
    micros = value // dt.timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), 86_400_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    clock = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fraction:
        clock += f".{fraction:06d}".rstrip("0")
    if days:
        unit = "day" if days == 1 and not sign else "days"  # PostgreSQL prints "-1 days"
        return f"{sign}{days} {unit}" + ("" if rest == 0 else f" {clock}")
    return clock


def to_row(values: Sequence[Any]) -> common_pb2.Row:
    return common_pb2.Row(values=[to_value(v) for v in values])


def from_row(row: common_pb2.Row) -> tuple[Any, ...]:
    return tuple(from_value(v) for v in row.values)
