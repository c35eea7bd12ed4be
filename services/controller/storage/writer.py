"""The storage writer: the only writer of Loupe's builtin (storage-managed) collections.

Updates are buffered per collection and written by periodic *flushes*. One
flush:

1. settles any compare-and-append left in doubt by an earlier flush (did its
   part make it into the shard? then those updates are durable);
2. picks one timestamp ``ts = max(now_ms, every shard's upper)``;
3. writes the buffered updates of every collection in ONE Spark job per write
   group (``schema.WriteGroup``; all builtin collections form one group):
   a part directory per shard under a fresh blob prefix, fsynced;
4. compare-and-appends each collection's part (or nothing) from its upper to
   ``ts + 1``, so all builtin collections share one upper.

Parts are written before they are appended, so a shard never points at a
missing part. Updates leave the buffer only once their append is known to
have happened: a failed Spark write or a lost race (``UpperMismatch``) keeps
them for the next flush, and a compare-and-append that failed in an unknown
way is settled by reading the shard back before anything else is written, so
an update is never lost and never appended twice. A collection whose write
failed keeps its upper, so readers of "the latest complete time" never see a
time at which its pending updates are missing.

The blocking work (Spark, consensus) runs in a worker thread under a mutex;
the event loop only hands updates over and wakes waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loupe.builtins import BUILTIN_COLLECTIONS, BuiltinCollection
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.controller.storage.schema import SHARD_COLUMN, WriteGroup, check_row, plan_write_groups
from loupe.persist import Blob, Consensus, Part, Shard, ShardState, UpperMismatch, expand
from loupe.persist.location import fsync_tree

log = get_logger(__name__)

# Blob prefix of the flushes' output directories; each holds one
# ``mz_shard=<id>`` directory (a part) per collection written.
FLUSH_PREFIX = "_flushes"
# How many recent append batch ids are remembered to drop replays.
BATCH_MEMORY = 10_000
# Flushes up to this many rows are written by one Spark task.
SINGLE_TASK_ROWS = 100_000
# Consecutive flushes retried at once (not after the interval) after losing a race.
IMMEDIATE_RETRIES = 3

Update = tuple[tuple[Any, ...], int]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stopped_error() -> LoupeError:
    return LoupeError("UNAVAILABLE", "the storage writer stopped before the updates were durable")


@dataclass(frozen=True)
class _InDoubt:
    """A part whose compare-and-append failed without saying whether it happened."""

    part: Part
    count: int  # updates at the head of the collection's buffer the part holds


@dataclass
class _Waiter:
    targets: dict[str, int]  # collection id -> staged count that must become durable
    future: asyncio.Future[int]


@dataclass
class _FlushReport:
    timestamp: int = 0
    upper: int = 0
    failed_steps: int = 0
    retry_soon: bool = False
    rows: int = 0
    uppers: dict[str, int] = field(default_factory=dict)


class StorageWriter:
    """Buffers updates of builtin collections and writes them with Spark.

    ``start()`` creates the shards and starts flushing every
    ``flush_interval`` seconds; ``stage()`` buffers one update; ``append()``
    buffers a batch, flushes at once and returns the upper once it is durable.
    """

    def __init__(
        self,
        spark: Any,
        blob: Blob,
        consensus: Consensus,
        collections: Sequence[BuiltinCollection] = BUILTIN_COLLECTIONS,
        flush_interval: float = 1.0,
    ) -> None:
        self.metrics: StorageWriterMetrics = METRICS
        self._spark = spark
        self._blob = blob
        self._collections = {c.id: c for c in collections}
        self._shards = {c.id: Shard(c.shard_id, blob, consensus) for c in collections}
        self._groups: list[WriteGroup] = plan_write_groups(collections)
        self._flush_interval = flush_interval
        # Buffers and counters are shared with the flush thread.
        self._buffer_lock = threading.Lock()
        self._buffers: dict[str, list[Update]] = {c.id: [] for c in collections}
        self._staged = dict.fromkeys(self._collections, 0)
        self._durable = dict.fromkeys(self._collections, 0)
        self._in_doubt: dict[str, _InDoubt] = {}
        # One flush at a time, even if the coroutine awaiting one was cancelled.
        self._flush_mutex = threading.Lock()
        self._upper = 0
        self._waiters: list[_Waiter] = []
        self._batches: OrderedDict[str, asyncio.Future[int]] = OrderedDict()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Create every shard that does not exist yet and start the flush loop."""
        if self._task is not None:
            return
        if self._closing:
            raise _stopped_error()
        await asyncio.to_thread(self._ensure_shards)
        self._task = asyncio.create_task(self._run(), name="storage-writer-flush-loop")

    async def stop(self) -> None:
        """Stop the loop after a final flush; fail waiters still not durable. Idempotent."""
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self._stop())
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            # Not cancelled: a flush in progress must finish its bookkeeping.
            with contextlib.suppress(Exception):
                await self._task
            try:
                await self.flush()
            except Exception:
                log.exception("storage_writer_final_flush_failed")
        self._fail_waiters(_stopped_error())
        with self._buffer_lock:
            left = {cid: len(buf) for cid, buf in self._buffers.items() if buf}
        if left:
            log.warning("storage_writer_stopped_with_buffered_updates", buffered=left)

    # -- public API --------------------------------------------------------------

    @property
    def upper(self) -> int:
        """The shared upper of the builtin collections (the least, while a write fails)."""
        return self._upper

    def stage(self, collection_id: str, row: tuple[Any, ...], diff: int) -> None:
        """Buffer one update; it is written at the next flush.

        ``row`` holds Python values in column order: str, int, float, bool,
        tz-aware datetime (timestamptz), datetime.timedelta (interval) or None.
        Raises ``LoupeError(INVALID_ARGUMENT)`` for an unknown collection or a bad row.
        """
        if self._closing:
            raise _stopped_error()
        update = self._validate(collection_id, row, diff)
        self._stage_all([update])

    async def append(
        self, batch_id: str, updates: Iterable[tuple[str, tuple[Any, ...], int]]
    ) -> int:
        """Buffer ``(collection_id, row, diff)`` updates, flush now, return the upper once durable.

        A ``batch_id`` seen recently is not applied again: the call waits for
        (or returns) the first one's outcome.
        """
        if self._closing:
            raise _stopped_error()
        if self._task is None:
            raise LoupeError("FAILED_PRECONDITION", "the storage writer is not started")
        known = self._batches.get(batch_id)
        if known is not None:
            self.metrics.replayed_batches.inc()
            return await asyncio.shield(known)
        checked = [self._validate(cid, row, diff) for cid, row, diff in updates]
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Retrieve the outcome even if every caller went away, so it is never "unretrieved".
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._batches[batch_id] = future
        while len(self._batches) > BATCH_MEMORY:
            self._batches.popitem(last=False)
        targets = self._stage_all(checked)
        if targets:
            self._waiters.append(_Waiter(targets, future))
            self._wake.set()
        else:
            future.set_result(self._upper)
        return await asyncio.shield(future)

    async def flush(self) -> int:
        """Flush now (waiting for a flush in progress first); return the upper."""
        report = await asyncio.to_thread(self._flush)
        self._settle_waiters(report)
        return self._upper

    def snapshot(self, collection_id: str) -> list[tuple[Any, ...]]:
        """The collection's current contents, one tuple per row (repeated by multiplicity)."""
        collection = self._collection(collection_id)
        shard = self._shards[collection_id]
        if shard.upper == 0:
            return []
        table = expand(shard.snapshot())
        columns = [table.column(name).to_pylist() for name in collection.column_names]
        return list(zip(*columns, strict=True))

    # -- staging -----------------------------------------------------------------

    def _collection(self, collection_id: str) -> BuiltinCollection:
        try:
            return self._collections[collection_id]
        except KeyError:
            raise LoupeError(
                "INVALID_ARGUMENT", f"{collection_id!r} is not a collection of the storage writer"
            ) from None

    def _validate(self, collection_id: str, row: Sequence[Any], diff: int) -> tuple[str, Update]:
        collection = self._collection(collection_id)
        try:
            check_row(collection, row)
        except ValueError as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        if not isinstance(diff, int) or isinstance(diff, bool):
            raise LoupeError("INVALID_ARGUMENT", f"diff must be an integer, got {diff!r}")
        return collection_id, (tuple(row), diff)

    def _stage_all(self, updates: list[tuple[str, Update]]) -> dict[str, int]:
        """Buffer updates atomically (one flush takes all or none of them)."""
        targets: dict[str, int] = {}
        with self._buffer_lock:
            for collection_id, update in updates:
                if update[1] == 0:
                    continue
                self._buffers[collection_id].append(update)
                self._staged[collection_id] += 1
                targets[collection_id] = self._staged[collection_id]
        return targets

    # -- the flush loop ----------------------------------------------------------

    async def _run(self) -> None:
        retries = 0
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._flush_interval)
            if self._closing:
                return
            self._wake.clear()
            try:
                report = await asyncio.to_thread(self._flush)
            except Exception:
                log.exception("storage_flush_crashed")
                continue
            self._settle_waiters(report)
            if report.retry_soon and retries < IMMEDIATE_RETRIES:
                retries += 1
                self._wake.set()
            else:
                retries = 0

    def _settle_waiters(self, report: _FlushReport) -> None:
        with self._buffer_lock:
            durable = dict(self._durable)
        pending = []
        for waiter in self._waiters:
            if waiter.future.done():
                continue
            if all(durable[cid] >= count for cid, count in waiter.targets.items()):
                waiter.future.set_result(max(report.timestamp + 1, self._upper))
            else:
                pending.append(waiter)
        self._waiters = pending

    def _fail_waiters(self, error: Exception) -> None:
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(error)
        self._waiters = []

    # -- one flush (worker thread) -----------------------------------------------

    def _ensure_shards(self) -> None:
        uppers = []
        for collection_id, shard in self._shards.items():
            columns = list(self._collections[collection_id].columns)
            state = shard.ensure(columns)
            if state.columns != columns:
                log.warning(
                    "storage_shard_columns_differ",
                    shard=shard.shard_id,
                    stored=state.columns,
                    expected=columns,
                )
            uppers.append(state.upper)
        self._upper = min(uppers, default=0)

    def _flush(self) -> _FlushReport:
        with self._flush_mutex:
            started = time.monotonic()
            report = _FlushReport()
            try:
                self._settle_in_doubt()
                states = {cid: shard.state() for cid, shard in self._shards.items()}
            except Exception:
                log.exception("storage_flush_cannot_read_shards")
                self.metrics.failures.labels("state").inc()
                self.metrics.flushes.labels("failed").inc()
                report.failed_steps += 1
                return report
            timestamp = max([_now_ms(), *(state.upper for state in states.values())])
            report.timestamp = timestamp
            with self._buffer_lock:
                taken = {
                    cid: list(buffer)
                    for cid, buffer in self._buffers.items()
                    if buffer and cid not in self._in_doubt
                }
            parts = self._write_parts(taken, timestamp, report)
            for cid, shard in self._shards.items():
                if cid in self._in_doubt or (cid in taken and cid not in parts):
                    continue  # still unsettled, or its write failed: hold its upper back
                self._append(shard, states[cid], parts.get(cid), timestamp, report)
            self._upper = min(
                (report.uppers.get(cid, state.upper) for cid, state in states.items()), default=0
            )
            report.upper = self._upper
            self.metrics.flush_duration.observe(time.monotonic() - started)
            self.metrics.flushes.labels("partial" if report.failed_steps else "ok").inc()
            return report

    def _write_parts(
        self, taken: dict[str, list[Update]], timestamp: int, report: _FlushReport
    ) -> dict[str, Part]:
        """Write every group's taken updates with one Spark job each; the parts by collection."""
        parts: dict[str, Part] = {}
        for group in self._groups:
            updates = {c.id: taken[c.id] for c in group.collections if c.id in taken}
            if not updates:
                continue
            root = self._blob.new_key(FLUSH_PREFIX, suffix="")
            try:
                self._spark_write(group, updates, timestamp, self._blob.path(root))
                written = {}
                for cid, rows in updates.items():
                    key = f"{root}/{SHARD_COLUMN}={self._collections[cid].shard_id}"
                    if not self._blob.exists(key):
                        raise RuntimeError(f"Spark wrote no part at {key}")
                    path = self._blob.path(key)
                    written[cid] = Part(key, timestamp, timestamp + 1, len(rows), _size(path))
            except Exception:
                log.exception(
                    "storage_flush_write_failed", collections=sorted(updates), timestamp=timestamp
                )
                self.metrics.failures.labels("spark_write").inc()
                report.failed_steps += 1
                self._delete_quietly(root)
                continue
            parts.update(written)
        return parts

    def _spark_write(
        self,
        group: WriteGroup,
        updates: dict[str, list[Update]],
        timestamp: int,
        path: str,
    ) -> None:
        table = group.arrow_table(updates, timestamp)
        frame = self._spark.createDataFrame(table, schema=group.spark_schema())
        # One file per part: a single task for the usual small flush (no shuffle,
        # measured ~100 ms faster), one task per shard for a large one.
        if table.num_rows <= SINGLE_TASK_ROWS:
            frame = frame.coalesce(1)
        else:
            frame = frame.repartition(SHARD_COLUMN)
        frame.write.partitionBy(SHARD_COLUMN).parquet(path)
        self.metrics.spark_jobs.inc()
        # Spark does not fsync; the parts must survive a crash once appended.
        fsync_tree(path)

    def _append(
        self,
        shard: Shard,
        state: ShardState,
        part: Part | None,
        timestamp: int,
        report: _FlushReport,
    ) -> None:
        cid = shard.shard_id
        try:
            new_state = shard.compare_and_append(
                [part] if part else [], expected_upper=state.upper, new_upper=timestamp + 1
            )
        except UpperMismatch as mismatch:
            # Another writer moved the upper: nothing of ours went in; rewrite next time.
            log.warning("storage_flush_lost_race", shard=cid, error=str(mismatch))
            self.metrics.failures.labels("upper_mismatch").inc()
            report.failed_steps += 1
            report.retry_soon = report.retry_soon or part is not None
            if part is not None:
                self._delete_quietly(part.key)
            return
        except Exception:
            log.exception("storage_flush_append_failed", shard=cid)
            self.metrics.failures.labels("append").inc()
            report.failed_steps += 1
            if part is not None:
                self._in_doubt[cid] = _InDoubt(part, part.rows)
                with contextlib.suppress(Exception):
                    self._settle_in_doubt()
            return
        report.uppers[cid] = new_state.upper
        if part is not None:
            self._mark_durable(cid, part.rows)
            report.rows += part.rows
            self.metrics.rows_written.labels(cid).inc(part.rows)

    def _settle_in_doubt(self) -> None:
        """Decide every in-doubt append by reading its shard: is the part in it?

        Runs before anything else is written to the shard, and a part is only
        merged away by compaction long after, so "not in the parts" means
        "never appended".
        """
        for cid, doubt in list(self._in_doubt.items()):
            state = self._shards[cid].state()
            if any(part.key == doubt.part.key for part in state.parts):
                self._mark_durable(cid, doubt.count)
                self.metrics.rows_written.labels(cid).inc(doubt.count)
                log.info("storage_append_in_doubt_happened", shard=cid, key=doubt.part.key)
            else:
                self._delete_quietly(doubt.part.key)
                log.info("storage_append_in_doubt_did_not_happen", shard=cid, key=doubt.part.key)
            del self._in_doubt[cid]

    def _mark_durable(self, collection_id: str, count: int) -> None:
        with self._buffer_lock:
            del self._buffers[collection_id][:count]
            self._durable[collection_id] += count

    def _delete_quietly(self, key: str) -> None:
        """Remove an output no shard refers to; a leftover is garbage, not an error."""
        try:
            self._blob.delete(key)
        except Exception:
            log.warning("storage_orphan_not_deleted", key=key)


def _size(path: str) -> int:
    """Bytes of the data files of a local part directory (0 when not local)."""
    if not os.path.isdir(path):
        return 0
    return sum(
        entry.stat().st_size
        for entry in os.scandir(path)
        if entry.is_file() and not entry.name.startswith((".", "_"))
    )
