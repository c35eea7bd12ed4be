"""A read waits, it does not fail: the only time limit a statement meets is its statement_timeout.

The controller here is the fake one over real NATS; it answers a blocked
peek's rounds the way the real controller does (DEADLINE_EXCEEDED after
``timeout_ms``, the peek goes on) and can refuse calls as a controller that
is away does (UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import structlog

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
)
from loupe.common.errors import LoupeError
from loupe.common.transport import publish
from loupe.compute_replica.protocol import PeekResult
from loupe.coordinator.tests.conftest import _result_columns
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.sql.v1 import sql_pb2
from loupe.testing import assert_eventually


def error_of(responses: list[Any]) -> Any:
    errors = [r.error for r in responses if r.HasField("error")]
    assert errors, responses
    return errors[0]


def _has(items: Any, wanted: Any) -> None:
    assert wanted in items, (wanted, items)


async def test_a_read_waits_through_many_rounds_and_is_answered(fleet: Any) -> None:
    """A peek unanswered for many rounds is not an error; it is logged once, with why."""
    harness = await fleet.add(peek_round=0.2)
    session = await harness.session()
    harness.controller.block_peeks = True
    with structlog.testing.capture_logs() as logs:
        running = asyncio.create_task(harness.rows(session, "SELECT name FROM mz_clusters"))
        await assert_eventually(lambda: _at_least(len(harness.controller.peeks), 5), timeout=10)
        assert not running.done()
        harness.controller.release_peeks()
        rows = await asyncio.wait_for(running, 10)
    assert ("quickstart",) in rows
    uuids = {p.peek.uuid for p in harness.controller.peeks}
    assert len(uuids) == 1  # every round asked about the same peek
    assert all(p.timeout_ms == 200 for p in harness.controller.peeks)
    waiting = [e for e in logs if e["event"] == "read is waiting"]
    assert len(waiting) == 1, waiting
    assert waiting[0]["log_level"] == "info"
    assert "waits for the test to release it" in waiting[0]["waiting_for"]
    assert harness.controller.canceled == []


async def test_rows_a_replica_sends_straight_here_answer_before_the_controller(
    fleet: Any,
) -> None:
    """A peek names a reply subject; rows published there answer the read while the
    controller has not answered yet (it relays the same rows later). Anything but rows
    there is ignored: errors come through the controller."""
    harness = await fleet.add(peek_round=0.2)
    session = await harness.session()
    harness.controller.block_peeks = True
    running = asyncio.create_task(harness.rows(session, "SELECT name FROM mz_clusters"))
    await assert_eventually(lambda: _at_least(len(harness.controller.peeks), 1), timeout=10)
    peek = harness.controller.peeks[-1].peek
    assert peek.reply_subject
    connection = harness.service.coordinator.context.connection
    error = LoupeError("XX000", "not from here")
    await publish(
        connection,
        peek.reply_subject,
        compute_pb2.PeekResponse(uuid=peek.uuid, error=error.to_proto()),
    )
    rows = PeekResult(_result_columns(peek), [("straight from a replica",)]).to_proto()
    await publish(
        connection, peek.reply_subject, compute_pb2.PeekResponse(uuid=peek.uuid, rows=rows)
    )
    try:
        assert await asyncio.wait_for(running, 10) == [("straight from a replica",)]
        assert harness.controller.canceled == []
    finally:
        harness.controller.release_peeks()


async def test_a_drop_ends_a_waiting_read_at_once_not_at_the_end_of_its_round(
    fleet: Any,
) -> None:
    """The read is asked in rounds of a minute here; the DROP that commits meanwhile ends
    it within seconds (42704), and its peek is canceled at the controller."""
    harness = await fleet.add(peek_round=60)
    session, other = await harness.session(), await harness.session()
    assert await harness.rows(session, "CREATE TABLE soon_gone (a int)") == []
    harness.controller.block_peeks = True
    try:
        read = asyncio.create_task(harness.execute(session, "SELECT count(*) FROM soon_gone"))
        await assert_eventually(lambda: _at_least(len(harness.controller.peeks), 1), timeout=10)
        assert await harness.rows(other, "DROP TABLE soon_gone") == []
        failed = error_of(await asyncio.wait_for(read, 10))
        assert (failed.code, failed.message) == (
            "42704",
            'query could not complete because table "materialize.public.soon_gone" was dropped',
        )
        assert len(harness.controller.peeks) == 1  # one round, not ended by its clock
        peek_id = harness.controller.peeks[0].peek.uuid
        await assert_eventually(lambda: _has(harness.controller.canceled, peek_id), timeout=5)
    finally:
        harness.controller.release_peeks()


async def test_dropping_the_peeked_index_ends_a_waiting_fast_path_read(fleet: Any) -> None:
    """A fast-path read of an index waits; DROP INDEX (its table stays) ends it at once,
    naming the index as Materialize does."""
    harness = await fleet.add(peek_round=60)
    session, other = await harness.session(), await harness.session()
    for sql in ("CREATE TABLE kept (a int)", "CREATE INDEX kept_a ON kept (a)"):
        assert await harness.rows(session, sql) == []
    harness.controller.block_peeks = True
    try:
        read = asyncio.create_task(harness.execute(session, "SELECT a FROM kept WHERE a = 3"))
        await assert_eventually(lambda: _at_least(len(harness.controller.peeks), 1), timeout=10)
        index_id = harness.controller.peeks[0].peek.target_id
        assert index_id.startswith("u"), index_id  # the fast path: the index itself
        assert await harness.rows(other, "DROP INDEX kept_a") == []
        failed = error_of(await asyncio.wait_for(read, 10))
        assert (failed.code, failed.message) == (
            "42704",
            'query could not complete because index "materialize.public.kept_a" was dropped',
        )
    finally:
        harness.controller.release_peeks()


async def test_a_controller_that_is_away_is_waited_for(fleet: Any) -> None:
    """UNAVAILABLE from the controller (restarting) is asked again, not shown to the user."""
    harness = await fleet.add(peek_round=0.2)
    session = await harness.session()
    harness.controller.unavailable_peeks = 4
    rows = await harness.rows(session, "SELECT name FROM mz_clusters")
    assert ("quickstart",) in rows
    assert harness.controller.unavailable_peeks == 0
    assert len({p.peek.uuid for p in harness.controller.peeks}) == 1


async def test_a_restarted_controller_is_sent_the_transient_dataflow_again(fleet: Any) -> None:
    """A controller that lost the read's dataflow (NOT_FOUND: it restarted) gets it again."""
    harness = await fleet.add(peek_round=0.2)
    session = await harness.session()
    harness.controller.missing_peeks = 2
    rows = await harness.rows(session, "SELECT name FROM mz_clusters")
    assert ("quickstart",) in rows
    assert harness.controller.missing_peeks == 0
    assert len({r.dataflow.id for r in harness.controller.created}) == 1
    assert len(harness.controller.created) >= 2  # sent again, same id (idempotent)


async def test_statement_timeout_is_the_limit_and_cancels_the_peek(fleet: Any) -> None:
    """With statement_timeout = '1s', a waiting read fails 57014 and its peek is canceled."""
    harness = await fleet.add(peek_round=0.2)
    session = await harness.session()
    harness.controller.block_peeks = True
    assert await harness.rows(session, "SET statement_timeout = '1s'") == []
    error = error_of(
        await asyncio.wait_for(harness.execute(session, "SELECT name FROM mz_clusters"), 10)
    )
    assert (error.code, error.message) == ("57014", "canceling statement due to statement timeout")
    peek_id = harness.controller.peeks[-1].peek.uuid
    await assert_eventually(lambda: _has(harness.controller.canceled, peek_id), timeout=5)
    # Many rounds before the timeout: none of them was the user's limit.
    assert len(harness.controller.peeks) >= 3


async def test_a_waiting_read_is_running_in_the_statement_log(
    nats_url: str, data_dir: Path, stream: Any, start_table_system: Any
) -> None:
    """While a read waits, its execution is in the statement log with no finished status;
    canceled, it is finished as canceled."""
    async with start_table_system(
        nats_url, data_dir, storage_subject=stream.subject, instance_name="waits", peek_round=0.2
    ) as h:
        admin = await h.session()
        await h.tag(admin, "ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
        await h.tag(admin, "CREATE TABLE waiting (a int)")
        session = await h.session(statement_logging_sample_rate="1")
        h.controller.block_peeks = True
        sql = "SELECT count(*) FROM waiting"
        running = asyncio.create_task(h.execute(session, sql))
        seen: list[Any] = []

        async def logged_as_running() -> None:
            seen.extend(await stream.updates())
            assert _statuses(seen, sql) == [None]

        await assert_eventually(logged_as_running, timeout=10)
        assert not running.done()
        await h.stub.Cancel(sql_pb2.CancelRequest(session_id=session))
        error = error_of(await asyncio.wait_for(running, 10))
        assert error.code == "57014"
        assert h.service.coordinator is not None
        await h.service.coordinator.statement_log.drain()
        seen.extend(await stream.updates())
    assert _statuses(seen, sql) == ["canceled"]


def _statuses(updates: list[Any], sql: str) -> list[str | None]:
    """finished_status of the executions of ``sql`` that remain after retractions."""
    columns = [name for name, _ in MZ_STATEMENT_EXECUTION_HISTORY.columns]
    texts = {row[1]: row[2] for c, row, _ in updates if c == MZ_SQL_TEXT.id}
    prepared = {
        row[0]: texts.get(row[columns_prepared().index("sql_hash")])
        for c, row, _ in updates
        if c == MZ_PREPARED_STATEMENT_HISTORY.id
    }
    counts: Counter[tuple[Any, ...]] = Counter()
    for collection, row, diff in updates:
        if collection == MZ_STATEMENT_EXECUTION_HISTORY.id:
            counts[row] += diff
    rows = [dict(zip(columns, row, strict=True)) for row, n in counts.items() if n > 0]
    return [r["finished_status"] for r in rows if prepared.get(r["prepared_statement_id"]) == sql]


def columns_prepared() -> list[str]:
    return [name for name, _ in MZ_PREPARED_STATEMENT_HISTORY.columns]


def _at_least(value: int, minimum: int) -> None:
    assert value >= minimum, f"{value} < {minimum}"
