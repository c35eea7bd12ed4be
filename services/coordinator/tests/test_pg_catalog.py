"""pg_catalog and information_schema answer PostgreSQL clients' own queries as PostgreSQL does.

The queries are the clients': psql's for each backslash command (captured with
``psql -E``, ``data/psql_queries.json``), psycopg's ``TypeInfo.fetch`` query,
Grafana's and pgjdbc/DBeaver's schema browsing. Each runs against Loupe (the
in-process coordinator on the real engine, ``engine``) and against the local
PostgreSQL holding the same objects, and the answers are compared: the same
columns with the same types (up to the types Loupe lacks, ``_LOUPE_TYPE``), and
the same rows for the objects created, up to what necessarily differs (OIDs,
the owner's name, the index method).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loupe import sqltypes
from loupe.common.values import from_row
from loupe.coordinator.tests.conftest import TableHarness
from loupe.testing.postgres import PostgresUnavailable, postgres_database

QUERIES: dict[str, list[str]] = json.loads(
    (Path(__file__).parent / "data" / "psql_queries.json").read_text()
)["queries"]
OBJECTS = (
    "CREATE TABLE t (a int, b text NOT NULL)",
    "CREATE VIEW v AS SELECT a FROM t",
    "CREATE MATERIALIZED VIEW mv AS SELECT a, b FROM t",
    "CREATE INDEX t_a_idx ON t (a)",
)
# PostgreSQL's types Loupe has no type for -> the Loupe type of those columns (loupe.pg_catalog).
_LOUPE_TYPE = {
    "oid": "int4",
    "regproc": "int4",
    "regclass": "int4",
    "regtype": "int4",
    "xid": "int4",
    "name": "text",
    "char": "text",
    "bpchar": "text",
    "pg_node_tree": "text",
    "_aclitem": "_text",
    "_char": "_text",
    "_name": "_text",
    "int2vector": "_int2",
    "oidvector": "_int4",
    "_oid": "_int4",
}
LOUPE_USER = "materialize"


@pytest.fixture(scope="module")
def postgres() -> Iterator[psycopg.Connection]:
    """The local PostgreSQL with the same objects (skipped where there is none)."""
    try:
        context = postgres_database()
        url = context.__enter__()
    except PostgresUnavailable as error:
        pytest.skip(str(error))
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            for statement in OBJECTS:
                connection.execute(statement)
            yield connection
    finally:
        context.__exit__(None, None, None)


def pg_answer(connection: psycopg.Connection, sql: str) -> tuple[list[tuple[str, str]], list[tuple]]:
    """(columns as (name, Loupe type), rows) of ``sql`` on PostgreSQL."""
    # PostgreSQL 15 has no relhasoids (psql asks a 9.5 server for it): false, as on 9.5.
    cursor = connection.execute(sql.replace("c.relhasoids", "false AS relhasoids"))
    columns = []
    for column in cursor.description or ():
        typname = connection.execute(
            "SELECT typname FROM pg_type WHERE oid = %s", (column.type_code,)
        ).fetchone()
        assert typname is not None
        columns.append((column.name, _LOUPE_TYPE.get(typname[0], typname[0])))
    return columns, [tuple(row) for row in cursor.fetchall()]


async def loupe_answer(
    harness: TableHarness, session: str, sql: str
) -> tuple[list[tuple[str, str]], list[tuple]]:
    """(columns as (name, type), rows) of ``sql`` on Loupe."""
    responses = await harness.execute(session, sql)
    errors = [r.error for r in responses if r.HasField("error")]
    assert not errors, (errors[0].message, sql)
    [description] = [r.description for r in responses if r.HasField("description")]
    columns = [(c.name, _canonical(c.type)) for c in description.columns]
    rows = [tuple(from_row(row)) for r in responses if r.HasField("rows") for row in r.rows.rows]
    return columns, rows


def _canonical(type_name: str) -> str:
    found = sqltypes.lookup(type_name)
    return found.name if found is not None else type_name


def _normalized(row: tuple, pg_user: str) -> tuple:
    """A row with the owner's name and lists compared as PostgreSQL prints them."""
    return tuple(LOUPE_USER if value == pg_user else _as_list(value) for value in row)


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


async def _loupe_with_objects(engine: TableHarness) -> str:
    session = await engine.session()
    for statement in OBJECTS:
        await engine.tag(session, statement)
    return session


def _pg_user(connection: psycopg.Connection) -> str:
    row = connection.execute("SELECT current_user").fetchone()
    assert row is not None
    return str(row[0])


LISTINGS = ("\\d", "\\dt", "\\dv", "\\dm", "\\di")


async def test_psql_listings_answer_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """\\d, \\dt, \\dv, \\dm, \\di: PostgreSQL's columns and the same rows for t, v, mv, t_a_idx;
    \\dn, \\l, \\du: PostgreSQL's columns, a row for public, the database and the user."""
    session = await _loupe_with_objects(engine)
    pg_user = _pg_user(postgres)
    for command in LISTINGS:
        [sql] = QUERIES[command]
        pg_columns, pg_rows = pg_answer(postgres, sql)
        columns, rows = await loupe_answer(engine, session, sql)
        assert columns == pg_columns, command
        assert rows == [_normalized(r, pg_user) for r in pg_rows], command
        assert rows, command
    [schemas] = QUERIES["\\dn"]
    pg_columns, pg_rows = pg_answer(postgres, schemas)
    columns, rows = await loupe_answer(engine, session, schemas)
    assert columns == pg_columns
    assert ("public", LOUPE_USER) in rows and any(r[0] == "public" for r in pg_rows)
    [databases] = QUERIES["\\l"]
    pg_columns, pg_rows = pg_answer(postgres, databases)
    columns, rows = await loupe_answer(engine, session, databases)
    assert columns == pg_columns
    [pg_current] = [r for r in pg_rows if r[0] == postgres.info.dbname]
    # The same but for the database's name, its collation (C in Loupe) and its ACL.
    assert rows == [("materialize", LOUPE_USER, *pg_current[2:3], "C", "C", *pg_current[5:7], None)]
    [roles] = QUERIES["\\du"]
    pg_columns, pg_rows = pg_answer(postgres, roles)
    columns, rows = await loupe_answer(engine, session, roles)
    assert columns == pg_columns
    [pg_superuser] = [r for r in pg_rows if r[0] == pg_user]
    [superuser] = [r for r in rows if r[0] == LOUPE_USER]
    # rolsuper, rolinherit, rolcanlogin, rolconnlimit, memberof as PostgreSQL's superuser's.
    assert [superuser[i] for i in (1, 2, 5, 6, 8)] == [pg_superuser[i] for i in (1, 2, 5, 6, 8)]


def _describe_queries(command: str, oid: int) -> list[str]:
    return [q.replace("{oid}", str(oid)) for q in QUERIES[command][1:]]


def _indexdef_keys(definition: str) -> str:
    """What psql prints of an index definition (after USING), less the method and quoting."""
    after = definition.split(" USING ", 1)[1]
    return after.split(" ", 1)[1].replace('"', "")


async def test_psql_describe_answers_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """\\d t, \\d v, \\d mv: each of psql's queries has PostgreSQL's columns and rows (the
    relation's kind and flags, its columns with format_type's names and NOT NULL, its indexes)."""
    session = await _loupe_with_objects(engine)
    for name in ("t", "v", "mv"):
        await _check_describe(engine, session, postgres, name)


async def _check_describe(
    engine: TableHarness, session: str, postgres: psycopg.Connection, name: str
) -> None:
    pg_user = _pg_user(postgres)
    command = f"\\d {name}"
    lookup = QUERIES[command][0]
    pg_columns, [(pg_oid, *pg_named)] = pg_answer(postgres, lookup)
    columns, [(oid, *named)] = await loupe_answer(engine, session, lookup)
    assert columns == pg_columns and named == pg_named
    for pg_sql, sql in zip(
        _describe_queries(command, pg_oid), _describe_queries(command, oid), strict=True
    ):
        pg_columns, pg_rows = pg_answer(postgres, pg_sql)
        columns, rows = await loupe_answer(engine, session, sql)
        assert columns == pg_columns, sql
        expected = [_normalized(r, pg_user) for r in pg_rows]
        if "pg_get_indexdef" in sql:
            # Index definitions: the same keys; PostgreSQL's method is btree, Loupe's arrangement.
            assert [_indexdef_keys(r[5]) for r in rows] == [_indexdef_keys(r[5]) for r in expected]
            rows = [r[:5] + r[6:] for r in rows]
            expected = [r[:5] + r[6:] for r in expected]
        assert rows == expected, sql
