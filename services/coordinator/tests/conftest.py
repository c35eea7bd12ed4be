"""Fixtures for coordinator tests: small Catalog and Controller servicers on real NATS.

The real catalog and controller are separate services; these stand-ins keep
just enough state (clusters, replicas, collection contents) to answer the
coordinator the way the protos promise, and record what they were asked.
The controller evaluates peeks with polars over what was appended, like the
skeleton replica does.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import polars as pl
import pytest

from loupe.builtins import BUILTIN_COLLECTIONS, BY_ID, SYSTEM_CLUSTER_NAME
from loupe.common.errors import LoupeError, SqlState
from loupe.common.transport import NatsServiceEndpoint, connect, publish
from loupe.common.values import from_row, to_row
from loupe.coordinator.coordinator import (
    CATALOG_CHANGES_SUBJECT,
    CATALOG_SERVICE,
    CONTROLLER_SERVICE,
)
from loupe.coordinator.service import CoordinatorService, CoordinatorSettings
from loupe.persist.location import default_uris
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc

POLARS_TYPES: dict[str, Any] = {
    "text": pl.String,
    "bool": pl.Boolean,
    "uint8": pl.UInt64,
    "int8": pl.Int64,
    "timestamptz": pl.Datetime("us", "UTC"),
    # Intervals travel as text (``to_row`` of a timedelta).
    "interval": pl.Duration("us"),
}


class FakeCatalog:
    """Clusters and replicas in memory, with the bootstrap clusters of a fresh catalog."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.epoch = 1
        self.timestamp = 1_000
        self.ids = itertools.count(2)
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
        self.requests: list[catalog_pb2.TransactRequest] = []

    def snapshot(self) -> catalog_pb2.CatalogSnapshot:
        return catalog_pb2.CatalogSnapshot(
            epoch=self.epoch,
            timestamp=self.timestamp,
            clusters=self.clusters,
            replicas=self.replicas,
        )

    async def Snapshot(self, request: Any, context: Any) -> catalog_pb2.CatalogSnapshot:
        return self.snapshot()

    async def Transact(self, request: Any, context: Any) -> catalog_pb2.TransactResponse:
        self.requests.append(request)
        for op in request.ops:
            self.apply(op)
        self.timestamp += 1
        snapshot = self.snapshot()
        await publish(self.connection, CATALOG_CHANGES_SUBJECT, snapshot)
        return catalog_pb2.TransactResponse(timestamp=self.timestamp, snapshot=snapshot)

    def cluster(self, name: str) -> catalog_pb2.Cluster | None:
        return next((c for c in self.clusters if c.name == name), None)

    def apply(self, op: catalog_pb2.CatalogOp) -> None:
        kind = op.WhichOneof("kind")
        spec: Any
        cluster: Any
        if kind == "create_cluster":
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
            self.clusters.remove(cluster)
            self.replicas[:] = [r for r in self.replicas if r.cluster_id != cluster.id]
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
            self.replicas.remove(found[0])


class FakeController:
    """Collections in memory; peeks evaluated with polars over them."""

    def __init__(self, data_dir: Path) -> None:
        self.blob_uri, self.consensus_uri = default_uris(data_dir)
        self.contents: dict[str, Counter] = {c.id: Counter() for c in BUILTIN_COLLECTIONS}
        self.upper = 1
        self.applied: list[catalog_pb2.CatalogSnapshot] = []
        self.appends: list[controller_pb2.AppendUpdatesRequest] = []
        self.batch_ids: set[str] = set()
        self.peeks: list[controller_pb2.PeekRequest] = []
        self.canceled: list[str] = []
        self.block_peeks = False
        self._blocked: dict[str, asyncio.Event] = {}
        self.unavailable_for = 0  # ListCollections calls to refuse first

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
        self.appends.append(request)
        if request.batch_id not in self.batch_ids:
            self.batch_ids.add(request.batch_id)
            for collection in request.collections:
                for update in collection.updates:
                    self.contents[collection.collection_id][from_row(update.row)] += update.diff
        self.upper += 1
        return controller_pb2.AppendUpdatesResponse(upper=self.upper)

    def rows(self, collection_id: str) -> set[tuple]:
        return {row for row, count in self.contents[collection_id].items() if count > 0}

    async def Peek(self, request: Any, context: Any) -> compute_pb2.PeekResponse:
        self.peeks.append(request)
        peek = request.peek
        if self.block_peeks:
            event = self._blocked.setdefault(peek.uuid, asyncio.Event())
            await event.wait()
            return compute_pb2.PeekResponse(uuid=peek.uuid, canceled=True)
        frames = {}
        for source in peek.sources:
            builtin = BY_ID[source.collection.collection_id]
            rows = [
                row
                for row, count in self.contents[builtin.id].items()
                for _ in range(max(count, 0))
            ]
            frames[source.name] = pl.DataFrame(
                rows,
                schema=[(n, POLARS_TYPES[t]) for n, t in builtin.columns],
                orient="row",
            )
        try:
            frame = pl.SQLContext(frames).execute(peek.sql, eager=True)
        except Exception as error:
            return compute_pb2.PeekResponse(
                uuid=peek.uuid, error=common_pb2.Error(code="XX000", message=str(error))
            )
        types: dict[Any, str] = {
            pl.String: "text",
            pl.Boolean: "bool",
            pl.UInt64: "uint8",
            pl.Int64: "int8",
        }
        desc = common_pb2.RelationDesc(
            columns=[
                common_pb2.Column(name=name, type=types.get(dtype, "text"))
                for name, dtype in frame.schema.items()
            ]
        )
        return compute_pb2.PeekResponse(
            uuid=peek.uuid,
            rows=compute_pb2.PeekRows(desc=desc, rows=[to_row(r) for r in frame.rows()]),
        )

    async def CancelPeek(self, request: Any, context: Any) -> common_pb2.Empty:
        self.canceled.append(request.uuid)
        self._blocked.setdefault(request.uuid, asyncio.Event()).set()
        return common_pb2.Empty()


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


@pytest.fixture
def start_fakes() -> Any:
    """``await start_fakes(nats_url, data_dir)`` -> (connection, catalog, controller, endpoints)."""
    return _start_fakes


@pytest.fixture
def start_coordinator() -> Any:
    """``await start_coordinator(nats_url, data_dir)`` -> (service, task), once ready."""
    return _start_coordinator
