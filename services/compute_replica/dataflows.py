"""Dataflows on a replica: the compute engine fed from storage, its outputs shipped.

One ``DataflowRunner`` per instance (made on ``CreateInstance``) owns a
``loupe.dataflow.ComputeInstance``. The engine is not thread-safe, so every
call into it runs on one dedicated thread, in the order made; the event loop
stays free for commands and heartbeats while it works.

Data in
    For every storage collection some dataflow reads (``source_ids()``), a
    feeder task waits until the shard is readable at the as_of, pushes its
    snapshot there, then listens (woken by the writers' NATS upper
    notifications, and polling consensus every ``poll_interval`` for writers
    that do not notify) and pushes every batch with its new upper.

Work
    A stepping task runs ``step()`` whenever something was pushed, created,
    compacted or dropped, and then reads what it produced: write frontiers,
    errors and sink batches. Hydration (every LIR node's status and progress
    per worker) is read by the report loop itself, also while a long step
    runs.

Data out
    - Persist sinks (materialized views): each batch is written with
      compare-and-append by every replica; exactly one wins and the others
      find the upper moved (``write_sink_batch``).
    - Subscribes: one ``SubscribeBatch`` response per batch.
    - ``Frontiers``, ``Hydration`` and ``CollectionError`` responses for what
      changed, coalesced to one of each per collection (per dataflow for
      ``Hydration``) every ``report_interval``. ``Hydration`` carries every
      node's status and progress, the exports, the hydration time and the
      wall-clock installation and start: the whole state, so a lost one is
      repaired by the next.

Peeks of an index export wait (bounded) until its write frontier passes the
peek's timestamp, then read it on the engine thread.

Logs (``introspection.py``)
    With logging on, the engine's hooks are a ``LogCollector``. A dataflow
    may import a log id (``LoggingConfig.index_logs``) as a source: its
    feeder pushes the log's state as of the first tick at or after the
    dataflow's as_of, at the as_of (introspection may be one interval
    fresher than asked), then every tick's changes at the tick's time with
    upper ``tick + 1``, so a read at an oracle timestamp waits one interval
    at most. A log import while logging is off is refused. The step loop
    reports the time it waited for work as parks, and peeks report their
    start and end (``mz_active_peeks``, ``mz_peek_durations_histogram``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import Counter

from loupe.common import values
from loupe.common.aio import wait_event
from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.compute_replica.process_metrics import EngineActivity
from loupe.compute_replica.protocol import (
    PeekRequest,
    PeekResult,
    Responses,
    ResultColumn,
    StorageLocation,
)
from loupe.compute_replica.shards import NEVER_WRITTEN
from loupe.dataflow import DataflowProgress, SinkBatch
from loupe.dataflow import PeekResult as EnginePeekResult
from loupe.dataflow.hooks import LoggingHooks
from loupe.dataflow.results import client_rows
from loupe.interval import python_values
from loupe.introspection.collector import LogCollector, updates_table
from loupe.persist import (
    DIFF_COLUMN,
    TIMESTAMP_COLUMN,
    Shard,
    SinceError,
    UpperMismatch,
    consolidate,
    nats_upper_notifier,
)
from loupe.persist.cache import ShardCache
from loupe.persist.shard import Part, ShardState, arrow_schema
from loupe.plan.codec import dataflow_from_proto
from loupe.plan.dataflow import ColumnDesc, DataflowDescription, PersistSink, SourceImport
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

SINK_BATCHES = Counter(
    "loupe_compute_replica_sink_batches",
    "Persist sink batches by outcome: written, corrected, or skipped (another replica won)",
    ["replica_id", "outcome"],
)

Publish = Callable[[compute_pb2.ComputeResponse], Awaitable[None]]


class Engine(Protocol):
    """What the runner uses of ``loupe.dataflow.ComputeInstance``."""

    def create_dataflow(self, desc: DataflowDescription) -> None: ...
    def source_ids(self) -> dict[str, int]: ...
    def push(self, source_id: str, updates: pa.Table, upper: int) -> None: ...
    def step(self) -> bool: ...
    def expect_snapshot(self, source_id: str, rows: int) -> None: ...
    def write_frontier(self, collection_id: str) -> int: ...
    def peek(
        self, target_id: str, timestamp: int, mfp: Any = None, finishing: Any = None
    ) -> Any: ...
    def allow_compaction(self, collection_id: str, since: int) -> None: ...
    def drop(self, collection_id: str) -> None: ...

    workers: int
    hooks: LoggingHooks | None

    def set_logging(self, logging: LoggingHooks | None) -> None: ...

    def take_sink_batches(self) -> list[Any]: ...
    def progress(self) -> list[DataflowProgress]: ...
    def errors(self) -> dict[str, LoupeError]: ...
    def failed(self) -> dict[str, LoupeError]: ...


@dataclass
class _Outputs:
    """What the engine said after a step."""

    frontiers: dict[str, int] = field(default_factory=dict)
    errors: dict[str, LoupeError] = field(default_factory=dict)
    # Exports of dataflows stopped for good (53200 out of memory, a failed step).
    failed: dict[str, LoupeError] = field(default_factory=dict)
    sources: frozenset[str] = frozenset()
    sink_batches: list[SinkBatch] = field(default_factory=list)


@dataclass
class _Dataflow:
    desc: DataflowDescription
    exports: set[str]


class DataflowRunner:
    """The replica's dataflows: engine calls, source feeding, sinks, reports and peeks."""

    def __init__(
        self,
        engine: Engine,
        *,
        responses: Responses,
        publish: Publish,
        storage: StorageLocation,
        nats: Any = None,
        shards: ShardCache | None = None,
        slow_peek_log: float = 5.0,
        report_interval: float = 0.05,
        poll_interval: float = 0.05,
        snapshot_piece_rows: int = 250_000,
    ) -> None:
        self._engine = engine
        self._responses = responses
        self._publish = publish
        self._storage = storage
        self._nats = nats
        self._shards = shards or ShardCache()
        self.slow_peek_log = slow_peek_log
        self.report_interval = report_interval
        self.poll_interval = poll_interval
        # Snapshots are pushed as they are read, in pieces of parts of about this many rows.
        self.snapshot_piece_rows = snapshot_piece_rows
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute-engine")
        # Read by heartbeats: a replica busy in a long step says so.
        self.activity = EngineActivity()
        self._notify = nats_upper_notifier(nats) if nats is not None else None
        self._dataflows: dict[str, _Dataflow] = {}
        # Export id (index or sink) -> the dataflow exporting it.
        self._exports: dict[str, str] = {}
        # The since AllowCompaction last allowed, per export.
        self._sinces: dict[str, int] = {}
        # Exports of dataflows the engine refused: peeks get this error.
        self._failed: dict[str, LoupeError] = {}
        self._sources: dict[str, SourceImport] = {}
        self._feeders: dict[str, asyncio.Task[None]] = {}
        # The as_of each feeder reads its source's snapshot at.
        self._feed_as_ofs: dict[str, int] = {}
        # Source id -> the upper pushed last.
        self._fed: dict[str, int] = {}
        self._feed_errors: dict[str, LoupeError] = {}
        self._sink_errors: dict[str, LoupeError] = {}
        self._sink_queues: dict[str, asyncio.Queue[SinkBatch]] = {}
        self._sink_tasks: dict[str, asyncio.Task[None]] = {}
        self._outputs = _Outputs()
        self._reported_frontiers: dict[str, tuple[int, int]] = {}
        self._reported_hydration: dict[str, tuple[Any, ...]] = {}
        self._reported_errors: dict[str, LoupeError] = {}
        self._work = asyncio.Event()
        self._stepped = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        # Logging: the collector (None: off), log id -> variant, and the queues of
        # the feeders reading a log (touched on the engine thread only).
        self._collector: LogCollector | None = None
        self._log_variants: dict[str, str] = {}
        self._log_readers: dict[str, asyncio.Queue[tuple[pa.Table, int]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # The time of the collector's last tick (engine thread).
        self._last_tick = 0
        # Wall clock minus perf_counter: the engine's times as wall clock.
        self._wall_offset_ns = time.time_ns() - time.perf_counter_ns()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loops = [
            asyncio.create_task(self._step_loop(), name="engine-steps"),
            asyncio.create_task(self._report_loop(), name="engine-reports"),
        ]

    async def close(self) -> None:
        """Stop feeding, stepping and writing; the engine thread finishes its call."""
        tasks = [*self._loops, *self._feeders.values(), *self._sink_tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(*args)`` on the engine thread, after every call made before it."""
        loop = asyncio.get_running_loop()
        call = functools.partial(self.activity.run, functools.partial(function, *args))
        return await loop.run_in_executor(self._executor, call)

    async def run_on_engine(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on the engine thread, in turn (tests make the engine busy so)."""
        return await self._call(function, *args)

    # -- logging ---------------------------------------------------------------------------

    @property
    def workers(self) -> int:
        return self._engine.workers

    async def install_logging(
        self, collector: LogCollector | None, logs: Mapping[str, str]
    ) -> None:
        """Make ``collector`` the engine's hooks (None: logging off) and ``logs`` its log ids."""
        await self._call(self._set_hooks, collector)
        self._collector = collector
        self._log_variants = {log_id: name for name, log_id in logs.items()}
        if collector is None:
            off = LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "introspection was turned off on this replica (INTROSPECTION INTERVAL 0)",
            )
            for source_id in [s for s in self._feeders if _is_log(self._sources.get(s))]:
                self._feed_errors[source_id] = off
            self._work.set()

    def _set_hooks(self, collector: LogCollector | None) -> None:
        self._engine.set_logging(collector)
        if collector is None:
            self._log_readers.clear()
            self._last_tick = 0

    def feed_logs(self, changes: Mapping[str, pa.Table], time: int) -> None:
        """On the engine thread, at a tick: its changes go to the feeders of each log read."""
        assert self._loop is not None
        self._last_tick = time
        for log_id, queue in self._log_readers.items():
            variant = self._log_variants[log_id]
            table = changes.get(variant)
            if table is None:
                table = updates_table(variant, (), time)
            self._loop.call_soon_threadsafe(queue.put_nowait, (table, time))

    def _read_log(
        self, log_id: str, queue: asyncio.Queue[tuple[pa.Table, int]]
    ) -> tuple[pa.Table, int] | None:
        """On the engine thread: ``log_id``'s state as of the last tick, and its readers' queue."""
        collector = self._collector
        if collector is None or log_id not in self._log_variants:
            return None
        variant = self._log_variants[log_id]
        self._log_readers[log_id] = queue
        state = collector.state_rows().get(variant, {})
        return updates_table(variant, state.items(), 0), self._last_tick

    def _refused_logs(self, desc: DataflowDescription) -> LoupeError | None:
        logs = [s.id for s in desc.source_imports if _is_log(s)]
        missing = [i for i in logs if self._collector is None or i not in self._log_variants]
        if not missing:
            return None
        return LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"dataflow {desc.id} reads introspection log {', '.join(missing)}, but this"
            " replica has introspection turned off (INTROSPECTION INTERVAL 0)",
        )

    # -- state, for the curious ------------------------------------------------------------

    def dataflow_ids(self) -> list[str]:
        return sorted(self._dataflows)

    def fed_sources(self) -> list[str]:
        return sorted(self._feeders)

    def write_frontier(self, collection_id: str) -> int:
        """The write frontier of an export as of the last step (0 if unknown)."""
        return self._outputs.frontiers.get(collection_id, 0)

    # -- commands ---------------------------------------------------------------------

    async def create_dataflow(self, message: compute_pb2.CreateDataflow) -> None:
        """Build a dataflow; a replayed one (same id) is ignored."""
        desc = dataflow_from_proto(message.dataflow)
        if desc.id in self._dataflows:
            log.info("dataflow exists already (replay)", dataflow_id=desc.id)
            return
        exports = set(desc.export_ids())
        refused = self._refused_logs(desc)
        if refused is not None:
            await self._refuse(desc, exports, refused)
            return
        try:
            desc = await asyncio.to_thread(self._readable_from, desc)
            await self._call(self._engine.create_dataflow, desc)
        except LoupeError as error:
            await self._refuse(desc, exports, error)
        except Exception as error:
            # Not a plan the engine declined: a bug, logged with its traceback.
            log.exception("dataflow could not be built", dataflow_id=desc.id)
            await self._refuse(desc, exports, internal_error(error))
        else:
            await self._install(desc, exports)

    async def _refuse(
        self, desc: DataflowDescription, exports: set[str], failure: LoupeError
    ) -> None:
        log.warning("dataflow refused", dataflow_id=desc.id, error=failure.message)
        for export_id in exports:
            self._failed[export_id] = failure
            await self._publish(self._collection_error(export_id, failure, desc.as_of))

    async def _install(self, desc: DataflowDescription, exports: set[str]) -> None:
        self._dataflows[desc.id] = _Dataflow(desc, exports)
        for export_id in exports:
            self._exports[export_id] = desc.id
        for source in desc.source_imports:
            self._sources.setdefault(source.id, source)
        for sink in desc.sink_exports:
            if isinstance(sink, PersistSink):
                self._start_sink_writer(sink)
        log.info(
            "dataflow created",
            dataflow_id=desc.id,
            name=desc.debug_name,
            as_of=desc.as_of,
            exports=sorted(exports),
        )
        await self._sync_feeders()
        self._work.set()

    def _readable_from(self, desc: DataflowDescription) -> DataflowDescription:
        """``desc`` starting where its inputs are readable, if that is after its as_of.

        Storage compacts tables to a retention window and nothing holds it
        back for a replica, so a dataflow replayed long after its creation may
        find history before its as_of gone: it then starts at the least time
        its inputs can all be read at (sources' sinces, imported indexes'
        as_ofs on this replica), and reads before that are refused as
        compacted.

        A source another dataflow already has fed is read from its feeder's
        as_of on (its snapshot is there), so a dataflow asking for an earlier
        as_of starts at that one too; otherwise its snapshot would arrive
        after its as_of, and a materialized view's first batch, the contents
        through the as_of, would hold more than that.
        """
        readable = [desc.as_of]
        for source in desc.source_imports:
            if _is_log(source):
                continue  # kept in memory from the dataflow's as_of on
            fed_from = self._feed_as_ofs.get(source.id)
            if fed_from is not None:
                readable.append(fed_from)
            state = self._open(source.shard_id, source).state(missing_ok=True)
            readable.append(state.since if state is not None else 0)
        for index in desc.index_imports:
            exporter = self._dataflows.get(self._exports.get(index.index_id, ""))
            if exporter is not None:
                readable.append(exporter.desc.as_of)
        as_of = max(readable)
        if as_of == desc.as_of:
            return desc
        log.info("dataflow starts at its inputs' since", dataflow_id=desc.id, as_of=as_of)
        return dataclasses.replace(desc, as_of=as_of)

    async def allow_compaction(self, message: compute_pb2.AllowCompaction) -> None:
        """Compact an export to ``since``; ``empty`` drops it (and its dataflow with the last one)."""
        collection_id = message.collection_id
        if collection_id not in self._exports:
            if message.empty:
                self._failed.pop(collection_id, None)  # a refused dataflow, dropped
            log.debug("compaction of an unknown collection", collection_id=collection_id)
            return
        if message.empty:
            self._sinces.pop(collection_id, None)
            await self._drop(collection_id)
        else:
            since = max(self._sinces.get(collection_id, 0), message.since)
            self._sinces[collection_id] = since
            await self._call(self._engine.allow_compaction, collection_id, since)
        self._work.set()

    async def _drop(self, collection_id: str) -> None:
        dataflow_id = self._exports.pop(collection_id)
        await self._call(self._engine.drop, collection_id)
        task = self._sink_tasks.pop(collection_id, None)
        if task is not None:
            task.cancel()
        self._sink_queues.pop(collection_id, None)
        self._sink_errors.pop(collection_id, None)
        dataflow = self._dataflows[dataflow_id]
        dataflow.exports.discard(collection_id)
        if not dataflow.exports:
            del self._dataflows[dataflow_id]
            log.info("dataflow dropped", dataflow_id=dataflow_id)
        self._outputs.frontiers.pop(collection_id, None)
        self._reported_frontiers.pop(collection_id, None)
        self._reported_errors.pop(collection_id, None)
        await self._publish(
            self._response(frontiers=compute_pb2.Frontiers(collection_id=collection_id, empty=True))
        )
        await self._sync_feeders()

    # -- peeks ------------------------------------------------------------------------------

    async def peek(self, request: PeekRequest) -> PeekResult:
        """Read index ``request.target_id`` once its write frontier passes the timestamp.

        Timestamp 0 means the latest complete time, which exists only once
        the dataflow has passed its as_of: before that, ``frontier - 1`` is
        a time before the index's since, compacted away.

        It waits as long as that takes: a busy replica answers late, never
        with an error. What ends the wait early is an answer that cannot
        change (the index is dropped or failed) or ``CancelPeek``, which
        cancels this task. A wait longer than ``slow_peek_log`` seconds is
        logged once, with the frontier it waits on.
        """
        target = request.target_id
        began = time.monotonic()
        logged = False
        while True:
            self._check_peekable(target)
            stepped = self._stepped
            frontier = self.write_frontier(target)
            timestamp = request.timestamp or frontier - 1
            # The latest complete time only once it is past the since as well: the index
            # forgets the times before it (a lagging replica of a compacted index waits).
            earliest = (
                0
                if request.timestamp
                else max(
                    self._dataflows[self._exports[target]].desc.as_of,
                    self._sinces.get(target, 0),
                )
            )
            if frontier > timestamp >= earliest:
                break
            if not logged and time.monotonic() - began > self.slow_peek_log:
                logged = True
                log.info(
                    "peek waits for its index to become readable",
                    uuid=request.uuid,
                    target=target,
                    timestamp=request.timestamp or "latest",
                    write_frontier=frontier,
                )
            # Bounded only so that the log line above is written in time.
            await wait_event(stepped, self.slow_peek_log)
        # One trip to the engine thread: the logging hooks run there around the read.
        read = self._logged_peek if self._collector is not None else self._plain_peek
        result: EnginePeekResult = await self._call(read, request, target, timestamp)
        rows = result.rows()
        if request.max_result_rows:
            rows = rows[: request.max_result_rows]
        return PeekResult(_result_columns(request, result), rows)

    def _plain_peek(self, request: PeekRequest, target: str, timestamp: int) -> EnginePeekResult:
        return self._engine.peek(target, timestamp, request.mfp, request.finishing)

    def _logged_peek(self, request: PeekRequest, target: str, timestamp: int) -> EnginePeekResult:
        """The read between its logging hooks (mz_active_peeks while it runs; its duration
        in mz_peek_durations_histogram after, failed or not), on the engine thread."""
        hooks = self._engine.hooks
        began_ns = time.perf_counter_ns()
        if hooks is not None:
            hooks.peek_started(request.uuid, target, "index", timestamp)
        try:
            return self._plain_peek(request, target, timestamp)
        finally:
            if hooks is not None:
                hooks.peek_finished(request.uuid, "index", time.perf_counter_ns() - began_ns)

    def _check_peekable(self, target: str) -> None:
        failure = self._failed.get(target) or self._outputs.failed.get(target)
        if failure is not None:
            raise failure
        if target not in self._exports:
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT, f"no index {target} on this replica (dropped?)"
            )
        # Errors inside the dataflow are the engine's to raise, at the times they hold.
        storage_error = self._storage_errors().get(target)
        if storage_error is not None:
            raise storage_error

    # -- feeding sources ------------------------------------------------------------------------

    async def _sync_feeders(self) -> None:
        """Feed exactly the sources the engine reads."""
        wanted: dict[str, int] = await self._call(self._engine.source_ids)
        for source_id in [s for s in self._feeders if s not in wanted]:
            self._feeders.pop(source_id).cancel()
            self._feed_as_ofs.pop(source_id, None)
            self._fed.pop(source_id, None)
            self._feed_errors.pop(source_id, None)
            log.info("stopped feeding", source_id=source_id)
        for source_id, as_of in wanted.items():
            if source_id in self._feeders:
                continue
            source = self._sources.get(source_id)
            if source is None:
                log.warning("engine reads a source no dataflow imports", source_id=source_id)
                continue
            feed = self._feed_log(source, as_of) if _is_log(source) else self._feed(source, as_of)
            self._feeders[source_id] = asyncio.create_task(feed, name=f"feed-{source_id}")
            self._feed_as_ofs[source_id] = as_of

    async def _feed(self, source: SourceImport, as_of: int) -> None:
        try:
            shard = await asyncio.to_thread(self._open, source.shard_id, source)
            await self._wait_readable(shard, as_of)
            await self._push_snapshot(source.id, shard, as_of)
            listener = await asyncio.to_thread(
                shard.listen, as_of, nats=self._nats, poll_interval=self.poll_interval
            )
            async with listener:
                async for batch in listener:
                    await self._push(source.id, batch.updates, batch.upper)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # A since past the as_of, or storage gone: the readers' exports hold the error.
            failure = error if isinstance(error, LoupeError) else _feed_error(source, error)
            log.warning("feeding a source failed", source_id=source.id, error=failure.message)
            self._feed_errors[source.id] = failure
            self._work.set()

    async def _push_snapshot(self, source_id: str, shard: Shard, as_of: int) -> None:
        """Push the shard's snapshot at ``as_of`` piece by piece as it is read, then pass it.

        The engine hears the snapshot's expected size first (its parts' rows),
        then gets every piece (``snapshot_piece_rows`` rows of parts, or one
        part) at the as_of as soon as it is read, each with the as_of as its
        upper, so no step runs at the as_of before the last piece: only then
        does the upper pass it. Reading is most of a hydration, and the
        engine counts it as its progress. Each piece is consolidated on its
        own; the engine sums the pieces (an update and its retraction read in
        different pieces cancel there).

        A compaction may replace parts not read yet: what was pushed is then
        retracted (pushed negated, at the as_of: it cancels in the engine)
        and the snapshot read again from the new state.
        """
        pushed: list[pa.Table] = []
        retracted = 0  # rows pushed and retracted by earlier reads: the engine holds them too
        while True:
            state, parts = await asyncio.to_thread(shard.snapshot_parts, as_of)
            expected = retracted + sum(part.rows for part in parts)
            await self._call(self._engine.expect_snapshot, source_id, expected)
            complete = True
            for piece in snapshot_pieces(parts, self.snapshot_piece_rows):
                updates = await asyncio.to_thread(snapshot_piece, shard, state, piece, as_of)
                if updates is None:
                    complete = False
                    break
                if updates.num_rows:
                    await self._push(source_id, updates, as_of)
                    pushed.append(updates)
            if complete:
                break
            log.info("a compaction replaced parts being read; reading again", source_id=source_id)
            if pushed:
                retraction = _negated(pa.concat_tables(pushed))
                await self._push(source_id, retraction, as_of)
                retracted += 2 * retraction.num_rows
                pushed = []
        empty = _as_persisted(arrow_schema(state.columns).empty_table(), state.columns)
        await self._push(source_id, empty, as_of + 1)

    async def _feed_log(self, source: SourceImport, as_of: int) -> None:
        """Feed a log import from the collector: its state, then every tick's changes."""
        queue: asyncio.Queue[tuple[pa.Table, int]] = asyncio.Queue()
        try:
            read = await self._call(self._read_log, source.id, queue)
            if read is None:
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    f"introspection log {source.id} is not kept on this replica"
                    " (introspection is off)",
                )
            # The state at the as_of, as of a tick at or after it (up to one interval
            # fresher than asked): ticks before the as_of are folded in first.
            parts, ticked = [read[0]], read[1]
            while ticked < as_of:
                changes, ticked = await queue.get()
                parts.append(changes)
            await self._push(source.id, _at(pa.concat_tables(parts), as_of, source), ticked + 1)
            while True:
                changes, tick = await queue.get()
                await self._push(source.id, _at(changes, tick, source), tick + 1)
        except asyncio.CancelledError:
            raise
        except LoupeError as error:
            log.warning("feeding a log failed", source_id=source.id, error=error.message)
            self._feed_errors[source.id] = error
            self._work.set()
        finally:
            if self._log_readers.get(source.id) is queue:
                with contextlib.suppress(Exception):
                    await self._call(self._log_readers.pop, source.id, None)

    def _open(self, shard_id: str, where: SourceImport | PersistSink) -> Shard:
        location = StorageLocation(where.blob_uri, where.consensus_uri)
        if not (location.blob_uri and location.consensus_uri):
            location = self._storage
        return self._shards.shard(shard_id, location)

    async def _wait_readable(self, shard: Shard, as_of: int) -> None:
        while True:
            state = await asyncio.to_thread(shard.state, missing_ok=True)
            upper = NEVER_WRITTEN if state is None else state.upper
            if upper > as_of:
                return
            await asyncio.sleep(self.poll_interval)

    async def _push(self, source_id: str, updates: pa.Table, upper: int) -> None:
        if self._feeders.get(source_id) is not asyncio.current_task():
            # A feeder replaced or stopped that is still running (its cancel was lost):
            # its uppers would let the source's next reader pass its as_of before that
            # reader's snapshot came, reading as empty. It must never push again.
            log.warning("a stopped feeder tried to push; it stops", source_id=source_id)
            raise asyncio.CancelledError
        await self._call(self._engine.push, source_id, updates, upper)
        self._fed[source_id] = upper
        self._work.set()

    # -- stepping -------------------------------------------------------------------------------

    async def _step_loop(self) -> None:
        while True:
            waited = time.perf_counter_ns()
            await self._work.wait()
            parked = time.perf_counter_ns() - waited if self._collector is not None else 0
            self._work.clear()
            exports = tuple(self._exports)
            try:
                outputs = await self._call(self._step_and_read, exports, parked)
            except Exception:
                log.exception("engine step failed")
                continue
            self._outputs = outputs
            if set(self._feeders) - outputs.sources:
                await self._sync_feeders()  # a dataflow out of memory let go of its sources
            self._add_feed_errors(outputs)
            batches, outputs.sink_batches = outputs.sink_batches, []
            await self._ship_sink_batches(batches)
            self._stepped.set()
            self._stepped = asyncio.Event()

    def _step_and_read(self, exports: Sequence[str], parked_ns: int = 0) -> _Outputs:
        """On the engine thread: one step, then everything the replica reports."""
        hooks = self._engine.hooks
        if hooks is not None and parked_ns > 0:
            for worker in range(self._engine.workers):
                hooks.parked(worker, parked_ns, 0)
        self._engine.step()
        return _Outputs(
            frontiers={e: self._engine.write_frontier(e) for e in exports},
            errors=self._engine.errors(),
            failed=self._engine.failed(),
            sources=frozenset(self._engine.source_ids()),
            sink_batches=self._engine.take_sink_batches(),
        )

    def _storage_errors(self) -> dict[str, LoupeError]:
        """Exports that cannot be right: a source could not be read, or a sink not written."""
        found = dict(self._sink_errors)
        for dataflow in self._dataflows.values():
            for source in dataflow.desc.source_imports:
                error = self._feed_errors.get(source.id)
                if error is not None:
                    found.update(dict.fromkeys(dataflow.exports, error))
        return found

    def _add_feed_errors(self, outputs: _Outputs) -> None:
        for export_id, error in self._storage_errors().items():
            outputs.errors.setdefault(export_id, error)

    # -- shipping -------------------------------------------------------------------------------

    async def _ship_sink_batches(self, batches: Iterable[SinkBatch]) -> None:
        for batch in batches:
            queue = self._sink_queues.get(batch.sink_id)
            if queue is not None:
                queue.put_nowait(batch)
            elif batch.sink_id in self._exports:
                await self._publish(self._subscribe_batch(batch))

    def _subscribed_types(self, sink_id: str) -> list[str] | None:
        """The column types of what a SUBSCRIBE streams, when its dataflow builds it."""
        dataflow = self._dataflows.get(self._exports.get(sink_id, ""))
        if dataflow is None:
            return None
        sink = next((s for s in dataflow.desc.sink_exports if s.sink_id == sink_id), None)
        built = next(
            (
                b
                for b in dataflow.desc.objects_to_build
                if sink is not None and b.id == sink.from_id
            ),
            None,
        )
        return None if built is None else [t for _, t in built.columns]

    def _subscribe_batch(self, batch: SinkBatch) -> compute_pb2.ComputeResponse:
        if batch.error is not None:
            return self._response(
                subscribe_batch=compute_pb2.SubscribeBatch(
                    sink_id=batch.sink_id,
                    lower=batch.lower,
                    upper=batch.upper,
                    error=batch.error.to_proto(),
                )
            )
        table: pa.Table = batch.updates
        data = [n for n in table.column_names if n not in (TIMESTAMP_COLUMN, DIFF_COLUMN)]
        columns = [python_values(table.column(n)) for n in data]
        times = table.column(TIMESTAMP_COLUMN).to_pylist()
        diffs = table.column(DIFF_COLUMN).to_pylist()
        rows = list(zip(*columns, strict=True))
        types = self._subscribed_types(batch.sink_id)
        if types is not None and len(types) == len(data):
            rows = client_rows(rows, types)
        updates = [
            compute_pb2.UpdateRow(row=values.to_row(row), time=t, diff=d)
            for row, t, d in zip(rows, times, diffs, strict=True)
        ]
        return self._response(
            subscribe_batch=compute_pb2.SubscribeBatch(
                sink_id=batch.sink_id, lower=batch.lower, upper=batch.upper, updates=updates
            )
        )

    def _start_sink_writer(self, sink: PersistSink) -> None:
        queue: asyncio.Queue[SinkBatch] = asyncio.Queue()
        self._sink_queues[sink.sink_id] = queue
        self._sink_tasks[sink.sink_id] = asyncio.create_task(
            self._write_sink(sink, queue), name=f"sink-{sink.sink_id}"
        )

    async def _write_sink(self, sink: PersistSink, queue: asyncio.Queue[SinkBatch]) -> None:
        shard = await asyncio.to_thread(self._open, sink.shard_id, sink)
        shard.notify = self._notify
        while True:
            batch = await queue.get()
            if batch.error is not None:
                # The view holds an error there: nothing right can be written.
                self._sink_errors[sink.sink_id] = batch.error
                self._work.set()
                continue
            try:
                outcome = await asyncio.to_thread(
                    write_sink_batch,
                    shard,
                    sink.columns,
                    batch.lower,
                    batch.upper,
                    batch.updates,
                    snapshot=batch.snapshot,
                )
            except Exception as error:
                log.exception("sink batch not written", sink_id=sink.sink_id)
                self._sink_errors[sink.sink_id] = internal_error(error)
                self._work.set()
                continue
            self._sink_errors.pop(sink.sink_id, None)
            SINK_BATCHES.labels(replica_id=self._responses.replica_id, outcome=outcome).inc()
            log.debug(
                "sink batch",
                sink_id=sink.sink_id,
                lower=batch.lower,
                upper=batch.upper,
                outcome=outcome,
            )

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.report_interval)
            for response in self._changes():
                await self._publish(response)

    def _changes(self) -> list[compute_pb2.ComputeResponse]:
        """Responses for every frontier, hydration and error that changed since last reported."""
        return [*self._frontier_changes(), *self._hydration_changes(), *self._error_changes()]

    def _frontier_changes(self) -> list[compute_pb2.ComputeResponse]:
        changes = []
        for collection_id, frontier in self._outputs.frontiers.items():
            dataflow_id = self._exports.get(collection_id)
            if dataflow_id is None:
                continue
            reported = (frontier, self._input_frontier(dataflow_id))
            if self._reported_frontiers.get(collection_id) == reported:
                continue
            self._reported_frontiers[collection_id] = reported
            message = compute_pb2.Frontiers(
                collection_id=collection_id, write_frontier=reported[0], input_frontier=reported[1]
            )
            changes.append(self._response(frontiers=message))
        return changes

    def _hydration_changes(self) -> list[compute_pb2.ComputeResponse]:
        """A ``Hydration`` for every dataflow whose hydration changed since last reported.

        The engine's ``progress()`` is read here, on the event loop, while a
        step may be running on the engine thread (it is safe to): a long
        hydrating step still reports its nodes' progress every interval.
        """
        try:
            progress = {p.dataflow_id: p for p in self._engine.progress()}
        except Exception:
            log.exception("engine progress could not be read")
            return []
        changes = []
        for dataflow_id in list(self._dataflows):
            current = progress.get(dataflow_id)
            if current is None:
                continue  # not built yet: nothing to say
            # Records read only count while hydrating: afterwards they change with every write.
            key = (
                current.hydrated,
                current.nodes_hydrated,
                current.nodes_total,
                None if current.hydrated else current.records_read,
                current.nodes,
                current.export_ids,
                current.hydration_time_ns,
                current.started_ns,
            )
            if self._reported_hydration.get(dataflow_id) != key:
                self._reported_hydration[dataflow_id] = key
                changes.append(self._response(hydration=self._hydration(current)))
        for dataflow_id in [d for d in self._reported_hydration if d not in self._dataflows]:
            del self._reported_hydration[dataflow_id]
        return changes

    def _error_changes(self) -> list[compute_pb2.ComputeResponse]:
        changes = []
        current = {e: err for e, err in self._outputs.errors.items() if e in self._exports}
        for collection_id, error in current.items():
            if self._reported_errors.get(collection_id) != error:
                self._reported_errors[collection_id] = error
                # The engine reports the errors it holds at its latest complete time.
                latest = max(self._outputs.frontiers.get(collection_id, 0), 1) - 1
                changes.append(self._collection_error(collection_id, error, latest))
        for collection_id in [c for c in self._reported_errors if c not in current]:
            del self._reported_errors[collection_id]
            cleared = compute_pb2.CollectionError(collection_id=collection_id, cleared=True)
            changes.append(self._response(collection_error=cleared))
        return changes

    def _input_frontier(self, dataflow_id: str) -> int:
        sources = [s.id for s in self._dataflows[dataflow_id].desc.source_imports]
        return min((self._fed.get(s, 0) for s in sources), default=0)

    def _hydration(self, progress: DataflowProgress) -> compute_pb2.Hydration:
        message = compute_pb2.Hydration(
            dataflow_id=progress.dataflow_id,
            hydrated=progress.hydrated,
            nodes_total=progress.nodes_total,
            nodes_hydrated=progress.nodes_hydrated,
            records_read=progress.records_read,
            nodes=[
                compute_pb2.NodeHydration(
                    lir_id=node.lir_id,
                    worker_id=node.worker,
                    hydrated=node.hydrated,
                    records_done=node.records_done,
                    records_estimated=node.records_estimated,
                )
                for node in progress.nodes
            ],
            export_ids=progress.export_ids,
            records_done=progress.records_done,
            records_estimated=progress.records_estimated,
            installed_at_ms=self._wall_ms(progress.installed_ns),
            started_at_ms=self._wall_ms(progress.started_ns),
        )
        if progress.hydration_time_ns is not None:
            message.hydration_time_ns = progress.hydration_time_ns
        return message

    def _wall_ms(self, perf_ns: int | None) -> int:
        """A ``perf_counter_ns`` reading as wall clock ms (0 for none); one offset, so a
        time reported twice is the same."""
        if not perf_ns:
            return 0
        return (perf_ns + self._wall_offset_ns) // 1_000_000

    def _collection_error(
        self, collection_id: str, error: LoupeError, since: int
    ) -> compute_pb2.ComputeResponse:
        return self._response(
            collection_error=compute_pb2.CollectionError(
                collection_id=collection_id, error=error.to_proto(), since=since
            )
        )

    def _response(self, **kind: Any) -> compute_pb2.ComputeResponse:
        return compute_pb2.ComputeResponse(
            replica_id=self._responses.replica_id, incarnation=self._responses.incarnation, **kind
        )


# -- storage edges (run in worker threads) ---------------------------------------------------


def snapshot_pieces(parts: Sequence[Part], rows: int) -> list[list[Part]]:
    """``parts`` in order, grouped into pieces of at least ``rows`` rows (the last: fewer)."""
    pieces: list[list[Part]] = []
    piece: list[Part] = []
    held = 0
    for part in parts:
        piece.append(part)
        held += part.rows
        if held >= rows:
            pieces.append(piece)
            piece, held = [], 0
    if piece:
        pieces.append(piece)
    return pieces


def snapshot_piece(
    shard: Shard, state: ShardState, parts: Sequence[Part], as_of: int
) -> pa.Table | None:
    """The updates of ``parts`` at or before ``as_of``, consolidated, as updates at ``as_of``;
    None if a compaction replaced them."""
    piece = shard.read_snapshot_parts(state, parts, as_of)
    return None if piece is None else _snapshot_at(piece, as_of, state.columns)


def _snapshot_at(snapshot: pa.Table, as_of: int, columns: Sequence[ColumnDesc]) -> pa.Table:
    times = pa.repeat(pa.scalar(as_of, pa.uint64()), snapshot.num_rows)
    updates = snapshot.add_column(
        snapshot.schema.get_field_index(DIFF_COLUMN), TIMESTAMP_COLUMN, times
    )
    return _as_persisted(updates, columns)


def _negated(updates: pa.Table) -> pa.Table:
    """``updates`` retracted: every diff negated."""
    diffs = pc.negate(updates.column(DIFF_COLUMN))
    return updates.set_column(updates.schema.get_field_index(DIFF_COLUMN), DIFF_COLUMN, diffs)


def write_sink_batch(
    shard: Shard,
    columns: Sequence[ColumnDesc],
    lower: int,
    upper: int,
    updates: pa.Table,
    *,
    snapshot: bool = False,
) -> str:
    """Write a sink batch ``[lower, upper)`` so the shard holds every time exactly once.

    Every replica calls this with the same batches; compare-and-append lets
    one win per upper. Against the shard's upper ``u``:

    - ``u >= upper``: someone wrote it already (``"skipped"``);
    - ``lower <= u < upper``: the updates at ``u`` and later are appended,
      ``u -> upper`` (a replica behind another resumes where it stopped);
    - ``u < lower``, or ``u == lower`` for a ``snapshot`` batch: the shard is
      behind the dataflow's as_of (a new shard, or a dataflow re-created
      later, e.g. by a restarted replica from a compacted since): the first
      batch holds the snapshot at ``lower``, the contents through ``lower``,
      so what the shard holds is retracted at ``lower`` in the same append,
      and the shard equals the view from ``lower`` on. (Appending that
      snapshot at ``u == lower`` would add it to the rows the shard holds.)

    A lost race (``UpperMismatch``) re-reads the upper and decides again.
    """
    while True:
        state = shard.ensure(columns)
        current = state.upper
        if current >= upper:
            return "skipped"
        if current > lower or (current == lower and not snapshot):
            times = updates.column(TIMESTAMP_COLUMN)
            chunk = updates.filter(pc.greater_equal(times, pa.scalar(current, pa.uint64())))
            outcome = "written"
        elif current == 0:
            chunk, outcome = updates, "written"  # a new shard: nothing to correct
        else:
            chunk = _correct_to(shard, columns, current, lower, updates)
            outcome = "corrected"
        try:
            shard.compare_and_append(_as_persisted(chunk, columns), current, upper)
            return outcome
        except UpperMismatch:
            continue


def _correct_to(
    shard: Shard, columns: Sequence[ColumnDesc], current: int, at: int, updates: pa.Table
) -> pa.Table:
    """``updates`` plus the retraction, at ``at``, of what the shard holds before ``current``."""
    held = shard.snapshot(current - 1)
    negated = pc.negate(held.column(DIFF_COLUMN))
    retraction = held.set_column(held.schema.get_field_index(DIFF_COLUMN), DIFF_COLUMN, negated)
    retraction = retraction.add_column(
        retraction.schema.get_field_index(DIFF_COLUMN),
        TIMESTAMP_COLUMN,
        pa.repeat(pa.scalar(at, pa.uint64()), held.num_rows),
    )
    both = pa.concat_tables(
        [_as_persisted(updates, columns), _as_persisted(retraction, columns)],
        promote_options="none",
    )
    return consolidate(both, [*(name for name, _ in columns), TIMESTAMP_COLUMN])


def _as_persisted(table: pa.Table, columns: Sequence[ColumnDesc]) -> pa.Table:
    """``table`` in the shard's schema (column order and types)."""
    schema = arrow_schema(columns)
    return table.select(schema.names).cast(schema)


def _is_log(source: SourceImport | None) -> bool:
    """A log import: kept in the replica's memory, no shard holds it."""
    return source is not None and not source.shard_id


def _at(table: pa.Table, time: int, source: SourceImport) -> pa.Table:
    """Log updates at ``time``, in the import's schema."""
    times = pa.repeat(pa.scalar(time, pa.uint64()), table.num_rows)
    retimed = table.set_column(
        table.schema.get_field_index(TIMESTAMP_COLUMN), TIMESTAMP_COLUMN, times
    )
    return _as_persisted(retimed, source.columns)


# -- engine edges -----------------------------------------------------------------------------


def _result_columns(request: PeekRequest, result: EnginePeekResult) -> tuple[ResultColumn, ...]:
    """The peek's result description, or PostgreSQL's ``columnN`` names when it sent none."""
    if request.result_columns:
        return request.result_columns
    return tuple(ResultColumn(f"column{i + 1}", t) for i, t in enumerate(result.types))


def _feed_error(source: SourceImport, error: Exception) -> LoupeError:
    if isinstance(error, SinceError):
        return LoupeError(SqlState.INTERNAL_ERROR, f"cannot read {source.id}: {error}")
    return internal_error(error)


def internal_error(error: BaseException) -> LoupeError:
    """An unexpected failure as an error a client can be shown."""
    return LoupeError(SqlState.INTERNAL_ERROR, f"{type(error).__name__}: {error}")
