"""The catalog: clusters and replicas stored durably behind an epoch fence.

``DurableCatalogState`` is the interface (seed 004); backends are
``loupe.catalog_backends`` plugins (``stash-sqlite`` is built in), made with
``create_backend``. The service (``loupe.catalog.service``) serves it over
NATS and gRPC.
"""

from loupe.catalog.durable import DurableCatalogState, create_backend
from loupe.catalog.errors import CatalogCorruptError, CatalogError, FencedError
from loupe.catalog.objects import CatalogSnapshot, Change, Cluster, ClusterReplica, FenceToken
from loupe.catalog.transaction import CatalogState, Transaction

__all__ = [
    "CatalogCorruptError",
    "CatalogError",
    "CatalogSnapshot",
    "CatalogState",
    "Change",
    "Cluster",
    "ClusterReplica",
    "DurableCatalogState",
    "FenceToken",
    "FencedError",
    "Transaction",
    "create_backend",
]
