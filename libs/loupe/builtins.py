"""Loupe's built-in storage-managed collections: ids, names and columns.

Names and columns are Materialize's (see ``shared/RELATIONS.md``); Loupe's
additions are marked there. Each collection is one shard whose id is the
collection's global id. ``writer`` says who keeps it up to date:

- ``catalog``: derived from the catalog (its objects and its audit log);
  the coordinator appends the difference at every catalog commit (and
  reconciles at start).
- ``controller``: written by the controller from what replicas report.

All of them are written through the controller's storage writer (Spark).
"""

from __future__ import annotations

from dataclasses import dataclass

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

BUILTIN_COLLECTIONS: tuple[BuiltinCollection, ...] = (
    MZ_CLUSTERS,
    MZ_CLUSTER_REPLICAS,
    MZ_DATABASES,
    MZ_SCHEMAS,
    MZ_ROLES,
    MZ_AUDIT_EVENTS,
    MZ_TABLES,
    MZ_VIEWS,
    MZ_MATERIALIZED_VIEWS,
    MZ_INDEXES,
    MZ_SOURCES,
    MZ_OBJECTS,
    MZ_COLUMNS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTER_REPLICA_STATUS_HISTORY,
    MZ_CLUSTER_REPLICA_METRICS,
    MZ_CLUSTER_REPLICA_METRICS_HISTORY,
    MZ_CLUSTER_REPLICA_HISTORY,
)
BY_QUALIFIED_NAME = {c.qualified_name: c for c in BUILTIN_COLLECTIONS}
BY_ID = {c.id: c for c in BUILTIN_COLLECTIONS}

# The system cluster that answers queries over system relations, and the
# default user cluster, both created when a catalog is initialised.
SYSTEM_CLUSTER_NAME = "mz_catalog_server"
DEFAULT_CLUSTER_NAME = "quickstart"
# Schemas whose relations resolve without qualification (after the session's).
IMPLICIT_SCHEMAS = ("mz_catalog",)
# Where user tables live (the only user database and schema for now).
DEFAULT_DATABASE_NAME = "materialize"
DEFAULT_SCHEMA_NAME = "public"
