"""The controller service with its real storage writer: replica statuses written with Spark."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loupe.builtins import MZ_CLUSTER_REPLICA_STATUS_HISTORY, MZ_CLUSTER_REPLICA_STATUSES
from loupe.common.transport import NatsServiceEndpoint
from loupe.controller.service import CATALOG_SERVICE, ControllerService, ControllerSettings
from loupe.persist import Shard, expand
from loupe.persist.location import default_uris, open_location
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.testing import assert_eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


class StaticCatalog:
    def __init__(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        self.snapshot = snapshot

    async def Snapshot(self, request: Any, context: Any) -> catalog_pb2.CatalogSnapshot:
        return self.snapshot


def shard_rows(data_dir: Any, collection_id: str) -> list[tuple[Any, ...]]:
    blob, consensus = open_location(*default_uris(data_dir))
    shard = Shard(collection_id, blob, consensus)
    if shard.upper == 0:
        return []
    table = expand(shard.snapshot())
    return [tuple(row.values()) for row in table.to_pylist()]


async def test_statuses_reach_storage_through_the_spark_writer(
    spark, data_dir, nats_url, nats_connection, kit, unique
):
    """Online, killed and back, then stopped: each visible in the shards the writer keeps."""
    pytest.importorskip("loupe.controller.storage")
    replica_id = f"u{unique}"
    snapshot = catalog_pb2.CatalogSnapshot(
        epoch=1,
        timestamp=1,
        clusters=[catalog_pb2.Cluster(id=f"c{unique}", name="quickstart")],
        replicas=[catalog_pb2.ClusterReplica(id=replica_id, name="r1", cluster_id=f"c{unique}")],
    )
    endpoint = NatsServiceEndpoint(nats_connection, CATALOG_SERVICE, StaticCatalog(snapshot))
    await endpoint.start()
    orchestrator = kit.InProcessOrchestrator(nats_url)
    settings = ControllerSettings(data_dir=data_dir, nats_url=nats_url, storage_flush_interval=0.3)
    service = ControllerService(settings, orchestrator=orchestrator)
    running = asyncio.create_task(service.run())
    ready_file = data_dir / "run" / "controller.ready.json"

    def current() -> list[tuple[Any, ...]]:
        return [
            (r[0], r[2], r[3], r[5])
            for r in shard_rows(data_dir, MZ_CLUSTER_REPLICA_STATUSES.id)
            if r[0] == replica_id
        ]

    def is_current(expected: tuple[Any, ...]) -> Any:
        def check() -> None:
            assert current() == [expected]

        return check

    try:
        await assert_eventually(lambda: _exists(ready_file), timeout=120)
        assert service.writer.__class__.__name__ == "StorageWriter"
        await assert_eventually(is_current((replica_id, "online", None, 1)), timeout=15)
        await orchestrator.kill(replica_id)
        await assert_eventually(is_current((replica_id, "online", None, 2)), timeout=15)
    finally:
        service.shutdown()
        await asyncio.wait_for(running, 60)
        await endpoint.stop()
    assert current() == [(replica_id, "offline", "controller-stopped", 2)]
    history = [
        (r[2], r[3], r[5])
        for r in shard_rows(data_dir, MZ_CLUSTER_REPLICA_STATUS_HISTORY.id)
        if r[0] == replica_id
    ]
    assert ("offline", "killed", 1) in history
    assert ("online", None, 2) in history


def _exists(path: Any) -> None:
    assert path.exists(), f"{path} missing"
