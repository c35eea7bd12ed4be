"""Dataflows on two real compute replicas driven by the controller, over real NATS and shards."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loupe.common import values
from loupe.controller.collections import subscribe_subject
from loupe.controller.compute import ClusterInfo
from loupe.controller.orchestrators.base import ReplicaSpec
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Shard, expand
from loupe.persist.shard import arrow_schema
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import (
    BuildDesc,
    DataflowDescription,
    IndexExport,
    PersistSink,
    SourceImport,
    SubscribeSink,
)
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

COLUMNS = (("id", "int4"), ("name", "text"))
TYPES = tuple(t for _, t in COLUMNS)


def write(shard: Shard, rows: list[tuple[int, str]], timestamp: int, diff: int = 1) -> None:
    """Rows at ``timestamp`` into a table's shard; its upper moves to ``timestamp + 1``."""
    updates = [
        {"id": i, "name": n, TIMESTAMP_COLUMN: timestamp, DIFF_COLUMN: diff} for i, n in rows
    ]
    table = pa.Table.from_pylist(updates, schema=arrow_schema(COLUMNS))
    shard.compare_and_append(table, shard.upper, timestamp + 1)


def view_dataflow(
    dataflow_id: str, table: Shard, as_of: int, *exports: Any
) -> compute_pb2.CreateDataflow:
    """A dataflow building ``dataflow_id`` = the table, exporting ``exports``."""
    indexes = tuple(e for e in exports if isinstance(e, IndexExport))
    sinks = tuple(e for e in exports if not isinstance(e, IndexExport))
    desc = DataflowDescription(
        id=dataflow_id,
        debug_name=dataflow_id,
        source_imports=(SourceImport("t", table.shard_id, COLUMNS),),
        objects_to_build=(BuildDesc(dataflow_id, lir.Get(0, "t", types=TYPES), COLUMNS),),
        index_exports=indexes,
        sink_exports=sinks,
        as_of=as_of,
    )
    return dataflow_to_proto(desc)


def contents(shard: Shard, as_of: int) -> list[tuple[Any, ...]]:
    table = expand(shard.snapshot(as_of))
    return sorted(zip(*(table.column(n).to_pylist() for n, _ in COLUMNS), strict=True))


def rows_of(answer: compute_pb2.PeekResponse) -> list[tuple[Any, ...]]:
    assert answer.WhichOneof("result") == "rows", answer
    return sorted(tuple(values.from_row(r)) for r in answer.rows.rows)


def target_peek(timestamp: int) -> compute_pb2.Peek:
    return compute_pb2.Peek(
        target_id="i",
        timestamp=timestamp,
        result_desc=common_pb2.RelationDesc(
            columns=[common_pb2.Column(name=n, type=t) for n, t in COLUMNS]
        ),
    )


@pytest.fixture
async def two_real_replicas(make_compute, nats_url, kit, unique):
    orchestrator = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=5.0)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replicas = [f"a{unique}", f"b{unique}"]
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=2) for r in replicas])

    def online() -> None:
        assert compute.online_replicas(info.id) == replicas

    await assert_eventually(online, timeout=20)
    return compute, orchestrator, info, replicas


async def test_dataflow_on_two_replicas_survives_a_crash_and_sinks_once(
    two_real_replicas, storage, nats_connection
):
    """Frontiers, peeks by target, an MV written once, a subscribe de-duplicated, reconciliation, drop."""
    compute, orchestrator, info, (first, second) = two_real_replicas
    table = Shard("t-shard", *storage)
    table.ensure(COLUMNS)
    write(table, [(1, "a"), (2, "b")], timestamp=5)
    view = Shard("mv-shard", *storage)
    received: list[compute_pb2.SubscribeBatch] = []

    async def record(msg: Any) -> None:
        received.append(compute_pb2.SubscribeBatch.FromString(msg.data))

    await nats_connection.subscribe(subscribe_subject("s"), cb=record)
    await compute.create_dataflow(
        info.id,
        view_dataflow(
            "v",
            table,
            5,
            IndexExport("i", "v", (0,)),
            PersistSink("mv", "v", view.shard_id, COLUMNS),
        ),
    )

    async def frontier_on_both(collection_id: str, beyond: int) -> None:
        def check() -> None:
            (found,) = compute.list_frontiers(info.id, [collection_id])
            assert set(found.replicas) == {first, second}
            assert min(found.replicas.values()) > beyond

        await assert_eventually(check, timeout=20)

    await frontier_on_both("i", 5)
    # A second dataflow over the same table reads the feed the first one started.
    await compute.create_dataflow(info.id, view_dataflow("w", table, 5, SubscribeSink("s", "w")))
    assert rows_of(await compute.peek(info.id, target_peek(5))) == [(1, "a"), (2, "b")]

    write(table, [(3, "c")], timestamp=8)
    write(table, [(1, "a")], timestamp=9, diff=-1)
    await frontier_on_both("mv", 9)
    assert rows_of(await compute.peek(info.id, target_peek(9))) == [(2, "b"), (3, "c")]
    await assert_eventually(lambda: _assert(view.upper >= 10), timeout=20)
    assert contents(view, 5) == [(1, "a"), (2, "b")]
    assert contents(view, 9) == [(2, "b"), (3, "c")]
    # Both replicas tried every batch: each update is in the shard once.
    written = view.read_updates()
    assert written.num_rows == 4
    assert pc.sum(written.column(DIFF_COLUMN)).as_py() == 2

    def subscribed() -> None:
        assert received
        assert received[-1].upper >= 10

    await assert_eventually(subscribed, timeout=20)
    assert all(a.upper == b.lower for a, b in itertools.pairwise(received))
    updates = sorted(
        (tuple(values.from_row(u.row)), u.time, u.diff) for b in received for u in b.updates
    )
    assert updates == [((1, "a"), 5, 1), ((1, "a"), 9, -1), ((2, "b"), 5, 1), ((3, "c"), 8, 1)]

    # A crash: the new incarnation gets the history replayed and rebuilds.
    await orchestrator.kill(first)

    def reincarnated() -> None:
        assert compute.replica_incarnation(first) == 2
        assert compute.online_replicas(info.id) == [first, second]

    await assert_eventually(reincarnated, timeout=20)
    await frontier_on_both("i", 9)
    rebuilt = await compute.peek(info.id, target_peek(9), replica_id=first)
    assert rows_of(rebuilt) == [(2, "b"), (3, "c")]
    write(table, [(4, "d")], timestamp=12)
    await frontier_on_both("mv", 12)
    await assert_eventually(lambda: _assert(view.upper >= 13), timeout=20)
    assert contents(view, 12) == [(2, "b"), (3, "c"), (4, "d")]
    assert view.read_updates().num_rows == 5

    # Dropping every export of a dataflow frees it on every replica.
    await compute.allow_compaction(info.id, ["i", "mv"], 0, True)

    def dropped() -> None:
        for replica_id in (first, second):
            runner = orchestrator.replicas[replica_id].service.dataflows
            assert runner.dataflow_ids() == ["w"]

    await assert_eventually(dropped, timeout=10)
    assert [f.collection_id for f in compute.list_frontiers(info.id)] == ["s"]


def _assert(condition: object) -> None:
    assert condition
