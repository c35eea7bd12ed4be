"""Issue 11: after the storage writer was down, the catalog relations equal the catalog again.

A real storage writer (pyarrow parts, so no JVM) behind a ``Controller``
endpoint on NATS, over a JetStream stream whose duplicate window is one
second (two minutes in production: a writer down for longer than that is
what the test compresses). Its part store fails every write while "Spark is
dead". DDL goes on meanwhile: a table is created, then dropped; appends time
out. Before the fix, the coordinator re-sent the unconfirmed batch under its
id after the duplicate window, the stream stored it twice, and once the
writer came back ``mz_objects`` listed the dropped table.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from loupe.builtins import MZ_OBJECTS
from loupe.common.errors import LoupeError
from loupe.common.transport import NatsServiceClient, NatsServiceEndpoint
from loupe.controller.service import CONTROLLER_SERVICE, collection_metadata
from loupe.controller.storage import ArrowPartStore, StorageWriter, StreamConfig
from loupe.coordinator.catalog_relations import CatalogRelationsWriter, read_collection_rows
from loupe.persist.location import default_uris, open_location
from loupe.proto.controller.v1 import controller_pb2
from loupe.storage.schema import WriteGroup

DUPLICATE_WINDOW_S = 1.0


class DeadSparkStore(ArrowPartStore):
    """Writes parts like ``ArrowPartStore``, except while ``dead``: then every job fails
    as a job on a dead Spark JVM does."""

    dead = False

    def write_flush(
        self, group: WriteGroup, tables: Mapping[str, pa.Table], timestamp: int, path: str
    ) -> None:
        if self.dead:
            raise ConnectionRefusedError(111, "Connection refused")
        super().write_flush(group, tables, timestamp, path)


class AppendOnlyController:
    """The controller's ``AppendUpdates``, as ``ControllerServicer`` serves it."""

    def __init__(self, writer: StorageWriter) -> None:
        self._writer = writer

    async def AppendUpdates(
        self, request: controller_pb2.AppendUpdatesRequest, context: Any
    ) -> controller_pb2.AppendUpdatesResponse:
        upper = await self._writer.append_collections(request.batch_id, request.collections)
        return controller_pb2.AppendUpdatesResponse(upper=upper)


@dataclasses.dataclass
class Storage:
    store: DeadSparkStore
    relations: CatalogRelationsWriter
    metadata: Any

    def objects(self) -> Counter[Any]:
        return read_collection_rows(self.metadata)


@pytest.fixture
async def storage(data_dir: Path, nats_connection: Any) -> AsyncIterator[Storage]:
    tag = uuid.uuid4().hex[:12]
    stream = dataclasses.replace(StreamConfig.scoped(tag), duplicate_window=DUPLICATE_WINDOW_S)
    blob_uri, consensus_uri = default_uris(data_dir)
    blob, consensus = open_location(blob_uri, consensus_uri)
    store = DeadSparkStore()
    writer = StorageWriter(
        None,
        blob,
        consensus,
        nats_connection,
        stream=stream,
        collections=(MZ_OBJECTS,),
        flush_interval=0.1,
        upper_interval=0.1,
        compaction_interval=3600,
        part_store=store,
    )
    await writer.start()
    endpoint = NatsServiceEndpoint(
        nats_connection, CONTROLLER_SERVICE, AppendOnlyController(writer), target=tag
    )
    await endpoint.start()
    client = NatsServiceClient(nats_connection, CONTROLLER_SERVICE, timeout=1.0, target=tag)
    relations = CatalogRelationsWriter(client, call_timeout=1.0, retry_for=1.0, settle_timeout=1.0)
    metadata = collection_metadata(MZ_OBJECTS, blob_uri, consensus_uri)
    await relations.load({MZ_OBJECTS.id: metadata}, (MZ_OBJECTS,))
    yield Storage(store, relations, metadata)
    await endpoint.stop(grace=0)
    await writer.stop()


async def converge(relations: CatalogRelationsWriter, names: tuple[str, ...], version: str) -> None:
    """Sync with a live writer until it answers: on a loaded machine one flush may outlast a
    1 s call, and the next try (the coordinator's periodic resync) is what converges."""
    for _ in range(30):
        with contextlib.suppress(LoupeError):
            await relations.sync(catalog(*names), version)
            return
    await relations.sync(catalog(*names), version)


def table(name: str) -> tuple[str, ...]:
    return (f"u-{name}", "u3", name, "table", "u1", "")


def catalog(*names: str) -> dict[str, Counter[Any]]:
    """The mz_objects rows of a catalog holding tables ``names``."""
    return {MZ_OBJECTS.id: Counter(table(name) for name in names)}


async def test_ddl_while_spark_is_dead_converges_once_it_is_back(storage: Storage) -> None:
    relations = storage.relations
    await converge(relations, ("a",), "catalog-1")
    assert storage.objects() == catalog("a")[MZ_OBJECTS.id]

    storage.store.dead = True
    # CREATE TABLE b: committed in the catalog, not confirmed by storage (in the stream).
    with pytest.raises(LoupeError):
        await relations.sync(catalog("a", "b"), "catalog-2")
    assert relations.stale
    await asyncio.sleep(DUPLICATE_WINDOW_S * 1.5)  # the writer stays down past the window
    # DROP TABLE b: not confirmed either.
    with pytest.raises(LoupeError):
        await relations.sync(catalog("a"), "catalog-3")

    storage.store.dead = False
    # The next tries (the next DDL, or the coordinator's periodic resync) converge; on a
    # loaded machine the writer's first flushes after the outage may outlast a 1 s call.
    await converge(relations, ("a",), "catalog-3")
    assert not relations.stale
    assert storage.objects() == catalog("a")[MZ_OBJECTS.id], "b is gone, a is there once"

    await converge(relations, ("a", "c"), "catalog-4")
    assert storage.objects() == catalog("a", "c")[MZ_OBJECTS.id]
