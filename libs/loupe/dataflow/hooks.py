"""Logging hooks (DESIGN §6): what the engine tells introspection about itself.

The engine calls these only when ``enabled`` is true, after checking that one
flag, so logging that is off costs one attribute read per event site and no
allocation. A replica that ships introspection subclasses ``LoggingHooks``
and sets ``enabled``. Every call carries the worker it happened on.

Operators are numbered across the instance; an operator's ``address`` is
``(dataflow index, operator index)``. ``lir_mapping`` tells, per LIR node of a
built object, the range of operator ids rendered for it (mz_lir_mapping).
"""

from __future__ import annotations


class LoggingHooks:
    """No-op default; override what you collect and set ``enabled = True``."""

    enabled: bool = False

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

    def messages(self, worker: int, channel_id: int, records: int, batches: int) -> None:
        """``records`` updates went through the channel on ``worker`` (mz_message_counts)."""

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
        self, worker: int, operator_id: int, records: int, batches: int, size: int
    ) -> None:
        """The operator's arrangement on ``worker`` now holds this much (mz_arrangement_sizes)."""

    def frontier(self, worker: int, export_id: str, time: int) -> None:
        """Export ``export_id``'s write frontier advanced to ``time`` (mz_compute_frontiers)."""

    def import_frontier(self, worker: int, export_id: str, import_id: str, time: int) -> None:
        """An input of ``export_id``'s dataflow advanced (mz_compute_import_frontiers)."""

    def hydration(self, worker: int, export_id: str, lir_id: int, hydrated: bool) -> None:
        """LIR node ``lir_id`` of ``export_id`` changed hydration status on ``worker``."""

    def error_count(self, export_id: str, count: int) -> None:
        """``export_id`` now holds ``count`` errors (mz_compute_error_counts)."""

    def parked(self, worker: int, slept_ns: int, requested_ns: int) -> None:
        """``worker`` had nothing to do and waited ``slept_ns`` of the ``requested_ns`` it asked
        for (0: until woken) (mz_scheduling_parks_histogram). Called by whoever runs the engine."""

    def peek_started(self, uuid: str, object_id: str, kind: str, time: int) -> None:
        """A peek of ``object_id`` at ``time`` is pending; ``kind`` is ``index`` or ``persist``
        (mz_active_peeks). Called by whoever serves peeks."""

    def peek_finished(self, uuid: str, kind: str, duration_ns: int) -> None:
        """The peek was answered or canceled after ``duration_ns`` (mz_peek_durations_histogram)."""
