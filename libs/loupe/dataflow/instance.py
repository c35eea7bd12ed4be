"""``ComputeInstance``: the dataflows of one replica, fed from storage, read by peeks and sinks.

Time is a single u64 (milliseconds); a frontier ``f`` means every time
before ``f`` is complete. A dataflow starts complete up to its ``as_of`` and
steps whenever all its inputs are complete further: the interval
``[frontier, new frontier)`` flows through every operator at once.
``EMPTY`` (2**64 - 1) stands for the empty frontier of an input that never
changes again (a dataflow with only constants).
"""

from __future__ import annotations

import dataclasses
import time as clock
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.dataflow import expr, intervals, memory, types
from loupe.dataflow.arrangement import Log, Trace, latest_time
from loupe.dataflow.batches import (
    DIFF,
    ERROR,
    TIME,
    Meter,
    advance,
    concat,
    consolidate,
    empty_errors,
    expand,
    split_time,
    spread,
)
from loupe.dataflow.hooks import LoggingHooks
from loupe.dataflow.hydration import HydrationTracker, Snapshot, rows_processed
from loupe.dataflow.memory import MemoryBudget
from loupe.dataflow.operators import Input, Operator
from loupe.dataflow.render import LirRegion, Renderer
from loupe.dataflow.results import Finishing, HydrationStatus, NotReady, PeekResult, SinkBatch
from loupe.interval import structs
from loupe.plan import lir
from loupe.plan.dataflow import ColumnDesc, DataflowDescription, PersistSink, Sink
from loupe.plan.scalar import Call, Column, Literal

EMPTY = 2**64 - 1
# How far (in ms of time) a source's shared log stays distinguishable behind its readers'
# frontiers: reads choose their timestamp before their dataflow exists on the replica.
FEED_HISTORY_MS = 10_000

log = get_logger(__name__)

# Where logging reports what is not per worker here. An index's history (``Trace``) is
# one per replica, read whole by peeks, and a dataflow's input queues are spread over
# the workers only when their times come: both are reported on worker 0, as are the
# error counts of exports (their error streams are not partitioned either).
TRACE_WORKER = 0
QUEUE_WORKER = 0


@dataclass(frozen=True)
class _Channel:
    """An edge of a dataflow: ``source``'s output read by operator ``target`` at ``port``.

    ``reader`` is the target operator (None for an export): an exchanging
    reader's meter counts what crossed the channel between which workers.
    """

    id: int
    source: Operator
    target: int
    port: int
    exchanged: bool
    reader: Operator | None = None


def _idle(operator: Operator) -> bool:
    """Whether none of the operator's inputs changed: then it has nothing to do (sets no output)."""
    if not operator.inputs or operator.eager or not all(_quiet(i) for i in operator.inputs):
        return False
    if not _quiet(operator):
        operator.ok = [operator.empty] * len(operator.ok)
        operator.err = empty_errors()
    return True


def _quiet(operator: Operator) -> bool:
    return operator.err.height == 0 and all(part.height == 0 for part in operator.ok)


def _attribute(ns: list[int], remainder: int, rows: list[int]) -> None:
    """Add ``remainder`` to ``ns`` in proportion to ``rows`` (no rows: all to worker 0)."""
    total = sum(rows)
    if total == 0:
        ns[0] += remainder
        return
    given = 0
    for worker, count in enumerate(rows):
        share = remainder * count // total
        ns[worker] += share
        given += share
    ns[rows.index(max(rows))] += remainder - given  # what rounding left


def _log_spines(hooks: LoggingHooks, worker: int, operator_id: int, spines: list) -> None:
    """An operator's arrangements on ``worker``: records, batches, the bytes their frames hold."""
    records = sum(s.records for s in spines)
    batches = sum(s.batch_count for s in spines)
    size = sum(s.size for s in spines)
    # A frame's bytes are all it reserves, and each batch is one frame: capacity and
    # allocations are the hook's defaults (size, batches).
    hooks.arrangement_size(worker, operator_id, records, batches, size)


def _error_count(frames: Sequence[pl.DataFrame]) -> int:
    """How many errors ``frames`` of error updates hold (their diffs summed)."""
    return sum(int(f[DIFF].sum()) for f in frames if f.height)


def _exchanges(operator: Operator) -> bool:
    """Whether the operator repartitions its input by key (a stateful one)."""
    return bool(operator.spines())


@dataclass
class _Queue:
    """Updates of one import waiting for the dataflow's frontier to pass their times."""

    ok: list[pl.DataFrame] = field(default_factory=list)
    err: list[pl.DataFrame] = field(default_factory=list)
    records: int = 0

    def take(self, upper: int, empty: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The queued updates before ``upper``; later ones stay queued."""
        ok, self.ok = _before(self.ok, upper, empty)
        err, self.err = _before(self.err, upper, empty_errors())
        self.records += ok.height
        return ok, err


def _before(
    frames: list[pl.DataFrame], upper: int, empty: pl.DataFrame
) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """The updates of ``frames`` before ``upper``, and the frames of those after."""
    whole = concat(frames, empty)
    if whole.height == 0 or latest_time(whole) < upper:  # the usual case: no copy
        return whole, []
    now, later = split_time(whole, upper)
    return now, [later]


# Pushed tables of at most this many rows are read by Python rows (``types.read_rows``).
SMALL_TABLE_ROWS = 64


@dataclass
class _Source:
    """A storage collection the instance is fed, logged for dataflows created later."""

    id: str
    columns: tuple[ColumnDesc, ...]
    log: Log = field(default_factory=Log)
    upper: int = 0
    readers: list[Dataflow] = field(default_factory=list)
    # The rows its snapshot is expected to hold while it is read (``expect_snapshot``).
    expected: int = 0
    # Per set of converted columns: the expressions padding a batch to every column.
    paddings: dict[tuple[int, ...], list[pl.Expr]] = field(default_factory=dict)
    # The last few table schemas and sets of read columns: how a small table of each is
    # read by rows, if it is.
    row_reads: list[tuple[pa.Schema, tuple[int, ...], types.RowRead | None]] = field(
        default_factory=list
    )

    def read(self, table: pa.Table, readers: Sequence[Dataflow]) -> pl.DataFrame:
        """``table`` as an engine batch with the columns ``readers`` read (the others NULL).

        Converting persist's format costs; a TPC-H join reads 4 of
        lineitem's 16 columns.
        """
        wanted: set[int] = set()
        for reader in readers:
            demand = reader.source_demand[self.id]
            if demand is None:
                wanted = set(range(len(self.columns)))
                break
            wanted |= demand
        kept = sorted(wanted)
        if table.num_rows <= SMALL_TABLE_ROWS:
            how = self._row_read(table.schema, tuple(kept))
            if how is not None:
                return types.read_rows(table, how)
        frame = types.from_persist(table, [self.columns[i] for i in kept], kept)
        if len(kept) == len(self.columns):
            return frame
        return frame.select(self._padding(tuple(kept)))

    def _row_read(self, schema: pa.Schema, kept: tuple[int, ...]) -> types.RowRead | None:
        """``types.row_read`` for tables of ``schema`` (decided once per schema and read
        columns; a schema is compared, as hashing one costs tens of microseconds)."""
        for known, columns, how in self.row_reads:
            if columns == kept and known.equals(schema):
                return how
        how = types.row_read(schema, self.columns, kept)
        self.row_reads = [(schema, kept, how), *self.row_reads[:3]]
        return how

    def _padding(self, kept: tuple[int, ...]) -> list[pl.Expr]:
        """The columns of a batch that converted only ``kept``: the others as NULLs (built once)."""
        if kept in self.paddings:
            return self.paddings[kept]
        padding = self.paddings[kept] = [
            pl.col(f"c{i}") if i in kept else pl.lit(None, types.polars_dtype(t)).alias(f"c{i}")
            for i, (_, t) in enumerate(self.columns)
        ]
        padding += [pl.col(TIME), pl.col(DIFF)]
        return padding


class _IndexExport:
    """An arranged export: its history since ``since`` (ok and errors), read by peeks."""

    def __init__(
        self,
        export_id: str,
        operator: Operator,
        as_of: int,
        operator_id: int,
        key: Sequence[int] = (),
    ) -> None:
        self.id = export_id
        self.operator = operator
        self.operator_id = operator_id
        self.key = tuple(key)
        self.ok = Trace(operator.empty, as_of, [f"c{i}" for i in self.key])
        self.err = Trace(empty_errors(), as_of)
        self.readers: list[tuple[Dataflow, str]] = []

    def absorb(self) -> None:
        self.ok.insert(concat(self.operator.ok, self.operator.empty))
        self.err.insert(self.operator.err)


class _SinkExport:
    """A persist sink or subscribe: a batch per step, with the current error if any."""

    def __init__(
        self,
        sink: Sink,
        operator: Operator,
        columns: Sequence[ColumnDesc],
        as_of: int,
        operator_id: int,
    ) -> None:
        self.sink = sink
        self.id = sink.sink_id
        self.operator = operator
        self.operator_id = operator_id
        self.columns = tuple(columns)
        self.as_of = as_of
        self.skip_snapshot = not isinstance(sink, PersistSink) and not sink.snapshot
        self.errors = empty_errors().drop(TIME)
        self.batches: list[SinkBatch] = []

    def absorb(self, lower: int, upper: int) -> None:
        updates = consolidate(concat(self.operator.ok, self.operator.empty))
        if self.skip_snapshot:
            updates = updates.filter(pl.col(TIME) > self.as_of)
        if self.operator.err.height:
            both = concat([self.errors, self.operator.err.drop(TIME)], self.errors)
            self.errors = consolidate(both, with_time=False)
        error = _first_error(self.errors)
        table = types.to_persist(updates, self.columns)
        snapshot = lower == self.as_of
        self.batches.append(SinkBatch(self.id, lower, upper, table, error, snapshot))


def _snapshot_rows(frame: pl.DataFrame, as_of: int) -> int:
    """How many updates of ``frame`` (advanced to the as_of) are at it: its snapshot's."""
    if latest_time(frame) <= as_of:  # the usual case: no filter
        return frame.height
    return int((frame[TIME] <= as_of).sum())


def _advance(frame: pl.DataFrame, since: int) -> pl.DataFrame:
    """``advance``, skipped when no time is before ``since`` (no copy)."""
    earliest = _time_bound(frame[TIME].min())
    return advance(frame, since) if earliest < since else frame


def _time_bound(value: object) -> int:
    """A Series' min or max of a non-empty UInt64 ``time`` column (typed loosely by polars)."""
    assert isinstance(value, int)
    return value


def _out_of_memory(error: Exception, name: str) -> LoupeError | None:
    """``error`` as the dataflow's 53200 if it is running out of memory, else None.

    The budget's refusal (``loupe.dataflow.memory``) comes as a 53200
    already; a ``MemoryError`` is the process's OS limit refusing an
    allocation the budget did not see coming.
    """
    if isinstance(error, LoupeError) and error.code == SqlState.OUT_OF_MEMORY:
        return error
    if isinstance(error, MemoryError):
        return LoupeError(
            SqlState.OUT_OF_MEMORY,
            f"out of memory: dataflow {name} could not allocate memory",
            detail="The replica process reached its OS memory limit.",
        )
    return None


def _husk(operator: Operator) -> Operator:
    """A stateless stand-in for ``operator``: same id, name and types, no state, no inputs."""
    husk = Operator(operator.types, (), operator.workers)
    husk.name = operator.name
    husk.operator_id = operator.operator_id
    return husk


def _husk_input(operator: Input) -> Input:
    husk = Input(operator.types, operator.workers, operator.name)
    husk.operator_id = operator.operator_id
    return husk


def _first_error(errors: pl.DataFrame) -> LoupeError | None:
    """The error to report for an error collection (the least message, for determinism)."""
    if errors.height == 0:  # the usual case: not even a filter
        return None
    present = errors.filter(pl.col(DIFF) != 0)
    if present.height == 0:
        return None
    code, message = expr.split_error(present[ERROR].sort()[0])
    return LoupeError(code, message)


class Dataflow:
    """One rendered ``DataflowDescription`` and its progress."""

    def __init__(
        self,
        desc: DataflowDescription,
        index: int,
        renderer: Renderer,
        scope_id: int = -1,
        track_hydration: bool = True,
    ) -> None:
        self.desc = desc
        self.index = index
        # The dataflow as an operator of its own (address ``(index,)``), for logging.
        self.scope_id = scope_id
        # Operator id -> its index in the dataflow (address ``(index, k)``, k >= 1).
        self.local: dict[int, int] = {}
        self.created_ns = clock.perf_counter_ns()
        # How long it took to hydrate (mz_compute_hydration_times); None until it has.
        self.hydrated_ns: int | None = None
        # When it started hydrating: its inputs' snapshots began to arrive (reading them is
        # most of a hydration, counted as progress), or its hydrating step (its first)
        # started, whichever came first; None until then.
        self.started_ns: int | None = None
        self.workers = renderer.workers
        self.operators = renderer.operators
        self.hydration_ids = renderer.hydration_ids
        self.regions: list[LirRegion] = renderer.regions
        self.inputs: dict[str, Input] = renderer.imports
        self.queues = {name: _Queue() for name in self.inputs}
        # Whether the queues changed since they were last logged.
        self.queued = False
        # Set by the instance when its hooks call a flush each interval: then sizes
        # are reported there (``flush_sizes``), and here only what changed is noted.
        self.deferred = False
        self.changed_spines: set[tuple[Operator, int]] = set()
        self.changed_traces = False
        self.collections = renderer.collections
        self.source_demand = renderer.source_demand
        self.frontier = desc.as_of
        self.index_exports: dict[str, _IndexExport] = {}
        self.sinks: dict[str, _SinkExport] = {}
        self.import_frontiers: dict[str, int] = {}
        self.channels: list[_Channel] = []
        # Set when a step failed for a reason other than a SQL error in the data: the
        # operators' state is then unknown, so the dataflow stops where it was and every
        # read of it fails with this error instead of answering without the lost updates.
        self.failed: LoupeError | None = None
        # ``ComputeInstance.progress``'s last summary of ``tracker.snapshot``: (that snapshot,
        # its NodeProgress tuple, nodes hydrated, records done, records estimated).
        self.progress_summary: tuple[Snapshot, tuple[NodeProgress, ...], int, int, int] | None = (
            None
        )
        # Per LIR node hydration and progress (``ComputeInstance(hydration_logging=...)``).
        self.tracker = (
            HydrationTracker(
                self.operators,
                [r.start for r in self.regions],
                self.inputs,
                self.workers,
                [s.id for s in desc.source_imports],
            )
            if track_hydration
            else None
        )

    @property
    def as_of(self) -> int:
        return self.desc.as_of

    @property
    def hydrated(self) -> bool:
        return self.frontier > self.as_of

    def export_ids(self) -> list[str]:
        return [*self.index_exports, *self.sinks]

    def enqueue(self, name: str, ok: pl.DataFrame, err: pl.DataFrame) -> None:
        """Updates of import ``name``; times before the as_of read as the as_of."""
        queue = self.queues[name]
        if self.started_ns is None and ok.height and not self.hydrated:
            self.started_ns = clock.perf_counter_ns()
        if ok.height:
            advanced = _advance(ok, self.as_of)
            queue.ok.append(advanced)
            self.queued = True
            tracker = self.tracker
            if tracker is not None and not tracker.started:
                tracker.queue(name, _snapshot_rows(advanced, self.as_of))
        if err.height:
            queue.err.append(_advance(err, self.as_of))
            self.queued = True

    def expect_snapshot(self, name: str, rows: int) -> None:
        """Source import ``name``'s snapshot will hold about ``rows`` updates (progress only):
        it is being read, the dataflow's hydration has started."""
        if self.started_ns is None and not self.hydrated:
            self.started_ns = clock.perf_counter_ns()
        tracker = self.tracker
        if tracker is not None and not tracker.started and name in tracker.imports:
            tracker.expect(name, rows)

    def step(self, upper: int, hooks: LoggingHooks | None) -> bool:
        """Process every update before ``upper`` (the least input frontier)."""
        if self.desc.until:
            upper = min(upper, self.desc.until)
        if upper <= self.frontier or self.failed is not None:
            return False
        lower = self.frontier
        workers = self.workers
        taken = {}
        self.queued = True
        hydrating = lower <= self.as_of < upper
        if hydrating:
            if self.started_ns is None:
                self.started_ns = clock.perf_counter_ns()
            if self.tracker is not None:
                self.tracker.start()
        for name, operator in self.inputs.items():
            ok, err = self.queues[name].take(upper, operator.empty)
            taken[name] = (ok, err)
            operator.pending = spread(ok, workers)
            operator.pending_err = err
        try:
            self._run_operators(lower, upper, hooks, hydrating)
        except Exception as error:
            if hydrating and self.tracker is not None:
                self._unhydrate(hooks)
            out_of_memory = _out_of_memory(error, self.name)
            if out_of_memory is not None:
                # The instance releases its state: retrying the step would only run out again.
                self.failed = out_of_memory
            else:
                self._stop(error, taken)
            return False
        for index in self.index_exports.values():
            index.absorb()
        for sink in self.sinks.values():
            sink.absorb(lower, upper)
        self.frontier = upper
        if lower <= self.as_of < upper:
            self.hydrated_ns = clock.perf_counter_ns() - self.created_ns
        if hooks is not None:
            self._log_messages(hooks)
            self._log_progress(hooks, lower, workers)
        return True

    def global_ids(self) -> list[str]:
        """Its exports and the objects it builds (mz_compute_dataflow_global_ids)."""
        return list(
            dict.fromkeys([*self.export_ids(), *(b.id for b in self.desc.objects_to_build)])
        )

    @property
    def name(self) -> str:
        return self.desc.debug_name or self.desc.id

    def _stop(self, error: Exception, taken: dict[str, tuple[pl.DataFrame, pl.DataFrame]]) -> None:
        """Fail the dataflow where it was, keeping the step's input (see ``failed``).

        Called while ``error`` is handled: its traceback is logged.
        """
        incident = uuid.uuid4().hex[:12]
        log.exception(
            "dataflow step failed; the dataflow stops", dataflow=self.desc.id, incident=incident
        )
        # Nothing is dropped: the step's input goes back to its queues, and the
        # frontier stays, so no read ever sees a result without these updates.
        for name, (ok, err) in taken.items():
            queue = self.queues[name]
            queue.ok.insert(0, ok)
            queue.err.insert(0, err)
            queue.records -= ok.height
        if isinstance(error, LoupeError) and not error.code.startswith("XX"):
            # A SQL error the step could not give as error rows (an exact sum past
            # numeric's range): the dataflow's reads fail with it.
            self.failed = error
            return
        self.failed = LoupeError(
            SqlState.INTERNAL_ERROR,
            f"dataflow {self.name} failed: internal error (incident {incident})",
            detail=f"The replica's log has the details under incident={incident}.",
        )

    def release(self, error: LoupeError) -> None:
        """Fail with ``error`` for good and let go of every byte of state (out of memory).

        Operators become empty husks keeping their ids, names and types (for
        logging and for the exports' descriptions); index histories, sink
        batches and queued input go. The instance detaches the dataflow
        from its sources (``ComputeInstance._release``).
        """
        self.failed = error
        husks = {id(o): _husk(o) for o in self.operators}
        self.operators = [husks[id(o)] for o in self.operators]
        self.inputs = {name: _husk_input(o) for name, o in self.inputs.items()}
        self.collections = {
            name: husks.get(id(o)) or _husk(o) for name, o in self.collections.items()
        }
        for index in self.index_exports.values():
            index.operator = husks.get(id(index.operator)) or _husk(index.operator)
            index.ok = Trace(index.operator.empty, index.ok.since, index.ok.keys)
            index.err = Trace(empty_errors(), index.err.since)
        for sink in self.sinks.values():
            sink.operator = husks.get(id(sink.operator)) or _husk(sink.operator)
            sink.batches = []
        self.queues = {name: _Queue(records=q.records) for name, q in self.queues.items()}
        self.channels = []
        self.changed_spines = set()  # they would hold on to the released operators
        log.warning("dataflow out of memory; its state is released", dataflow=self.desc.id)

    def log_released(self, hooks: LoggingHooks) -> None:
        """Its arrangements and queues hold nothing any more (mz_arrangement_sizes), as
        ``release`` will make so."""
        for operator in self.operators:
            for worker, spines in enumerate(operator.spines()):
                if spines:
                    hooks.arrangement_size(worker, operator.operator_id, 0, 0, 0)
        for index in self.index_exports.values():
            hooks.arrangement_size(TRACE_WORKER, index.operator_id, 0, 0, 0)
        for operator in self.inputs.values():
            hooks.batcher_size(QUEUE_WORKER, operator.operator_id, 0, 0, 0, 0)

    def footprint_bytes(self) -> int:
        """Bytes this dataflow's operators, index histories and queued input hold (``estimated_size``)."""
        spines = sum(
            spine.size
            for operator in self.operators
            for worker_spines in operator.spines()
            for spine in worker_spines
        )
        traces = sum(i.ok.size + i.err.size for i in self.index_exports.values())
        queued = sum(
            int(frame.estimated_size())
            for queue in self.queues.values()
            for frame in (*queue.ok, *queue.err)
        )
        return spines + traces + queued

    def _run_operators(
        self, lower: int, upper: int, hooks: LoggingHooks | None, hydrating: bool = False
    ) -> None:
        tracker = self.tracker if hydrating else None
        if hooks is None and tracker is None:
            for step_operator in self.operators:
                if not _idle(step_operator):
                    step_operator.run(lower, upper)
            return
        # The dataflow's scope operator runs its operators: as timely's region, it is
        # scheduled once per step, for what its operators took on each worker.
        scope = [0] * self.workers
        for position, step_operator in enumerate(self.operators):
            if not _idle(step_operator):
                if hooks is None:
                    step_operator.run(lower, upper)
                else:
                    started = clock.perf_counter_ns()
                    step_operator.run(lower, upper)
                    elapsed = clock.perf_counter_ns() - started
                    ns = self._log_run(hooks, step_operator, elapsed)
                    for worker, duration in enumerate(ns):
                        scope[worker] += duration
            if tracker is not None:
                # Its output frontier passed the as_of: the node is hydrated (seed 002).
                node = tracker.ran(position, step_operator)
                if node >= 0 and hooks is not None:
                    self._log_node(hooks, node, hydrated=True)
        if hooks is not None:
            for worker, duration in enumerate(scope):
                if duration > 0:
                    hooks.scheduled(worker, self.scope_id, duration)

    def _log_node(self, hooks: LoggingHooks, node: int, hydrated: bool) -> None:
        """LIR node ``node`` (in ``regions`` order) changed status on every worker."""
        lir_id = self.regions[node].lir_id
        for export_id in self.export_ids():
            for worker in range(self.workers):
                hooks.hydration(worker, export_id, lir_id, hydrated)

    def _unhydrate(self, hooks: LoggingHooks | None) -> None:
        """The hydrating step failed: the nodes it hydrated are not (the dataflow stops)."""
        assert self.tracker is not None
        for node in self.tracker.fail():
            if hooks is not None:
                self._log_node(hooks, node, hydrated=False)

    def _log_run(self, hooks: LoggingHooks, operator: Operator, elapsed: int) -> list[int]:
        """Log one run: each worker's measured time (returned), and the operator's arrangements.

        All workers run in one thread. The operator's meter measured each
        worker's own work (its body, its side of an exchange: ``Meter``). What
        the run spent outside those (the remainder: shared work such as
        stacking every worker's batch for a join's key evaluation, or a
        stateless operator's whole run) is attributed to the workers whose
        input it processed, in proportion to their rows this run (an
        operator without inputs: its output rows); with no rows at all, to
        worker 0, which drives the step. A worker with no time is not
        logged as scheduled.

        Arrangements change only in a worker's measured work: only the
        workers with some are logged again.
        """
        meter = operator.meter
        ns = meter.take_ns() if meter is not None else [0] * self.workers
        worked = [worker for worker, duration in enumerate(ns) if duration]
        remainder = elapsed - sum(ns)
        if remainder > 0:
            _attribute(ns, remainder, rows_processed(operator))
        for worker, duration in enumerate(ns):
            if duration > 0:
                hooks.scheduled(worker, operator.operator_id, duration)
        if worked and self.deferred:
            self.changed_spines.update((operator, worker) for worker in worked)
        elif worked:
            every = operator.spines()
            for worker in worked:
                if every and every[worker]:
                    _log_spines(hooks, worker, operator.operator_id, every[worker])
        return ns

    def _log_messages(self, hooks: LoggingHooks) -> None:
        """What crossed each channel this step: an exchange as its reader's meter counted it
        (from the sending worker to the owning one), a pipeline within each worker."""
        for channel in self.channels:
            reader = channel.reader
            if channel.exchanged and reader is not None and reader.meter is not None:
                counts = reader.meter.sent.pop(channel.port, None)
                for (source, target), (records, batches) in (counts or {}).items():
                    hooks.messages(source, channel.id, records, batches, to_worker=target)
                continue
            for worker, part in enumerate(channel.source.ok):
                if part.height:
                    hooks.messages(worker, channel.id, part.height, 1)

    def _log_progress(self, hooks: LoggingHooks, lower: int, workers: int) -> None:
        self.log_progress(hooks)
        if lower <= self.as_of < self.frontier:
            if self.tracker is None:  # no per-node tracking: every node at once
                self.log_hydration(hooks, workers, hydrated=True)
            self.log_hydration_time(hooks)

    def log_hydration_time(self, hooks: LoggingHooks) -> None:
        """How long the dataflow took to hydrate (``hydrated_ns``), for every export and worker."""
        for export_id in self.export_ids():
            for worker in range(self.workers):
                hooks.hydration_time(worker, export_id, self.hydrated_ns)

    def log_progress(self, hooks: LoggingHooks) -> None:
        """Where the dataflow is: its exports' and imports' frontiers, sizes, error counts."""
        workers = self.workers
        for export_id in self.export_ids():
            for worker in range(workers):
                hooks.frontier(worker, export_id, self.frontier)
                for import_id, time in self.import_frontiers.items():
                    hooks.import_frontier(worker, export_id, import_id, time)
        hooks.dataflow_frontier(self.index, self.frontier)
        if self.deferred:
            self.changed_traces = True
        else:
            self.log_traces(hooks)
        for index in self.index_exports.values():
            hooks.error_count(index.id, _error_count(index.err.batches), worker=TRACE_WORKER)
        for sink in self.sinks.values():
            hooks.error_count(sink.id, _error_count([sink.errors]), worker=TRACE_WORKER)

    def log_traces(self, hooks: LoggingHooks) -> None:
        """The indexes' histories (one per replica: on ``TRACE_WORKER``)."""
        for index in self.index_exports.values():
            trace = index.ok
            hooks.arrangement_size(
                TRACE_WORKER, index.operator_id, trace.records, len(trace.batches), trace.size
            )

    def flush_sizes(self, hooks: LoggingHooks) -> None:
        """Report the sizes that changed since the last flush (``deferred``), as they are now."""
        for operator, worker in self.changed_spines:
            every = operator.spines()
            if every and every[worker]:
                _log_spines(hooks, worker, operator.operator_id, every[worker])
        self.changed_spines = set()
        if self.changed_traces:
            self.changed_traces = False
            self.log_traces(hooks)
        self.log_queues(hooks)

    def log_queues(self, hooks: LoggingHooks) -> None:
        """The updates each import holds for later times (mz_arrangement_batcher_*), against the
        import's operator. The queue is the dataflow's, spread over the workers only when its
        times come: it lives on ``QUEUE_WORKER``."""
        if not self.queued:
            return
        self.queued = False
        for name, queue in self.queues.items():
            frames = [f for f in (*queue.ok, *queue.err) if f.height]
            size = sum(int(f.estimated_size()) for f in frames)
            records = sum(f.height for f in frames)
            operator_id = self.inputs[name].operator_id
            hooks.batcher_size(QUEUE_WORKER, operator_id, records, size, size, len(frames))

    def log_hydration(self, hooks: LoggingHooks, workers: int, hydrated: bool) -> None:
        """Every node's status: ``hydrated``, or as tracked per node (when tracked and True)."""
        tracked = self.tracker.snapshot.hydrated if self.tracker is not None else None
        for export_id in self.export_ids():
            for node, region in enumerate(self.regions):
                status = hydrated and (tracked is None or tracked[node])
                for worker in range(workers):
                    hooks.hydration(worker, export_id, region.lir_id, status)

    def node_hydrated(self, node: int) -> bool:
        """Whether LIR node ``node`` (in ``regions`` order) is hydrated (on every worker)."""
        if self.tracker is None:
            return self.hydrated
        return self.tracker.snapshot.hydrated[node]


class ComputeInstance:
    """All dataflows of one replica (see ``loupe.dataflow`` for the contract)."""

    def __init__(
        self,
        workers: int = 1,
        logging: LoggingHooks | None = None,
        memory_limit_bytes: int = 0,
        hydration_logging: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        # Per LIR node hydration and progress (``progress``); False: dataflow-level only.
        self.hydration_logging = hydration_logging
        # The replica's budget (its SIZE); 0: none (``loupe.dataflow.memory``).
        self.memory = MemoryBudget(memory_limit_bytes, self._held_bytes)
        # What the budget counted at the end of the last step: peeks charge against it
        # (measuring again would cost a point lookup more than the lookup).
        self._held_after_step = 0
        # Checked once per event site: None when logging is off.
        self.hooks: LoggingHooks | None = None
        # Whether the hooks flush each interval (``LoggingHooks.defer``): sizes are then
        # measured once per interval, not at every change.
        self._deferred = False
        self.dataflows: dict[str, Dataflow] = {}
        self.sources: dict[str, _Source] = {}
        self.exports: dict[str, Dataflow] = {}
        self.indexes: dict[str, _IndexExport] = {}
        # One sequence for operators and channels (as timely's identifiers).
        self._next_operator = 0
        self._next_dataflow = 0
        self.set_logging(logging)

    def set_logging(self, logging: LoggingHooks | None) -> None:
        """Log to ``logging`` from now on (None or disabled hooks: no logging work at all).

        New hooks are told about every dataflow that exists, as if it had just been
        created, and where it is now (frontiers, hydration, sizes), so turning logging on
        at runtime (``ALTER CLUSTER … SET (INTROSPECTION INTERVAL …)``) misses nothing.
        """
        self.hooks = logging if logging is not None and logging.enabled else None
        self._deferred = self.hooks is not None and self.hooks.defer(self._flush_sizes)
        for dataflow in self.dataflows.values():
            dataflow.deferred = self._deferred
            for operator in dataflow.operators:
                operator.meter = Meter(self.workers) if self.hooks is not None else None
        if self.hooks is None:
            return
        for dataflow in self.dataflows.values():
            self._log_created(dataflow)
            if dataflow.failed is not None:
                dataflow.log_released(self.hooks)
                continue
            if dataflow.hydrated:
                dataflow.log_hydration(self.hooks, self.workers, hydrated=True)
                dataflow.log_hydration_time(self.hooks)
            dataflow.log_progress(self.hooks)
            dataflow.changed_spines.update(
                (operator, worker)
                for operator in dataflow.operators
                for worker, spines in enumerate(operator.spines())
                if spines
            )
            dataflow.changed_traces = True
            dataflow.queued = True
            if not self._deferred:
                dataflow.flush_sizes(self.hooks)

    # -- creating and dropping ----------------------------------------------------------

    def create_dataflow(self, desc: DataflowDescription) -> None:
        """Render ``desc`` (idempotent by dataflow id: a replayed command changes nothing)."""
        if desc.id in self.dataflows:
            return
        for index in desc.index_imports:
            if index.index_id not in self.indexes:
                raise LoupeError(
                    SqlState.INTERNAL_ERROR,
                    f"dataflow {desc.id} imports index {index.index_id}, which no dataflow exports",
                )
        desc = self._readable_as_of(desc)
        scope_id = self._new_operator_id()
        renderer = Renderer(desc, self.workers, self._new_operator_id)
        renderer.render()
        dataflow = Dataflow(desc, self._next_dataflow, renderer, scope_id, self.hydration_logging)
        self._next_dataflow += 1
        if self.hooks is not None:
            dataflow.deferred = self._deferred
            for operator in dataflow.operators:
                operator.meter = Meter(self.workers)
        self._export(dataflow)
        dataflow.channels = self._channels(dataflow)
        self._attach_imports(dataflow)
        self.dataflows[desc.id] = dataflow
        if self.hooks is not None:
            self._log_created(dataflow)
        failed = [self.exports[i.index_id].failed for i in desc.index_imports]
        inherited = next((error for error in failed if error is not None), None)
        if inherited is not None:
            self._release(dataflow, inherited)  # it would wait forever on the failed index

    def _readable_as_of(self, desc: DataflowDescription) -> DataflowDescription:
        """``desc`` starting no earlier than what the instance still distinguishes of its sources.

        A source fed for earlier dataflows is kept only as of its log's
        since: a dataflow asking for an older as_of starts at that since
        instead, so a read before it is refused as a since violation
        rather than answered with wrongly advanced data.
        """
        held = max(
            (
                self.sources[s.id].log.since
                for s in desc.source_imports
                if s.id in self.sources and self.sources[s.id].log.tables
            ),
            default=0,
        )
        return dataclasses.replace(desc, as_of=held) if held > desc.as_of else desc

    def _channels(self, dataflow: Dataflow) -> list[_Channel]:
        """Every edge of the dataflow's operator graph, exports included."""
        channels = [
            _Channel(
                self._new_operator_id(),
                source,
                operator.operator_id,
                port,
                _exchanges(operator),
                operator,
            )
            for operator in dataflow.operators
            for port, source in enumerate(operator.inputs)
        ]
        exports: list[_IndexExport | _SinkExport] = [
            *dataflow.index_exports.values(),
            *dataflow.sinks.values(),
        ]
        channels += [
            _Channel(self._new_operator_id(), e.operator, e.operator_id, 0, False) for e in exports
        ]
        return channels

    def _new_operator_id(self) -> int:
        self._next_operator += 1
        return self._next_operator - 1

    def _export(self, dataflow: Dataflow) -> None:
        desc = dataflow.desc
        columns = {b.id: b.columns for b in desc.objects_to_build}
        columns |= {i.on_id: i.columns for i in desc.index_imports}
        columns |= {s.id: s.columns for s in desc.source_imports}
        for index in desc.index_exports:
            operator = self._collection(dataflow, index.on_id)
            export = _IndexExport(
                index.index_id, operator, desc.as_of, self._new_operator_id(), index.key
            )
            dataflow.index_exports[index.index_id] = export
            self.indexes[index.index_id] = export
            self.exports[index.index_id] = dataflow
        for sink in desc.sink_exports:
            sink_columns = sink.columns if isinstance(sink, PersistSink) else columns[sink.from_id]
            operator = self._collection(dataflow, sink.from_id)
            dataflow.sinks[sink.sink_id] = _SinkExport(
                sink, operator, sink_columns, desc.as_of, self._new_operator_id()
            )
            self.exports[sink.sink_id] = dataflow
        for build in desc.objects_to_build:
            self.exports.setdefault(build.id, dataflow)

    @staticmethod
    def _collection(dataflow: Dataflow, collection_id: str) -> Operator:
        if collection_id not in dataflow.collections:
            raise LoupeError(
                SqlState.INTERNAL_ERROR,
                f"dataflow {dataflow.desc.id} exports {collection_id}, which it does not have",
            )
        return dataflow.collections[collection_id]

    def _attach_imports(self, dataflow: Dataflow) -> None:
        """Start feeding the new dataflow: what its sources and imported indexes hold so far."""
        for source in dataflow.desc.source_imports:
            state = self.sources.get(source.id)
            if state is None:
                state = self.sources[source.id] = _Source(source.id, source.columns)
                # The feed starts at its first readers' as_of (a snapshot there): nothing
                # before it can be told apart, whatever history is kept after it.
                state.log.since = dataflow.as_of
            elif not state.log.tables and state.upper == 0:
                state.log.since = min(state.log.since, dataflow.as_of)
            state.readers.append(dataflow)
            if state.expected and state.upper <= dataflow.as_of:
                dataflow.expect_snapshot(source.id, state.expected)  # still being read
            logged = state.log.updates()
            if logged is not None:
                dataflow.enqueue(source.id, state.read(logged, [dataflow]), empty_errors())
        for index in dataflow.desc.index_imports:
            export = self.indexes[index.index_id]
            export.readers.append((dataflow, index.on_id))
            dataflow.enqueue(index.on_id, export.ok.updates(), export.err.updates())

    def drop(self, collection_id: str) -> None:
        """Drop an export; the dataflow goes with its last export."""
        dataflow = self.exports.get(collection_id)
        if dataflow is None or collection_id not in dataflow.export_ids():
            return
        del self.exports[collection_id]
        removed = dataflow.index_exports.pop(collection_id, None) or dataflow.sinks.pop(
            collection_id, None
        )
        self.indexes.pop(collection_id, None)
        if self.hooks is not None and removed is not None:
            for worker in range(self.workers):
                self.hooks.operator_dropped(worker, removed.operator_id)
                self.hooks.export_dropped(worker, collection_id)
        if dataflow.export_ids():
            return
        self._drop_dataflow(dataflow)

    def _drop_dataflow(self, dataflow: Dataflow) -> None:
        self.dataflows.pop(dataflow.desc.id, None)
        for key in [k for k, d in self.exports.items() if d is dataflow]:
            del self.exports[key]
        self._detach(dataflow)
        hooks = self.hooks
        if hooks is not None:
            for operator_id in [*self._operator_ids(dataflow), dataflow.scope_id]:
                for worker in range(self.workers):
                    hooks.operator_dropped(worker, operator_id)
            hooks.dataflow_dropped(dataflow.index, dataflow.desc.id)
            self._log_sharing(dataflow)

    def _flush_sizes(self) -> None:
        """What the running dataflows hold now (called by the hooks, ``LoggingHooks.defer``)."""
        assert self.hooks is not None
        for dataflow in self.dataflows.values():
            if dataflow.failed is None:  # a released one reported itself empty
                dataflow.flush_sizes(self.hooks)

    def _log_sharing(self, reader: Dataflow) -> None:
        """The indexes ``reader`` imports are shared by one more or one less dataflow."""
        assert self.hooks is not None
        for index in reader.desc.index_imports:
            export = self.indexes.get(index.index_id)
            if export is not None:
                shared = 1 + len(export.readers)
                self.hooks.arrangement_sharing(TRACE_WORKER, export.operator_id, shared)

    def _detach(self, dataflow: Dataflow) -> None:
        """Stop feeding ``dataflow``: a source nobody reads any more goes, with its log."""
        for source_id in [s.id for s in dataflow.desc.source_imports]:
            state = self.sources.get(source_id)
            if state is None:
                continue  # detached already (released)
            state.readers = [r for r in state.readers if r is not dataflow]
            if not state.readers:
                del self.sources[source_id]
        for export in self.indexes.values():
            export.readers = [(d, n) for d, n in export.readers if d is not dataflow]

    def allow_compaction(self, collection_id: str, since: int) -> None:
        """Peeks of ``collection_id`` will not ask for times before ``since``."""
        export = self.indexes.get(collection_id)
        if export is not None:
            export.ok.compact(since)
            export.err.compact(since)

    # -- feeding and stepping ---------------------------------------------------------

    def source_ids(self) -> dict[str, int]:
        """Storage collections to feed, each from the least as_of of its readers."""
        return {sid: min(d.as_of for d in s.readers) for sid, s in self.sources.items()}

    def expect_snapshot(self, source_id: str, rows: int) -> None:
        """The snapshot of ``source_id`` about to be pushed holds at most ``rows`` updates.

        Progress only: its readers' Get nodes are estimated from it while the
        snapshot is pushed piece by piece (each piece with the as_of as its
        upper, so that no step runs before the last one passes it).
        """
        state = self.sources.get(source_id)
        if state is None:
            return
        state.expected = rows
        for dataflow in state.readers:
            if state.upper <= dataflow.as_of:
                dataflow.expect_snapshot(source_id, rows)

    def push(self, source_id: str, updates: pa.Table, upper: int) -> None:
        """Updates of a storage collection at times before ``upper``, which becomes its frontier."""
        state = self.sources.get(source_id)
        if state is None:
            return
        # A piece of the snapshot, more to come (the upper not past the first reader's as_of):
        # the log is consolidated once the whole snapshot is in, not piece by piece.
        piece = upper <= state.log.since
        if updates.num_rows == 0:  # a frontier moving on: nothing to convert or queue
            state.upper = max(state.upper, upper)
            if not piece:
                state.log.settle()
            return
        state.log.append(updates, settle=not piece)
        frame = state.read(updates, state.readers)
        for dataflow in state.readers:
            dataflow.enqueue(source_id, frame, empty_errors())
        state.upper = max(state.upper, upper)

    def step(self) -> bool:
        """Advance every dataflow as far as its inputs allow; True if any advanced."""
        changed = False
        budgeted = self.memory.enabled
        # Measured once, then kept up to date by each dataflow's growth.
        held = self._held_bytes() if budgeted else 0
        for dataflow in list(self.dataflows.values()):
            if dataflow.failed is not None:
                continue
            before = dataflow.footprint_bytes() if budgeted else 0
            with self.memory.charging(f"dataflow {dataflow.name}", held):
                stepped = dataflow.step(self._input_frontier(dataflow), self.hooks)
            if dataflow.failed is not None and dataflow.failed.code == SqlState.OUT_OF_MEMORY:
                self._release(dataflow, dataflow.failed)
                held = self._held_bytes()
                continue
            if stepped:
                changed = True
                self._forward(dataflow)
            if budgeted:
                held += dataflow.footprint_bytes() - before
                if held > self.memory.limit_bytes:
                    changed |= self._enforce_budget()
                    held = self._held_bytes()
        self._held_after_step = held
        if self.hooks is not None and not self._deferred:
            for dataflow in self.dataflows.values():
                dataflow.log_queues(self.hooks)
        for state in self.sources.values():
            # Keep the latest complete time distinct: dataflows created later read as of it.
            # History is kept for FEED_HISTORY_MS behind the readers, so a dataflow created
            # for a read at a recent timestamp can still start there while writes go on.
            newest = max(min(d.frontier for d in state.readers), 1) - 1
            state.log.since = max(state.log.since, newest - FEED_HISTORY_MS)
        return changed

    def _release(self, dataflow: Dataflow, error: LoupeError) -> None:
        """Stop ``dataflow`` for good with ``error``, its state released, and its readers too.

        A dataflow reading one of its indexes would wait forever for a
        frontier that no longer moves: it fails with the same error.
        """
        readers = [
            reader
            for export in dataflow.index_exports.values()
            for reader, _ in export.readers
            if reader.failed is None
        ]
        if self.hooks is not None:
            dataflow.log_released(self.hooks)
        dataflow.release(error)
        self._detach(dataflow)
        for reader in readers:
            self._release(reader, error)
        memory.return_freed()

    def _enforce_budget(self) -> bool:
        """Release the largest dataflows while the instance holds more than its budget.

        Like an OOM killer, but per dataflow and before the OS has to: the
        one holding the most goes first; the others keep running. True if
        any was released.
        """
        released = False
        while self.memory.enabled:
            held = self._held_bytes()
            if held <= self.memory.limit_bytes:
                break
            running = [d for d in self.dataflows.values() if d.failed is None]
            if not running:
                break
            largest = max(running, key=self._dataflow_bytes)
            needed = self._dataflow_bytes(largest)
            if needed == 0:
                break  # what is held is no running dataflow's to give back
            error = memory.out_of_memory(
                f"dataflow {largest.name}", needed, held - needed, self.memory.limit_bytes
            )
            self._release(largest, error)
            released = True
        return released

    def _dataflow_bytes(self, dataflow: Dataflow) -> int:
        """What ``dataflow`` holds, counting the logs of the sources it reads."""
        logs = sum(
            self.sources[source.id].log.nbytes
            for source in dataflow.desc.source_imports
            if source.id in self.sources
        )
        return dataflow.footprint_bytes() + logs

    def _held_bytes(self) -> int:
        """What the budget counts: every dataflow's state and queued input, and the source logs."""
        dataflows = sum(d.footprint_bytes() for d in self.dataflows.values())
        return dataflows + sum(s.log.nbytes for s in self.sources.values())

    def _input_frontier(self, dataflow: Dataflow) -> int:
        frontiers = {s.id: self.sources[s.id].upper for s in dataflow.desc.source_imports}
        for index in dataflow.desc.index_imports:
            exporter = self.exports.get(index.index_id)
            # An exporter dropped under its reader leaves it stuck, not falsely complete.
            frontiers[index.on_id] = exporter.frontier if exporter is not None else 0
        dataflow.import_frontiers = frontiers
        return min(frontiers.values(), default=EMPTY)

    def _forward(self, dataflow: Dataflow) -> None:
        """Hand an exporter's new updates to the dataflows importing its indexes."""
        for export in dataflow.index_exports.values():
            ok = concat(export.operator.ok, export.operator.empty)
            for reader, name in export.readers:
                reader.enqueue(name, ok, export.operator.err)

    # -- reading ------------------------------------------------------------------------

    def write_frontier(self, collection_id: str) -> int:
        """Every time before this is complete for the export or built object."""
        return self._dataflow_of(collection_id).frontier

    def _dataflow_of(self, collection_id: str) -> Dataflow:
        dataflow = self.exports.get(collection_id)
        if dataflow is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown collection {collection_id}")
        return dataflow

    def peek(
        self,
        target_id: str,
        timestamp: int,
        mfp: lir.MapFilterProject | None = None,
        finishing: Finishing | None = None,
    ) -> PeekResult:
        """The index ``target_id`` at ``timestamp``, through ``mfp`` and ``finishing``."""
        export = self.indexes.get(target_id)
        if export is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"no index {target_id} on this replica")
        failed = self.exports[target_id].failed
        if failed is not None:
            raise failed
        frontier = self.exports[target_id].frontier
        if timestamp >= frontier:
            raise NotReady(target_id, timestamp, frontier)
        if timestamp < export.ok.since:
            raise LoupeError(
                SqlState.INTERNAL_ERROR,
                f"Timestamp ({timestamp}) is not valid for all inputs: {target_id} since {export.ok.since}",
                hint=f"Read AS OF {export.ok.since} or later.",
            )
        if export.err.records:
            error = _first_error(export.err.at(timestamp))
            if error is not None:
                raise error
        probe = _point(mfp, export.key, export.operator.empty) if mfp is not None else None
        rows = (
            export.ok.contents_at(timestamp)
            if probe is None
            else export.ok.lookup_at(probe, timestamp)
        )
        result_types = export.operator.types
        if mfp is not None and not mfp.is_identity:
            rows, errors = expr.apply_mfp(rows, mfp, result_types)
            error = _first_error(errors)
            if error is not None:
                raise error
            result_types = expr.mfp_output_types(mfp, result_types)
        finishing = finishing or Finishing()
        if self.memory.enabled:
            self._reserve_peek(self.exports[target_id].name, rows, finishing)
        return _finish(expand(rows), result_types, finishing)

    def _reserve_peek(self, name: str, rows: pl.DataFrame, finishing: Finishing) -> None:
        """53200 if the peek's result would not fit: its rows expanded, then as Python values."""
        diffs = rows[DIFF]  # a Series' filter, not a frame's query (~100 us on a few rows)
        count = int(diffs.filter(diffs > 0).sum() or 0)
        returned = (
            count if finishing.limit is None else min(count, finishing.offset + finishing.limit)
        )
        columns = len(finishing.project) if finishing.project else rows.width - 2
        needed = (
            int(count * memory.row_bytes(rows)) + returned * columns * memory.PYTHON_VALUE_BYTES
        )
        held = self._held_after_step
        with self.memory.charging(f"the result of reading {name}", held) as reservation:
            reservation.reserve(needed)

    def take_sink_batches(self) -> list[SinkBatch]:
        """Batches every sink completed since the last call, in order per sink."""
        batches = []
        for dataflow in self.dataflows.values():
            for sink in dataflow.sinks.values():
                batches.extend(sink.batches)
                sink.batches = []
        return batches

    def hydration(self) -> list[HydrationStatus]:
        """Per export, LIR node and worker: has the node's output passed the as_of?"""
        return [
            HydrationStatus(export_id, region.lir_id, worker, dataflow.node_hydrated(node))
            for dataflow in list(self.dataflows.values())
            for export_id in dataflow.export_ids()
            for node, region in enumerate(dataflow.regions)
            for worker in range(self.workers)
        ]

    def progress(self) -> list[DataflowProgress]:
        """Per dataflow: hydrated or not, its LIR nodes' status and progress per worker
        (``NodeProgress``), updates read from its imports.

        Safe to call from another thread while a step runs: it reads each dataflow's
        tracker's ``snapshot``, which the engine thread replaces whole at every change.
        """
        return [self._progress(dataflow) for dataflow in list(self.dataflows.values())]

    def _progress(self, dataflow: Dataflow) -> DataflowProgress:
        hydrated = dataflow.hydrated
        regions = dataflow.regions
        tracker = dataflow.tracker
        nodes: tuple[NodeProgress, ...] = ()
        nodes_hydrated = len(regions) if hydrated else 0
        done = estimated = 0
        if tracker is not None:
            snapshot = tracker.snapshot
            summary = dataflow.progress_summary
            # The replica asks every report interval; a snapshot that did not change (every
            # hydrated dataflow's) is summarised once, and the same tuple returned again.
            if summary is None or summary[0] is not snapshot:
                nodes = tuple(
                    NodeProgress(
                        region.lir_id, worker, status, node_done[worker], node_estimated[worker]
                    )
                    for region, status, node_done, node_estimated in zip(
                        regions, snapshot.hydrated, snapshot.done, snapshot.estimated, strict=True
                    )
                    for worker in range(dataflow.workers)
                )
                summary = (
                    snapshot,
                    nodes,
                    sum(snapshot.hydrated),
                    sum(sum(d) for d in snapshot.done),
                    sum(sum(e) for e in snapshot.estimated),
                )
                dataflow.progress_summary = summary
            _, nodes, nodes_hydrated, done, estimated = summary
        return DataflowProgress(
            dataflow.desc.id,
            hydrated,
            len(regions),
            nodes_hydrated,
            sum(q.records for q in list(dataflow.queues.values())),
            export_ids=tuple(dataflow.export_ids()),
            nodes=nodes,
            hydration_time_ns=dataflow.hydrated_ns,
            records_done=done,
            records_estimated=estimated,
            installed_ns=dataflow.created_ns,
            started_ns=dataflow.started_ns,
        )

    def footprint(self) -> Footprint:
        """What the instance holds: arranged records and bytes (operators, indexes), source logs."""
        spines = [
            spine
            for dataflow in self.dataflows.values()
            for operator in dataflow.operators
            for worker_spines in operator.spines()
            for spine in worker_spines
        ]
        traces = [
            trace
            for dataflow in self.dataflows.values()
            for index in dataflow.index_exports.values()
            for trace in (index.ok, index.err)
        ]
        logs = [source.log for source in self.sources.values()]
        return Footprint(
            sum(s.records for s in spines) + sum(t.records for t in traces),
            sum(s.size for s in spines) + sum(t.size for t in traces),
            sum(log.rows for log in logs),
            sum(log.nbytes for log in logs),
        )

    def failed(self) -> dict[str, LoupeError]:
        """The exports of dataflows that stopped for good (out of memory, a failed step).

        Reads of them answer this error at any time: their frontier will not move again.
        """
        return {
            export_id: dataflow.failed
            for dataflow in self.dataflows.values()
            if dataflow.failed is not None
            for export_id in dataflow.export_ids()
        }

    def errors(self) -> dict[str, LoupeError]:
        """The error each export currently holds (exports without errors are absent)."""
        current = self.failed()
        for dataflow in self.dataflows.values():
            if dataflow.failed is not None:
                continue
            latest = max(dataflow.frontier, 1) - 1
            for index_id, index in dataflow.index_exports.items():
                error = _first_error(index.err.at(max(latest, index.err.since)))
                if error is not None:
                    current[index_id] = error
            for sink_id, sink in dataflow.sinks.items():
                error = _first_error(sink.errors)
                if error is not None:
                    current[sink_id] = error
        return current

    # -- logging ------------------------------------------------------------------------

    def _operator_ids(self, dataflow: Dataflow) -> list[int]:
        return list(self._operator_names(dataflow))

    @staticmethod
    def _operator_names(dataflow: Dataflow) -> dict[int, str]:
        """Every operator of the dataflow (exports included) by id."""
        names = {o.operator_id: o.name for o in dataflow.operators}
        names |= dict.fromkeys(dataflow.hydration_ids, "HydrationLog")
        names |= {e.operator_id: f"Index({e.id})" for e in dataflow.index_exports.values()}
        names |= {e.operator_id: f"Sink({e.id})" for e in dataflow.sinks.values()}
        return names

    def _log_created(self, dataflow: Dataflow) -> None:
        """The dataflow as timely would log it: a scope operator ``(index,)`` named after the
        dataflow, its operators ``(index, k)`` with k from 1 in id order, channels between
        those k; then its exports, objects, LIR mapping and what it shares."""
        hooks = self.hooks
        assert hooks is not None
        workers = range(self.workers)
        hooks.dataflow_created(dataflow.index, dataflow.desc.id, dataflow.desc.debug_name)
        scope = (dataflow.index,)
        for worker in workers:
            hooks.operator_created(worker, dataflow.scope_id, scope, dataflow.name)
        names = self._operator_names(dataflow)
        dataflow.local = {op: k for k, op in enumerate(sorted(names), start=1)}
        for operator_id, k in dataflow.local.items():
            for worker in workers:
                hooks.operator_created(worker, operator_id, (*scope, k), names[operator_id])
        for c in dataflow.channels:
            kind = "exchange" if c.exchanged else "pipeline"
            source, target = dataflow.local[c.source.operator_id], dataflow.local[c.target]
            for worker in workers:
                hooks.channel_created(worker, c.id, scope, source, 0, target, c.port, kind)
        hooks.dataflow_global_ids(dataflow.index, dataflow.global_ids())
        for r in dataflow.regions:
            hooks.lir_mapping(
                r.object_id, r.lir_id, r.operator, r.parent_lir_id, r.nesting, r.start, r.end
            )
        for export_id in dataflow.export_ids():
            for worker in workers:
                hooks.export_created(worker, export_id, dataflow.index)
                hooks.hydration_time(worker, export_id, None)
        for operator in dataflow.operators:
            for worker, spines in enumerate(operator.spines()):
                if spines:
                    hooks.arrangement_sharing(worker, operator.operator_id, 1)
        for index in dataflow.index_exports.values():
            hooks.arrangement_sharing(TRACE_WORKER, index.operator_id, 1)
        self._log_sharing(dataflow)
        dataflow.log_hydration(hooks, self.workers, hydrated=False)


@dataclass(frozen=True)
class Footprint:
    """Memory the instance holds (``estimated_size`` of the frames, Arrow buffer bytes of logs)."""

    arranged_records: int
    arranged_bytes: int
    logged_records: int
    logged_bytes: int


@dataclass(frozen=True)
class NodeProgress:
    """One LIR node (``EXPLAIN PHYSICAL PLAN WITH (node_ids)``) of a dataflow on one worker.

    ``records_done``: the updates the node's operator consumed (its input rows on
    ``worker``) while hydrating; monotonic, it stops counting once hydrated.
    ``records_estimated``: the updates it will consume to hydrate, from the sizes of
    the inputs' snapshots, refined as its inputs hydrate (exact once they have);
    never below ``records_done``, equal to it once hydrated.
    """

    lir_id: int
    worker: int
    hydrated: bool
    records_done: int
    records_estimated: int


@dataclass(frozen=True)
class DataflowProgress:
    """What the ``Hydration`` response reports for one dataflow.

    ``nodes``: every LIR node on every worker (empty when the instance runs with
    ``hydration_logging=False``); ``records_done``/``records_estimated`` their sums.
    ``hydration_time_ns``: from installation until hydrated (None until then).
    ``installed_ns``/``started_ns``: ``time.perf_counter_ns()`` when the dataflow was
    installed and when it started hydrating (None: not yet): its inputs' snapshots
    began to arrive (``expect_snapshot``, a first push) or its hydrating step started.
    """

    dataflow_id: str
    hydrated: bool
    nodes_total: int
    nodes_hydrated: int
    records_read: int
    export_ids: tuple[str, ...] = ()
    nodes: tuple[NodeProgress, ...] = ()
    hydration_time_ns: int | None = None
    records_done: int = 0
    records_estimated: int = 0
    installed_ns: int = 0
    started_ns: int | None = None


def _point(
    mfp: lir.MapFilterProject, key: Sequence[int], empty: pl.DataFrame
) -> pl.DataFrame | None:
    """The index key values ``mfp`` pins with ``key column = literal`` predicates, if all are.

    A peek like ``WHERE id = 7`` on an index on ``id`` then reads only the
    matching rows instead of the whole index (the predicates still run).
    """
    if not key:
        return None
    pinned: dict[int, object] = {}
    for predicate in mfp.predicates:
        if isinstance(predicate, Call) and predicate.func == "eq" and len(predicate.args) == 2:
            left, right = predicate.args
            if isinstance(right, Column):
                left, right = right, left
            if isinstance(left, Column) and isinstance(right, Literal) and right.value is not None:
                pinned.setdefault(left.index, right.value)
    if not set(key) <= set(pinned):
        return None
    columns = {}
    for i in key:
        name = f"c{i}"
        value = pl.Series(name, structs([pinned[i]])).cast(empty.schema[name], strict=False)
        if value.null_count():
            return None  # a literal the column cannot hold: let the predicates decide
        columns[name] = value
    return pl.DataFrame(columns)


def _finish(rows: pl.DataFrame, result_types: Sequence[str], finishing: Finishing) -> PeekResult:
    """ORDER BY, OFFSET, LIMIT, then the projection, as a peek's RowSetFinishing says."""
    if finishing.order:
        by, descending, nulls_last = intervals.order_by(
            rows.schema, [(f"c{k.column}", k.desc, k.nulls_last) for k in finishing.order]
        )
        rows = rows.sort(by, descending=descending, nulls_last=nulls_last)
    if finishing.offset or finishing.limit is not None:
        rows = rows.slice(finishing.offset, finishing.limit)
    result_types = tuple(result_types)
    if finishing.project:
        rows = rows.select(
            [pl.col(f"c{i}").alias(f"c{k}") for k, i in enumerate(finishing.project)]
        )
        result_types = tuple(result_types[i] for i in finishing.project)
    return PeekResult(rows, result_types)
