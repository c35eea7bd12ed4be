"""A JDBC client on the pgwire server: PostgreSQL's own driver (pgjdbc), as DBeaver uses it.

``tests/jdbc/JdbcProbe.java`` connects through pgjdbc, browses the schema the way
a JDBC tool does (``DatabaseMetaData.getSchemas/getTables/getColumns``, which
send pgjdbc's own queries over ``pg_catalog``), runs a prepared statement with a
parameter and a plain query, and prints what it found. The same probe against the
local PostgreSQL holding the same table is the reference. pgjdbc comes from
Debian's ``libpostgresql-jdbc-java`` (``scripts/ensure_system_deps.sh``).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

PGJDBC = Path("/usr/share/java/postgresql.jar")
PROBE = Path(__file__).resolve().parents[3] / "tests" / "jdbc" / "JdbcProbe.java"
REFERENCE = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"

pytestmark = pytest.mark.skipif(
    not PGJDBC.exists() or shutil.which("java") is None,
    reason="pgjdbc (Debian's libpostgresql-jdbc-java) and java are installed by make install",
)


def probe(url: str, table: str) -> list[str]:
    result = subprocess.run(
        ["java", "-cp", str(PGJDBC), str(PROBE), url, table],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def run(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


async def test_pgjdbc_browses_the_schema_and_queries_as_on_postgresql(engine):
    table = f"jdbc_{uuid.uuid4().hex[:8]}"
    create = f"CREATE TABLE {table} (a int, b text)"
    insert = f"INSERT INTO {table} VALUES (1, 'one'), (2, 'two'), (3, NULL)"
    port = engine.service.pgwire_port
    loupe_url = f"postgresql://materialize@127.0.0.1:{port}/materialize"
    for url in (loupe_url, REFERENCE):  # the server shares this event loop: not on it
        await asyncio.to_thread(run, url, create, insert)
    try:
        loupe = await asyncio.to_thread(
            probe, f"jdbc:postgresql://127.0.0.1:{port}/materialize?user=materialize", table
        )
        reference = await asyncio.to_thread(
            probe, "jdbc:postgresql://127.0.0.1:5432/postgres?user=postgres", table
        )
    finally:
        await asyncio.to_thread(run, REFERENCE, f"DROP TABLE {table}")
    assert loupe == reference
    assert f"table\t{table}\tTABLE" in loupe
    assert "row\t3\tnull" in loupe
