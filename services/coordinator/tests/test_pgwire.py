"""The pgwire server with real clients (psql, psycopg 3, asyncpg) on the in-process harness."""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter

import asyncpg
import psycopg
import pytest

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
)

PREPARED_COLUMNS = [name for name, _ in MZ_PREPARED_STATEMENT_HISTORY.columns]
EXECUTION_COLUMNS = [name for name, _ in MZ_STATEMENT_EXECUTION_HISTORY.columns]

PSQL = "/usr/bin/psql"


def psql(port: int, sql: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            PSQL,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "materialize",
            "-d",
            "materialize",
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            *extra,
            "-c",
            sql,
        ],
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


def reference_error(sql: str) -> tuple[str, int]:
    """(SQLSTATE, position) the local PostgreSQL answers ``sql`` with."""
    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres") as conn:
        try:
            conn.execute(sql)
        except psycopg.Error as error:
            return error.sqlstate or "", int(error.diag.statement_position or 0)
    raise AssertionError(f"PostgreSQL ran {sql!r}")


async def asyncpg_connect(port: int) -> asyncpg.Connection:
    return await asyncpg.connect(
        host="127.0.0.1", port=port, user="materialize", database="materialize"
    )


def loupe_connect(port: int, **kwargs) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1", port=port, user="materialize", dbname="materialize", **kwargs
    )


async def test_psql_table_story(engine):
    """psql: CREATE TABLE, INSERT, SELECT, with PostgreSQL's command tags."""
    port = engine.service.pgwire_port
    created = await apsql(port, "CREATE TABLE t (a int, b text)", "-e")
    assert created.returncode == 0, created.stderr
    inserted = await apsql(port, "INSERT INTO t VALUES (1, 'one'), (2, NULL)")
    assert inserted.stdout.strip() == "INSERT 0 2"
    selected = await apsql(port, "SELECT a, b FROM t ORDER BY a")
    assert selected.stdout.strip().splitlines() == ["1|one", "2|"]


@pytest.mark.parametrize("sql", ["SELECT * FROM nonexistent_relation", "SELECT 1 2", "SELECT 'abc"])
async def test_error_has_postgres_sqlstate_and_position(engine, sql):
    """An ErrorResponse carries the SQLSTATE and 1-based position PostgreSQL gives."""
    expected = await asyncio.to_thread(reference_error, sql)

    def run() -> tuple[str, int]:
        with loupe_connect(engine.service.pgwire_port, autocommit=True) as conn:
            try:
                conn.execute(sql)
            except psycopg.Error as error:
                return error.sqlstate or "", int(error.diag.statement_position or 0)
        raise AssertionError("Loupe ran it")

    assert await asyncio.to_thread(run) == expected


async def test_psycopg_server_side_parameters(engine):
    """psycopg 3 with server-side binding (extended protocol) inserts and reads typed values."""
    port = engine.service.pgwire_port

    def run() -> list[tuple]:
        with loupe_connect(port, autocommit=True, prepare_threshold=0) as conn:
            conn.execute("CREATE TABLE p (a int, b text)")
            with conn.cursor() as cursor:
                cursor.execute("INSERT INTO p VALUES (%s, %s)", (7, "seven"))
                assert cursor.rowcount == 1
                cursor.execute("SELECT a, b FROM p WHERE a = %s", (7,))
                rows = cursor.fetchall()
                cursor.execute("SELECT a FROM p WHERE b = %s", ("none",))
                assert cursor.fetchall() == []
                return rows

    assert await asyncio.to_thread(run) == [(7, "seven")]


async def test_psycopg_default_transaction(engine):
    """psycopg's default (non-autocommit) mode opens a transaction; statements still run."""

    def run() -> tuple:
        with loupe_connect(engine.service.pgwire_port) as conn:
            row = conn.execute("SELECT 41 + 1").fetchone()
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            conn.commit()
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            return row

    assert await asyncio.to_thread(run) == (42,)


async def test_asyncpg_extended_protocol(engine):
    """asyncpg: Parse/Describe/Bind/Execute with parameters, named statements and binary-free reads."""
    conn = await asyncpg_connect(engine.service.pgwire_port)
    try:
        await conn.execute("CREATE TABLE q (a int, b text)")
        await conn.execute("INSERT INTO q VALUES ($1, $2)", 3, "three")
        statement = await conn.prepare("SELECT b FROM q WHERE a = $1::int4")
        assert [tuple(r) for r in await statement.fetch(3)] == [("three",)]
        assert await conn.fetchval("SELECT $1::text || 'x'", "a") == "ax"
        # Binary results of the common fixed-width types, and a SHOW described unrun.
        row = await conn.fetchrow("SELECT 1::int8 AS i, 2.5::float8 AS f, true AS b, 'z' AS t")
        assert tuple(row) == (1, 2.5, True, "z")
        assert await conn.fetchval("SHOW cluster") == "quickstart"
    finally:
        await conn.close()


async def test_extended_error_discards_until_sync(engine):
    """After an error in extended mode the connection recovers at Sync and keeps serving."""

    def run() -> tuple | None:
        with loupe_connect(
            engine.service.pgwire_port, autocommit=True, prepare_threshold=0
        ) as conn:
            with pytest.raises(psycopg.errors.UndefinedTable):
                conn.execute("SELECT * FROM missing WHERE 1 = %s", (1,))
            return conn.execute("SELECT %s::int + 1", (1,)).fetchone()

    assert await asyncio.to_thread(run) == (2,)


async def test_max_rows_suspends_portal(engine):
    """Execute with max_rows answers PortalSuspended and resumes on the next Execute."""

    conn = await asyncpg_connect(engine.service.pgwire_port)
    try:
        await conn.execute("CREATE TABLE m (a int)")
        await conn.execute("INSERT INTO m VALUES " + ", ".join(f"({i})" for i in range(1, 26)))
        async with conn.transaction():
            cursor = await conn.cursor("SELECT a FROM m ORDER BY a")
            first = await cursor.fetch(10)
            second = await cursor.fetch(10)
            rest = await cursor.fetch(10)
        assert [r[0] for r in first + second + rest] == list(range(1, 26))
    finally:
        await conn.close()


async def copy_out_both(port: int, sql: str) -> tuple[list[str], list[str]]:
    """The sorted lines of a COPY … TO STDOUT from Loupe and from the local PostgreSQL."""
    loupe = await apsql(port, sql)
    assert loupe.returncode == 0, loupe.stderr
    reference = await asyncio.to_thread(
        subprocess.run,
        [PSQL, "-h", "127.0.0.1", "-U", "postgres", "-X", "-A", "-t", "-c", sql],
        capture_output=True,
        text=True,
    )
    assert reference.returncode == 0, reference.stderr
    return sorted(loupe.stdout.splitlines()), sorted(reference.stdout.splitlines())


async def test_copy_to_stdout_text_and_csv(engine):
    """COPY (SELECT …) TO STDOUT in text and CSV formats, as PostgreSQL writes them."""
    query = "SELECT 1 AS a, 'x\ty' AS b, NULL::text AS c UNION ALL SELECT 2, 'q\"', ''"
    for options in ("", " WITH (FORMAT csv)"):
        loupe_lines, reference_lines = await copy_out_both(
            engine.service.pgwire_port, f"COPY ({query}) TO STDOUT{options}"
        )
        assert loupe_lines == reference_lines


async def test_copy_table_to_stdout(engine):
    """COPY t [(columns)] TO STDOUT writes the table's rows as PostgreSQL does."""
    port = engine.service.pgwire_port
    setup = ["CREATE TABLE ct (a int, b text)", "INSERT INTO ct VALUES (1, 'x y'), (2, NULL)"]
    for target, user, database in (
        (port, "materialize", "materialize"),
        (5432, "postgres", "postgres"),
    ):
        statements = setup if target == port else ["DROP TABLE IF EXISTS ct", *setup]
        for statement in statements:
            done = await asyncio.to_thread(
                subprocess.run,
                [PSQL, "-h", "127.0.0.1", "-p", str(target), "-U", user, "-d", database,
                 "-X", "-q", "-c", statement],
                capture_output=True, text=True,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
    for sql in ("COPY ct TO STDOUT", "COPY ct (b) TO STDOUT WITH (FORMAT csv)"):
        loupe_lines, reference_lines = await copy_out_both(port, sql)
        assert loupe_lines == reference_lines


async def test_unsupported_copy_is_an_error_not_a_closed_connection(engine):
    """COPY to a server file is refused (0A000) and the connection keeps serving."""

    def run() -> tuple | None:
        with loupe_connect(engine.service.pgwire_port, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute("COPY (SELECT 1) TO '/tmp/loupe-copy'")
            return conn.execute("SELECT 5").fetchone()

    assert await asyncio.to_thread(run) == (5,)


async def test_copy_from_stdin_text_and_csv(engine):
    """COPY t FROM STDIN (psycopg's copy()) loads rows in text and CSV, NULLs included."""

    def run() -> list[tuple]:
        with loupe_connect(engine.service.pgwire_port, autocommit=True) as conn:
            conn.execute("CREATE TABLE c (a int, b text)")
            with conn.cursor() as cursor:
                with cursor.copy("COPY c FROM STDIN") as copy:
                    copy.write("1\tone\n2\t\\N\n3\ttab\\there\n")
                assert cursor.rowcount == 3
                with cursor.copy("COPY c (a, b) FROM STDIN WITH (FORMAT csv)") as copy:
                    copy.write('4,"four, quoted"\n5,\n6,""\n')
                cursor.execute("SELECT a, b FROM c ORDER BY a")
                return cursor.fetchall()

    assert await asyncio.to_thread(run) == [
        (1, "one"),
        (2, None),
        (3, "tab\there"),
        (4, "four, quoted"),
        (5, None),
        (6, ""),
    ]


async def test_copy_from_stdin_bad_row_fails_whole_copy(engine):
    """A malformed row fails the COPY (22P02/22P04) and nothing of it is written."""

    def run() -> list[tuple]:
        with loupe_connect(engine.service.pgwire_port, autocommit=True) as conn:
            conn.execute("CREATE TABLE bad (a int)")
            with (
                pytest.raises(psycopg.errors.DataError),
                conn.cursor() as cursor,
                cursor.copy("COPY bad FROM STDIN") as copy,
            ):
                copy.write("1\nnot a number\n")
            return conn.execute("SELECT count(*) FROM bad").fetchall()

    assert await asyncio.to_thread(run) == [(0,)]


def logged_rows(updates: list, collection: str, columns: list[str]) -> list[dict]:
    """The rows of ``collection`` that remain once every retraction is applied."""
    counts: Counter[tuple] = Counter()
    for collection_id, row, diff in updates:
        if collection_id == collection:
            counts[row] += diff
    return [dict(zip(columns, row, strict=True)) for row, count in counts.items() if count > 0]


async def test_parse_is_a_prepared_statement_and_bind_params_are_logged(
    nats_url, data_dir, stream, start_table_system
):
    """psycopg (prepare_threshold=0) Parses once under a name and executes twice: one
    prepared statement row, two executions with their Bind parameters."""
    async with start_table_system(
        nats_url, data_dir, storage_subject=stream.subject, instance_name="pgwire-log"
    ) as h:
        admin = await h.session()
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_default_sample_rate = 1")
        sql = "SELECT $1::int + 1"

        def run() -> list:
            with loupe_connect(h.service.pgwire_port, autocommit=True, prepare_threshold=0) as c:
                return [c.execute("SELECT %s::int + 1", (n,)).fetchone() for n in (1, 2)]

        assert await asyncio.to_thread(run) == [(2,), (3,)]
        assert h.service.coordinator is not None
        await h.service.coordinator.statement_log.drain()
        updates = await stream.updates()

    prepared = logged_rows(updates, MZ_PREPARED_STATEMENT_HISTORY.id, PREPARED_COLUMNS)
    texts = {row[1]: row[2] for c, row, _ in updates if c == MZ_SQL_TEXT.id}
    ours = [p for p in prepared if texts.get(p["sql_hash"]) == sql]
    assert len(ours) == 1
    assert ours[0]["name"]  # psycopg's statement name
    executions = logged_rows(updates, MZ_STATEMENT_EXECUTION_HISTORY.id, EXECUTION_COLUMNS)
    params = [e["params"] for e in executions if e["prepared_statement_id"] == ours[0]["id"]]
    assert sorted(params) == ["{1}", "{2}"]


async def test_a_prepared_statement_is_planned_once_for_its_portals_descriptions(
    engine, monkeypatch
):
    """psycopg Describes every portal it binds; the second Describe of the same
    statement with the same parameter types reuses the first one's columns, until the
    catalog changes (a table recreated with other columns is described anew)."""
    from loupe.coordinator import pgwire as pgwire_module

    planned: list[str] = []
    real_describe = pgwire_module.describe

    async def counting(coordinator, session, statement, types):
        planned.append(type(statement).__name__)
        return await real_describe(coordinator, session, statement, types)

    monkeypatch.setattr(pgwire_module, "describe", counting)
    port = engine.service.pgwire_port

    def run() -> tuple[list, list, int, list]:
        with loupe_connect(port, autocommit=True, prepare_threshold=0) as conn:
            conn.execute("CREATE TABLE described (a int, b text)")
            conn.execute("INSERT INTO described VALUES (1, 'one'), (2, 'two')")
            before = len(planned)
            query = "SELECT * FROM described WHERE a = %s"
            first = conn.execute(query, (1,)).fetchall()
            second = conn.execute(query, (2,)).fetchall()
            between = len(planned) - before
            conn.execute("DROP TABLE described")
            conn.execute("CREATE TABLE described (a int, c bigint)")
            conn.execute("INSERT INTO described VALUES (1, 10)")
            cursor = conn.execute(query, (1,))
            return (
                first + second,
                [c.name for c in cursor.description or []],
                between,
                cursor.fetchall(),
            )

    rows, columns, plans, recreated = await asyncio.to_thread(run)
    assert rows == [(1, "one"), (2, "two")]
    # The first portal's Describe planned the statement; the second's planned nothing.
    assert plans == 1
    assert columns == ["a", "c"]
    assert recreated == [(1, 10)]
