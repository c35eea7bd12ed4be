"""DML: ``INSERT``, ``UPDATE``, ``DELETE`` on user tables.

Each is planned by ``loupe.coordinator.dml`` (rows to write, or a read of
the matching rows over the table's contents) and written through
``TableStore.write`` at a timestamp from the oracle, moving along the
uppers of the tables read with it. ``unique_keys`` are what the write
checks (23505): the table's PRIMARY KEY and UNIQUE constraints and its
unique indexes. ``INSERT … SELECT`` runs its query as a SELECT does
(``sequencer.select``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loupe.coordinator import metrics
from loupe.coordinator.dml import delete_plan, insert_plan, query_rows, update_plan, values_rows
from loupe.coordinator.objects import is_unique_index
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import select
from loupe.coordinator.sequencer.table import table_named
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import Delete, Insert, UniqueKey, Update
from loupe.coordinator.tables import Table, check_columns

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext


async def insert(ctx: SequencerContext, session: Session, statement: Insert) -> StatementResult:
    table = await table_named(ctx, session, statement.table)
    assert table is not None
    columns = check_columns(table, statement.columns) if statement.columns is not None else None
    if statement.query is not None:
        query_columns, selected = await select.run_query(ctx, session, statement.query)
        rows = query_rows(table, columns, selected, len(query_columns))
    else:
        rows = values_rows(table, columns, statement.rows)
    keys = unique_keys(ctx, table)
    written = await ctx.tables.write(
        table,
        insert_plan(table, rows, keys),
        read=bool(keys),
        along=ctx.compute.maintained_with(table),
    )
    metrics.TABLE_WRITES.labels("insert").inc()
    return StatementResult(tag=f"INSERT 0 {written.count}")


async def update(ctx: SequencerContext, session: Session, statement: Update) -> StatementResult:
    table = await table_named(ctx, session, statement.table)
    assert table is not None
    targets = check_columns(table, [(name, pos) for name, pos, _ in statement.assignments])
    assignments = [
        (column, value)
        for column, (_, _, value) in zip(targets, statement.assignments, strict=True)
    ]
    plan = update_plan(
        table, statement.alias, assignments, statement.where, unique_keys(ctx, table)
    )
    written = await ctx.tables.write(
        table, plan, read=True, along=ctx.compute.maintained_with(table)
    )
    metrics.TABLE_WRITES.labels("update").inc()
    return StatementResult(tag=f"UPDATE {written.count}")


def unique_keys(ctx: SequencerContext, table: Table) -> list[UniqueKey]:
    """The table's PRIMARY KEY and UNIQUE constraints, and its unique indexes."""
    keys = list(table.keys)
    for index in ctx.state.objects.values():
        if index.on_id == table.id and is_unique_index(index):
            columns = tuple(table.columns[i].name for i in index.key)
            keys.append(UniqueKey(index.name, columns))
    return keys


async def delete(ctx: SequencerContext, session: Session, statement: Delete) -> StatementResult:
    table = await table_named(ctx, session, statement.table)
    assert table is not None
    plan = delete_plan(table, statement.alias, statement.where)
    written = await ctx.tables.write(
        table, plan, read=True, along=ctx.compute.maintained_with(table)
    )
    metrics.TABLE_WRITES.labels("delete").inc()
    return StatementResult(tag=f"DELETE {written.count}")
