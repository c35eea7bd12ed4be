"""Logging hooks (DESIGN §6): what the engine tells introspection about itself.

The engine calls these only when ``enabled`` is true, after checking that one
flag, so logging that is off costs one attribute read per event site and no
allocation. A replica that ships introspection subclasses ``LoggingHooks``
and sets ``enabled``. Every call carries the worker it happened on.

Ids are numbered across the instance, one sequence for operators and
channels (as timely's identifiers: ``mz_dataflow_addresses`` holds both). A
dataflow is an operator of its own, address ``(dataflow index,)``, named after
the dataflow; its operators' addresses are ``(dataflow index, k)`` with
``k >= 1``, and its channels' ``from_index``/``to_index`` are those ``k``.
``lir_mapping`` tells, per LIR node of a built object, the range of operator
ids rendered for it (mz_lir_mapping).

Hooks added after the first version take keyword arguments with defaults, so
a subclass written against the first version keeps working.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class LoggingHooks:
    """No-op default; override what you collect and set ``enabled = True``."""

    enabled: bool = False

    def defer(self, flush: Callable[[], None]) -> bool:
        """Whether the hooks will call ``flush`` before reading what they collected (at the
        end of each logging interval). Then the engine reports what is costly to measure
        at every change (arrangement and queue sizes) in ``flush``, as of then; otherwise
        (the default) at every change."""
        return False

    def dataflow_created(self, dataflow_index: int, dataflow_id: str, name: str) -> None:
        """A dataflow was rendered (mz_dataflows)."""

    def dataflow_dropped(self, dataflow_index: int, dataflow_id: str) -> None:
        """A dataflow and all its operators are gone."""

    def operator_created(
        self, worker: int, operator_id: int, address: tuple[int, ...], name: str
    ) -> None:
        """An operator exists on ``worker`` (mz_dataflow_operators, mz_dataflow_addresses)."""

    def operator_dropped(self, worker: int, operator_id: int) -> None:
        """The operator was dropped with its dataflow."""

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
        """Operator ``from_index`` feeds ``to_index`` in dataflow ``address`` (mz_dataflow_channels).

        ``kind`` is ``exchange`` when the reader repartitions by key, else ``pipeline``.
        """

    def messages(
        self,
        worker: int,
        channel_id: int,
        records: int,
        batches: int,
        to_worker: int | None = None,
    ) -> None:
        """``worker`` sent ``records`` updates in ``batches`` batches through the channel to
        ``to_worker`` (``worker`` itself when None: a pipeline), which received them
        (mz_message_counts)."""

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
        """LIR node ``lir_id`` of ``global_id`` is operators ``[start, end)`` (mz_lir_mapping)."""

    def scheduled(self, worker: int, operator_id: int, duration_ns: int) -> None:
        """The operator ran once on ``worker`` for ``duration_ns`` (scheduling elapsed, histogram)."""

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
        """The operator's arrangements on ``worker`` now hold this much (mz_arrangement_sizes):
        ``size`` bytes in frames, ``capacity`` bytes reserved (``size`` when None),
        ``allocations`` frames (``batches`` when None)."""

    def arrangement_sharing(self, worker: int, operator_id: int, count: int) -> None:
        """``count`` operators share the operator's arrangement on ``worker`` (mz_arrangement_sharing)."""

    def batcher_size(
        self,
        worker: int,
        operator_id: int,
        records: int,
        size: int,
        capacity: int,
        allocations: int,
    ) -> None:
        """Updates queued at the operator on ``worker`` for a later time (mz_arrangement_batcher_*)."""

    def export_created(self, worker: int, export_id: str, dataflow_index: int) -> None:
        """Dataflow ``dataflow_index`` exports ``export_id`` on ``worker`` (mz_compute_exports)."""

    def export_dropped(self, worker: int, export_id: str) -> None:
        """The export is gone, and with it what was logged about it."""

    def dataflow_global_ids(self, dataflow_index: int, global_ids: Sequence[str]) -> None:
        """The exports and built objects of a dataflow (mz_compute_dataflow_global_ids), on every worker."""

    def dataflow_frontier(self, dataflow_index: int, time: int) -> None:
        """Every port of the dataflow's operators advanced to ``time`` (mz_dataflow_operator_reachability)."""

    def hydration_time(self, worker: int, export_id: str, time_ns: int | None) -> None:
        """``export_id`` hydrated on ``worker`` ``time_ns`` after its dataflow was created;
        None: not yet (mz_compute_hydration_times)."""

    def frontier(self, worker: int, export_id: str, time: int) -> None:
        """Export ``export_id``'s write frontier advanced to ``time`` (mz_compute_frontiers)."""

    def import_frontier(self, worker: int, export_id: str, import_id: str, time: int) -> None:
        """An input of ``export_id``'s dataflow advanced (mz_compute_import_frontiers)."""

    def hydration(self, worker: int, export_id: str, lir_id: int, hydrated: bool) -> None:
        """LIR node ``lir_id`` of ``export_id`` changed hydration status on ``worker``."""

    def error_count(self, export_id: str, count: int, worker: int = 0) -> None:
        """``export_id`` now holds ``count`` errors on ``worker`` (mz_compute_error_counts)."""

    def parked(self, worker: int, slept_ns: int, requested_ns: int) -> None:
        """``worker`` had nothing to do and waited ``slept_ns`` of the ``requested_ns`` it asked
        for (0: until woken) (mz_scheduling_parks_histogram). Called by whoever runs the engine."""

    def peek_started(self, uuid: str, object_id: str, kind: str, time: int) -> None:
        """A peek of ``object_id`` at ``time`` is pending; ``kind`` is ``index`` or ``persist``
        (mz_active_peeks). Called by whoever serves peeks."""

    def peek_finished(self, uuid: str, kind: str, duration_ns: int) -> None:
        """The peek was answered or canceled after ``duration_ns`` (mz_peek_durations_histogram)."""
