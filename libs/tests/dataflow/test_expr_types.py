"""Engine types: PostgreSQL types as polars dtypes, and persist's format at the engine's edges."""

from __future__ import annotations

import datetime
from decimal import Decimal

import polars as pl
import pyarrow as pa
import pytest

from loupe.dataflow.types import empty_frame, from_persist, numeric_text, polars_dtype, to_persist
from loupe.persist.shard import arrow_schema

COLUMNS = (
    ("id", "int4"),
    ("total", "int8"),
    ("price", "numeric"),
    ("ratio", "float8"),
    ("name", "text"),
    ("ok", "bool"),
    ("day", "date"),
    ("at", "timestamptz"),
    ("span", "interval"),
)


def persist_table() -> pa.Table:
    """Two updates in persist's own schema for ``COLUMNS``."""
    at = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    data = {
        "id": [1, None],
        "total": [2**40, -3],
        "price": [Decimal("12.50"), Decimal("7")],
        "ratio": [0.5, None],
        "name": ["héllo", ""],
        "ok": [True, None],
        "day": [datetime.date(2024, 2, 29), None],
        "at": [at, None],
        "span": [{"months": 1, "days": 2, "micros": 25 * 3_600_000_000}, None],
        "mz_timestamp": [3, 4],
        "mz_diff": [1, -2],
    }
    return pa.table(data, schema=arrow_schema(COLUMNS))


def test_from_persist_names_columns_c0_and_keeps_numeric_exact() -> None:
    frame = from_persist(persist_table(), COLUMNS)
    assert frame.columns == [*(f"c{i}" for i in range(len(COLUMNS))), "time", "diff"]
    assert frame.schema["c2"] == pl.Decimal(38, 16)
    assert frame["c2"].to_list() == [Decimal("12.5"), Decimal(7)]
    assert frame.schema["time"] == pl.UInt64
    assert frame["diff"].to_list() == [1, -2]
    assert [frame.schema[f"c{i}"] for i in range(len(COLUMNS))] == [
        polars_dtype(t) for _, t in COLUMNS
    ]


def test_to_persist_round_trips_in_persists_own_schema() -> None:
    """Out of the engine, a batch has the shard's names and arrow types (numeric a decimal)."""
    table = to_persist(from_persist(persist_table(), COLUMNS), COLUMNS)
    assert table.schema == arrow_schema(COLUMNS)
    original = persist_table()
    for name, _ in COLUMNS:
        assert table.column(name).to_pylist() == original.column(name).to_pylist(), name


def test_empty_frame_has_the_engine_schema() -> None:
    frame = empty_frame(["int2", "text", "interval"])
    assert frame.height == 0
    assert dict(frame.schema) == {
        "c0": pl.Int32,
        "c1": pl.Utf8,
        "c2": pl.Struct({"months": pl.Int32, "days": pl.Int32, "micros": pl.Int64}),
        "time": pl.UInt64,
        "diff": pl.Int64,
    }


def test_unknown_types_are_refused() -> None:
    with pytest.raises(ValueError, match="no engine representation"):
        polars_dtype("geometry")


def test_numeric_text_trims_trailing_zeros_and_never_uses_an_exponent() -> None:
    """numeric prints as Materialize's does: ``1.50`` is ``1.5``, ``1e-7`` is ``0.0000001``."""
    values = ["0.3", "3.000", "0.0000001", "100000000000000000000", "-2.675", "0", None]
    series = pl.Series(
        [None if v is None else Decimal(v) for v in values], dtype=pl.Decimal(38, 16)
    )
    texts = pl.DataFrame({"n": series}).select(numeric_text(pl.col("n")))["n"].to_list()
    assert texts == ["0.3", "3", "0.0000001", "100000000000000000000", "-2.675", "0", None]


def test_from_persist_parses_numeric_text_of_older_parts_and_reads_columns_by_position() -> None:
    """Parts written when numeric was text still read exactly; ``positions`` names the columns."""
    table = pa.table(
        {
            "n": ["12.50", " 7", "0.1", None],
            "s": ["a", "b", "c", "d"],
            "mz_timestamp": [1, 1, 2, 2],
            "mz_diff": [1, 1, 1, -1],
        },
        schema=pa.schema(
            [
                ("n", pa.string()),
                ("s", pa.string()),
                ("mz_timestamp", pa.uint64()),
                ("mz_diff", pa.int64()),
            ]
        ),
    )
    frame = from_persist(table, [("n", "numeric")], positions=[3])
    assert frame.columns == ["c3", "time", "diff"]
    assert frame["c3"].to_list() == [Decimal("12.5"), Decimal(7), Decimal("0.1"), None]
