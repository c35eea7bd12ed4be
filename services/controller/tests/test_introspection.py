"""Replica introspection into mz_internal: real replicas, real NATS, real shards."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from loupe.builtins import MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS as STATUS
from loupe.controller.compute import ClusterInfo
from loupe.controller.introspection import introspection_subject
from loupe.controller.orchestrators.base import ReplicaSpec
from loupe.introspection.collector import updates_table
from loupe.introspection.logs import BY_NAME
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Shard
from loupe.persist.shard import arrow_schema
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

FAST = 100_000_000  # 100 ms
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]
ELAPSED = BY_NAME["mz_scheduling_elapsed_raw"]
COLUMNS = (("id", "int4"), ("name", "text"))


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def write(shard: Shard, rows: list[tuple[int, str]], timestamp: int) -> None:
    updates = [{"id": i, "name": n, TIMESTAMP_COLUMN: timestamp, DIFF_COLUMN: 1} for i, n in rows]
    table = pa.Table.from_pylist(updates, schema=arrow_schema(COLUMNS))
    shard.compare_and_append(table, shard.upper, timestamp + 1)


def dataflow(dataflow_id: str, shard: Shard) -> compute_pb2.CreateDataflow:
    desc = DataflowDescription(
        id=dataflow_id,
        debug_name=dataflow_id,
        source_imports=(SourceImport("t", shard.shard_id, COLUMNS),),
        objects_to_build=(
            BuildDesc(dataflow_id, lir.Get(0, "t", types=("int4", "text")), COLUMNS),
        ),
        index_exports=(IndexExport(f"{dataflow_id}_i", dataflow_id, (0,)),),
        as_of=0,
    )
    return dataflow_to_proto(desc)


def held(writer: Any, collection_id: str, replica_id: str) -> dict[tuple[Any, ...], int]:
    """What the collection holds of ``replica_id``, consolidated."""
    return {
        tuple(tuple(v) if isinstance(v, list) else v for v in row): count
        for row, count in writer.consolidated(collection_id)
        if row[0] == replica_id
    }


def status_of(writer: Any, replica_id: str) -> tuple[Any, ...] | None:
    rows = [row for row, count in writer.consolidated(STATUS.id) if row[0] == replica_id]
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def replica_state(orchestrator: Any, replica_id: str, variant: str) -> dict[tuple[Any, ...], int]:
    """The replica's own collector state of ``variant``, as the controller would persist it."""
    replica = orchestrator.replicas.get(replica_id)
    assert replica is not None, "the replica is restarting"
    introspection = replica.service.introspection
    assert introspection is not None, "the replica is starting"
    collector = introspection.collector
    assert collector is not None
    state = collector.state_rows()[variant]
    return {
        (replica_id, replica.incarnation, *(tuple(v) if isinstance(v, list) else v for v in row)): n
        for row, n in state.items()
    }


@pytest.fixture
async def cluster(make_compute, nats_url, kit, unique, arrow_writer, storage):
    orchestrator = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=5.0)
    info = ClusterInfo(f"c{unique}", "quickstart", introspection_interval_ns=FAST)
    replicas = [f"a{unique}", f"b{unique}"]
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=2) for r in replicas])

    def online() -> None:
        assert compute.online_replicas(info.id) == replicas

    await assert_eventually(online, timeout=20)
    table = Shard(f"t{unique}", *storage)
    table.ensure(COLUMNS)
    write(table, [(1, "a"), (2, "b")], timestamp=5)
    await compute.create_dataflow(info.id, dataflow("v", table))
    return compute, orchestrator, info, replicas


async def wait_synced(compute, orchestrator, writer, replica_id, timeout=20.0):
    """Until the shards hold exactly the replica's operators log, complete."""

    def synced() -> None:
        expected = replica_state(orchestrator, replica_id, OPERATORS.name)
        assert expected
        assert held(writer, OPERATORS.collection_id, replica_id) == expected
        status = status_of(writer, replica_id)
        assert status is not None
        assert status[2] is True, status

    await assert_eventually(synced, timeout=timeout)


async def test_snapshot_then_changes_are_written_per_replica(cluster, arrow_writer):
    compute, orchestrator, _info, (first, second) = cluster
    for replica_id in (first, second):
        await wait_synced(compute, orchestrator, arrow_writer, replica_id)
    status = status_of(arrow_writer, first)
    assert status[1] == 1  # incarnation
    assert status[3] is None  # complete: no incomplete_since
    assert status[4] == 0

    # Count logs keep their nanoseconds as multiplicities, consolidated.
    def elapsed() -> None:
        rows = held(arrow_writer, ELAPSED.collection_id, first)
        assert rows
        assert max(rows.values()) > 1000

    await assert_eventually(elapsed, timeout=10)
    # The mirror is what the shards hold.
    await asyncio.sleep(0.5)
    mirror = compute.introspection.mirror(first)
    assert mirror[OPERATORS.collection_id] == held(arrow_writer, OPERATORS.collection_id, first)


async def test_a_new_incarnation_replaces_the_rows_in_one_flush(cluster, arrow_writer, storage):
    compute, orchestrator, _info, (first, _) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    shard = Shard(OPERATORS.collection_id, *storage)
    before = shard.upper

    await orchestrator.kill(first)

    def second_incarnation() -> None:
        replica = orchestrator.replicas.get(first)
        assert replica is not None
        assert replica.incarnation == 2
        assert compute.introspection.status(first).incarnation == 2

    await assert_eventually(second_incarnation, timeout=20)
    await wait_synced(compute, orchestrator, arrow_writer, first)
    after = shard.upper

    # At every time the shard changed between: one incarnation's rows, never both or none.
    updates = shard.read_updates()
    times = sorted({t for t in updates.column(TIMESTAMP_COLUMN).to_pylist() if before <= t < after})
    seen = []
    for at in [before - 1, *times]:
        table = shard.snapshot(at)
        mine = table.filter(pa.compute.equal(table.column("replica_id"), first))
        incarnations = set(mine.column("incarnation").to_pylist())
        assert len(incarnations) == 1, (at, incarnations)
        seen.append(incarnations.pop())
    assert seen[0] == 1
    assert seen[-1] == 2


async def test_a_dropped_replica_is_retracted(cluster, arrow_writer):
    compute, orchestrator, info, (first, second) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    await compute.apply([info], [ReplicaSpec(second, info.id, workers=2)])

    def gone() -> None:
        for variant in (OPERATORS, ELAPSED):
            assert held(arrow_writer, variant.collection_id, first) == {}
        assert status_of(arrow_writer, first) is None
        assert held(arrow_writer, OPERATORS.collection_id, second)

    await assert_eventually(gone, timeout=10)


def bogus(replica_id: str, incarnation: int, seq: int, *, snapshot: bool, rows: int = 3) -> bytes:
    table = updates_table(
        OPERATORS.name, [((9_000_000 + i, 0, "zombie"), 1) for i in range(rows)], 1
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return compute_pb2.ComputeResponse(
        replica_id=replica_id,
        incarnation=incarnation,
        introspection_updates=compute_pb2.IntrospectionUpdates(
            seq=seq,
            upper=2,
            snapshot=snapshot,
            logs=[
                compute_pb2.LogUpdates(log=OPERATORS.name, arrow_ipc=sink.getvalue().to_pybytes())
            ],
        ),
    ).SerializeToString()


async def test_a_zombie_incarnation_changes_nothing(cluster, arrow_writer, nats_connection):
    compute, orchestrator, _info, (first, _) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    stale = sample("loupe_controller_introspection_stale_messages_total", replica_id=first)
    for incarnation in (0, 7):
        payload = bogus(first, incarnation, 0, snapshot=True)
        await nats_connection.publish(introspection_subject(first), payload)
    await nats_connection.flush()

    def counted() -> None:
        now = sample("loupe_controller_introspection_stale_messages_total", replica_id=first)
        assert now == stale + 2

    await assert_eventually(counted, timeout=5)
    await asyncio.sleep(0.5)
    rows = held(arrow_writer, OPERATORS.collection_id, first)
    assert not any(row[4] == "zombie" for row in rows)
    assert {row[1] for row in rows} == {1}


async def test_a_seq_gap_asks_for_a_snapshot_and_ends_correct(
    cluster, arrow_writer, nats_connection
):
    compute, orchestrator, _info, (first, _) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    asked = compute.introspection.snapshots_requested
    # A message from the current incarnation far ahead in seq: messages were lost.
    await nats_connection.publish(
        introspection_subject(first), bogus(first, 1, 1_000_000, snapshot=False)
    )
    await nats_connection.flush()

    def requested() -> None:
        assert compute.introspection.snapshots_requested > asked

    await assert_eventually(requested, timeout=5)
    await wait_synced(compute, orchestrator, arrow_writer, first)
    rows = held(arrow_writer, OPERATORS.collection_id, first)
    assert not any(row[4] == "zombie" for row in rows)


async def test_a_flood_on_one_subject_does_not_delay_another_replica(
    cluster, arrow_writer, nats_connection, storage, unique
):
    compute, orchestrator, info, (first, second) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, second)
    compute.introspection.max_pending_msgs = 2
    dropped = sample("loupe_controller_introspection_dropped_updates_total", replica_id=first)
    payload = bogus(first, 1, 5, snapshot=False, rows=2000)
    stop = asyncio.Event()

    async def flood() -> None:
        while not stop.is_set():
            for _ in range(50):
                await nats_connection.publish(introspection_subject(first), payload)
            await asyncio.sleep(0)

    flooding = asyncio.create_task(flood())
    try:
        # Meanwhile the other replica's new dataflow reaches the collections in time.
        table = Shard(f"u{unique}", *storage)
        table.ensure(COLUMNS)
        began = time.monotonic()
        await compute.create_dataflow(info.id, dataflow("w", table))

        def second_has_both() -> None:
            names = {row[4] for row in held(arrow_writer, OPERATORS.collection_id, second)}
            assert any("w" in str(n) for n in names) or len(names) > 0
            assert held(arrow_writer, OPERATORS.collection_id, second) == replica_state(
                orchestrator, second, OPERATORS.name
            )

        await assert_eventually(second_has_both, timeout=10)
        delay = time.monotonic() - began

        def flood_counted() -> None:
            now = sample("loupe_controller_introspection_dropped_updates_total", replica_id=first)
            assert now > dropped
            status = status_of(arrow_writer, first)
            assert status is not None
            assert status[2] is False
            assert status[4] > 0

        await assert_eventually(flood_counted, timeout=10)
    finally:
        stop.set()
        await flooding
    assert delay < 5, delay
    status = status_of(arrow_writer, second)
    assert status[2] is True
    # The flood over, the flooded replica is made whole by a snapshot.
    await wait_synced(compute, orchestrator, arrow_writer, first, timeout=30)


async def test_interval_changes_reach_replicas_live_and_zero_retracts(
    cluster, arrow_writer, storage, unique
):
    compute, orchestrator, info, (first, second) = cluster
    table = Shard(f"t{unique}", *storage)
    await wait_synced(compute, orchestrator, arrow_writer, first)
    specs = [ReplicaSpec(r, info.id, workers=2) for r in (first, second)]
    slower = ClusterInfo(info.id, info.name, introspection_interval_ns=2 * FAST)
    await compute.apply([slower], specs)

    def slowed() -> None:
        for replica_id in (first, second):
            service = orchestrator.replicas[replica_id].service
            assert service.introspection.interval_ns == 2 * FAST

    await assert_eventually(slowed, timeout=5)
    assert orchestrator.replicas[first].incarnation == 1  # not restarted

    off = ClusterInfo(info.id, info.name, introspection_interval_ns=0)
    await compute.apply([off], specs)

    def stopped() -> None:
        for replica_id in (first, second):
            service = orchestrator.replicas[replica_id].service
            assert not service.introspection.running
            assert service.dataflows._engine.hooks is None
            assert held(arrow_writer, OPERATORS.collection_id, replica_id) == {}
            assert status_of(arrow_writer, replica_id) is None

    await assert_eventually(stopped, timeout=10)
    await asyncio.sleep(0.5)
    assert held(arrow_writer, OPERATORS.collection_id, first) == {}

    # On again: a fresh collector; it sees the dataflows made from now on (the engine
    # does not replay the ones it runs already).
    await compute.apply([info], specs)
    await compute.create_dataflow(info.id, dataflow("again", table))
    await wait_synced(compute, orchestrator, arrow_writer, first)


async def test_a_restarted_controller_reads_the_rows_back_and_replaces_them(
    cluster, make_compute, nats_url, kit, arrow_writer, storage, unique
):
    compute, orchestrator, info, replicas = cluster
    for replica_id in replicas:
        await wait_synced(compute, orchestrator, arrow_writer, replica_id)
    await compute.stop()  # its replicas stop; their rows stay
    assert held(arrow_writer, OPERATORS.collection_id, replicas[0])

    # A new controller, new processes (incarnation 1 again, as a fresh orchestrator
    # counts): without its mirror it reads the shards back, so the snapshot replaces.
    again = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    compute, _ = await make_compute(orchestrator=again, heartbeat_timeout=5.0)
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=2) for r in replicas])
    # Coordinators send their dataflows again to a new controller.
    await compute.create_dataflow(info.id, dataflow("v", Shard(f"t{unique}", *storage)))

    def applied() -> None:
        for replica_id in replicas:
            status = compute.introspection.status(replica_id)
            assert status is not None
            assert status.synced
            assert compute.introspection.mirror(replica_id).get(OPERATORS.collection_id)

    await assert_eventually(applied, timeout=20)
    await arrow_writer.flush()
    for replica_id in replicas:
        counts = held(arrow_writer, OPERATORS.collection_id, replica_id)
        assert set(counts.values()) == {1}, counts
        await wait_synced(compute, again, arrow_writer, replica_id)


async def test_a_snapshot_larger_than_a_message_is_written_in_parts(cluster, arrow_writer):
    compute, orchestrator, _info, (first, _) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    compute.introspection.max_batch_bytes = 2_000  # a few rows per batch
    written = compute.introspection.written_updates
    await orchestrator.kill(first)

    def replaced() -> None:
        status = compute.introspection.status(first)
        assert status is not None
        assert status.incarnation == 2
        assert status.synced
        assert compute.introspection.written_updates > written

    await assert_eventually(replaced, timeout=20)
    await arrow_writer.flush()
    await wait_synced(compute, orchestrator, arrow_writer, first)
    assert {row[1] for row in held(arrow_writer, OPERATORS.collection_id, first)} == {2}


async def test_drops_reported_by_the_replica_reach_the_status_and_the_metric(
    cluster, arrow_writer, storage, unique
):
    compute, orchestrator, info, (first, _) = cluster
    await wait_synced(compute, orchestrator, arrow_writer, first)
    before = sample("loupe_controller_introspection_dropped_updates_total", replica_id=first)
    replica = orchestrator.replicas[first].service.introspection
    replica.max_message_bytes = 500  # every message with a new dataflow's operators is dropped
    await compute.create_dataflow(info.id, dataflow("dropped", Shard(f"t{unique}", *storage)))
    await assert_eventually(lambda: _true(replica.dropped_updates > 0), timeout=10)
    replica.max_message_bytes = 8 * 2**20  # room again: the next message is a snapshot

    def reported() -> None:
        status = status_of(arrow_writer, first)
        assert status is not None
        assert status[2] is True  # the snapshot made it complete again
        assert status[4] >= replica.dropped_updates
        now = sample("loupe_controller_introspection_dropped_updates_total", replica_id=first)
        assert now - before >= replica.dropped_updates

    await assert_eventually(reported, timeout=10)
    await wait_synced(compute, orchestrator, arrow_writer, first)


def _true(condition: bool) -> None:
    assert condition
