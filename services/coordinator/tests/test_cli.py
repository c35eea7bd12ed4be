"""``loupe sql``: rendering for people and scripts, errors with a caret, and the real command."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import itertools
import json
import os
import select
import sys
from typing import Any

import pytest

from loupe.cli.sql import (
    BAR_WIDTH,
    Output,
    Repl,
    describe_command,
    format_eta,
    render_csv,
    render_error,
    render_json,
    render_table,
    run_statements,
    statement_complete,
)
from loupe.client import HydrationProgress, SqlClient, StatementResult, StreamedRows
from loupe.common.errors import LoupeError
from loupe.common.nats_server import free_port

RESULT = StatementResult(
    tag="SELECT 2",
    columns=[("name", "text"), ("replication_factor", "uint8"), ("managed", "bool")],
    rows=[("quickstart", 1, True), ("c", None, False)],
)


def test_table_is_aligned_like_psql() -> None:
    """Centred header, dashes, numbers right-aligned, NULL empty, booleans t/f, row count."""
    assert render_table(RESULT) == (
        "    name    | replication_factor | managed\n"
        "------------+--------------------+---------\n"
        " quickstart |                  1 | t\n"
        " c          |                    | f\n"
        "(2 rows)\n\n"
    )


def test_table_of_one_row_says_row() -> None:
    """(1 row), not (1 rows)."""
    result = StatementResult(tag="SELECT 1", columns=[("?column?", "int4")], rows=[(1,)])
    assert render_table(result).rstrip().splitlines()[-1] == "(1 row)"


def test_json_is_one_array_of_objects() -> None:
    """--format json: an array of objects keyed by column name."""
    stamped = StatementResult(
        tag="SELECT 1",
        columns=[("at", "timestamptz")],
        rows=[(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),)],
    )
    assert json.loads(render_json(RESULT)) == [
        {"name": "quickstart", "replication_factor": 1, "managed": True},
        {"name": "c", "replication_factor": None, "managed": False},
    ]
    assert json.loads(render_json(stamped)) == [{"at": "2024-01-02T03:04:05+00:00"}]


def test_csv_has_a_header_and_rows() -> None:
    """--format csv: header, then rows; NULL is empty."""
    assert render_csv(RESULT) == "name,replication_factor,managed\nquickstart,1,t\nc,,f\n"


def test_error_has_code_and_a_caret_under_the_position() -> None:
    """The failing line is shown with a caret under the error's position."""
    sql = "SELECT 1;\nSELECT * FROM nope"
    error = LoupeError("42P01", "unknown catalog item 'nope'", position=sql.index("nope") + 1)
    assert render_error(error, sql) == (
        "ERROR:  unknown catalog item 'nope'\n"
        "LINE 2: SELECT * FROM nope\n"
        "                      ^\n"
        "CODE: 42P01\n"
    )


def test_error_without_position_has_no_caret_and_no_colour() -> None:
    """No position, no caret; no ANSI codes unless asked for."""
    text = render_error(LoupeError("42710", "cluster 'c' already exists", detail="d"), "x")
    assert text == "ERROR:  cluster 'c' already exists\nDETAIL:  d\nCODE: 42710\n"
    assert "\x1b" not in text


def test_statement_complete_ignores_semicolons_in_quotes_and_comments() -> None:
    """The REPL runs a buffer only when it ends with a real ;."""
    assert statement_complete("SELECT 1;")
    assert statement_complete("SELECT 1; -- done")
    assert not statement_complete("SELECT ';")
    assert not statement_complete("SELECT 1 -- ;")
    assert not statement_complete("SELECT 1 /* ; */")
    assert not statement_complete("SELECT $$;")
    assert statement_complete("SELECT 'it''s';")
    assert not statement_complete("SELECT 1")


async def run_cli(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "NO_COLOR": "1", "LOUPE_SQL_HISTORY": os.devnull}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loupe.cli.main",
        "sql",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_loupe_sql_runs_statements_against_the_coordinator(harness: Any) -> None:
    """loupe sql -c prints tags and tables; --format json/csv print only rows."""
    port = str(harness.service.sql_port)
    code, out, err = await run_cli(
        "--port", port, "-c", "CREATE CLUSTER c (SIZE '1'); SHOW CLUSTERS"
    )
    assert (code, err) == (0, "")
    assert out == (
        "CREATE CLUSTER\n"
        "       name\n"
        "-------------------\n"
        " c\n"
        " mz_catalog_server\n"
        " quickstart\n"
        "(3 rows)\n\n"
    )
    code, out, _ = await run_cli(
        "--port", port, "--format", "json", "-c", "SET cluster = c; SHOW cluster"
    )
    assert (code, json.loads(out)) == (0, [{"cluster": "c"}])
    code, out, _ = await run_cli("--port", port, "--format", "csv", "-c", "SELECT 1 AS a, 'x' AS b")
    assert (code, out) == (0, "a,b\n1,x\n")


async def test_loupe_sql_error_exits_1_with_caret(harness: Any) -> None:
    """An SQL error goes to stderr with its code and a caret; the exit status is 1."""
    code, out, err = await run_cli(
        "--port", str(harness.service.sql_port), "-c", "SELECT * FROM mz_catalog.nope"
    )
    assert code == 1
    assert out == ""
    assert err == (
        "ERROR:  unknown catalog item 'mz_catalog.nope'\n"
        "LINE 1: SELECT * FROM mz_catalog.nope\n"
        "                      ^\n"
        "CODE: 42P01\n"
    )


async def test_loupe_sql_without_a_server_says_so_and_exits_2() -> None:
    """No coordinator listening: one clear line, exit status 2."""
    code, out, err = await run_cli("--port", str(free_port()), "-c", "SELECT 1")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "cannot connect to the coordinator" in err


def test_progress_is_plain_lines_when_not_a_terminal() -> None:
    """Hydration progress goes to stderr one line per report, without control characters."""
    out, errors = io.StringIO(), io.StringIO()
    output = Output("table", out, errors)
    output.show(HydrationProgress("materialize.public.i", 1, 4, 1500, False))
    output.show(HydrationProgress("materialize.public.i", 4, 4, 3000, True))
    output.show(StatementResult(tag="CREATE INDEX"))
    assert errors.getvalue() == (
        "hydrating materialize.public.i: 1/4 nodes, 1,500 records read\n"
        "hydrated materialize.public.i: 4/4 nodes, 3,000 records read\n"
    )
    assert out.getvalue() == "CREATE INDEX\n"


def test_progress_lines_give_the_share_of_the_estimate_and_the_eta() -> None:
    errors = io.StringIO()
    output = Output("table", io.StringIO(), errors)
    item = "materialize.public.q3"
    output.show(HydrationProgress(item, 1, 7, 900, False, "nodes", 1_200, 4_000, None))
    output.show(HydrationProgress(item, 3, 7, 2_000, False, "nodes", 2_400, 4_000, 12_345))
    # The estimate passed before the end: 99 % until hydrated.
    output.show(HydrationProgress(item, 6, 7, 3_000, False, "nodes", 4_100, 4_000, None))
    output.show(HydrationProgress(item, 7, 7, 3_000, True, "nodes", 4_200, 4_000, 0))
    assert errors.getvalue().splitlines() == [
        f"hydrating {item}: 1/7 nodes, 1,200/4,000 records (30%)",
        f"hydrating {item}: 3/7 nodes, 2,400/4,000 records (60%), ETA 13s",
        f"hydrating {item}: 6/7 nodes, 4,100/4,000 records (99%)",
        f"hydrated {item}: 7/7 nodes, 4,200/4,000 records (100%)",
    ]


def test_eta_reads_in_seconds_minutes_and_hours() -> None:
    assert [format_eta(ms) for ms in (0, 999, 12_000, 61_000, 3_599_000, 3_725_000)] == [
        "0s",
        "1s",
        "12s",
        "1m01s",
        "59m59s",
        "1h02m",
    ]


def test_progress_is_a_bar_rewritten_in_place_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a real terminal (a pty): one line per object, rewritten with a carriage return and
    padded over its previous text; no colour or other escape sequence; ended when hydrated."""
    monkeypatch.setenv("COLUMNS", "160")
    master, slave = os.openpty()
    errors = os.fdopen(slave, "w")
    try:
        output = Output("table", io.StringIO(), errors)
        a, b = "materialize.public.a", "materialize.public.b"
        reports = [
            HydrationProgress(a, 0, 4, 0, False, "nodes", 0, 0, None),
            HydrationProgress(a, 1, 4, 10, False, "nodes", 1_000, 4_000, None),
            HydrationProgress(a, 2, 4, 20, False, "nodes", 3_000, 4_000, 5_000),
            HydrationProgress(a, 4, 4, 40, True, "nodes", 4_000, 4_000, 0),
            HydrationProgress(b, 1, 2, 5, False, "nodes", 50, 100, 1_000),
        ]
        for report in reports:
            output.show(report)
        output.flush()
        errors.flush()
        chunks = b""
        # A pty hands over what was written in pieces: read until both lines ended.
        while chunks.count(b"\n") < 2:
            ready, _, _ = select.select([master], [], [], 10)
            assert ready, chunks
            chunks += os.read(master, 65536)
        written = chunks.decode()
    finally:
        errors.close()
        os.close(master)
    assert "\x1b" not in written
    # The terminal turns "\n" into "\r\n": split on the line ends, then on the rewrites.
    lines = written.replace("\r\n", "\n").split("\n")
    assert lines[-1] == ""
    first, second = lines[0].split("\r")[1:], lines[1].split("\r")[1:]

    def bar(percent: int) -> str:
        filled = percent * BAR_WIDTH // 100
        return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + f"] {percent:>3}%"

    # No estimate yet: the nodes' share.
    assert first[0].rstrip() == f"hydrating {a} {bar(0)} 0/4 nodes, 0 records read, ETA ?"
    assert first[1].rstrip() == (f"hydrating {a} {bar(25)} 1/4 nodes, 1,000/4,000 records, ETA ?")
    assert first[2].rstrip() == (f"hydrating {a} {bar(75)} 2/4 nodes, 3,000/4,000 records, ETA 5s")
    assert first[3].rstrip() == f"hydrated {a} {bar(100)} 4/4 nodes, 4,000/4,000 records"
    # Each rewrite covers the text before it.
    assert all(len(later) >= len(earlier.rstrip()) for earlier, later in itertools.pairwise(first))
    assert second == [f"hydrating {b} {bar(50)} 1/2 nodes, 50/100 records, ETA 1s"]


def test_load_progress_counts_tables_and_rows() -> None:
    errors = io.StringIO()
    Output("table", io.StringIO(), errors).show(
        HydrationProgress("materialize.public.tpch", 3, 8, 61_234, False, "tables")
    )
    assert errors.getvalue() == "loading materialize.public.tpch: 3/8 tables, 61,234 rows written\n"


def test_streamed_rows_print_as_they_arrive_with_one_header() -> None:
    columns = [("mz_timestamp", "numeric"), ("mz_diff", "int8"), ("a", "int4")]
    out = io.StringIO()
    output = Output("table", out, io.StringIO())
    output.show(StreamedRows(columns, [(5, 1, 2)]))
    assert out.getvalue() == "mz_timestamp\tmz_diff\ta\n5\t1\t2\n"
    output.show(StreamedRows(columns, [(7, -1, 2), (7, 1, None)]))
    assert out.getvalue().splitlines()[2:] == ["7\t-1\t2", "7\t1\t"]
    as_csv = io.StringIO()
    Output("csv", as_csv, io.StringIO()).show(StreamedRows(columns, [(5, 1, 2)]))
    assert as_csv.getvalue() == "mz_timestamp,mz_diff,a\n5,1,2\n"


async def test_loupe_sql_shows_hydration_of_a_new_index(compute: Any) -> None:
    """CREATE INDEX through the real command: the tag on stdout, progress on stderr."""
    port = str(compute.service.sql_port)
    code, out, err = await run_cli(
        "--port", port, "-c", "CREATE TABLE t (a int); CREATE DEFAULT INDEX ON t"
    )
    assert (code, out) == (0, "CREATE TABLE\nCREATE INDEX\n")
    progress = err.splitlines()
    assert progress
    assert all(line.startswith("hydrat") for line in progress), err
    assert progress[-1].startswith("hydrated materialize.public.t_primary_idx: "), err
    assert progress[-1].endswith(" nodes, 0 records read"), err


async def test_the_repl_opens_a_new_session_when_the_server_closed_its_own(harness: Any) -> None:
    """A session the coordinator closed (idle): the REPL opens another and runs the statement,
    which never ran; -c scripts just fail (08003)."""
    client = SqlClient("127.0.0.1", harness.service.sql_port)
    await asyncio.to_thread(client.open)
    try:
        first = client.session_id
        assert harness.service.coordinator.close_session(first, why="test")
        out, err = io.StringIO(), io.StringIO()
        output = Output("csv", out, err)
        assert await asyncio.to_thread(run_statements, client, "SELECT 1 AS a", output) == 1
        assert "08003" in err.getvalue()
        harness.service.coordinator.close_session(client.session_id, why="test")
        out, err = io.StringIO(), io.StringIO()
        output = Output("csv", out, err)
        status = await asyncio.to_thread(
            run_statements, client, "SELECT 1 AS a", output, reopen=True
        )
        assert (status, out.getvalue()) == (0, "a\n1\n")
        assert "a new one was opened" in err.getvalue()
        assert client.session_id != first
    finally:
        await asyncio.to_thread(client.close)


async def test_the_repl_describes_with_psql_backslash_commands(
    harness: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """\\l lists databases (SHOW DATABASES), an unknown \\-command says so, \\q quits."""
    assert describe_command("\\d t") == "SHOW COLUMNS FROM t"
    assert describe_command("\\dt") == "SHOW TABLES"
    lines = iter(["\\l", "\\nope", "\\q"])
    monkeypatch.setattr("builtins.input", lambda _prompt: next(lines))
    monkeypatch.setenv("LOUPE_SQL_HISTORY", "/dev/null")
    client = SqlClient("127.0.0.1", harness.service.sql_port)
    await asyncio.to_thread(client.open)
    try:
        out, err = io.StringIO(), io.StringIO()
        repl = Repl(client, Output("csv", out, err))
        assert await asyncio.to_thread(repl.loop) == 0
    finally:
        await asyncio.to_thread(client.close)
    assert out.getvalue().splitlines()[:2] == ["name", "materialize"]
    assert "unknown command \\nope" in capsys.readouterr().out


def test_arrays_print_as_postgresql_prints_them(postgres_url: str) -> None:
    """Elements quoted where PostgreSQL quotes them, NULL bare, booleans t/f."""
    import psycopg

    from loupe.cli.sql import format_value

    values = ["a b", None, 'x"y', "back\\slash", "", "NULL", "plain"]
    with psycopg.connect(postgres_url) as connection:
        row = connection.execute("SELECT %s::text[]::text, ARRAY[true, false]::text", (values,))
        texts, booleans = row.fetchone()  # type: ignore[misc]
    assert format_value(values) == texts
    assert format_value([True, False]) == booleans
