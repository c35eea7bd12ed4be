"""Transactions and cursors, over pgwire (psycopg 3) and the gRPC API, on the in-process engine.

What PostgreSQL decides (25P02, 25P01, 34000, 42P03, FETCH's rows and tags, the
transaction status) is compared with the local PostgreSQL; what only Materialize
has (read-only and write-only transactions, FETCH … WITH (timeout)) with the errors
of Materialize's ``src/adapter/src/error.rs``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from loupe.common.values import from_row

POSTGRES = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
IDLE = psycopg.pq.TransactionStatus.IDLE
INTRANS = psycopg.pq.TransactionStatus.INTRANS
INERROR = psycopg.pq.TransactionStatus.INERROR


def loupe(port: int, **kwargs: Any) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1", port=port, user="materialize", dbname="materialize", **kwargs
    )


def outcomes(conn: psycopg.Connection, statements: list[str]) -> list[tuple[Any, ...]]:
    """Per statement: (SQLSTATE or command tag, rows, transaction status, warnings)."""
    warnings: list[str] = []
    conn.add_notice_handler(lambda d: warnings.append(d.sqlstate or d.severity or ""))
    found = []
    for sql in statements:
        warnings.clear()
        try:
            cursor = conn.execute(sql)
            result: Any = cursor.statusmessage
            rows = cursor.fetchall() if cursor.description else None
        except psycopg.Error as error:
            result, rows = error.sqlstate, None
        found.append((sql, result, rows, conn.info.transaction_status.name, list(warnings)))
    return found


def assert_like_postgres(port: int, statements: list[str]) -> list[tuple[Any, ...]]:
    """Run ``statements`` on Loupe and on PostgreSQL (autocommit: BEGIN is explicit)."""
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        expected = outcomes(conn, statements)
    with loupe(port, autocommit=True) as conn:
        found = outcomes(conn, statements)
    assert found == expected
    return found


def count(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def sqlstate(conn: psycopg.Connection, sql: str) -> str | None:
    try:
        conn.execute(sql)
    except psycopg.Error as error:
        return error.sqlstate
    return None


async def test_failed_transaction_is_aborted_until_its_end_as_in_postgres(engine):
    """An error fails the transaction: 25P02 until ROLLBACK, and COMMIT rolls back (ReadyForQuery E)."""
    statements = [
        "BEGIN",
        "SELECT 1",
        "SELECT * FROM no_such_relation",
        "SELECT 1",
        "COMMIT",
        "SELECT 2",
        "BEGIN",
        "SELECT 1/0",
        "ROLLBACK",
        "COMMIT",
        "ROLLBACK",
        "BEGIN",
        "BEGIN",
        "COMMIT",
    ]
    found = await asyncio.to_thread(assert_like_postgres, engine.service.pgwire_port, statements)
    assert ("SELECT 1", "25P02", None, "INERROR", []) in found


async def test_cursors_declare_fetch_close_as_in_postgres(engine):
    """DECLARE/FETCH/CLOSE: rows, tags and errors (25P01, 34000, 42P03) as PostgreSQL has them."""
    query = "SELECT a FROM (VALUES (1), (2), (3), (4), (5)) AS v (a) ORDER BY a"
    statements = [
        f"DECLARE c CURSOR FOR {query}",
        "FETCH c",
        "BEGIN",
        f"DECLARE c CURSOR FOR {query}",
        "FETCH 2 c",
        "FETCH FORWARD 2 FROM c",
        "FETCH ALL IN c",
        "FETCH c",
        "CLOSE c",
        "CLOSE c",
        "ROLLBACK",
        "BEGIN",
        f"DECLARE c NO SCROLL CURSOR WITHOUT HOLD FOR {query}",
        f"DECLARE c CURSOR FOR {query}",
        "ROLLBACK",
        "BEGIN",
        f"DECLARE d CURSOR FOR {query}",
        "COMMIT",
        "BEGIN",
        "FETCH d",
        "ROLLBACK",
        # A multi-statement request is an (implicit) transaction block.
        f"DECLARE e CURSOR FOR {query}; FETCH 3 e",
        "FETCH e",
    ]
    found = await asyncio.to_thread(assert_like_postgres, engine.service.pgwire_port, statements)
    assert found[6][1:3] == ("FETCH 1", [(5,)])


async def test_read_only_transaction_reads_one_snapshot(engine):
    """A transaction's SELECTs read at one timestamp: an INSERT committed between them is not seen."""
    port = engine.service.pgwire_port

    def run() -> None:
        with loupe(port, autocommit=True) as other:
            other.execute("CREATE TABLE r (a int)")
            other.execute("INSERT INTO r VALUES (1)")
            # psycopg's default: a transaction opened by the first statement.
            with loupe(port) as conn:
                assert conn.execute("SELECT count(*) FROM r").fetchone() == (1,)
                assert conn.info.transaction_status == INTRANS
                other.execute("INSERT INTO r VALUES (2)")
                time.sleep(1.2)  # past the next tick: a fresh read would see the row
                assert conn.execute("SELECT count(*) FROM r").fetchone() == (1,)
                assert conn.execute("SELECT a FROM r ORDER BY a").fetchall() == [(1,)]
                conn.commit()
                assert conn.info.transaction_status == IDLE
                assert conn.execute("SELECT count(*) FROM r").fetchone() == (2,)
                conn.rollback()
                with conn.transaction():
                    assert conn.execute("SELECT count(*) FROM r").fetchone() == (2,)
                    # Writes after reads: Materialize's 25006 "transaction in read-only mode".
                    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as raised:
                        conn.execute("INSERT INTO r VALUES (3)")
                    assert raised.value.diag.message_primary == "transaction in read-only mode"
                    raise psycopg.Rollback()
                assert conn.info.transaction_status == IDLE

    await asyncio.to_thread(run)


async def test_write_transaction_commits_atomically_and_rollback_discards(engine):
    """INSERTs of a transaction are invisible to others until COMMIT, then all at one
    timestamp; ROLLBACK discards them; reading in it is Materialize's 25000."""
    port = engine.service.pgwire_port

    def run() -> list[tuple[Any, ...]]:
        with loupe(port, autocommit=True) as other, loupe(port, autocommit=True) as watcher:
            other.execute("CREATE TABLE w1 (a int)")
            other.execute("CREATE TABLE w2 (b text)")
            # A SUBSCRIBE started before the commit sees when each row was written.
            watcher.execute("BEGIN")
            watcher.execute(
                "DECLARE s CURSOR FOR SUBSCRIBE (SELECT a::text AS v FROM w1 UNION ALL"
                " SELECT b FROM w2) WITH (SNAPSHOT = false)"
            )
            assert watcher.execute("FETCH ALL s WITH (timeout = '0.1s')").fetchall() == []
            with loupe(port) as conn:
                assert conn.execute("INSERT INTO w1 VALUES (1), (2)").statusmessage == "INSERT 0 2"
                conn.execute("INSERT INTO w2 VALUES ('x')")
                conn.execute("INSERT INTO w1 VALUES (3)")
                # Queries that read no relation go with writes.
                assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
                time.sleep(1.2)
                assert other.execute("SELECT count(*) FROM w1").fetchone() == (0,)
                conn.commit()
                assert other.execute("SELECT count(*) FROM w1").fetchone() == (3,)
                assert other.execute("SELECT b FROM w2").fetchall() == [("x",)]
                conn.execute("INSERT INTO w1 VALUES (4)")
                conn.rollback()
                assert other.execute("SELECT count(*) FROM w1").fetchone() == (3,)
                conn.execute("INSERT INTO w1 VALUES (5)")
                with pytest.raises(psycopg.errors.InvalidTransactionState) as raised:
                    conn.execute("SELECT count(*) FROM w1")
                assert raised.value.diag.message_primary == "transaction in write-only mode"
                assert conn.info.transaction_status == INERROR
                conn.commit()  # of a failed transaction: rolled back
                assert other.execute("SELECT count(*) FROM w1").fetchone() == (3,)
            rows = watcher.execute("FETCH ALL s WITH (timeout = '2s')").fetchall()
            watcher.execute("COMMIT")
            return rows

    rows = await asyncio.to_thread(run)
    assert sorted(row[2] for row in rows) == ["1", "2", "3", "x"]
    assert len({row[0] for row in rows}) == 1, rows


async def test_copy_from_stdin_in_a_transaction_is_one_of_its_writes(engine):
    """COPY FROM in a transaction block is written at COMMIT with its INSERTs, or not at all."""
    port = engine.service.pgwire_port

    def run() -> list[int]:
        counts = []
        with loupe(port, autocommit=True) as other, loupe(port) as conn:
            other.execute("CREATE TABLE cp (a int, b text)")
            conn.execute("INSERT INTO cp VALUES (0, 'zero')")
            with conn.cursor().copy("COPY cp FROM STDIN") as copy:
                copy.write_row((1, "one"))
                copy.write_row((2, "two"))
            counts.append(count(other, "cp"))
            conn.commit()
            counts.append(count(other, "cp"))
            with conn.cursor().copy("COPY cp FROM STDIN") as copy:
                copy.write_row((3, "three"))
            conn.rollback()
            counts.append(count(other, "cp"))
        return counts

    assert await asyncio.to_thread(run) == [0, 3, 3]


async def test_writes_but_inserts_cannot_run_in_a_transaction(engine):
    """UPDATE, DELETE and INSERT … SELECT in a transaction block: Materialize's 25001."""
    port = engine.service.pgwire_port

    def run() -> list[tuple[str | None, str]]:
        found = []
        with loupe(port, autocommit=True) as conn:
            conn.execute("CREATE TABLE d (a int)")
            for sql in ("UPDATE d SET a = 2", "DELETE FROM d", "INSERT INTO d SELECT 1"):
                conn.execute("BEGIN")
                try:
                    conn.execute(sql)
                except psycopg.Error as error:
                    found.append((error.sqlstate, error.diag.message_primary or ""))
                conn.execute("ROLLBACK")
            conn.execute("BEGIN READ ONLY")
            found.append((sqlstate(conn, "INSERT INTO d VALUES (1)"), "read only"))
            conn.execute("ROLLBACK")
        return found

    assert await asyncio.to_thread(run) == [
        ("25001", "UPDATE d SET a = 2 cannot be run inside a transaction block"),
        ("25001", "DELETE FROM d cannot be run inside a transaction block"),
        ("25001", "INSERT INTO d SELECT 1 cannot be run inside a transaction block"),
        ("25006", "read only"),
    ]


async def test_ddl_alone_in_a_transaction_runs_at_commit(engine):
    """psycopg's default mode sends BEGIN before DDL: as in Materialize, a transaction of one
    DDL statement answers its tag and runs it at COMMIT; ROLLBACK forgets it; a second
    statement is 25000, a DDL after a read 25006."""
    port = engine.service.pgwire_port

    def run() -> None:
        with loupe(port, autocommit=True) as other, loupe(port) as conn:
            assert conn.execute("CREATE TABLE later (a int)").statusmessage == "CREATE TABLE"
            assert sqlstate(other, "SELECT * FROM later") == "42P01"
            conn.commit()
            assert other.execute("SELECT count(*) FROM later").fetchone() == (0,)
            conn.execute("CREATE VIEW never AS SELECT 1 AS a")
            conn.rollback()
            assert sqlstate(other, "SELECT * FROM never") == "42P01"
            conn.execute("CREATE VIEW v1 AS SELECT 1 AS a")
            with pytest.raises(psycopg.errors.InvalidTransactionState) as raised:
                conn.execute("CREATE VIEW v2 AS SELECT 2 AS a")
            message = raised.value.diag.message_primary
            assert message == "this transaction can only execute a single statement"
            conn.rollback()
            conn.execute("SELECT * FROM later")
            assert sqlstate(conn, "DROP TABLE later") == "25006"
            conn.rollback()
            # A DDL that fails at COMMIT fails the COMMIT.
            conn.execute("CREATE TABLE later (b int)")
            with pytest.raises(psycopg.Error, match="already exists"):
                conn.commit()
            assert conn.info.transaction_status == IDLE
            assert other.execute("SELECT a FROM later").fetchall() == []

    await asyncio.to_thread(run)


async def test_subscribe_cursor_fetch_waits_up_to_its_timeout(engine):
    """FETCH on a SUBSCRIBE cursor: the snapshot, then [] after the timeout, then (without
    one) the next change as soon as it arrives."""
    port = engine.service.pgwire_port

    def run() -> None:
        with loupe(port, autocommit=True) as other, loupe(port) as conn:
            other.execute("CREATE TABLE s (a int)")
            other.execute("INSERT INTO s VALUES (1)")
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
            cursor = conn.execute("FETCH 10 c WITH (timeout = '2s')")
            assert [d.name for d in cursor.description or ()] == ["mz_timestamp", "mz_diff", "a"]
            assert [row[1:] for row in cursor.fetchall()] == [(1, 1)]
            started = time.monotonic()
            assert conn.execute("FETCH 1 c WITH (timeout = '300ms')").fetchall() == []
            assert 0.25 < time.monotonic() - started < 2
            # A second read in a SUBSCRIBE transaction: Materialize's 25000.
            other.execute("INSERT INTO s VALUES (2)")
            assert [row[1:] for row in conn.execute("FETCH c").fetchall()] == [(1, 2)]
            conn.rollback()
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE s")
            conn.execute("FETCH c WITH (timeout = '1s')")
            with pytest.raises(psycopg.errors.InvalidTransactionState) as raised:
                conn.execute("SELECT * FROM s")
            message = raised.value.diag.message_primary
            assert message == "SUBSCRIBE in transactions must be the only read statement"
            conn.rollback()

    await asyncio.to_thread(run)
    # The cursors' SUBSCRIBE dataflows were dropped with their transactions.
    subscribes = [
        request.dataflow.id
        for request in engine.controller.created
        if request.dataflow.sink_exports
    ]
    assert len(subscribes) == 2
    for _ in range(50):
        if set(subscribes) <= engine.controller.dropped:
            break
        await asyncio.sleep(0.1)
    assert set(subscribes) <= engine.controller.dropped


async def test_psycopg_server_side_cursor(engine):
    """psycopg's named cursors (DECLARE, Describe of the cursor's portal, FETCH FORWARD n)."""
    port = engine.service.pgwire_port

    def run() -> tuple[list[tuple[int]], list[tuple[int]], list[str]]:
        with loupe(port) as conn:
            with conn.cursor("named") as cursor:
                cursor.execute("SELECT a FROM (VALUES (1), (2), (3)) AS v (a) ORDER BY a")
                first = cursor.fetchmany(2)
                rest = cursor.fetchall()
                names = [d.name for d in cursor.description or ()]
            conn.commit()
            return first, rest, names

    assert await asyncio.to_thread(run) == ([(1,), (2,)], [(3,)], ["a"])


# -- the gRPC API: the same session layer ------------------------------------------------


async def grpc_outcome(engine, session: str, sql: str) -> tuple[str, list[tuple]]:
    """(SQLSTATE or last tag, rows) of one request over the gRPC API."""
    responses = await engine.execute(session, sql)
    errors = [r.error.code for r in responses if r.HasField("error")]
    rows = [from_row(row) for r in responses if r.HasField("rows") for row in r.rows.rows]
    if errors:
        return errors[0], rows
    return [r.complete.tag for r in responses if r.HasField("complete")][-1], rows


async def test_grpc_transactions_and_cursors(engine):
    """Over gRPC: a read-only transaction's snapshot, a write transaction, 25P02, and
    BEGIN … COMMIT and DECLARE … FETCH within one request."""
    session = await engine.session()
    other = await engine.session()
    assert (await grpc_outcome(engine, other, "CREATE TABLE g (a int)"))[0] == "CREATE TABLE"
    assert (await grpc_outcome(engine, other, "INSERT INTO g VALUES (1)"))[0] == "INSERT 0 1"

    assert await grpc_outcome(engine, session, "BEGIN") == ("BEGIN", [])
    assert await grpc_outcome(engine, session, "SELECT a FROM g") == ("SELECT 1", [(1,)])
    await grpc_outcome(engine, other, "INSERT INTO g VALUES (2)")
    await asyncio.sleep(1.2)
    assert await grpc_outcome(engine, session, "SELECT a FROM g") == ("SELECT 1", [(1,)])
    assert (await grpc_outcome(engine, session, "INSERT INTO g VALUES (3)"))[0] == "25006"
    assert (await grpc_outcome(engine, session, "SELECT 1"))[0] == "25P02"
    assert await grpc_outcome(engine, session, "COMMIT") == ("ROLLBACK", [])

    assert (await grpc_outcome(engine, session, "BEGIN; INSERT INTO g VALUES (4), (5)"))[0] == (
        "INSERT 0 2"
    )
    assert await grpc_outcome(engine, other, "SELECT count(*) FROM g") == ("SELECT 1", [(2,)])
    assert await grpc_outcome(engine, session, "COMMIT") == ("COMMIT", [])
    assert await grpc_outcome(engine, other, "SELECT count(*) FROM g") == ("SELECT 1", [(4,)])
    assert (await grpc_outcome(engine, session, "BEGIN; INSERT INTO g VALUES (6); ROLLBACK"))[
        0
    ] == "ROLLBACK"
    assert await grpc_outcome(engine, other, "SELECT count(*) FROM g") == ("SELECT 1", [(4,)])

    fetched = await grpc_outcome(
        engine, session, "DECLARE c CURSOR FOR SELECT a FROM g ORDER BY a; FETCH 3 c"
    )
    assert fetched == ("FETCH 3", [(1,), (2,), (4,)])
    # The implicit transaction of that request ended, and its cursor with it.
    assert (await grpc_outcome(engine, session, "FETCH c"))[0] == "34000"
    assert (await grpc_outcome(engine, session, "DECLARE c CURSOR FOR SELECT 1"))[0] == "25P01"


async def test_fetch_times_out_and_a_closed_session_drops_its_cursors(engine):
    """A FETCH waiting for a SUBSCRIBE's rows is canceled at its statement_timeout (57014,
    the transaction failed); closing the connection drops the cursor's dataflow."""
    port = engine.service.pgwire_port
    created = len(engine.controller.created)

    def run() -> tuple[str | None, str]:
        with loupe(port, autocommit=True) as other:
            other.execute("CREATE TABLE quiet (a int)")
        with loupe(port) as conn:
            conn.execute("SET statement_timeout = '1s'")
            conn.execute("DECLARE c CURSOR FOR SUBSCRIBE quiet")
            code = sqlstate(conn, "FETCH c")
            return code, conn.info.transaction_status.name

    assert await asyncio.to_thread(run) == ("57014", "INERROR")
    subscribes = [
        request.dataflow.id
        for request in engine.controller.created[created:]
        if request.dataflow.sink_exports
    ]
    assert len(subscribes) == 1
    for _ in range(50):
        if set(subscribes) <= engine.controller.dropped:
            break
        await asyncio.sleep(0.1)
    assert set(subscribes) <= engine.controller.dropped
