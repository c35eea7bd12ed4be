"""The storage writer against real Spark, a real blob directory and real SQLite consensus."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTERS,
)
from loupe.common.errors import LoupeError
from loupe.controller.storage import StorageWriter
from loupe.persist import Consensus, LocalBlob, Shard, SqliteConsensus
from loupe.proto.storage.v1 import storage_pb2

UTC = dt.UTC
CLUSTER = ("u1", "quickstart", "u1", True, "1", 1, dt.timedelta(seconds=1), False)
REPLICA = ("u1", "r1", "u1", "1", "u1")


class FaultyConsensus(Consensus):
    """A real SQLite consensus that fails one chosen compare-and-set per armed key."""

    def __init__(self, inner: SqliteConsensus) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.faults: dict[str, str] = {}

    def head(self, key: str) -> tuple[int, bytes] | None:
        return self.inner.head(key)

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        fault = self.faults.pop(key, None)
        if fault == "fail_before_commit":
            raise ConnectionError("consensus unreachable")
        if fault == "fail_after_commit":
            self.inner.compare_and_set(key, expected, value)
            raise ConnectionError("connection lost after the commit")
        if fault == "another_writer_first":
            seqno, raw = self.inner.head(key) or (0, b"")
            state = storage_pb2.ShardState.FromString(raw)
            state.upper += 1000
            assert self.inner.compare_and_set(key, seqno, state.SerializeToString())
        return self.inner.compare_and_set(key, expected, value)


@pytest.fixture
def blob(data_dir: Path) -> LocalBlob:
    return LocalBlob(data_dir / "storage" / "blob")


@pytest.fixture
def consensus(data_dir: Path) -> FaultyConsensus:
    return FaultyConsensus(SqliteConsensus(data_dir / "storage" / "consensus.sqlite"))


@pytest.fixture
async def writer(
    spark: Any, blob: LocalBlob, consensus: FaultyConsensus
) -> AsyncIterator[StorageWriter]:
    # A long interval: flushes happen only when a test asks (flush/append).
    writer = StorageWriter(spark, blob, consensus, flush_interval=3600)
    await writer.start()
    yield writer
    await writer.stop()


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


def spark_jobs() -> float:
    return REGISTRY.get_sample_value("loupe_storage_spark_writes_total") or 0.0


def parts(blob: LocalBlob, consensus: Consensus, shard_id: str) -> int:
    return len(Shard(shard_id, blob, consensus).state().parts)


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
    jobs = spark_jobs()
    await writer.flush()

    assert spark_jobs() == jobs + 1, "both collections in one Spark job"
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    (row,) = writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert row == status
    assert row[4] == at.astimezone(UTC)
    snapshot = Shard(MZ_CLUSTERS.id, blob, consensus).snapshot()
    assert snapshot.schema.field("replication_factor").type == pa.uint64()
    assert snapshot.schema.field("introspection_interval").type == pa.duration("us")
    assert snapshot.schema.field("managed").type == pa.bool_()
    statuses = Shard(MZ_CLUSTER_REPLICA_STATUSES.id, blob, consensus).snapshot()
    assert statuses.schema.field("updated_at").type == pa.timestamp("us", tz="UTC")


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


async def test_append_is_durable_on_return_and_a_replayed_batch_applies_once(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """append returns once the rows are in the shard; the same batch id is not applied twice."""
    batch = [(MZ_CLUSTERS.id, CLUSTER, 1), (MZ_CLUSTER_REPLICAS.id, REPLICA, 1)]
    first, replay_while_pending = await asyncio.gather(
        writer.append("batch-1", batch), writer.append("batch-1", batch)
    )
    assert first == replay_while_pending
    shard = Shard(MZ_CLUSTER_REPLICAS.id, blob, consensus)
    assert shard.upper >= first
    assert writer.snapshot(MZ_CLUSTER_REPLICAS.id) == [REPLICA]

    assert await writer.append("batch-1", batch) == first
    await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert writer.snapshot(MZ_CLUSTER_REPLICAS.id) == [REPLICA]


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


async def test_a_failed_write_loses_nothing_and_duplicates_nothing(
    writer: StorageWriter, blob: LocalBlob, consensus: Consensus
) -> None:
    """While the blob is unwritable the rows wait (upper held back); then they land once."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    before = Shard(MZ_CLUSTERS.id, blob, consensus).upper
    with unwritable(blob):
        await writer.flush()
    assert Shard(MZ_CLUSTERS.id, blob, consensus).upper == before, "upper held back"
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 0

    upper = await writer.flush()
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 1
    assert uppers(blob, consensus) == {upper}


@pytest.mark.parametrize("fault", ["fail_before_commit", "fail_after_commit"])
async def test_an_append_failing_in_doubt_is_applied_exactly_once(
    writer: StorageWriter, blob: LocalBlob, consensus: FaultyConsensus, fault: str
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
    writer: StorageWriter, blob: LocalBlob, consensus: FaultyConsensus
) -> None:
    """An UpperMismatch leaves the rows buffered; the next flush writes them once, past the other upper."""
    writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
    consensus.faults[MZ_CLUSTERS.shard_id] = "another_writer_first"
    await writer.flush()
    assert parts(blob, consensus, MZ_CLUSTERS.id) == 0
    raced = Shard(MZ_CLUSTERS.id, blob, consensus).upper

    upper = await writer.flush()
    assert upper > raced
    assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]
    assert uppers(blob, consensus) == {upper}


async def test_stopping_fails_appends_that_are_not_durable(
    spark: Any, blob: LocalBlob, consensus: Consensus
) -> None:
    """A waiter of append gets an error if the writer stops before its rows are written."""
    writer = StorageWriter(spark, blob, consensus, flush_interval=3600)
    await writer.start()
    with unwritable(blob):
        waiting = asyncio.create_task(writer.append("doomed", [(MZ_CLUSTERS.id, CLUSTER, 1)]))
        await asyncio.sleep(0)  # let append stage its rows
        await writer.stop()
        await writer.stop()  # idempotent
    with pytest.raises(LoupeError, match="stopped") as raised:
        await waiting
    assert raised.value.code == "UNAVAILABLE"
    with pytest.raises(LoupeError):
        await writer.append("late", [(MZ_CLUSTERS.id, CLUSTER, 1)])


async def test_the_flush_loop_writes_staged_rows_on_its_own(
    spark: Any, blob: LocalBlob, consensus: Consensus
) -> None:
    """Without any explicit flush, staged rows land within the flush interval."""
    from loupe.testing import assert_eventually

    writer = StorageWriter(spark, blob, consensus, flush_interval=0.2)
    await writer.start()
    try:
        writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)

        def landed() -> None:
            assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]

        await assert_eventually(landed, timeout=10)
    finally:
        await writer.stop()
    assert uppers(blob, consensus) == {writer.upper}
