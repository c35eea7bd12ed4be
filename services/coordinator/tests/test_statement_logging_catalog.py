"""ALTER SYSTEM's storage: the real catalog service keeps system variables across restarts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from loupe.catalog.service import CatalogService, CatalogSettings
from loupe.catalog.servicer import SERVICE
from loupe.common.errors import LoupeError
from loupe.common.transport import NatsServiceClient
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.testing import assert_eventually


@contextlib.asynccontextmanager
async def catalog(data_dir: Path, nats_url: str) -> AsyncIterator[None]:
    service = CatalogService(
        CatalogSettings(
            data_dir=data_dir,
            nats_url=nats_url,
            grpc_port=0,
            metrics_port=0,
            leadership_check_interval=0.1,
        )
    )
    (data_dir / "run" / "catalog.ready.json").unlink(missing_ok=True)  # the last run's
    task = asyncio.create_task(service.run())

    def ready() -> None:
        assert (data_dir / "run" / "catalog.ready.json").exists()

    await assert_eventually(ready, timeout=15)
    try:
        yield
    finally:
        service.shutdown()
        await asyncio.wait_for(task, timeout=15)


def set_variable(name: str, value: str = "", *, reset: bool = False) -> catalog_pb2.TransactRequest:
    op = catalog_pb2.SetSystemVariable(name=name, value=value, reset=reset)
    return catalog_pb2.TransactRequest(ops=[catalog_pb2.CatalogOp(set_system_variable=op)])


async def snapshot_configuration(client: NatsServiceClient) -> dict[str, str]:
    return dict((await client.Snapshot(catalog_pb2.SnapshotRequest())).system_configuration)


async def test_system_variables_are_durable_checked_and_reset(
    data_dir: Path, nats_url: str, nats_connection: Any
) -> None:
    client = NatsServiceClient(nats_connection, SERVICE, timeout=5.0)
    async with catalog(data_dir, nats_url):
        response = await client.Transact(set_variable("Statement_Logging_Max_Sample_Rate", "1"))
        # The commit's snapshot carries it: followers learn it with the commit.
        assert dict(response.snapshot.system_configuration) == {
            "statement_logging_max_sample_rate": "1.0"
        }
        with pytest.raises(LoupeError) as refused:
            await client.Transact(set_variable("statement_logging_max_sample_rate", "2"))
        assert refused.value.code == "22023"
        with pytest.raises(LoupeError) as unknown:
            await client.Transact(set_variable("no_such_variable", "1"))
        assert unknown.value.code == "42704"
    async with catalog(data_dir, nats_url):  # a new writer: a new epoch, same contents
        assert await snapshot_configuration(client) == {"statement_logging_max_sample_rate": "1.0"}
        await client.Transact(set_variable("statement_logging_max_sample_rate", reset=True))
        assert await snapshot_configuration(client) == {}
