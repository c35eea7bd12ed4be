"""Batches inside the engine: empty frames, and persist's format at the edges.

Inside the engine a collection batch is a polars DataFrame with data columns
``c0..c{n-1}`` then ``time`` (UInt64) and ``diff`` (Int64). At the engine's
boundary (pushed source updates, sink batches) tables are pyarrow in
persist's format: the shard's column names, ``mz_timestamp`` and ``mz_diff``.

Each type's polars dtype and Arrow type are ``loupe.sqltypes``'s (``numeric``
is a 128-bit decimal in both). Parts written before numeric was a decimal
hold it as text; it is parsed on the way in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from loupe.dataflow.batches import frame_of_rows
from loupe.sqltypes import polars_dtype, storage_type

TIME = "time"
DIFF = "diff"
PERSIST_TIME = "mz_timestamp"
PERSIST_DIFF = "mz_diff"


def column_names(arity: int) -> list[str]:
    """The engine's names of ``arity`` data columns: ``c0..``."""
    return [f"c{i}" for i in range(arity)]


def empty_frame(types: Sequence[str]) -> pl.DataFrame:
    """An empty batch of a collection with columns of ``types``, plus ``time`` and ``diff``."""
    schema: dict[str, pl.DataType] = {
        name: polars_dtype(t) for name, t in zip(column_names(len(types)), types, strict=True)
    }
    schema[TIME] = pl.UInt64()
    schema[DIFF] = pl.Int64()
    return pl.DataFrame(schema=schema)


def from_persist(
    table: pa.Table, columns: Sequence[tuple[str, str]], positions: Sequence[int] | None = None
) -> pl.DataFrame:
    """A persist-format update table as an engine batch (``c0..``, ``time``, ``diff``).

    ``positions`` names the columns ``c<position>`` instead (a reader of
    some of a shard's columns).
    """
    names = [f"c{i}" for i in (positions if positions is not None else range(len(columns)))]
    arrays = {out: table.column(name) for out, (name, _) in zip(names, columns, strict=True)}
    arrays[TIME] = table.column(PERSIST_TIME)
    arrays[DIFF] = table.column(PERSIST_DIFF)
    frame = pl.from_arrow(pa.table(arrays))
    assert isinstance(frame, pl.DataFrame)
    wanted = {out: polars_dtype(pg_type) for out, (_, pg_type) in zip(names, columns, strict=True)}
    wanted[TIME], wanted[DIFF] = pl.UInt64(), pl.Int64()
    if frame.schema == pl.Schema(wanted):
        return frame
    return frame.select(
        _import_column(pl.col(out), frame.schema[out], dtype) for out, dtype in wanted.items()
    )


# Arrow types whose Python values polars builds into the engine's dtype exactly as
# ``from_persist`` converts the column (no cast: the row path takes no other).
_ROW_TYPES: tuple[tuple[pa.DataType, pl.DataType], ...] = (
    (pa.int16(), pl.Int16()),
    (pa.int32(), pl.Int32()),
    (pa.int64(), pl.Int64()),
    (pa.float64(), pl.Float64()),
    (pa.bool_(), pl.Boolean()),
    (pa.string(), pl.String()),
    (pa.large_string(), pl.String()),
    (pa.date32(), pl.Date()),
    (pa.decimal128(38, 16), pl.Decimal(38, 16)),
)


@dataclass(frozen=True)
class RowRead:
    """How ``read_rows`` builds a small table's batch: the persist columns it reads (their
    positions among the collection's columns), and the batch's schema (every column)."""

    names: tuple[str, ...]
    positions: tuple[int, ...]
    schema: dict[str, pl.DataType]


def row_read(
    schema: pa.Schema, columns: Sequence[tuple[str, str]], kept: Sequence[int]
) -> RowRead | None:
    """How to read tables of ``schema`` by Python rows (``kept`` of ``columns`` read, the
    others NULL), or None where a column's type is not one the rows build exactly."""
    batch: dict[str, pl.DataType] = {
        f"c{i}": polars_dtype(pg_type) for i, (_, pg_type) in enumerate(columns)
    }
    held = {field.name: field.type for field in schema}
    for i in kept:
        arrow = held.get(columns[i][0])
        if not any(arrow == a and batch[f"c{i}"] == d for a, d in _ROW_TYPES):
            return None
    if held.get(PERSIST_TIME) != pa.uint64() or held.get(PERSIST_DIFF) != pa.int64():
        return None
    batch[TIME], batch[DIFF] = pl.UInt64(), pl.Int64()
    return RowRead(tuple(columns[i][0] for i in kept), tuple(kept), batch)


def read_rows(table: pa.Table, how: RowRead) -> pl.DataFrame:
    """``from_persist`` of a small ``table`` by its Python rows: a few microseconds a row
    where converting the Arrow columns and padding the unread ones costs two polars calls."""
    values = [table.column(name).to_pylist() for name in how.names]
    times = table.column(PERSIST_TIME).to_pylist()
    diffs = table.column(PERSIST_DIFF).to_pylist()
    width = len(how.schema) - 2
    rows = []
    for r, (time, diff) in enumerate(zip(times, diffs, strict=True)):
        row: list[Any] = [None] * width
        for position, column in zip(how.positions, values, strict=True):
            row[position] = column[r]
        rows.append((*row, time, diff))
    return frame_of_rows(rows, how.schema)


def to_persist(frame: pl.DataFrame, columns: Sequence[tuple[str, str]]) -> pa.Table:
    """An engine batch as a persist-format update table with the shard's column names."""
    selected = [
        _export_column(pl.col(f"c{i}"), pg_type).alias(name)
        for i, (name, pg_type) in enumerate(columns)
    ]
    selected.append(pl.col(TIME).cast(pl.UInt64).alias(PERSIST_TIME))
    selected.append(pl.col(DIFF).cast(pl.Int64).alias(PERSIST_DIFF))
    table = frame.select(selected).to_arrow()
    return table.cast(pa.schema([_small_offsets(field) for field in table.schema]))


def _small_offsets(field: pa.Field) -> pa.Field:
    """Persist's schemas use 32-bit offsets (``string``), polars exports ``large_string``."""
    if pa.types.is_large_string(field.type):
        return field.with_type(pa.string())
    if pa.types.is_large_binary(field.type):
        return field.with_type(pa.binary())
    if pa.types.is_large_list(field.type):
        return field.with_type(pa.list_(field.type.value_type))
    return field


def _import_column(column: pl.Expr, held: pl.DataType, dtype: pl.DataType) -> pl.Expr:
    """A column held as ``held`` as ``dtype`` (numeric text of older parts, leniently)."""
    if held == pl.Utf8 and isinstance(dtype, pl.Decimal):
        return column.str.strip_chars().cast(dtype, strict=False)
    return column.cast(dtype)


def _export_column(column: pl.Expr, pg_type: str) -> pl.Expr:
    stored = storage_type(pg_type)
    if stored != pg_type:  # e.g. int2 in an int4 column
        return column.cast(polars_dtype(stored))
    return column


def numeric_text(column: pl.Expr) -> pl.Expr:
    """A ``numeric`` as Materialize prints it: no trailing zeros, no point when integral."""
    return column.cast(pl.Utf8).str.strip_chars_end("0").str.strip_chars_end(".")
