"""What a new catalog holds.

- roles ``mz_system`` (s1, superuser), ``mz_monitor`` (s2),
  ``mz_monitor_redacted`` (s3) and ``materialize`` (u1, the default superuser);
- ambient schemas ``mz_catalog``, ``mz_internal``, ``mz_introspection``,
  ``pg_catalog`` (s1-s4), database ``materialize`` (u1) with schema ``public`` (u1);
- clusters ``mz_catalog_server`` (s1) and ``quickstart`` (u1), managed, SIZE
  '1', one replica ``r1`` each — and the audit events of their creation;
- the system privileges of ``mz_system``, ``PUBLIC``'s usage of types, the
  ``catalog_content_version`` setting and every id allocator.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata

from loupe.builtins import BUILTIN_COLLECTIONS, DEFAULT_CLUSTER_NAME, SYSTEM_CLUSTER_NAME
from loupe.catalog.objects import (
    DEFAULT_INTROSPECTION_INTERVAL_NS,
    DEFAULT_USER_ROLE_ID,
    PUBLIC_ROLE_ID,
    SYSTEM_ROLE_ID,
    Cluster,
    DefaultPrivilege,
    IdAllocator,
    SystemObjectMapping,
    SystemPrivilege,
)
from loupe.catalog.state import CatalogState
from loupe.catalog.transaction import FIRST_SYSTEM_ITEM_ID, Transaction

AMBIENT_SCHEMAS = ("mz_catalog", "mz_internal", "mz_introspection", "pg_catalog")
DEFAULT_DATABASE_NAME = "materialize"
# System privileges: CREATEROLE, CREATEDB, CREATECLUSTER.
ALL_SYSTEM_PRIVILEGES = "RBN"


def content_version() -> str:
    """The Loupe version that wrote the catalog's content."""
    try:
        return metadata.version("loupe")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def bootstrap_state(timestamp: int) -> CatalogState:
    """The state of a new catalog; its audit events occurred at ``timestamp``."""
    tx = Transaction(CatalogState())
    tx.create_role("mz_system", superuser=True, system=True)
    tx.create_role("mz_monitor", login=False, system=True)
    tx.create_role("mz_monitor_redacted", login=False, system=True)
    # The default superuser exists before anyone could have created it: no event.
    tx.create_role(DEFAULT_DATABASE_NAME, superuser=True, audited=False)
    for name in AMBIENT_SCHEMAS:
        tx.create_schema(name, "", system=True)
    tx.create_database(DEFAULT_DATABASE_NAME, owner_id=DEFAULT_USER_ROLE_ID)
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
    tx.table("system_privilege").set(
        SystemPrivilege(SYSTEM_ROLE_ID, SYSTEM_ROLE_ID, ALL_SYSTEM_PRIVILEGES)
    )
    tx.table("default_privilege").set(
        DefaultPrivilege(PUBLIC_ROLE_ID, "", "", "type", PUBLIC_ROLE_ID, "U")
    )
    tx.set_setting("catalog_content_version", content_version())
    allocators = tx.table("id_allocator")
    for name, first in (("system_item", FIRST_SYSTEM_ITEM_ID), ("user_item", 1)):
        allocators.set(IdAllocator(name, first))
    allocators.set(IdAllocator("storage_usage", 1))
    tx.seal(timestamp)
    return CatalogState().updated(tx.pending())


def builtin_object_mappings() -> list[SystemObjectMapping]:
    """The global ids of Loupe's builtin collections, with a fingerprint of their columns.

    Stored by the catalog service at start, so a builtin whose definition
    changed between versions can be told from one that did not.
    """
    return [
        SystemObjectMapping(
            schema_name=collection.schema,
            object_type="source",
            object_name=collection.name,
            id=collection.id,
            fingerprint=hashlib.sha256(json.dumps(collection.columns).encode()).hexdigest()[:16],
        )
        for collection in BUILTIN_COLLECTIONS
    ]
