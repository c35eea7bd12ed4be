"""Fixtures of the storage writer's tests: real Spark, NATS JetStream, blob dir and SQLite.

Every test gets a JetStream stream of its own (``StreamConfig.scoped``), so
tests sharing the session's nats-server never see each other's batches.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from loupe.controller.storage import StorageWriter, StreamConfig
from loupe.persist import Consensus, LocalBlob, SqliteConsensus
from loupe.proto.storage.v1 import storage_pb2


class FaultyConsensus(Consensus):
    """A real SQLite consensus that fails one chosen compare-and-set per armed key."""

    def __init__(self, inner: SqliteConsensus) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.faults: dict[str, str] = {}

    def head(self, key: str) -> tuple[int, bytes] | None:
        return self.inner.head(key)

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        fault = self.faults.pop(key, None)
        if fault == "fail_before_commit":
            raise ConnectionError("consensus unreachable")
        if fault == "fail_after_commit":
            self.inner.compare_and_set(key, expected, value)
            raise ConnectionError("connection lost after the commit")
        if fault == "another_writer_first":
            seqno, raw = self.inner.head(key) or (0, b"")
            state = storage_pb2.ShardState.FromString(raw)
            state.upper += 1000
            assert self.inner.compare_and_set(key, seqno, state.SerializeToString())
        return self.inner.compare_and_set(key, expected, value)


@pytest.fixture
def blob(data_dir: Path) -> LocalBlob:
    return LocalBlob(data_dir / "storage" / "blob")


@pytest.fixture
def consensus(data_dir: Path) -> FaultyConsensus:
    return FaultyConsensus(SqliteConsensus(data_dir / "storage" / "consensus.sqlite"))


@pytest.fixture
def stream() -> StreamConfig:
    return StreamConfig.scoped(uuid.uuid4().hex[:12])


MakeWriter = Callable[..., Awaitable[StorageWriter]]


@pytest.fixture
async def make_writer(
    spark: Any, blob: LocalBlob, consensus: FaultyConsensus, nats_connection: Any, stream: Any
) -> AsyncIterator[MakeWriter]:
    """Starts writers on the test's blob, consensus and stream; stops them afterwards.

    The default flush interval is an hour: flushes happen when a test asks.
    """
    made: list[StorageWriter] = []

    async def make(**options: Any) -> StorageWriter:
        options.setdefault("stream", stream)
        options.setdefault("flush_interval", 3600)
        options.setdefault("upper_interval", 0)
        options.setdefault("compaction_interval", 3600)
        writer = StorageWriter(
            options.pop("spark", spark),
            options.pop("blob", blob),
            options.pop("consensus", consensus),
            options.pop("nc", nats_connection),
            **options,
        )
        made.append(writer)
        await writer.start()
        return writer

    yield make
    for writer in made:
        await writer.stop()


@pytest.fixture
async def writer(make_writer: MakeWriter) -> StorageWriter:
    return await make_writer()
