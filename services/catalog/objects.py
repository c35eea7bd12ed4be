"""The catalog's objects as Python values, and their wire and storage forms.

Domain code works on these frozen dataclasses; ``to_proto``/``from_proto``
are the only place they meet ``catalog_pb2``, and ``to_json``/``from_json``
the only place they meet a backend's storage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from loupe.proto.catalog.v1 import catalog_pb2

# Owners: system objects belong to the system role, the rest default to the
# default user role.
SYSTEM_ROLE_ID = "s1"
DEFAULT_USER_ROLE_ID = "u1"
DEFAULT_INTROSPECTION_INTERVAL_NS = 1_000_000_000


class _Json:
    """``to_json``/``from_json`` for flat dataclasses; a missing field is a named error."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        missing = names - set(value)
        if missing:
            raise KeyError(f"{cls.__name__} is missing {', '.join(sorted(missing))}")
        return cls(**{name: value[name] for name in names})


@dataclass(frozen=True)
class Cluster(_Json):
    id: str
    name: str
    owner_id: str
    managed: bool
    # Size of each replica of a managed cluster; empty when unmanaged.
    size: str
    replication_factor: int
    # 0 disables introspection.
    introspection_interval_ns: int
    introspection_debugging: bool

    def to_proto(self) -> catalog_pb2.Cluster:
        return catalog_pb2.Cluster(**self.to_json())

    @classmethod
    def from_proto(cls, message: catalog_pb2.Cluster) -> Cluster:
        return cls(
            id=message.id,
            name=message.name,
            owner_id=message.owner_id,
            managed=message.managed,
            size=message.size,
            replication_factor=message.replication_factor,
            introspection_interval_ns=message.introspection_interval_ns,
            introspection_debugging=message.introspection_debugging,
        )


@dataclass(frozen=True)
class ClusterReplica(_Json):
    id: str
    name: str
    cluster_id: str
    size: str
    owner_id: str
    # Log variant name -> collection id of the replica's introspection sink.
    log_collections: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "log_collections": dict(self.log_collections)}

    def to_proto(self) -> catalog_pb2.ClusterReplica:
        return catalog_pb2.ClusterReplica(**self.to_json())

    @classmethod
    def from_proto(cls, message: catalog_pb2.ClusterReplica) -> ClusterReplica:
        return cls(
            id=message.id,
            name=message.name,
            cluster_id=message.cluster_id,
            size=message.size,
            owner_id=message.owner_id,
            log_collections=dict(message.log_collections),
        )


@dataclass(frozen=True)
class Change:
    """One effect of a committed transaction, in the order it happened."""

    kind: str  # one of CHANGE_KINDS
    object: Cluster | ClusterReplica

    def to_proto(self) -> catalog_pb2.CatalogChange:
        return catalog_pb2.CatalogChange(**{self.kind: self.object.to_proto()})


CHANGE_KINDS = ("cluster_created", "replica_created", "cluster_dropped", "replica_dropped")


@dataclass(frozen=True)
class FenceToken:
    """Who may write: bumped by every writable open, checked by every commit."""

    deploy_generation: int
    epoch: int

    def __str__(self) -> str:
        return f"(deploy_generation={self.deploy_generation}, epoch={self.epoch})"


@dataclass(frozen=True)
class CatalogSnapshot:
    """The whole catalog as of ``timestamp`` (the last commit)."""

    fence: FenceToken
    timestamp: int
    clusters: tuple[Cluster, ...]
    replicas: tuple[ClusterReplica, ...]

    def to_proto(self) -> catalog_pb2.CatalogSnapshot:
        return catalog_pb2.CatalogSnapshot(
            epoch=self.fence.epoch,
            deploy_generation=self.fence.deploy_generation,
            timestamp=self.timestamp,
            clusters=[c.to_proto() for c in self.clusters],
            replicas=[r.to_proto() for r in self.replicas],
        )
