"""Catalog migrations: versioned layouts with upgrade functions.

The stored catalog carries a version. Opening it runs, in memory and in
order, every upgrade from the stored version to ``CATALOG_VERSION``; the
resulting writes are committed in the same atomic write as the epoch bump of
a writable open, and never committed by a read-only or savepoint open or by
``check_open`` (``loupe catalog upgrade-check``). A catalog written by a newer
Loupe is refused with a clear error and never rewritten.

An upgrade is a function from the rows of version N to the writes that make
them version N + 1. It works on plain JSON, never on today's dataclasses: an
upgrade must keep doing what it did when it was written, whatever the objects
look like later. Add one by appending to ``UPGRADES`` (``CATALOG_VERSION``
follows).

Versions:

1. Clusters, replicas and id allocators, keyed by bare ids/names
   (``("cluster", "u1", {"id": "u1", …})``).
2. Keys are JSON objects (``{"id": "u1"}``) and values no longer repeat them;
   replicas carry their introspection configuration (copied from their
   cluster); databases, schemas, roles, items, introspection source indexes,
   system configuration, settings, the audit log, storage usage, system object
   mappings and privileges exist, with the objects a new catalog has.
3. Roles say whether they may log in (``login``) and carry a password hash
   (``password_hash``, empty for none): every role could log in before, except
   the two monitoring roles, which are for membership only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import metadata
from typing import Any

from loupe.catalog.errors import CatalogCorruptError, CatalogError

Row = tuple[str, str, str]  # (kind, key JSON, value JSON)
Write = tuple[str, str, str | None]  # (kind, key JSON, value JSON or None to delete)
Upgrade = Callable[[list[Row]], list[Write]]


class CatalogTooNewError(CatalogError):
    """The catalog was written by a newer Loupe than this one."""


def _json(value: Any) -> str:
    # The canonical text form (loupe.catalog.kinds.canonical_json), repeated
    # here so this upgrade never changes with that module.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _id(object_id: str) -> str:
    return _json({"id": object_id})


def _v2_new_objects() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The objects of the kinds added in version 2, as a new version-2 catalog has them."""
    try:
        content_version = metadata.version("loupe")
    except metadata.PackageNotFoundError:  # pragma: no cover - bare checkout
        content_version = "0.0.0"
    roles = [
        ("s1", "mz_system", True),
        ("s2", "mz_monitor", False),
        ("s3", "mz_monitor_redacted", False),
        ("u1", "materialize", True),
    ]
    schemas = [
        ("s1", "mz_catalog", "", "s1"),
        ("s2", "mz_internal", "", "s1"),
        ("s3", "mz_introspection", "", "s1"),
        ("s4", "pg_catalog", "", "s1"),
        ("u1", "public", "u1", "u1"),
    ]
    allocators = {
        "system_role": 4,
        "user_role": 2,
        "user_database": 2,
        "system_schema": 5,
        "user_schema": 2,
        "system_item": 10_000,
        "user_item": 1,
        # Version 1 kept no audit log: the events of earlier DDL are unknown.
        "audit_log": 1,
        "storage_usage": 1,
    }
    objects: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        (
            "role",
            {"id": role_id},
            {"name": name, "inherit": True, "superuser": superuser, "membership": {}},
        )
        for role_id, name, superuser in roles
    ]
    objects += [
        ("schema", {"id": i}, {"name": n, "database_id": d, "owner_id": o})
        for i, n, d, o in schemas
    ]
    objects.append(("database", {"id": "u1"}, {"name": "materialize", "owner_id": "u1"}))
    objects.append(("system_privilege", {"grantee": "s1", "grantor": "s1"}, {"privileges": "RBN"}))
    objects.append(
        (
            "default_privilege",
            {
                "role_id": "p",
                "database_id": "",
                "schema_id": "",
                "object_type": "type",
                "grantee": "p",
            },
            {"privileges": "U"},
        )
    )
    objects.append(("setting", {"name": "catalog_content_version"}, {"value": content_version}))
    objects += [
        ("id_allocator", {"name": name}, {"next_id": next_id})
        for name, next_id in allocators.items()
    ]
    return objects


def upgrade_1_to_2(rows: list[Row]) -> list[Write]:
    """Version 1 -> 2: JSON keys, replica introspection config, the new kinds."""
    writes: list[Write] = []
    clusters: dict[str, dict[str, Any]] = {}
    for kind, key, value in rows:
        if kind == "cluster":
            clusters[key] = json.loads(value)
    for kind, key, value in rows:
        writes.append((kind, key, None))
        if kind == "cluster":
            plain = json.loads(value)
            del plain["id"]
            writes.append((kind, _id(key), _json(plain)))
        elif kind == "cluster_replica":
            plain = json.loads(value)
            del plain["id"]
            cluster = clusters.get(plain["cluster_id"], {})
            plain["introspection_interval_ns"] = cluster.get(
                "introspection_interval_ns", 1_000_000_000
            )
            plain["introspection_debugging"] = cluster.get("introspection_debugging", False)
            writes.append((kind, _id(key), _json(plain)))
        elif kind == "id_allocator":
            writes.append((kind, _json({"name": key}), _json({"next_id": int(json.loads(value))})))
        else:
            raise ValueError(f"version 1 has no object kind {kind!r} ({kind}/{key})")
    writes += [(kind, _json(key), _json(value)) for kind, key, value in _v2_new_objects()]
    return writes


_MEMBERSHIP_ONLY_ROLES = ("mz_monitor", "mz_monitor_redacted")


def upgrade_2_to_3(rows: list[Row]) -> list[Write]:
    """Version 2 -> 3: roles gain ``login`` and ``password_hash``."""
    writes: list[Write] = []
    for kind, key, value in rows:
        if kind != "role":
            continue
        role = json.loads(value)
        role["login"] = role["name"] not in _MEMBERSHIP_ONLY_ROLES
        role["password_hash"] = ""
        writes.append((kind, key, _json(role)))
    return writes


# UPGRADES[n] turns version n + 1 into version n + 2.
UPGRADES: list[Upgrade] = [upgrade_1_to_2, upgrade_2_to_3]
CATALOG_VERSION = 1 + len(UPGRADES)


def apply_writes(rows: list[Row], writes: list[Write]) -> list[Row]:
    """``rows`` after ``writes`` (later writes to the same key win)."""
    table = {(kind, key): value for kind, key, value in rows}
    for kind, key, value in writes:
        if value is None:
            table.pop((kind, key), None)
        else:
            table[(kind, key)] = value
    return [(kind, key, value) for (kind, key), value in sorted(table.items())]


def migrate(version: int, rows: list[Row]) -> tuple[int, list[Write]]:
    """The writes that bring ``rows`` from ``version`` to ``CATALOG_VERSION``."""
    if version > CATALOG_VERSION:
        raise CatalogTooNewError(
            f"the catalog is at version {version}, newer than this Loupe's {CATALOG_VERSION}; "
            "it was written by a newer Loupe: upgrade Loupe (the catalog was left untouched)"
        )
    if version < 1:
        raise CatalogError(f"the catalog has an invalid version {version}")
    writes: list[Write] = []
    current = rows
    for step in range(version, CATALOG_VERSION):
        try:
            step_writes = UPGRADES[step - 1](current)
        except (ValueError, KeyError, TypeError) as error:
            raise CatalogCorruptError(
                f"upgrading the catalog from version {step} to {step + 1} failed "
                f"(the catalog was left untouched): {error!r}"
            ) from error
        current = apply_writes(current, step_writes)
        writes.extend(step_writes)
    return CATALOG_VERSION, _net(rows, writes)


def _net(rows: list[Row], writes: list[Write]) -> list[Write]:
    """``writes`` reduced to their net effect on ``rows``: one write per changed key."""
    if not writes:
        return writes
    before: dict[tuple[str, str], str | None] = {(kind, key): value for kind, key, value in rows}
    after = dict(before)
    for kind, key, value in writes:
        after[(kind, key)] = value
    return [
        (kind, key, value)
        for (kind, key), value in sorted(after.items(), key=lambda kv: kv[0])
        if before.get((kind, key)) != value
    ]
