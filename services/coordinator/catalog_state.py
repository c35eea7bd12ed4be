"""The coordinator's in-memory view of the catalog, and the relations derived from it.

``mz_catalog.mz_clusters`` and ``mz_catalog.mz_cluster_replicas`` are pure
functions of a catalog snapshot (``catalog_rows``); the coordinator keeps them
in storage by appending the difference between two snapshots' rows
(``row_diff``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loupe.builtins import MZ_CLUSTER_REPLICAS, MZ_CLUSTERS, SYSTEM_CLUSTER_NAME
from loupe.proto.catalog.v1 import catalog_pb2

Row = tuple[Any, ...]

# The builtin collections whose contents come from the catalog.
CATALOG_COLLECTIONS = (MZ_CLUSTERS, MZ_CLUSTER_REPLICAS)


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

    @property
    def timestamp(self) -> int:
        return self.snapshot.timestamp

    def is_newer_than(self, other: CatalogState) -> bool:
        """Whether this snapshot is at least as recent as ``other`` (epoch, then commit time)."""
        mine = (self.snapshot.epoch, self.snapshot.timestamp)
        theirs = (other.snapshot.epoch, other.snapshot.timestamp)
        return mine >= theirs

    def cluster(self, name: str) -> ClusterInfo | None:
        return self.clusters.get(name)

    @property
    def system_cluster(self) -> ClusterInfo | None:
        return self.clusters.get(SYSTEM_CLUSTER_NAME)

    def replica(self, cluster_id: str, name: str) -> ReplicaInfo | None:
        return next(
            (r for r in self.replicas if r.cluster_id == cluster_id and r.name == name), None
        )


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


def catalog_rows(snapshot: catalog_pb2.CatalogSnapshot) -> dict[str, Counter[Row]]:
    """Collection id -> the rows (as a multiset) the catalog says it holds."""
    return {
        MZ_CLUSTERS.id: Counter(cluster_row(c) for c in snapshot.clusters),
        MZ_CLUSTER_REPLICAS.id: Counter(replica_row(r) for r in snapshot.replicas),
    }


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
        updates: list[tuple[Row, int]] = []
        for row in _ordered(before):
            delta = after.get(row, 0) - before[row]
            if delta < 0:
                updates.append((row, delta))
        for row in _ordered(after):
            delta = after[row] - before.get(row, 0)
            if delta > 0:
                updates.append((row, delta))
        if updates:
            changes[collection_id] = updates
    return changes


def _ordered(rows: Iterable[Row]) -> list[Row]:
    # Deterministic order makes batches reproducible (and tests readable).
    return sorted(rows, key=lambda row: tuple("" if v is None else str(v) for v in row))
