"""The pgwire server with real clients (psql, psycopg 3, asyncpg) on the in-process harness."""

from __future__ import annotations

import asyncio
import subprocess

import asyncpg
import psycopg
import pytest

PSQL = "/usr/bin/psql"


def psql(port: int, sql: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PSQL, "-h", "127.0.0.1", "-p", str(port), "-U", "materialize", "-d", "materialize",
         "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", *extra, "-c", sql],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def apsql(port: int, sql: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(psql, port, sql, *extra)


async def test_psql_select_one(engine):
    """psql runs a simple query and prints its rows."""
    result = await apsql(engine.service.pgwire_port, "SELECT 1 AS a, 'x' AS b")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1|x"
