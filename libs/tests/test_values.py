"""Values cross the wire and come back as the same Python values."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from loupe.common.values import from_row, to_row, to_value

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
]


def test_row_round_trip():
    """Every supported type survives to_row/from_row unchanged."""
    assert from_row(to_row(SAMPLES)) == tuple(SAMPLES)


def test_unsupported_type_is_named():
    """An unknown type fails with its name rather than a generic error."""
    with pytest.raises(TypeError, match="set"):
        to_value({1, 2})
