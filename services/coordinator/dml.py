"""INSERT, UPDATE and DELETE on user tables: from statements to updates.

- ``INSERT … VALUES``: literals are converted directly (a quoted literal is
  parsed as its column's type, as in PostgreSQL); any other expression is
  planned and evaluated by the engine (``loupe.dataflow.oneshot``), one row
  at a time. ``INSERT … SELECT`` gets its rows from a peek (the coordinator
  runs it) and converts them the same way.
- ``UPDATE`` and ``DELETE`` are planned as a SELECT of the matching rows
  (and their new values) over the table and evaluated by the engine on the
  table's consolidated contents at the time of the write
  (``TableStore.write(read=True)``): the matching rows are retracted and,
  for UPDATE, their new versions inserted, in one part. Only matching rows
  ever become Python values.

Expressions may refer to the table's columns only (no subqueries); an
unknown column is 42703, another table's name 42P01.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.plan import plan_query
from loupe.coordinator.sql.resolve import GENERATE_DIALECT, MZ_NOW
from loupe.coordinator.sql.statements import UniqueKey
from loupe.coordinator.table_store import Plan, Update
from loupe.coordinator.tables import (
    Coercer,
    NumberLiteral,
    Table,
    TableColumn,
    UntypedString,
)
from loupe.dataflow.oneshot import OneShotInput, evaluate_plan
from loupe.dataflow.types import PERSIST_DIFF, PERSIST_TIME
from loupe.interval import python_values
from loupe.plan import lir

_NOT_LITERAL = object()
# ``DEFAULT`` in a VALUES list: the column's default.
_DEFAULT = object()
UNIQUE_VIOLATION = "23505"
# The names the table's contents and their row numbers have in the plan of an UPDATE or DELETE.
_FRAME = "__loupe_table"
_ROW = "__loupe_row"


def literal_value(expression: exp.Expression) -> Any:
    """The value of a literal (``_NOT_LITERAL`` when ``expression`` is not one)."""
    if isinstance(expression, exp.Paren):
        return literal_value(expression.this)
    if isinstance(expression, exp.Var) and expression.name.upper() == "DEFAULT":
        return _DEFAULT
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
    defaults = Defaults(table)
    return [
        coercer.row(defaults.complete(_row_values(row), targets), table.columns) for row in rows
    ]


class Defaults:
    """The values of a table's DEFAULT expressions, evaluated once per statement, as needed."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._values: dict[str, Any] = {}

    def value(self, column: TableColumn) -> Any:
        if column.default is None:
            return None
        if column.name not in self._values:
            expression = sqlglot.parse_one(column.default, read=GENERATE_DIALECT)
            assert isinstance(expression, exp.Expression)
            # A literal default is typed by its column, as a literal in VALUES is
            # (DEFAULT '2024-01-01' on a date column is a date, not text).
            (value,) = _row_values([expression], query_time=int(time.time() * 1000))
            self._values[column.name] = value
        return self._values[column.name]

    def complete(self, values: Sequence[Any], targets: Sequence[TableColumn]) -> list[Any]:
        """A value for every column of the table: those given, the others' defaults."""
        given = {c.name: v for c, v in zip(targets, values, strict=True)}
        return [
            self.value(c) if given.get(c.name, _DEFAULT) is _DEFAULT else given[c.name]
            for c in self.table.columns
        ]


def _row_values(row: Sequence[exp.Expression], *, query_time: int | None = None) -> list[Any]:
    values = [literal_value(e) for e in row]
    computed = [i for i, value in enumerate(values) if value is _NOT_LITERAL]
    if computed:
        _, results = evaluate_constant(
            exp.select(*(row[i].copy() for i in computed)), query_time=query_time
        )
        for index, value in zip(computed, results[0], strict=True):
            values[index] = value
    return values


def query_rows(
    table: Table, columns: Sequence[TableColumn] | None, rows: Sequence[Sequence[Any]], width: int
) -> list[tuple[Any, ...]]:
    """The rows of ``INSERT … SELECT`` (typed values), converted to the table's columns."""
    targets = target_columns(table, columns, width)
    coercer = Coercer(table)
    defaults = Defaults(table)
    return [coercer.row(defaults.complete(row, targets), table.columns) for row in rows]


def insert_plan(table: Table, rows: list[tuple[Any, ...]], keys: Sequence[UniqueKey] = ()) -> Plan:
    """Insert ``rows``; with ``keys``, check them against the contents first (23505)."""

    def plan(contents: pa.Table | None) -> tuple[list[Update], int]:
        updates: list[Update] = [(row, 1) for row in rows]
        check_unique(table, keys, contents, updates)
        return updates, len(rows)

    return plan


def check_unique(
    table: Table, keys: Sequence[UniqueKey], contents: pa.Table | None, updates: Sequence[Update]
) -> None:
    """23505 when ``updates`` applied to ``contents`` leave two rows with equal values of a key.

    As in PostgreSQL, rows with a NULL in a key's columns never collide.
    """
    if not keys or not updates:
        return
    assert contents is not None, "a table with keys is written with its contents read"
    positions = {c.name: i for i, c in enumerate(table.columns)}
    for key in keys:
        indexes = [positions[c] for c in key.columns]
        counts: dict[tuple[Any, ...], int] = {}
        changed = []
        for row, diff in updates:
            value = tuple(row[i] for i in indexes)
            if any(v is None for v in value):
                continue
            counts[value] = counts.get(value, 0) + diff
            if diff > 0:
                changed.append(value)
        if not changed:
            continue
        existing = _key_counts(contents, list(key.columns), set(changed))
        for value in changed:
            if counts[value] + existing.get(value, 0) > 1:
                shown = ", ".join(key.columns)
                raise LoupeError(
                    UNIQUE_VIOLATION,
                    f'duplicate key value violates unique constraint "{key.name}"',
                    detail=f"Key ({shown})=({', '.join(_key_text(v) for v in value)}) already exists.",
                )


def check_unique_contents(contents: pa.Table, index: str, columns: Sequence[str]) -> None:
    """23505 when ``contents`` already holds two rows with equal non-NULL ``columns``."""
    if contents.num_rows == 0:
        return
    frame = pl.from_arrow(contents.select([*columns, PERSIST_DIFF]))
    assert isinstance(frame, pl.DataFrame)
    present = frame.drop_nulls(list(columns))
    counted = present.group_by(list(columns)).agg(pl.col(PERSIST_DIFF).sum().alias("_n"))
    duplicated = counted.filter(pl.col("_n") > 1).head(1).rows()
    if duplicated:
        value = ", ".join(_key_text(v) for v in duplicated[0][:-1])
        raise LoupeError(
            UNIQUE_VIOLATION,
            f'could not create unique index "{index}"',
            detail=f"Key ({', '.join(columns)})=({value}) is duplicated.",
        )


def _key_counts(
    contents: pa.Table, columns: list[str], wanted: set[tuple[Any, ...]]
) -> dict[tuple[Any, ...], int]:
    """How many rows of ``contents`` hold each of the ``wanted`` key values."""
    if contents.num_rows == 0:
        return {}
    frame = pl.from_arrow(contents.select([*columns, PERSIST_DIFF]))
    assert isinstance(frame, pl.DataFrame)
    candidates = pl.DataFrame(
        [list(values) for values in zip(*wanted, strict=True)],
        schema={c: frame.schema[c] for c in columns},
        orient="col",
    )
    matched = frame.join(candidates, on=columns, how="semi")
    counted = matched.group_by(columns).agg(pl.col(PERSIST_DIFF).sum())
    return {tuple(row[:-1]): row[-1] for row in counted.rows()}


def _key_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


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
    keys: Sequence[UniqueKey] = (),
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
        matched = _evaluate(contents, table, name, [e for _, e in computed], condition)
        old_rows = _stored_rows(contents, [match[0] for match in matched])
        updates: list[Update] = []
        for match, old in zip(matched, old_rows, strict=True):
            new = list(old)
            for column, value in literal.items():
                if value is not _NOT_LITERAL:
                    new[positions[column]] = coercer.value(value, table.columns[positions[column]])
            for (column, _), value in zip(computed, match[1:], strict=True):
                new[positions[column.name]] = coercer.value(value, column)
            updates.append((old, -1))
            updates.append((tuple(new), 1))
        check_unique(table, keys, contents, updates)
        return updates, len(matched)

    return plan


def delete_plan(table: Table, alias: str | None, where: exp.Expression | None) -> Plan:
    refuse_mz_now([where], "DELETE")
    name = alias or table.name
    condition = _prepare(where, table, name) if where is not None else None

    def plan(contents: pa.Table | None) -> tuple[list[Update], int]:
        assert contents is not None
        matched = _evaluate(contents, table, name, [], condition)
        old_rows = _stored_rows(contents, [match[0] for match in matched])
        return [(old, -1) for old in old_rows], len(matched)

    return plan


def _evaluate(
    contents: pa.Table,
    table: Table,
    name: str,
    projections: Sequence[exp.Expression],
    condition: exp.Expression | None,
) -> list[tuple[Any, ...]]:
    """``SELECT <row number>, projections FROM contents AS name WHERE condition``.

    Planned like any query and evaluated by the engine (``evaluate_plan``)
    over the table's consolidated contents (``mz_diff`` is each row's count):
    one result per occurrence of a matching row, its row number in
    ``contents`` first (the stored row is taken from there, so a retraction
    is exactly what was written).
    """
    select = exp.select(
        exp.column(_ROW, table=name, quoted=True),
        *(e.as_(f"__set_{i}", quoted=True) for i, e in enumerate(projections)),
    ).from_(exp.to_table(_FRAME).as_(name, quoted=True))
    if condition is not None:
        select = select.where(condition)
    columns = (*table.storage_columns, (_ROW, "int8"))

    def resolve(written: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
        return (_FRAME, columns) if written == _FRAME else None

    relation = plan_query(select, resolve)
    numbered = contents.append_column(_ROW, pa.array(range(contents.num_rows), pa.int64()))
    inputs = {_FRAME: OneShotInput(columns, numbered)}
    return evaluate_plan(lir.lower_to_lir(relation), relation.columns, inputs).rows()


def _stored_rows(contents: pa.Table, positions: Sequence[int]) -> list[tuple[Any, ...]]:
    """The rows at ``positions`` of ``contents`` as stored (data columns only)."""
    names = [n for n in contents.column_names if n not in (PERSIST_TIME, PERSIST_DIFF)]
    taken = contents.select(names).take(pa.array(positions, pa.int64()))
    columns = [python_values(taken.column(i)) for i in range(taken.num_columns)]
    return list(zip(*columns, strict=True)) if columns else [() for _ in positions]
