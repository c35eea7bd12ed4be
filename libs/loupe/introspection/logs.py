"""The log variants a replica keeps about itself (DESIGN §6, seeds 001 and 003).

Each variant is one of Materialize's raw introspection logs, with its name
and columns (``mz_introspection.<name>``). Two kinds, as in Materialize:

- ``state``: a row exists while the thing it describes does (an operator, a
  channel, an export's frontier): created with diff +1, retracted with -1.
- ``count``: the value is the row's multiplicity, the diff (``mz_scheduling_elapsed_raw``
  has a row ``(id, worker_id)`` whose count is the nanoseconds the operator ran):
  an interval adds what happened in it as one update per row, and the views sum
  with ``count(*)``. Never expand such a relation into rows: read it through its views.

Every variant has two ids:

- ``log_id`` (``s4NN``): the collection a replica keeps in memory and feeds to
  replica-targeted queries (``LoggingConfig.index_logs``). No shard holds it.
- ``collection_id`` (``s5NN``): the storage-managed collection in ``mz_internal``
  the controller writes with Spark, for every replica, with ``replica_id`` and
  ``incarnation`` in front of the log's columns.

The friendly relations (``mz_scheduling_elapsed``, ``…_per_worker``) are views
over these (``loupe.introspection.views``).
"""

from __future__ import annotations

from dataclasses import dataclass

# ``introspection_retention``'s default: how long the persisted collections keep
# history readable with AS OF (seed 001: a crashed replica's last state).
DEFAULT_RETENTION_MS = 24 * 3_600_000
# Columns the persisted collections put in front of the log's own.
REPLICA_COLUMNS: tuple[tuple[str, str], ...] = (("replica_id", "text"), ("incarnation", "uint8"))

STATE = "state"
COUNT = "count"


@dataclass(frozen=True)
class LogVariant:
    """One raw log: Materialize's name and columns, its kind and its two ids."""

    name: str
    columns: tuple[tuple[str, str], ...]
    kind: str
    number: int
    # Only with ``INTROSPECTION DEBUGGING``: the logging of logging (none yet).
    debugging: bool = False

    @property
    def log_id(self) -> str:
        return f"s{400 + self.number}"

    @property
    def collection_id(self) -> str:
        """The persisted collection (``loupe.builtins.INTROSPECTION_COLLECTIONS``)."""
        return f"s{500 + self.number}"

    @property
    def persisted_columns(self) -> tuple[tuple[str, str], ...]:
        return REPLICA_COLUMNS + self.columns

    @property
    def qualified_name(self) -> str:
        return f"mz_introspection.{self.name}"

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]


def _v(name: str, kind: str, *columns: tuple[str, str]) -> tuple[str, str, tuple]:
    return name, kind, columns


_U8 = "uint8"
_OPERATOR_WORKER = (("operator_id", _U8), ("worker_id", _U8))
_CHANNEL_WORKERS = (("channel_id", _U8), ("from_worker_id", _U8), ("to_worker_id", _U8))

_SPECS = (
    # Timely's logs: the operator graph and its scheduling.
    _v(
        "mz_dataflow_operators_per_worker", STATE, ("id", _U8), ("worker_id", _U8), ("name", "text")
    ),
    _v(
        "mz_dataflow_addresses_per_worker",
        STATE,
        ("id", _U8),
        ("worker_id", _U8),
        ("address", "uint8 list"),
    ),
    _v(
        "mz_dataflow_channels_per_worker",
        STATE,
        ("id", _U8),
        ("worker_id", _U8),
        ("from_index", _U8),
        ("from_port", _U8),
        ("to_index", _U8),
        ("to_port", _U8),
        ("type", "text"),
    ),
    _v("mz_scheduling_elapsed_raw", COUNT, ("id", _U8), ("worker_id", _U8)),
    _v(
        "mz_compute_operator_durations_histogram_raw",
        COUNT,
        ("id", _U8),
        ("worker_id", _U8),
        ("duration_ns", _U8),
    ),
    _v(
        "mz_scheduling_parks_histogram_raw",
        COUNT,
        ("worker_id", _U8),
        ("slept_for_ns", _U8),
        ("requested_ns", _U8),
    ),
    _v("mz_message_counts_sent_raw", COUNT, *_CHANNEL_WORKERS),
    _v("mz_message_counts_received_raw", COUNT, *_CHANNEL_WORKERS),
    _v("mz_message_batch_counts_sent_raw", COUNT, *_CHANNEL_WORKERS),
    _v("mz_message_batch_counts_received_raw", COUNT, *_CHANNEL_WORKERS),
    _v(
        "mz_dataflow_operator_reachability_raw",
        COUNT,
        ("id", _U8),
        ("worker_id", _U8),
        ("source", _U8),
        ("port", _U8),
        ("update_type", "text"),
        ("time", "mz_timestamp"),
    ),
    # Differential's logs: arrangements (values as counts).
    _v("mz_arrangement_records_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_batches_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_sharing_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_batcher_records_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_batcher_size_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_batcher_capacity_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_batcher_allocations_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_heap_size_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_heap_capacity_raw", COUNT, *_OPERATOR_WORKER),
    _v("mz_arrangement_heap_allocations_raw", COUNT, *_OPERATOR_WORKER),
    # Compute's logs: exports, frontiers, peeks, errors, hydration, the LIR mapping.
    _v(
        "mz_compute_exports_per_worker",
        STATE,
        ("export_id", "text"),
        ("worker_id", _U8),
        ("dataflow_id", _U8),
    ),
    _v(
        "mz_compute_frontiers_per_worker",
        STATE,
        ("export_id", "text"),
        ("worker_id", _U8),
        ("time", "mz_timestamp"),
    ),
    _v(
        "mz_compute_import_frontiers_per_worker",
        STATE,
        ("export_id", "text"),
        ("import_id", "text"),
        ("worker_id", _U8),
        ("time", "mz_timestamp"),
    ),
    _v(
        "mz_active_peeks_per_worker",
        STATE,
        ("id", "uuid"),
        ("worker_id", _U8),
        ("object_id", "text"),
        ("type", "text"),
        ("time", "mz_timestamp"),
    ),
    _v(
        "mz_peek_durations_histogram_raw",
        COUNT,
        ("worker_id", _U8),
        ("type", "text"),
        ("duration_ns", _U8),
    ),
    _v(
        "mz_compute_error_counts_raw",
        STATE,
        ("export_id", "text"),
        ("worker_id", _U8),
        ("count", "int8"),
    ),
    _v(
        "mz_compute_hydration_times_per_worker",
        STATE,
        ("export_id", "text"),
        ("worker_id", _U8),
        ("time_ns", _U8),
    ),
    _v(
        "mz_compute_operator_hydration_statuses_per_worker",
        STATE,
        ("export_id", "text"),
        ("lir_id", _U8),
        ("worker_id", _U8),
        ("hydrated", "bool"),
    ),
    _v(
        "mz_compute_lir_mapping_per_worker",
        STATE,
        ("global_id", "text"),
        ("lir_id", _U8),
        ("worker_id", _U8),
        ("operator", "text"),
        ("parent_lir_id", _U8),
        ("nesting", "uint2"),
        ("operator_id_start", _U8),
        ("operator_id_end", _U8),
    ),
    _v(
        "mz_compute_dataflow_global_ids_per_worker",
        STATE,
        ("id", _U8),
        ("worker_id", _U8),
        ("global_id", "text"),
    ),
)

LOG_VARIANTS: tuple[LogVariant, ...] = tuple(
    LogVariant(name, columns, kind, number) for number, (name, kind, columns) in enumerate(_SPECS)
)
BY_NAME: dict[str, LogVariant] = {v.name: v for v in LOG_VARIANTS}
BY_LOG_ID: dict[str, LogVariant] = {v.log_id: v for v in LOG_VARIANTS}
BY_COLLECTION_ID: dict[str, LogVariant] = {v.collection_id: v for v in LOG_VARIANTS}


def index_logs(debugging: bool = False) -> dict[str, str]:
    """``LoggingConfig.index_logs`` for a cluster: variant name -> log id."""
    return {v.name: v.log_id for v in LOG_VARIANTS if debugging or not v.debugging}
