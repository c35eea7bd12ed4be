"""Test helpers for the controller: a writer without Spark, replicas in-process.

``ArrowStorageWriter`` has the storage writer's API and writes the same
shards (real blob + SQLite consensus) with pyarrow instead of Spark, so most
tests need no Spark session; one test (marked ``spark``) uses the real
``StorageWriter``. ``InProcessOrchestrator`` implements the orchestrator
interface with ``FakeReplica``s (real NATS clients) instead of processes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from loupe.builtins import BUILTIN_COLLECTIONS, BuiltinCollection
from loupe.common.errors import LoupeError
from loupe.compute_replica import ComputeReplica, ComputeReplicaSettings
from loupe.controller.compute import ComputeController
from loupe.controller.orchestrators.base import Orchestrator, ReplicaEvent, ReplicaSpec
from loupe.controller.storage.writer import consolidated_rows
from loupe.interval import python_values
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Blob, Consensus, Shard, expand
from loupe.persist.location import default_uris, open_location
from loupe.persist.shard import arrow_schema
from loupe.storage.wire import BadBatch, UnknownCollection, decode_collections

HERE = Path(__file__).parent
FAKE_REPLICA_SCRIPT = HERE / "fake_replica.py"


def _load_fake_replica() -> Any:
    spec = importlib.util.spec_from_file_location("controller_fake_replica", FAKE_REPLICA_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake_replica = _load_fake_replica()
FakeReplica = fake_replica.FakeReplica
Behaviour = fake_replica.Behaviour
# Runs the fake replica as a child process with the compute-replica arguments.
FAKE_REPLICA_PROGRAM = (sys.executable, str(FAKE_REPLICA_SCRIPT), "compute-replica")


class ArrowStorageWriter:
    """The storage writer's API over real shards, written with pyarrow (no Spark)."""

    def __init__(
        self,
        blob: Blob,
        consensus: Consensus,
        collections: Sequence[BuiltinCollection] = BUILTIN_COLLECTIONS,
        flush_interval: float = 0.1,
    ) -> None:
        self._collections = {c.id: c for c in collections}
        self._shards = {c.id: Shard(c.shard_id, blob, consensus) for c in collections}
        self._flush_interval = flush_interval
        self._buffer: list[tuple[str, tuple[Any, ...], int]] = []
        self._batches: set[str] = set()
        self._lock = asyncio.Lock()
        # A flush cancelled while its thread runs must not overlap the next one.
        self._write_lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        self._upper = 0
        self.stopped = False

    async def start(self) -> None:
        for collection in self._collections.values():
            self._shards[collection.id].ensure(collection.columns)
        self._upper = min(shard.upper for shard in self._shards.values())
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()
        self.stopped = True

    @property
    def upper(self) -> int:
        return self._upper

    def stage(
        self, collection_id: str, row: tuple[Any, ...], diff: int, *, urgent: bool = False
    ) -> None:
        assert not self.stopped, "staged after stop"
        collection = self._collections[collection_id]
        assert len(row) == len(collection.columns), (collection.name, row)
        self._buffer.append((collection_id, tuple(row), diff))

    async def append(
        self, batch_id: str, updates: Iterable[tuple[str, tuple[Any, ...], int]]
    ) -> int:
        if batch_id not in self._batches:
            self._batches.add(batch_id)
            for collection_id, row, diff in updates:
                self.stage(collection_id, row, diff)
        return await self.flush()

    async def append_collections(self, batch_id: str, collections: Sequence[Any]) -> int:
        """``append`` for wire updates, checked like the real writer checks them."""
        try:
            tables = decode_collections(collections, self._collections)
        except UnknownCollection as error:
            raise LoupeError("NOT_FOUND", str(error)) from None
        except BadBatch as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        updates = []
        for collection_id, table in tables.items():
            names = self._collections[collection_id].column_names
            for row in table.to_pylist():
                updates.append((collection_id, tuple(row[n] for n in names), row[DIFF_COLUMN]))
        return await self.append(batch_id, updates)

    async def submit_collections(self, batch_id: str, collections: Sequence[Any]) -> int:
        """Like the real writer: checked, then written at the next flush (one batch, one write)."""
        try:
            tables = decode_collections(collections, self._collections)
        except (UnknownCollection, BadBatch) as error:
            raise LoupeError("INVALID_ARGUMENT", str(error)) from None
        for collection_id, table in tables.items():
            names = self._collections[collection_id].column_names
            for row in table.to_pylist():
                self.stage(collection_id, tuple(row[n] for n in names), row[DIFF_COLUMN])
        return 0

    def consolidated(self, collection_id: str) -> list[tuple[tuple[Any, ...], int]]:
        shard = self._shards[collection_id]
        if shard.upper == 0:
            return []
        return consolidated_rows(shard.snapshot(), self._collections[collection_id].column_names)

    def snapshot(self, collection_id: str) -> list[tuple[Any, ...]]:
        shard = self._shards[collection_id]
        if shard.upper == 0:
            return []
        table = expand(shard.snapshot())
        names = self._collections[collection_id].column_names
        return list(zip(*(python_values(table.column(n)) for n in names), strict=True))

    async def flush(self) -> int:
        async with self._lock:
            updates, self._buffer = self._buffer, []
            await asyncio.to_thread(self._write, updates)
        return self._upper

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            await self.flush()

    def _write(self, updates: list[tuple[str, tuple[Any, ...], int]]) -> None:
        with self._write_lock:
            self._write_locked(updates)

    def _write_locked(self, updates: list[tuple[str, tuple[Any, ...], int]]) -> None:
        uppers = {cid: shard.upper for cid, shard in self._shards.items()}
        ts = max(time.time_ns() // 1_000_000, *uppers.values())
        for collection_id, collection in self._collections.items():
            rows = [
                {
                    **dict(zip(collection.column_names, row, strict=True)),
                    TIMESTAMP_COLUMN: ts,
                    DIFF_COLUMN: diff,
                }
                for cid, row, diff in updates
                if cid == collection_id
            ]
            table = pa.Table.from_pylist(rows, schema=arrow_schema(collection.columns))
            self._shards[collection_id].compare_and_append(table, uppers[collection_id], ts + 1)
        self._upper = ts + 1


class RealReplica:
    """The real ``ComputeReplica`` service run in this process, as the orchestrator runs fakes."""

    def __init__(self, nats_url: str, replica_id: str, incarnation: int, _behaviour: Any) -> None:
        self.replica_id = replica_id
        self.incarnation = incarnation
        self.service = ComputeReplica(
            ComputeReplicaSettings(
                replica_id=replica_id,
                incarnation=incarnation,
                nats_url=nats_url,
                heartbeat_interval=0.2,
                hello_interval=0.1,
                metrics_port=-1,
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.service.run())

    async def stop(self) -> None:
        self.service.shutdown()
        if self._task is not None:
            await asyncio.wait_for(self._task, timeout=10)


class InProcessOrchestrator(Orchestrator):
    """Runs replicas as ``FakeReplica``s in this process; ``kill`` plays a crash."""

    def __init__(
        self,
        nats_url: str,
        behaviour: Callable[[str, int], Any] | None = None,
        *,
        restart_backoff: float = 0.05,
        replica_class: Any = None,
    ) -> None:
        super().__init__()
        self.nats_url = nats_url
        self.behaviour = behaviour or (lambda _replica_id, _incarnation: Behaviour())
        # FakeReplica, or RealReplica for the real compute replica.
        self.replica_class = replica_class or FakeReplica
        self.restart_backoff = restart_backoff
        self.replicas: dict[str, Any] = {}
        self.specs: dict[str, ReplicaSpec] = {}
        self.incarnations: dict[str, int] = {}
        self.events: list[ReplicaEvent] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.add_listener(self.events.append)

    @classmethod
    def from_settings(cls, settings: Any) -> InProcessOrchestrator:
        return cls(settings.nats_url)

    async def _start(self, spec: ReplicaSpec) -> None:
        incarnation = self.incarnations.get(spec.replica_id, 0) + 1
        self.incarnations[spec.replica_id] = incarnation
        replica = self.replica_class(
            self.nats_url,
            spec.replica_id,
            incarnation,
            self.behaviour(spec.replica_id, incarnation),
        )
        self.replicas[spec.replica_id] = replica
        self.specs[spec.replica_id] = spec
        self._emit(ReplicaEvent("started", spec.replica_id, incarnation, pid=0))
        await replica.start()

    async def _end(self, replica_id: str, **exit: Any) -> None:
        replica = self.replicas.pop(replica_id, None)
        if replica is None:
            return
        await replica.stop()
        self._emit(ReplicaEvent("exited", replica_id, replica.incarnation, **exit))

    async def ensure_replica(self, spec: ReplicaSpec) -> int:
        if self.specs.get(spec.replica_id) == spec and spec.replica_id in self.replicas:
            return self.incarnations[spec.replica_id]
        await self._end(spec.replica_id, exit_code=0, requested=True)
        await self._start(spec)
        return self.incarnations[spec.replica_id]

    async def drop_replica(self, replica_id: str) -> None:
        self.specs.pop(replica_id, None)
        await self._end(replica_id, exit_code=0, requested=True)

    async def restart_replica(self, replica_id: str) -> None:
        spec = self.specs.get(replica_id)
        await self._end(replica_id, signal=15, requested=True)
        if spec is not None:
            await self._start(spec)

    async def kill(
        self, replica_id: str, *, signal: int | None = 9, exit_code: int | None = None
    ) -> None:
        """Play a crash: the replica vanishes, is reported, and comes back after a backoff."""
        await self._end(replica_id, signal=signal, exit_code=exit_code)
        task = asyncio.create_task(self._restart_later(replica_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart_later(self, replica_id: str) -> None:
        await asyncio.sleep(self.restart_backoff)
        spec = self.specs.get(replica_id)
        if spec is not None and replica_id not in self.replicas:
            await self._start(spec)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for replica_id in list(self.replicas):
            await self._end(replica_id, signal=15, requested=True)
        self.specs.clear()

    def incarnation(self, replica_id: str) -> int | None:
        return self.incarnations.get(replica_id) if replica_id in self.specs else None

    def replica_ids(self) -> list[str]:
        return sorted(self.specs)


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps replica ids (and their subjects) apart between tests."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def storage(data_dir: Path) -> tuple[Blob, Consensus]:
    return open_location(*default_uris(data_dir))


@pytest.fixture
async def arrow_writer(storage: tuple[Blob, Consensus]) -> AsyncIterator[ArrowStorageWriter]:
    writer = ArrowStorageWriter(*storage)
    await writer.start()
    yield writer
    if not writer.stopped:
        await writer.stop()


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helper classes of this conftest, for the tests to build with."""
    return SimpleNamespace(
        ArrowStorageWriter=ArrowStorageWriter,
        Behaviour=Behaviour,
        RealReplica=RealReplica,
        FakeReplica=FakeReplica,
        InProcessOrchestrator=InProcessOrchestrator,
        FAKE_REPLICA_PROGRAM=FAKE_REPLICA_PROGRAM,
    )


@pytest.fixture
async def make_compute(
    nats_url: str, nats_connection: Any, arrow_writer: ArrowStorageWriter, data_dir: Path
) -> AsyncIterator[Callable[..., Any]]:
    """Builds started compute controllers over in-process replicas; stops them afterwards."""
    made: list[Any] = []

    async def make(
        behaviour: Callable[[str, int], Any] | None = None,
        *,
        orchestrator: Orchestrator | None = None,
        writer: Any = None,
        heartbeat_timeout: float = 1.0,
        startup_timeout: float = 10.0,
        busy_timeout: float = 60.0,
    ) -> tuple[ComputeController, Any]:
        orchestrator = orchestrator or InProcessOrchestrator(nats_url, behaviour)
        blob_uri, consensus_uri = default_uris(data_dir)
        compute = ComputeController(
            nats_connection,
            orchestrator,
            writer or arrow_writer,
            blob_uri=blob_uri,
            consensus_uri=consensus_uri,
            heartbeat_timeout=heartbeat_timeout,
            startup_timeout=startup_timeout,
            busy_timeout=busy_timeout,
            hello_resend_interval=0.3,
        )
        await compute.start()
        made.append(compute)
        return compute, orchestrator

    yield make
    for compute in made:
        await compute.stop()
