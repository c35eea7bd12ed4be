"""The controller service: catalog following and the Controller API over real NATS."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTERS,
)
from loupe.common.errors import LoupeError
from loupe.common.transport import NatsServiceClient, NatsServiceEndpoint
from loupe.common.values import to_row
from loupe.controller.service import (
    CATALOG_CHANGES_SUBJECT,
    CATALOG_SERVICE,
    CONTROLLER_SERVICE,
    ControllerService,
    ControllerSettings,
)
from loupe.interval import Interval
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2, plan_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.proto.storage.v1 import storage_pb2
from loupe.testing import assert_eventually


class StaticCatalog:
    """Answers ``Catalog.Snapshot`` with whatever snapshot the test sets."""

    def __init__(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        self.snapshot = snapshot

    async def Snapshot(self, request: Any, context: Any) -> catalog_pb2.CatalogSnapshot:
        return self.snapshot


def catalog_snapshot(
    unique: str, timestamp: int, replicas: list[str]
) -> catalog_pb2.CatalogSnapshot:
    return catalog_pb2.CatalogSnapshot(
        epoch=1,
        timestamp=timestamp,
        clusters=[
            catalog_pb2.Cluster(
                id=f"c{unique}",
                name="quickstart",
                managed=True,
                size="1",
                replication_factor=len(replicas),
                introspection_interval_ns=1_000_000_000,
            ),
            catalog_pb2.Cluster(id=f"e{unique}", name="empty", replication_factor=0),
        ],
        replicas=[
            catalog_pb2.ClusterReplica(id=rid, name=f"r{i}", cluster_id=f"c{unique}", size="2")
            for i, rid in enumerate(replicas, 1)
        ],
    )


@pytest.fixture
async def controller(
    data_dir, nats_url, nats_connection, kit, unique
) -> AsyncIterator[tuple[ControllerService, Any]]:
    """A controller service (pyarrow writer, in-process replicas) started before its catalog."""
    writers: list[Any] = []

    def writer_factory(blob: Any, consensus: Any, interval: float) -> Any:
        writers.append(kit.ArrowStorageWriter(blob, consensus, flush_interval=interval))
        return writers[-1]

    settings = ControllerSettings(
        data_dir=data_dir, nats_url=nats_url, storage_flush_interval=0.1, catalog_wait=10
    )
    service = ControllerService(
        settings,
        writer_factory=writer_factory,
        orchestrator=kit.InProcessOrchestrator(nats_url),
    )
    running = asyncio.create_task(service.run())
    ready_file = data_dir / "run" / "controller.ready.json"
    # The catalog comes up after the controller: the controller waits for it.
    await asyncio.sleep(0.3)
    assert not ready_file.exists()
    catalog = StaticCatalog(catalog_snapshot(unique, 10, [f"u{unique}"]))
    endpoint = NatsServiceEndpoint(nats_connection, CATALOG_SERVICE, catalog)
    await endpoint.start()
    try:
        await assert_eventually(lambda: _exists(ready_file), timeout=15)
        yield service, writers[0]
    finally:
        service.shutdown()
        await asyncio.wait_for(running, 15)
        await endpoint.stop()
    assert not ready_file.exists()


def _exists(path: Any) -> None:
    assert path.exists(), f"{path} missing"


async def test_serves_the_controller_api_and_follows_the_catalog(
    controller, nats_connection, unique
):
    """Replicas follow the catalog (snapshot, change feed, ApplyCatalog); peeks are routed."""
    service, writer = controller
    client = NatsServiceClient(nats_connection, CONTROLLER_SERVICE)
    compute = service.compute
    first, second = f"u{unique}", f"w{unique}"
    await assert_eventually(lambda: _online(compute, first))
    ready = json.loads((service.settings.data_dir / "run" / "controller.ready.json").read_text())
    metrics = await asyncio.to_thread(_get, f"http://127.0.0.1:{ready['metrics_port']}/metrics")
    assert b"loupe_controller_replica_online" in metrics

    # The change feed adds a replica.
    await nats_connection.publish(
        CATALOG_CHANGES_SUBJECT,
        catalog_snapshot(unique, 11, [first, second]).SerializeToString(),
    )
    await assert_eventually(lambda: _online(compute, second))

    # An older snapshot is skipped; the newest one drops a replica.
    stale = await client.ApplyCatalog(
        controller_pb2.ApplyCatalogRequest(snapshot=catalog_snapshot(unique, 5, []))
    )
    assert (list(stale.replicas_started), list(stale.replicas_stopped)) == ([], [])
    applied = await client.ApplyCatalog(
        controller_pb2.ApplyCatalogRequest(snapshot=catalog_snapshot(unique, 12, [first]))
    )
    assert (list(applied.replicas_started), list(applied.replicas_stopped)) == ([], [second])
    assert compute.replica_ids() == [first]
    with pytest.raises(LoupeError) as error:
        await client.ApplyCatalog(controller_pb2.ApplyCatalogRequest())
    assert error.value.code == "INVALID_ARGUMENT"
    assert compute.replica_ids() == [first]

    answer = await client.Peek(
        controller_pb2.PeekRequest(
            cluster_id=f"c{unique}", peek=compute_pb2.Peek(), timeout_ms=5000
        )
    )
    assert answer.rows.rows[0].values[0].text_value == first
    # A cluster without replicas: the peek waits (as in Materialize); the round says why.
    waiting = controller_pb2.PeekRequest(
        cluster_id=f"e{unique}", peek=compute_pb2.Peek(uuid=f"w{unique}"), timeout_ms=200
    )
    with pytest.raises(LoupeError) as error:
        await client.Peek(waiting)
    assert (error.value.code, error.value.message) == (
        "DEADLINE_EXCEEDED",
        f"peek w{unique} waits for cluster 'empty' to have an online replica",
    )
    assert await client.CancelPeek(compute_pb2.CancelPeek(uuid=f"w{unique}")) == common_pb2.Empty()
    assert len(compute.peeks) == 0
    assert await client.CancelPeek(compute_pb2.CancelPeek(uuid="nothing")) == common_pb2.Empty()

    await writer.flush()
    statuses = writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert [(r[0], r[2]) for r in statuses] == [(first, "online")]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


def _online(compute: Any, replica_id: str) -> None:
    assert compute is not None, "the controller has not started its compute controller yet"
    status = compute.replica_status(replica_id)
    assert status is not None
    assert status.status == "online"


async def test_list_collections_and_append_updates(controller, nats_connection):
    """ListCollections names every builtin collection; AppendUpdates is durable on return."""
    _service, writer = controller
    client = NatsServiceClient(nats_connection, CONTROLLER_SERVICE)
    listed = await client.ListCollections(common_pb2.Empty())
    assert [c.collection_id for c in listed.collections] == [c.id for c in BUILTIN_COLLECTIONS]
    clusters = next(c for c in listed.collections if c.collection_id == MZ_CLUSTERS.id)
    assert [(col.name, col.type) for col in clusters.relation_desc.columns] == list(
        MZ_CLUSTERS.columns
    )
    assert clusters.shard_id == MZ_CLUSTERS.shard_id
    assert clusters.blob_uri.startswith("file://")

    row = ("u9", "analytics", "u1", True, "1", 1, Interval(micros=1_000_000), False)
    request = controller_pb2.AppendUpdatesRequest(
        batch_id="b1",
        collections=[
            storage_pb2.CollectionUpdates(
                collection_id=MZ_CLUSTERS.id,
                updates=[storage_pb2.Update(row=to_row(row), diff=1)],
            )
        ],
    )
    response = await client.AppendUpdates(request)
    assert response.upper > 0
    assert response.upper <= writer.upper
    expected = row
    assert expected in writer.snapshot(MZ_CLUSTERS.id)
    # A replayed batch is applied once.
    await client.AppendUpdates(request)
    assert writer.snapshot(MZ_CLUSTERS.id).count(expected) == 1

    with pytest.raises(LoupeError) as error:
        await client.AppendUpdates(
            controller_pb2.AppendUpdatesRequest(
                batch_id="b2", collections=[storage_pb2.CollectionUpdates(collection_id="s999")]
            )
        )
    assert error.value.code == "NOT_FOUND"
    with pytest.raises(LoupeError) as error:
        await client.AppendUpdates(
            controller_pb2.AppendUpdatesRequest(
                batch_id="b3",
                collections=[
                    storage_pb2.CollectionUpdates(
                        collection_id=MZ_CLUSTERS.id,
                        updates=[storage_pb2.Update(row=to_row(("x",)), diff=1)],
                    )
                ],
            )
        )
    assert error.value.code == "INVALID_ARGUMENT"


async def test_shutdown_stops_replicas_and_flushes(
    data_dir, nats_url, nats_connection, kit, unique
):
    """Shutdown marks replicas offline, stops them, flushes the writer once more."""
    writers: list[Any] = []
    orchestrator = kit.InProcessOrchestrator(nats_url)

    def writer_factory(blob: Any, consensus: Any, interval: float) -> Any:
        # A long interval: only the final flush can write the shutdown statuses.
        writers.append(kit.ArrowStorageWriter(blob, consensus, flush_interval=60))
        return writers[-1]

    endpoint = NatsServiceEndpoint(
        nats_connection, CATALOG_SERVICE, StaticCatalog(catalog_snapshot(unique, 1, [f"u{unique}"]))
    )
    await endpoint.start()
    service = ControllerService(
        ControllerSettings(data_dir=data_dir, nats_url=nats_url),
        writer_factory=writer_factory,
        orchestrator=orchestrator,
    )
    running = asyncio.create_task(service.run())
    try:
        await assert_eventually(lambda: _online(service.compute, f"u{unique}"), timeout=15)
    finally:
        service.shutdown()
        await asyncio.wait_for(running, 15)
        await endpoint.stop()
    assert orchestrator.replicas == {}
    statuses = writers[0].snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert [(r[0], r[2], r[3]) for r in statuses] == [
        (f"u{unique}", "offline", "controller-stopped")
    ]


async def test_dataflow_rpcs_install_report_and_drop(controller, nats_connection, unique):
    """CreateDataflow reaches the replicas; ListFrontiers and CollectionStatus show their reports."""
    service, _writer = controller
    client = NatsServiceClient(nats_connection, CONTROLLER_SERVICE)
    replica_id, cluster_id = f"u{unique}", f"c{unique}"
    await assert_eventually(lambda: _online(service.compute, replica_id))
    dataflow = plan_pb2.DataflowDescription(
        id="d1", as_of=4, index_exports=[plan_pb2.IndexExport(index_id="i1", on_id="d1")]
    )
    for _ in range(2):  # idempotent by id
        await client.CreateDataflow(
            controller_pb2.CreateDataflowRequest(cluster_id=cluster_id, dataflow=dataflow)
        )
    replica = service.compute._orchestrator.replicas[replica_id]

    def installed() -> None:
        assert replica.kinds().count("create_dataflow") == 1

    await assert_eventually(installed)
    reports = [
        compute_pb2.ComputeResponse(
            replica_id=replica_id,
            incarnation=1,
            frontiers=compute_pb2.Frontiers(collection_id="i1", write_frontier=9),
        ),
        compute_pb2.ComputeResponse(
            replica_id=replica_id,
            incarnation=1,
            hydration=compute_pb2.Hydration(dataflow_id="d1", nodes_total=3, nodes_hydrated=1),
        ),
        compute_pb2.ComputeResponse(
            replica_id=replica_id,
            incarnation=1,
            collection_error=compute_pb2.CollectionError(
                collection_id="i1", error=common_pb2.Error(code="22012", message="division by zero")
            ),
        ),
    ]
    for report in reports:
        await nats_connection.publish(
            f"loupe.compute.v1.{replica_id}.response", report.SerializeToString()
        )
    request = controller_pb2.ListFrontiersRequest(cluster_id=cluster_id)

    async def reported() -> None:
        status = await client.CollectionStatus(request)
        assert [c.error.code for c in status.collections] == ["22012"]
        assert [(h.nodes_total, h.nodes_hydrated) for h in status.collections[0].hydration] == [
            (3, 1)
        ]

    await assert_eventually(reported)
    frontiers = await client.ListFrontiers(request)
    (collection,) = frontiers.collections
    assert (collection.collection_id, collection.write_frontier, collection.since) == ("i1", 9, 4)
    assert [(r.replica_id, r.write_frontier) for r in collection.replicas] == [(replica_id, 9)]

    await client.AllowCompaction(
        controller_pb2.AllowCompactionRequest(
            cluster_id=cluster_id, collection_ids=["i1"], empty=True
        )
    )
    assert not (await client.ListFrontiers(request)).collections
    await assert_eventually(lambda: _assert("allow_compaction" in replica.kinds()))
    with pytest.raises(LoupeError) as error:
        await client.ListFrontiers(controller_pb2.ListFrontiersRequest())
    assert error.value.code == "INVALID_ARGUMENT"


def _assert(condition: object) -> None:
    assert condition
