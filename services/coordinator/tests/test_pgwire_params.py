"""Parameter types at Parse, as PostgreSQL infers them (issue 14): the local PostgreSQL
answers the same Parse/Describe for the same table and is the reference."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest
from psycopg import generators, waiting

TABLE = "kv (k int, v text, b bigint, f double precision, d date, n numeric)"

# Statements whose untyped $n take a type from their context.
CASES = [
    "SELECT $1 + 1",
    "SELECT $1",
    "SELECT $1::int8, $2::date",
    "SELECT k FROM kv WHERE k = $1",
    "SELECT k FROM kv WHERE $1 < b",
    "SELECT k FROM kv WHERE v = $1",
    "SELECT k FROM kv WHERE k IN ($1, $2)",
    "SELECT k FROM kv WHERE k BETWEEN $1 AND $2",
    "SELECT k FROM kv WHERE d < $1",
    "SELECT k FROM kv WHERE n >= $1 AND f <> $2",
    "SELECT f * $1 FROM kv",
    "SELECT coalesce(k, $1) FROM kv",
    "SELECT k FROM kv ORDER BY k LIMIT $1 OFFSET $2",
    "SELECT k FROM kv WHERE v LIKE $1",
    "SELECT upper($1), chr($2), to_timestamp($3)",
    "SELECT k FROM kv WHERE k = (SELECT max(k) FROM kv WHERE b = $1)",
    "INSERT INTO kv (k, v) VALUES ($1, $2)",
    "INSERT INTO kv VALUES ($1, $2, $3, $4, $5, $6)",
    "INSERT INTO kv (b) SELECT k + $1 FROM kv",
    "UPDATE kv SET b = $1, v = $2 WHERE k = $3",
    "DELETE FROM kv WHERE f = $1",
]


def parameter_types(connection: psycopg.Connection, sql: str) -> list[int]:
    """The parameter type OIDs a server's ParameterDescription gives for an untyped Parse.

    libpq's blocking PQprepare holds the GIL while it waits, which would stop the in-process
    server from answering: the messages are sent and awaited the non-blocking way.
    """
    pgconn = connection.pgconn
    name = f"described{CASES.index(sql)}".encode()
    pgconn.send_prepare(name, sql.encode())
    (prepared,) = waiting.wait(generators.execute(pgconn), pgconn.socket)
    assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
    pgconn.send_describe_prepared(name)
    (described,) = waiting.wait(generators.execute(pgconn), pgconn.socket)
    assert described.status == psycopg.pq.ExecStatus.COMMAND_OK, described.error_message
    return [described.param_type(i) for i in range(described.nparams)]


@pytest.fixture(scope="module")
def postgres():
    with psycopg.connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True
    ) as connection:
        connection.execute(f"CREATE TEMP TABLE {TABLE}")
        yield connection


async def test_parse_infers_parameter_types_as_postgresql(engine, postgres):
    """Each untyped $n is described with the type PostgreSQL gives it from its context."""

    def run() -> dict[str, list[int]]:
        with psycopg.connect(
            host="127.0.0.1",
            port=engine.service.pgwire_port,
            user="materialize",
            dbname="materialize",
            autocommit=True,
        ) as connection:
            connection.execute(f"CREATE TABLE {TABLE}")
            return {sql: parameter_types(connection, sql) for sql in CASES}

    loupe = await asyncio.to_thread(run)
    reference = {sql: parameter_types(postgres, sql) for sql in CASES}
    assert loupe == reference


async def test_asyncpg_sends_inferred_parameter_types(engine):
    """asyncpg encodes arguments by the described types: an int for `$1 + 1` and `k = $1`."""
    conn = await asyncpg.connect(
        host="127.0.0.1",
        port=engine.service.pgwire_port,
        user="materialize",
        database="materialize",
    )
    try:
        assert await conn.fetchval("SELECT $1 + 1", 5) == 6
        await conn.execute(f"CREATE TABLE {TABLE}")
        await conn.execute("INSERT INTO kv (k, v, b) VALUES ($1, $2, $3)", 1, "one", 10)
        await conn.execute("INSERT INTO kv (k, v, b) VALUES ($1, $2, $3)", 2, "two", 20)
        assert await conn.fetchval("SELECT v FROM kv WHERE k = $1", 2) == "two"
        rows = await conn.fetch("SELECT k FROM kv WHERE k IN ($1, $2) ORDER BY k LIMIT $3", 1, 2, 1)
        assert [r["k"] for r in rows] == [1]
        await conn.execute("UPDATE kv SET b = $1 WHERE k = $2", 99, 1)
        assert await conn.fetchval("SELECT b FROM kv WHERE k = $1", 1) == 99
    finally:
        await conn.close()
