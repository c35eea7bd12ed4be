"""``LogCollector``: the engine's logging hooks gathered into the log variants' changes.

The engine calls the hooks (``loupe.dataflow.hooks``) on its own thread; the
collector adds each event to the pending changes of the variants it feeds
(``loupe.introspection.logs``): a ``state`` row inserted or retracted, a
``count`` row's multiplicity increased. ``tick(time)`` closes an interval: it
returns the interval's changes, consolidated, as persist-format tables (the
log's columns, ``mz_timestamp`` = ``time``, ``mz_diff``) and folds them into
the current state, which ``snapshot`` returns whole. Call every method from
the thread that runs the engine.
"""

from __future__ import annotations

import time as clock
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from loupe.dataflow.hooks import LoggingHooks
from loupe.dataflow.types import PERSIST_DIFF, PERSIST_TIME
from loupe.introspection.logs import BY_NAME, LOG_VARIANTS, LogVariant
from loupe.sqltypes import sql_type

Row = tuple[Any, ...]


def _arrow_schema(variant: LogVariant) -> pa.Schema:
    fields = [pa.field(name, sql_type(type_name).arrow) for name, type_name in variant.columns]
    return pa.schema(
        [*fields, pa.field(PERSIST_TIME, pa.uint64()), pa.field(PERSIST_DIFF, pa.int64())]
    )


SCHEMAS: dict[str, pa.Schema] = {v.name: _arrow_schema(v) for v in LOG_VARIANTS}


def updates_table(variant: str, updates: Iterable[tuple[Row, int]], time: int) -> pa.Table:
    """``(row, diff)`` updates of ``variant`` at ``time`` as a persist-format table."""
    schema = SCHEMAS[variant]
    rows = [(row, diff) for row, diff in updates if diff]
    width = len(schema) - 2
    columns: list[list[Any]] = [[row[i] for row, _ in rows] for i in range(width)]
    columns.append([time] * len(rows))
    columns.append([diff for _, diff in rows])
    return pa.table(columns, schema=schema)


def bucket(duration_ns: int) -> int:
    """The histogram bucket of ``duration_ns``: the next power of two (Materialize's)."""
    return 1 << max(duration_ns - 1, 0).bit_length() if duration_ns > 0 else 1


# The pseudo dataflow of the logging of logging (``log_logging``): ids the engine,
# counting from 0, never reaches.
LOGGING_DATAFLOW = 1 << 40
LOGGING_SCOPE = 1 << 40
LOGGING_OPERATOR = LOGGING_SCOPE + 1
LOGGING_NAME = "Dataflow: logging"

# Count logs whose rows start with (operator id, worker id): retracted when the operator goes.
_OPERATOR_COUNTS = (
    "mz_scheduling_elapsed_raw",
    "mz_compute_operator_durations_histogram_raw",
    "mz_arrangement_records_raw",
    "mz_arrangement_batches_raw",
    "mz_arrangement_sharing_raw",
    "mz_arrangement_batcher_records_raw",
    "mz_arrangement_batcher_size_raw",
    "mz_arrangement_batcher_capacity_raw",
    "mz_arrangement_batcher_allocations_raw",
    "mz_arrangement_heap_size_raw",
    "mz_arrangement_heap_capacity_raw",
    "mz_arrangement_heap_allocations_raw",
)
# Count logs whose rows start with the channel id: retracted when the channel goes.
_CHANNEL_COUNTS = (
    "mz_message_counts_sent_raw",
    "mz_message_counts_received_raw",
    "mz_message_batch_counts_sent_raw",
    "mz_message_batch_counts_received_raw",
)
_REACHABILITY = "mz_dataflow_operator_reachability_raw"


class LogCollector(LoggingHooks):
    """Collects the hooks' events into the changes of the variants in ``logs`` (all by default).

    What describes a dataflow goes with it: an operator's times, histograms
    and arrangement sizes when it is dropped (retracted at the next tick,
    which finds them in one pass), a channel's message counts, an export's
    frontiers, errors and hydration when the export is. Only replica-wide
    logs (parks, peek durations) keep their rows. ``log_logging`` (cluster
    option ``INTROSPECTION DEBUGGING``) logs the collector's own ticks as the
    operator of a pseudo dataflow named ``Dataflow: logging``.
    """

    enabled = True

    def __init__(
        self, workers: int, logs: Iterable[str] | None = None, log_logging: bool = False
    ) -> None:
        self.workers = workers
        self.logs = frozenset(BY_NAME if logs is None else logs)
        self.log_logging = log_logging
        # Per variant: row -> diff since the last tick, and the consolidated state.
        self._pending: dict[str, defaultdict[Row, int]] = {
            name: defaultdict(int) for name in self.logs
        }
        self._state: dict[str, dict[Row, int]] = {name: {} for name in self.logs}
        # What ``state`` rows stand for now, to retract them when they change.
        self._frontiers: dict[tuple[str, int], int] = {}
        self._import_frontiers: dict[tuple[str, str, int], int] = {}
        # Frontiers as the engine last reported them (each step): turned into rows by the
        # tick, so a step costs one assignment per frontier, not a retraction and an insert.
        self._frontiers_now: dict[tuple[str, int], int] = {}
        self._import_frontiers_now: dict[tuple[str, str, int], int] = {}
        self._dataflow_frontiers_now: dict[int, int] = {}
        self._errors: dict[tuple[str, int], int] = {}
        self._hydration: dict[tuple[str, int, int], bool] = {}
        self._hydration_times: dict[tuple[str, int], Row] = {}
        self._exports: dict[tuple[str, int], Row] = {}
        self._operators: dict[tuple[int, int], tuple[Row, Row]] = {}
        # (channel id, worker) -> (dataflow index, channel row, address row)
        self._channels: dict[tuple[int, int], tuple[int, Row, Row]] = {}
        self._lir: dict[str, list[Row]] = defaultdict(list)
        self._peeks: dict[str, list[Row]] = {}
        # Per dataflow index: its scope operator, its ports (k, port, kind), its
        # reachability rows now, its global ids (rows).
        self._scopes: dict[int, int] = {}
        self._ports: dict[int, set[tuple[int, int, str]]] = defaultdict(set)
        self._reachability: dict[int, list[Row]] = {}
        self._global_ids: dict[int, list[Row]] = {}
        # Dropped since the last tick: their count rows are retracted by the tick.
        self._dropped_operators: set[tuple[int, int]] = set()
        self._dropped_channels: set[int] = set()
        # The engine's reports of sizes, as of each tick (``defer``).
        self._flushes: list[Callable[[], None]] = []
        # The pending changes of the logs every operator run adds to (None: not collected).
        self._elapsed = self._pending.get("mz_scheduling_elapsed_raw")
        self._durations = self._pending.get("mz_compute_operator_durations_histogram_raw")
        if log_logging:
            for worker in range(workers):
                self.operator_created(worker, LOGGING_SCOPE, (LOGGING_DATAFLOW,), LOGGING_NAME)
                self.operator_created(
                    worker, LOGGING_OPERATOR, (LOGGING_DATAFLOW, 1), "Logging: tick"
                )

    # -- collecting ---------------------------------------------------------------------

    def add(self, log: str, row: Row, diff: int) -> None:
        """``diff`` more of ``row`` in ``log`` (ignored when the log is not collected)."""
        pending = self._pending.get(log)
        if pending is not None and diff:
            pending[row] += diff

    def _replace(self, log: str, old: Row | None, new: Row | None) -> None:
        if old == new:
            return
        if old is not None:
            self.add(log, old, -1)
        if new is not None:
            self.add(log, new, 1)

    def _set(self, log: str, row: Row, value: int) -> None:
        """``row``'s count in ``log`` becomes ``value``."""
        if log in self._pending:
            self.add(log, row, value - self.current(log, row))

    # -- hooks ----------------------------------------------------------------------------

    def defer(self, flush: Callable[[], None]) -> bool:
        self._flushes.append(flush)
        return True

    def operator_created(
        self, worker: int, operator_id: int, address: tuple[int, ...], name: str
    ) -> None:
        operator = (operator_id, worker, name)
        addressed = (operator_id, worker, tuple(address))
        self._operators[(operator_id, worker)] = (operator, addressed)
        self.add("mz_dataflow_operators_per_worker", operator, 1)
        self.add("mz_dataflow_addresses_per_worker", addressed, 1)
        if len(address) == 1:
            self._scopes[address[0]] = operator_id

    def operator_dropped(self, worker: int, operator_id: int) -> None:
        rows = self._operators.pop((operator_id, worker), None)
        if rows is None:
            return
        operator, addressed = rows
        self.add("mz_dataflow_operators_per_worker", operator, -1)
        self.add("mz_dataflow_addresses_per_worker", addressed, -1)
        self._dropped_operators.add((operator_id, worker))

    def dataflow_dropped(self, dataflow_index: int, dataflow_id: str) -> None:
        for key in [k for k, (index, _, _) in self._channels.items() if index == dataflow_index]:
            _, row, addressed = self._channels.pop(key)
            self.add("mz_dataflow_channels_per_worker", row, -1)
            self.add("mz_dataflow_addresses_per_worker", addressed, -1)
            self._dropped_channels.add(key[0])
        self._dataflow_frontiers_now.pop(dataflow_index, None)
        for row in self._reachability.pop(dataflow_index, []):
            self.add(_REACHABILITY, row, -1)
        self._ports.pop(dataflow_index, None)
        self._scopes.pop(dataflow_index, None)
        for row in self._global_ids.pop(dataflow_index, []):
            self.add("mz_compute_dataflow_global_ids_per_worker", row, -1)
            for lir_row in self._lir.pop(row[2], []):
                self.add("mz_compute_lir_mapping_per_worker", lir_row, -1)

    def channel_created(
        self,
        worker: int,
        channel_id: int,
        address: tuple[int, ...],
        from_index: int,
        from_port: int,
        to_index: int,
        to_port: int,
        kind: str,
    ) -> None:
        row = (channel_id, worker, from_index, from_port, to_index, to_port, kind)
        addressed = (channel_id, worker, tuple(address))
        self._channels[(channel_id, worker)] = (address[0], row, addressed)
        self.add("mz_dataflow_channels_per_worker", row, 1)
        self.add("mz_dataflow_addresses_per_worker", addressed, 1)
        ports = self._ports[address[0]]
        ports.add((from_index, from_port, "source"))
        ports.add((to_index, to_port, "target"))

    def messages(
        self,
        worker: int,
        channel_id: int,
        records: int,
        batches: int,
        to_worker: int | None = None,
    ) -> None:
        key = (channel_id, worker, worker if to_worker is None else to_worker)
        self.add("mz_message_counts_sent_raw", key, records)
        self.add("mz_message_counts_received_raw", key, records)
        self.add("mz_message_batch_counts_sent_raw", key, batches)
        self.add("mz_message_batch_counts_received_raw", key, batches)

    def scheduled(self, worker: int, operator_id: int, duration_ns: int) -> None:
        if duration_ns <= 0:
            return
        if self._elapsed is not None:
            self._elapsed[(operator_id, worker)] += duration_ns
        if self._durations is not None:
            self._durations[(operator_id, worker, bucket(duration_ns))] += 1

    def arrangement_size(
        self,
        worker: int,
        operator_id: int,
        records: int,
        batches: int,
        size: int,
        capacity: int | None = None,
        allocations: int | None = None,
    ) -> None:
        key = (operator_id, worker)
        self._set("mz_arrangement_records_raw", key, records)
        self._set("mz_arrangement_batches_raw", key, batches)
        self._set("mz_arrangement_heap_size_raw", key, size)
        self._set("mz_arrangement_heap_capacity_raw", key, size if capacity is None else capacity)
        self._set(
            "mz_arrangement_heap_allocations_raw",
            key,
            batches if allocations is None else allocations,
        )

    def arrangement_sharing(self, worker: int, operator_id: int, count: int) -> None:
        self._set("mz_arrangement_sharing_raw", (operator_id, worker), count)

    def batcher_size(
        self,
        worker: int,
        operator_id: int,
        records: int,
        size: int,
        capacity: int,
        allocations: int,
    ) -> None:
        key = (operator_id, worker)
        self._set("mz_arrangement_batcher_records_raw", key, records)
        self._set("mz_arrangement_batcher_size_raw", key, size)
        self._set("mz_arrangement_batcher_capacity_raw", key, capacity)
        self._set("mz_arrangement_batcher_allocations_raw", key, allocations)

    def export_created(self, worker: int, export_id: str, dataflow_index: int) -> None:
        row = (export_id, worker, dataflow_index)
        self._exports[(export_id, worker)] = row
        self.add("mz_compute_exports_per_worker", row, 1)

    def export_dropped(self, worker: int, export_id: str) -> None:
        """Retract what describes the export on ``worker``."""
        key = (export_id, worker)
        row = self._exports.pop(key, None)
        if row is not None:
            self.add("mz_compute_exports_per_worker", row, -1)
        self._frontiers_now.pop(key, None)
        for k in [k for k in self._import_frontiers_now if k[0] == export_id and k[2] == worker]:
            del self._import_frontiers_now[k]
        frontier = self._frontiers.pop(key, None)
        if frontier is not None:
            self.add("mz_compute_frontiers_per_worker", (export_id, worker, frontier), -1)
        for k in [k for k in self._import_frontiers if k[0] == export_id and k[2] == worker]:
            time = self._import_frontiers.pop(k)
            self.add("mz_compute_import_frontiers_per_worker", (export_id, k[1], worker, time), -1)
        errors = self._errors.pop(key, 0)
        if errors:
            self.add("mz_compute_error_counts_raw", (export_id, worker, errors), -1)
        hydration_time = self._hydration_times.pop(key, None)
        if hydration_time is not None:
            self.add("mz_compute_hydration_times_per_worker", hydration_time, -1)
        for status in [k for k in self._hydration if k[0] == export_id and k[2] == worker]:
            hydrated = self._hydration.pop(status)
            self.add(
                "mz_compute_operator_hydration_statuses_per_worker",
                (export_id, status[1], worker, hydrated),
                -1,
            )

    def dataflow_global_ids(self, dataflow_index: int, global_ids: Sequence[str]) -> None:
        rows = [
            (dataflow_index, worker, global_id)
            for global_id in global_ids
            for worker in range(self.workers)
        ]
        self._global_ids[dataflow_index] = rows
        for row in rows:
            self.add("mz_compute_dataflow_global_ids_per_worker", row, 1)

    def dataflow_frontier(self, dataflow_index: int, time: int) -> None:
        """Every port of the dataflow is at ``time``: the dataflow steps all its operators at once."""
        self._dataflow_frontiers_now[dataflow_index] = time

    def hydration_time(self, worker: int, export_id: str, time_ns: int | None) -> None:
        key = (export_id, worker)
        row = (export_id, worker, time_ns)
        self._replace("mz_compute_hydration_times_per_worker", self._hydration_times.get(key), row)
        self._hydration_times[key] = row

    def frontier(self, worker: int, export_id: str, time: int) -> None:
        self._frontiers_now[(export_id, worker)] = time

    def import_frontier(self, worker: int, export_id: str, import_id: str, time: int) -> None:
        self._import_frontiers_now[(export_id, import_id, worker)] = time

    def _settle_frontiers(self) -> None:
        """The frontiers reported since the last tick as rows (the old ones retracted)."""
        for key, time in self._frontiers_now.items():
            old = self._frontiers.get(key)
            self._frontiers[key] = time
            export_id, worker = key
            self._replace(
                "mz_compute_frontiers_per_worker",
                None if old is None else (export_id, worker, old),
                (export_id, worker, time),
            )
        for import_key, time in self._import_frontiers_now.items():
            old = self._import_frontiers.get(import_key)
            self._import_frontiers[import_key] = time
            export_id, import_id, worker = import_key
            self._replace(
                "mz_compute_import_frontiers_per_worker",
                None if old is None else (export_id, import_id, worker, old),
                (export_id, import_id, worker, time),
            )
        for dataflow_index, time in self._dataflow_frontiers_now.items():
            self._reach(dataflow_index, time)
        self._frontiers_now = {}
        self._import_frontiers_now = {}
        self._dataflow_frontiers_now = {}

    def _reach(self, dataflow_index: int, time: int) -> None:
        """mz_dataflow_operator_reachability_raw: every port of the dataflow's operators at
        ``time``, one row per worker, under the dataflow's scope operator."""
        if _REACHABILITY not in self._pending or dataflow_index not in self._scopes:
            return
        scope = self._scopes[dataflow_index]
        rows = [
            (scope, worker, k, port, kind, time)
            for k, port, kind in sorted(self._ports.get(dataflow_index, ()))
            for worker in range(self.workers)
        ]
        for row in self._reachability.get(dataflow_index, []):
            self.add(_REACHABILITY, row, -1)
        for row in rows:
            self.add(_REACHABILITY, row, 1)
        self._reachability[dataflow_index] = rows

    def hydration(self, worker: int, export_id: str, lir_id: int, hydrated: bool) -> None:
        key = (export_id, lir_id, worker)
        old = self._hydration.get(key)
        self._hydration[key] = hydrated
        self._replace(
            "mz_compute_operator_hydration_statuses_per_worker",
            None if old is None else (export_id, lir_id, worker, old),
            (export_id, lir_id, worker, hydrated),
        )

    def error_count(self, export_id: str, count: int, worker: int = 0) -> None:
        key = (export_id, worker)
        old = self._errors.get(key, 0)
        if count:
            self._errors[key] = count
        else:
            self._errors.pop(key, None)
        self._replace(
            "mz_compute_error_counts_raw",
            (export_id, worker, old) if old else None,
            (export_id, worker, count) if count else None,
        )

    def lir_mapping(
        self,
        global_id: str,
        lir_id: int,
        operator: str,
        parent_lir_id: int | None,
        nesting: int,
        operator_id_start: int,
        operator_id_end: int,
    ) -> None:
        for worker in range(self.workers):
            row = (
                global_id,
                lir_id,
                worker,
                operator,
                parent_lir_id,
                nesting,
                operator_id_start,
                operator_id_end,
            )
            self._lir[global_id].append(row)
            self.add("mz_compute_lir_mapping_per_worker", row, 1)

    def parked(self, worker: int, slept_ns: int, requested_ns: int) -> None:
        self.add(
            "mz_scheduling_parks_histogram_raw",
            (worker, bucket(slept_ns), bucket(requested_ns) if requested_ns else 0),
            1,
        )

    def peek_started(self, uuid: str, object_id: str, kind: str, time: int) -> None:
        rows = [(uuid, worker, object_id, kind, time) for worker in range(self.workers)]
        self._peeks[uuid] = rows
        for row in rows:
            self.add("mz_active_peeks_per_worker", row, 1)

    def peek_finished(self, uuid: str, kind: str, duration_ns: int) -> None:
        for row in self._peeks.pop(uuid, []):
            self.add("mz_active_peeks_per_worker", row, -1)
        for worker in range(self.workers):
            self.add("mz_peek_durations_histogram_raw", (worker, kind, bucket(duration_ns)), 1)

    # -- reading ------------------------------------------------------------------------

    def current(self, log: str, row: Row) -> int:
        """``row``'s count in ``log``: the state plus what is pending."""
        pending = self._pending.get(log)
        if pending is None:
            return 0
        return self._state[log].get(row, 0) + pending.get(row, 0)

    def tick(self, time: int) -> dict[str, pa.Table]:
        """The changes since the last tick at ``time``, per log with any; folded into the state.

        With ``log_logging``, the tick's own time is logged (as scheduling of the
        logging operator on worker 0, where it runs) and shows in the next tick.
        """
        started = clock.perf_counter_ns()
        for flush in self._flushes:
            flush()
        self._settle_frontiers()
        self._retract_dropped()
        changes: dict[str, pa.Table] = {}
        for log, pending in self._pending.items():
            if not pending:
                continue
            state = self._state[log]
            updates = [(row, diff) for row, diff in pending.items() if diff]
            for row, diff in updates:
                count = state.get(row, 0) + diff
                if count:
                    state[row] = count
                else:
                    state.pop(row, None)
            pending.clear()
            if updates:
                changes[log] = updates_table(log, updates, time)
        if self.log_logging:
            self.scheduled(0, LOGGING_OPERATOR, clock.perf_counter_ns() - started)
        return changes

    def _retract_dropped(self) -> None:
        """Retract the count rows of the operators and channels dropped since the last tick
        (one pass over those logs, rather than one per operator)."""
        operators, channels = self._dropped_operators, self._dropped_channels
        if operators:
            for log in _OPERATOR_COUNTS:
                self._retract_where(log, lambda row: (row[0], row[1]) in operators)
            self._dropped_operators = set()
        if channels:
            for log in _CHANNEL_COUNTS:
                self._retract_where(log, lambda row: row[0] in channels)
            self._dropped_channels = set()

    def _retract_where(self, log: str, dropped: Callable[[Row], bool]) -> None:
        pending = self._pending.get(log)
        if pending is None:
            return
        for row in [r for r in (*self._state[log], *pending) if dropped(r)]:
            self.add(log, row, -self.current(log, row))

    def snapshot(self, time: int) -> dict[str, pa.Table]:
        """Every log's current state (as of the last tick) at ``time``."""
        return {log: updates_table(log, state.items(), time) for log, state in self._state.items()}

    def state_rows(self) -> Mapping[str, Mapping[Row, int]]:
        """The consolidated state of every log, as of the last tick (for tests)."""
        return self._state
