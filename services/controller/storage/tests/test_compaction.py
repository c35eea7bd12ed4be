"""Compaction and retention of storage collections, written by Spark jobs, through the real writer."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import REGISTRY

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTER_REPLICAS,
    BuiltinCollection,
)
from loupe.controller.storage import ArrowPartStore, CompactionPolicy, SparkPartStore
from loupe.controller.storage.compaction import merged_updates
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, LocalBlob, Shard, SinceError
from loupe.persist.shard import arrow_schema
from loupe.storage.schema import plan_write_groups

pytestmark = [pytest.mark.spark]

UTC = dt.UTC
HOUR_MS = 3_600_000
# A collection whose history is kept for no time at all: its since follows its upper.
CHURN = BuiltinCollection(
    "t901", "test", "churn", (("id", "text"), ("value", "int8")), "controller", retention_ms=0
)
# An append-only history whose rows expire one second after they occurred.
EVENTS = BuiltinCollection(
    "t902",
    "test",
    "events",
    (("id", "text"), ("occurred_at", "timestamptz")),
    "controller",
    retention_ms=1_000,
    expire_by="occurred_at",
)


def contents(shard: Shard, as_of: int | None = None) -> Counter[tuple[Any, ...]]:
    """The shard's consolidated rows at ``as_of`` with their multiplicities."""
    snapshot = shard.snapshot(as_of)
    diffs = snapshot.column(DIFF_COLUMN).to_pylist()
    rows = snapshot.drop_columns([DIFF_COLUMN]).to_pylist()
    return Counter({tuple(row.values()): diff for row, diff in zip(rows, diffs, strict=True)})


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def stored_rows(shard: Shard) -> int:
    """Updates physically stored in the shard's parts."""
    return shard.read_updates().num_rows


async def test_compaction_bounds_the_parts_and_keeps_every_retained_time(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Many flushes, then compaction: at most max_parts parts, every past snapshot unchanged."""
    writer = await make_writer(compaction=CompactionPolicy(max_parts=4))
    shard = Shard(MZ_CLUSTER_REPLICAS.id, blob, consensus)
    history = {}
    for index in range(10):
        writer.stage(MZ_CLUSTER_REPLICAS.id, (f"u{index}", "r1", "u1", "1", "u1"), 1)
        if index % 3 == 2:
            writer.stage(MZ_CLUSTER_REPLICAS.id, (f"u{index - 1}", "r1", "u1", "1", "u1"), -1)
        upper = await writer.flush()
        history[upper - 1] = contents(shard, upper - 1)
    assert len(shard.state().parts) == 10

    results = await writer.compact()

    state = shard.state()
    assert len(state.parts) <= 4
    assert any(r.merges for r in results if r.shard_id == MZ_CLUSTER_REPLICAS.id)
    assert state.since <= min(history), "30 days of retention: every time stays readable"
    for as_of, expected in history.items():
        assert contents(shard, as_of) == expected


async def test_parts_below_since_become_one_consolidated_part(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """With no retention the since follows the upper; old parts merge and retractions vanish."""
    writer = await make_writer(collections=[CHURN])
    shard = Shard(CHURN.id, blob, consensus)
    for value in range(5):
        if value:
            writer.stage(CHURN.id, ("key", value - 1), -1)
        writer.stage(CHURN.id, ("key", value), 1)
        await writer.flush()
    before = contents(shard)
    await writer.flush()  # an idle flush: the last data part is now below since too

    (result,) = await writer.compact()

    state = shard.state()
    assert result.merges == 1
    assert len(state.parts) == 1
    assert state.since == state.upper - 1
    assert contents(shard) == before == Counter({("key", 4): 1})
    assert stored_rows(shard) == 1, "the retracted versions are gone from storage"
    with pytest.raises(SinceError):
        shard.snapshot(as_of=state.since - 1)


async def test_a_steady_stream_of_updates_stays_bounded(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Updating the same rows flush after flush, with compactions: parts and rows stay bounded."""
    writer = await make_writer(collections=[CHURN], compaction=CompactionPolicy(max_parts=4))
    shard = Shard(CHURN.id, blob, consensus)
    current = dict.fromkeys("abc", 0)
    for key in current:
        writer.stage(CHURN.id, (key, 0), 1)
    for round_ in range(1, 16):
        for key, value in current.items():
            writer.stage(CHURN.id, (key, value), -1)
            writer.stage(CHURN.id, (key, round_), 1)
            current[key] = round_
        await writer.flush()
        if round_ % 4 == 0:
            await writer.compact()
            state = shard.state()
            assert len(state.parts) <= 4
            assert stored_rows(shard) <= 3 * 2 * 4 + 3, "bounded by the parts since the last merge"
    assert contents(shard) == Counter(dict.fromkeys(current.items(), 1))


async def test_expired_history_rows_are_retracted_and_then_compacted_away(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Rows older than the retention are retracted at once and gone from storage later."""
    writer = await make_writer(collections=[EVENTS])
    shard = Shard(EVENTS.id, blob, consensus)
    now = dt.datetime.now(UTC)
    writer.stage(EVENTS.id, ("old", now - dt.timedelta(hours=1)), 1)
    writer.stage(EVENTS.id, ("new", now + dt.timedelta(hours=1)), 1)
    await writer.flush()

    await writer.compact()
    assert [row[0] for row in contents(shard)] == ["new"]
    assert stored_rows(shard) == 3, "the insert and its retraction, until both are below since"

    await asyncio.sleep(EVENTS.retention_ms / 1000 + 0.1)
    await writer.flush()
    await writer.compact()
    assert [row[0] for row in contents(shard)] == ["new"]
    assert stored_rows(shard) == 1


async def test_compaction_keeps_appends_that_land_while_it_runs(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Flushes racing a compaction's compare-and-set are kept, not overwritten."""
    writer = await make_writer(collections=[CHURN], compaction=CompactionPolicy(max_parts=2))
    shard = Shard(CHURN.id, blob, consensus)
    for index in range(4):
        writer.stage(CHURN.id, (f"k{index}", index), 1)
        await writer.flush()

    async def more_flushes() -> None:
        for index in range(4, 8):
            writer.stage(CHURN.id, (f"k{index}", index), 1)
            await writer.flush()

    await asyncio.gather(writer.compact(), more_flushes())
    assert contents(shard) == Counter({(f"k{index}", index): 1 for index in range(8)})
    referenced = {part.key for part in shard.state().parts}
    assert all(blob.exists(key) for key in referenced)


async def test_spark_and_pyarrow_merges_agree(spark: Any, tmp_path: Any) -> None:
    """A merge forwards to the since, consolidates and drops zeros; the Spark job writes
    the same part as pyarrow."""
    columns = list(MZ_CLUSTER_REPLICA_STATUSES.columns)
    at = dt.datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        ("a", 0, "online", None, at, 1, 5, 1),
        ("a", 0, "online", None, at, 1, 7, -1),  # cancels once both are forwarded to 10
        ("b", 0, "offline", "killed", at, 2, 8, 1),
        ("b", 0, "offline", "killed", at, 2, 9, 1),  # sums to 2 at time 10
        ("c", 0, "online", None, at, 3, 12, 1),  # above since: stays at 12
    ]
    names = [name for name, _ in columns] + [TIMESTAMP_COLUMN, DIFF_COLUMN]
    table = pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows])
    table = table.cast(
        pa.schema(
            [
                *(
                    pa.field(n, t)
                    for n, t in zip(
                        [name for name, _ in columns],
                        [
                            pa.string(),
                            pa.uint64(),
                            pa.string(),
                            pa.string(),
                            pa.timestamp("us", tz="UTC"),
                            pa.uint64(),
                        ],
                        strict=True,
                    )
                ),
                pa.field(TIMESTAMP_COLUMN, pa.uint64()),
                pa.field(DIFF_COLUMN, pa.int64()),
            ]
        )
    )
    merged = merged_updates(columns, table, 10)
    (group,) = plan_write_groups([MZ_CLUSTER_REPLICA_STATUSES])
    outputs = {}
    for store in (SparkPartStore(spark), ArrowPartStore()):
        path = str(tmp_path / store.name)
        store.merge(group, {MZ_CLUSTER_REPLICA_STATUSES.id: merged}, path)
        part = os.path.join(path, f"mz_shard={MZ_CLUSTER_REPLICA_STATUSES.shard_id}")
        files = [f for f in os.listdir(part) if f.endswith(".parquet")]
        assert len(files) == 1, "one part, one file"
        written = pq.read_table(os.path.join(part, files[0]))
        outputs[store.name] = sorted(
            (r["replica_id"], r[TIMESTAMP_COLUMN], r[DIFF_COLUMN]) for r in written.to_pylist()
        )
        assert written.num_rows == merged.num_rows
    assert outputs["spark"] == outputs["pyarrow"] == [("b", 10, 2), ("c", 12, 1)]


async def test_a_pass_merges_every_collection_with_one_spark_job(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Collections of different columns, one with an integer id where the others have
    text, are merged by ONE Spark job; each reads back exactly what it held."""
    ids = BuiltinCollection(
        "t904", "test", "numbered", (("id", "uint8"), ("name", "text")), "controller", 0
    )
    churn_too = BuiltinCollection(
        "t903", "test", "churn_too", (("id", "text"), ("count", "int4")), "controller", 0
    )
    writer = await make_writer(collections=[CHURN, churn_too, ids])
    shards = [Shard(c.id, blob, consensus) for c in (CHURN, churn_too, ids)]
    for value in range(4):
        writer.stage(CHURN.id, ("key", value), 1)
        writer.stage(churn_too.id, (f"k{value}", value), 1)
        writer.stage(ids.id, (2**62 + value, f"n{value}"), 1)
        if value:
            writer.stage(CHURN.id, ("key", value - 1), -1)
        await writer.flush()
    await writer.flush()
    before = [contents(shard) for shard in shards]
    jobs = metric("loupe_storage_compaction_jobs_total")

    results = await writer.compact()

    assert metric("loupe_storage_compaction_jobs_total") == jobs + 1, "one Spark job"
    assert [r.merges for r in results] == [1, 1, 1]
    assert [len(shard.state().parts) for shard in shards] == [1, 1, 1]
    assert [contents(shard) for shard in shards] == before
    assert before[0] == Counter({("key", 3): 1})
    assert Shard(ids.id, blob, consensus).snapshot().column("id").type == pa.uint64()
    assert stored_rows(shards[0]) == 1, "the retracted versions consolidated away"


class _SlowMerges(ArrowPartStore):
    """Merges of ``slow_shard`` wait until the test lets them go (a long Spark job)."""

    def __init__(self, slow_shard: str) -> None:
        super().__init__()
        self.slow_shard = slow_shard
        self.merging = threading.Event()
        self.release = threading.Event()

    def merge(self, group: Any, tables: Mapping[str, pa.Table], path: str) -> None:
        if self.slow_shard in tables:
            self.merging.set()
            assert self.release.wait(30), "the test never released the merge"
        super().merge(group, tables, path)


async def test_a_long_merge_does_not_hold_back_the_other_collections_sinces(
    make_writer: Any, blob: LocalBlob, consensus: Any
) -> None:
    """Retention holds for every collection however long one collection's merge takes:
    the pass moves every since before it starts merging."""
    churn_too = BuiltinCollection(
        "t903", "test", "churn_too", CHURN.columns, "controller", retention_ms=0
    )
    store = _SlowMerges(CHURN.id)
    writer = await make_writer(
        collections=[CHURN, churn_too],
        part_store=store,
        compaction=CompactionPolicy(merge_batch_rows=1),  # a job per shard
    )
    later = Shard(churn_too.id, blob, consensus)
    for value in range(3):
        writer.stage(CHURN.id, ("key", value), 1)
        writer.stage(churn_too.id, ("key", value), 1)
        await writer.flush()
    await writer.flush()

    compaction = asyncio.ensure_future(writer.compact())
    assert await asyncio.to_thread(store.merging.wait, 30)
    # CHURN's merge is under way; churn_too, compacted after it, has its since already.
    state = later.state()
    assert state.since == state.upper - 1
    store.release.set()
    results = await compaction
    assert all(r.merges == 1 for r in results)


@pytest.mark.parametrize("collection", BUILTIN_COLLECTIONS, ids=lambda c: c.qualified_name)
def test_a_merge_consolidates_every_builtin_collections_types(
    collection: BuiltinCollection,
) -> None:
    """Every column type of the builtin collections (intervals, numerics, lists, …) can
    be grouped by the compactor's consolidation: three updates of one row, at times
    forwarded to the since, sum to one."""
    schema = arrow_schema(list(collection.columns))
    data = [pa.nulls(3, field.type) for field in schema][:-2]
    times = pa.array([5, 7, 8], schema.field(TIMESTAMP_COLUMN).type)
    table = pa.Table.from_arrays([*data, times, pa.array([1, 1, -1], pa.int64())], schema=schema)
    merged = merged_updates(collection.columns, table, since=8)
    assert merged.column(TIMESTAMP_COLUMN).to_pylist() == [8]
    assert merged.column(DIFF_COLUMN).to_pylist() == [1]
    assert merged.schema.names == schema.names
