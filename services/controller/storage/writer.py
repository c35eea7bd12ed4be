"""The storage writer: the only writer of Loupe's builtin (storage-managed) collections.

Input arrives through JetStream (``inbox.Inbox``): ``Controller.AppendUpdates``
publishes its batch to the stream and waits until it is durable; the
controller's own updates (replica statuses and metrics, ``stage``) are
published from an outbox soon after they are staged. A durable pull
consumer delivers the batches to the writer, which keeps them until a flush
has made them durable in every shard, and only then acknowledges them.

One flush (in a worker thread, one at a time):

1. reads every shard's state (one consensus read, ``read_states``), and with
   it how far the writer's input is applied to that shard:
   ``progress["storage-writer"]``, the last stream sequence it holds
   (``wire.PROGRESS_KEY``);
2. picks one timestamp ``ts = max(now_ms, every shard's upper)``;
3. takes, per shard, the updates of the received batches past that shard's
   progress (plus retractions of expired history rows, when due);
4. writes them in ONE Spark job per write group (``schema.WriteGroup``; all
   builtin collections form one group), a part directory per shard, fsynced;
5. compare-and-appends each shard's part (or nothing) from its upper to
   ``max(ts, now_ms) + 1`` (now: after the write, so a reader at a fresh
   oracle timestamp need not wait for the next upper tick) with
   ``progress`` = the last sequence received, in the same CAS, so all
   builtin collections share one upper. Every shard's CAS goes in one
   consensus call (``append_all``): with SQLite or PostgreSQL one
   transaction, so one sync per flush, not one per shard;
6. acknowledges the batches every shard now holds and answers their waiters.

So whatever happens — a ``kill -9`` between any two steps, a Spark write
that fails (disk full), a CAS that fails in an unknown way — the shards say
exactly which batches they hold: nothing acknowledged is lost (JetStream
keeps what is not acknowledged, and a restarted writer re-creates its
consumer, which delivers all of that at once), and nothing is applied twice
(each shard skips the batches at or below its own progress). A shard whose
write failed keeps its upper, so readers of "the latest complete time" never
see a time at which its pending updates are missing. A failed flush is
simply retried at the next interval with everything still unacknowledged.

Data flushes come at most once per ``flush_interval``; one that took longer
than the interval pushes the next one back by its own duration (``_pushed_back``),
so a loaded writer's Spark works about half the time instead of back to back.
Appends and urgent updates are flushed at once regardless.

``start`` returns only once the batches an earlier run left in the stream
are applied, so what the controller reads back at start (replica statuses)
includes them. Compaction and retention (``compaction``) run every
``compaction_interval`` seconds in a thread of their own, concurrently with
flushes: both change shards only by compare-and-set. The retractions of
retention (expired history rows, then the statement log rows nothing
references any more) go into the next flush, computed in its thread against
the updates it brings.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STORAGE_WRITER_STATUS,
    BuiltinCollection,
)
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.controller.storage.compaction import (
    STATEMENT_LOG_COLLECTED,
    STATEMENT_LOG_REFERENCES,
    CompactionPolicy,
    CompactionResult,
    Compactor,
    delete_part,
    expired_rows,
    live_statement_log_sessions,
    statement_log_contents,
    unreferenced_statement_log_rows,
)
from loupe.controller.storage.inbox import Inbox, Received
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.controller.storage.parts import PartStore, SparkPartStore, part_size
from loupe.controller.storage.supervisor import is_disk_full
from loupe.interval import python_values
from loupe.persist import (
    DIFF_COLUMN,
    Append,
    Blob,
    Consensus,
    Part,
    Shard,
    ShardState,
    UpperMismatch,
    append_all,
    expand,
    read_states,
)
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.schema import SHARD_COLUMN, WriteGroup, check_row, plan_write_groups
from loupe.storage.wire import (
    PROGRESS_KEY,
    STREAM_EPOCH_KEY,
    BadBatch,
    StreamConfig,
    UnknownCollection,
    Update,
    decode_collections,
    encode_batch,
)

log = get_logger(__name__)

# Blob prefix of the flushes' output directories; each holds one
# ``mz_shard=<id>`` directory (a part) per collection written.
FLUSH_PREFIX = "_flushes"
# Consecutive flushes retried at once (not after the interval) after losing a race.
IMMEDIATE_RETRIES = 3
# Staged updates per outbox batch (a JetStream message is at most 1 MiB by default).
OUTBOX_BATCH = 5_000
# How long ``flush``/``stop`` wait for staged updates to reach the stream.
OUTBOX_TIMEOUT_S = 10.0
# A data flush after a quiet interval waits for the stream to be quiet this
# long (at most GATHER_MAX_S, and a quarter of the interval), so batches
# published right after the first (an execution's end) go into it too.
GATHER_QUIET_S = 0.02
GATHER_MAX_S = 0.1
# A flush longer than this (or two intervals) is logged with where its time went.
SLOW_FLUSH_S = 3.0
# How long start-up waits for the backlog of an earlier run to be applied.
CATCH_UP_TIMEOUT_S = 120.0
# How long a statement log collection waits for the stream's backlog to be
# received; past it, no prepared statement or session is collected this time.
BACKLOG_WAIT_S = 5.0


def consolidated_rows(table: pa.Table, names: Sequence[str]) -> list[tuple[tuple[Any, ...], int]]:
    """A consolidated snapshot's rows with their counts, as Python values."""
    columns = [python_values(table.column(name)) for name in names]
    counts = table.column(DIFF_COLUMN).to_pylist()
    return list(zip(zip(*columns, strict=True), counts, strict=True))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stopped_error() -> LoupeError:
    return LoupeError("UNAVAILABLE", "the storage writer stopped before the updates were durable")


@dataclass
class _Waiter:
    seq: int  # stream sequence that must be durable in every shard
    future: asyncio.Future[int]


@dataclass
class _FlushReport:
    timestamp: int = 0
    upper: int = 0
    applied_through: int = 0
    failed_steps: int = 0
    disk_full: bool = False
    retry_soon: bool = False
    rows: int = 0
    uppers: dict[str, int] = field(default_factory=dict)


class StorageWriter:
    """Writes builtin collections from a JetStream stream with Spark (see the module docstring).

    ``start()`` creates the shards and the stream, applies what an earlier
    run left unapplied, and starts flushing every ``flush_interval`` seconds
    and compacting every ``compaction_interval`` seconds. ``stage()`` queues
    one update for the stream; ``append()`` publishes a batch, flushes at once
    and returns the upper once it is durable.
    """

    def __init__(
        self,
        spark: Any,
        blob: Blob,
        consensus: Consensus,
        nc: Any,
        *,
        stream: StreamConfig | None = None,
        collections: Sequence[BuiltinCollection] = BUILTIN_COLLECTIONS,
        flush_interval: float = 1.0,
        upper_interval: float = 0.25,
        compaction_interval: float = 60.0,
        compaction: CompactionPolicy | None = None,
        part_store: PartStore | None = None,
        max_buffered_rows: int = 2_000_000,
        notify: Callable[[str, int], None] | None = None,
    ) -> None:
        self.metrics: StorageWriterMetrics = METRICS
        self._nc = nc
        self._blob = blob
        self._collections = {c.id: c for c in collections}
        # The statement log is collected only when the writer holds it and what refers to it.
        self._collected: frozenset[str] = (
            frozenset(c.id for c in STATEMENT_LOG_COLLECTED)
            if all(c.id in self._collections for c in STATEMENT_LOG_REFERENCES)
            else frozenset()
        )
        extra = {"notify": notify} if notify is not None else {}
        self._shards = {c.id: Shard(c.shard_id, blob, consensus, **extra) for c in collections}
        self._groups: list[WriteGroup] = plan_write_groups(collections)
        self._store: PartStore = part_store or SparkPartStore(spark)
        self._compactor = Compactor(self._store, blob, compaction, self.metrics)
        self._flush_interval = flush_interval
        # Between flushes, an idle writer still moves every upper this often
        # (no data, no Spark: one CAS per shard), so a read at the oracle's
        # timestamp waits at most this long for system relations; 0 disables.
        self._upper_interval = upper_interval
        self._compaction_interval = compaction_interval
        self.stream = stream or StreamConfig()
        self._inbox = Inbox(nc, self.stream, self._collections, max_buffered_rows=max_buffered_rows)
        # One flush at a time, even if the coroutine awaiting one was cancelled.
        self._flush_mutex = threading.Lock()
        self._upper = 0
        self._applied_through = 0
        # Parts whose compare-and-append failed without saying whether it happened.
        self._in_doubt: dict[str, str] = {}
        # Shards whose last data write failed: their uppers stay where they are, even
        # through upper-only flushes, until a data flush writes their rows.
        self._held: set[str] = set()
        # Collections whose expired rows the next flush retracts.
        self._retention_due: set[str] = set()
        self._waiters: list[_Waiter] = []
        self._flush_wanted = 0
        self._outbox: list[Update] = []
        self._outbox_seq = 0
        # Something staged wants a flush as soon as it is in the stream.
        self._urgent = False
        self._outbox_ids = (f"{uuid.uuid4().hex}-{n}" for n in itertools.count())
        self._outbox_wake = asyncio.Event()
        self._outbox_idle = asyncio.Event()
        self._outbox_idle.set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_task: asyncio.Task[None] | None = None
        self._started = False
        self._closing = False
        # Why the last flush failed (None once one succeeds), and the status row
        # last staged (``mz_internal.mz_storage_writer_status``).
        self._flush_error: str | None = None
        self._status_row: tuple[Any, ...] | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Create the shards and the stream, catch up with the stream, start the loops."""
        if self._started:
            return
        if self._closing:
            raise _stopped_error()
        self._started = True
        epoch = await self._inbox.ensure_stream()
        states = await asyncio.to_thread(self._ensure_shards)
        start_after = min((self._progress(state, epoch) for state in states), default=0)
        await self._inbox.open(start_after)
        self._applied_through = start_after
        self._tasks = [
            asyncio.create_task(self._inbox.run(), name="storage-writer-inbox"),
            asyncio.create_task(self._publish_outbox(), name="storage-writer-outbox"),
            asyncio.create_task(self._run(), name="storage-writer-flush-loop"),
            asyncio.create_task(self._compact_loop(), name="storage-writer-compaction"),
        ]
        await self._catch_up()
        await self._replace_status_rows()

    async def _catch_up(self) -> None:
        """Apply every batch already in the stream, so readers start from all of it."""
        backlog = await self._inbox.last_seq()
        if backlog <= self._applied_through:
            return
        log.info("storage_writer_catching_up", from_seq=self._applied_through, to_seq=backlog)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while time.monotonic() < deadline:
            await self._receive_backlog(backlog, deadline)
            await self._flush_now()
            if self._applied_through >= backlog:
                break
            everything_received = self._applied_through >= self._inbox.received_through
            if everything_received and await self._inbox.undelivered() == 0:
                break  # sequences never delivered (gone from the stream) hold nothing
        log.info("storage_writer_caught_up", applied_through=self._applied_through)

    async def _receive_backlog(self, backlog: int, deadline: float) -> None:
        """Wait while the backlog keeps arriving, so ONE flush (a Spark job per write
        group, seconds each on a busy machine) applies all of it: flushing whatever came
        in the first second made a controller restart with a backlog of a thousand
        statement log batches take a minute of flushes. Stops when receiving stalls
        for a second (what never arrives is handled by the caller)."""
        while time.monotonic() < deadline:
            seen = self._inbox.received_through
            if await self._inbox.wait_received(backlog, timeout=1.0):
                return
            if self._inbox.received_through == seen:
                return

    async def stop(self) -> None:
        """Stop after publishing staged updates and a final flush; fail waiters left. Idempotent."""
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self._stop())
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        if not self._started:
            self._closing = True
            return
        try:
            await asyncio.wait_for(self._drain_outbox(), OUTBOX_TIMEOUT_S)
            await self.flush()
        except Exception:
            log.exception("storage_writer_final_flush_failed")
        self._closing = True
        self._wake.set()
        self._outbox_wake.set()
        # A compaction thread may still run a job: it must not rebuild a Spark
        # session that the service's exit then stops under it.
        close_store = getattr(self._store, "close", None)
        if close_store is not None:
            close_store()
        await self._inbox.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # A flush thread still running must finish its bookkeeping first.
        await asyncio.to_thread(self._flush_mutex.acquire)
        self._flush_mutex.release()
        self._fail_waiters(_stopped_error())
        left = self._inbox.pending()
        if left or self._outbox:
            log.warning(
                "storage_writer_stopped_with_unwritten_updates",
                unacknowledged_batches=len(left),
                unpublished_updates=len(self._outbox),
            )

    # -- public API --------------------------------------------------------------

    @property
    def upper(self) -> int:
        """The shared upper of the builtin collections (the least, while a write fails)."""
        return self._upper

    @property
    def applied_through(self) -> int:
        """The last stream sequence durable in every shard."""
        return self._applied_through

    def stage(
        self, collection_id: str, row: tuple[Any, ...], diff: int, *, urgent: bool = False
    ) -> None:
        """Queue one update for the stream; it is written at a flush soon after.

        ``row`` holds Python values in column order: str, int, float, bool,
        tz-aware datetime (timestamptz), datetime.timedelta (interval) or None.
        ``urgent`` flushes as soon as the update is in the stream instead of at
        the next interval (a replica going offline should not wait a second).
        Raises ``LoupeError(INVALID_ARGUMENT)`` for an unknown collection or a bad row.
        """
        if self._closing:
            raise _stopped_error()
        update = self._validate(collection_id, row, diff)
        if diff == 0:
            return
        self._urgent |= urgent
        self._outbox.append(update)
        self._outbox_idle.clear()
        self._outbox_wake.set()

    async def append(self, batch_id: str, updates: Iterable[Update]) -> int:
        """Publish ``(collection_id, row, diff)`` updates as one batch, flush now, and
        return the upper once they are durable.

        A ``batch_id`` JetStream has seen within its duplicate window is not
        stored again: the call waits for the first one's batch instead.
        """
        self._check_running()
        batch = encode_batch(batch_id, [self._validate(*update) for update in updates])
        return await self._publish_and_wait(batch)

    async def append_collections(
        self, batch_id: str, collections: Sequence[storage_pb2.CollectionUpdates]
    ) -> int:
        """``append`` for updates in wire form (``Controller.AppendUpdates``), rows or columnar.

        They are checked with the writer's own decoder first, so the stream
        only ever holds batches the writer can apply, then published as they
        came. Raises ``LoupeError`` NOT_FOUND for an unknown collection and
        INVALID_ARGUMENT for updates that do not fit their collection.
        """
        self._check_running()
        try:
            decode_collections(collections, self._collections)
        except UnknownCollection as error:
            raise LoupeError("NOT_FOUND", str(error)) from None
        except BadBatch as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        batch = storage_pb2.UpdateBatch(batch_id=batch_id, collections=collections)
        return await self._publish_and_wait(batch)

    async def submit_collections(
        self, batch_id: str, collections: Sequence[storage_pb2.CollectionUpdates]
    ) -> int:
        """``append_collections`` without waiting for the flush: once the batch is in the
        stream (its sequence is returned), the next regular flush writes it, all at once.

        For the controller's own steady writers (replica introspection): a batch
        each interval per replica must not force a Spark job each.
        """
        self._check_running()
        try:
            decode_collections(collections, self._collections)
        except (UnknownCollection, BadBatch) as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        batch = storage_pb2.UpdateBatch(batch_id=batch_id, collections=collections)
        try:
            ack = await self._inbox.publish(batch)
        except Exception as error:
            raise LoupeError(
                "UNAVAILABLE",
                f"cannot store the batch in JetStream: {error or type(error).__name__}",
            ) from None
        # The next flush (regular, or one asked for) waits until the inbox has it.
        self._flush_wanted = max(self._flush_wanted, ack.seq)
        return int(ack.seq)

    def _check_running(self) -> None:
        if self._closing:
            raise _stopped_error()
        if not self._started:
            raise LoupeError("FAILED_PRECONDITION", "the storage writer is not started")

    async def _publish_and_wait(self, batch: storage_pb2.UpdateBatch) -> int:
        try:
            ack = await self._inbox.publish(batch)
        except Exception as error:
            raise LoupeError(
                "UNAVAILABLE",
                f"cannot store the batch in JetStream: {error or type(error).__name__}",
            ) from None
        if ack.duplicate:
            self.metrics.replayed_batches.inc()
        return await self._durable(ack.seq)

    async def flush(self) -> int:
        """Flush now everything staged or published so far; return the upper."""
        seq = await asyncio.wait_for(self._drain_outbox(), OUTBOX_TIMEOUT_S)
        await self._inbox.wait_received(max(seq, self._flush_wanted), timeout=OUTBOX_TIMEOUT_S)
        await self._flush_now()
        return self._upper

    async def compact(self) -> list[CompactionResult]:
        """Retract expired history rows and unreferenced statement log rows (one flush),
        then compact every collection now."""
        self._retention_due |= {c.id for c in self._collections.values() if c.expire_by}
        self._retention_due |= self._collected
        if self._retention_due:
            await self._flush_now()
        return await asyncio.to_thread(self._compact_all)

    def set_retention(self, collection_ids: Iterable[str], retention_ms: int) -> None:
        """Keep ``collection_ids`` for ``retention_ms`` from now on (both the rows that
        expire and the readable history), as a system variable such as
        ``statement_logging_retention`` says; the next compaction applies it. Collections
        this writer does not hold (one built for a few, in tests) are skipped."""
        for collection_id in collection_ids:
            if collection_id not in self._collections:
                continue
            collection = self._collection(collection_id)
            self._collections[collection_id] = replace(collection, retention_ms=retention_ms)

    def snapshot(self, collection_id: str) -> list[tuple[Any, ...]]:
        """The collection's current contents, one tuple per row (repeated by multiplicity)."""
        collection = self._collection(collection_id)
        shard = self._shards[collection_id]
        if shard.upper == 0:
            return []
        table = expand(shard.snapshot())
        columns = [python_values(table.column(name)) for name in collection.column_names]
        return list(zip(*columns, strict=True))

    def consolidated(self, collection_id: str) -> list[tuple[tuple[Any, ...], int]]:
        """The collection's current contents as ``(row, count)``, never expanded: a count
        log's rows carry nanoseconds as their multiplicity."""
        collection = self._collection(collection_id)
        shard = self._shards[collection_id]
        if shard.upper == 0:
            return []
        return consolidated_rows(shard.snapshot(), collection.column_names)

    # -- staging and publishing ----------------------------------------------------

    def _collection(self, collection_id: str) -> BuiltinCollection:
        try:
            return self._collections[collection_id]
        except KeyError:
            raise LoupeError(
                "INVALID_ARGUMENT", f"{collection_id!r} is not a collection of the storage writer"
            ) from None

    def _validate(self, collection_id: str, row: Sequence[Any], diff: int) -> Update:
        collection = self._collection(collection_id)
        try:
            check_row(collection, row)
        except ValueError as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        if not isinstance(diff, int) or isinstance(diff, bool):
            raise LoupeError("INVALID_ARGUMENT", f"diff must be an integer, got {diff!r}")
        return collection_id, tuple(row), diff

    async def _publish_outbox(self) -> None:
        """Publish staged updates in order, each batch retried under its id until stored."""
        while not self._closing:
            if not self._outbox:
                self._outbox_idle.set()
                self._outbox_wake.clear()
                await self._outbox_wake.wait()
                continue
            updates = self._outbox[:OUTBOX_BATCH]
            batch = encode_batch(next(self._outbox_ids), updates)
            delay = 0.05
            while True:
                try:
                    ack = await self._inbox.publish(batch)
                    break
                except Exception as error:
                    if self._closing:
                        return
                    log.warning(
                        "storage_outbox_publish_failed", error=str(error) or type(error).__name__
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            del self._outbox[: len(updates)]
            self._outbox_seq = max(self._outbox_seq, ack.seq)
            if self._urgent:
                self._flush_wanted = max(self._flush_wanted, ack.seq)
                self._wake.set()
                self._urgent = bool(self._outbox)  # until the last staged update is out

    async def _drain_outbox(self) -> int:
        """Wait until every staged update is in the stream; the last sequence it got."""
        if self._outbox:
            self._outbox_wake.set()
            await self._outbox_idle.wait()
        return self._outbox_seq

    async def _durable(self, seq: int) -> int:
        """Flush soon and wait until stream sequence ``seq`` is in every shard; the upper."""
        if seq <= self._applied_through:
            return self._upper
        if self._closing:
            raise _stopped_error()  # stop has failed the waiters already: none would answer
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Retrieve the outcome even if every caller went away, so it is never "unretrieved".
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._waiters.append(_Waiter(seq, future))
        self._flush_wanted = max(self._flush_wanted, seq)
        self._wake.set()
        return await asyncio.shield(future)

    # -- the loops -------------------------------------------------------------------

    async def _run(self) -> None:
        """Flush data at most once per interval, at once when it comes after a quiet one;
        between data flushes, move the uppers every ``upper_interval`` (data stays pending)."""
        retries = 0
        last_data_flush = time.monotonic()
        last_upper = last_data_flush
        upper_every = self._upper_interval or self._flush_interval
        while not self._closing:
            now = time.monotonic()
            pending = bool(self._inbox.pending() or self._retention_due)
            data_due = last_data_flush + self._flush_interval
            upper_due = last_upper + upper_every
            if pending:
                woken = await self._wait_woken(min(data_due, upper_due) - now)
            else:
                # Idle: the first data to arrive after a quiet interval is flushed
                # at once (not at the next tick); within one, at the interval.
                woken = await self._wait_woken(upper_due - now, data=True)
            if self._closing:
                return
            now = time.monotonic()
            was_idle, pending = not pending, bool(self._inbox.pending() or self._retention_due)
            if woken or (pending and now >= data_due):
                if was_idle and not woken:
                    await self._gather()
                self._wake.clear()
                last_data_flush = time.monotonic()
                if self._flush_wanted > self._inbox.received_through:
                    # An append is in the stream: let the consumer bring it first.
                    await self._inbox.wait_received(self._flush_wanted, self._flush_interval)
                upper_only = False
            elif now >= upper_due:
                upper_only = True
            else:
                continue
            started = time.monotonic()
            try:
                report = await self._flush_now(upper_only=upper_only)
            except Exception:
                log.exception("storage_flush_crashed")
                continue
            finally:
                last_upper = time.monotonic()
                self._stage_status()
            if not upper_only:
                pushed = _pushed_back(started, last_upper, self._flush_interval)
                last_data_flush = max(last_data_flush, pushed)
            if report.retry_soon and retries < IMMEDIATE_RETRIES:
                retries += 1
                self._wake.set()
            elif not upper_only:
                retries = 0

    async def _wait_woken(self, timeout: float, *, data: bool = False) -> bool:
        """Sleep ``timeout`` seconds at most; True if woken (an append, urgent updates,
        a retry). With ``data``, new batches received end the sleep too (returns False)."""
        if self._wake.is_set():
            return True
        if timeout <= 0:
            return False
        waiting = {asyncio.ensure_future(self._wake.wait())}
        if data:
            received = self._inbox.wait_received(self._inbox.received_through + 1, timeout)
            waiting.add(asyncio.ensure_future(received))
        try:
            await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waiting:
                task.cancel()
        return self._wake.is_set()

    async def _gather(self) -> None:
        """Let the batches that closely follow the first one (an execution's end after its
        beginning) into the same flush: wait until the stream is quiet for a moment."""
        deadline = time.monotonic() + min(GATHER_MAX_S, self._flush_interval / 4)
        while (left := deadline - time.monotonic()) > 0:
            seen = self._inbox.received_through
            if not await self._inbox.wait_received(seen + 1, min(GATHER_QUIET_S, left)):
                return

    async def _flush_now(self, *, upper_only: bool = False) -> _FlushReport:
        live = None
        if not upper_only and self._retention_due & self._collected:
            live = await self._live_sessions()
        report = await asyncio.to_thread(self._flush, live, upper_only=upper_only)
        acknowledged = await self._inbox.acknowledge(report.applied_through)
        if acknowledged:
            log.debug("storage_batches_acknowledged", count=acknowledged)
        self._settle_waiters()
        return report

    # -- health ---------------------------------------------------------------------

    def health(self) -> tuple[str, str | None, int | None, int | None, int]:
        """(status, reason, spark incarnation, spark pid, restarts) of the writer now.

        ``restarting`` while its Spark session is found dead and not rebuilt yet,
        ``failing`` while flushes fail (the reason says why), else ``running``
        (with the reason of the last restart, if any).
        """
        supervisor = getattr(self._store, "supervisor", None)
        spark = supervisor.health() if supervisor is not None else None
        incarnation, pid, restarts = (
            (spark.incarnation, spark.pid, spark.restarts) if spark else (None, None, 0)
        )
        if spark is not None and spark.status == "restarting":
            return "restarting", spark.reason, incarnation, pid, restarts
        if self._flush_error is not None:
            return "failing", self._flush_error, incarnation, pid, restarts
        return "running", spark.reason if spark else None, incarnation, pid, restarts

    async def _replace_status_rows(self) -> None:
        """Replace the status rows an earlier run left with this run's, durably: ``start``
        returns with the relation current and nothing of the writer's own pending."""
        if MZ_STORAGE_WRITER_STATUS.id not in self._collections:
            return
        for row in await asyncio.to_thread(self.snapshot, MZ_STORAGE_WRITER_STATUS.id):
            self.stage(MZ_STORAGE_WRITER_STATUS.id, row, -1)
        self._stage_status()
        try:
            await self.flush()
        except Exception:
            log.exception("storage_writer_status_not_flushed")

    def _stage_status(self) -> None:
        """Replace the status row when the writer's health changed (event loop only).

        While Spark is down the row cannot be written; it is written with the
        first flush that works again (and so shows the restart that happened).
        """
        if MZ_STORAGE_WRITER_STATUS.id not in self._collections or self._closing:
            return
        health = self.health()
        if self._status_row is not None and self._status_row[:-1] == health:
            return
        if self._status_row is not None:
            self.stage(MZ_STORAGE_WRITER_STATUS.id, self._status_row, -1)
        self._status_row = (*health, dt.datetime.now(dt.UTC))
        self.stage(MZ_STORAGE_WRITER_STATUS.id, self._status_row, 1)
        log.info(
            "storage_writer_status",
            status=health[0],
            reason=health[1],
            spark_incarnation=health[2],
            spark_pid=health[3],
            spark_restarts=health[4],
        )

    async def _compact_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._compaction_interval)
            if self._closing:
                return
            try:
                results = await self.compact()
            except Exception:
                log.exception("storage_compaction_crashed")
                continue
            merged = [r for r in results if r.merges]
            if merged:
                log.info(
                    "storage_compaction_done",
                    shards=len(merged),
                    seconds=round(max(r.seconds for r in results), 3),
                )

    async def _live_sessions(self) -> set[str] | None:
        """The statement log's live sessions, once every batch they published is received.

        A coordinator purges a session's key only after the session's last
        batch is in the stream, so once the stream's backlog at the listing is
        received, no reference from a session listed as dead is still on its
        way. None (collect no session, no prepared statement) if that fails.
        """
        try:
            live = await live_statement_log_sessions(self._nc)
            backlog = await self._inbox.last_seq()
        except Exception as error:
            log.warning("storage_live_sessions_not_listed", error=str(error) or repr(error))
            return None
        if not await self._inbox.wait_received(backlog, BACKLOG_WAIT_S):
            log.warning("storage_live_sessions_backlog_not_received", backlog=backlog)
            return None
        return live

    def _compact_all(self) -> list[CompactionResult]:
        """One compaction pass over every collection (``Compactor.compact_all``)."""
        return self._compactor.compact_all(
            [(self._shards[cid], collection) for cid, collection in self._collections.items()],
            interval=self._compaction_interval,
            stopping=lambda: self._closing,
        )

    def _settle_waiters(self) -> None:
        pending = []
        for waiter in self._waiters:
            if waiter.future.done():
                continue
            if waiter.seq <= self._applied_through:
                waiter.future.set_result(self._upper)
            else:
                pending.append(waiter)
        self._waiters = pending

    def _fail_waiters(self, error: Exception) -> None:
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_exception(error)
        self._waiters = []

    # -- one flush (worker thread) -----------------------------------------------

    def _ensure_shards(self) -> list[ShardState]:
        states = []
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
            states.append(state)
        self._upper = min((state.upper for state in states), default=0)
        return states

    def _progress(self, state: ShardState, epoch: int | None = None) -> int:
        """The last stream sequence ``state`` holds (0 if it counts in another stream)."""
        epoch = self._inbox.epoch if epoch is None else epoch
        if state.progress.get(STREAM_EPOCH_KEY, 0) != epoch:
            return 0
        return state.progress.get(PROGRESS_KEY, 0)

    def _flush(
        self, live_sessions: set[str] | None = None, *, upper_only: bool = False
    ) -> _FlushReport:
        """One flush; ``upper_only`` moves the uppers and leaves data (and retention) pending."""
        with self._flush_mutex:
            started = time.monotonic()
            report = _FlushReport(applied_through=self._applied_through)
            received = [] if upper_only else self._inbox.pending()
            try:
                states = read_states(list(self._shards.values()))
                self._settle_in_doubt(states)
            except Exception as error:
                self._failed("state", error, report, "storage_flush_cannot_read_shards")
                self.metrics.flushes.labels("failed").inc()
                return report
            progress = {cid: self._progress(state) for cid, state in states.items()}
            cut = received[-1].seq if received else 0
            timestamp = max([_now_ms(), *(state.upper for state in states.values())])
            report.timestamp = timestamp
            tables = self._take(received, progress)
            retracting = (
                set() if upper_only else self._add_retractions(tables, states, live_sessions)
            )
            prepared = time.monotonic()
            parts = self._write_parts(tables, timestamp, report)
            written = time.monotonic()
            # The upper moves to the wall clock of now, not to timestamp + 1: the
            # Spark write took a while, and a reader at the oracle's timestamp
            # (about now) would otherwise wait for the next upper tick.
            upper = max(timestamp, _now_ms()) + 1
            appends: list[Append] = []
            for cid, shard in self._shards.items():
                if cid in tables and cid not in parts:
                    self._held.add(cid)
                    continue  # its write failed: hold its upper (and progress) back
                if upper_only and cid in self._held:
                    continue  # its rows are still to be written: the upper waits for them
                marks = {PROGRESS_KEY: max(progress[cid], cut), STREAM_EPOCH_KEY: self._inbox.epoch}
                part = parts.get(cid)
                appends.append(Append(shard, states[cid], [part] if part else [], upper, marks))
            for cid in self._appended(appends, report):
                progress[cid] = max(progress[cid], cut)
                if not upper_only:
                    self._held.discard(cid)
                if cid in retracting:
                    self._retention_due.discard(cid)
            self._upper = min(
                (report.uppers.get(cid, state.upper) for cid, state in states.items()), default=0
            )
            self._applied_through = max(self._applied_through, min(progress.values(), default=0))
            report.upper = self._upper
            report.applied_through = self._applied_through
            if not report.disk_full:
                self.metrics.disk_full_now.set(0)
            if not upper_only and not report.failed_steps:
                self._flush_error = None
            ended = time.monotonic()
            kind = "data" if tables else "upper"
            self.metrics.flush_duration.labels(kind).observe(ended - started)
            self.metrics.flushes.labels("partial" if report.failed_steps else "ok").inc()
            if ended - started > max(SLOW_FLUSH_S, 2 * self._flush_interval):
                # Every builtin collection's upper waits for a flush: say where it went.
                log.info(
                    "storage_flush_slow",
                    seconds=round(ended - started, 2),
                    prepare_s=round(prepared - started, 2),
                    write_s=round(written - prepared, 2),
                    append_s=round(ended - written, 2),
                    batches=len(received),
                    rows=sum(t.num_rows for t in tables.values()),
                    collections=len(tables),
                    failed_steps=report.failed_steps,
                )
            return report

    def _take(
        self, received: Sequence[Received], progress: Mapping[str, int]
    ) -> dict[str, pa.Table]:
        """Per collection, the received updates its shard does not hold yet."""
        chunks: dict[str, list[pa.Table]] = {}
        for batch in received:
            for cid, table in batch.tables.items():
                if batch.seq > progress.get(cid, 0):
                    chunks.setdefault(cid, []).append(table)
        return {cid: pa.concat_tables(tables) for cid, tables in chunks.items()}

    def _add_retractions(
        self,
        tables: dict[str, pa.Table],
        states: Mapping[str, ShardState],
        live_sessions: set[str] | None,
    ) -> set[str]:
        """Add the retractions retention wants to ``tables``; the collections due.

        Expired history rows first, then the statement log rows nothing left
        after those (and after ``tables``) references, so one pass converges.
        """
        due = set(self._retention_due)
        now = _now_ms()
        snapshots: dict[str, pa.Table] = {}
        for cid in due:
            collection = self._collections[cid]
            if collection.expire_by is None or states[cid].upper == 0:
                continue
            try:
                snapshots[cid] = self._shards[cid].snapshot()
                retractions = expired_rows(self._shards[cid], collection, now, snapshots[cid])
            except Exception:
                log.exception("storage_retention_failed", shard=cid)
                continue
            if retractions is None:
                continue
            log.info("storage_retracting_expired_rows", shard=cid, rows=retractions.num_rows)
            self._add_retraction(tables, cid, retractions)
        if due & self._collected:
            try:
                garbage = self._statement_log_garbage(tables, snapshots, live_sessions, now)
            except Exception:
                log.exception("storage_statement_log_collection_failed")
                garbage = {}
            for cid, retractions in garbage.items():
                log.info(
                    "storage_collecting_unreferenced_rows",
                    shard=cid,
                    rows=retractions.num_rows,
                    live_sessions=None if live_sessions is None else len(live_sessions),
                )
                self._add_retraction(tables, cid, retractions)
        return due

    def _statement_log_garbage(
        self,
        tables: Mapping[str, pa.Table],
        snapshots: Mapping[str, pa.Table],
        live_sessions: set[str] | None,
        now: int,
    ) -> dict[str, pa.Table]:
        executions = MZ_STATEMENT_EXECUTION_HISTORY
        references = statement_log_contents(
            self._shards[executions.id],
            executions,
            tables.get(executions.id),
            snapshots.get(executions.id),
            columns=["prepared_statement_id"],
        )
        contents = {
            c.id: statement_log_contents(self._shards[c.id], c, tables.get(c.id))
            for c in STATEMENT_LOG_COLLECTED
        }
        return unreferenced_statement_log_rows(
            contents, references.column("prepared_statement_id"), live_sessions, now
        )

    def _add_retraction(self, tables: dict[str, pa.Table], cid: str, retractions: pa.Table) -> None:
        self.metrics.retracted_rows.labels(cid).inc(retractions.num_rows)
        if cid in tables:
            retractions = retractions.cast(tables[cid].schema)
            tables[cid] = pa.concat_tables([tables[cid], retractions])
        else:
            tables[cid] = retractions

    def _write_parts(
        self, tables: dict[str, pa.Table], timestamp: int, report: _FlushReport
    ) -> dict[str, Part]:
        """Write every group's updates with one job each; the parts by collection."""
        parts: dict[str, Part] = {}
        for group in self._groups:
            updates = {c.id: tables[c.id] for c in group.collections if c.id in tables}
            if not updates:
                continue
            root = self._blob.new_key(FLUSH_PREFIX, suffix="")
            try:
                self._store.write_flush(group, updates, timestamp, self._blob.path(root))
                if self._store.name == "spark":
                    self.metrics.spark_jobs.inc()
                written = {}
                for cid, table in updates.items():
                    key = f"{root}/{SHARD_COLUMN}={self._collections[cid].shard_id}"
                    if not self._blob.exists(key):
                        raise RuntimeError(f"the {self._store.name} job wrote no part at {key}")
                    size = part_size(self._blob.path(key))
                    written[cid] = Part(key, timestamp, timestamp + 1, table.num_rows, size)
            except Exception as error:
                self._failed(
                    "spark_write",
                    error,
                    report,
                    "storage_flush_write_failed",
                    collections=sorted(updates),
                    timestamp=timestamp,
                )
                self._delete_quietly(root, part=False)
                continue
            parts.update(written)
        return parts

    def _appended(self, appends: Sequence[Append], report: _FlushReport) -> list[str]:
        """Append every shard's part (or move only its upper) in one consensus write; the
        collections whose append went in."""
        try:
            outcomes = append_all(appends)
        except Exception as error:
            # In doubt, every one of them: the next flush reads the shards' progress to know.
            self._failed(
                "append", error, report, "storage_flush_append_failed", shards=len(appends)
            )
            for append in appends:
                if append.parts:
                    self._in_doubt[append.shard.shard_id] = append.parts[0].key
            return []
        done = []
        for append, outcome in zip(appends, outcomes, strict=True):
            cid = append.shard.shard_id
            part = append.parts[0] if append.parts else None
            if isinstance(outcome, UpperMismatch):
                # Another writer moved the upper: nothing of ours went in; rewrite next time.
                log.warning("storage_flush_lost_race", shard=cid, error=str(outcome))
                self.metrics.failures.labels("upper_mismatch").inc()
                report.failed_steps += 1
                report.retry_soon = True
                if part is not None:
                    self._delete_quietly(part.key)
            elif isinstance(outcome, Exception):
                self._failed("append", outcome, report, "storage_flush_append_failed", shard=cid)
                if part is not None:
                    self._in_doubt[cid] = part.key
            else:
                report.uppers[cid] = outcome.upper
                if part is not None:
                    report.rows += part.rows
                    self.metrics.rows_written.labels(cid).inc(part.rows)
                done.append(cid)
        return done

    def _settle_in_doubt(self, states: Mapping[str, ShardState]) -> None:
        """Delete the parts of in-doubt appends that did not happen (garbage otherwise).

        Whether their updates are in is already told by the shard's progress.
        """
        for cid, key in list(self._in_doubt.items()):
            if not any(part.key == key for part in states[cid].parts):
                self._delete_quietly(key)
                log.info("storage_append_in_doubt_did_not_happen", shard=cid, key=key)
            else:
                log.info("storage_append_in_doubt_happened", shard=cid, key=key)
            del self._in_doubt[cid]

    def _failed(
        self, kind: str, error: BaseException, report: _FlushReport, event: str, **context: Any
    ) -> None:
        report.failed_steps += 1
        self.metrics.failures.labels(kind).inc()
        first_line = (str(error) or type(error).__name__).splitlines()[0][:300]
        self._flush_error = f"{kind}: {first_line}"
        if is_disk_full(error):
            report.disk_full = True
            self.metrics.disk_full.inc()
            self.metrics.disk_full_now.set(1)
            log.error(
                "storage_disk_full",
                step=kind,
                blob=self._blob.uri,
                message=(
                    "no space left on device: the updates stay unacknowledged in JetStream"
                    " and are written once there is space again"
                ),
                **context,
            )
        else:
            log.exception(event, **context, exc_info=error)

    def _delete_quietly(self, key: str, *, part: bool = True) -> None:
        """Remove an output no shard refers to; a leftover is garbage, not an error."""
        try:
            if part:
                delete_part(self._blob, key)
            else:
                self._blob.delete(key)
        except Exception:
            log.warning("storage_orphan_not_deleted", key=key)


def _pushed_back(started: float, ended: float, interval: float) -> float:
    """The earliest time the data flush that ran from ``started`` to ``ended`` may count as
    started, the next one being due an ``interval`` after it.

    A flush that took longer than the interval pushes the next one back by its own
    duration, so Spark works at most about half the time. Before, flushes slower
    than the interval ran back to back (1.18 s at 1 s under a steady peek load),
    holding one of two cores, and every service's latency paid for it. Appends
    (``woken``) are flushed at once regardless.
    """
    return ended + (ended - started) - interval
