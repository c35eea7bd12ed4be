"""Queries that read no relation (``SELECT 1``), evaluated in the coordinator with polars."""

from __future__ import annotations

from typing import Any

import polars as pl
import sqlglot
import sqlglot.errors
from sqlglot import exp

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


# A one-row relation that FROM-less SELECTs read, as in PostgreSQL: polars
# evaluates `SELECT 1 WHERE false` without a FROM to one row, not none.
ONE_ROW = "loupe_one_row"


def _over_one_row(sql: str) -> str:
    try:
        tree = sqlglot.parse_one(sql, dialect="postgres")
    except sqlglot.errors.ParseError:
        return sql  # polars reports the error in its own words below
    for select in tree.find_all(exp.Select):
        if select.args.get("from") is None and select.args.get("from_") is None:
            select.from_(ONE_ROW, copy=False)
    return tree.sql(dialect="postgres")


def evaluate_constant(sql: str) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """Run ``sql`` (which reads no table) with polars; returns (columns, rows)."""
    context = pl.SQLContext({ONE_ROW: pl.DataFrame({"loupe_one_row_": [0]})})
    try:
        frame = context.execute(_over_one_row(sql), eager=True)
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
