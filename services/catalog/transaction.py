"""Catalog state in memory, and transactions over it.

A ``Transaction`` works on a copy of the state: each operation validates
against what the transaction has done so far and raises ``LoupeError`` (with
a SQLSTATE) when it cannot apply, so a failed transaction leaves nothing
behind. ``DurableCatalogState.commit_transaction`` then makes the whole copy
durable at once. Backends only store what ``CatalogState`` holds; the rules
live here, once for every backend.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from loupe.builtins import DEFAULT_CLUSTER_NAME, SYSTEM_CLUSTER_NAME
from loupe.catalog.objects import (
    DEFAULT_INTROSPECTION_INTERVAL_NS,
    DEFAULT_USER_ROLE_ID,
    SYSTEM_ROLE_ID,
    Change,
    Cluster,
    ClusterReplica,
)
from loupe.common.errors import LoupeError, SqlState

INVALID_NAME = "42602"
# A size is the number of workers of each replica process.
SIZE_PATTERN = re.compile(r"[1-9][0-9]*")

# Allocator name -> id prefix. Each allocator holds the next id to hand out.
ALLOCATORS = {
    "system_cluster": "s",
    "system_replica": "s",
    "user_cluster": "u",
    "user_replica": "u",
}


@dataclass
class CatalogState:
    """Every durable object, keyed by id, plus the id allocators."""

    clusters: dict[str, Cluster] = field(default_factory=dict)
    replicas: dict[str, ClusterReplica] = field(default_factory=dict)
    id_allocators: dict[str, int] = field(default_factory=dict)

    def copy(self) -> CatalogState:
        return CatalogState(dict(self.clusters), dict(self.replicas), dict(self.id_allocators))

    def cluster_by_name(self, name: str) -> Cluster | None:
        return next((c for c in self.clusters.values() if c.name == name), None)

    def replicas_of(self, cluster_id: str) -> list[ClusterReplica]:
        return [r for r in self.replicas.values() if r.cluster_id == cluster_id]


def validate_size(size: str) -> str:
    if not SIZE_PATTERN.fullmatch(size):
        raise LoupeError(SqlState.INVALID_PARAMETER_VALUE, f"invalid SIZE '{size}'")
    return size


def is_system(cluster: Cluster) -> bool:
    return cluster.id.startswith("s")


class Transaction:
    """A batch of catalog operations, applied to a private copy of the state."""

    def __init__(self, base: CatalogState) -> None:
        self.base = base
        self.state = base.copy()
        self.changes: list[Change] = []

    # Ids

    def allocate_id(self, allocator: str) -> str:
        next_id = self.state.id_allocators.get(allocator, 1)
        self.state.id_allocators[allocator] = next_id + 1
        return f"{ALLOCATORS[allocator]}{next_id}"

    # Operations

    def create_cluster(
        self, cluster: Cluster, replicas: Sequence[ClusterReplica] = (), *, system: bool = False
    ) -> Cluster:
        """Create ``cluster``; a managed one (with a SIZE) gets r1..rk, else ``replicas``.

        Ids are always allocated here (a given one is ignored: honouring it
        could collide with a later allocation); an empty ``owner_id`` is
        filled in.
        """
        if not cluster.name:
            raise LoupeError(INVALID_NAME, "cluster name must not be empty")
        if self.state.cluster_by_name(cluster.name) is not None:
            raise LoupeError(SqlState.DUPLICATE_OBJECT, f'cluster "{cluster.name}" already exists')
        managed = cluster.managed or bool(cluster.size)
        if managed:
            validate_size(cluster.size)
            if replicas:
                raise LoupeError(
                    SqlState.INVALID_PARAMETER_VALUE,
                    "REPLICAS cannot be given for a managed cluster; use SIZE and REPLICATION FACTOR",
                )
        prefix = "system" if system else "user"
        created = dataclasses.replace(
            cluster,
            id=self.allocate_id(f"{prefix}_cluster"),
            owner_id=cluster.owner_id or (SYSTEM_ROLE_ID if system else DEFAULT_USER_ROLE_ID),
            managed=managed,
            replication_factor=cluster.replication_factor if managed else len(replicas),
        )
        self.state.clusters[created.id] = created
        self.changes.append(Change("cluster_created", created))
        if managed:
            replicas = [
                ClusterReplica(id="", name=f"r{i}", cluster_id="", size=created.size, owner_id="")
                for i in range(1, created.replication_factor + 1)
            ]
        for replica in replicas:
            self._add_replica(created, replica, system=system)
        return created

    def create_replica(self, replica: ClusterReplica, cluster_name: str = "") -> ClusterReplica:
        """Add ``replica`` to the cluster named ``cluster_name`` (or ``replica.cluster_id``)."""
        if cluster_name:
            cluster = self._cluster_named(cluster_name)
        else:
            cluster = self.state.clusters.get(replica.cluster_id)
            if cluster is None:
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT, f"unknown cluster id '{replica.cluster_id}'"
                )
        self._check_modifiable(cluster)
        return self._add_replica(cluster, replica, system=False)

    def drop_cluster(self, name: str, *, if_exists: bool = False) -> Cluster | None:
        """Drop the cluster named ``name`` and its replicas."""
        cluster = self.state.cluster_by_name(name)
        if cluster is None:
            if if_exists:
                return None
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name}'")
        self._check_modifiable(cluster)
        for replica in self.state.replicas_of(cluster.id):
            del self.state.replicas[replica.id]
            self.changes.append(Change("replica_dropped", replica))
        del self.state.clusters[cluster.id]
        self.changes.append(Change("cluster_dropped", cluster))
        return cluster

    def drop_replica(
        self, cluster_name: str, replica_name: str, *, if_exists: bool = False
    ) -> ClusterReplica | None:
        cluster = self.state.cluster_by_name(cluster_name)
        if cluster is None:
            if if_exists:
                return None
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{cluster_name}'")
        self._check_modifiable(cluster)
        replica = self._replica_named(cluster, replica_name)
        if replica is None:
            if if_exists:
                return None
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT,
                f"unknown cluster replica '{cluster_name}.{replica_name}'",
            )
        del self.state.replicas[replica.id]
        self.changes.append(Change("replica_dropped", replica))
        return replica

    # Helpers

    def _cluster_named(self, name: str) -> Cluster:
        cluster = self.state.cluster_by_name(name)
        if cluster is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name}'")
        return cluster

    def _replica_named(self, cluster: Cluster, name: str) -> ClusterReplica | None:
        return next((r for r in self.state.replicas_of(cluster.id) if r.name == name), None)

    @staticmethod
    def _check_modifiable(cluster: Cluster) -> None:
        if is_system(cluster):
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE,
                f"system cluster '{cluster.name}' cannot be modified",
            )

    def _add_replica(
        self, cluster: Cluster, replica: ClusterReplica, *, system: bool
    ) -> ClusterReplica:
        if not replica.name:
            raise LoupeError(INVALID_NAME, "cluster replica name must not be empty")
        if not replica.size:
            raise LoupeError(
                SqlState.INVALID_PARAMETER_VALUE,
                f"cluster replica '{cluster.name}.{replica.name}' needs a SIZE",
            )
        validate_size(replica.size)
        if self._replica_named(cluster, replica.name) is not None:
            raise LoupeError(
                SqlState.DUPLICATE_OBJECT,
                f'cluster replica "{cluster.name}.{replica.name}" already exists',
            )
        prefix = "system" if system else "user"
        created = dataclasses.replace(
            replica,
            id=self.allocate_id(f"{prefix}_replica"),
            cluster_id=cluster.id,
            owner_id=replica.owner_id or cluster.owner_id,
        )
        self.state.replicas[created.id] = created
        self.changes.append(Change("replica_created", created))
        return created


def bootstrap_state() -> CatalogState:
    """The state of a new catalog: the system cluster and the default cluster."""
    tx = Transaction(CatalogState())
    for name, system in ((SYSTEM_CLUSTER_NAME, True), (DEFAULT_CLUSTER_NAME, False)):
        tx.create_cluster(
            Cluster(
                id="",
                name=name,
                owner_id="",
                managed=True,
                size="1",
                replication_factor=1,
                introspection_interval_ns=DEFAULT_INTROSPECTION_INTERVAL_NS,
                introspection_debugging=False,
            ),
            system=system,
        )
    return tx.state
