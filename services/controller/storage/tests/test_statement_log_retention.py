"""Retention of the statement log: old finished executions and events go, open ones stay;
then sessions, prepared statements and SQL text nothing refers to any more go too."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SESSION_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STATEMENT_LIFECYCLE_HISTORY,
    STATEMENT_LOG_COLLECTIONS,
)
from loupe.common.transport import ensure_stream
from loupe.controller.storage.compaction import live_statement_log_sessions
from loupe.coordinator.session import Session, SessionManager
from loupe.coordinator.statement_logging import SUCCESS, StatementLogger

pytestmark = [pytest.mark.spark]

UTC = dt.UTC
EXECUTIONS_AND_EVENTS = [MZ_STATEMENT_EXECUTION_HISTORY.id, MZ_STATEMENT_LIFECYCLE_HISTORY.id]


def execution(
    id_: str, began_at: dt.datetime, finished_at: dt.datetime | None, prepared_id: str | None = None
) -> tuple:
    """An execution row with only its ids and times set (the rest NULL)."""
    values: dict[str, Any] = {
        "id": id_,
        "prepared_statement_id": prepared_id,
        "began_at": began_at,
        "finished_at": finished_at,
    }
    if finished_at is not None:
        values["finished_status"] = "success"
    return tuple(values.get(name) for name in MZ_STATEMENT_EXECUTION_HISTORY.column_names)


async def test_statement_log_rows_past_the_retention_are_retracted(make_writer: Any) -> None:
    """Finished executions and events older than 30 days are retracted; an open one is kept.

    An open execution's row is retracted by the coordinator when it finishes,
    so retention must not retract it first, however old it is.
    """
    writer = await make_writer(
        collections=[MZ_STATEMENT_EXECUTION_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY]
    )
    now = dt.datetime.now(UTC)
    old, recent = now - dt.timedelta(days=31), now - dt.timedelta(days=29)
    for row in (execution("old", old, old), execution("recent", recent, recent)):
        writer.stage(MZ_STATEMENT_EXECUTION_HISTORY.id, row, 1)
    writer.stage(MZ_STATEMENT_EXECUTION_HISTORY.id, execution("open", old, None), 1)
    for id_, at in (("old", old), ("recent", recent)):
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()

    await writer.compact()
    executions = writer.snapshot(MZ_STATEMENT_EXECUTION_HISTORY.id)
    assert sorted(row[0] for row in executions) == ["open", "recent"]
    events = writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)
    assert [row[0] for row in events] == ["recent"]


async def test_a_shorter_retention_set_on_the_writer_applies_at_the_next_compaction(
    make_writer: Any,
) -> None:
    """``set_retention`` (from ``statement_logging_retention``) replaces the 30 days."""
    writer = await make_writer(collections=[MZ_STATEMENT_LIFECYCLE_HISTORY])
    now = dt.datetime.now(UTC)
    for id_, age in (("two days", 2), ("now", 0)):
        at = now - dt.timedelta(days=age)
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()

    writer.set_retention([MZ_STATEMENT_LIFECYCLE_HISTORY.id], 24 * 3_600_000)
    await writer.compact()
    events = writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)
    assert [row[0] for row in events] == ["now"]


class _NoReplicas:
    """The compute side of the follower, with no clusters to converge (not under test)."""

    async def apply(self, _clusters: Any, _replicas: Any) -> tuple[list[str], list[str]]:
        return [], []


async def test_the_catalogs_statement_logging_retention_reaches_the_writer(
    make_writer: Any,
) -> None:
    """``ALTER SYSTEM SET statement_logging_retention`` arrives as a catalog snapshot."""
    from loupe.controller.service import CatalogFollower
    from loupe.proto.catalog.v1 import catalog_pb2

    writer = await make_writer(
        collections=[MZ_STATEMENT_EXECUTION_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY]
    )
    now = dt.datetime.now(UTC)
    for id_, age in (("two days", 2), ("now", 0)):
        at = now - dt.timedelta(days=age)
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()
    follower = CatalogFollower(_NoReplicas(), writer)  # type: ignore[arg-type]
    snapshot = catalog_pb2.CatalogSnapshot(epoch=1, timestamp=1)
    snapshot.system_configuration["statement_logging_retention"] = "86400.0s"
    await follower.apply(snapshot)

    await writer.compact()
    assert [row[0] for row in writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)] == ["now"]


# -- garbage: rows nothing refers to any more ------------------------------------------


def _logger(nc: Any, subject: str, owner: str) -> StatementLogger:
    """A coordinator's statement logger that samples every execution, publishing to ``subject``."""
    config = {"statement_logging_max_sample_rate": "1.0"}
    return StatementLogger(nc, lambda: config, owner=owner, subject=subject)


def _session() -> Session:
    return SessionManager().open(
        application_name="app", defaults={"statement_logging_sample_rate": "1.0"}
    )


def _retracted(collection_id: str) -> float:
    labels = {"collection": collection_id}
    return REGISTRY.get_sample_value("loupe_storage_retention_retractions_total", labels) or 0.0


async def test_a_closed_sessions_rows_go_once_unreferenced_a_live_sessions_stay(
    make_writer: Any, nats_connection: Any, stream: Any
) -> None:
    """Executions expire; then the closed session's prepared statements and session row go
    in the same pass, the live session's stay (until it closes), and today's SQL text stays."""
    writer = await make_writer(collections=list(STATEMENT_LOG_COLLECTIONS))
    logger = _logger(nats_connection, stream.subject, f"coordinator-{uuid.uuid4().hex[:8]}")
    await logger.start()
    try:
        closed, live = _session(), _session()
        for session in (closed, live):
            for sql in ("SELECT 1", f"SELECT '{session.id}'"):
                execution = logger.begin(session, sql, "select")
                assert execution is not None
                logger.end(execution, SUCCESS)
        logger.session_closed(closed.id)
        await logger.drain()
        sessions = await live_statement_log_sessions(nats_connection)
        assert live.id in sessions
        assert closed.id not in sessions
        await writer.flush()
        assert len(writer.snapshot(MZ_PREPARED_STATEMENT_HISTORY.id)) == 4
        before = {
            cid: _retracted(cid) for cid in (MZ_PREPARED_STATEMENT_HISTORY.id, MZ_SQL_TEXT.id)
        }

        writer.set_retention(EXECUTIONS_AND_EVENTS, 1)
        await asyncio.sleep(0.01)
        await writer.compact()
        assert writer.snapshot(MZ_STATEMENT_EXECUTION_HISTORY.id) == []
        prepared = writer.snapshot(MZ_PREPARED_STATEMENT_HISTORY.id)
        assert sorted(row[1] for row in prepared) == [live.id, live.id]
        assert [row[0] for row in writer.snapshot(MZ_SESSION_HISTORY.id)] == [live.id]
        texts = sorted(row[2] for row in writer.snapshot(MZ_SQL_TEXT.id))
        assert texts == sorted(["SELECT 1", f"SELECT '{closed.id}'", f"SELECT '{live.id}'"])
        assert (
            _retracted(MZ_PREPARED_STATEMENT_HISTORY.id)
            == before[MZ_PREPARED_STATEMENT_HISTORY.id] + 2
        )
        assert _retracted(MZ_SQL_TEXT.id) == before[MZ_SQL_TEXT.id]

        logger.session_closed(live.id)
        await logger.drain()
        await writer.compact()
        assert writer.snapshot(MZ_PREPARED_STATEMENT_HISTORY.id) == []
        assert writer.snapshot(MZ_SESSION_HISTORY.id) == []
        assert len(writer.snapshot(MZ_SQL_TEXT.id)) == 3, "today's text is never collected"
    finally:
        await logger.stop()


async def test_sql_text_of_a_day_that_is_over_goes_once_no_prepared_statement_of_it_is_left(
    make_writer: Any,
) -> None:
    """Text is referenced by (day prepared, hash); yesterday's text stays however unreferenced."""
    writer = await make_writer(collections=list(STATEMENT_LOG_COLLECTIONS))
    now = dt.datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    three_days_ago, yesterday = today - dt.timedelta(days=3), today - dt.timedelta(days=1)
    session = uuid.uuid4().hex
    writer.stage(MZ_SESSION_HISTORY.id, (session, three_days_ago, "app", "materialize"), 1)
    prepared_at = three_days_ago + dt.timedelta(hours=12)
    prepared = ("p1", session, "", "h1", prepared_at, "select", 0)
    writer.stage(MZ_PREPARED_STATEMENT_HISTORY.id, prepared, 1)
    writer.stage(MZ_STATEMENT_EXECUTION_HISTORY.id, execution("e1", now, now, "p1"), 1)
    texts = {
        "referenced": (three_days_ago, "h1"),
        "same hash, another day": (three_days_ago - dt.timedelta(days=1), "h1"),
        "unreferenced": (three_days_ago, "h2"),
        "yesterday's": (yesterday, "h3"),
    }
    for sql, (day, digest) in texts.items():
        writer.stage(MZ_SQL_TEXT.id, (day, digest, sql, sql), 1)
    await writer.flush()

    await writer.compact()
    kept = sorted(row[2] for row in writer.snapshot(MZ_SQL_TEXT.id))
    assert kept == ["referenced", "yesterday's"]
    assert [row[0] for row in writer.snapshot(MZ_PREPARED_STATEMENT_HISTORY.id)] == ["p1"]
    assert [row[0] for row in writer.snapshot(MZ_SESSION_HISTORY.id)] == [session]


async def test_a_restarted_coordinator_forgets_its_previous_sessions(nats_connection: Any) -> None:
    """Sessions are live from their first logged statement until they close or their
    coordinator starts again; another coordinator's stay."""
    tag = uuid.uuid4().hex[:8]
    subject = f"test.{tag}.updates"
    # Only what is published is remembered: the records need a stream to go to.
    await ensure_stream(nats_connection, f"STMTLOG_{tag}", [subject])
    owner, other = (f"coordinator-{uuid.uuid4().hex[:8]}" for _ in range(2))
    first, neighbour = (
        _logger(nats_connection, subject, owner),
        _logger(nats_connection, subject, other),
    )
    await first.start()
    await neighbour.start()
    sessions = [_session() for _ in range(3)]
    for logger, session in zip((first, first, neighbour), sessions, strict=True):
        logger.begin(session, "SELECT 1", "select")
    await first.drain()
    await neighbour.drain()
    live = await live_statement_log_sessions(nats_connection)
    assert {s.id for s in sessions} <= live
    await first.stop()

    again = _logger(nats_connection, subject, owner)
    await again.start()
    live = await live_statement_log_sessions(nats_connection)
    assert not {sessions[0].id, sessions[1].id} & live
    assert sessions[2].id in live
    neighbour.session_closed(sessions[2].id)
    await neighbour.drain()
    assert sessions[2].id not in await live_statement_log_sessions(nats_connection)
    await again.stop()
    await neighbour.stop()
    await nats_connection.jetstream().delete_stream(f"STMTLOG_{tag}")


def test_the_coordinator_remembers_sql_text_of_the_current_day_only() -> None:
    """Text is deduplicated per day, so the days that are over are forgotten."""
    logger = StatementLogger(None, dict)  # type: ignore[arg-type]
    monday = dt.datetime(2024, 1, 1, tzinfo=UTC)
    tuesday = monday + dt.timedelta(days=1)
    assert logger._first_text_of_day(monday, "a")
    assert logger._first_text_of_day(monday, "b")
    assert not logger._first_text_of_day(monday, "a")
    assert logger._first_text_of_day(tuesday, "a"), "a new day logs the text again"
    assert logger._sql_texts == {(tuesday, "a")}
    assert logger._first_text_of_day(monday, "a"), "a past day's text is logged again"
    assert logger._first_text_of_day(monday, "a"), "every time"
    assert logger._sql_texts == {(tuesday, "a")}
