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


@dataclass(frozen=True)
class BuiltinCollection:
    id: str
    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]
    writer: str

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
