"""Values cross the wire and come back as the same Python values."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from loupe.common.values import format_interval, from_row, from_value, to_row, to_value
from loupe.interval import Interval

SAMPLES = [
    None,
    True,
    -(2**62),
    1.5,
    "naïve text",
    b"\x00\x01",
    Decimal("12.50"),
    dt.datetime(2026, 11, 21, 12, 30, 1, 123456, tzinfo=dt.UTC),
    dt.date(1999, 12, 31),
    {"k": [1, 2]},
    [1, 2, 3],
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    2**64 - 1,
]


def test_row_round_trip():
    """Every supported type survives to_row/from_row unchanged."""
    assert from_row(to_row(SAMPLES)) == tuple(SAMPLES)


def test_uuids_and_unsigned_integers_have_their_own_kinds():
    """A uuid is no text on the other side; a uint8 above int8's range still fits."""
    assert to_value(uuid.UUID(int=1)).WhichOneof("kind") == "uuid_value"
    assert to_value(2**63).WhichOneof("kind") == "uint_value"
    assert to_value(2**63 - 1).WhichOneof("kind") == "int_value"


def test_unsupported_type_is_named():
    """An unknown type fails with its name rather than a generic error."""
    with pytest.raises(TypeError, match="set"):
        to_value({1, 2})


@pytest.mark.parametrize(
    ("interval", "text"),
    [
        (Interval(micros=1_000_000), "00:00:01"),
        (Interval(days=1), "1 day"),
        (Interval(days=2, micros=10_800_500_000), "2 days 03:00:00.5"),
        (Interval(micros=-300_000_000), "-00:05:00"),
        (Interval(days=-1), "-1 days"),  # PostgreSQL's singular is for +1 only
        (Interval(days=-1, micros=-3_600_000_000), "-1 days -01:00:00"),
        (Interval(months=14, days=3, micros=4 * 3_600_000_000), "1 year 2 mons 3 days 04:00:00"),
        (Interval(micros=25 * 3_600_000_000), "25:00:00"),  # hours stay hours
        (Interval(days=-1, micros=2 * 3_600_000_000), "-1 days +02:00:00"),
    ],
)
def test_intervals_travel_as_three_fields_and_print_like_postgres(interval, text):
    """Intervals travel as months, days and microseconds and print as PostgreSQL prints them."""
    assert from_value(to_value(interval)) == interval
    assert format_interval(interval) == text


def test_a_duration_travels_as_an_interval_of_days_and_microseconds():
    """As psycopg sends a timedelta to PostgreSQL: its days, then its seconds."""
    assert from_value(to_value(dt.timedelta(days=1, hours=1))) == Interval(0, 1, 3_600_000_000)
    assert str(from_value(to_value(-dt.timedelta(minutes=5)))) == "-1 days +23:55:00"
