"""uuid, arrays, jsonb and unsigned integers through tables, indexes and materialized views.

The real engine (``engine`` fixture) maintains the views over the shards the
coordinator writes; a materialized view stores its output in a shard of its
own, so these types also round-trip through persist's Arrow schema. Every
read is compared with PostgreSQL running the same statements (uint4 there is
a bigint holding the same numbers).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from loupe.common.values import from_row
from loupe.coordinator.tests.conftest import TableHarness
from loupe.proto.sql.v1 import sql_pb2

LOUPE_SETUP = [
    "CREATE TABLE items (k int, id uuid, tags text[], doc jsonb, n uint4)",
    "CREATE VIEW by_tag AS SELECT tag, count(*) AS n, array_agg(k ORDER BY k) AS ks "
    "FROM (SELECT k, unnest(tags) AS tag FROM items) AS t GROUP BY tag",
    "CREATE DEFAULT INDEX ON by_tag",
    "CREATE MATERIALIZED VIEW docs AS SELECT id, doc -> 'color' AS color, doc ->> 'size' AS size, "
    "tags, array_length(tags, 1) AS len, sum(n) AS total FROM items "
    "WHERE doc ? 'color' GROUP BY id, doc -> 'color', doc ->> 'size', tags",
]
POSTGRES_SETUP = [
    "CREATE TABLE items (k int, id uuid, tags text[], doc jsonb, n bigint)",
    *(s for s in LOUPE_SETUP if s.startswith("CREATE VIEW")),
    LOUPE_SETUP[3].replace("CREATE MATERIALIZED VIEW", "CREATE VIEW"),
]
BATCHES = [
    "INSERT INTO items VALUES "
    "(1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{red,\"big one\"}', "
    '\'{"color": "red", "size": 3}\', 7), '
    "(2, '{b0eebc999c0b4ef8bb6d6bb9bd380a11}', '{red,NULL}', '{\"size\": [1, 2]}', 4000000000), "
    '(3, NULL, \'{}\', \'{"color": {"r": 1}, "size": null}\', 0)',
    "INSERT INTO items VALUES (4, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{red,\"big one\"}', "
    '\'{"size": 3, "color": "red"}\', 5)',
    "DELETE FROM items WHERE k = 1",
    "UPDATE items SET tags = tags || 'new'::text, n = n + 1, doc = doc -> 'size' "
    "WHERE id = 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11' OR 'big one' = ANY(tags)",
    "DELETE FROM items WHERE doc @> '3'",
    "INSERT INTO items VALUES (5, md5('five')::uuid, ARRAY['red', upper('x')], "
    "('{\"color\": \"' || lower('BLUE') || '\", \"size\": 1}')::jsonb, 2 + 3)",
    "INSERT INTO items SELECT k + 10, id, tags || 'copy'::text, doc, n FROM items WHERE k = 5",
]
QUERIES = [
    "SELECT tag, n, ks FROM by_tag ORDER BY tag NULLS FIRST",
    "SELECT id, color::text, size, tags, len, total FROM docs ORDER BY id NULLS FIRST, size",
    "SELECT k, id::text, tags::text, doc::text, n FROM items ORDER BY k",
    "SELECT k FROM items WHERE 'red' = ANY(tags) AND doc @> '{\"size\": 3}' ORDER BY k",
]


@pytest.fixture
def postgres(postgres_url: str) -> Any:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DROP SCHEMA IF EXISTS new_types CASCADE")
        connection.execute("CREATE SCHEMA new_types")
        connection.execute("SET search_path TO new_types")
        yield connection
        connection.execute("DROP SCHEMA new_types CASCADE")


def _plain(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(int(v) if type(v).__name__ == "Decimal" else v for v in row)


async def test_new_types_through_tables_indexes_and_materialized_views(
    engine: TableHarness, postgres: Any
) -> None:
    """After each write, every read equals PostgreSQL's (values, NULLs, order)."""
    session = await engine.session()
    for sql in LOUPE_SETUP:
        await engine.tag(session, sql)
    for sql in POSTGRES_SETUP:
        postgres.execute(sql)
    for batch in BATCHES:
        await engine.tag(session, batch)
        postgres.execute(batch)
        for query in QUERIES:
            expected = [_plain(r) for r in postgres.execute(query).fetchall()]
            rows = [_plain(r) for r in await engine.rows(session, query)]
            assert rows == expected, (batch, query)


async def test_subscribe_streams_uuid_jsonb_and_arrays_as_clients_read_them(
    engine: TableHarness,
) -> None:
    """A SUBSCRIBE row carries a uuid as a uuid and jsonb as its JSON value, as a SELECT does."""
    session, writer = await engine.session(), await engine.session()
    await engine.tag(session, "CREATE TABLE s (id uuid, doc jsonb, tags text[])")
    await engine.tag(session, "CREATE VIEW sv AS SELECT id, doc -> 'a' AS a, tags FROM s")
    call = engine.stub.Execute(
        sql_pb2.ExecuteRequest(session_id=session, sql="SUBSCRIBE sv WITH (SNAPSHOT = false)")
    )
    responses = call.__aiter__()
    description = await asyncio.wait_for(anext(responses), 20)
    assert description.WhichOneof("kind") == "description"
    await engine.tag(
        writer,
        "INSERT INTO s VALUES ('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', "
        "'{\"a\": {\"b\": [1, 2]}}', '{x,NULL}')",
    )
    batch = await asyncio.wait_for(anext(responses), 20)
    [(_, diff, id_, a, tags)] = [from_row(r) for r in batch.rows.rows]
    assert (diff, id_, a, tags) == (
        1,
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        {"b": [1, 2]},
        ["x", None],
    )
    call.cancel()
    selected = await engine.rows(writer, "SELECT id, doc -> 'a', tags FROM s")
    assert selected == [(id_, a, tags)]
