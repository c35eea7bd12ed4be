"""Loupe's built-in storage-managed collections: ids, names and columns.

Names and columns are Materialize's (see ``shared/RELATIONS.md``); Loupe's
additions are marked there. Each collection is one shard whose id is the
collection's global id. ``writer`` says who keeps it up to date:

- ``catalog``: derived from the catalog (its objects and its audit log);
  the coordinator appends the difference at every catalog commit (and
  reconciles at start).
- ``controller``: written by the controller from what replicas report.
- ``coordinator``: the statement log, published by the coordinator as
  statements run.

All of them are written through the controller's storage writer (Spark).
"""

from __future__ import annotations

from dataclasses import dataclass

from loupe.introspection import logs

_HOUR_MS = 3_600_000
DEFAULT_RETENTION_MS = 30 * 24 * _HOUR_MS
# The current-state relations of replicas change at every heartbeat: an hour of history.
CURRENT_STATE_RETENTION_MS = _HOUR_MS


@dataclass(frozen=True)
class BuiltinCollection:
    id: str
    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]
    writer: str
    # How much history (ms) the collection keeps readable: compaction keeps its
    # since at ``upper - retention_ms``, so ``AS OF`` reaches that far back.
    retention_ms: int = DEFAULT_RETENTION_MS
    # A timestamptz column: rows whose value there is older than
    # ``retention_ms`` are retracted by the storage writer (append-only
    # histories only; a collection another component diffs must not lose rows).
    expire_by: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def shard_id(self) -> str:
        return self.id

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]


MZ_CLUSTERS = BuiltinCollection(
    "s101",
    "mz_catalog",
    "mz_clusters",
    (
        ("id", "text"),
        ("name", "text"),
        ("owner_id", "text"),
        ("managed", "bool"),
        ("size", "text"),
        ("replication_factor", "uint8"),
        ("introspection_interval", "interval"),
        ("introspection_debugging", "bool"),
    ),
    "catalog",
)
MZ_CLUSTER_REPLICAS = BuiltinCollection(
    "s102",
    "mz_catalog",
    "mz_cluster_replicas",
    (
        ("id", "text"),
        ("name", "text"),
        ("cluster_id", "text"),
        ("size", "text"),
        ("owner_id", "text"),
    ),
    "catalog",
)
# Issue 11: the cluster replica size table (``loupe.sizes``), Materialize's columns.
MZ_CLUSTER_REPLICA_SIZES = BuiltinCollection(
    "s115",
    "mz_catalog",
    "mz_cluster_replica_sizes",
    (
        ("size", "text"),
        ("processes", "uint8"),
        ("workers", "uint8"),
        ("cpu_nano_cores", "uint8"),
        ("memory_bytes", "uint8"),
        ("disk_bytes", "uint8"),
        ("credits_per_hour", "numeric"),
    ),
    "catalog",
)
MZ_DATABASES = BuiltinCollection(
    "s103",
    "mz_catalog",
    "mz_databases",
    (("id", "text"), ("name", "text"), ("owner_id", "text")),
    "catalog",
)
MZ_SCHEMAS = BuiltinCollection(
    "s104",
    "mz_catalog",
    "mz_schemas",
    # database_id is NULL for ambient schemas (mz_catalog, mz_internal, ...).
    (("id", "text"), ("database_id", "text"), ("name", "text"), ("owner_id", "text")),
    "catalog",
)
MZ_ROLES = BuiltinCollection(
    "s105",
    "mz_catalog",
    "mz_roles",
    (("id", "text"), ("name", "text"), ("inherit", "bool")),
    "catalog",
)
# Who is a member of which role (GRANT role TO member), as Materialize's.
MZ_ROLE_MEMBERS = BuiltinCollection(
    "s114",
    "mz_catalog",
    "mz_role_members",
    (("role_id", "text"), ("member", "text"), ("grantor", "text")),
    "catalog",
)
# The catalog's audit log. ``id`` is uint8 (Materialize's type) where every other
# collection's ``id`` is text, so the storage writer puts it in a write group of its own.
MZ_AUDIT_EVENTS = BuiltinCollection(
    "s106",
    "mz_catalog",
    "mz_audit_events",
    (
        ("id", "uint8"),
        ("event_type", "text"),
        ("object_type", "text"),
        ("details", "jsonb"),
        ("user", "text"),
        ("occurred_at", "timestamptz"),
    ),
    "catalog",
)
# Catalog items: tables, views, materialized views, indexes, sources. The
# builtin collections themselves are listed in mz_tables, mz_objects and
# mz_columns too, as Materialize lists its builtin tables (create_sql NULL).
_ITEM_COLUMNS = (
    ("id", "text"),
    ("schema_id", "text"),
    ("name", "text"),
    ("owner_id", "text"),
    ("create_sql", "text"),
    ("redacted_create_sql", "text"),
)
MZ_TABLES = BuiltinCollection("s107", "mz_catalog", "mz_tables", _ITEM_COLUMNS, "catalog")
MZ_VIEWS = BuiltinCollection(
    "s108",
    "mz_catalog",
    "mz_views",
    (*_ITEM_COLUMNS[:3], ("definition", "text"), *_ITEM_COLUMNS[3:]),
    "catalog",
)
MZ_MATERIALIZED_VIEWS = BuiltinCollection(
    "s109",
    "mz_catalog",
    "mz_materialized_views",
    (*_ITEM_COLUMNS[:3], ("cluster_id", "text"), ("definition", "text"), *_ITEM_COLUMNS[3:]),
    "catalog",
)
MZ_INDEXES = BuiltinCollection(
    "s110",
    "mz_catalog",
    "mz_indexes",
    (
        ("id", "text"),
        ("name", "text"),
        ("on_id", "text"),
        ("cluster_id", "text"),
        ("owner_id", "text"),
        ("create_sql", "text"),
    ),
    "catalog",
)
# Each index's key columns, as Materialize's (on_expression: Loupe's keys are columns, NULL).
MZ_INDEX_COLUMNS = BuiltinCollection(
    "s116",
    "mz_catalog",
    "mz_index_columns",
    (
        ("index_id", "text"),
        ("index_position", "uint8"),
        ("on_position", "uint8"),
        ("on_expression", "text"),
        ("nullable", "bool"),
    ),
    "catalog",
)
MZ_SOURCES = BuiltinCollection(
    "s111",
    "mz_catalog",
    "mz_sources",
    (
        ("id", "text"),
        ("schema_id", "text"),
        ("name", "text"),
        ("type", "text"),
        ("owner_id", "text"),
        ("create_sql", "text"),
    ),
    "catalog",
)
MZ_OBJECTS = BuiltinCollection(
    "s112",
    "mz_catalog",
    "mz_objects",
    (
        ("id", "text"),
        ("schema_id", "text"),
        ("name", "text"),
        ("type", "text"),
        ("owner_id", "text"),
        ("cluster_id", "text"),
    ),
    "catalog",
)
MZ_COLUMNS = BuiltinCollection(
    "s113",
    "mz_catalog",
    "mz_columns",
    (
        ("id", "text"),
        ("name", "text"),
        ("position", "uint8"),
        ("nullable", "bool"),
        ("type", "text"),
    ),
    "catalog",
)
MZ_CLUSTER_REPLICA_STATUSES = BuiltinCollection(
    "s201",
    "mz_internal",
    "mz_cluster_replica_statuses",
    (
        ("replica_id", "text"),
        ("process_id", "uint8"),
        ("status", "text"),
        ("reason", "text"),
        ("updated_at", "timestamptz"),
        ("incarnation", "uint8"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
MZ_CLUSTER_REPLICA_STATUS_HISTORY = BuiltinCollection(
    "s202",
    "mz_internal",
    "mz_cluster_replica_status_history",
    (
        ("replica_id", "text"),
        ("process_id", "uint8"),
        ("status", "text"),
        ("reason", "text"),
        ("occurred_at", "timestamptz"),
        ("incarnation", "uint8"),
    ),
    "controller",
    expire_by="occurred_at",
)
MZ_CLUSTER_REPLICA_METRICS = BuiltinCollection(
    "s203",
    "mz_internal",
    "mz_cluster_replica_metrics",
    (
        ("replica_id", "text"),
        ("process_id", "uint8"),
        ("cpu_nano_cores", "uint8"),
        ("memory_bytes", "uint8"),
        ("disk_bytes", "uint8"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
MZ_CLUSTER_REPLICA_METRICS_HISTORY = BuiltinCollection(
    "s204",
    "mz_internal",
    "mz_cluster_replica_metrics_history",
    (
        ("replica_id", "text"),
        ("process_id", "uint8"),
        ("cpu_nano_cores", "uint8"),
        ("memory_bytes", "uint8"),
        ("disk_bytes", "uint8"),
        ("occurred_at", "timestamptz"),
    ),
    "controller",
    expire_by="occurred_at",
)
# Derived from mz_audit_events: one row per replica of a user cluster ever
# created; ``dropped_at`` is NULL while it exists.
MZ_CLUSTER_REPLICA_HISTORY = BuiltinCollection(
    "s205",
    "mz_internal",
    "mz_cluster_replica_history",
    (
        ("replica_id", "text"),
        ("size", "text"),
        ("cluster_id", "text"),
        ("cluster_name", "text"),
        ("replica_name", "text"),
        ("created_at", "timestamptz"),
        ("dropped_at", "timestamptz"),
    ),
    "catalog",
)

# Loupe's addition: the storage writer's health, one current row (the
# controller replaces it when the writer's Spark session dies, is rebuilt, or
# flushes start or stop failing). Written through the writer itself, so a row
# saying it was down lands once it is back: read ``restarts`` and ``reason``.
MZ_STORAGE_WRITER_STATUS = BuiltinCollection(
    "s250",
    "mz_internal",
    "mz_storage_writer_status",
    (
        ("status", "text"),
        ("reason", "text"),
        ("spark_incarnation", "uint8"),
        ("spark_pid", "uint8"),
        ("restarts", "uint8"),
        ("updated_at", "timestamptz"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)

# Statement logging (seed 000, DESIGN §7): written by the coordinator, which
# publishes their updates to the storage writer's stream as statements run.
# Executions and their lifecycle events expire after the default retention
# (30 days, the default of ``statement_logging_retention``; the storage writer
# does not read system variables, so a changed value is not applied yet).
# Ids are text (Materialize's are uuid); ``params`` is a PostgreSQL array literal
# of text with NULLs kept, ``{1,NULL,"a b"}``: what Materialize's ``text list``
# prints (storage has no list of text yet).
MZ_SESSION_HISTORY = BuiltinCollection(
    "s301",
    "mz_internal",
    "mz_session_history",
    (
        ("session_id", "text"),
        ("connected_at", "timestamptz"),
        ("initial_application_name", "text"),
        ("authenticated_user", "text"),
    ),
    "coordinator",
)
MZ_PREPARED_STATEMENT_HISTORY = BuiltinCollection(
    "s302",
    "mz_internal",
    "mz_prepared_statement_history",
    (
        ("id", "text"),
        ("session_id", "text"),
        ("name", "text"),
        ("sql_hash", "text"),
        ("prepared_at", "timestamptz"),
        ("statement_type", "text"),
        ("throttled_count", "uint8"),
    ),
    "coordinator",
)
MZ_SQL_TEXT = BuiltinCollection(
    "s303",
    "mz_internal",
    "mz_sql_text",
    (
        ("prepared_day", "timestamptz"),
        ("sql_hash", "text"),
        ("sql", "text"),
        ("redacted_sql", "text"),
    ),
    "coordinator",
)
MZ_STATEMENT_EXECUTION_HISTORY = BuiltinCollection(
    "s304",
    "mz_internal",
    "mz_statement_execution_history",
    (
        ("id", "text"),
        ("prepared_statement_id", "text"),
        ("sample_rate", "float8"),
        ("cluster_id", "text"),
        ("cluster_name", "text"),
        ("application_name", "text"),
        ("database_name", "text"),
        ("search_path", "text"),
        ("transaction_isolation", "text"),
        ("execution_timestamp", "uint8"),
        ("params", "text"),
        ("began_at", "timestamptz"),
        ("finished_at", "timestamptz"),
        ("finished_status", "text"),
        ("error_message", "text"),
        ("result_size", "int8"),
        ("rows_returned", "int8"),
        ("execution_strategy", "text"),
    ),
    "coordinator",
    # Not began_at: the coordinator retracts an open execution's row when it
    # finishes, so only finished rows (never touched again) may expire.
    expire_by="finished_at",
)
MZ_STATEMENT_LIFECYCLE_HISTORY = BuiltinCollection(
    "s305",
    "mz_internal",
    "mz_statement_lifecycle_history",
    (("statement_id", "text"), ("event_type", "text"), ("occurred_at", "timestamptz")),
    "coordinator",
    expire_by="occurred_at",
)
STATEMENT_LOG_COLLECTIONS = (
    MZ_SESSION_HISTORY,
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STATEMENT_LIFECYCLE_HISTORY,
)

# Replica introspection (DESIGN §6, seeds 001 and 003): one collection per log
# variant for every replica, written by the controller from what replicas report,
# ``replica_id`` and ``incarnation`` in front of Materialize's columns. History is
# kept for ``introspection_retention`` (a crashed incarnation's state, with AS OF).
INTROSPECTION_COLLECTIONS: tuple[BuiltinCollection, ...] = tuple(
    BuiltinCollection(
        v.collection_id,
        "mz_internal",
        v.name,
        v.persisted_columns,
        "controller",
        retention_ms=logs.DEFAULT_RETENTION_MS,
    )
    for v in logs.LOG_VARIANTS
)

# One current row per replica with introspection on: whether the collections above
# hold all it reported (a replica or the controller dropped updates, or a gap in
# its messages, makes it incomplete until the next snapshot).
MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS = BuiltinCollection(
    "s260",
    "mz_internal",
    "mz_cluster_replica_introspection_status",
    (
        ("replica_id", "text"),
        ("incarnation", "uint8"),
        ("complete", "bool"),
        ("incomplete_since", "timestamptz"),
        ("dropped_updates", "uint8"),
        ("updated_at", "timestamptz"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)

# Hydration (seed 002): what replicas report through the compute protocol
# (``Hydration`` responses, whether or not introspection logging is on), written
# by the controller. Current state: one row per (replica, object, LIR node); a
# crashed replica's rows stay until its next incarnation reports, a dropped
# object's or replica's rows are retracted.
MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES = BuiltinCollection(
    "s270",
    "mz_internal",
    "mz_compute_operator_hydration_statuses",
    (
        ("replica_id", "text"),
        ("object_id", "text"),
        ("physical_plan_node_id", "uint8"),
        ("hydrated", "bool"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
# Loupe's: each node's progress on each worker while it hydrates (records done
# against an estimate from the inputs' snapshot sizes); the view
# ``mz_compute_operator_hydration_progress`` sums the workers.
MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER = BuiltinCollection(
    "s271",
    "mz_internal",
    "mz_compute_operator_hydration_progress_per_worker",
    (
        ("replica_id", "text"),
        ("object_id", "text"),
        ("physical_plan_node_id", "uint8"),
        ("worker_id", "uint8"),
        ("records_done", "uint8"),
        ("records_estimated", "uint8"),
        ("updated_at", "timestamptz"),
    ),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
MZ_COMPUTE_HYDRATION_TIMES = BuiltinCollection(
    "s272",
    "mz_internal",
    "mz_compute_hydration_times",
    (("replica_id", "text"), ("object_id", "text"), ("time_ns", "uint8")),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
# Which collections each compute object (index, materialized view, subscribe)
# reads: its dataflow's source and index imports.
MZ_COMPUTE_DEPENDENCIES = BuiltinCollection(
    "s273",
    "mz_internal",
    "mz_compute_dependencies",
    (("object_id", "text"), ("dependency_id", "text")),
    "controller",
    retention_ms=CURRENT_STATE_RETENTION_MS,
)
# Hydration episodes, kept across restarts for ``hydration_history_retention``:
# one per replica incarnation (from its start until every object it runs is
# hydrated) and one per object and incarnation. ``status``: hydrating,
# hydrated, interrupted (the replica died or restarted first), dropped (the
# object or replica was dropped first).
# An object's episode is never changed once it ended (``finished_at`` set, whatever
# its status), so its rows expire by ``finished_at`` (as finished statement
# executions do). A replica's episode stays the controller's to change while its
# incarnation lives (hydrated, then hydrating again when a dataflow comes), so
# the controller expires those itself (``loupe.controller.hydration``).
MZ_REPLICA_HYDRATION_HISTORY = BuiltinCollection(
    "s274",
    "mz_internal",
    "mz_replica_hydration_history",
    (
        ("replica_id", "text"),
        ("cluster_id", "text"),
        ("started_at", "timestamptz"),
        ("finished_at", "timestamptz"),
        ("object_count", "uint8"),
        ("peak_memory_bytes", "uint8"),
        ("status", "text"),
        ("incarnation", "uint8"),
    ),
    "controller",
)
MZ_OBJECT_HYDRATION_HISTORY = BuiltinCollection(
    "s275",
    "mz_internal",
    "mz_object_hydration_history",
    (
        ("object_id", "text"),
        ("cluster_id", "text"),
        ("replica_id", "text"),
        ("installed_at", "timestamptz"),
        ("started_at", "timestamptz"),
        ("finished_at", "timestamptz"),
        ("status", "text"),
        ("incarnation", "uint8"),
        ("records", "uint8"),
    ),
    "controller",
    expire_by="finished_at",
)
HYDRATION_COLLECTIONS: tuple[BuiltinCollection, ...] = (
    MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES,
    MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER,
    MZ_COMPUTE_HYDRATION_TIMES,
    MZ_COMPUTE_DEPENDENCIES,
    MZ_REPLICA_HYDRATION_HISTORY,
    MZ_OBJECT_HYDRATION_HISTORY,
)

BUILTIN_COLLECTIONS: tuple[BuiltinCollection, ...] = (
    MZ_CLUSTERS,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTER_REPLICA_SIZES,
    MZ_DATABASES,
    MZ_SCHEMAS,
    MZ_ROLES,
    MZ_ROLE_MEMBERS,
    MZ_AUDIT_EVENTS,
    MZ_TABLES,
    MZ_VIEWS,
    MZ_MATERIALIZED_VIEWS,
    MZ_INDEXES,
    MZ_INDEX_COLUMNS,
    MZ_SOURCES,
    MZ_OBJECTS,
    MZ_COLUMNS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTER_REPLICA_STATUS_HISTORY,
    MZ_CLUSTER_REPLICA_METRICS,
    MZ_CLUSTER_REPLICA_METRICS_HISTORY,
    MZ_CLUSTER_REPLICA_HISTORY,
    MZ_STORAGE_WRITER_STATUS,
    *STATEMENT_LOG_COLLECTIONS,
    *INTROSPECTION_COLLECTIONS,
    MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS,
    *HYDRATION_COLLECTIONS,
)
BY_QUALIFIED_NAME = {c.qualified_name: c for c in BUILTIN_COLLECTIONS}
BY_ID = {c.id: c for c in BUILTIN_COLLECTIONS}


@dataclass(frozen=True)
class BuiltinView:
    """A view over builtin collections; the coordinator inlines its query where it is named."""

    schema: str
    name: str
    sql: str
    # The id it is listed under in mz_views, mz_objects and mz_columns (as Materialize lists
    # its builtin views); None: not listed (yet).
    id: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


# The statement log, joined, for the last day (Materialize's columns, less
# those Loupe has no source for yet: transient_index_id, mz_version, transaction_id).
_ACTIVITY_LOG_SQL = """
SELECT e.id AS execution_id, e.sample_rate, e.cluster_id, e.application_name,
       e.cluster_name, e.database_name, e.search_path, e.transaction_isolation,
       e.execution_timestamp, {params} e.began_at, e.finished_at, e.finished_status,
       {error} e.result_size, e.rows_returned, e.execution_strategy,
       e.prepared_statement_id, p.sql_hash, p.name AS prepared_statement_name,
       p.session_id, p.prepared_at, p.statement_type, p.throttled_count,
       s.connected_at, s.initial_application_name, s.authenticated_user, t.{sql}
FROM mz_internal.mz_statement_execution_history AS e
JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id
JOIN mz_internal.mz_session_history AS s ON s.session_id = p.session_id
JOIN (SELECT DISTINCT prepared_day, sql_hash, sql, redacted_sql FROM mz_internal.mz_sql_text) AS t
  ON t.sql_hash = p.sql_hash AND t.prepared_day = date_trunc('day', p.prepared_at)
WHERE EXTRACT(EPOCH FROM e.began_at) * 1000 + 86400000 > mz_now()
"""
MZ_RECENT_ACTIVITY_LOG = BuiltinView(
    "mz_internal",
    "mz_recent_activity_log",
    _ACTIVITY_LOG_SQL.format(params="e.params,", error="e.error_message,", sql="sql"),
)
# For mz_monitor_redacted: no parameters, no error messages, literals redacted.
MZ_RECENT_ACTIVITY_LOG_REDACTED = BuiltinView(
    "mz_internal",
    "mz_recent_activity_log_redacted",
    _ACTIVITY_LOG_SQL.format(params="", error="", sql="redacted_sql"),
)

# Loupe's addition (issue 6, item 9): per statement fingerprint, what the
# sample stands for. An execution sampled at rate r stands for 1 / r
# executions. The error rate is over finished executions. The latency
# percentile pXX is the smallest latency whose cumulative weight (the weights
# of the fingerprint's finished executions at most that slow) reaches XX % of
# their total weight: a self-join on latency <= latency, since the planner has
# no window functions. Executions at rate 0 are never logged, so are not counted.
_WEIGHTED = """
(SELECT p.sql_hash, 1.0 / e.sample_rate AS w, e.finished_status,
        EXTRACT(EPOCH FROM e.finished_at - e.began_at) * 1000 AS latency_ms
 FROM mz_internal.mz_statement_execution_history AS e
 JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id
 WHERE e.sample_rate > 0)
"""
_ESTIMATES_SQL = f"""
WITH weighted AS {_WEIGHTED},
finished AS (SELECT sql_hash, w, latency_ms FROM weighted WHERE latency_ms IS NOT NULL),
cumulative AS (
  SELECT a.sql_hash, a.latency_ms, sum(b.w) AS below
  FROM (SELECT DISTINCT sql_hash, latency_ms FROM finished) AS a
  JOIN finished AS b ON b.sql_hash = a.sql_hash AND b.latency_ms <= a.latency_ms
  GROUP BY a.sql_hash, a.latency_ms
),
totals AS (SELECT sql_hash, sum(w) AS total FROM finished GROUP BY sql_hash),
percentiles AS (
  SELECT c.sql_hash,
         min(CASE WHEN c.below >= 0.5 * t.total THEN c.latency_ms END) AS p50_ms,
         min(CASE WHEN c.below >= 0.9 * t.total THEN c.latency_ms END) AS p90_ms,
         min(CASE WHEN c.below >= 0.99 * t.total THEN c.latency_ms END) AS p99_ms
  FROM cumulative AS c JOIN totals AS t ON t.sql_hash = c.sql_hash
  GROUP BY c.sql_hash
),
counts AS (
  SELECT sql_hash, sum(w) AS estimated_executions, count(*) AS sampled_executions,
         sum(CASE WHEN finished_status = 'error' THEN w ELSE 0.0 END)
           / sum(CASE WHEN finished_status IS NOT NULL THEN w END) AS estimated_error_rate
  FROM weighted GROUP BY sql_hash
),
texts AS (SELECT DISTINCT sql_hash, redacted_sql FROM mz_internal.mz_sql_text)
SELECT n.sql_hash, x.redacted_sql AS sql, n.estimated_executions, n.estimated_error_rate,
       q.p50_ms, q.p90_ms, q.p99_ms, n.sampled_executions
FROM counts AS n
LEFT JOIN percentiles AS q ON q.sql_hash = n.sql_hash
LEFT JOIN texts AS x ON x.sql_hash = n.sql_hash
"""
MZ_STATEMENT_EXECUTION_ESTIMATES = BuiltinView(
    "mz_internal", "mz_statement_execution_estimates", _ESTIMATES_SQL
)
# Hydration (issue 13) over the controller's hydration collections (s270 to s275).
# Materialize's view, less its ``complete_mvs`` part: that part lists
# materialized views whose write frontier on a replica is empty (their
# dataflow is gone, so no hydration time is reported) from
# ``mz_catalog.mz_cluster_replica_frontiers``, a relation Loupe does not have.
MZ_COMPUTE_HYDRATION_STATUSES = BuiltinView(
    "mz_internal",
    "mz_compute_hydration_statuses",
    """
SELECT object_id, replica_id, time_ns IS NOT NULL AS hydrated,
       ((time_ns / 1000) || 'microseconds')::interval AS hydration_time
FROM mz_internal.mz_compute_hydration_times
""",
)
# Materialize's view: every index and materialized view, with a row per replica
# reporting it (none: one row, replica_id NULL, not hydrated). Materialize also
# lists sources maintained by a dataflow on a cluster (``mz_sources.cluster_id``)
# and sinks; Loupe's sources are tables its coordinator loads (no cluster, no
# dataflow, nothing to hydrate) and it has no sinks.
MZ_HYDRATION_STATUSES = BuiltinView(
    "mz_internal",
    "mz_hydration_statuses",
    """
WITH indexes AS (
    SELECT i.id AS object_id, h.replica_id, COALESCE(h.hydrated, false) AS hydrated
    FROM mz_catalog.mz_indexes i
    LEFT JOIN mz_internal.mz_compute_hydration_statuses h ON (h.object_id = i.id)
),
materialized_views AS (
    SELECT i.id AS object_id, h.replica_id, COALESCE(h.hydrated, false) AS hydrated
    FROM mz_catalog.mz_materialized_views i
    LEFT JOIN mz_internal.mz_compute_hydration_statuses h ON (h.object_id = i.id)
)
SELECT * FROM indexes
UNION ALL
SELECT * FROM materialized_views
""",
)
# Loupe's: each LIR node's progress summed over the replica's workers.
MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS = BuiltinView(
    "mz_internal",
    "mz_compute_operator_hydration_progress",
    """
SELECT replica_id, object_id, physical_plan_node_id,
       sum(records_done) AS records_done, sum(records_estimated) AS records_estimated,
       max(updated_at) AS updated_at
FROM mz_internal.mz_compute_operator_hydration_progress_per_worker
GROUP BY replica_id, object_id, physical_plan_node_id
""",
)
# Loupe's: each object's progress on each replica, with an ETA. The episode is
# the replica's latest incarnation's row of mz_object_hydration_history (its
# ``started_at``: the first update processed; ``installed_at`` when the
# replica did not say). ``rate``: records processed per second since then, as
# of ``updated_at``; ``eta``: what is left of the estimate at that rate, as of
# ``updated_at`` (0 once hydrated, NULL before there is a rate).
MZ_COMPUTE_HYDRATION_PROGRESS = BuiltinView(
    "mz_internal",
    "mz_compute_hydration_progress",
    """
WITH progress AS (
    SELECT replica_id, object_id, sum(records_done) AS records_done,
           sum(records_estimated) AS records_estimated, max(updated_at) AS updated_at
    FROM mz_internal.mz_compute_operator_hydration_progress_per_worker
    GROUP BY replica_id, object_id
),
latest AS (
    SELECT replica_id, object_id, max(incarnation) AS incarnation
    FROM mz_internal.mz_object_hydration_history
    GROUP BY replica_id, object_id
),
episodes AS (
    SELECT h.replica_id, h.object_id, COALESCE(h.started_at, h.installed_at) AS started_at
    FROM mz_internal.mz_object_hydration_history h
    JOIN latest l
      ON l.replica_id = h.replica_id AND l.object_id = h.object_id
     AND l.incarnation = h.incarnation
),
rates AS (
    SELECT s.object_id, s.replica_id, s.hydrated, p.records_done, p.records_estimated,
           e.started_at, p.updated_at,
           CASE
               WHEN p.records_done > 0 AND p.updated_at > e.started_at
               THEN p.records_done / EXTRACT(EPOCH FROM p.updated_at - e.started_at)
           END AS rate
    FROM mz_internal.mz_compute_hydration_statuses s
    LEFT JOIN progress p ON p.replica_id = s.replica_id AND p.object_id = s.object_id
    LEFT JOIN episodes e ON e.replica_id = s.replica_id AND e.object_id = s.object_id
)
SELECT object_id, replica_id, hydrated, records_done, records_estimated, started_at,
       updated_at, rate,
       CASE
           WHEN hydrated THEN INTERVAL '0 seconds'
           WHEN rate IS NOT NULL
           THEN (greatest(records_estimated - records_done, 0) / rate)::float8
                * INTERVAL '1 second'
       END AS eta
FROM rates
""",
)
HYDRATION_VIEWS = (
    MZ_COMPUTE_HYDRATION_STATUSES,
    MZ_HYDRATION_STATUSES,
    MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS,
    MZ_COMPUTE_HYDRATION_PROGRESS,
)
BUILTIN_VIEWS = {
    v.qualified_name: v
    for v in (
        MZ_RECENT_ACTIVITY_LOG,
        MZ_RECENT_ACTIVITY_LOG_REDACTED,
        MZ_STATEMENT_EXECUTION_ESTIMATES,
        *HYDRATION_VIEWS,
    )
}

# The system cluster that answers queries over system relations, and the
# default user cluster, both created when a catalog is initialised.
SYSTEM_CLUSTER_NAME = "mz_catalog_server"
DEFAULT_CLUSTER_NAME = "quickstart"
# Schemas whose relations resolve without qualification (after the session's).
IMPLICIT_SCHEMAS = ("mz_catalog",)
# Where user tables live (the only user database and schema for now).
DEFAULT_DATABASE_NAME = "materialize"
DEFAULT_SCHEMA_NAME = "public"
