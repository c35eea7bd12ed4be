"""Sources: ``CREATE SOURCE s FROM LOAD GENERATOR TPCH (SCALE FACTOR f)``.

``DROP SOURCE`` is a ``DropObjects``, sequenced by ``loupe.coordinator.compute``.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.results import Complete, Event, Progress, StatementResult, Streaming
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import ColumnDef, CreateSource
from loupe.coordinator.tables import create_table_sql
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

# Storage types of the TPC-H tables -> the column types their CREATE TABLE spells.
TPCH_TYPE_NAMES = {
    "int4": "integer",
    "int8": "bigint",
    "numeric": "numeric",
    "text": "text",
    "date": "date",
}


def quote_name(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


async def create_source(
    ctx: SequencerContext, session: Session, statement: CreateSource
) -> Streaming:
    """``CREATE SOURCE s FROM LOAD GENERATOR TPCH``: the source item and one table per TPC-H table.

    The TPC-H tables are ordinary tables (readable, indexable, writable)
    in the source's schema, committed first and then filled at one
    timestamp (``loupe.loadgen.tpch``) while the statement reports
    ``Progress`` per part written.
    """
    from loupe.loadgen import tpch

    ddl.require_superuser(session, statement)
    database, schema = ddl.target_schema(ctx, session, statement.name)
    taken = [
        n for n in (statement.name.name, *tpch.TPCH_TABLES) if ctx.state.item_named(schema.id, n)
    ]
    if taken:
        raise LoupeError(
            SqlState.DUPLICATE_OBJECT,
            f'"{taken[0]}" already exists',
            position=statement.position,
        )
    owner = ddl.owner_id(ctx, session)
    source_sql = (
        f"CREATE SOURCE {quote_name(database, schema.name, statement.name.name)} "
        f"FROM LOAD GENERATOR TPCH (SCALE FACTOR {statement.scale_factor!r})"
    )
    items = [
        catalog_pb2.Item(
            schema_id=schema.id,
            name=statement.name.name,
            type="source",
            owner_id=owner,
            create_sql=source_sql,
        )
    ]
    for name, columns in tpch.TPCH_TABLES.items():
        definitions = [ColumnDef(name=c, type=TPCH_TYPE_NAMES[t]) for c, t in columns]
        items.append(
            catalog_pb2.Item(
                schema_id=schema.id,
                name=name,
                type="table",
                owner_id=owner,
                create_sql=create_table_sql(database, schema.name, name, definitions),
            )
        )
    ops = [catalog_pb2.CatalogOp(create_item=catalog_pb2.CreateItem(item=i)) for i in items]
    _, result = await ddl.transact(ctx, session, statement, ops, advance=False)
    ids = {name: ctx.state.item_named(schema.id, name) for name in tpch.TPCH_TABLES}
    shard_ids = {name: item.id for name, item in ids.items() if item is not None}
    source = quote_name(database, schema.name, statement.name.name).replace('"', "")
    return Streaming(load_tpch(ctx, source, statement.scale_factor, shard_ids, result))


async def load_tpch(
    ctx: SequencerContext,
    source: str,
    scale: float,
    shard_ids: dict[str, str],
    result: StatementResult,
) -> AsyncIterator[Event]:
    """Generate the TPC-H tables and load them at one timestamp, reporting each part."""
    from loupe.loadgen import tpch

    loop = asyncio.get_running_loop()
    reports: asyncio.Queue[tuple[str, int, int]] = asyncio.Queue()
    loaded: dict[str, tuple[int, int]] = {}

    def progress(table: str, written: int, total: int) -> None:
        loop.call_soon_threadsafe(reports.put_nowait, (table, written, total))

    def report() -> Progress:
        done = sum(1 for written, total in loaded.values() if written == total)
        rows = sum(written for written, _ in loaded.values())
        return Progress(source, done, len(shard_ids), rows, done == len(shard_ids), "tables")

    with tempfile.TemporaryDirectory(prefix="loupe-tpch-") as workdir:
        files = await asyncio.to_thread(tpch.generate_files, scale, workdir)

        def write(shard_of: Callable[[str], Any], timestamp: int) -> None:
            shards = {name: shard_of(shard_id) for name, shard_id in shard_ids.items()}
            tpch.load_files(files, shards, timestamp, progress=progress)

        loading = asyncio.ensure_future(ctx.tables.load(write))
        while not loading.done() or not reports.empty():
            getter = asyncio.ensure_future(reports.get())
            await asyncio.wait({loading, getter}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            table, written, total = getter.result()
            loaded[table] = (written, total)
            yield report()
        await loading
    await ddl.after_ddl(ctx)
    for notice in result.notices:
        yield notice
    yield Complete(result.tag)
