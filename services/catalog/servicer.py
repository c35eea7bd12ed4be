"""The ``Catalog`` service's handlers: the edge where protobuf meets the catalog.

The same servicer object is served over NATS and gRPC. Transactions (and
cooperative edits from ``loupe catalog edit --cooperative``) are serialised
(one at a time, in arrival order) so each builds on the last commit; after
each commit the new snapshot, carrying that commit's audit events, is handed
to ``on_commit`` (the service publishes it on ``loupe.catalog.v1.changes``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loupe.catalog.durable import DurableCatalogState
from loupe.catalog.errors import FencedError
from loupe.catalog.kinds import ObjectFormatError
from loupe.catalog.objects import CatalogSnapshot, Cluster, ClusterReplica, Item
from loupe.catalog.transaction import Transaction
from loupe.common.errors import LoupeError
from loupe.common.system_vars import checked_value, system_variable
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
    elif kind == "alter_cluster":
        alter = op.alter_cluster
        tx.alter_cluster(
            alter.name,
            introspection_interval_ns=(
                alter.introspection_interval_ns
                if alter.HasField("introspection_interval_ns")
                else None
            ),
            introspection_debugging=(
                alter.introspection_debugging if alter.HasField("introspection_debugging") else None
            ),
        )
    elif kind == "drop_cluster":
        tx.drop_cluster(op.drop_cluster.name, if_exists=op.drop_cluster.if_exists)
    elif kind == "drop_cluster_replica":
        drop = op.drop_cluster_replica
        tx.drop_replica(drop.cluster_name, drop.replica_name, if_exists=drop.if_exists)
    elif kind == "create_item":
        tx.create_item(Item.from_proto(op.create_item.item))
    elif kind == "drop_item":
        tx.drop_item(op.drop_item.id)
    elif kind == "set_system_variable":
        change = op.set_system_variable
        name = system_variable(change.name).name
        tx.set_system_configuration(
            name, None if change.reset else checked_value(name, change.value)
        )
    elif kind == "create_role":
        create = op.create_role
        tx.create_role(
            create.name,
            superuser=create.superuser,
            login=create.login,
            inherit=create.inherit,
            password_hash=create.password_hash,
        )
    elif kind == "alter_role":
        alter = op.alter_role
        tx.alter_role(
            alter.name,
            superuser=alter.superuser if alter.HasField("superuser") else None,
            login=alter.login if alter.HasField("login") else None,
            inherit=alter.inherit if alter.HasField("inherit") else None,
            password_hash=alter.password_hash if alter.HasField("password_hash") else None,
        )
    elif kind == "drop_role":
        tx.drop_role(op.drop_role.name, if_exists=op.drop_role.if_exists)
    elif kind == "grant_role":
        grant = op.grant_role
        if grant.revoke:
            tx.revoke_role(grant.role, grant.member)
        else:
            tx.grant_role(grant.role, grant.member, grant.grantor)
    else:
        raise LoupeError("INVALID_ARGUMENT", "catalog operation has no kind")


def missing_object(kind: str, key_json: str) -> str:
    return f"there is no {kind} with key {key_json}"


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
            tx = self._catalog.transaction(user=request.user)
            for op in request.ops:
                apply_op(tx, op)
            timestamp, snapshot = await self._commit(tx)
        return catalog_pb2.TransactResponse(
            timestamp=timestamp,
            changes=[change.to_proto() for change in tx.changes],
            snapshot=snapshot.to_proto(),
        )

    async def _commit(self, tx: Transaction) -> tuple[int, CatalogSnapshot]:
        """Commit ``tx`` and publish the new snapshot; call with the lock held."""
        try:
            # The commit waits for fsync: keep the event loop free meanwhile.
            timestamp = await asyncio.to_thread(self._catalog.commit_transaction, tx)
        except FencedError as error:
            self._on_fenced(error)
            # UNAVAILABLE: a caller may retry and reach the catalog that fenced us.
            raise LoupeError("UNAVAILABLE", str(error)) from None
        snapshot = self._catalog.snapshot(new_audit_events=tx.audit_events)
        # Inside the lock, so followers see snapshots in commit order.
        await self._on_commit(snapshot)
        return timestamp, snapshot

    async def Epoch(self, request: common_pb2.Empty, context: Any) -> catalog_pb2.EpochResponse:
        fence = self._catalog.fence
        return catalog_pb2.EpochResponse(
            epoch=fence.epoch, deploy_generation=fence.deploy_generation
        )

    async def ReadTimestamp(
        self, request: common_pb2.Empty, context: Any
    ) -> catalog_pb2.TimestampResponse:
        return catalog_pb2.TimestampResponse(timestamp=self._catalog.read_timestamp())

    async def WriteTimestamp(
        self, request: common_pb2.Empty, context: Any
    ) -> catalog_pb2.TimestampResponse:
        """A durable write timestamp: an empty transaction advances the oracle.

        Nothing changed, so nothing is published on the changes subject.
        """
        async with self._lock:
            try:
                timestamp = await asyncio.to_thread(self._catalog.write_timestamp)
            except FencedError as error:
                self._on_fenced(error)
                raise LoupeError("UNAVAILABLE", str(error)) from None
        return catalog_pb2.TimestampResponse(timestamp=timestamp)

    async def ListAuditEvents(
        self, request: catalog_pb2.ListAuditEventsRequest, context: Any
    ) -> catalog_pb2.ListAuditEventsResponse:
        events = self._catalog.audit_events_after(request.after_id)
        return catalog_pb2.ListAuditEventsResponse(events=[e.to_proto() for e in events])

    async def EditObject(
        self, request: catalog_pb2.EditObjectRequest, context: Any
    ) -> catalog_pb2.EditObjectResponse:
        """Replace or delete one raw object, validated as its kind, in a transaction."""
        async with self._lock:
            tx = self._catalog.transaction()
            try:
                old = tx.edit_raw(request.kind, request.key_json, request.value_json or None)
            except ObjectFormatError as error:
                raise LoupeError("INVALID_ARGUMENT", str(error)) from None
            if old is None and not request.value_json:
                raise LoupeError("NOT_FOUND", missing_object(request.kind, request.key_json))
            await self._commit(tx)
        return catalog_pb2.EditObjectResponse(old_value_json=old or "")
