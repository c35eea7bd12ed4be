"""Parameters and prepared statements through gRPC: a coordinator on the real catalog, the real
engine and real NATS; the statement log read back from its JetStream stream."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
)
from loupe.common.values import from_row, to_value
from loupe.coordinator.tests.conftest import TableHarness
from loupe.proto.sql.v1 import sql_pb2

PREPARED_COLUMNS = [name for name, _ in MZ_PREPARED_STATEMENT_HISTORY.columns]
EXECUTION_COLUMNS = [name for name, _ in MZ_STATEMENT_EXECUTION_HISTORY.columns]


async def run(h: TableHarness, session: str, sql: str, *params: Any) -> Any:
    """(rows, tag) of the statement, or the error it ended with."""
    request = sql_pb2.ExecuteRequest(
        session_id=session, sql=sql, params=[to_value(p) for p in params]
    )
    rows: list[tuple] = []
    tag = ""
    async for response in h.stub.Execute(request):
        kind = response.WhichOneof("kind")
        if kind == "error":
            return response.error
        if kind == "rows":
            rows.extend(from_row(row) for row in response.rows.rows)
        if kind == "complete":
            tag = response.complete.tag
    return rows, tag


async def error_code(h: TableHarness, session: str, sql: str, *params: Any) -> str:
    answer = await run(h, session, sql, *params)
    assert not isinstance(answer, tuple), f"{sql!r} did not fail"
    return answer.code


async def test_parameters_bind_into_select_insert_update_and_delete(engine: TableHarness):
    """ExecuteRequest.params are the $n of SELECT, INSERT, UPDATE and DELETE; NULL stays NULL."""
    session = await engine.session()
    await engine.tag(session, "CREATE TABLE t (a int, b text)")
    assert await run(engine, session, "INSERT INTO t VALUES ($1, $2)", 1, "one") == (
        [],
        "INSERT 0 1",
    )
    await run(engine, session, "INSERT INTO t VALUES ($1, $2), ($1 + 1, $2)", 2, None)
    query = "SELECT a, b FROM t WHERE a >= $1 ORDER BY a"
    assert (await run(engine, session, query, 1))[0] == [(1, "one"), (2, None), (3, None)]
    assert await run(engine, session, "UPDATE t SET b = $1 WHERE a = $2", "two", 2) == (
        [],
        "UPDATE 1",
    )
    assert await run(engine, session, "DELETE FROM t WHERE a <> $1", 2) == ([], "DELETE 2")
    assert (await run(engine, session, query, 0))[0] == [(2, "two")]
    # A query without relations (the constant path) binds the same way.
    assert (await run(engine, session, "SELECT $1::int + 1, $2 IS NULL", 41, None))[0] == [
        (42, True)
    ]
    # PostgreSQL's errors: a $n without a value, more values than used, several statements.
    missing = await run(engine, session, "SELECT $1 + $2", 1)
    assert (missing.code, missing.message, missing.position) == (
        "42P02",
        "there is no parameter $2",
        13,
    )
    assert await error_code(engine, session, "SELECT $1") == "42P02"
    assert await error_code(engine, session, "SELECT $1", 1, 2) == "08P01"
    assert await error_code(engine, session, "SELECT $1; SELECT $1", 1) == "42601"
    assert await error_code(engine, session, "SELECT $1", b"\x00") == "0A000"


async def test_prepare_execute_and_deallocate_follow_postgresql(engine: TableHarness):
    session = await engine.session()
    await engine.tag(session, "CREATE TABLE t (a int, b text)")
    await engine.tag(session, "PREPARE ins (int, text) AS INSERT INTO t VALUES ($1, $2)")
    # The arguments are cast to the declared types; an expression is evaluated.
    assert await run(engine, session, "EXECUTE ins ('3', 'x')") == ([], "INSERT 0 1")
    assert await run(engine, session, "EXECUTE ins (2 * 2, NULL)") == ([], "INSERT 0 1")
    await engine.tag(session, "PREPARE sel AS SELECT a, b FROM t WHERE a > $1 ORDER BY a")
    assert await run(engine, session, "EXECUTE sel (0)") == ([(3, "x"), (4, None)], "SELECT 2")
    # The request's own parameters may feed EXECUTE's arguments.
    assert await run(engine, session, "EXECUTE sel ($1)", 3) == ([(4, None)], "SELECT 1")

    assert await error_code(engine, session, "PREPARE sel AS SELECT 1") == "42P05"
    assert await error_code(engine, session, "EXECUTE nope (1)") == "26000"
    wrong = await run(engine, session, "EXECUTE sel")
    assert (wrong.code, wrong.message, wrong.detail) == (
        "42601",
        'wrong number of parameters for prepared statement "sel"',
        "Expected 1 parameters but got 0.",
    )
    assert await error_code(engine, session, "EXECUTE sel (1, 2)") == "42601"
    assert await error_code(engine, session, "EXECUTE sel ((SELECT 1))") == "0A000"
    # Prepared statements belong to their session.
    other = await engine.session()
    assert await error_code(engine, other, "EXECUTE sel (0)") == "26000"

    assert await engine.tag(session, "DEALLOCATE sel") == "DEALLOCATE"
    assert await error_code(engine, session, "EXECUTE sel (0)") == "26000"
    assert await error_code(engine, session, "DEALLOCATE PREPARE sel") == "26000"
    assert await engine.tag(session, "DEALLOCATE ALL") == "DEALLOCATE ALL"
    assert await error_code(engine, session, "EXECUTE ins (5, 'y')") == "26000"
    # The name is free again.
    await engine.tag(session, "PREPARE sel AS SELECT count(*) FROM t")
    assert (await run(engine, session, "EXECUTE sel"))[0] == [(2,)]


def _rows(updates: list[Any], collection: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of ``collection`` that remain once every retraction is applied."""
    counts: Counter[tuple] = Counter()
    for collection_id, row, diff in updates:
        if collection_id == collection:
            counts[row] += diff
    return [dict(zip(columns, row, strict=True)) for row, count in counts.items() if count > 0]


async def test_a_prepared_statement_is_logged_once_and_each_execution_with_its_params(
    nats_url: str, data_dir: Path, stream: Any, start_table_system: Any
):
    """Two sampled EXECUTEs of one PREPARE: one named row, two executions referring to it."""
    async with start_table_system(
        nats_url, data_dir, storage_subject=stream.subject, instance_name="params-test"
    ) as h:
        admin = await h.session()
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
        session = await h.session(statement_logging_sample_rate="1")
        sql = "SELECT $1::int + 1, $2, $3"
        await h.tag(session, f"PREPARE p AS {sql}")
        assert (await run(h, session, "EXECUTE p (1, NULL, 'a b')"))[0] == [(2, None, "a b")]
        assert (await run(h, session, "EXECUTE p (2, 'x', NULL)"))[0] == [(3, "x", None)]
        # Prepared again under the same name: another statement, another row.
        await h.tag(session, "DEALLOCATE p")
        await h.tag(session, f"PREPARE p AS {sql}")
        await run(h, session, "EXECUTE p (3, NULL, NULL)")
        # A request's parameters: an unnamed statement prepared for this execution.
        await run(h, session, "SELECT $1::text || '!'", "hi")
        # An EXECUTE that cannot run is logged as itself.
        await error_code(h, session, "EXECUTE nope")
        assert h.service.coordinator is not None
        await h.service.coordinator.statement_log.drain()
        updates = await stream.updates()

    prepared = _rows(updates, MZ_PREPARED_STATEMENT_HISTORY.id, PREPARED_COLUMNS)
    prepared = [p for p in prepared if p["session_id"] == session]
    named = [p for p in prepared if p["name"] == "p"]
    assert len(named) == 2  # one per PREPARE, however often it ran
    digest = hashlib.sha256(sql.encode()).hexdigest()
    assert {p["sql_hash"] for p in named} == {digest}
    assert {p["statement_type"] for p in named} == {"select"}
    executions = _rows(updates, MZ_STATEMENT_EXECUTION_HISTORY.id, EXECUTION_COLUMNS)
    by_statement: dict[str, list[str]] = {}
    for execution in executions:
        by_statement.setdefault(execution["prepared_statement_id"], []).append(execution["params"])
    first, second = sorted(named, key=lambda p: p["prepared_at"])
    assert sorted(by_statement[first["id"]]) == ['{1,NULL,"a b"}', "{2,x,NULL}"]
    assert by_statement[second["id"]] == ["{3,NULL,NULL}"]
    texts = {row[1]: row[2] for c, row, _ in updates if c == MZ_SQL_TEXT.id}
    assert texts[digest] == sql
    # Everything else is an unnamed statement prepared anew, with its own parameters.
    unnamed = {texts[p["sql_hash"]]: by_statement[p["id"]] for p in prepared if not p["name"]}
    assert unnamed["SELECT $1::text || '!'"] == ["{hi}"]
    assert unnamed[f"PREPARE p AS {sql}"] == ["{}"]
    assert unnamed["EXECUTE nope"] == ["{}"]
    statuses = {texts[p["sql_hash"]]: p["statement_type"] for p in prepared if not p["name"]}
    assert statuses["DEALLOCATE p"] == "deallocate"
    failed = [
        e
        for e in executions
        if e["prepared_statement_id"]
        in {p["id"] for p in prepared if texts[p["sql_hash"]] == "EXECUTE nope"}
    ]
    assert [(e["finished_status"], e["error_message"]) for e in failed] == [
        ("error", 'prepared statement "nope" does not exist')
    ]
