"""The catalog's objects as Python values, and their wire and storage forms.

Every kind of stored object is a pair of frozen dataclasses: a key (e.g.
``ClusterKey(id)``) and the object itself (e.g. ``Cluster``), whose fields
include the key's. ``loupe.catalog.kinds`` stores an object as its key's JSON
and the JSON of its remaining fields. Domain code works on these dataclasses;
``to_proto``/``from_proto`` are the only place they meet ``catalog_pb2``, and
``to_json``/``from_json`` the only place they meet a backend's storage.
``from_json`` is strict: a missing or unknown field, or a value of the wrong
JSON type, is a ``ValueError`` naming the field.

Audit event details (``AuditEvent.details``), by object type:

- ``cluster``: ``{"id", "name", "managed", "size", "replication_factor"}``;
- ``cluster-replica``: ``{"cluster_id", "cluster_name", "replica_id",
  "replica_name", "logical_size"}`` (``logical_size`` on create only);
- items (``table``, ``view``, ``materialized-view``, ``index``, …, the item's
  type): ``{"id", "name": {"database", "schema", "item"}}`` (Materialize's
  ``IdFullNameV1``; ``database`` is empty for an ambient schema).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from loupe.proto.catalog.v1 import catalog_pb2

# Owners: system objects belong to the system role, the rest default to the
# default user role (the default superuser).
SYSTEM_ROLE_ID = "s1"
MZ_MONITOR_ROLE_ID = "s2"
MZ_MONITOR_REDACTED_ROLE_ID = "s3"
DEFAULT_USER_ROLE_ID = "u1"
# The pseudo-role every role belongs to (as in Materialize); never stored.
PUBLIC_ROLE_ID = "p"
DEFAULT_INTROSPECTION_INTERVAL_NS = 1_000_000_000

ITEM_TYPES = (
    "table",
    "view",
    "materialized-view",
    "index",
    "source",
    "sink",
    "secret",
    "connection",
    "type",
)

_JSON_TYPE_NAMES = {str: "text", int: "an integer", bool: "true or false"}


class _Json:
    """Strict ``to_json``/``from_json`` for flat dataclasses.

    Fields are text, integers, booleans, JSON objects (``Mapping``) or lists
    (``tuple``). ``from_json`` checks each against its annotation so a bad
    hand edit is refused with the field's name instead of being stored.
    """

    _hints: ClassVar[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, value: Any) -> Self:
        if not isinstance(value, Mapping):
            raise ValueError(f"{cls.__name__} must be a JSON object, not {_describe(value)}")
        hints = cls._field_hints()
        missing = [name for name in hints if name not in value]
        if missing:
            raise ValueError(f"{cls.__name__} is missing {', '.join(missing)}")
        unknown = sorted(set(value) - set(hints))
        if unknown:
            raise ValueError(f"{cls.__name__} has unknown field(s) {', '.join(unknown)}")
        kwargs = {
            name: _convert(cls.__name__, name, hint, value[name]) for name, hint in hints.items()
        }
        obj = cls(**kwargs)
        obj.validate()
        return obj

    def validate(self) -> None:
        """Checks beyond JSON types; raise ``ValueError``."""

    @classmethod
    def _field_hints(cls) -> dict[str, Any]:
        hints = cls.__dict__.get("_hints")
        if hints is None:
            resolved = typing.get_type_hints(cls)
            hints = {f.name: resolved[f.name] for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
            cls._hints = hints
        return hints

    @classmethod
    def from_flat_proto(cls, message: Any) -> Self:
        """For kinds whose proto message has exactly the dataclass's fields."""
        return cls(**{name: getattr(message, name) for name in cls.field_names()})

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls._field_hints())


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {json.dumps(value, default=repr)[:60]}"


def _convert(owner: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` checked against ``hint``; containers are copied."""
    origin = typing.get_origin(hint) or hint
    ok: bool
    if hint is str or hint is int or hint is bool:
        ok = isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
        expected = _JSON_TYPE_NAMES[hint]
    elif origin in (Mapping, dict):
        args = typing.get_args(hint)
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
        if ok and args and args[1] is str:
            ok = all(isinstance(v, str) for v in value.values())
            expected = "a JSON object of text values"
        else:
            expected = "a JSON object"
        if ok:
            return dict(value)
    elif origin is tuple:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        expected = "a list of text"
        if ok:
            return tuple(value)
    else:  # pragma: no cover - every field type is one of the above
        raise TypeError(f"{owner}.{name}: unsupported field type {hint}")
    if not ok:
        raise ValueError(f"{owner}.{name} must be {expected}, not {_describe(value)}")
    return value


# Keys


@dataclass(frozen=True, order=True)
class IdKey(_Json):
    """The key of every kind whose objects are named by an id (``s1``, ``u7``)."""

    id: str


class DatabaseKey(IdKey):
    pass


class SchemaKey(IdKey):
    pass


class RoleKey(IdKey):
    pass


class ClusterKey(IdKey):
    pass


class ClusterReplicaKey(IdKey):
    pass


class ItemKey(IdKey):
    pass


@dataclass(frozen=True, order=True)
class NameKey(_Json):
    """The key of kinds whose objects are named by a name."""

    name: str


class IdAllocatorKey(NameKey):
    pass


class SystemConfigurationKey(NameKey):
    pass


class SettingKey(NameKey):
    pass


@dataclass(frozen=True, order=True)
class SequenceKey(_Json):
    """The key of append-only kinds: an id from their allocator."""

    id: int


class AuditLogKey(SequenceKey):
    pass


class StorageUsageKey(SequenceKey):
    pass


@dataclass(frozen=True, order=True)
class IntrospectionSourceIndexKey(_Json):
    cluster_id: str
    name: str


@dataclass(frozen=True, order=True)
class SystemObjectMappingKey(_Json):
    schema_name: str
    object_type: str
    object_name: str


@dataclass(frozen=True, order=True)
class DefaultPrivilegeKey(_Json):
    # Empty database_id/schema_id: the default applies everywhere.
    role_id: str
    database_id: str
    schema_id: str
    object_type: str
    grantee: str


@dataclass(frozen=True, order=True)
class SystemPrivilegeKey(_Json):
    grantee: str
    grantor: str


# Objects


@dataclass(frozen=True)
class Database(_Json):
    id: str
    name: str
    owner_id: str

    def to_proto(self) -> catalog_pb2.Database:
        return catalog_pb2.Database(id=self.id, name=self.name, owner_id=self.owner_id)


@dataclass(frozen=True)
class Schema(_Json):
    id: str
    name: str
    # Empty for ambient schemas (mz_catalog, mz_internal, …).
    database_id: str
    owner_id: str

    def to_proto(self) -> catalog_pb2.Schema:
        return catalog_pb2.Schema(
            id=self.id, name=self.name, database_id=self.database_id, owner_id=self.owner_id
        )


@dataclass(frozen=True)
class Role(_Json):
    id: str
    name: str
    inherit: bool
    superuser: bool
    # Role id -> id of the role that granted the membership.
    membership: Mapping[str, str] = field(default_factory=dict)
    # May open sessions; the monitoring roles are for membership only.
    login: bool = True
    # ``loupe.common.passwords`` hash; empty: the role has no password.
    password_hash: str = ""

    def to_proto(self) -> catalog_pb2.Role:
        return catalog_pb2.Role(
            id=self.id,
            name=self.name,
            inherit=self.inherit,
            superuser=self.superuser,
            login=self.login,
            password_hash=self.password_hash,
            member_of=dict(self.membership),
        )


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
        return cls.from_flat_proto(message)


@dataclass(frozen=True)
class ClusterReplica(_Json):
    id: str
    name: str
    cluster_id: str
    size: str
    owner_id: str
    # The replica's introspection (logging) configuration, taken from its
    # cluster when the replica is created; interval 0 disables it.
    introspection_interval_ns: int = DEFAULT_INTROSPECTION_INTERVAL_NS
    introspection_debugging: bool = False
    # Log variant name -> collection id of the replica's introspection sink.
    log_collections: Mapping[str, str] = field(default_factory=dict)

    def to_proto(self) -> catalog_pb2.ClusterReplica:
        return catalog_pb2.ClusterReplica(
            id=self.id,
            name=self.name,
            cluster_id=self.cluster_id,
            size=self.size,
            owner_id=self.owner_id,
            log_collections=dict(self.log_collections),
        )

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
class Item(_Json):
    """A table, view, materialized view, index, source, …: its ``CREATE`` statement."""

    id: str
    schema_id: str
    name: str
    type: str  # one of ITEM_TYPES
    owner_id: str
    create_sql: str
    # The cluster that maintains it (indexes, materialized views); else empty.
    cluster_id: str = ""

    def validate(self) -> None:
        if self.type not in ITEM_TYPES:
            raise ValueError(f"Item.type must be one of {', '.join(ITEM_TYPES)}, not {self.type!r}")

    def to_proto(self) -> catalog_pb2.Item:
        return catalog_pb2.Item(**self.to_json())

    @classmethod
    def from_proto(cls, message: catalog_pb2.Item) -> Item:
        return cls.from_flat_proto(message)


@dataclass(frozen=True)
class IntrospectionSourceIndex(_Json):
    """The index on one introspection source (log variant) of one cluster."""

    cluster_id: str
    name: str
    index_id: str


@dataclass(frozen=True)
class IdAllocator(_Json):
    name: str
    # The next id to hand out.
    next_id: int


@dataclass(frozen=True)
class SystemConfiguration(_Json):
    """A system variable set with ``ALTER SYSTEM SET``: its value as text."""

    name: str
    value: str


@dataclass(frozen=True)
class Setting(_Json):
    """Catalog bookkeeping, e.g. ``catalog_content_version``."""

    name: str
    value: str


@dataclass(frozen=True)
class AuditEvent(_Json):
    id: int
    event_type: str  # create, drop, alter, grant, revoke, …
    object_type: str  # cluster, cluster-replica, …
    details: Mapping[str, Any]
    # Who asked (TransactRequest.user); empty for the system itself.
    user: str
    # Milliseconds since the Unix epoch: the timestamp of the commit.
    occurred_at: int

    def to_proto(self) -> catalog_pb2.AuditEvent:
        return catalog_pb2.AuditEvent(
            id=self.id,
            event_type=self.event_type,
            object_type=self.object_type,
            details_json=json.dumps(dict(self.details), sort_keys=True),
            user=self.user,
            occurred_at=self.occurred_at,
        )


@dataclass(frozen=True)
class StorageUsage(_Json):
    id: int
    shard_id: str
    size_bytes: int
    # When the size was measured (milliseconds since the Unix epoch).
    collection_timestamp: int


@dataclass(frozen=True)
class SystemObjectMapping(_Json):
    """Which global id a builtin object has, and the fingerprint of its definition."""

    schema_name: str
    object_type: str
    object_name: str
    id: str
    fingerprint: str


@dataclass(frozen=True)
class DefaultPrivilege(_Json):
    role_id: str
    database_id: str
    schema_id: str
    object_type: str
    grantee: str
    # ACL mode letters as in PostgreSQL (r, a, w, d, U, C, …).
    privileges: str


@dataclass(frozen=True)
class SystemPrivilege(_Json):
    grantee: str
    grantor: str
    # R (CREATEROLE), B (CREATEDB), N (CREATECLUSTER).
    privileges: str


# Changes, fencing, snapshots


@dataclass(frozen=True)
class Change:
    """One effect of a committed transaction, in the order it happened."""

    kind: str  # one of CHANGE_KINDS
    object: Cluster | ClusterReplica | Item

    def to_proto(self) -> catalog_pb2.CatalogChange:
        return catalog_pb2.CatalogChange(**{self.kind: self.object.to_proto()})


CHANGE_KINDS = (
    "cluster_created",
    "replica_created",
    "cluster_dropped",
    "replica_dropped",
    "item_created",
    "item_dropped",
)


@dataclass(frozen=True)
class FenceToken:
    """Who may write: bumped by every writable open, checked by every commit."""

    deploy_generation: int
    epoch: int

    def __str__(self) -> str:
        return f"(deploy_generation={self.deploy_generation}, epoch={self.epoch})"


@dataclass(frozen=True)
class CatalogSnapshot:
    """The catalog's shared objects as of ``timestamp`` (the last commit)."""

    fence: FenceToken
    timestamp: int
    clusters: tuple[Cluster, ...]
    replicas: tuple[ClusterReplica, ...]
    databases: tuple[Database, ...] = ()
    schemas: tuple[Schema, ...] = ()
    roles: tuple[Role, ...] = ()
    # The audit events of the commit that produced this snapshot, if any.
    new_audit_events: tuple[AuditEvent, ...] = ()
    items: tuple[Item, ...] = ()
    # ALTER SYSTEM SET values (name -> value); unset variables have their defaults.
    system_configuration: tuple[SystemConfiguration, ...] = ()

    def to_proto(self) -> catalog_pb2.CatalogSnapshot:
        return catalog_pb2.CatalogSnapshot(
            epoch=self.fence.epoch,
            deploy_generation=self.fence.deploy_generation,
            timestamp=self.timestamp,
            clusters=[c.to_proto() for c in self.clusters],
            replicas=[r.to_proto() for r in self.replicas],
            databases=[d.to_proto() for d in self.databases],
            schemas=[s.to_proto() for s in self.schemas],
            roles=[r.to_proto() for r in self.roles],
            new_audit_events=[e.to_proto() for e in self.new_audit_events],
            items=[i.to_proto() for i in self.items],
            system_configuration={c.name: c.value for c in self.system_configuration},
        )
