"""Issue 14's story over the PostgreSQL wire protocol, every service a real process (``loupe up``).

psql creates a table, inserts and selects, and ``\\d t`` prints what PostgreSQL prints;
``COPY (SUBSCRIBE t) TO STDOUT`` streams until a CancelRequest (psycopg's ``cancel()``,
what psql's Ctrl-C sends) stops it, and the statement log records that execution
``canceled``, as for the gRPC API.
"""

from __future__ import annotations

import subprocess
import threading
import time

import psycopg
import pytest

from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("pgwire") / "data")
    loupe.start()
    loupe.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
    loupe.sql("ALTER SYSTEM SET statement_logging_default_sample_rate = 1")
    yield loupe
    loupe.stop()


def psql(system: LoupeUp, sql: str) -> str:
    result = subprocess.run(
        ["/usr/bin/psql", "-h", "127.0.0.1", "-p", str(system.pgwire_port), "-U", "materialize",
         "-d", "materialize", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def describe(connection: list[str]) -> str:
    """What psql's ``\\d t`` prints."""
    result = subprocess.run(
        ["/usr/bin/psql", "-h", "127.0.0.1", *connection, "-X", "-c", "\\d t"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def reference_describe() -> str:
    """``\\d t`` of the same table in the local PostgreSQL (a database of its own)."""
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS loupe_pgwire_story")
        conn.execute("CREATE DATABASE loupe_pgwire_story")
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=loupe_pgwire_story") as conn:
        conn.execute("CREATE TABLE t (a int)")
    return describe(["-U", "postgres", "-d", "loupe_pgwire_story"])


def stream_until_canceled(conn: psycopg.Connection, sql: str, received: list[bytes]) -> None:
    """Read a COPY TO STDOUT; cancel it (CancelRequest) once the first row came."""
    with conn.cursor() as cursor, cursor.copy(sql) as copy:
        for data in copy:
            received.append(bytes(data))
            if len(received) == 1:
                threading.Timer(0.3, conn.cancel).start()


def test_loupe_up_prints_the_pgwire_address(system):
    """``loupe up`` says where psql connects."""
    expected = (
        f"SQL (pgwire): 127.0.0.1:{system.pgwire_port}    try: psql -h 127.0.0.1"
        f" -p {system.pgwire_port} -U materialize materialize"
    )
    assert any(expected in line for line in system.output)


def test_psql_story_and_canceled_copy_subscribe(system):
    """psql CREATE/INSERT/SELECT and \\d t; COPY (SUBSCRIBE t) cancelled; logged as canceled."""
    psql(system, "CREATE TABLE t (a int)")
    assert psql(system, "INSERT INTO t VALUES (1)").strip() == "INSERT 0 1"
    assert psql(system, "SELECT a FROM t").strip() == "1"
    assert describe(["-p", str(system.pgwire_port), "-U", "materialize", "-d", "materialize"]) == (
        reference_describe()
    )

    with psycopg.connect(
        host="127.0.0.1",
        port=system.pgwire_port,
        user="materialize",
        dbname="materialize",
        autocommit=True,
        application_name="pgwire-story",
    ) as conn:
        received: list[bytes] = []
        with pytest.raises(psycopg.errors.QueryCanceled):
            stream_until_canceled(conn, "COPY (SUBSCRIBE t) TO STDOUT", received)
        assert received[0].rstrip(b"\n").split(b"\t")[1:] == [b"1", b"1"]
        assert conn.execute("SELECT 1").fetchone() == (1,)

    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        rows = system.sql(
            "SELECT finished_status FROM mz_internal.mz_recent_activity_log"
            " WHERE application_name = 'pgwire-story' AND sql LIKE '%SUBSCRIBE t%'"
        )
        status = rows[0][0] if rows else None
        if status is not None:
            break
        time.sleep(0.5)
    assert status == "canceled"
