"""Transactions over the catalog: the rules of every operation, once for every backend.

A ``Transaction`` overlays its changes on a committed ``CatalogState``. Each
operation validates against what the transaction has done so far and raises
``LoupeError`` (with a SQLSTATE) when it cannot apply, so a failed
transaction leaves nothing behind. ``DurableCatalogState.commit_transaction``
then seals it (appending its audit events, stamped with the commit's
timestamp) and makes its writes durable at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from loupe import sizes
from loupe.catalog.kinds import KINDS, kind_named
from loupe.catalog.migrations import Write
from loupe.catalog.objects import (
    DEFAULT_USER_ROLE_ID,
    SYSTEM_ROLE_ID,
    AuditEvent,
    Change,
    Cluster,
    ClusterKey,
    ClusterReplica,
    ClusterReplicaKey,
    Database,
    IdAllocator,
    IdAllocatorKey,
    Item,
    ItemKey,
    Role,
    Schema,
    Setting,
    StorageUsage,
    SystemConfiguration,
    SystemConfigurationKey,
    SystemObjectMapping,
)
from loupe.catalog.state import CatalogState, TableTransaction
from loupe.common.errors import LoupeError, SqlState

INVALID_NAME = "42602"
DUPLICATE_DATABASE = "42P04"
DUPLICATE_SCHEMA = "42P06"

# Allocator name -> id prefix. Each allocator holds the next id to hand out.
ALLOCATORS = {
    "system_role": "s",
    "user_role": "u",
    "user_database": "u",
    "system_schema": "s",
    "user_schema": "u",
    "system_cluster": "s",
    "user_cluster": "u",
    "system_replica": "s",
    "user_replica": "u",
    "system_item": "s",
    "user_item": "u",
    "audit_log": "",
    "storage_usage": "",
}
# Builtin collections have static ids below this (``loupe.builtins``).
FIRST_SYSTEM_ITEM_ID = 10_000


def validate_size(size: str) -> str:
    """``size`` if the size table (``loupe.sizes``) lists it; 22023 naming the valid ones if not."""
    return sizes.lookup(size).size


def is_system(obj: Cluster | Role | Schema) -> bool:
    return obj.id.startswith("s")


class Transaction:
    """A batch of catalog operations, applied to an overlay of the committed state."""

    def __init__(self, base: CatalogState, *, user: str = "") -> None:
        self.base = base
        # Recorded as the user of this transaction's audit events.
        self.user = user
        self.changes: list[Change] = []
        # Filled by ``seal``: the events committed with this transaction.
        self.audit_events: list[AuditEvent] = []
        self._tables: dict[str, TableTransaction] = {}
        self._audit: list[tuple[str, str, dict[str, Any]]] = []
        self._sealed = False
        # (schema_id, name) -> key of the items this transaction wrote, valid
        # while the item table's version is `_item_names_version`.
        self._item_names: dict[tuple[str, str], Any] = {}
        self._item_names_version = 0

    def table(self, kind: str) -> TableTransaction:
        """The pending view of one kind (e.g. ``"cluster"``)."""
        table = self._tables.get(kind)
        if table is None:
            table = self._tables[kind] = TableTransaction(KINDS[kind], self.base.table(kind))
        return table

    # Reads (including this transaction's own changes)

    def clusters(self) -> list[Cluster]:
        return list(self.table("cluster").values())

    def cluster(self, cluster_id: str) -> Cluster | None:
        return self.table("cluster").get(ClusterKey(cluster_id))  # type: ignore[no-any-return]

    def cluster_by_name(self, name: str) -> Cluster | None:
        return next((c for c in self.table("cluster").values() if c.name == name), None)

    def replicas_of(self, cluster_id: str) -> list[ClusterReplica]:
        return [r for r in self.table("cluster_replica").values() if r.cluster_id == cluster_id]

    # Ids

    def allocate_number(self, allocator: str) -> int:
        """The next number of ``allocator``, which moves on by one."""
        if allocator not in ALLOCATORS:
            raise LoupeError(SqlState.INTERNAL_ERROR, f"unknown id allocator '{allocator}'")
        table = self.table("id_allocator")
        current = table.get(IdAllocatorKey(allocator))
        next_id = current.next_id if current is not None else 1
        table.set(IdAllocator(allocator, next_id + 1))
        return next_id  # type: ignore[no-any-return]

    def allocate_id(self, allocator: str) -> str:
        """The next id of ``allocator``, with its prefix (``s`` or ``u``)."""
        number = self.allocate_number(allocator)  # refuses unknown allocators
        return f"{ALLOCATORS[allocator]}{number}"

    # Clusters and replicas

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
        if self.cluster_by_name(cluster.name) is not None:
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
        self.table("cluster").set(created)
        self.changes.append(Change("cluster_created", created))
        self._record("create", "cluster", _cluster_details(created))
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
            found = self.cluster(replica.cluster_id)
            if found is None:
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT, f"unknown cluster id '{replica.cluster_id}'"
                )
            cluster = found
        self._check_modifiable(cluster)
        return self._add_replica(cluster, replica, system=False)

    def alter_cluster(
        self,
        name: str,
        *,
        introspection_interval_ns: int | None = None,
        introspection_debugging: bool | None = None,
    ) -> Cluster:
        """ALTER CLUSTER name SET/RESET (…): the options given (not None) change.

        Its replicas log as their cluster says: they take the new options too
        (the controller sends them their new logging configuration).
        """
        cluster = self._cluster_named(name)
        self._check_modifiable(cluster)
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("introspection_interval_ns", introspection_interval_ns),
                ("introspection_debugging", introspection_debugging),
            )
            if value is not None
        }
        altered = dataclasses.replace(cluster, **changes)
        self.table("cluster").set(altered)
        for replica in self.replicas_of(cluster.id):
            self.table("cluster_replica").set(dataclasses.replace(replica, **changes))
        self._record("alter", "cluster", {**_cluster_details(altered), **changes})
        return altered

    def drop_cluster(self, name: str, *, if_exists: bool = False) -> Cluster | None:
        """Drop the cluster named ``name``, its replicas and its introspection indexes."""
        cluster = self.cluster_by_name(name)
        if cluster is None:
            if if_exists:
                return None
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name}'")
        self._check_modifiable(cluster)
        for replica in self.replicas_of(cluster.id):
            self._remove_replica(cluster, replica)
        indexes = self.table("introspection_source_index")
        for key, index in list(indexes.items()):
            if index.cluster_id == cluster.id:
                indexes.delete(key)
        self.table("cluster").delete(ClusterKey(cluster.id))
        self.changes.append(Change("cluster_dropped", cluster))
        self._record("drop", "cluster", _cluster_details(cluster))
        return cluster

    def drop_replica(
        self, cluster_name: str, replica_name: str, *, if_exists: bool = False
    ) -> ClusterReplica | None:
        cluster = self.cluster_by_name(cluster_name)
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
        self._remove_replica(cluster, replica)
        return replica

    # Databases, schemas, roles, items

    def create_database(self, name: str, *, owner_id: str = "") -> Database:
        """Create a database and its ``public`` schema."""
        if not name:
            raise LoupeError(INVALID_NAME, "database name must not be empty")
        if any(d.name == name for d in self.table("database").values()):
            raise LoupeError(DUPLICATE_DATABASE, f'database "{name}" already exists')
        database = Database(
            self.allocate_id("user_database"), name, owner_id or DEFAULT_USER_ROLE_ID
        )
        self.table("database").set(database)
        self.create_schema("public", database.id, owner_id=database.owner_id)
        return database

    def create_schema(
        self, name: str, database_id: str, *, owner_id: str = "", system: bool = False
    ) -> Schema:
        """Create a schema in ``database_id`` (empty: an ambient system schema)."""
        if not name:
            raise LoupeError(INVALID_NAME, "schema name must not be empty")
        if database_id and self.table("database").get(_key("database", database_id)) is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown database id '{database_id}'")
        if any(
            s.name == name and s.database_id == database_id for s in self.table("schema").values()
        ):
            raise LoupeError(DUPLICATE_SCHEMA, f'schema "{name}" already exists')
        prefix = "system" if system else "user"
        schema = Schema(
            self.allocate_id(f"{prefix}_schema"),
            name,
            database_id,
            owner_id or (SYSTEM_ROLE_ID if system else DEFAULT_USER_ROLE_ID),
        )
        self.table("schema").set(schema)
        return schema

    def create_role(
        self,
        name: str,
        *,
        superuser: bool = False,
        inherit: bool = True,
        login: bool = True,
        password_hash: str = "",
        system: bool = False,
        audited: bool = True,
    ) -> Role:
        if not name:
            raise LoupeError(INVALID_NAME, "role name must not be empty")
        if name.upper() == "PUBLIC" or any(r.name == name for r in self.table("role").values()):
            raise LoupeError(SqlState.DUPLICATE_OBJECT, f'role "{name}" already exists')
        if not system and (name.startswith(("mz_", "pg_")) or name.upper() == "NONE"):
            raise LoupeError(SqlState.RESERVED_NAME, f'role name "{name}" is reserved')
        prefix = "system" if system else "user"
        role = Role(
            self.allocate_id(f"{prefix}_role"),
            name,
            inherit,
            superuser,
            login=login,
            password_hash=password_hash,
        )
        self.table("role").set(role)
        if audited and not system:
            self._record("create", "role", _role_details(role))
        return role

    def role_by_name(self, name: str) -> Role | None:
        return next((r for r in self.table("role").values() if r.name == name), None)

    def _role_named(self, name: str) -> Role:
        role = self.role_by_name(name)
        if role is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f'role "{name}" does not exist')
        return role

    @staticmethod
    def _check_user_role(role: Role, action: str) -> None:
        if role.id.startswith("s"):
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE, f'cannot {action} system role "{role.name}"'
            )

    def alter_role(
        self,
        name: str,
        *,
        superuser: bool | None = None,
        login: bool | None = None,
        inherit: bool | None = None,
        password_hash: str | None = None,
    ) -> Role:
        """ALTER ROLE name WITH …: the attributes given (not None) change."""
        role = self._role_named(name)
        self._check_user_role(role, "alter")
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("superuser", superuser),
                ("login", login),
                ("inherit", inherit),
                ("password_hash", password_hash),
            )
            if value is not None
        }
        altered = dataclasses.replace(role, **changes)
        self.table("role").set(altered)
        details = _role_details(altered) | {
            key: (value if key != "password_hash" else bool(value))
            for key, value in changes.items()
        }
        self._record("alter", "role", details)
        return altered

    def drop_role(self, name: str, *, if_exists: bool = False) -> Role | None:
        """DROP ROLE: refused while it owns objects; its memberships go with it."""
        role = self.role_by_name(name)
        if role is None:
            if if_exists:
                return None
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f'role "{name}" does not exist')
        self._check_user_role(role, "drop")
        owned = sorted(
            f"{kind} {obj.name}"
            for kind in ("cluster", "cluster_replica", "database", "schema", "item")
            for obj in self.table(kind).values()
            if getattr(obj, "owner_id", None) == role.id
        )
        if owned:
            raise LoupeError(
                SqlState.DEPENDENT_OBJECTS_STILL_EXIST,
                f'role "{name}" cannot be dropped because some objects depend on it',
                detail="owner of " + ", ".join(owned),
            )
        roles = self.table("role")
        roles.delete(_key("role", role.id))
        for other in list(roles.values()):
            if role.id in other.membership:
                membership = {k: v for k, v in other.membership.items() if k != role.id}
                roles.set(dataclasses.replace(other, membership=membership))
        self._record("drop", "role", _role_details(role))
        return role

    def grant_role(self, role_name: str, member_name: str, grantor_name: str) -> Role:
        """GRANT role TO member; granting a membership that exists changes nothing."""
        role = self._role_named(role_name)
        member = self._role_named(member_name)
        grantor = self.role_by_name(grantor_name)
        if role.id == member.id or self._is_member(role, member.id):
            raise LoupeError(
                SqlState.INVALID_GRANT_OPERATION,
                f'role "{member.name}" is a member of role "{role.name}"'
                if role.id != member.id
                else f'role "{role.name}" cannot be granted to itself',
            )
        if role.id in member.membership:
            return member
        membership = {**member.membership, role.id: grantor.id if grantor else role.id}
        granted = dataclasses.replace(member, membership=membership)
        self.table("role").set(granted)
        self._record(
            "grant",
            "role",
            {"role_id": role.id, "member_id": member.id, "grantor_id": membership[role.id]},
        )
        return granted

    def revoke_role(self, role_name: str, member_name: str) -> Role:
        """REVOKE role FROM member; revoking a membership that does not exist changes nothing."""
        role = self._role_named(role_name)
        member = self._role_named(member_name)
        if role.id not in member.membership:
            return member
        grantor = member.membership[role.id]
        membership = {k: v for k, v in member.membership.items() if k != role.id}
        revoked = dataclasses.replace(member, membership=membership)
        self.table("role").set(revoked)
        self._record(
            "revoke", "role", {"role_id": role.id, "member_id": member.id, "grantor_id": grantor}
        )
        return revoked

    def _is_member(self, role: Role, of: str) -> bool:
        """Whether ``role`` is, directly or through other roles, a member of role id ``of``."""
        by_id = {r.id: r for r in self.table("role").values()}
        seen: set[str] = set()
        pending = list(role.membership)
        while pending:
            current = pending.pop()
            if current == of:
                return True
            if current in seen or current not in by_id:
                continue
            seen.add(current)
            pending.extend(by_id[current].membership)
        return False

    def create_item(self, item: Item, *, system: bool = False) -> Item:
        """Create a table, view, index, … in ``item.schema_id``; the id is allocated here."""
        if not item.name:
            raise LoupeError(INVALID_NAME, "name must not be empty")
        try:
            item.validate()
        except ValueError as error:
            raise LoupeError(SqlState.INVALID_PARAMETER_VALUE, str(error)) from None
        if self.table("schema").get(_key("schema", item.schema_id)) is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown schema id '{item.schema_id}'")
        if item.cluster_id and self.cluster(item.cluster_id) is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster id '{item.cluster_id}'")
        if self._item_named(item.schema_id, item.name) is not None:
            raise LoupeError(SqlState.DUPLICATE_OBJECT, f'"{item.name}" already exists')
        created = dataclasses.replace(
            item,
            id=self.allocate_id("system_item" if system else "user_item"),
            owner_id=item.owner_id or (SYSTEM_ROLE_ID if system else DEFAULT_USER_ROLE_ID),
        )
        names = self._pending_item_names()
        items = self.table("item")
        items.set(created)
        # Keep the index current instead of rebuilding it for the next item.
        names[(created.schema_id, created.name)] = ItemKey(created.id)
        self._item_names_version = items.version
        self.changes.append(Change("item_created", created))
        self._record("create", created.type, self._item_details(created))
        return created

    def drop_item(self, item_id: str) -> Item:
        dropped = self.table("item").delete(ItemKey(item_id))
        if dropped is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown item id '{item_id}'")
        self.changes.append(Change("item_dropped", dropped))
        self._record("drop", dropped.type, self._item_details(dropped))
        return dropped  # type: ignore[no-any-return]

    def _item_details(self, item: Item) -> dict[str, Any]:
        """Materialize's ``IdFullNameV1``: the id and the fully qualified name."""
        schema = self.table("schema").get(_key("schema", item.schema_id))
        database = (
            self.table("database").get(_key("database", schema.database_id))
            if schema is not None and schema.database_id
            else None
        )
        return {
            "id": item.id,
            "name": {
                "database": database.name if database is not None else "",
                "schema": schema.name if schema is not None else "",
                "item": item.name,
            },
        }

    # Configuration and bookkeeping

    def set_system_configuration(self, name: str, value: str | None) -> None:
        """``ALTER SYSTEM SET name = value``; None resets it (removes the stored value)."""
        table = self.table("system_configuration")
        if value is None:
            table.delete(SystemConfigurationKey(name))
        else:
            table.set(SystemConfiguration(name, value))

    def set_setting(self, name: str, value: str) -> None:
        self.table("setting").set(Setting(name, value))

    def add_storage_usage(
        self, shard_id: str, size_bytes: int, collection_timestamp: int
    ) -> StorageUsage:
        usage = StorageUsage(
            self.allocate_number("storage_usage"), shard_id, size_bytes, collection_timestamp
        )
        self.table("storage_usage").set(usage)
        return usage

    def set_system_object_mappings(self, mappings: Iterable[SystemObjectMapping]) -> None:
        table = self.table("system_object_mapping")
        for mapping in mappings:
            table.set(mapping)

    def edit_raw(self, kind_name: str, key_json: str, value_json: str | None) -> str | None:
        """Replace (or, with None, delete) one object given as stored JSON.

        Returns the old value JSON, None if there was none. The key and value
        must decode as the kind's dataclasses (``ObjectFormatError``
        otherwise): a bad value is refused, never stored.
        """
        kind = kind_named(kind_name)
        key = kind.parse_key(key_json)
        table = self.table(kind_name)
        if value_json is None:
            old = table.delete(key)
        else:
            old = table.set(kind.parse_value(key, value_json))
        return None if old is None else kind.encode_value(old)

    # Committing

    def seal(self, timestamp: int) -> list[AuditEvent]:
        """Append this transaction's audit events, stamped with the commit's ``timestamp``."""
        if self._sealed:
            raise LoupeError(SqlState.INTERNAL_ERROR, "transaction was already committed")
        self._sealed = True
        table = self.table("audit_log")
        for event_type, object_type, details in self._audit:
            event = AuditEvent(
                id=self.allocate_number("audit_log"),
                event_type=event_type,
                object_type=object_type,
                details=details,
                user=self.user,
                occurred_at=timestamp,
            )
            table.set(event)
            self.audit_events.append(event)
        return self.audit_events

    def pending(self) -> dict[str, dict[Any, Any]]:
        """Kind -> key -> new object (None: deleted), for every real change."""
        return {name: t.changes() for name, t in self._tables.items()}

    def writes(self) -> list[Write]:
        """The rows to store, kind by kind."""
        return [w for name in KINDS if name in self._tables for w in self._tables[name].writes()]

    # Helpers

    def _record(self, event_type: str, object_type: str, details: dict[str, Any]) -> None:
        self._audit.append((event_type, object_type, details))

    def _cluster_named(self, name: str) -> Cluster:
        cluster = self.cluster_by_name(name)
        if cluster is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name}'")
        return cluster

    def _replica_named(self, cluster: Cluster, name: str) -> ClusterReplica | None:
        return next((r for r in self.replicas_of(cluster.id) if r.name == name), None)

    def _item_named(self, schema_id: str, name: str) -> Item | None:
        items = self.table("item")
        for key in (
            self._pending_item_names().get((schema_id, name)),
            self.base.item_names().get((schema_id, name)),
        ):
            item = None if key is None else items.get(key)
            # An index entry may be stale: the item was renamed or dropped since.
            if item is not None and (item.schema_id, item.name) == (schema_id, name):
                return item  # type: ignore[no-any-return]
        return None

    def _pending_item_names(self) -> dict[tuple[str, str], Any]:
        items = self.table("item")
        if self._item_names_version != items.version:
            self._item_names = {
                (i.schema_id, i.name): key for key, i in items.pending.items() if i is not None
            }
            self._item_names_version = items.version
        return self._item_names

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
            # A replica logs as its cluster says, from its creation on.
            introspection_interval_ns=cluster.introspection_interval_ns,
            introspection_debugging=cluster.introspection_debugging,
        )
        self.table("cluster_replica").set(created)
        self.changes.append(Change("replica_created", created))
        self._record(
            "create",
            "cluster-replica",
            {**_replica_details(cluster, created), "logical_size": created.size},
        )
        return created

    def _remove_replica(self, cluster: Cluster, replica: ClusterReplica) -> None:
        self.table("cluster_replica").delete(ClusterReplicaKey(replica.id))
        self.changes.append(Change("replica_dropped", replica))
        self._record("drop", "cluster-replica", _replica_details(cluster, replica))


def _key(kind: str, object_id: str) -> Any:
    return KINDS[kind].key_type(object_id)


def _cluster_details(cluster: Cluster) -> dict[str, Any]:
    return {
        "id": cluster.id,
        "name": cluster.name,
        "managed": cluster.managed,
        "size": cluster.size,
        "replication_factor": cluster.replication_factor,
    }


def _replica_details(cluster: Cluster, replica: ClusterReplica) -> dict[str, Any]:
    return {
        "cluster_id": cluster.id,
        "cluster_name": cluster.name,
        "replica_id": replica.id,
        "replica_name": replica.name,
    }


def _role_details(role: Role) -> dict[str, Any]:
    return {"id": role.id, "name": role.name}
