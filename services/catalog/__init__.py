"""The durable catalog: every object kind, stored behind an epoch fence.

``DurableCatalogState`` is the interface (seed 004); backends are
``loupe.catalog_backends`` plugins (``stash-sqlite`` is built in), made with
``create_backend``. Objects are the dataclasses of ``loupe.catalog.objects``,
stored as the kinds of ``loupe.catalog.kinds``. The service
(``loupe.catalog.service``) serves the catalog over NATS and gRPC; ``loupe
catalog`` (``loupe.catalog.debug_tool``) inspects and edits it.
"""

from loupe.catalog.durable import DurableCatalogState, OpenCheck, create_backend
from loupe.catalog.errors import (
    CatalogCorruptError,
    CatalogError,
    CatalogNotInitializedError,
    CatalogReadOnlyError,
    FencedError,
)
from loupe.catalog.kinds import KINDS, ObjectFormatError, ObjectKind
from loupe.catalog.migrations import CATALOG_VERSION, CatalogTooNewError
from loupe.catalog.objects import (
    AuditEvent,
    CatalogSnapshot,
    Change,
    Cluster,
    ClusterReplica,
    Database,
    FenceToken,
    Item,
    Role,
    Schema,
)
from loupe.catalog.state import CatalogState
from loupe.catalog.transaction import Transaction

__all__ = [
    "CATALOG_VERSION",
    "KINDS",
    "AuditEvent",
    "CatalogCorruptError",
    "CatalogError",
    "CatalogNotInitializedError",
    "CatalogReadOnlyError",
    "CatalogSnapshot",
    "CatalogState",
    "CatalogTooNewError",
    "Change",
    "Cluster",
    "ClusterReplica",
    "Database",
    "DurableCatalogState",
    "FenceToken",
    "FencedError",
    "Item",
    "ObjectFormatError",
    "ObjectKind",
    "OpenCheck",
    "Role",
    "Schema",
    "Transaction",
    "create_backend",
]
