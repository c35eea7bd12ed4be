"""The controller's storage writer: throughput, write-to-visible latency, compaction time.

Everything runs for real in this process: a nats-server with JetStream (a
child process), the writer's stream and durable consumer, Spark in local
mode, a blob directory and SQLite consensus on a fresh data directory.

- **Throughput**: a feeder keeps the writer's stream full of large
  ``UpdateBatch`` messages (``--batch-rows`` updates each, pre-encoded, as
  rows and, separately, in columnar form), the writer flushes every second
  (``--flush-interval``); the rate is the updates made durable per second
  over ``--seconds``, after a warm-up. Measured for the Spark writer and, in
  the same run, for the same writer with the pyarrow part store (the
  baseline): the ratio is what Spark costs.
- **Write-to-visible latency**: single updates published to the stream at
  random moments of the flush cycle, until a reader of the shard sees them
  (its progress covers the batch); and ``append`` (what
  ``Controller.AppendUpdates`` does: publish, flush at once, wait).
- **A small flush**: what a flush under replica introspection writes (a few
  rows in each of ``--flush-collections`` builtin collections, a part each),
  by the Spark job with Loupe's local file system (``loupe.common.spark_local_fs``),
  with Hadoop's (a ``chmod`` process per file), and by pyarrow (the baseline).
- **Compaction**: merging a shard of ``--compaction-rows`` updates in 40 parts
  into one consolidated part with the Spark job, against pyarrow.

Run: ``.venv/bin/python bench/storage_writer.py [--seconds 15] [--batch-rows 12000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    BY_ID,
    MZ_CLUSTER_REPLICA_METRICS_HISTORY,
    MZ_CLUSTER_REPLICA_STATUSES,
)
from loupe.common.logging import configure_logging
from loupe.common.nats_server import NatsServerProcess
from loupe.common.spark import get_spark
from loupe.common.spark_local_fs import LOCAL_FS_CLASS
from loupe.common.transport import connect
from loupe.controller.storage import (
    PROGRESS_KEY,
    ArrowPartStore,
    CompactionPolicy,
    Compactor,
    PartStore,
    SparkPartStore,
    StorageWriter,
    StreamConfig,
    decode_batch,
    encode_batch,
)
from loupe.persist import DIFF_COLUMN, LocalBlob, Shard, SqliteConsensus
from loupe.persist.shard import arrow_schema
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.schema import ingest_type, plan_write_groups
from loupe.storage.wire import encode_arrow

HADOOP_LOCAL_FS = "org.apache.hadoop.fs.LocalFileSystem"

HISTORY = MZ_CLUSTER_REPLICA_METRICS_HISTORY
MAX_PAYLOAD = 1024 * 1024  # nats-server's default max message size
DISTINCT_PAYLOADS = 8


def history_row(index: int) -> tuple[Any, ...]:
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=index)
    return (f"u{index % 97}", 0, index % 1_000_000, 1 << 30, 1 << 20, at)


def payloads(batch_rows: int, *, columnar: bool = False) -> list[bytes]:
    """Distinct pre-encoded batches of metrics-history rows (the batch id is a header).

    Rows as ``CollectionUpdates.updates`` (what ``AppendUpdates`` sends), or
    the same rows in columnar form (``CollectionUpdates.arrow_ipc``).
    """
    out = []
    for number in range(DISTINCT_PAYLOADS):
        first = number * batch_rows
        rows = [(HISTORY.id, history_row(first + i), 1) for i in range(batch_rows)]
        batch = encode_batch("", rows)
        if columnar:
            table = decode_batch(batch.SerializeToString(), BY_ID)[1][HISTORY.id]
            batch = storage_pb2.UpdateBatch(collections=[encode_arrow(HISTORY.id, table)])
        data = batch.SerializeToString()
        if len(data) > MAX_PAYLOAD:
            raise SystemExit(
                f"--batch-rows {batch_rows} makes {len(data)} byte messages (max 1 MiB)"
            )
        out.append(data)
    return out


class Setup:
    """A fresh data directory, stream and writer per measurement."""

    def __init__(self, scratch: Path, nc: Any, spark: Any) -> None:
        self.scratch = scratch
        self.nc = nc
        self.spark = spark

    async def writer(self, store: PartStore, flush_interval: float) -> StorageWriter:
        root = self.scratch / uuid.uuid4().hex[:8]
        self.blob, self.consensus = (
            LocalBlob(root / "blob"),
            SqliteConsensus(root / "consensus.sqlite"),
        )
        writer = StorageWriter(
            self.spark,
            self.blob,
            self.consensus,
            self.nc,
            stream=StreamConfig.scoped(uuid.uuid4().hex[:12]),
            flush_interval=flush_interval,
            compaction_interval=3600,
            part_store=store,
            max_buffered_rows=3_000_000,
        )
        await writer.start()
        return writer


async def throughput(
    setup: Setup, store: PartStore, data: list[bytes], rows: int, seconds: float, interval: float
) -> float:
    """Updates per second the writer makes durable while its stream never runs dry."""
    writer = await setup.writer(store, interval)
    js = setup.nc.jetstream()
    published = 0
    stop = asyncio.Event()

    async def feed() -> None:
        nonlocal published
        first_seq = writer.applied_through
        while not stop.is_set():
            # Keep ~3 flushes' worth queued: never dry, never unbounded.
            if (published - (writer.applied_through - first_seq)) * rows > 900_000:
                await asyncio.sleep(0.01)
                continue
            ack = await js.publish(
                writer.stream.subject,
                data[published % len(data)],
                headers={"Nats-Msg-Id": uuid.uuid4().hex},
            )
            published = ack.seq - first_seq

    feeder = asyncio.create_task(feed())
    await asyncio.sleep(3 * interval + 2)  # warm-up: the first jobs plan, the JIT warms
    began, applied = time.monotonic(), writer.applied_through
    await asyncio.sleep(seconds)
    elapsed, done = time.monotonic() - began, writer.applied_through - applied
    stop.set()
    await feeder
    await writer.stop()
    return done * rows / elapsed


async def latency(setup: Setup, samples: int, interval: float) -> tuple[list[float], list[float]]:
    """Seconds from publishing one update until a reader sees it; and of ``append``."""
    writer = await setup.writer(SparkPartStore(setup.spark), interval)
    js = setup.nc.jetstream()
    # A reader of its own, as a replica would have.
    shard = Shard(MZ_CLUSTER_REPLICA_STATUSES.id, setup.blob, SqliteConsensus(setup.consensus.path))
    chance = random.Random(7)
    visible = []
    for index in range(samples):
        await asyncio.sleep(chance.uniform(0.1, interval))  # anywhere in the flush cycle
        batch = encode_batch(
            f"latency-{index}",
            [(MZ_CLUSTER_REPLICA_STATUSES.id, ("u1", 0, "online", None, _now(), index), 1)],
        )
        began = time.monotonic()
        ack = await js.publish(
            writer.stream.subject,
            batch.SerializeToString(),
            headers={"Nats-Msg-Id": batch.batch_id},
        )
        # Readers poll consensus (a replica would also be woken by the upper's notification).
        while (await asyncio.to_thread(shard.state)).progress.get(PROGRESS_KEY, 0) < ack.seq:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        visible.append(time.monotonic() - began)
    appends = []
    for index in range(max(5, samples // 2)):
        await asyncio.sleep(chance.uniform(0.1, interval))
        began = time.monotonic()
        row = ("u2", 0, "online", None, _now(), index)
        await writer.append(f"append-{index}", [(MZ_CLUSTER_REPLICA_STATUSES.id, row, 1)])
        appends.append(time.monotonic() - began)
    await writer.stop()
    return visible, appends


def compaction(scratch: Path, spark: Any, total_rows: int, parts: int) -> dict[str, float]:
    """Seconds to merge ``parts`` parts of ``total_rows`` updates into one, per part store."""
    columns = list(HISTORY.columns)
    schema = arrow_schema(columns)
    per_part = total_rows // parts
    timings = {}
    for store in (SparkPartStore(spark), ArrowPartStore()):
        root = scratch / f"compaction-{store.name}"
        blob, consensus = LocalBlob(root / "blob"), SqliteConsensus(root / "consensus.sqlite")
        shard = Shard(HISTORY.id, blob, consensus)
        shard.ensure(columns)
        for number in range(parts):
            shard.compare_and_append(history_part(schema, number, per_part), number, number + 1)
        compactor = Compactor(store, blob, CompactionPolicy(max_parts=1))
        began = time.monotonic()
        result = compactor.compact(shard, HISTORY)
        timings[store.name] = time.monotonic() - began
        assert result.merges == 1, result
        assert len(shard.state().parts) == 1
        began = time.monotonic()
        snapshot = shard.snapshot()
        timings[f"snapshot-{store.name}"] = time.monotonic() - began
        assert snapshot.num_rows == per_part * parts
    return timings


def small_flush(
    scratch: Path, spark: Any, collections: int, rows: int, rounds: int
) -> dict[str, float]:
    """Median seconds of one flush of ``rows`` updates in each of the last
    ``collections`` builtin collections, per way of writing it (interleaved)."""
    (group,) = plan_write_groups(BUILTIN_COLLECTIONS)
    tables = {
        collection.id: pa.Table.from_arrays(
            [pa.nulls(rows, ingest_type(kind)) for _, kind in collection.columns]
            + [pa.array([1] * rows, pa.int64())],
            names=[*collection.column_names, DIFF_COLUMN],
        )
        for collection in group.collections[-collections:]
    }
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    current = hadoop.get("fs.file.impl") or HADOOP_LOCAL_FS
    ways = {"loupe-fs": LOCAL_FS_CLASS, "hadoop-fs": HADOOP_LOCAL_FS}
    if current != LOCAL_FS_CLASS:
        del ways["loupe-fs"]  # the session was built without it (see spark_local_fs)
    spark_store, arrow_store = SparkPartStore(spark), ArrowPartStore()
    timings: dict[str, list[float]] = {}
    # Each write looks up its file system anew, so the implementation can change between.
    hadoop.set("fs.file.impl.disable.cache", "true")
    try:
        for number in range(rounds + 1):  # the first round warms up
            for way, implementation in [*ways.items(), ("pyarrow", None)]:
                store: PartStore = arrow_store if implementation is None else spark_store
                if implementation is not None:
                    hadoop.set("fs.file.impl", implementation)
                began = time.monotonic()
                store.write_flush(group, tables, 1, str(scratch / f"small-{way}-{number}"))
                if number:
                    timings.setdefault(way, []).append(time.monotonic() - began)
    finally:
        hadoop.set("fs.file.impl", current)
        hadoop.unset("fs.file.impl.disable.cache")
    return {way: statistics.median(seconds) for way, seconds in timings.items()}


def history_part(schema: pa.Schema, number: int, rows: int) -> pa.Table:
    """Part ``number`` of the compaction input: ``rows`` distinct metrics-history rows."""
    first = number * rows
    indices = range(first, first + rows)
    epoch_us = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
    columns = [
        pa.array([f"u{i % 97}" for i in indices]),
        pa.array([0] * rows, pa.uint64()),
        pa.array([i % 1_000_000 for i in indices], pa.uint64()),
        pa.array([1 << 30] * rows, pa.uint64()),
        pa.array([1 << 20] * rows, pa.uint64()),
        pa.array([epoch_us + i * 1000 for i in indices], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
        pa.array([number] * rows, pa.uint64()),
        pa.array([1] * rows, pa.int64()),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def bench(options: argparse.Namespace) -> None:
    interval = options.flush_interval
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        server = NatsServerProcess(scratch / "nats")
        server.start()
        try:
            nc = await connect(server.url, name="bench-storage-writer")
            began = time.monotonic()
            spark = get_spark()
            spark.range(1).count()
            print(f"spark session start                 {time.monotonic() - began:7.1f} s")
            setup = Setup(scratch, nc, spark)
            print(f"{interval:g} s flushes, {options.batch_rows} updates per JetStream message")
            for form in ("rows", "columnar"):
                data = payloads(options.batch_rows, columnar=form == "columnar")
                rates = {}
                for store in (SparkPartStore(spark), ArrowPartStore()):
                    rates[store.name] = await throughput(
                        setup, store, data, options.batch_rows, options.seconds, interval
                    )
                print(
                    f"throughput, {form:<8} ({len(data[0]) / 1024:4.0f} KiB messages):"
                    f" spark {rates['spark']:9,.0f}/s, pyarrow baseline {rates['pyarrow']:9,.0f}/s"
                    f"   spark/pyarrow {rates['spark'] / rates['pyarrow']:.2f}x,"
                    f" {rates['spark'] / 200_000:.2f}x the 200,000/s target"
                )
            visible, appends = await latency(setup, options.latency_samples, interval)
            p50 = statistics.median(visible)
            print(
                f"write-to-visible p50 {p50:6.3f} s  p90 {_p(visible, 0.9):6.3f} s"
                f"   ({p50 / interval:.2f}x flush interval; target < 1.5x)"
            )
            print(
                f"append until durable p50 {statistics.median(appends):6.3f} s"
                f"  p90 {_p(appends, 0.9):6.3f} s   (flushes at once)"
            )
            await nc.close()
        finally:
            server.stop()
        flushes = small_flush(
            scratch, spark, options.flush_collections, options.flush_rows, options.flush_rounds
        )
        shape = f"{options.flush_collections} parts of {options.flush_rows} rows"
        if "loupe-fs" in flushes:
            print(
                f"small flush ({shape}): spark {flushes['loupe-fs'] * 1000:.0f} ms,"
                f" with Hadoop's local fs {flushes['hadoop-fs'] * 1000:.0f} ms,"
                f" pyarrow {flushes['pyarrow'] * 1000:.0f} ms"
                f"   (spark / Hadoop's fs {flushes['loupe-fs'] / flushes['hadoop-fs']:.2f}x,"
                f" spark / pyarrow {flushes['loupe-fs'] / flushes['pyarrow']:.2f}x)"
            )
        else:
            print(
                f"small flush ({shape}): spark {flushes['hadoop-fs'] * 1000:.0f} ms with Hadoop's"
                f" local fs (Loupe's is unavailable here), pyarrow {flushes['pyarrow'] * 1000:.0f} ms"
            )
        timings = compaction(scratch, spark, options.compaction_rows, parts=40)
        print(
            f"compaction of {options.compaction_rows:,} updates in 40 parts: spark"
            f" {timings['spark']:.2f} s, pyarrow {timings['pyarrow']:.2f} s"
            f"   (spark / pyarrow {timings['spark'] / timings['pyarrow']:.2f}x)"
        )
        print(
            f"snapshot of the compacted {options.compaction_rows:,}-row shard"
            f" {timings['snapshot-spark']:.2f} s (target < 1 s)"
        )


def main() -> None:
    configure_logging("error")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="throughput window")
    parser.add_argument("--batch-rows", type=int, default=12_000, help="updates per message")
    parser.add_argument("--flush-interval", type=float, default=1.0)
    parser.add_argument("--latency-samples", type=int, default=20)
    parser.add_argument("--compaction-rows", type=int, default=1_000_000)
    parser.add_argument("--flush-collections", type=int, default=30, help="parts of a small flush")
    parser.add_argument("--flush-rows", type=int, default=20, help="rows per part of a small flush")
    parser.add_argument("--flush-rounds", type=int, default=8, help="small flushes timed, per way")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
