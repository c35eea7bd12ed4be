"""Batches inside the engine: empty frames, and persist's format at the edges.

Inside the engine a collection batch is a polars DataFrame with data columns
``c0..c{n-1}`` then ``time`` (UInt64) and ``diff`` (Int64). At the engine's
boundary (pushed source updates, sink batches) tables are pyarrow in
persist's format: the shard's column names, ``mz_timestamp`` and ``mz_diff``.

Each type's polars dtype is ``loupe.sqltypes``'s. ``numeric`` is Float64 inside the engine (exact decimals are a documented
gap); persist stores it as text, so it is cast on the way in and out.
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from loupe.sqltypes import polars_dtype, storage_type

TIME = "time"
DIFF = "diff"
PERSIST_TIME = "mz_timestamp"
PERSIST_DIFF = "mz_diff"

# Persist's arrow type when it differs from the engine's (see loupe.sqltypes).
_PERSIST_TEXT = {"numeric"}


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
    some of a shard's columns). numeric text is parsed by Arrow before the
    frame exists: several times faster than polars' string cast.
    """
    names = [f"c{i}" for i in (positions if positions is not None else range(len(columns)))]
    arrays = {
        out: _import_array(table.column(name), pg_type)
        for out, (name, pg_type) in zip(names, columns, strict=True)
    }
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


def _import_array(column: pa.ChunkedArray, pg_type: str) -> pa.ChunkedArray:
    """numeric text as float64 when Arrow can parse all of it (else polars does, leniently)."""
    if pg_type not in _PERSIST_TEXT:
        return column
    try:
        return pc.cast(column, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return column


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
    """A column held as ``held`` as ``dtype``; numeric text Arrow could not parse, leniently."""
    if held == pl.Utf8 and dtype == pl.Float64:
        return column.str.strip_chars().cast(pl.Float64, strict=False)
    return column.cast(dtype)


def _export_column(column: pl.Expr, pg_type: str) -> pl.Expr:
    if pg_type in _PERSIST_TEXT:
        return numeric_text(column)
    stored = storage_type(pg_type)
    if stored != pg_type:  # e.g. int2 in an int4 column
        return column.cast(polars_dtype(stored))
    return column


def numeric_text(column: pl.Expr) -> pl.Expr:
    """A Float64 ``numeric`` as PostgreSQL prints it: no ``.0``, no exponent, no float noise.

    Values are rounded to 15 significant digits (what a Float64 holds
    exactly), so ``0.1 + 0.2`` prints ``0.3`` as an exact numeric would.
    """
    integral = column.is_finite() & (column == column.round(0)) & (column.abs() < 1e18)
    rounded = column.round_sig_figs(_SIGNIFICANT_DIGITS).cast(pl.Utf8)
    fractional = rounded.map_batches(_without_exponent, return_dtype=pl.Utf8)
    return (
        pl.when(integral)
        .then(column.cast(pl.Int64, strict=False).cast(pl.Utf8))
        .when(column.is_nan())
        .then(pl.lit("NaN"))
        .when(column.is_infinite())
        .then(pl.when(column > 0).then(pl.lit("Infinity")).otherwise(pl.lit("-Infinity")))
        .otherwise(fractional)
    )


_SIGNIFICANT_DIGITS = 15


def _without_exponent(texts: pl.Series) -> pl.Series:
    """``1e-7`` as ``0.0000001`` (numeric never prints an exponent); rare, so per distinct value."""
    exponent = texts.str.contains("e", literal=True).fill_null(False)
    if not exponent.any():
        return texts
    plain = {t: format(decimal.Decimal(t), "f") for t in texts.filter(exponent).unique()}
    return texts.replace(plain)
