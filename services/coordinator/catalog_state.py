"""The coordinator's in-memory view of the catalog, and the relations derived from it.

``mz_catalog.mz_clusters``, ``mz_cluster_replicas``, ``mz_databases``,
``mz_schemas`` and ``mz_roles`` are pure functions of a catalog snapshot;
``mz_catalog.mz_audit_events`` and ``mz_internal.mz_cluster_replica_history``
of the audit log (``loupe.coordinator.audit_log``). ``catalog_rows`` gives
them all; the coordinator keeps them in storage by appending the difference
between two states' rows (``row_diff``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from loupe.builtins import (
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTERS,
    MZ_DATABASES,
    MZ_ROLES,
    MZ_SCHEMAS,
    SYSTEM_CLUSTER_NAME,
)
from loupe.coordinator.audit_log import AUDIT_COLLECTIONS, AuditLog, Row
from loupe.proto.catalog.v1 import catalog_pb2

# The builtin collections that are functions of a catalog snapshot.
SNAPSHOT_COLLECTIONS = (MZ_CLUSTERS, MZ_CLUSTER_REPLICAS, MZ_DATABASES, MZ_SCHEMAS, MZ_ROLES)
# The builtin collections whose contents come from the catalog.
CATALOG_COLLECTIONS = SNAPSHOT_COLLECTIONS + AUDIT_COLLECTIONS


@dataclass(frozen=True)
class ClusterInfo:
    id: str
    name: str
    managed: bool


@dataclass(frozen=True)
class ReplicaInfo:
    id: str
    name: str
    cluster_id: str


class CatalogState:
    """One catalog snapshot with lookups by name."""

    def __init__(self, snapshot: catalog_pb2.CatalogSnapshot | None = None) -> None:
        self.snapshot = snapshot or catalog_pb2.CatalogSnapshot()
        self.clusters = {
            c.name: ClusterInfo(c.id, c.name, c.managed) for c in self.snapshot.clusters
        }
        self.replicas = [ReplicaInfo(r.id, r.name, r.cluster_id) for r in self.snapshot.replicas]
        self.roles = {r.name: r.id for r in self.snapshot.roles}

    @property
    def timestamp(self) -> int:
        return self.snapshot.timestamp

    @property
    def key(self) -> tuple[int, int]:
        """Where the snapshot is in commit order: (epoch, commit timestamp)."""
        return snapshot_key(self.snapshot)

    def is_newer_than(self, other: CatalogState) -> bool:
        """Whether this snapshot is at least as recent as ``other`` (epoch, then commit time)."""
        return self.key >= other.key

    def cluster(self, name: str) -> ClusterInfo | None:
        return self.clusters.get(name)

    @property
    def system_cluster(self) -> ClusterInfo | None:
        return self.clusters.get(SYSTEM_CLUSTER_NAME)

    def replica(self, cluster_id: str, name: str) -> ReplicaInfo | None:
        return next(
            (r for r in self.replicas if r.cluster_id == cluster_id and r.name == name), None
        )

    def role_id(self, name: str) -> str | None:
        """The id of the role called ``name``, if the catalog has one."""
        return self.roles.get(name)


def snapshot_key(snapshot: catalog_pb2.CatalogSnapshot) -> tuple[int, int]:
    """(epoch, commit timestamp): snapshots compare in commit order by it."""
    return (snapshot.epoch, snapshot.timestamp)


def cluster_row(cluster: catalog_pb2.Cluster) -> Row:
    """A row of ``mz_catalog.mz_clusters``.

    Size and replication factor are NULL for unmanaged clusters, the
    introspection interval is NULL when introspection is disabled (as in
    Materialize).
    """
    interval = (
        dt.timedelta(microseconds=cluster.introspection_interval_ns // 1000)
        if cluster.introspection_interval_ns
        else None
    )
    return (
        cluster.id,
        cluster.name,
        cluster.owner_id,
        cluster.managed,
        cluster.size if cluster.managed else None,
        cluster.replication_factor if cluster.managed else None,
        interval,
        cluster.introspection_debugging,
    )


def replica_row(replica: catalog_pb2.ClusterReplica) -> Row:
    """A row of ``mz_catalog.mz_cluster_replicas``."""
    return (replica.id, replica.name, replica.cluster_id, replica.size, replica.owner_id)


def database_row(database: catalog_pb2.Database) -> Row:
    """A row of ``mz_catalog.mz_databases``."""
    return (database.id, database.name, database.owner_id)


def schema_row(schema: catalog_pb2.Schema) -> Row:
    """A row of ``mz_catalog.mz_schemas``; ambient schemas have a NULL database."""
    return (schema.id, schema.database_id or None, schema.name, schema.owner_id)


def role_row(role: catalog_pb2.Role) -> Row:
    """A row of ``mz_catalog.mz_roles``."""
    return (role.id, role.name, role.inherit)


def catalog_rows(
    snapshot: catalog_pb2.CatalogSnapshot, audit: AuditLog | None = None
) -> dict[str, Counter[Row]]:
    """Collection id -> the rows (as a multiset) the catalog says it holds.

    Without an audit log the audit-derived collections are left out.
    """
    rows = {
        MZ_CLUSTERS.id: Counter(cluster_row(c) for c in snapshot.clusters),
        MZ_CLUSTER_REPLICAS.id: Counter(replica_row(r) for r in snapshot.replicas),
        MZ_DATABASES.id: Counter(database_row(d) for d in snapshot.databases),
        MZ_SCHEMAS.id: Counter(schema_row(s) for s in snapshot.schemas),
        MZ_ROLES.id: Counter(role_row(r) for r in snapshot.roles),
    }
    if audit is not None:
        rows.update(audit.rows())
    return rows


def row_diff(
    old: Mapping[str, Counter[Row]], new: Mapping[str, Counter[Row]]
) -> dict[str, list[tuple[Row, int]]]:
    """Collection id -> the updates (row, diff) that turn ``old`` into ``new``.

    Retractions come first; collections without changes are left out.
    """
    changes: dict[str, list[tuple[Row, int]]] = {}
    for collection_id in sorted(set(old) | set(new)):
        before = old.get(collection_id, Counter())
        after = new.get(collection_id, Counter())
        if before == after:
            continue  # the usual case, and cheap even for the whole audit log
        retracted = {
            row: after.get(row, 0) - n for row, n in before.items() if after.get(row, 0) < n
        }
        inserted = {
            row: n - before.get(row, 0) for row, n in after.items() if before.get(row, 0) < n
        }
        updates = [(row, retracted[row]) for row in _ordered(retracted)]
        updates += [(row, inserted[row]) for row in _ordered(inserted)]
        if updates:
            changes[collection_id] = updates
    return changes


def _ordered(rows: Iterable[Row]) -> list[Row]:
    # Deterministic order makes batches reproducible (and tests readable).
    return sorted(rows, key=lambda row: tuple("" if v is None else str(v) for v in row))
