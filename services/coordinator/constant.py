"""Queries that read no relation (``SELECT 1``), evaluated in the coordinator with polars."""

from __future__ import annotations

from typing import Any

import polars as pl

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.results import Column


def polars_type_name(dtype: pl.DataType) -> str:
    """The PostgreSQL-style type name of a polars column type."""
    if dtype == pl.Boolean:
        return "bool"
    if dtype in (pl.Int8, pl.Int16, pl.Int32):
        return "int4"
    if dtype == pl.Int64:
        return "int8"
    if dtype.is_unsigned_integer():
        return "uint8"
    if dtype.is_float():
        return "float8"
    if dtype.is_decimal():
        return "numeric"
    if isinstance(dtype, pl.Datetime):
        return "timestamptz"
    if dtype == pl.Date:
        return "date"
    if isinstance(dtype, pl.Duration):
        return "interval"
    if dtype == pl.Binary:
        return "bytea"
    if isinstance(dtype, pl.List | pl.Array):
        return "list"
    return "text"


def evaluate_constant(sql: str) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """Run ``sql`` (which reads no table) with polars; returns (columns, rows)."""
    try:
        frame = pl.SQLContext().execute(sql, eager=True)
    except pl.exceptions.SQLSyntaxError as error:
        raise LoupeError(SqlState.SYNTAX_ERROR, _first_line(error)) from None
    except pl.exceptions.SQLInterfaceError as error:
        raise LoupeError(SqlState.FEATURE_NOT_SUPPORTED, _first_line(error)) from None
    except pl.exceptions.ColumnNotFoundError as error:
        raise LoupeError(SqlState.UNDEFINED_COLUMN, _first_line(error)) from None
    except pl.exceptions.PolarsError as error:
        raise LoupeError(SqlState.DATA_EXCEPTION, _first_line(error)) from None
    columns = tuple((name, polars_type_name(dtype)) for name, dtype in frame.schema.items())
    return columns, frame.rows()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
