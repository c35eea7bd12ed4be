"""Table writes announce their shard's new upper on NATS, so listening replicas wake at once."""

from __future__ import annotations

import asyncio
from typing import Any

from loupe.common.transport import connect
from loupe.persist import upper_subject


async def test_an_insert_publishes_the_tables_new_upper(tables: Any, nats_url: str) -> None:
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    [(table_id,)] = await tables.rows(
        session, "SELECT id FROM mz_catalog.mz_tables WHERE name = 't'"
    )
    connection = await connect(nats_url, name="upper-listener")
    try:
        uppers: asyncio.Queue[int] = asyncio.Queue()

        async def on_upper(msg: Any) -> None:
            uppers.put_nowait(int(msg.data))

        await connection.subscribe(upper_subject(table_id), cb=on_upper)
        await connection.flush()
        await tables.tag(session, "INSERT INTO t VALUES (1)")
        upper = await asyncio.wait_for(uppers.get(), 10)
        shard = tables.service.coordinator.tables.shard(table_id)
        assert upper <= shard.upper
        assert shard.snapshot(upper - 1).num_rows == 1
    finally:
        await connection.close()
