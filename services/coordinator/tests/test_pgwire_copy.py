"""COPY as a statement of the SQL parser (issue 14): over gRPC, COPY … TO STDOUT answers
its rows and COPY FROM STDIN is refused; the statement log records the COPY itself."""

from __future__ import annotations

import asyncio

import psycopg

from loupe.builtins import MZ_SQL_TEXT, MZ_STATEMENT_EXECUTION_HISTORY
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Copy, Query

from .test_pgwire import (
    EXECUTION_COLUMNS,
    MZ_PREPARED_STATEMENT_HISTORY,
    PREPARED_COLUMNS,
    logged_rows,
    loupe_connect,
)

POSTGRES = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


def test_copy_forms_parse_into_statements():
    """The COPY forms PostgreSQL has for STDOUT/STDIN parse with their table, columns, options."""
    copy = parse_one("COPY public.t (a, b) FROM STDIN WITH (FORMAT csv, DELIMITER '|', HEADER)")
    assert isinstance(copy, Copy)
    assert (copy.direction, str(copy.table), copy.columns) == ("FROM", "public.t", ("a", "b"))
    assert copy.options == (("format", "csv"), ("delimiter", "|"), ("header", "true"))
    to = parse_one("copy t (b) to stdout (format binary)")
    assert isinstance(to, Copy)
    assert isinstance(to.query, Query)
    assert to.query.expression.sql() == 'SELECT "b" FROM "t"'


async def test_copy_over_grpc_answers_rows_and_refuses_copy_from(engine):
    """COPY … TO STDOUT over gRPC answers the rows PostgreSQL's COPY writes (as a query
    would); COPY FROM STDIN is 0A000, as it needs the PostgreSQL wire protocol."""
    session = await engine.session()
    await engine.tag(session, "CREATE TABLE c (a int, b text)")
    await engine.tag(session, "INSERT INTO c VALUES (1, 'x'), (2, NULL)")
    rows = await engine.rows(session, "COPY (SELECT a, b FROM c ORDER BY a) TO STDOUT")
    table_rows = await engine.rows(session, "COPY c (b, a) TO STDOUT")
    assert await engine.tag(session, "COPY c TO STDOUT") == "COPY 2"
    with psycopg.connect(POSTGRES) as reference:
        expected = reference.execute(
            "SELECT * FROM (VALUES (1, 'x'), (2, NULL)) AS c (a, b) ORDER BY a"
        ).fetchall()
    assert rows == expected
    assert sorted(table_rows, key=lambda r: r[1]) == [(b, a) for a, b in expected]
    error = await engine.error(session, "COPY c FROM STDIN")
    assert (error.code, error.message) == (
        "0A000",
        "COPY FROM STDIN needs the PostgreSQL wire protocol",
    )


async def test_statement_log_records_copy_to_and_from(
    nats_url, data_dir, stream, start_table_system
):
    """COPY … TO STDOUT and COPY … FROM STDIN over pgwire are logged as the COPY statements
    (statement_type copy), COPY TO with the rows it sent."""
    async with start_table_system(
        nats_url, data_dir, storage_subject=stream.subject, instance_name="pgwire-copy-log"
    ) as h:
        admin = await h.session()
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_default_sample_rate = 1")
        sql = "COPY (SELECT 1 AS a UNION ALL SELECT 2) TO STDOUT"

        copy_from = "COPY logged FROM STDIN"

        def run() -> bytes:
            with loupe_connect(h.service.pgwire_port, autocommit=True) as connection:
                sent = copy_out(connection, sql)
                connection.execute("CREATE TABLE logged (a int)")
                with connection.cursor().copy(copy_from) as copy:
                    copy.write(b"1\n2\n3\n")
                return sent

        assert await asyncio.to_thread(run) == b"1\n2\n"
        assert h.service.coordinator is not None
        await h.service.coordinator.statement_log.drain()
        updates = await stream.updates()

    texts = {row[1]: row[2] for c, row, _ in updates if c == MZ_SQL_TEXT.id}
    prepared = logged_rows(updates, MZ_PREPARED_STATEMENT_HISTORY.id, PREPARED_COLUMNS)
    ids = {p["id"]: p["statement_type"] for p in prepared if texts.get(p["sql_hash"]) == sql}
    assert set(ids.values()) == {"copy"}, sorted(texts.values())
    executions = logged_rows(updates, MZ_STATEMENT_EXECUTION_HISTORY.id, EXECUTION_COLUMNS)
    ours = [e for e in executions if e["prepared_statement_id"] in ids]
    assert [(e["finished_status"], e["rows_returned"]) for e in ours] == [("success", 2)]
    from_ids = {
        p["id"]: p["statement_type"] for p in prepared if texts.get(p["sql_hash"]) == copy_from
    }
    assert set(from_ids.values()) == {"copy"}
    loads = [e for e in executions if e["prepared_statement_id"] in from_ids]
    assert [e["finished_status"] for e in loads] == ["success"]


BINARY_QUERY = (
    "SELECT * FROM (VALUES"
    " (1, 9000000000::int8, 'x y'::text, true, 1.5::float8, 12.25::numeric,"
    " '2024-02-29'::date, '1999-12-31 23:59:59.5'::timestamp),"
    " (-2, NULL, '', false, -0.1::float8, -3::numeric, NULL, NULL)"
    ") AS v (a, b, c, d, e, f, g, h)"
)
BINARY_TABLE = (
    "(a int, b bigint, c text, d boolean, e double precision, f numeric, g date, h timestamp)"
)


def copy_out(connection: psycopg.Connection, sql: str) -> bytes:
    with connection.cursor().copy(sql) as copy:
        return b"".join(bytes(data) for data in copy)


async def test_binary_copy_is_postgresql_binary_format(engine):
    """COPY … TO STDOUT (FORMAT binary) writes the bytes PostgreSQL writes for the same rows;
    COPY FROM STDIN (FORMAT binary) of PostgreSQL's own output loads the same rows."""
    sql = f"COPY ({BINARY_QUERY}) TO STDOUT (FORMAT binary)"
    with psycopg.connect(POSTGRES, autocommit=True) as reference:
        expected = copy_out(reference, sql)
        expected_rows = reference.execute(f"{BINARY_QUERY} ORDER BY a").fetchall()

    def run() -> tuple[bytes, list[tuple]]:
        with loupe_connect(engine.service.pgwire_port, autocommit=True) as connection:
            produced = copy_out(connection, sql)
            connection.execute(f"CREATE TABLE loaded {BINARY_TABLE}")
            with connection.cursor().copy("COPY loaded FROM STDIN (FORMAT binary)") as copy:
                copy.write(expected)
            return produced, connection.execute("SELECT * FROM loaded ORDER BY a").fetchall()

    produced, loaded = await asyncio.to_thread(run)
    assert produced == expected
    assert loaded == expected_rows
