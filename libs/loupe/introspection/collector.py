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

from collections import defaultdict
from collections.abc import Iterable, Mapping
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


class LogCollector(LoggingHooks):
    """Collects the hooks' events into the changes of the variants in ``logs`` (all by default)."""

    enabled = True

    def __init__(self, workers: int, logs: Iterable[str] | None = None) -> None:
        self.workers = workers
        self.logs = frozenset(BY_NAME if logs is None else logs)
        # Per variant: row -> diff since the last tick, and the consolidated state.
        self._pending: dict[str, defaultdict[Row, int]] = {
            name: defaultdict(int) for name in self.logs
        }
        self._state: dict[str, dict[Row, int]] = {name: {} for name in self.logs}
        # What ``state`` rows stand for now, to retract them when they change.
        self._frontiers: dict[tuple[str, int], int] = {}
        self._import_frontiers: dict[tuple[str, str, int], int] = {}
        self._errors: dict[str, int] = {}
        self._hydration: dict[tuple[str, int, int], bool] = {}
        self._operators: dict[tuple[int, int], tuple[Row, Row]] = {}
        self._channels: dict[tuple[int, int], tuple[int, Row]] = {}
        self._lir: dict[str, list[Row]] = defaultdict(list)
        self._peeks: dict[str, list[Row]] = {}

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

    # -- hooks ----------------------------------------------------------------------------

    def operator_created(
        self, worker: int, operator_id: int, address: tuple[int, ...], name: str
    ) -> None:
        operator = (operator_id, worker, name)
        addressed = (operator_id, worker, tuple(address))
        self._operators[(operator_id, worker)] = (operator, addressed)
        self.add("mz_dataflow_operators_per_worker", operator, 1)
        self.add("mz_dataflow_addresses_per_worker", addressed, 1)

    def operator_dropped(self, worker: int, operator_id: int) -> None:
        rows = self._operators.pop((operator_id, worker), None)
        if rows is None:
            return
        operator, addressed = rows
        self.add("mz_dataflow_operators_per_worker", operator, -1)
        self.add("mz_dataflow_addresses_per_worker", addressed, -1)

    def dataflow_dropped(self, dataflow_index: int, dataflow_id: str) -> None:
        for key in [k for k, (index, _) in self._channels.items() if index == dataflow_index]:
            _, row = self._channels.pop(key)
            self.add("mz_dataflow_channels_per_worker", row, -1)

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
        self._channels[(channel_id, worker)] = (address[0], row)
        self.add("mz_dataflow_channels_per_worker", row, 1)

    def messages(self, worker: int, channel_id: int, records: int, batches: int) -> None:
        key = (channel_id, worker, worker)
        self.add("mz_message_counts_sent_raw", key, records)
        self.add("mz_message_counts_received_raw", key, records)
        self.add("mz_message_batch_counts_sent_raw", key, batches)
        self.add("mz_message_batch_counts_received_raw", key, batches)

    def scheduled(self, worker: int, operator_id: int, duration_ns: int) -> None:
        self.add("mz_scheduling_elapsed_raw", (operator_id, worker), duration_ns)
        self.add(
            "mz_compute_operator_durations_histogram_raw",
            (operator_id, worker, bucket(duration_ns)),
            1,
        )

    def arrangement_size(
        self, worker: int, operator_id: int, records: int, batches: int, size: int
    ) -> None:
        key = (operator_id, worker)
        for log, value in (
            ("mz_arrangement_records_raw", records),
            ("mz_arrangement_batches_raw", batches),
            ("mz_arrangement_heap_size_raw", size),
            ("mz_arrangement_heap_capacity_raw", size),
        ):
            self.add(log, key, value - self.current(log, key))

    def frontier(self, worker: int, export_id: str, time: int) -> None:
        key = (export_id, worker)
        old = self._frontiers.get(key)
        self._frontiers[key] = time
        self._replace(
            "mz_compute_frontiers_per_worker",
            None if old is None else (export_id, worker, old),
            (export_id, worker, time),
        )

    def import_frontier(self, worker: int, export_id: str, import_id: str, time: int) -> None:
        key = (export_id, import_id, worker)
        old = self._import_frontiers.get(key)
        self._import_frontiers[key] = time
        self._replace(
            "mz_compute_import_frontiers_per_worker",
            None if old is None else (export_id, import_id, worker, old),
            (export_id, import_id, worker, time),
        )

    def hydration(self, worker: int, export_id: str, lir_id: int, hydrated: bool) -> None:
        key = (export_id, lir_id, worker)
        old = self._hydration.get(key)
        self._hydration[key] = hydrated
        self._replace(
            "mz_compute_operator_hydration_statuses_per_worker",
            None if old is None else (export_id, lir_id, worker, old),
            (export_id, lir_id, worker, hydrated),
        )

    def error_count(self, export_id: str, count: int) -> None:
        old = self._errors.get(export_id, 0)
        self._errors[export_id] = count
        self._replace(
            "mz_compute_error_counts_raw",
            (export_id, 0, old) if old else None,
            (export_id, 0, count) if count else None,
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
        """The changes since the last tick at ``time``, per log with any; folded into the state."""
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
            self._pending[log] = defaultdict(int)
            if updates:
                changes[log] = updates_table(log, updates, time)
        return changes

    def snapshot(self, time: int) -> dict[str, pa.Table]:
        """Every log's current state (as of the last tick) at ``time``."""
        return {log: updates_table(log, state.items(), time) for log, state in self._state.items()}

    def state_rows(self) -> Mapping[str, Mapping[Row, int]]:
        """The consolidated state of every log, as of the last tick (for tests)."""
        return self._state
