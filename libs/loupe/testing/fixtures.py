"""pytest fixtures: a real nats-server per test session, NATS connections, Spark,
PostgreSQL (``postgres_url``, ``postgres_catalog``: see ``loupe.testing.postgres``).

Loaded for every test through the root ``conftest.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from loupe.common.nats_server import NatsServerProcess
from loupe.common.transport import connect

# Registered here so every test can ask for a real PostgreSQL.
from loupe.testing.postgres import postgres_catalog, postgres_url  # noqa: F401


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    """A nats-server with JetStream on a free port, for the whole test session."""
    server = NatsServerProcess(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServerProcess) -> str:
    return nats_server.url


@pytest.fixture
async def nats_connection(nats_url: str) -> AsyncIterator[Any]:
    connection = await connect(nats_url, name="test")
    yield connection
    await connection.close()


@pytest.fixture(scope="session")
def spark() -> Any:
    """The one Spark session of the test process (cold start is ~5 s)."""
    from loupe.common.spark import get_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return get_spark()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path
