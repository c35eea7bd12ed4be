"""Fixtures for coordinator tests: small Catalog and Controller servicers on real NATS.

The real catalog and controller are separate services; these stand-ins keep
just enough state (catalog objects and audit log, collection contents) to
answer the coordinator the way the protos promise, and record what they were
asked. The controller keeps the dataflows it is sent and answers their peeks
on the real compute engine over what was appended (``FakeController``), or
runs an in-process replica over storage (``EngineController``). ``fleet``
runs several coordinators on one pair of stand-ins.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from loupe.builtins import BUILTIN_COLLECTIONS, BY_ID, SYSTEM_CLUSTER_NAME
from loupe.catalog.service import CatalogService, CatalogSettings
from loupe.common.errors import LoupeError, SqlState
from loupe.common.transport import NatsServiceEndpoint, connect, ensure_stream, publish
from loupe.common.values import from_row
from loupe.compute_replica.protocol import PeekRequest, PeekResult, ResultColumn, StorageLocation
from loupe.coordinator.coordinator import (
    CATALOG_CHANGES_SUBJECT,
    CATALOG_SERVICE,
    CONTROLLER_SERVICE,
)
from loupe.coordinator.service import CoordinatorService, CoordinatorSettings
from loupe.coordinator.tables import Table, updates_table
from loupe.interval import structs
from loupe.persist import DIFF_COLUMN, Shard, UpperMismatch, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc
from loupe.proto.storage.v1 import storage_pb2


class FakeCatalog:
    """Catalog objects and the audit log in memory, as a fresh catalog has them.

    Audit events follow Materialize's: ``create``/``drop`` of ``cluster``
    (details id, name) and ``cluster-replica`` (details cluster_id,
    cluster_name, replica_id, replica_name, logical_size), numbered from 1,
    stamped with the commit's timestamp and the request's user. Set
    ``audit_unimplemented`` to answer ListAuditEvents as an older catalog does,
    ``publish_changes = False`` to lose every notification and ``publish_delay``
    (seconds) to deliver them late (in order).
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.epoch = 1
        self.timestamp = 1_000
        # The oracle's last write timestamp (WriteTimestamp), apart from commits'.
        self.write_timestamp = 0
        self.ids = itertools.count(2)
        self.audit_unimplemented = False
        self.publish_changes = True
        self.publish_delay = 0.0
        self.snapshot_delay = 0.0  # seconds Snapshot takes, as a busy catalog's would
        self._outbox: asyncio.Queue[catalog_pb2.CatalogSnapshot] | None = None
        self.databases = [catalog_pb2.Database(id="u1", name="materialize", owner_id="s1")]
        self.schemas = [
            catalog_pb2.Schema(id="s1", name="mz_catalog", owner_id="s1"),
            catalog_pb2.Schema(id="s2", name="mz_internal", owner_id="s1"),
            catalog_pb2.Schema(id="u1", name="public", database_id="u1", owner_id="s1"),
        ]
        self.roles = [
            catalog_pb2.Role(id="s1", name="mz_system", inherit=True, superuser=True, login=True),
            catalog_pb2.Role(id="u1", name="materialize", inherit=True, superuser=True, login=True),
        ]
        self.audit_events: list[catalog_pb2.AuditEvent] = []
        self._new_events: list[catalog_pb2.AuditEvent] = []
        self.clusters: list[catalog_pb2.Cluster] = [
            catalog_pb2.Cluster(
                id="s1",
                name=SYSTEM_CLUSTER_NAME,
                owner_id="s1",
                managed=True,
                size="1",
                replication_factor=1,
                introspection_interval_ns=1_000_000_000,
            ),
            catalog_pb2.Cluster(
                id="u1",
                name="quickstart",
                owner_id="s1",
                managed=True,
                size="1",
                replication_factor=1,
                introspection_interval_ns=1_000_000_000,
            ),
        ]
        self.replicas: list[catalog_pb2.ClusterReplica] = [
            catalog_pb2.ClusterReplica(
                id="s1", name="r1", cluster_id="s1", size="1", owner_id="s1"
            ),
            catalog_pb2.ClusterReplica(
                id="u1", name="r1", cluster_id="u1", size="1", owner_id="s1"
            ),
        ]
        self.items: list[catalog_pb2.Item] = []
        self.requests: list[catalog_pb2.TransactRequest] = []
        # The bootstrap commit created quickstart and its replica (no user: the system).
        self.record("create", "cluster", "", id="u1", name="quickstart")
        self.record_replica("create", "", self.clusters[1], self.replicas[1])
        self._new_events = []

    def snapshot(self, new_audit_events: Any = ()) -> catalog_pb2.CatalogSnapshot:
        return catalog_pb2.CatalogSnapshot(
            epoch=self.epoch,
            timestamp=self.timestamp,
            clusters=self.clusters,
            replicas=self.replicas,
            databases=self.databases,
            schemas=self.schemas,
            roles=self.roles,
            new_audit_events=list(new_audit_events),
            items=self.items,
        )

    def record(self, event_type: str, object_type: str, user: str, **details: Any) -> None:
        """Append an audit event of the commit being made."""
        event = catalog_pb2.AuditEvent(
            id=len(self.audit_events) + 1,
            event_type=event_type,
            object_type=object_type,
            details_json=json.dumps(details),
            user=user,
            occurred_at=self.timestamp + 1,
        )
        self.audit_events.append(event)
        self._new_events.append(event)

    def record_replica(
        self,
        event_type: str,
        user: str,
        cluster: catalog_pb2.Cluster,
        replica: catalog_pb2.ClusterReplica,
    ) -> None:
        details: dict[str, Any] = {
            "cluster_id": cluster.id,
            "cluster_name": cluster.name,
            "replica_id": replica.id,
            "replica_name": replica.name,
        }
        if event_type == "create":
            details["logical_size"] = replica.size
        self.record(event_type, "cluster-replica", user, **details)

    async def Snapshot(self, request: Any, context: Any) -> catalog_pb2.CatalogSnapshot:
        await asyncio.sleep(self.snapshot_delay)
        return self.snapshot()

    async def ReadTimestamp(self, request: Any, context: Any) -> catalog_pb2.TimestampResponse:
        return catalog_pb2.TimestampResponse(timestamp=max(self.timestamp, self.write_timestamp))

    async def WriteTimestamp(self, request: Any, context: Any) -> catalog_pb2.TimestampResponse:
        self.write_timestamp = max(self.timestamp, self.write_timestamp) + 1
        return catalog_pb2.TimestampResponse(timestamp=self.write_timestamp)

    async def ListAuditEvents(
        self, request: Any, context: Any
    ) -> catalog_pb2.ListAuditEventsResponse:
        if self.audit_unimplemented:
            raise LoupeError("UNIMPLEMENTED", "the audit log is not implemented yet")
        return catalog_pb2.ListAuditEventsResponse(
            events=[e for e in self.audit_events if e.id > request.after_id]
        )

    async def Transact(self, request: Any, context: Any) -> catalog_pb2.TransactResponse:
        self.requests.append(request)
        self._new_events = []
        self._changes: list[catalog_pb2.CatalogChange] = []
        events_before = len(self.audit_events)
        try:
            for op in request.ops:
                self.apply(op, request.user)
        except LoupeError:
            del self.audit_events[events_before:]  # all or nothing (objects: one op per request)
            raise
        self.timestamp += 1
        snapshot = self.snapshot(self._new_events)
        if self.publish_changes:
            await self._publish(snapshot)
        return catalog_pb2.TransactResponse(
            timestamp=self.timestamp, snapshot=snapshot, changes=self._changes
        )

    async def _publish(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        if not self.publish_delay:
            await publish(self.connection, CATALOG_CHANGES_SUBJECT, snapshot)
            return
        if self._outbox is None:
            self._outbox = asyncio.Queue()
            self._publisher = asyncio.create_task(self._publish_late(self._outbox))
        self._outbox.put_nowait(snapshot)

    async def _publish_late(self, outbox: asyncio.Queue) -> None:
        while True:
            snapshot = await outbox.get()
            await asyncio.sleep(self.publish_delay)
            await publish(self.connection, CATALOG_CHANGES_SUBJECT, snapshot)

    def close(self) -> None:
        if self._outbox is not None:
            self._publisher.cancel()

    def cluster(self, name: str) -> catalog_pb2.Cluster | None:
        return next((c for c in self.clusters if c.name == name), None)

    def apply(self, op: catalog_pb2.CatalogOp, user: str = "") -> None:
        kind = op.WhichOneof("kind")
        spec: Any
        cluster: Any
        if kind == "create_item":
            spec = op.create_item.item
            if any(i.schema_id == spec.schema_id and i.name == spec.name for i in self.items):
                raise LoupeError(SqlState.DUPLICATE_OBJECT, f'"{spec.name}" already exists')
            item = catalog_pb2.Item()
            item.CopyFrom(spec)
            item.id = f"u{next(self.ids)}"
            self.items.append(item)
            self._changes.append(catalog_pb2.CatalogChange(item_created=item))
            self.record("create", item.type, user, id=item.id)
        elif kind == "drop_item":
            found = [i for i in self.items if i.id == op.drop_item.id]
            if not found:
                raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown item id '{op.drop_item.id}'")
            self.items.remove(found[0])
            self._changes.append(catalog_pb2.CatalogChange(item_dropped=found[0]))
            self.record("drop", found[0].type, user, id=found[0].id)
        elif kind == "create_cluster":
            spec = op.create_cluster
            if self.cluster(spec.cluster.name):
                raise LoupeError(
                    SqlState.DUPLICATE_OBJECT, f"cluster '{spec.cluster.name}' already exists"
                )
            if spec.cluster.size not in ("", "1", "2", "4"):
                raise LoupeError(
                    SqlState.INVALID_PARAMETER_VALUE, f"unknown cluster size {spec.cluster.size}"
                )
            if spec.cluster.managed and spec.replicas:
                raise LoupeError(
                    SqlState.INVALID_PARAMETER_VALUE,
                    "REPLICAS cannot be given for a managed cluster",
                )
            cluster = catalog_pb2.Cluster()
            cluster.CopyFrom(spec.cluster)
            cluster.id = f"u{next(self.ids)}"
            self.clusters.append(cluster)
            self.record("create", "cluster", user, id=cluster.id, name=cluster.name)
            replica_specs = list(spec.replicas) or [
                catalog_pb2.ClusterReplica(
                    name=f"r{i}", size=cluster.size, owner_id=cluster.owner_id
                )
                for i in range(1, cluster.replication_factor + 1)
            ]
            for replica_spec in replica_specs:
                replica = catalog_pb2.ClusterReplica()
                replica.CopyFrom(replica_spec)
                replica.id = f"u{next(self.ids)}"
                replica.cluster_id = cluster.id
                self.replicas.append(replica)
                self.record_replica("create", user, cluster, replica)
        elif kind == "create_cluster_replica":
            spec = op.create_cluster_replica
            cluster = self.cluster(spec.cluster_name)
            if cluster is None:
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT, f"unknown cluster '{spec.cluster_name}'"
                )
            replica = catalog_pb2.ClusterReplica()
            replica.CopyFrom(spec.replica)
            replica.id = f"u{next(self.ids)}"
            replica.cluster_id = cluster.id
            self.replicas.append(replica)
            self.record_replica("create", user, cluster, replica)
        elif kind == "drop_cluster":
            spec = op.drop_cluster
            cluster = self.cluster(spec.name)
            if cluster is None:
                if spec.if_exists:
                    return
                raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{spec.name}'")
            if cluster.id.startswith("s"):
                raise LoupeError(
                    SqlState.INSUFFICIENT_PRIVILEGE,
                    f"system cluster '{spec.name}' cannot be modified",
                )
            for replica in [r for r in self.replicas if r.cluster_id == cluster.id]:
                self.record_replica("drop", user, cluster, replica)
                self.replicas.remove(replica)
            self.clusters.remove(cluster)
            self.record("drop", "cluster", user, id=cluster.id, name=cluster.name)
        elif kind == "drop_cluster_replica":
            spec = op.drop_cluster_replica
            cluster = self.cluster(spec.cluster_name)
            found = [
                r
                for r in self.replicas
                if cluster is not None
                and r.cluster_id == cluster.id
                and r.name == spec.replica_name
            ]
            if not found:
                if spec.if_exists:
                    return
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT,
                    f"unknown cluster replica '{spec.cluster_name}.{spec.replica_name}'",
                )
            assert cluster is not None
            self.replicas.remove(found[0])
            self.record_replica("drop", user, cluster, found[0])


class FakeController:
    """Collections in memory; dataflows kept and their peeks answered on the real engine.

    With ``persist = True`` appended batches are also written to the
    collections' shards (every shard's upper advanced together, as the real
    storage writer does), so a coordinator reading storage sees them.

    A peek of a dataflow's index export is answered by ``answers[target_id]``
    (rows, or a ``LoupeError``) when the test chose one, else by rendering the
    dataflow on a fresh engine fed with the builtin collections' contents as
    of now (``evaluate``): the contents are in memory, so time travel is not
    modelled here (``EngineController`` reads storage).
    """

    def __init__(self, data_dir: Path) -> None:
        self.blob_uri, self.consensus_uri = default_uris(data_dir)
        self.persist = False
        self.contents: dict[str, Counter] = {c.id: Counter() for c in BUILTIN_COLLECTIONS}
        self.upper = 1
        self.applied: list[catalog_pb2.CatalogSnapshot] = []
        self.appends: list[controller_pb2.AppendUpdatesRequest] = []
        self.batch_ids: set[str] = set()
        self.peeks: list[controller_pb2.PeekRequest] = []
        self.canceled: list[str] = []
        self.dataflows: dict[str, tuple[str, Any]] = {}
        self.created: list[controller_pb2.CreateDataflowRequest] = []
        self.compactions: list[controller_pb2.AllowCompactionRequest] = []
        self.dropped: set[str] = set()
        self.answers: dict[str, Any] = {}
        self._compacted = asyncio.Event()
        # Peeks wait (in the controller's rounds of ``timeout_ms``: DEADLINE_EXCEEDED,
        # the peek goes on) until CancelPeek, or until ``release_peeks()``.
        self.block_peeks = False
        self._blocked: dict[str, asyncio.Event] = {}
        self.unavailable_peeks = 0  # Peek calls to refuse first, as a controller that is away
        self.missing_peeks = 0  # Peek calls answered NOT_FOUND first, as a restarted controller
        self.unavailable_for = 0  # ListCollections calls to refuse first
        self.refuse_appends = False  # AppendUpdates refused, as by a storage writer that is down
        self.refuse_code = "UNAVAILABLE"  # how: retried by the caller, or INTERNAL (not retried)

    def metadata(self, collection_id: str) -> common_pb2.CollectionMetadata:
        builtin = BY_ID[collection_id]
        return common_pb2.CollectionMetadata(
            collection_id=builtin.id,
            shard_id=builtin.shard_id,
            blob_uri=self.blob_uri,
            consensus_uri=self.consensus_uri,
            relation_desc=common_pb2.RelationDesc(
                columns=[common_pb2.Column(name=n, type=t) for n, t in builtin.columns]
            ),
        )

    async def ListCollections(self, request: Any, context: Any) -> Any:
        if self.unavailable_for > 0:
            self.unavailable_for -= 1
            raise LoupeError("UNAVAILABLE", "controller starting")
        return controller_pb2.ListCollectionsResponse(
            collections=[self.metadata(c.id) for c in BUILTIN_COLLECTIONS]
        )

    async def ApplyCatalog(self, request: Any, context: Any) -> Any:
        self.applied.append(request.snapshot)
        return controller_pb2.ApplyCatalogResponse()

    async def AppendUpdates(self, request: Any, context: Any) -> Any:
        if self.refuse_appends:
            raise LoupeError(self.refuse_code, "the storage writer is down")
        self.appends.append(request)
        if request.batch_id not in self.batch_ids:
            self.batch_ids.add(request.batch_id)
            updates: dict[str, list[tuple[tuple, int]]] = {}
            for collection in request.collections:
                for update in collection.updates:
                    row = from_row(update.row)
                    self.contents[collection.collection_id][row] += update.diff
                    updates.setdefault(collection.collection_id, []).append((row, update.diff))
            if self.persist:
                self.write_shards(updates, self.upper)
        self.upper += 1
        return controller_pb2.AppendUpdatesResponse(upper=self.upper)

    def write_shards(self, updates: dict[str, list[tuple[tuple, int]]], timestamp: int) -> None:
        """Append ``updates`` at ``timestamp`` and move every shard's upper to ``timestamp + 1``."""
        blob, consensus = open_location(self.blob_uri, self.consensus_uri)
        for builtin in BUILTIN_COLLECTIONS:
            shard = Shard(builtin.shard_id, blob, consensus)
            state = shard.ensure(builtin.columns)
            names = [*builtin.column_names, "mz_timestamp", "mz_diff"]
            table = pa.Table.from_pylist(
                [
                    dict(zip(names, [*structs(list(row)), timestamp, diff], strict=True))
                    for row, diff in updates.get(builtin.id, [])
                ],
                schema=arrow_schema(builtin.columns),
            )
            shard.compare_and_append(table, state.upper, timestamp + 1)

    def rows(self, collection_id: str) -> set[tuple]:
        return {row for row, count in self.contents[collection_id].items() if count > 0}

    def counts(self, collection_id: str) -> Counter:
        """Row -> multiplicity, without rows whose updates cancelled out."""
        return Counter({row: n for row, n in self.contents[collection_id].items() if n != 0})

    async def wait_dropped(self, collection_id: str, timeout: float = 5.0) -> None:
        """Return once ``collection_id`` was dropped (``AllowCompaction(empty)``)."""
        async with asyncio.timeout(timeout):
            while collection_id not in self.dropped:
                self._compacted.clear()
                await self._compacted.wait()

    def exports(self) -> dict[str, str]:
        """Export id -> dataflow id of every dataflow not dropped."""
        found = {}
        for dataflow_id, (_, dataflow) in self.dataflows.items():
            for export in [*dataflow.index_exports, *dataflow.sink_exports]:
                export_id = export.index_id if hasattr(export, "index_id") else export.sink_id
                if export_id not in self.dropped:
                    found[export_id] = dataflow_id
        return found

    async def CreateDataflow(self, request: Any, context: Any) -> common_pb2.Empty:
        from loupe.plan.codec import dataflow_from_proto

        self.created.append(request)
        dataflow = dataflow_from_proto(request.dataflow)
        self.dataflows.setdefault(dataflow.id, (request.cluster_id, dataflow))
        return common_pb2.Empty()

    async def AllowCompaction(self, request: Any, context: Any) -> common_pb2.Empty:
        self.compactions.append(request)
        if request.empty:
            self.dropped.update(request.collection_ids)
        self._compacted.set()
        return common_pb2.Empty()

    async def Peek(self, request: Any, context: Any) -> compute_pb2.PeekResponse:
        self.peeks.append(request)
        peek = request.peek
        if self.unavailable_peeks > 0:
            self.unavailable_peeks -= 1
            raise LoupeError("UNAVAILABLE", "the controller is shutting down")
        if self.missing_peeks > 0:
            self.missing_peeks -= 1
            raise LoupeError("NOT_FOUND", f"cluster 'quickstart' has no index {peek.target_id}")
        if self.block_peeks and peek.uuid not in self._blocked:
            self._blocked[peek.uuid] = asyncio.Event()
        event = self._blocked.get(peek.uuid)
        if event is not None:
            try:
                await asyncio.wait_for(event.wait(), request.timeout_ms / 1000 or None)
            except TimeoutError:
                raise LoupeError(
                    "DEADLINE_EXCEEDED", f"peek {peek.uuid} waits for the test to release it"
                ) from None
            if peek.uuid in self.canceled:
                return compute_pb2.PeekResponse(uuid=peek.uuid, canceled=True)
        dataflow_id = self.exports().get(peek.target_id)
        if dataflow_id is None:
            error = LoupeError(SqlState.INTERNAL_ERROR, f"no collection {peek.target_id!r}")
            return compute_pb2.PeekResponse(uuid=peek.uuid, error=error.to_proto())
        answer = self.answers.get(peek.target_id)
        try:
            if isinstance(answer, LoupeError):
                raise answer
            if answer is not None:
                result = PeekResult(_result_columns(peek), answer)
            else:
                result = await asyncio.to_thread(
                    self.evaluate, self.dataflows[dataflow_id][1], PeekRequest.from_proto(peek)
                )
        except LoupeError as error:
            return compute_pb2.PeekResponse(uuid=peek.uuid, error=error.to_proto())
        return compute_pb2.PeekResponse(uuid=peek.uuid, rows=result.to_proto())

    def evaluate(self, dataflow: Any, peek: PeekRequest) -> PeekResult:
        """Render ``dataflow`` on a fresh engine over the collections' contents and peek it."""
        from loupe.dataflow import ComputeInstance

        instance = ComputeInstance()
        instance.create_dataflow(dataflow)
        timestamp = max(peek.timestamp, dataflow.as_of)
        for source in dataflow.source_imports:
            instance.push(source.id, self.snapshot(source.id, dataflow.as_of), timestamp + 1)
        instance.step()
        result = instance.peek(peek.target_id, timestamp, peek.mfp, peek.finishing)
        columns = peek.result_columns or tuple(
            ResultColumn(f"column{i + 1}", t) for i, t in enumerate(result.types)
        )
        return PeekResult(columns, result.rows())

    def snapshot(self, collection_id: str, timestamp: int) -> pa.Table:
        """A builtin collection's contents in persist's format, all at ``timestamp``."""
        builtin = BY_ID.get(collection_id)
        if builtin is None:
            raise LoupeError(SqlState.INTERNAL_ERROR, f"no contents for {collection_id}")
        names = [*builtin.column_names, "mz_timestamp", "mz_diff"]
        return pa.Table.from_pylist(
            [
                dict(zip(names, [*structs(list(row)), timestamp, count], strict=True))
                for row, count in self.counts(collection_id).items()
            ],
            schema=arrow_schema(builtin.columns),
        )

    async def CancelPeek(self, request: Any, context: Any) -> common_pb2.Empty:
        self.canceled.append(request.uuid)
        self._blocked.setdefault(request.uuid, asyncio.Event()).set()
        return common_pb2.Empty()

    def release_peeks(self) -> None:
        """Blocked peeks are answered (and new ones no longer block)."""
        self.block_peeks = False
        for event in self._blocked.values():
            event.set()


class Harness:
    """A running coordinator with fake catalog and controller, and a gRPC stub."""

    def __init__(
        self,
        service: CoordinatorService,
        catalog: FakeCatalog,
        controller: FakeController,
        stub: Any,
    ) -> None:
        self.service = service
        self.catalog = catalog
        self.controller = controller
        self.stub = stub

    async def session(self, user: str = "", **options: str) -> str:
        response = await self.stub.OpenSession(
            sql_pb2.OpenSessionRequest(user=user, options=options)
        )
        return response.session_id

    async def execute(self, session_id: str, sql: str) -> list[sql_pb2.ExecuteResponse]:
        return [
            response
            async for response in self.stub.Execute(
                sql_pb2.ExecuteRequest(session_id=session_id, sql=sql)
            )
        ]

    async def rows(self, session_id: str, sql: str) -> list[tuple]:
        """The rows of a single successful statement."""
        responses = await self.execute(session_id, sql)
        errors = [r.error for r in responses if r.HasField("error")]
        assert not errors, errors
        return [from_row(row) for r in responses if r.HasField("rows") for row in r.rows.rows]


async def _start_fakes(
    nats_url: str, data_dir: Path
) -> tuple[Any, FakeCatalog, FakeController, list[Any]]:
    connection = await connect(nats_url, name="coordinator-test-fakes")
    catalog = FakeCatalog(connection)
    controller = FakeController(data_dir)
    endpoints = [
        NatsServiceEndpoint(connection, CATALOG_SERVICE, catalog),
        NatsServiceEndpoint(connection, CONTROLLER_SERVICE, controller),
    ]
    for endpoint in endpoints:
        await endpoint.start()
    return connection, catalog, controller, endpoints


async def _start_coordinator(
    nats_url: str, data_dir: Path, **settings: Any
) -> tuple[CoordinatorService, asyncio.Task]:
    service = CoordinatorService(
        CoordinatorSettings(
            data_dir=data_dir,
            nats_url=nats_url,
            sql_port=0,
            pgwire_port=0,
            metrics_port=0,
            **settings,
        )
    )
    task = asyncio.create_task(service.run())
    ready = asyncio.create_task(service.ready.wait())
    await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    assert service.ready.is_set(), "coordinator did not become ready"
    return service, task


@pytest.fixture
async def harness(nats_url: str, data_dir: Path) -> AsyncIterator[Harness]:
    connection, catalog, controller, endpoints = await _start_fakes(nats_url, data_dir)
    service, task = await _start_coordinator(nats_url, data_dir)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.sql_port}")
    try:
        yield Harness(service, catalog, controller, sql_pb2_grpc.SqlStub(channel))
    finally:
        await channel.close()
        service.shutdown()
        await asyncio.wait_for(task, 10)
        for endpoint in endpoints:
            await endpoint.stop(grace=0.5)
        await connection.close()


class Fleet:
    """Fake catalog and controller, and any number of coordinators on them (one NATS).

    Configure ``catalog`` / ``controller`` before ``await add()`` starts a coordinator.
    """

    def __init__(self, nats_url: str, data_dir: Path) -> None:
        self.nats_url = nats_url
        self.data_dir = data_dir
        self.harnesses: list[Harness] = []
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        connection, catalog, controller, endpoints = await _start_fakes(
            self.nats_url, self.data_dir
        )
        self.catalog, self.controller = catalog, controller
        self._stack.push_async_callback(connection.close)
        self._stack.callback(catalog.close)
        for endpoint in endpoints:
            self._stack.push_async_callback(endpoint.stop, 0.5)

    async def add(self, **settings: Any) -> Harness:
        """Start one more coordinator (its own data dir: ready files must not collide)."""
        settings.setdefault("storage_settle_timeout", 0.1)  # the fake controller never flushes
        data_dir = self.data_dir / f"coordinator-{len(self.harnesses)}"
        service, task = await _start_coordinator(self.nats_url, data_dir, **settings)
        self._stack.push_async_callback(_stop_coordinator, service, task)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.sql_port}")
        self._stack.push_async_callback(channel.close)
        harness = Harness(service, self.catalog, self.controller, sql_pb2_grpc.SqlStub(channel))
        self.harnesses.append(harness)
        return harness

    async def close(self) -> None:
        await self._stack.aclose()


async def _stop_coordinator(service: CoordinatorService, task: asyncio.Task) -> None:
    service.shutdown()
    await asyncio.wait_for(task, 10)


@pytest.fixture
async def fleet(nats_url: str, data_dir: Path) -> AsyncIterator[Fleet]:
    """Fakes started; ``await fleet.add()`` starts coordinators (stopped at the end)."""
    fleet = Fleet(nats_url, data_dir)
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.close()


@pytest.fixture
def start_fakes() -> Any:
    """``await start_fakes(nats_url, data_dir)`` -> (connection, catalog, controller, endpoints)."""
    return _start_fakes


@pytest.fixture
def start_coordinator() -> Any:
    """``await start_coordinator(nats_url, data_dir)`` -> (service, task), once ready."""
    return _start_coordinator


# -- tables: the real catalog service, shards at wall-clock times, an in-process replica --


class StorageController(FakeController):
    """A FakeController whose collections live in shards the way the storage writer keeps them.

    Appends are written at ``ts = max(now_ms, upper)`` and every builtin
    collection's upper moves to ``ts + 1`` at each append and every
    ``flush_interval`` (the storage writer's flushes), so a replica reading
    the shards sees timestamps, AS OF and sinces as it does under the real
    controller (``EngineController`` runs one).
    """

    def __init__(self, data_dir: Path, flush_interval: float = 0.05) -> None:
        super().__init__(data_dir)
        self.persist = True
        self.flush_interval = flush_interval
        self._lock = asyncio.Lock()
        # Held by the thread writing the shards: a canceled flush's thread still runs.
        self._writing = threading.Lock()
        self._flusher: asyncio.Task | None = None

    async def start(self) -> None:
        await self._flush({})
        self._flusher = asyncio.create_task(self._flush_forever())

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        # A write still running in its thread ends before the next controller starts.
        await asyncio.to_thread(self._writing.acquire)
        self._writing.release()

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            await self._flush({})

    async def _flush(self, updates: dict[str, list[tuple[tuple, int]]]) -> int:
        async with self._lock:
            return await asyncio.to_thread(self._write_now, updates)

    def _write_now(self, updates: dict[str, list[tuple[tuple, int]]]) -> int:
        with self._writing:
            return self._write_locked(updates)

    def _write_locked(self, updates: dict[str, list[tuple[tuple, int]]]) -> int:
        blob, consensus = open_location(self.blob_uri, self.consensus_uri)
        uppers = [
            Shard(b.shard_id, blob, consensus).ensure(b.columns).upper for b in BUILTIN_COLLECTIONS
        ]
        timestamp = max([time.time_ns() // 1_000_000, *uppers])
        self.write_shards(updates, timestamp)
        self.upper = timestamp + 1
        return self.upper

    async def AppendUpdates(self, request: Any, context: Any) -> Any:
        self.appends.append(request)
        updates: dict[str, list[tuple[tuple, int]]] = {}
        if request.batch_id not in self.batch_ids:
            self.batch_ids.add(request.batch_id)
            for collection in request.collections:
                for update in collection.updates:
                    row = from_row(update.row)
                    self.contents[collection.collection_id][row] += update.diff
                    updates.setdefault(collection.collection_id, []).append((row, update.diff))
        upper = await self._flush(updates)
        return controller_pb2.AppendUpdatesResponse(upper=upper)


class TableHarness(Harness):
    """A coordinator on the real catalog service and a ``StorageController`` (or subclass)."""

    catalog_service: CatalogService
    controller: StorageController

    async def error(self, session_id: str, sql: str) -> common_pb2.Error:
        responses = await self.execute(session_id, sql)
        errors = [r.error for r in responses if r.HasField("error")]
        assert errors, f"{sql!r} did not fail"
        return errors[0]

    def controller_uris(self) -> tuple[str, str]:
        """The storage location (blob, consensus) of collections and tables."""
        return self.controller.blob_uri, self.controller.consensus_uri

    async def tag(self, session_id: str, sql: str) -> str:
        responses = await self.execute(session_id, sql)
        errors = [r.error for r in responses if r.HasField("error")]
        assert not errors, errors
        return [r.complete.tag for r in responses if r.HasField("complete")][-1]


def append_as_another_writer(
    shard: Shard, table: Table, rows: list[tuple[Any, ...]], *, step: int = 1
) -> None:
    """Append ``rows`` (none: only move the upper) at the shard's upper and move it by
    ``step``, as another writer or a tick would; again if a tick moved the upper first."""
    while True:
        upper = shard.state().upper
        part = updates_table(table, [(row, 1) for row in rows], upper) if rows else None
        try:
            shard.compare_and_append(part, upper, upper + step)
            return
        except UpperMismatch:
            continue


@contextlib.asynccontextmanager
async def table_system(
    nats_url: str,
    data_dir: Path,
    controller_class: type[StorageController] | None = None,
    **settings: Any,
) -> AsyncIterator[TableHarness]:
    """Catalog service, storage stand-in and a coordinator with ``settings``."""
    async with contextlib.AsyncExitStack() as stack:
        catalog_settings = CatalogSettings(
            data_dir=data_dir / "catalog",
            nats_url=nats_url,
            grpc_port=0,
            metrics_port=0,
            leadership_check_interval=5.0,
        )
        catalog_service = CatalogService(catalog_settings)
        catalog_task = asyncio.create_task(catalog_service.run())

        async def stop_catalog() -> None:
            catalog_service.shutdown()
            await asyncio.wait_for(catalog_task, 15)

        stack.push_async_callback(stop_catalog)
        for _ in range(300):
            if (data_dir / "catalog" / "run" / "catalog.ready.json").exists():
                break
            assert not catalog_task.done(), "the catalog service stopped during start-up"
            await asyncio.sleep(0.05)
        connection = await connect(nats_url, name="coordinator-table-tests")
        stack.push_async_callback(connection.close)
        controller = (controller_class or EngineController)(data_dir)
        if isinstance(controller, EngineController):
            controller.connection = connection  # relays subscribe batches
        await controller.start()
        stack.push_async_callback(controller.stop)
        endpoint = NatsServiceEndpoint(connection, CONTROLLER_SERVICE, controller)
        await endpoint.start()
        stack.push_async_callback(endpoint.stop, 0.5)
        settings.setdefault("storage_settle_timeout", 0.5)
        service, task = await _start_coordinator(nats_url, data_dir / "coordinator", **settings)
        stack.push_async_callback(_stop_coordinator, service, task)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.sql_port}")
        stack.push_async_callback(channel.close)
        harness = TableHarness(service, None, controller, sql_pb2_grpc.SqlStub(channel))  # type: ignore[arg-type]
        harness.catalog_service = catalog_service
        yield harness


@pytest.fixture
async def tables(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    """A coordinator with tables on the real catalog service (see ``table_system``)."""
    async with table_system(nats_url, data_dir) as harness:
        yield harness


@pytest.fixture
def start_table_system() -> Any:
    """``async with start_table_system(nats_url, data_dir, **coordinator_settings) as h``."""
    return table_system


# -- compute: the coordinator on an in-process replica --


class EngineController(StorageController):
    """A ``StorageController`` with one replica in process, as the real controller has.

    The replica's ``DataflowRunner`` on the real engine renders the dataflows
    it is sent (``dataflows``, ``created``, ``dropped`` record them), answers
    index peeks (unless the test chose ``answers[target_id]``), writes
    materialized views and streams subscribes, relayed as the controller
    relays them (``publish_subscribe`` sends a batch the test makes up).
    """

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.connection: Any = None
        self.runner: Any = None
        self.hydration: dict[str, compute_pb2.Hydration] = {}
        self.errors: dict[str, compute_pb2.CollectionError] = {}

    async def start(self) -> None:
        from loupe.compute_replica.dataflows import DataflowRunner
        from loupe.compute_replica.protocol import Responses
        from loupe.dataflow import ComputeInstance

        await super().start()
        self.runner = DataflowRunner(
            ComputeInstance(workers=2),
            responses=Responses("u1", 1),
            publish=self._on_response,
            storage=StorageLocation(self.blob_uri, self.consensus_uri),
            poll_interval=0.02,
        )
        self.runner.start()

    async def publish_subscribe(self, sink_id: str, batch: compute_pb2.SubscribeBatch) -> None:
        batch.sink_id = sink_id
        await publish(self.connection, f"loupe.controller.v1.subscribe.{sink_id}", batch)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.close()
        await super().stop()

    async def _on_response(self, response: compute_pb2.ComputeResponse) -> None:
        kind = response.WhichOneof("kind")
        if kind == "subscribe_batch":
            batch = response.subscribe_batch
            await self.publish_subscribe(batch.sink_id, batch)
        elif kind == "hydration":
            self.hydration[response.hydration.dataflow_id] = response.hydration
        elif kind == "collection_error":
            self.errors[response.collection_error.collection_id] = response.collection_error

    async def CreateDataflow(self, request: Any, context: Any) -> common_pb2.Empty:
        await super().CreateDataflow(request, context)
        await self.runner.create_dataflow(compute_pb2.CreateDataflow(dataflow=request.dataflow))
        return common_pb2.Empty()

    @property
    def sinces(self) -> dict[str, int]:
        """The sinces AllowCompaction moved, per collection: the replica's own record."""
        sinces: dict[str, int] = self.runner._sinces
        return sinces

    async def ListFrontiers(self, request: Any, context: Any) -> Any:
        """Every export's write frontier on the replica and the since it was allowed."""
        exports = self.runner._exports
        return controller_pb2.ListFrontiersResponse(
            collections=[
                controller_pb2.CollectionFrontiers(
                    collection_id=export_id,
                    write_frontier=self.runner.write_frontier(export_id),
                    since=self.sinces.get(
                        export_id, self.runner._dataflows[dataflow_id].desc.as_of
                    ),
                )
                for export_id, dataflow_id in exports.items()
            ]
        )

    async def AllowCompaction(self, request: Any, context: Any) -> common_pb2.Empty:
        for collection_id in request.collection_ids:
            await self.runner.allow_compaction(
                compute_pb2.AllowCompaction(
                    collection_id=collection_id, since=request.since, empty=request.empty
                )
            )
        return await super().AllowCompaction(request, context)

    async def CollectionStatus(self, request: Any, context: Any) -> Any:
        statuses = []
        for collection_id in request.collection_ids:
            status = controller_pb2.CollectionStatus(collection_id=collection_id)
            if collection_id in self.hydration:
                status.hydration.append(self.hydration[collection_id])
            error = self.errors.get(collection_id)
            if error is not None and not error.cleared:
                status.error.CopyFrom(error.error)
            statuses.append(status)
        return controller_pb2.CollectionStatusResponse(collections=statuses)

    async def Peek(self, request: Any, context: Any) -> compute_pb2.PeekResponse:
        peek = request.peek
        if peek.target_id in self.answers or self.block_peeks:
            return await super().Peek(request, context)
        self.peeks.append(request)
        since = self.sinces.get(peek.target_id, 0)
        if peek.timestamp and peek.timestamp < since:  # as the controller refuses it
            error = LoupeError(
                "XX000",
                f"Timestamp ({peek.timestamp}) is not valid for all inputs:"
                f" {peek.target_id} since {since}",
            )
            return compute_pb2.PeekResponse(uuid=peek.uuid, error=error.to_proto())
        try:
            result = await self.runner.peek(PeekRequest.from_proto(peek))
        except LoupeError as error:
            return compute_pb2.PeekResponse(uuid=peek.uuid, error=error.to_proto())
        return compute_pb2.PeekResponse(uuid=peek.uuid, rows=result.to_proto())


@pytest.fixture
async def engine(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    """A coordinator on the real catalog service and the real engine (``EngineController``)."""
    async with table_system(nats_url, data_dir, controller_class=EngineController) as harness:
        yield harness


@pytest.fixture
async def compute(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    """The same as ``engine``, for the compute statements' tests (``test_compute.py``)."""
    async with table_system(nats_url, data_dir, controller_class=EngineController) as harness:
        yield harness


def _result_columns(peek: compute_pb2.Peek) -> tuple[ResultColumn, ...]:
    return tuple(ResultColumn(c.name, c.type, c.nullable) for c in peek.result_desc.columns)


class StatementLogStream:
    """A scoped stream standing in for the storage writer's, read back in order."""

    def __init__(self, nc: Any) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name, self.subject = f"STMTLOG_{tag}", f"test.{tag}.updates"
        self.nc = nc
        self.seen = 0

    async def updates(self) -> list[tuple[str, tuple[Any, ...], int]]:
        """The updates published since the last call."""
        js = self.nc.jetstream()
        info = await js.stream_info(self.name)
        found = []
        for seq in range(self.seen + 1, info.state.last_seq + 1):
            message = await js.get_msg(self.name, seq)
            batch = storage_pb2.UpdateBatch.FromString(message.data)
            for collection in batch.collections:
                for update in collection.updates:
                    found.append((collection.collection_id, from_row(update.row), update.diff))
                if collection.arrow_ipc:  # the columnar form: rows in the columns' order
                    table = pa.ipc.open_stream(collection.arrow_ipc).read_all()
                    diffs = table.column(DIFF_COLUMN).to_pylist()
                    values = table.drop_columns([DIFF_COLUMN]).to_pylist()
                    found.extend(
                        (collection.collection_id, tuple(row.values()), diff)
                        for row, diff in zip(values, diffs, strict=True)
                    )
        self.seen = info.state.last_seq
        return found


@pytest.fixture
async def stream(nats_connection):
    """A scoped stream the statement logger publishes to, read back as the writer would."""
    stream = StatementLogStream(nats_connection)
    await ensure_stream(nats_connection, stream.name, [stream.subject])
    yield stream
    await nats_connection.jetstream().delete_stream(stream.name)


# The configured superusers' password in tests of password logins.
SUPERUSER_PASSWORD = "s3cret-for-tests"


@pytest.fixture
async def secured(nats_url, data_dir, start_table_system):
    """A coordinator with the ``password`` authenticator over the table system."""
    async with start_table_system(
        nats_url,
        data_dir,
        authenticator="password",
        superuser_password=SUPERUSER_PASSWORD,
        storage_settle_timeout=0.1,
    ) as harness:
        yield harness


async def _open(harness: Any, user: str, password: str) -> str:
    """A gRPC session of ``user`` (raises on a refused login)."""
    response = await harness.stub.OpenSession(
        sql_pb2.OpenSessionRequest(user=user, password=password)
    )
    return response.session_id
