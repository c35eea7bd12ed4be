"""Table DDL: ``CREATE TABLE``, ``DROP TABLE``; and which user table a name means.

``CREATE TABLE`` commits the table item, creates its shard before anyone can
read it, then moves the oracle past the catalog append (``ddl.after_ddl``),
which makes the table readable. ``DROP TABLE`` drops what depends on the
tables too (with ``CASCADE``), through ``loupe.coordinator.compute``.
``table_named`` is the lookup every statement that writes a table uses
(``sequencer.dml``): a builtin or a view is refused, and a name this
coordinator does not know is looked up in a fresh catalog snapshot first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loupe.builtins import BY_QUALIFIED_NAME, IMPLICIT_SCHEMAS
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator import admission
from loupe.coordinator.catalog_state import CatalogState
from loupe.coordinator.results import Notice, StatementResult
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.resolve import search_path_schemas
from loupe.coordinator.sql.statements import CreateTable, DropTable, ObjectName
from loupe.coordinator.tables import Table, columns_of, create_table_sql
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

WRONG_OBJECT_TYPE = "42809"


async def create_table(
    ctx: SequencerContext, session: Session, statement: CreateTable
) -> StatementResult:
    ddl.require_superuser(session, statement)
    database, schema = ddl.target_schema(ctx, session, statement.name)
    if statement.if_not_exists and ctx.state.item_named(schema.id, statement.name.name):
        result = StatementResult(tag=statement.tag)
        result.notices.append(
            Notice("NOTICE", f'relation "{statement.name.name}" already exists, skipping')
        )
        return result
    create_sql = create_table_sql(
        database, schema.name, statement.name.name, statement.columns, statement.keys
    )
    item = catalog_pb2.Item(
        schema_id=schema.id,
        name=statement.name.name,
        type="table",
        owner_id=ddl.owner_id(ctx, session),
        create_sql=create_sql,
    )
    op = catalog_pb2.CatalogOp(create_item=catalog_pb2.CreateItem(item=item))
    try:
        response, result = await ddl.transact(ctx, session, statement, [op], advance=False)
    except LoupeError as error:
        if error.code == SqlState.DUPLICATE_OBJECT and statement.if_not_exists:
            result = StatementResult(tag=statement.tag)
            result.notices.append(
                Notice("NOTICE", f'relation "{statement.name.name}" already exists, skipping')
            )
            return result
        raise
    created = next(
        (c.item_created for c in response.changes if c.WhichOneof("kind") == "item_created"),
        None,
    ) or ctx.state.item_named(schema.id, statement.name.name)
    table = ctx.state.tables.get(created.id) if created is not None else None
    if table is None and created is not None:
        table = Table(
            id=created.id,
            database=database,
            schema=schema.name,
            schema_id=schema.id,
            name=created.name,
            owner_id=created.owner_id,
            columns=columns_of(create_sql),
            create_sql=create_sql,
        )
    if table is not None and ctx.tables.is_open:
        # The shard exists before anyone can read the table; after_ddl makes it readable.
        await ctx.tables.ensure(table)
    await ddl.after_ddl(ctx)
    return result


async def drop_table(
    ctx: SequencerContext, session: Session, statement: DropTable
) -> StatementResult:
    """Drop the tables; one another session dropped meanwhile is looked up again.

    The names are resolved before the catalog commits the drop: when another
    session dropped one of the tables in between, the catalog refuses the
    drop (42704, by id) and the names are resolved again on a fresh catalog,
    so the statement answers as it would have after that drop (42P01, or a
    NOTICE with IF EXISTS). It tries again only after another commit, so
    the rounds end; ``statement_timeout`` bounds them too.
    """
    while True:
        resolved_with = ctx.state
        try:
            return await _drop_tables(ctx, session, statement)
        except LoupeError as error:
            if error.code != SqlState.UNDEFINED_OBJECT:
                raise
            admission.remaining()  # 57014 once the statement's time is up
            if (await ctx.refreshed_state()).key <= resolved_with.key:
                raise  # no commit in between: not a race


async def _drop_tables(
    ctx: SequencerContext, session: Session, statement: DropTable
) -> StatementResult:
    ddl.require_superuser(session, statement)
    notices: list[Notice] = []
    tables: dict[str, Table] = {}
    for name in statement.names:
        table = await table_named(ctx, session, name, missing_ok=statement.if_exists)
        if table is None:
            notices.append(Notice("NOTICE", f'table "{name}" does not exist, skipping'))
        else:
            tables.setdefault(table.id, table)
    if not tables:
        return StatementResult(tag=statement.tag, notices=notices)
    result = await ctx.compute.drop_items(
        session, statement, list(tables.values()), cascade=statement.cascade
    )
    result.notices[:0] = notices
    return result


async def table_named(
    ctx: SequencerContext, session: Session, name: ObjectName, *, missing_ok: bool = False
) -> Table | None:
    """The user table ``name`` refers to; 42P01 (or None) when there is none."""
    found = find_table(session, name, ctx.state)
    if found is None:
        found = find_table(session, name, await ctx.refreshed_state())
    if found is None and not missing_ok:
        raise LoupeError(
            SqlState.UNDEFINED_TABLE, f"unknown catalog item '{name}'", position=name.position
        )
    return found


def find_table(session: Session, name: ObjectName, state: CatalogState) -> Table | None:
    """The user table ``name`` means in ``state``; None, or 42501/42809 for a builtin or non-table."""
    parts = name.parts
    if len(parts) == 3 and parts[0] != session.database:
        return None
    schemas = (
        [parts[-2]]
        if len(parts) > 1
        else [*IMPLICIT_SCHEMAS, *search_path_schemas(session.search_path)]
    )
    tables = state.tables_in(session.database)
    for schema in schemas:
        if f"{schema}.{name.name}" in BY_QUALIFIED_NAME:
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE,
                f"system table '{schema}.{name.name}' cannot be modified",
                position=name.position,
            )
        table = tables.get(f"{schema}.{name.name}")
        if table is not None:
            return table
        schema_proto = state.schema_named(session.database, schema)
        item = state.item_named(schema_proto.id, name.name) if schema_proto else None
        if item is not None:
            raise LoupeError(
                WRONG_OBJECT_TYPE,
                f"'{name}' is a {item.type.replace('-', ' ')}, not a table",
                position=name.position,
            )
    return None
