"""INSERT, UPDATE and DELETE on user tables: from statements to updates.

- ``INSERT … VALUES``: literals are converted directly (a quoted literal is
  parsed as its column's type, as in PostgreSQL); any other expression is
  evaluated with polars, one row at a time. ``INSERT … SELECT`` gets its rows
  from a peek (the coordinator runs it) and converts them the same way.
- ``UPDATE`` and ``DELETE`` are evaluated with polars over the table's
  contents at the time of the write (``TableStore.write(read=True)``): the
  matching rows are retracted and, for UPDATE, their new versions inserted,
  in one part.

Expressions may refer to the table's columns only (no subqueries); an
unknown column is 42703, another table's name 42P01.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.resolve import GENERATE_DIALECT, MZ_NOW
from loupe.coordinator.table_store import Plan, Update
from loupe.coordinator.tables import (
    Coercer,
    NumberLiteral,
    Table,
    TableColumn,
    UntypedString,
)

_NOT_LITERAL = object()
# The names the contents and the row index have in the polars query.
_FRAME = "__loupe_table"
_ROW = "__loupe_row"


def literal_value(expression: exp.Expression) -> Any:
    """The value of a literal (``_NOT_LITERAL`` when ``expression`` is not one)."""
    if isinstance(expression, exp.Paren):
        return literal_value(expression.this)
    if isinstance(expression, exp.Null):
        return None
    if isinstance(expression, exp.Boolean):
        return bool(expression.this)
    if isinstance(expression, exp.Literal):
        if expression.is_string:
            return UntypedString(expression.this)
        return NumberLiteral(expression.this)
    inner = expression.this if isinstance(expression, exp.Neg) else None
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return NumberLiteral(f"-{inner.this}")
    return _NOT_LITERAL


def refuse_mz_now(expressions: Sequence[exp.Expression | None], statement: str) -> None:
    for expression in expressions:
        if expression is None:
            continue
        for node in expression.walk():
            if isinstance(node, exp.Anonymous) and str(node.name).lower() == MZ_NOW:
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    f"calls to mz_now() in {statement} are not supported",
                )


# -- INSERT -------------------------------------------------------------------------------


def target_columns(table: Table, columns: Sequence[TableColumn] | None, width: int) -> list:
    """The columns ``width`` values per row go to; 42601 when there are too many."""
    if columns is None:
        if width > len(table.columns):
            raise LoupeError(
                SqlState.SYNTAX_ERROR, "INSERT has more expressions than target columns"
            )
        return list(table.columns[:width])
    if width > len(columns):
        raise LoupeError(SqlState.SYNTAX_ERROR, "INSERT has more expressions than target columns")
    if width < len(columns):
        raise LoupeError(SqlState.SYNTAX_ERROR, "INSERT has more target columns than expressions")
    return list(columns)


def values_rows(
    table: Table,
    columns: Sequence[TableColumn] | None,
    rows: Sequence[Sequence[exp.Expression]],
) -> list[tuple[Any, ...]]:
    """The rows of ``INSERT … VALUES``, converted to the table's columns."""
    refuse_mz_now([e for row in rows for e in row], "INSERT")
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise LoupeError(SqlState.SYNTAX_ERROR, "VALUES lists must all be the same length")
    width = widths.pop() if widths else 0
    targets = target_columns(table, columns, width)
    coercer = Coercer(table)
    return [coercer.row(_row_values(row), targets) for row in rows]


def _row_values(row: Sequence[exp.Expression]) -> list[Any]:
    values = [literal_value(e) for e in row]
    computed = [i for i, value in enumerate(values) if value is _NOT_LITERAL]
    if computed:
        projections = ", ".join(
            f'{row[i].sql(dialect=GENERATE_DIALECT)} AS "c{i}"' for i in computed
        )
        _, results = evaluate_constant(f"SELECT {projections}")
        for index, value in zip(computed, results[0], strict=True):
            values[index] = value
    return values


def query_rows(
    table: Table, columns: Sequence[TableColumn] | None, rows: Sequence[Sequence[Any]], width: int
) -> list[tuple[Any, ...]]:
    """The rows of ``INSERT … SELECT`` (typed values), converted to the table's columns."""
    targets = target_columns(table, columns, width)
    coercer = Coercer(table)
    return [coercer.row(row, targets) for row in rows]


def insert_plan(rows: list[tuple[Any, ...]]) -> Plan:
    def plan(_contents: pa.Table | None) -> tuple[list[Update], int]:
        return [(row, 1) for row in rows], len(rows)

    return plan


# -- UPDATE and DELETE ----------------------------------------------------------------------


def _prepare(expression: exp.Expression, table: Table, alias: str) -> exp.Expression:
    """``expression`` normalized and checked: only this table's columns, no subqueries."""
    prepared = normalize_identifiers(expression.copy(), dialect=GENERATE_DIALECT)
    for node in prepared.walk():
        if isinstance(node, exp.Subquery | exp.Select | exp.Table):
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "subqueries in UPDATE and DELETE are not supported",
            )
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            qualifier = node.table
            if qualifier and qualifier != alias:
                raise LoupeError(
                    SqlState.UNDEFINED_TABLE,
                    f'missing FROM-clause entry for table "{qualifier}"',
                )
            if table.column(node.name) is None:
                raise LoupeError(SqlState.UNDEFINED_COLUMN, f'column "{node.name}" does not exist')
            # Schema-qualified references (public.t.a) refer to the alias.
            node.set("db", None)
            node.set("catalog", None)
    return prepared


def update_plan(
    table: Table,
    alias: str | None,
    assignments: Sequence[tuple[TableColumn, exp.Expression]],
    where: exp.Expression | None,
) -> Plan:
    refuse_mz_now([e for _, e in assignments] + [where], "UPDATE")
    name = alias or table.name
    literal = {column.name: literal_value(e) for column, e in assignments}
    computed = [
        (column, _prepare(e, table, name))
        for column, e in assignments
        if literal[column.name] is _NOT_LITERAL
    ]
    condition = _prepare(where, table, name) if where is not None else None
    coercer = Coercer(table)
    positions = {column.name: i for i, column in enumerate(table.columns)}

    def plan(contents: pa.Table | None) -> tuple[list[Update], int]:
        assert contents is not None
        projections = [f'"{_ROW}"'] + [
            f'{e.sql(dialect=GENERATE_DIALECT)} AS "__set_{i}"' for i, (_, e) in enumerate(computed)
        ]
        matched = _evaluate(contents, table, name, projections, condition)
        old_rows = _rows(contents)
        updates: list[Update] = []
        for match in matched:
            old = old_rows[match[0]]
            new = list(old)
            for column, value in literal.items():
                if value is not _NOT_LITERAL:
                    new[positions[column]] = coercer.value(value, table.columns[positions[column]])
            for (column, _), value in zip(computed, match[1:], strict=True):
                new[positions[column.name]] = coercer.value(value, column)
            updates.append((old, -1))
            updates.append((tuple(new), 1))
        return updates, len(matched)

    return plan


def delete_plan(table: Table, alias: str | None, where: exp.Expression | None) -> Plan:
    refuse_mz_now([where], "DELETE")
    name = alias or table.name
    condition = _prepare(where, table, name) if where is not None else None

    def plan(contents: pa.Table | None) -> tuple[list[Update], int]:
        assert contents is not None
        matched = _evaluate(contents, table, name, [f'"{_ROW}"'], condition)
        old_rows = _rows(contents)
        return [(old_rows[match[0]], -1) for match in matched], len(matched)

    return plan


def _rows(contents: pa.Table) -> list[tuple[Any, ...]]:
    columns = [contents.column(i).to_pylist() for i in range(contents.num_columns)]
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(contents.num_rows)]


def _evaluate(
    contents: pa.Table,
    table: Table,
    name: str,
    projections: list[str],
    condition: exp.Expression | None,
) -> list[tuple[Any, ...]]:
    """``SELECT projections FROM contents AS name WHERE condition``, with row numbers."""
    frame = pl.from_arrow(contents)
    assert isinstance(frame, pl.DataFrame)
    # numeric is stored as text: compare and compute with it as a number.
    numeric = [
        pl.col(c.name).cast(pl.Float64) for c in table.columns if c.storage_type == "numeric"
    ]
    if numeric:
        frame = frame.with_columns(numeric)
    frame = frame.with_row_index(_ROW)
    sql = f'SELECT {", ".join(projections)} FROM "{_FRAME}" AS "{name}"'
    if condition is not None:
        sql += f" WHERE {condition.sql(dialect=GENERATE_DIALECT)}"
    try:
        result = pl.SQLContext(frames={_FRAME: frame}).execute(sql, eager=True)
    except pl.exceptions.PolarsError as error:
        raise polars_error(error) from None
    return result.rows()


def polars_error(error: Exception) -> LoupeError:
    """A SQLSTATE error for a polars failure evaluating a statement's expressions."""
    message = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if isinstance(error, pl.exceptions.ColumnNotFoundError):
        return LoupeError(SqlState.UNDEFINED_COLUMN, message)
    if isinstance(error, pl.exceptions.SQLSyntaxError):
        return LoupeError(SqlState.SYNTAX_ERROR, message)
    if isinstance(error, pl.exceptions.SQLInterfaceError):
        code = "42883" if "function" in message.lower() else SqlState.FEATURE_NOT_SUPPORTED
        return LoupeError(code, message)
    if isinstance(error, pl.exceptions.InvalidOperationError) and "conversion" in message:
        return LoupeError("22P02", message)
    if isinstance(error, pl.exceptions.SchemaError | pl.exceptions.InvalidOperationError):
        return LoupeError("42804", message)
    if "division by zero" in message.lower():
        return LoupeError(SqlState.DIVISION_BY_ZERO, message)
    return LoupeError(SqlState.DATA_EXCEPTION, message)
