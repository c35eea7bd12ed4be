"""Fixtures for compute replica tests: the test plays the controller over real NATS."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from loupe.builtins import BuiltinCollection
from loupe.common.transport import connect, publish
from loupe.compute_replica import ComputeReplica, ComputeReplicaSettings
from loupe.compute_replica.protocol import command_subject, response_subject
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Shard, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually


class Storage:
    """A real storage location (local blob + SQLite consensus) in a temp dir."""

    def __init__(self, data_dir: Path) -> None:
        self.blob_uri, self.consensus_uri = default_uris(data_dir)
        self._blob, self._consensus = open_location(self.blob_uri, self.consensus_uri)

    def shard(self, collection: BuiltinCollection) -> Shard:
        shard = Shard(collection.shard_id, self._blob, self._consensus)
        shard.ensure(collection.columns)
        return shard

    def append(
        self, collection: BuiltinCollection, rows: Sequence[dict[str, Any]], timestamp: int
    ) -> None:
        """Write ``rows`` (diff +1) at ``timestamp`` and move the upper to ``timestamp + 1``."""
        shard = self.shard(collection)
        updates = [{**row, TIMESTAMP_COLUMN: timestamp, DIFF_COLUMN: 1} for row in rows]
        table = pa.Table.from_pylist(updates, schema=arrow_schema(collection.columns))
        shard.compare_and_append(table, shard.upper, timestamp + 1)


class ControllerPeer:
    """The controller's side of the compute protocol, spoken over NATS.

    Not a mock: it sends real ``ComputeCommand``s to the replica's subject and
    records every ``ComputeResponse`` the replica publishes.
    """

    def __init__(self, connection: Any, replica_id: str, incarnation: int) -> None:
        self.nc = connection
        self.replica_id = replica_id
        self.incarnation = incarnation
        self.responses: list[compute_pb2.ComputeResponse] = []

    async def listen(self) -> None:
        async def record(msg: Any) -> None:
            self.responses.append(compute_pb2.ComputeResponse.FromString(msg.data))

        await self.nc.subscribe(response_subject(self.replica_id), cb=record)
        await self.nc.flush()

    def of_kind(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.responses if r.WhichOneof("kind") == kind]

    async def send(self, incarnation: int | None = None, **kind: Any) -> None:
        command = compute_pb2.ComputeCommand(
            incarnation=self.incarnation if incarnation is None else incarnation, **kind
        )
        await publish(self.nc, command_subject(self.replica_id), command)
        await self.nc.flush()

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 10.0) -> list[Any]:
        def enough() -> list[Any]:
            found = self.of_kind(kind)
            assert len(found) >= count, f"{len(found)} {kind} responses, want {count}"
            return found

        return await assert_eventually(enough, timeout=timeout)

    async def create_instance(
        self,
        storage: Storage | None = None,
        workers: int = 1,
        incarnation: int | None = None,
        memory_limit_bytes: int = 0,
        logging: compute_pb2.LoggingConfig | None = None,
    ) -> None:
        incarnation = self.incarnation if incarnation is None else incarnation
        if logging is None:
            logging = compute_pb2.LoggingConfig(interval_ns=1_000_000_000, enable_logging=True)
        await self.send(
            incarnation=incarnation,
            create_instance=compute_pb2.CreateInstance(
                replica_id=self.replica_id,
                cluster_id="u1",
                incarnation=incarnation,
                workers=workers,
                memory_limit_bytes=memory_limit_bytes,
                logging=logging,
                blob_uri=storage.blob_uri if storage else "",
                consensus_uri=storage.consensus_uri if storage else "",
            ),
        )

    async def create_index(
        self, collection: BuiltinCollection, *, as_of: int = 0, index: str = "i"
    ) -> None:
        """A dataflow that arranges ``collection`` as it is, exported as index ``index``."""
        types = tuple(t for _, t in collection.columns)
        plan = lir.Get(0, collection.id, types=types)
        columns = tuple((f"c{i}", t) for i, t in enumerate(types))
        desc = DataflowDescription(
            id=f"{index}_view",
            debug_name=f"{index}_view",
            source_imports=(SourceImport(collection.id, collection.shard_id, collection.columns),),
            objects_to_build=(BuildDesc(f"{index}_view", plan, columns, f"{index}_view"),),
            index_exports=(IndexExport(index, f"{index}_view", (0,)),),
            as_of=as_of,
        )
        await self.send(
            create_dataflow=compute_pb2.CreateDataflow(dataflow=dataflow_to_proto(desc))
        )

    async def peek(
        self,
        target_id: str = "i",
        *,
        columns: Sequence[tuple[str, str]] = (),
        timestamp: int = 0,
        max_result_rows: int = 0,
        incarnation: int | None = None,
        reply_subject: str = "",
        direct: bool = False,
    ) -> str:
        """Peek index ``target_id``, naming the result ``columns``; returns the peek's uuid.
        ``direct``: as a coordinator sends it itself (every answer to ``reply_subject``)."""
        peek_id = str(uuid.uuid4())
        await self.send(
            incarnation=incarnation,
            peek=compute_pb2.Peek(
                uuid=peek_id,
                timestamp=timestamp,
                target_id=target_id,
                max_result_rows=max_result_rows,
                reply_subject=reply_subject,
                direct=direct,
                result_desc=common_pb2.RelationDesc(
                    columns=[common_pb2.Column(name=n, type=t) for n, t in columns]
                ),
            ),
        )
        return peek_id

    def peek_responses(self, peek_id: str) -> list[compute_pb2.PeekResponse]:
        return [p for p in self.of_kind("peek_response") if p.uuid == peek_id]

    async def peek_response(self, peek_id: str, timeout: float = 10.0) -> Any:
        def answered() -> Any:
            found = self.peek_responses(peek_id)
            assert found, f"no answer to peek {peek_id}"
            return found[0]

        return await assert_eventually(answered, timeout=timeout)


@pytest.fixture
def storage(data_dir: Path) -> Storage:
    return Storage(data_dir)


@pytest.fixture
def replica_id() -> str:
    # Unique per test: every test's replica has its own subjects on the shared server.
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def start_replica(nats_url: str, replica_id: str) -> AsyncIterator[Callable[..., Any]]:
    """Start an in-process ``ComputeReplica`` (incarnation 3 unless told)."""
    running: list[tuple[ComputeReplica, asyncio.Task[None]]] = []

    async def start(**overrides: Any) -> ComputeReplica:
        settings = ComputeReplicaSettings(
            **{
                "replica_id": replica_id,
                "incarnation": 3,
                "workers": 1,
                "nats_url": nats_url,
                "heartbeat_interval": 0.2,
                "hello_interval": 0.1,
                "metrics_port": -1,
                **overrides,
            }
        )
        replica = ComputeReplica(settings)
        running.append((replica, asyncio.create_task(replica.run())))
        return replica

    yield start
    for replica, task in running:
        replica.shutdown()
        await asyncio.wait_for(task, timeout=10)


@pytest.fixture
async def controller(nats_url: str, replica_id: str) -> AsyncIterator[ControllerPeer]:
    connection = await connect(nats_url, name="test-controller")
    probe = ControllerPeer(connection, replica_id, incarnation=3)
    await probe.listen()
    yield probe
    await connection.close()


@pytest.fixture
async def created(
    start_replica: Callable[..., Any], controller: ControllerPeer, storage: Storage
) -> ComputeReplica:
    """A replica (incarnation 3, 2 workers) whose instance is created and initialized."""
    replica = await start_replica(workers=2)
    await controller.wait_for("hello")
    await controller.create_instance(storage, workers=2)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    await assert_eventually(lambda: _assert(replica.initialized))
    return replica


def _assert(condition: bool) -> None:
    assert condition
