"""Parameter types at Parse, as PostgreSQL infers them (issue 14): the local PostgreSQL
answers the same Parse/Describe for the same table and is the reference."""

from __future__ import annotations

import asyncio
import struct

import psycopg
import pytest
from psycopg import generators, waiting

from loupe.coordinator.tests.test_pgwire import asyncpg_connect

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
    conn = await asyncpg_connect(engine.service.pgwire_port)
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


def frontend(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def parse_bind_describe(sql: str, *, execute: bool) -> bytes:
    """Parse, Bind, Describe (portal), [Execute,] Sync of ``sql`` on the unnamed statement."""
    messages = (
        frontend(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))
        + frontend(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
        + frontend(b"D", b"P\0")
    )
    if execute:
        messages += frontend(b"E", b"\0" + struct.pack("!i", 0))
    return messages + frontend(b"S", b"")


async def exchange(port: int, user: str, database: str, messages: list[bytes]) -> list[list]:
    """Send each batch of messages on one raw connection; per batch the backend messages
    (kind, and the column type OIDs of a RowDescription) up to ReadyForQuery."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def read() -> tuple[bytes, bytes]:
        header = await asyncio.wait_for(reader.readexactly(5), 10)
        (length,) = struct.unpack("!i", header[1:])
        return header[:1], await reader.readexactly(length - 4)

    async def until_ready() -> list:
        seen: list = []
        while True:
            kind, body = await read()
            if kind == b"T":
                seen.append(("T", row_description_oids(body)))
            elif kind == b"D":
                seen.append(("D", body))
            elif kind not in (b"N", b"S", b"K"):
                seen.append(kind.decode())
            if kind == b"Z":
                return seen

    startup = struct.pack("!i", 196608) + f"user\0{user}\0database\0{database}\0\0".encode()
    writer.write(struct.pack("!i", len(startup) + 4) + startup)
    await until_ready()
    answers = []
    for batch in messages:
        writer.write(batch)
        await writer.drain()
        answers.append(await until_ready())
    writer.close()
    return answers


def row_description_oids(body: bytes) -> list[int]:
    (count,) = struct.unpack("!h", body[:2])
    oids, offset = [], 2
    for _ in range(count):
        offset = body.index(b"\0", offset) + 1
        oids.append(struct.unpack("!i", body[offset + 6 : offset + 10])[0])
        offset += 18
    return oids


async def test_describe_portal_plans_and_runs_at_execute(engine):
    """Describing a bound portal does not run it: an INSERT described and never executed
    inserts nothing; a SELECT is described then run at Execute (as PostgreSQL answers)."""
    batches = [
        b"".join(frontend(b"Q", f"{q}\0".encode()) for q in ["CREATE TABLE described (a int)"]),
        parse_bind_describe("INSERT INTO described VALUES (1)", execute=False),
        parse_bind_describe("SELECT count(*) AS n, 'x'::text AS t FROM described", execute=True),
        parse_bind_describe("INSERT INTO described VALUES (2)", execute=True),
        parse_bind_describe("SELECT a FROM described", execute=True),
    ]
    postgres = await exchange(
        5432,
        "postgres",
        "postgres",
        [frontend(b"Q", b"DROP TABLE IF EXISTS described\0"), *batches],
    )
    loupe = await exchange(engine.service.pgwire_port, "materialize", "materialize", batches)
    assert loupe[1:] == postgres[2:]
    await exchange(5432, "postgres", "postgres", [frontend(b"Q", b"DROP TABLE described\0")])
