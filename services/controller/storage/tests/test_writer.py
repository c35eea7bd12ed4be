"""The storage writer against real Spark, JetStream, a blob directory and SQLite consensus."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import structlog
from prometheus_client import REGISTRY

from loupe import interval
from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_AUDIT_EVENTS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTERS,
)
from loupe.common.errors import LoupeError
from loupe.controller.storage import (
    PROGRESS_KEY,
    STREAM_EPOCH_KEY,
    StorageWriter,
    StreamConfig,
    decode_batch,
    encode_batch,
)
from loupe.controller.storage.writer import _FlushReport
from loupe.interval import Interval
from loupe.persist import Consensus, LocalBlob, Shard
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.wire import encode_arrow
from loupe.testing import assert_eventually

pytestmark = [pytest.mark.spark]

UTC = dt.UTC
CLUSTER = ("u1", "quickstart", "u1", True, "1", 1, Interval(micros=1_000_000), False)
REPLICA = ("u1", "r1", "u1", "1", "u1")


@contextlib.contextmanager
def unwritable(blob: LocalBlob) -> Iterator[None]:
    """Replace the blob directory by a file (root ignores permissions), then restore it."""
    moved = blob.root.with_name("blob.moved")
    os.rename(blob.root, moved)
    blob.root.write_text("not a directory")
    try:
        yield
    finally:
        blob.root.unlink()
        os.rename(moved, blob.root)


def uppers(blob: LocalBlob, consensus: Consensus) -> set[int]:
    return {Shard(c.shard_id, blob, consensus).upper for c in BUILTIN_COLLECTIONS}


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def parts(blob: LocalBlob, consensus: Consensus, shard_id: str) -> int:
    return len(Shard(shard_id, blob, consensus).state().parts)


async def unacknowledged(nats_connection: Any, stream: StreamConfig) -> int:
    info = await nats_connection.jetstream().consumer_info(stream.name, stream.consumer)
    return int(info.num_ack_pending) + int(info.num_pending)


def all_acknowledged(nats_connection: Any, stream: StreamConfig) -> Any:
    async def check() -> None:
        assert await unacknowledged(nats_connection, stream) == 0

    return check


async def test_start_creates_every_shard_with_its_columns(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """Every builtin collection exists as a shard with the collection's columns."""
    for collection in BUILTIN_COLLECTIONS:
        state = Shard(collection.shard_id, blob, consensus).state()
        assert state.columns == list(collection.columns)
    assert writer.snapshot(MZ_CLUSTERS.id) == []


async def test_staged_rows_are_visible_with_their_types(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """Text, bool, uint8, interval and timestamptz values come back from Shard.snapshot."""
    at = dt.datetime(2024, 5, 6, 9, 8, 7, 654321, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    status = ("u1", 0, "online", None, at, 2**40)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    writer.stage(MZ_CLUSTER_REPLICA_STATUSES.id, status, 1)
    jobs = metric("loupe_storage_spark_writes_total")
    await writer.flush()

    assert metric("loupe_storage_spark_writes_total") == jobs + 1, "both in one Spark job"
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    (row,) = writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert row == status
    assert row[4] == at.astimezone(UTC)
    snapshot = Shard(MZ_CLUSTERS.id, blob, consensus).snapshot()
    assert snapshot.schema.field("replication_factor").type == pa.uint64()
    assert snapshot.schema.field("introspection_interval").type == interval.ARROW
    assert snapshot.schema.field("managed").type == pa.bool_()
    statuses = Shard(MZ_CLUSTER_REPLICA_STATUSES.id, blob, consensus).snapshot()
    assert statuses.schema.field("updated_at").type == pa.timestamp("us", tz="UTC")


async def test_collections_whose_id_types_clash_are_written_by_one_spark_job(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """mz_clusters' text id and mz_audit_events' uint8 id share one job (the integer
    carried as text) and each shard reads its own type back, exactly."""
    event = (2**62 + 7, "create", "cluster", '{"id": "u1"}', None, None)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    writer.stage(MZ_AUDIT_EVENTS.id, event, 1)
    jobs = metric("loupe_storage_spark_writes_total")
    await writer.flush()

    assert metric("loupe_storage_spark_writes_total") == jobs + 1, "one Spark job"
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert writer.snapshot(MZ_AUDIT_EVENTS.id) == [event]
    events = Shard(MZ_AUDIT_EVENTS.id, blob, consensus).snapshot()
    assert events.schema.field("id").type == pa.uint64()
    assert events.column("id").to_pylist() == [2**62 + 7]


async def test_retraction_and_insertion_replace_a_row(writer: StorageWriter) -> None:
    """Retracting a row and inserting its new version leaves only the new version."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    await writer.flush()
    renamed = ("u1", "renamed", *CLUSTER[2:])
    writer.stage(MZ_CLUSTERS.id, CLUSTER, -1)
    writer.stage(MZ_CLUSTERS.id, renamed, 1)
    await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [renamed]


async def test_every_collection_shares_the_upper_after_a_flush(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """A flush advances every builtin collection, written or not, to one upper."""
    before = writer.upper
    writer.stage(MZ_CLUSTER_REPLICAS.id, REPLICA, 1)
    upper = await writer.flush()
    assert upper > before
    assert uppers(blob, consensus) == {upper}
    assert parts(blob, consensus, MZ_CLUSTER_REPLICAS.id) == 1
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 0
    assert await writer.flush() > upper
    assert len(uppers(blob, consensus)) == 1


async def test_every_shard_records_the_stream_sequence_it_holds(
    writer: StorageWriter,
    blob: LocalBlob,
    consensus: Consensus,
    nats_connection: Any,
    stream: StreamConfig,
) -> None:
    """After a flush each shard's progress is the last stream sequence; the batches are acked."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    writer.stage(MZ_AUDIT_EVENTS.id, (1, "create", "cluster", "{}", None, None), 1)
    await writer.flush()
    last = (await nats_connection.jetstream().stream_info(stream.name)).state.last_seq
    assert last >= 1
    for collection in BUILTIN_COLLECTIONS:
        progress = Shard(collection.shard_id, blob, consensus).state().progress
        assert progress[PROGRESS_KEY] == last
        assert progress[STREAM_EPOCH_KEY] > 0
    assert writer.applied_through == last
    await assert_eventually(all_acknowledged(nats_connection, stream))


async def test_append_is_durable_on_return_and_a_replayed_batch_applies_once(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """append returns once the rows are in the shard; the same batch id is not applied twice."""
    batch = [(MZ_CLUSTERS.id, CLUSTER, 1), (MZ_CLUSTER_REPLICAS.id, REPLICA, 1)]
    replays = metric("loupe_storage_replayed_batches_total")
    first, replay_while_pending = await asyncio.gather(
        writer.append("batch-1", batch), writer.append("batch-1", batch)
    )
    assert metric("loupe_storage_replayed_batches_total") == replays + 1
    assert Shard(MZ_CLUSTER_REPLICAS.id, blob, consensus).upper >= max(first, replay_while_pending)
    assert writer.snapshot(MZ_CLUSTER_REPLICAS.id) == [REPLICA]

    await writer.append("batch-1", batch)
    await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert writer.snapshot(MZ_CLUSTER_REPLICAS.id) == [REPLICA]


async def test_wire_updates_are_checked_then_published_as_they_came(
    writer: StorageWriter, nats_connection: Any, stream: StreamConfig
) -> None:
    """AppendUpdates' path: rows and columnar updates land; refused ones never reach the stream."""
    status = ("u1", 0, "online", None, dt.datetime(2024, 1, 1, tzinfo=UTC), 1)
    rows = encode_batch("w1", [(MZ_CLUSTERS.id, CLUSTER, 1)]).collections[0]
    columns = decode_batch(
        encode_batch("x", [(MZ_CLUSTER_REPLICA_STATUSES.id, status, 1)]).SerializeToString(),
        {c.id: c for c in BUILTIN_COLLECTIONS},
    )[1][MZ_CLUSTER_REPLICA_STATUSES.id]
    columnar = encode_arrow(MZ_CLUSTER_REPLICA_STATUSES.id, columns)
    await writer.append_collections("w1", [rows, columnar])
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id) == [status]

    stored = (await nats_connection.jetstream().stream_info(stream.name)).state.last_seq
    unknown = storage_pb2.CollectionUpdates(collection_id="s999")
    with pytest.raises(LoupeError) as raised:
        await writer.append_collections("w2", [unknown])
    assert raised.value.code == "NOT_FOUND"
    short = encode_batch("w3", [(MZ_CLUSTER_REPLICAS.id, REPLICA, 1)]).collections[0]
    short.updates[0].row.values.pop()
    with pytest.raises(LoupeError, match="5 columns, an update has 4") as raised:
        await writer.append_collections("w3", [short])
    assert raised.value.code == "INVALID_ARGUMENT"
    assert (await nats_connection.jetstream().stream_info(stream.name)).state.last_seq == stored


async def test_bad_rows_are_refused_when_staged(writer: StorageWriter) -> None:
    """Unknown collections, wrong arity and wrongly typed values fail at once, not at a flush."""
    naive = ("u1", 0, "online", None, dt.datetime(2024, 1, 1), 1)
    with pytest.raises(LoupeError, match="timezone-aware"):
        writer.stage(MZ_CLUSTER_REPLICA_STATUSES.id, naive, 1)
    with pytest.raises(LoupeError, match="columns"):
        writer.stage(MZ_CLUSTERS.id, ("u1",), 1)
    with pytest.raises(LoupeError, match="not a collection"):
        await writer.append("bad", [("s999", (), 1)])
    negative = ("u1", -1, "online", None, dt.datetime.now(UTC), 1)
    with pytest.raises(LoupeError, match="uint8"):
        writer.stage(MZ_CLUSTER_REPLICA_STATUSES.id, negative, 1)


async def test_batches_that_cannot_be_applied_are_counted_and_skipped(
    writer: StorageWriter, nats_connection: Any, stream: StreamConfig
) -> None:
    """Garbage and wrongly typed batches in the stream are refused; the next batch lands."""
    refused = metric("loupe_storage_bad_batches_total")
    js = nats_connection.jetstream()
    await js.publish(stream.subject, b"\xff\xff not protobuf", headers={"Nats-Msg-Id": "junk"})
    wrong = encode_batch("wrong", [(MZ_CLUSTERS.id, CLUSTER, 1)])
    wrong.collections[0].updates[0].row.values[0].int_value = 7  # text column, int value
    await js.publish(stream.subject, wrong.SerializeToString(), headers={"Nats-Msg-Id": "wrong"})
    await writer.append("good", [(MZ_CLUSTER_REPLICAS.id, REPLICA, 1)])
    assert metric("loupe_storage_bad_batches_total") == refused + 2
    assert writer.snapshot(MZ_CLUSTERS.id) == []
    assert writer.snapshot(MZ_CLUSTER_REPLICAS.id) == [REPLICA]


async def test_a_failed_write_loses_nothing_and_duplicates_nothing(
    writer: StorageWriter,
    blob: LocalBlob,
    consensus: Consensus,
    nats_connection: Any,
    stream: StreamConfig,
) -> None:
    """While the blob is unwritable the rows wait unacked (upper held back); then land once."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    before = Shard(MZ_CLUSTERS.id, blob, consensus).upper
    with unwritable(blob):
        await writer.flush()
    assert Shard(MZ_CLUSTERS.id, blob, consensus).upper == before, "upper held back"
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 0
    assert await unacknowledged(nats_connection, stream) == 1

    upper = await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 1
    assert uppers(blob, consensus) == {upper}
    await assert_eventually(all_acknowledged(nats_connection, stream))


@pytest.mark.parametrize("fault", ["fail_before_commit", "fail_after_commit"])
async def test_an_append_failing_in_doubt_is_applied_exactly_once(
    writer: StorageWriter, blob: LocalBlob, consensus: Any, fault: str
) -> None:
    """A compare-and-append that errors (before or after committing) is settled, not repeated."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    consensus.faults[MZ_CLUSTERS.shard_id] = fault
    await writer.flush()
    upper = await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 1
    assert uppers(blob, consensus) == {upper}


async def test_losing_a_race_to_another_writer_rewrites_the_rows_later(
    writer: StorageWriter, blob: LocalBlob, consensus: Any
) -> None:
    """An UpperMismatch leaves the rows pending; the next flush writes them once, past the other upper."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    consensus.faults[MZ_CLUSTERS.shard_id] = "another_writer_first"
    await writer.flush()
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 0
    raced = Shard(MZ_CLUSTERS.id, blob, consensus).upper

    upper = await writer.flush()
    assert upper > raced
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert uppers(blob, consensus) == {upper}


async def test_a_new_writer_applies_what_the_last_one_left_in_the_stream(
    make_writer: Any, nats_connection: Any, stream: StreamConfig
) -> None:
    """Batches stored while no writer ran are applied during start, before it returns."""
    first = await make_writer()
    await first.stop()
    js = nats_connection.jetstream()
    batch = encode_batch("while-down", [(MZ_CLUSTERS.id, CLUSTER, 1)])
    await js.publish(stream.subject, batch.SerializeToString(), headers={"Nats-Msg-Id": "x"})

    second = await make_writer()
    assert second.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    await second.flush()
    assert second.snapshot(MZ_CLUSTERS.id) == [CLUSTER]


async def test_stopping_fails_appends_that_are_not_durable(
    make_writer: Any, blob: LocalBlob
) -> None:
    """A waiter of append gets an error if the writer stops before its rows are written."""
    writer = await make_writer()
    with unwritable(blob):
        waiting = asyncio.create_task(writer.append("doomed", [(MZ_CLUSTERS.id, CLUSTER, 1)]))
        await asyncio.sleep(0.2)  # let append publish its batch
        await writer.stop()
        await writer.stop()  # idempotent
    with pytest.raises(LoupeError, match="stopped") as raised:
        await waiting
    assert raised.value.code == "UNAVAILABLE"
    with pytest.raises(LoupeError):
        await writer.append("late", [(MZ_CLUSTERS.id, CLUSTER, 1)])


async def test_the_flush_loop_writes_staged_rows_on_its_own(
    make_writer: Any, blob: LocalBlob, consensus: Consensus
) -> None:
    """Without any explicit flush, staged rows land within the flush interval."""
    writer = await make_writer(flush_interval=0.2)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)

    def landed() -> None:
        assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]

    await assert_eventually(landed, timeout=10)
    await writer.stop()
    assert uppers(blob, consensus) == {writer.upper}


async def test_urgent_updates_flush_without_waiting_for_the_interval(
    writer: StorageWriter,
) -> None:
    """An urgent stage (a replica status change) is written long before the (hour-long) interval."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    await asyncio.sleep(0.5)
    assert writer.snapshot(MZ_CLUSTERS.id) == [], "a plain stage waits for the interval"
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1, urgent=True)

    def landed() -> None:
        assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER, CLUSTER]

    await assert_eventually(landed, timeout=15)


async def test_an_idle_writer_moves_uppers_between_flushes_but_holds_data_back(
    make_writer: Any,
) -> None:
    """Upper ticks keep system relations readable at fresh times; data still waits to batch."""
    writer = await make_writer(upper_interval=0.1)
    await writer.flush()
    first = writer.upper

    def moved() -> None:
        assert writer.upper > first

    await assert_eventually(moved, timeout=10)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    await asyncio.sleep(1.0)
    assert writer.snapshot(MZ_CLUSTERS.id) == [], "ticks must not flush data early"


async def test_uppers_keep_moving_while_data_waits_for_the_interval(make_writer: Any) -> None:
    """A reader at a fresh time does not wait for the interval's data flush: only the data does."""
    writer = await make_writer(upper_interval=0.1)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    await writer._drain_outbox()
    first = writer.upper

    def moved() -> None:
        assert writer.upper > first + 300

    await assert_eventually(moved, timeout=10)
    assert writer.snapshot(MZ_CLUSTERS.id) == [], "upper ticks must not flush data early"


async def test_a_flush_moves_the_upper_to_when_it_ended(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """The upper after a data flush is the wall clock after the Spark write, not its start."""
    await writer.flush()
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    await writer.flush()
    ended = time.time_ns() // 1_000_000
    (part,) = Shard(MZ_CLUSTERS.shard_id, blob, consensus).state().parts
    assert part.lower < writer.upper - 1 <= ended
    assert uppers(blob, consensus) == {writer.upper}


async def test_data_after_a_quiet_interval_is_flushed_at_once(
    make_writer: Any, blob: LocalBlob, consensus: Consensus
) -> None:
    """The first updates after an interval without a flush do not wait for the next tick."""
    writer = await make_writer(flush_interval=3.0)
    await asyncio.sleep(3.2)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    staged = time.monotonic()

    def landed() -> None:
        assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]

    await assert_eventually(landed, timeout=10)
    assert time.monotonic() - staged < 2.0, "flushed at once, not at the next interval"


async def test_a_flush_slower_than_the_interval_pushes_the_next_one_back(
    make_writer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data flush longer than the interval is followed by a pause as long as it took, so
    Spark works about half the time; before, such flushes ran back to back and held a core."""
    writer = await make_writer(flush_interval=0.1)
    flushes: list[tuple[float, float]] = []

    async def slow(*, upper_only: bool = False) -> _FlushReport:
        if not upper_only:
            began = time.monotonic()
            await asyncio.sleep(0.4)
            flushes.append((began, time.monotonic()))
        return _FlushReport()

    monkeypatch.setattr(writer, "_flush_now", slow)
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)  # pending at every turn: nothing really flushes

    def three() -> None:
        assert len(flushes) >= 3

    await assert_eventually(three, timeout=15)
    pauses = [began - ended for (_, ended), (began, _) in itertools.pairwise(flushes)]
    assert min(pauses) >= 0.3, pauses


async def test_a_slow_flush_says_where_its_time_went(
    make_writer: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every builtin collection's upper waits for a flush: one past ``SLOW_FLUSH_S`` is
    logged with its phases (here the part store's write is made slow)."""
    from loupe.controller.storage import SparkPartStore
    from loupe.controller.storage import writer as writer_module

    class SlowWrites:
        def __init__(self, inner: SparkPartStore) -> None:
            self.inner, self.name = inner, inner.name

        def write_flush(self, *args: Any) -> None:
            time.sleep(0.3)
            self.inner.write_flush(*args)

        def merge(self, *args: Any) -> int:
            return self.inner.merge(*args)

    monkeypatch.setattr(writer_module, "SLOW_FLUSH_S", 0.2)
    writer = await make_writer(part_store=SlowWrites(SparkPartStore(spark)), flush_interval=0.05)
    with structlog.testing.capture_logs() as logs:
        writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
        await writer.flush()  # this one or the loop's: whichever took the row
    (slow,) = [e for e in logs if e["event"] == "storage_flush_slow" and e["rows"]]
    assert slow["write_s"] >= 0.3, slow
    assert slow["seconds"] >= slow["write_s"], slow
    assert (slow["rows"], slow["collections"], slow["failed_steps"]) == (1, 1, 0), slow
