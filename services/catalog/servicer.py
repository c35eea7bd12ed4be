"""The ``Catalog`` service's handlers: the edge where protobuf meets the catalog.

The same servicer object is served over NATS and gRPC. Transactions are
serialised (one at a time, in arrival order) so each builds on the last
commit; after each commit the new snapshot is handed to ``on_commit``
(the service publishes it on ``loupe.catalog.v1.changes``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loupe.catalog.durable import DurableCatalogState
from loupe.catalog.errors import FencedError
from loupe.catalog.objects import CatalogSnapshot, Cluster, ClusterReplica
from loupe.catalog.transaction import Transaction
from loupe.common.errors import LoupeError
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2

SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]
SERVICE_NAME = SERVICE.full_name


def apply_op(tx: Transaction, op: catalog_pb2.CatalogOp) -> None:
    """Apply one wire operation to ``tx``; raises ``LoupeError`` if it cannot."""
    kind = op.WhichOneof("kind")
    if kind == "create_cluster":
        tx.create_cluster(
            Cluster.from_proto(op.create_cluster.cluster),
            [ClusterReplica.from_proto(r) for r in op.create_cluster.replicas],
        )
    elif kind == "create_cluster_replica":
        tx.create_replica(
            ClusterReplica.from_proto(op.create_cluster_replica.replica),
            op.create_cluster_replica.cluster_name,
        )
    elif kind == "drop_cluster":
        tx.drop_cluster(op.drop_cluster.name, if_exists=op.drop_cluster.if_exists)
    elif kind == "drop_cluster_replica":
        drop = op.drop_cluster_replica
        tx.drop_replica(drop.cluster_name, drop.replica_name, if_exists=drop.if_exists)
    else:
        raise LoupeError("INVALID_ARGUMENT", "catalog operation has no kind")


class CatalogServicer:
    """Handlers of ``loupe.proto.catalog.v1.Catalog``."""

    def __init__(
        self,
        catalog: DurableCatalogState,
        *,
        on_commit: Callable[[CatalogSnapshot], Awaitable[None]],
        on_fenced: Callable[[FencedError], None],
    ) -> None:
        self._catalog = catalog
        self._on_commit = on_commit
        self._on_fenced = on_fenced
        self._lock = asyncio.Lock()

    async def Snapshot(
        self, request: catalog_pb2.SnapshotRequest, context: Any
    ) -> catalog_pb2.CatalogSnapshot:
        return self._catalog.snapshot().to_proto()

    async def Transact(
        self, request: catalog_pb2.TransactRequest, context: Any
    ) -> catalog_pb2.TransactResponse:
        async with self._lock:
            tx = self._catalog.transaction()
            for op in request.ops:
                apply_op(tx, op)
            try:
                # The commit waits for fsync: keep the event loop free meanwhile.
                timestamp = await asyncio.to_thread(self._catalog.commit_transaction, tx)
            except FencedError as error:
                self._on_fenced(error)
                # UNAVAILABLE: a caller may retry and reach the catalog that fenced us.
                raise LoupeError("UNAVAILABLE", str(error)) from None
            snapshot = self._catalog.snapshot()
            # Inside the lock, so followers see snapshots in commit order.
            await self._on_commit(snapshot)
        return catalog_pb2.TransactResponse(
            timestamp=timestamp,
            changes=[change.to_proto() for change in tx.changes],
            snapshot=snapshot.to_proto(),
        )

    async def Epoch(self, request: common_pb2.Empty, context: Any) -> catalog_pb2.EpochResponse:
        fence = self._catalog.fence
        return catalog_pb2.EpochResponse(
            epoch=fence.epoch, deploy_generation=fence.deploy_generation
        )

    async def ReadTimestamp(
        self, request: common_pb2.Empty, context: Any
    ) -> catalog_pb2.TimestampResponse:
        return catalog_pb2.TimestampResponse(timestamp=self._catalog.read_timestamp())

    async def ListAuditEvents(
        self, request: catalog_pb2.ListAuditEventsRequest, context: Any
    ) -> catalog_pb2.ListAuditEventsResponse:
        raise LoupeError("UNIMPLEMENTED", "the audit log is not implemented yet")

    async def EditObject(
        self, request: catalog_pb2.EditObjectRequest, context: Any
    ) -> catalog_pb2.EditObjectResponse:
        raise LoupeError("UNIMPLEMENTED", "cooperative edits are not implemented yet")
