"""Helpers for tests of catalog backends: the smallest real transaction."""

from __future__ import annotations

from loupe.catalog.durable import DurableCatalogState
from loupe.catalog.objects import Cluster


def unmanaged_cluster(name: str) -> Cluster:
    """An unmanaged cluster without replicas; the catalog allocates its id."""
    return Cluster(
        id="",
        name=name,
        owner_id="",
        managed=False,
        size="",
        replication_factor=0,
        introspection_interval_ns=0,
        introspection_debugging=False,
    )


def create_cluster(catalog: DurableCatalogState, name: str) -> int:
    """Commit one transaction creating cluster ``name``; returns its timestamp."""
    tx = catalog.transaction()
    tx.create_cluster(unmanaged_cluster(name))
    return catalog.commit_transaction(tx)
