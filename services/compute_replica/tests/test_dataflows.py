"""Dataflows on a replica: fed from real shards, driven by a controller played over NATS."""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from loupe.common import values
from loupe.compute_replica.dataflows import write_sink_batch
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Shard, expand
from loupe.persist.cache import ShardCache
from loupe.persist.location import LocalBlob
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
from loupe.plan.scalar import Call, Column, Literal
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

COLUMNS = (("id", "int4"), ("name", "text"))


class Table:
    """A table's shard in the test's storage, written at chosen timestamps."""

    def __init__(self, storage: Any) -> None:
        self.shard_id = f"s{uuid.uuid4().hex[:8]}"
        self.storage = storage
        self.shard = Shard(self.shard_id, storage._blob, storage._consensus)
        self.shard.ensure(COLUMNS)

    def write(self, rows: list[tuple[int, str]], timestamp: int, diff: int = 1) -> None:
        """Rows at ``timestamp``; the upper moves to ``timestamp + 1``."""
        updates = [
            {"id": i, "name": n, TIMESTAMP_COLUMN: timestamp, DIFF_COLUMN: diff} for i, n in rows
        ]
        table = pa.Table.from_pylist(updates, schema=arrow_schema(COLUMNS))
        self.shard.compare_and_append(table, self.shard.upper, timestamp + 1)


TABLE = lir.Get(0, "t", types=tuple(t for _, t in COLUMNS))
# v = SELECT id, name, 10 / (id - 1) FROM t: division by zero where id = 1.
QUOTIENT = lir.Mfp(
    1,
    TABLE,
    lir.MapFilterProject(
        2,
        expressions=(
            Call("div", (Literal(10, "int4"), Call("sub", (Column(0), Literal(1, "int4"))))),
        ),
        projection=(0, 1, 2),
    ),
    types=(*TABLE.types, "int4"),
)


def dataflow(
    table: Table,
    as_of: int,
    *,
    sinks: tuple[Any, ...] = (),
    plan: lir.Node = TABLE,
    name: str = "v",
    index: str = "i",
) -> compute_pb2.ComputeCommand:
    """A dataflow building ``name`` from the table by ``plan``, indexed as ``index``."""
    columns = tuple(zip((f"c{i}" for i in range(plan.arity)), plan.types, strict=True))
    desc = DataflowDescription(
        id=name,
        debug_name=name,
        source_imports=(SourceImport("t", table.shard_id, COLUMNS),),
        objects_to_build=(BuildDesc(name, plan, columns, name),),
        index_exports=(IndexExport(index, name, (0,)),),
        sink_exports=sinks,
        as_of=as_of,
    )
    return compute_pb2.CreateDataflow(dataflow=dataflow_to_proto(desc))


def target_peek(timestamp: int, index: str = "i") -> compute_pb2.Peek:
    return compute_pb2.Peek(
        uuid=str(uuid.uuid4()),
        timestamp=timestamp,
        target_id=index,
        result_desc=common_pb2.RelationDesc(
            columns=[common_pb2.Column(name=n, type=t) for n, t in COLUMNS]
        ),
    )


async def peek_rows(controller: Any, timestamp: int, index: str = "i") -> list[tuple[Any, ...]]:
    peek = target_peek(timestamp, index)
    await controller.send(peek=peek)
    response = await controller.peek_response(peek.uuid)
    assert response.WhichOneof("result") == "rows", response
    return sorted(tuple(values.from_row(row)) for row in response.rows.rows)


@pytest.fixture
async def running(start_replica, controller, storage):
    """A created, initialized replica with two workers."""
    replica = await start_replica(workers=2)
    await controller.wait_for("hello")
    await controller.create_instance(storage, workers=2)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    await controller.wait_for("heartbeat")
    return replica


def frontiers_of(controller: Any, collection_id: str) -> list[Any]:
    return [f for f in controller.of_kind("frontiers") if f.collection_id == collection_id]


async def test_dataflow_follows_its_table_and_answers_peeks_by_target(running, controller, storage):
    """Frontiers advance with the table's upper; a peek waits for its time, then reads it."""
    table = Table(storage)
    table.write([(1, "a"), (2, "b")], timestamp=5)
    await controller.send(create_dataflow=dataflow(table, as_of=5))

    def frontier_at_least(upper: int) -> None:
        assert any(f.write_frontier >= upper for f in frontiers_of(controller, "i"))

    await assert_eventually(lambda: frontier_at_least(6))
    assert await peek_rows(controller, 5) == [(1, "a"), (2, "b")]

    future = target_peek(20)
    await controller.send(peek=future)
    table.write([(3, "c")], timestamp=8)
    table.write([(1, "a")], timestamp=20, diff=-1)
    response = await controller.peek_response(future.uuid)
    assert sorted(tuple(values.from_row(r)) for r in response.rows.rows) == [(2, "b"), (3, "c")]
    assert await peek_rows(controller, 8) == [(1, "a"), (2, "b"), (3, "c")]
    await assert_eventually(lambda: frontier_at_least(21))
    assert frontiers_of(controller, "i")[-1].input_frontier == 21


async def test_hydration_is_reported_with_the_records_read(running, controller, storage):
    """Hydration goes to hydrated once the snapshot is through, counting what was read."""
    table = Table(storage)
    table.write([(1, "a"), (2, "b"), (3, "c")], timestamp=4)
    await controller.send(create_dataflow=dataflow(table, as_of=4, plan=QUOTIENT))

    def hydrated() -> Any:
        done = [h for h in controller.of_kind("hydration") if h.hydrated]
        assert done
        return done[0]

    report = await assert_eventually(hydrated)
    assert report.dataflow_id == "v"
    assert report.records_read == 3
    assert report.nodes_total == report.nodes_hydrated >= 2


class GatedBlob(LocalBlob):
    """The test's local blob, whose part reads each wait for a permit: reading made observable."""

    def __init__(self, root: Path, permits: threading.Semaphore) -> None:
        super().__init__(root)
        self.permits = permits
        self.reads = 0

    def filesystem_path(self, key: str) -> tuple[Any, str]:
        assert self.permits.acquire(timeout=60), "the test never let this part be read"
        self.reads += 1
        return super().filesystem_path(key)


class GatedShards(ShardCache):
    """Real shards of the test's storage, read through a ``GatedBlob``."""

    def __init__(self, storage: Any, blob: GatedBlob) -> None:
        super().__init__()
        self.blob = blob
        self.consensus = storage._consensus

    def shard(self, shard_id: str, location: Any) -> Shard:
        return Shard(shard_id, self.blob, self.consensus)


async def test_hydration_progress_counts_the_snapshot_as_its_parts_are_read(
    start_replica, controller, storage
):
    """Reading the snapshot is most of a hydration: the Get's records_done rises part by part
    (each pushed as read) before the dataflow hydrates, from the parts' expected size."""
    table = Table(storage)
    for timestamp in range(1, 6):  # five parts of 4 rows; one retracts a row of the first
        table.write([(timestamp * 10 + i, f"r{i}") for i in range(4)], timestamp)
    table.write([(10, "r0")], 6, diff=-1)
    replica = await start_replica(workers=2, snapshot_piece_rows=1, report_interval=0.02)
    permits = threading.Semaphore(0)
    blob = GatedBlob(storage._blob.root, permits)
    replica._shards = GatedShards(storage, blob)  # before its dataflows exist: they use it
    await controller.wait_for("hello")
    await controller.create_instance(storage, workers=2)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    await controller.send(create_dataflow=dataflow(table, as_of=6))

    def get_node(report: Any) -> tuple[int, int]:
        nodes = [n for n in report.nodes if n.lir_id == 0]
        assert len(nodes) == 2  # one per worker
        return sum(n.records_done for n in nodes), sum(n.records_estimated for n in nodes)

    def reported(done: int) -> Any:
        reports = [h for h in controller.of_kind("hydration") if h.dataflow_id == "v"]
        assert reports
        assert get_node(reports[-1])[0] == done
        return reports[-1]

    first = await assert_eventually(lambda: reported(0))
    assert get_node(first) == (0, 21)  # the parts' rows: an upper bound (one retraction)
    assert not first.hydrated
    for part, done in enumerate((4, 8, 12, 16, 20), start=1):
        permits.release()
        report = await assert_eventually(lambda done=done: reported(done))
        assert not report.hydrated, f"hydrated after {part} of 6 parts"
        assert get_node(report) == (done, 21)
        assert report.records_done >= done
    permits.release(100)  # the last part, and every read after it
    final = await assert_eventually(lambda: _hydrated(controller))
    assert get_node(final) == (21, 21)  # what was read: not counted again by the step
    assert final.records_done == final.records_estimated
    reports = [h for h in controller.of_kind("hydration") if h.dataflow_id == "v"]
    done = [get_node(h)[0] for h in reports]
    assert done == sorted(done)
    assert [h.hydrated for h in reports].index(True) > 5  # hydrated only after every part
    # The pieces sum to the snapshot: the retraction in the last part cancelled its insert.
    rows = await peek_rows(controller, 6)
    assert len(rows) == 19
    assert (10, "r0") not in rows


async def test_a_snapshot_compacted_while_it_is_read_is_retracted_and_read_again(
    start_replica, controller, storage
):
    table = Table(storage)
    for timestamp in range(1, 6):
        table.write([(timestamp * 10 + i, f"r{i}") for i in range(4)], timestamp)
    table.write([(10, "r0")], 6, diff=-1)
    replica = await start_replica(workers=2, snapshot_piece_rows=1, report_interval=0.02)
    permits = threading.Semaphore(0)
    replica._shards = GatedShards(storage, GatedBlob(storage._blob.root, permits))
    await controller.wait_for("hello")
    await controller.create_instance(storage, workers=2)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    await controller.send(create_dataflow=dataflow(table, as_of=6))

    def get_done() -> int:
        reports = [h for h in controller.of_kind("hydration") if h.dataflow_id == "v"]
        assert reports
        return sum(n.records_done for n in reports[-1].nodes if n.lir_id == 0)

    permits.release()
    await assert_eventually(lambda: _assert(get_done() == 4))  # the first part is in
    await asyncio.to_thread(table.shard.compact)  # its other parts are gone: one part of 19
    permits.release(100)
    final = await assert_eventually(lambda: _hydrated(controller))
    # The first part was pushed, retracted (4 + 4), then the compacted part read (19).
    assert [(n.records_done, n.records_estimated) for n in final.nodes if n.lir_id == 0] == [
        (14, 14),
        (13, 13),
    ]
    rows = await peek_rows(controller, 6)
    assert rows == sorted((t * 10 + i, f"r{i}") for t in range(1, 6) for i in range(4))[1:]


def _hydrated(controller: Any) -> Any:
    reports = [h for h in controller.of_kind("hydration") if h.dataflow_id == "v" and h.hydrated]
    assert reports
    return reports[0]


async def test_errors_inside_a_dataflow_are_reported_and_fail_its_peeks(
    running, controller, storage
):
    """A division by zero is a CollectionError and a peek error, until its row is retracted."""
    table = Table(storage)
    table.write([(1, "a"), (2, "b")], timestamp=4)
    await controller.send(create_dataflow=dataflow(table, as_of=4, plan=QUOTIENT))
    (error,) = await controller.wait_for("collection_error")
    assert (error.collection_id, error.error.code, error.since) == ("i", "22012", 4)
    peek = target_peek(4)
    await controller.send(peek=peek)
    assert (await controller.peek_response(peek.uuid)).error.code == "22012"

    table.write([(1, "a")], timestamp=6, diff=-1)
    cleared = await controller.wait_for("collection_error", count=2)
    assert cleared[1].cleared
    assert await peek_rows(controller, 6) == [(2, "b", 10)]


async def test_a_dataflow_the_engine_refuses_is_an_error_not_a_crash(running, controller, storage):
    """A dataflow importing an index nobody exports: its export errs, the replica serves on."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    refused = dataflow(table, as_of=1)
    refused.dataflow.index_imports.add(index_id="missing", on_id="t")
    await controller.send(create_dataflow=refused)
    (error,) = await controller.wait_for("collection_error")
    assert error.collection_id == "i"
    assert "missing" in error.error.message
    peek = target_peek(1)
    await controller.send(peek=peek)
    assert "missing" in (await controller.peek_response(peek.uuid)).error.message

    await controller.send(
        allow_compaction=compute_pb2.AllowCompaction(collection_id="i", empty=True)
    )
    await controller.send(create_dataflow=dataflow(table, as_of=1))
    assert await peek_rows(controller, 1) == [(1, "a")]


# t x t: n squared rows from n (no equivalences: a cross join).
CROSS = lir.Join(
    3,
    (
        lir.ArrangeBy(1, TABLE, (), types=TABLE.types),
        lir.ArrangeBy(2, TABLE, (), types=TABLE.types),
    ),
    (),
    lir.JoinKind.DELTA,
    types=TABLE.types * 2,
)


async def test_a_dataflow_past_the_memory_budget_fails_53200_and_the_replica_serves_on(
    start_replica, controller, storage
):
    """CreateInstance's budget: the cross join fails at once, its peeks too; the other works."""
    replica = await start_replica()
    await controller.wait_for("hello")
    await controller.create_instance(storage, memory_limit_bytes=8 * 1024 * 1024)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    table = Table(storage)
    table.write([(i, f"name {i}") for i in range(2_000)], timestamp=1)
    await controller.send(create_dataflow=dataflow(table, as_of=1, plan=CROSS, name="x"))
    await controller.send(create_dataflow=dataflow(table, as_of=1, name="w", index="j"))

    (error,) = await controller.wait_for("collection_error")
    assert (error.collection_id, error.error.code) == ("i", "53200")
    assert "out of memory: dataflow x" in error.error.message
    peek = target_peek(0)
    await controller.send(peek=peek)
    assert (await controller.peek_response(peek.uuid)).error.code == "53200"

    table.write([(9_999, "late")], timestamp=2)
    assert len(await peek_rows(controller, 2, "j")) == 2_001
    assert replica.dataflows is not None
    assert replica.dataflows.dataflow_ids() == ["w", "x"]  # failed, not gone, until dropped


async def test_dataflows_sharing_a_table_read_one_feed(running, controller, storage):
    """Two dataflows over one table, created back to back as a replay does, see the same data."""
    table = Table(storage)
    await controller.send(create_dataflow=dataflow(table, as_of=3))
    await controller.send(create_dataflow=dataflow(table, as_of=3, name="w", index="j"))
    table.write([(1, "a")], timestamp=3)
    table.write([(2, "b")], timestamp=5)
    assert await peek_rows(controller, 5) == [(1, "a"), (2, "b")]
    assert await peek_rows(controller, 5, "j") == [(1, "a"), (2, "b")]
    assert running.dataflows.fed_sources() == ["t"]


async def test_peek_of_an_unknown_index_is_an_error(running, controller):
    """A peek naming no export of this replica is answered with an error, not a hang."""
    peek = target_peek(1)
    await controller.send(peek=peek)
    response = await controller.peek_response(peek.uuid)
    assert response.error.code == "42704"


async def test_replayed_create_dataflow_builds_once(running, controller, storage):
    """The same CreateDataflow twice (a replayed history) leaves one dataflow."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    await controller.send(create_dataflow=dataflow(table, as_of=1))
    await controller.send(create_dataflow=dataflow(table, as_of=1))
    await assert_eventually(lambda: _assert(frontiers_of(controller, "i")))
    assert running.dataflows.dataflow_ids() == ["v"]
    assert await peek_rows(controller, 1) == [(1, "a")]


async def test_drop_frees_the_dataflow_and_stops_feeding(running, controller, storage):
    """AllowCompaction(empty) drops the export, its dataflow, and the source's feeder."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    await controller.send(create_dataflow=dataflow(table, as_of=1))
    await assert_eventually(lambda: _assert(frontiers_of(controller, "i")))
    assert running.dataflows.fed_sources() == ["t"]

    await controller.send(
        allow_compaction=compute_pb2.AllowCompaction(collection_id="i", empty=True)
    )
    await assert_eventually(lambda: _assert(any(f.empty for f in frontiers_of(controller, "i"))))
    assert running.dataflows.dataflow_ids() == []
    assert running.dataflows.fed_sources() == []
    peek = target_peek(1)
    await controller.send(peek=peek)
    assert (await controller.peek_response(peek.uuid)).error.code == "42704"


async def test_a_feeder_no_longer_registered_never_pushes(running, controller, storage):
    """A feeder still running after it was replaced (its cancel lost) stops at its next push.

    Python 3.11's ``asyncio.wait_for`` can swallow a cancel (see
    ``Listener._sleep_until_woken``); such a feeder fed the uppers of a
    materialized view's shard to the view's next reader, whose dataflow
    passed its as_of before its own snapshot came: the view read as empty.
    """
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    await controller.send(create_dataflow=dataflow(table, as_of=1))
    await assert_eventually(lambda: _assert(frontiers_of(controller, "i")))
    runner = running.dataflows
    stray = asyncio.create_task(runner._feed(runner._sources["t"], 1))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stray, 10)
    table.write([(2, "b")], timestamp=3)
    assert await peek_rows(controller, 3) == [(1, "a"), (2, "b")]
    assert runner.fed_sources() == ["t"]


async def test_a_dataflow_whose_sources_are_compacted_starts_at_their_since(
    running, controller, storage
):
    """History before the since is gone: the dataflow starts there; earlier reads are refused."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    table.write([(2, "b")], timestamp=9)
    table.shard.downgrade_since(5)
    await controller.send(create_dataflow=dataflow(table, as_of=2))
    assert await peek_rows(controller, 5) == [(1, "a")]
    early = target_peek(4)
    await controller.send(peek=early)
    assert "since 5" in (await controller.peek_response(early.uuid)).error.message


async def test_a_source_compacted_past_what_was_read_is_a_collection_error(
    running, controller, storage
):
    """A feed that fell behind the source's since cannot go on: its exports hold an error."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=5)
    await controller.send(create_dataflow=dataflow(table, as_of=5))
    assert await peek_rows(controller, 5) == [(1, "a")]
    table.shard.downgrade_since(10)
    table.write([(2, "b")], timestamp=10)
    errors = await controller.wait_for("collection_error")
    assert errors[0].collection_id == "i"
    assert "compaction" in errors[0].error.message
    peek = target_peek(5)
    await controller.send(peek=peek)
    assert "compaction" in (await controller.peek_response(peek.uuid)).error.message


async def test_persist_sink_writes_the_view_into_its_shard(running, controller, storage):
    """A materialized view's shard holds the view's contents, time by time."""
    table = Table(storage)
    table.write([(1, "a"), (2, "b")], timestamp=3)
    view = Shard(f"mv{uuid.uuid4().hex[:6]}", storage._blob, storage._consensus)
    sink = PersistSink("mv", "v", view.shard_id, COLUMNS)
    await controller.send(create_dataflow=dataflow(table, as_of=3, sinks=(sink,)))
    table.write([(1, "a")], timestamp=6, diff=-1)

    def written() -> None:
        assert view.state(missing_ok=True) is not None
        assert view.upper == 7

    await assert_eventually(written)
    assert _contents(view, 3) == [(1, "a"), (2, "b")]
    assert _contents(view, 6) == [(2, "b")]


async def test_a_view_restarted_behind_a_shared_feed_is_not_written_twice(
    running, controller, storage
):
    """A restarted replica re-creates a materialized view from a compacted since while
    another dataflow already feeds its table from a later as_of: the view starts at the
    feed's as_of, and its first batch (the contents through it) replaces what the
    shard holds instead of adding to it."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=1)
    table.write([(2, "b")], timestamp=3)
    table.write([(3, "c")], timestamp=5)
    view = Shard(f"mv{uuid.uuid4().hex[:6]}", storage._blob, storage._consensus)
    # What the replica's earlier incarnation wrote: the view through 5.
    before = sink_batch([(1, "a", 1, 1), (2, "b", 3, 1), (3, "c", 5, 1)])
    write_sink_batch(view, COLUMNS, 1, 6, before, snapshot=True)
    await controller.send(create_dataflow=dataflow(table, as_of=6, name="w", index="j"))
    await assert_eventually(lambda: _assert(running.dataflows.fed_sources() == ["t"]))
    sink = PersistSink("mv", "v", view.shard_id, COLUMNS)
    await controller.send(create_dataflow=dataflow(table, as_of=4, sinks=(sink,)))
    table.write([(1, "a")], timestamp=6, diff=-1)
    await assert_eventually(lambda: _assert(view.upper >= 7))
    assert _contents(view, 5) == [(1, "a"), (2, "b"), (3, "c")]
    assert _contents(view, 6) == [(2, "b"), (3, "c")]


async def test_subscribe_sends_its_batches(running, controller, storage):
    """A subscribe sink's changes arrive as SubscribeBatch responses, gap-free."""
    table = Table(storage)
    table.write([(1, "a")], timestamp=3)
    await controller.send(
        create_dataflow=dataflow(table, as_of=3, sinks=(SubscribeSink("sub", "v"),))
    )
    table.write([(2, "b")], timestamp=4)

    def through(upper: int) -> list[Any]:
        batches = [b for b in controller.of_kind("subscribe_batch") if b.sink_id == "sub"]
        assert batches
        assert batches[-1].upper >= upper
        return batches

    batches = await assert_eventually(lambda: through(5))
    assert batches[0].lower == 3
    assert all(a.upper == b.lower for a, b in itertools.pairwise(batches))
    updates = [(tuple(values.from_row(u.row)), u.time, u.diff) for b in batches for u in b.updates]
    assert sorted(updates) == [((1, "a"), 3, 1), ((2, "b"), 4, 1)]


def _contents(shard: Shard, as_of: int) -> list[tuple[Any, ...]]:
    table = expand(shard.snapshot(as_of))
    return sorted(zip(*(table.column(n).to_pylist() for n, _ in COLUMNS), strict=True))


def _assert(condition: object) -> None:
    assert condition


# -- persist sinks: exactly once across replicas ---------------------------------------------


def sink_batch(rows: list[tuple[int, str, int, int]]) -> pa.Table:
    """(id, name, time, diff) rows as a sink batch's updates."""
    updates = [{"id": i, "name": n, TIMESTAMP_COLUMN: t, DIFF_COLUMN: d} for i, n, t, d in rows]
    return pa.Table.from_pylist(updates, schema=arrow_schema(COLUMNS))


def test_every_replica_writes_each_sink_batch_and_exactly_one_wins(storage):
    """Two replicas writing the same batches leave each time in the shard once."""
    view = Shard("mv-race", storage._blob, storage._consensus)
    first = sink_batch([(1, "a", 3, 1), (2, "b", 3, 1)])
    second = sink_batch([(1, "a", 5, -1)])
    assert write_sink_batch(view, COLUMNS, 3, 5, first) == "written"
    assert write_sink_batch(view, COLUMNS, 3, 5, first) == "skipped"
    assert write_sink_batch(view, COLUMNS, 5, 6, second) == "written"
    assert write_sink_batch(view, COLUMNS, 5, 6, second) == "skipped"
    assert view.upper == 6
    assert _contents(view, 4) == [(1, "a"), (2, "b")]
    assert _contents(view, 5) == [(2, "b")]


def test_a_replica_behind_resumes_at_the_shards_upper(storage):
    """A batch the shard is partly past contributes only its later times."""
    view = Shard("mv-behind", storage._blob, storage._consensus)
    write_sink_batch(view, COLUMNS, 3, 5, sink_batch([(1, "a", 3, 1)]))
    # A restarted replica batches differently: [3, 8) covers the written [3, 5).
    late = sink_batch([(1, "a", 3, 1), (2, "b", 4, 1), (3, "c", 6, 1)])
    assert write_sink_batch(view, COLUMNS, 3, 8, late) == "written"
    assert view.upper == 8
    assert _contents(view, 7) == [(1, "a"), (3, "c")]


def test_a_sink_starting_after_the_shards_upper_corrects_what_it_holds(storage):
    """A dataflow re-created later replaces the shard's old contents, without doubles."""
    view = Shard("mv-ahead", storage._blob, storage._consensus)
    write_sink_batch(view, COLUMNS, 0, 4, sink_batch([(1, "a", 1, 1), (2, "b", 2, 1)]))
    # The view at 10 is {2, 3}: its snapshot is the first batch of the new dataflow.
    snapshot = sink_batch([(2, "b", 10, 1), (3, "c", 10, 1)])
    assert write_sink_batch(view, COLUMNS, 10, 11, snapshot) == "corrected"
    assert _contents(view, 3) == [(1, "a"), (2, "b")]
    assert _contents(view, 10) == [(2, "b"), (3, "c")]


def test_a_snapshot_at_the_shards_upper_replaces_what_it_holds(storage):
    """A dataflow re-created with its as_of at the shard's upper (a restarted replica,
    from a compacted since): its first batch is the view's contents through the as_of,
    not the changes at it, so the shard's rows are retracted, not counted twice."""
    view = Shard("mv-at-upper", storage._blob, storage._consensus)
    write_sink_batch(view, COLUMNS, 0, 6, sink_batch([(1, "a", 1, 1), (2, "b", 5, 1)]))
    # The view through 6 is {1, 3}: (2, b) went and (3, c) came at 6.
    snapshot = sink_batch([(1, "a", 6, 1), (3, "c", 6, 1)])
    assert write_sink_batch(view, COLUMNS, 6, 7, snapshot, snapshot=True) == "corrected"
    assert _contents(view, 5) == [(1, "a"), (2, "b")]
    assert _contents(view, 6) == [(1, "a"), (3, "c")]
    # Not a snapshot: the batch's updates at 7 are the changes at 7, appended as they are.
    assert write_sink_batch(view, COLUMNS, 7, 8, sink_batch([(4, "d", 7, 1)])) == "written"
    assert _contents(view, 7) == [(1, "a"), (3, "c"), (4, "d")]
