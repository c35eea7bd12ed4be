"""The compute engine: incrementally maintained dataflows rendered from LIR.

Pure library (no NATS, no persist I/O): the replica feeds it storage updates
and ships what it produces. Not thread-safe: serialise calls. The contract
every caller codes against:

``ComputeInstance(workers: int = 1, logging: LoggingHooks | None = None, memory_limit_bytes: int = 0)``
  All dataflows of one replica. ``workers`` partitions every collection by
  key hash (exchanged before stateful operators). ``memory_limit_bytes`` is
  the replica's budget (its SIZE; 0: none, see ``loupe.dataflow.memory``): a
  dataflow that would hold more fails for good with 53200 ``out of memory``
  (its state released, its exports' reads and the dataflows importing its
  indexes failing with it); a peek whose result would not fit raises 53200.

``create_dataflow(desc: loupe.plan.dataflow.DataflowDescription) -> None``
  Render the LIR of ``desc.objects_to_build`` on every worker. Inputs are
  read from ``desc.as_of`` on. Idempotent by ``desc.id`` (a replayed
  command changes nothing). Raises ``LoupeError`` (SqlState) on plans it
  cannot render (0A000: a table function other than generate_series) and on
  index imports no dataflow exports.
  Index imports read the exporting dataflow's arrangement (its contents at
  the as_of, then its changes), never storage.

``source_ids() -> dict[str, int]``
  Storage collections some dataflow reads, each with the time the instance
  needs it from (the least ``as_of`` of its readers): the replica feeds them.

``push(source_id: str, updates: pyarrow.Table, upper: int) -> None``
  Updates of a storage collection in persist's format (its data columns
  named as in the shard, ``mz_timestamp`` uint64, ``mz_diff`` int64), all at
  times in ``[previous upper, upper)``, then advance its frontier to
  ``upper``. The first push of a source may be its snapshot at the as_of
  (times <= as_of are read as the as_of). Pushes of sources nobody reads are
  ignored; only the columns some reader uses are converted. A dataflow
  created later over a source already fed reads what was pushed so far
  (kept as pushed, consolidated up to the readers' latest complete time):
  the replica keeps one feed per source and never re-reads a snapshot.

``step() -> bool``
  Do all work the frontiers allow; True if anything changed.

``write_frontier(collection_id: str) -> int``
  Every time before it is complete for that export (index or sink) or
  built object; starts at the as_of. ``EMPTY`` (2**64 - 1) when the
  dataflow reads nothing that can change (constants only).

``peek(target_id, timestamp, mfp=None, finishing=None) -> PeekResult``
  Read index export ``target_id`` at ``timestamp``: consolidated rows,
  through the LIR ``MapFilterProject`` then the ``Finishing`` (order, limit,
  offset, project; ``Finishing(*loupe.plan.codec.finishing_from_proto(m))``).
  ``PeekResult.rows()`` are tuples, one per occurrence; ``.types`` their
  PostgreSQL types. Raises ``NotReady`` when ``timestamp >=
  write_frontier`` (the caller waits and retries), ``LoupeError`` (XX000)
  when the time is before the index's since, or when the collection holds a
  dataflow error at that time (its code and message: 22012 division by
  zero, 22P02 bad cast, ...; errors never crash the engine, they are data
  in an error collection next to the ok one).

``allow_compaction(collection_id, since) / drop(collection_id)``
  Compaction of an index's history up to ``since``; dropping the last
  export of a dataflow drops the dataflow.

``take_sink_batches() -> list[SinkBatch]``
  Completed batches of every sink (``sink_id, lower, upper, updates,
  error``), one per step of its dataflow, contiguous from the as_of (the
  first holds the snapshot, unless a subscribe has ``snapshot=False``),
  empty ones included so uppers advance; the updates consolidated, in
  persist's format with the sink's column names (a subscribe: the built
  object's columns); ``error`` is the sinked collection's current error, if
  any. Persist sinks are written by the replica with compare-and-append
  ``lower -> upper``, subscribes are sent as ``SubscribeBatch``.

``hydration() -> list[HydrationStatus]``
  Per export, LIR node and worker: hydrated once the node's output frontier
  passed the as_of (seed 002). ``progress() -> list[DataflowProgress]``:
  per dataflow, for the ``Hydration`` response: ``dataflow_id, hydrated,
  nodes_total, nodes_hydrated, records_read, export_ids, nodes`` (one
  ``NodeProgress(lir_id, worker, hydrated, records_done, records_estimated)``
  per LIR node and worker), ``hydration_time_ns`` (None until hydrated),
  ``records_done``/``records_estimated`` (their sums), ``installed_ns`` and
  ``started_ns`` (``perf_counter_ns``; None: not started; started: its source
  snapshots began to arrive, or its hydrating step began). Safe to call from
  another thread while a step runs. ``ComputeInstance(hydration_logging=False)``
  tracks no nodes (``nodes`` empty: dataflow-level only). ``errors() -> dict[str, LoupeError]``: the error each export holds
  now (exports without errors are absent); ``failed()`` those of them whose
dataflow stopped for good (a read answers it at any time). ``footprint()``: records and
  bytes arranged (operator state, index histories) and logged (sources).

Logging (DESIGN §6): every dataflow is a scope operator and every operator
has an id, an address and a name; the engine reports their lifecycle,
channels and the messages each worker sent each worker, each worker's
measured scheduling, arrangement sizes and sharing, queued input, exports,
frontiers, errors, hydration and the LIR mapping through ``LoggingHooks``
(``loupe.introspection.collector.LogCollector`` turns them into the log
variants). With logging off (no hooks) nothing is measured or called.
"""

from loupe.dataflow.hooks import LoggingHooks
from loupe.dataflow.instance import (
    EMPTY,
    ComputeInstance,
    DataflowProgress,
    Footprint,
    NodeProgress,
)
from loupe.dataflow.results import Finishing, HydrationStatus, NotReady, PeekResult, SinkBatch

__all__ = [
    "EMPTY",
    "ComputeInstance",
    "DataflowProgress",
    "Finishing",
    "Footprint",
    "HydrationStatus",
    "LoggingHooks",
    "NodeProgress",
    "NotReady",
    "PeekResult",
    "SinkBatch",
]
