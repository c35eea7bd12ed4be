"""Compute compaction: indexes' sinces follow their frontiers, short of what reads hold.

On the real engine (``EngineController``: the replica's ``DataflowRunner`` in
process, refusing peeks before a since as the controller does). Without the
compaction a restarted replica replays every change since an index was
created, one timestamp after another.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loupe.coordinator.compaction import GRANULE_MS, ReadHolds, compaction_target
from loupe.coordinator.tests.conftest import EngineController
from loupe.proto.sql.v1 import sql_pb2
from loupe.testing.eventually import assert_eventually

FAST = {
    "controller_class": EngineController,
    "table_tick_interval": 0.1,
    "compute_compaction_interval": 0.1,
    "compute_compaction_window": 0.5,
}


def test_the_target_is_the_least_of_window_frontier_and_holds() -> None:
    now = 1_000_000
    assert compaction_target(now, 1000, now + 5, None, 0) == now - 1000
    # A lagging frontier bounds it: a replica reads its latest complete time.
    assert compaction_target(now, 1000, 990_000, None, 0) == 989_000
    # A hold bounds it, and whole granules only.
    assert compaction_target(now, 1000, now, 995_432, 0) == 995_000
    # Never backwards, never in place.
    assert compaction_target(now, 1000, now, None, now - 1000) is None
    assert compaction_target(now, 1000, now, None, now) is None
    assert (now - 1000) % GRANULE_MS == 0


def test_read_holds_are_per_collection_and_released() -> None:
    holds = ReadHolds()
    holds.floor = 500
    assert holds.least("u1") is None
    with holds.hold():
        with holds.hold(100, ["u2"]):
            assert holds.least("u1") == 500
            assert holds.least("u2") == 100
            assert holds.least("u1", also=[50]) == 50
        assert holds.least("u2") == 500
    assert holds.least("u2") is None
    assert len(holds) == 0


async def _index_since(harness: Any, session: str) -> tuple[str, int]:
    ((index_id,),) = await harness.rows(
        session, "SELECT id FROM mz_catalog.mz_indexes WHERE name = 'v_primary_idx'"
    )
    return index_id, harness.controller.sinces.get(index_id, 0)


async def test_an_index_since_follows_its_frontier_and_as_of_before_it_fails(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    async with start_table_system(nats_url, data_dir, **FAST) as harness:
        session = await harness.session()
        await harness.tag(session, "CREATE TABLE t (a int)")
        await harness.tag(session, "INSERT INTO t VALUES (1)")
        await harness.tag(session, "CREATE VIEW v AS SELECT a FROM t")
        await harness.tag(session, "CREATE DEFAULT INDEX ON v")
        ((created,),) = await harness.rows(session, "SELECT mz_now()")
        index_id, _ = await _index_since(harness, session)
        runner = harness.controller.runner

        async def moved_past_creation() -> None:
            since = harness.controller.sinces.get(index_id, 0)
            assert since > int(created)
            # Never past what the replica has complete.
            assert since <= runner.write_frontier(index_id) - 1

        await assert_eventually(moved_past_creation, timeout=15)
        await harness.tag(session, "INSERT INTO t VALUES (2)")
        assert sorted(await harness.rows(session, "SELECT a FROM v")) == [(1,), (2,)]
        error = await harness.error(session, f"SELECT a FROM v AS OF {created}")
        assert error.code == "XX000"
        assert f"Timestamp ({created}) is not valid for all inputs: {index_id}" in error.message


async def test_an_open_transaction_holds_the_index_it_reads(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    async with start_table_system(nats_url, data_dir, **FAST) as harness:
        session = await harness.session()
        writer = await harness.session()
        await harness.tag(session, "CREATE TABLE t (a int)")
        await harness.tag(session, "INSERT INTO t VALUES (1)")
        await harness.tag(session, "CREATE VIEW v AS SELECT a FROM t")
        await harness.tag(session, "CREATE DEFAULT INDEX ON v")
        await harness.tag(session, "BEGIN")
        assert await harness.rows(session, "SELECT a FROM v") == [(1,)]
        ((pinned,),) = await harness.rows(session, "SELECT mz_now()")
        await harness.tag(writer, "INSERT INTO t VALUES (2)")
        # Many compaction rounds and windows later, the transaction still reads its time.
        await asyncio.sleep(2.0)
        assert await harness.rows(session, "SELECT a FROM v") == [(1,)]
        index_id, since = await _index_since(harness, writer)
        assert since <= int(pinned)
        await harness.tag(session, "COMMIT")

        async def released() -> None:
            assert harness.controller.sinces.get(index_id, 0) > int(pinned)

        await assert_eventually(released, timeout=15)
        assert sorted(await harness.rows(session, "SELECT a FROM v")) == [(1,), (2,)]


async def test_a_subscribe_holds_the_index_it_reads_until_it_ends(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """A replica that restarts replays the subscribe from its as_of: the index stays there."""
    async with start_table_system(nats_url, data_dir, **FAST) as harness:
        session, other = await harness.session(), await harness.session()
        await harness.tag(session, "CREATE TABLE t (a int)")
        await harness.tag(session, "CREATE VIEW v AS SELECT a FROM t")
        await harness.tag(session, "CREATE DEFAULT INDEX ON v")
        index_id, _ = await _index_since(harness, other)
        ((before,),) = await harness.rows(other, "SELECT mz_now()")
        holds = harness.service.coordinator.context.read_holds
        call = harness.stub.Execute(sql_pb2.ExecuteRequest(session_id=session, sql="SUBSCRIBE v"))
        responses = call.__aiter__()
        description = await asyncio.wait_for(anext(responses), 20)
        assert description.WhichOneof("kind") == "description"
        held = holds.least(index_id)
        assert held is not None
        assert held >= int(before)
        assert holds.least("u999") is None  # only the indexes it reads
        await asyncio.sleep(1.0)
        assert harness.controller.sinces.get(index_id, 0) <= held
        call.cancel()

        def released() -> None:
            assert holds.least(index_id) is None

        await assert_eventually(released, timeout=15)
