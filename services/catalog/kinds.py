"""The kinds of stored catalog objects, and how each is stored as a row.

A row is ``(kind, key JSON, value JSON)``: the key is the JSON object of the
kind's key dataclass, the value the JSON object of the object's other fields
(the key's fields are not repeated). Both are canonical (sorted keys, no
spaces), so equal objects are stored as equal text. The kind names are the
ones ``loupe catalog dump`` shows and ``loupe catalog edit`` takes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loupe.catalog import objects as o

K = TypeVar("K")
V = TypeVar("V")


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value that the catalog stores."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class ObjectFormatError(ValueError):
    """A key or value that does not decode as its kind's dataclass."""


@dataclass(frozen=True)
class ObjectKind(Generic[K, V]):
    """One kind of stored object: its name, key type and object type."""

    name: str
    key_type: type[K]
    value_type: type[V]
    # Hints at what the kind holds, for ``loupe catalog`` help.
    description: str

    @property
    def key_fields(self) -> tuple[str, ...]:
        return self.key_type.field_names()  # type: ignore[attr-defined]

    def key_of(self, value: V) -> K:
        return self.key_type(**{name: getattr(value, name) for name in self.key_fields})

    # Storage form

    def encode_key(self, key: K) -> str:
        return canonical_json(key.to_json())  # type: ignore[attr-defined]

    def encode_value(self, value: V) -> str:
        plain = value.to_json()  # type: ignore[attr-defined]
        for name in self.key_fields:
            del plain[name]
        return canonical_json(plain)

    def decode(self, key_json: str, value_json: str) -> tuple[K, V]:
        """The key and object of a stored row; ``ObjectFormatError`` if it does not decode."""
        key = self.parse_key(key_json)
        return key, self.parse_value(key, value_json)

    def parse_key(self, key_json: str) -> K:
        try:
            return self.key_type.from_json(json.loads(key_json))  # type: ignore[attr-defined,no-any-return]
        except ValueError as error:
            raise ObjectFormatError(f"bad {self.name} key {key_json!r}: {error}") from None

    def parse_value(self, key: K, value_json: str) -> V:
        try:
            plain = json.loads(value_json)
            if not isinstance(plain, dict):
                raise ValueError(f"expected a JSON object, not {value_json[:60]!r}")
            repeated = sorted(set(plain) & set(self.key_fields))
            if repeated:
                raise ValueError(
                    f"the value repeats the key field(s) {', '.join(repeated)}; "
                    "key fields belong in the key"
                )
            return self.value_type.from_json({**plain, **key.to_json()})  # type: ignore[attr-defined,no-any-return]
        except ValueError as error:
            raise ObjectFormatError(
                f"bad {self.name} value {value_json[:200]!r}: {error}"
            ) from None


def _kind(name: str, key_type: type, value_type: type, description: str) -> ObjectKind[Any, Any]:
    return ObjectKind(name, key_type, value_type, description)


KINDS: dict[str, ObjectKind[Any, Any]] = {
    kind.name: kind
    for kind in (
        _kind("database", o.DatabaseKey, o.Database, "databases"),
        _kind("schema", o.SchemaKey, o.Schema, "schemas (ambient ones have no database)"),
        _kind("role", o.RoleKey, o.Role, "roles"),
        _kind("cluster", o.ClusterKey, o.Cluster, "clusters"),
        _kind("cluster_replica", o.ClusterReplicaKey, o.ClusterReplica, "cluster replicas"),
        _kind("item", o.ItemKey, o.Item, "tables, views, materialized views, indexes, sources"),
        _kind(
            "introspection_source_index",
            o.IntrospectionSourceIndexKey,
            o.IntrospectionSourceIndex,
            "per-cluster indexes on introspection sources",
        ),
        _kind("id_allocator", o.IdAllocatorKey, o.IdAllocator, "next id of each id space"),
        _kind(
            "system_configuration",
            o.SystemConfigurationKey,
            o.SystemConfiguration,
            "system variables (ALTER SYSTEM SET)",
        ),
        _kind("setting", o.SettingKey, o.Setting, "catalog settings (catalog_content_version)"),
        _kind("audit_log", o.AuditLogKey, o.AuditEvent, "audit events"),
        _kind("storage_usage", o.StorageUsageKey, o.StorageUsage, "storage usage samples"),
        _kind(
            "system_object_mapping",
            o.SystemObjectMappingKey,
            o.SystemObjectMapping,
            "global ids of builtin objects",
        ),
        _kind(
            "default_privilege",
            o.DefaultPrivilegeKey,
            o.DefaultPrivilege,
            "default privileges",
        ),
        _kind("system_privilege", o.SystemPrivilegeKey, o.SystemPrivilege, "system privileges"),
    )
}


def kind_named(name: str) -> ObjectKind[Any, Any]:
    """The kind called ``name``; an error listing the kinds otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise ObjectFormatError(
            f"unknown object kind {name!r}; the kinds are: {', '.join(KINDS)}"
        ) from None


_DIGITS = re.compile(r"(\d+)")


def natural_order(key: Any) -> tuple[Any, ...]:
    """Sort key for keys: ``s1 < s2 < s10 < u1``, integers numerically."""
    parts: list[Any] = []
    for value in key.to_json().values():
        if isinstance(value, int):
            parts.append(("", value))
        else:
            pieces = _DIGITS.split(str(value))
            parts.append(tuple(int(p) if i % 2 else p for i, p in enumerate(pieces)))
    return tuple(parts)


def sorted_objects(table: dict[Any, V] | Iterable[tuple[Any, V]]) -> list[V]:
    """The objects of a table, in their keys' natural order."""
    items = table.items() if isinstance(table, dict) else table
    return [value for _, value in sorted(items, key=lambda kv: natural_order(kv[0]))]


def object_rows(objects: Iterable[Any]) -> list[tuple[str, str, str]]:
    """``objects`` (of any kinds) as stored rows, e.g. to bulk-load a catalog."""
    by_type = {kind.value_type: kind for kind in KINDS.values()}
    rows = []
    for obj in objects:
        kind = by_type[type(obj)]
        rows.append((kind.name, kind.encode_key(kind.key_of(obj)), kind.encode_value(obj)))
    return rows
