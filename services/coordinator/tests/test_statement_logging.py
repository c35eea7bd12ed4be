"""Statement logging against a real NATS server: what is published, once, in order.

The records go to a scoped copy of the storage writer's stream; the tests
read them back as the writer would (``UpdateBatch`` messages).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import pytest
from prometheus_client import REGISTRY

from loupe.builtins import (
    BY_ID,
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SESSION_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STATEMENT_LIFECYCLE_HISTORY,
)
from loupe.common.errors import LoupeError
from loupe.common.system_vars import checked_value, system_value
from loupe.common.transport import ensure_stream
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.builtin_views import inline_builtin_views
from loupe.coordinator.session import SessionManager
from loupe.coordinator.sql.parser import parse_one
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.wire import decode_batch, encode_batch_arrow, encode_batch_bytes

STATUS = [c for c, _ in MZ_STATEMENT_EXECUTION_HISTORY.columns].index("finished_status")


def test_redacted_sql_hides_every_literal_and_keeps_the_rest():
    sql = "SELECT 'secret', 42, x FROM t WHERE y = 'it''s' AND z > 3.5"
    assert stmtlog.redact_sql(sql) == (
        "SELECT '<REDACTED>', '<REDACTED>', x FROM t WHERE y = '<REDACTED>' AND z > '<REDACTED>'"
    )
    assert (
        stmtlog.redact_sql("CREATE CLUSTER c (SIZE '2')") == "CREATE CLUSTER c (SIZE '<REDACTED>')"
    )
    # A parameter's number is not a literal: $1 stays $1 (its value is in params).
    assert stmtlog.redact_sql("SELECT $1, a FROM t WHERE b = $12 AND c = 5") == (
        "SELECT $1, a FROM t WHERE b = $12 AND c = '<REDACTED>'"
    )


def test_system_variables_refuse_out_of_range_values():
    assert checked_value("statement_logging_max_sample_rate", "1") == "1.0"
    for bad in ("1.5", "-0.1", "often"):
        with pytest.raises(LoupeError, match="from 0 to 1") as caught:
            checked_value("statement_logging_default_sample_rate", bad)
        assert caught.value.code == "22023"
    assert checked_value("statement_logging_retention", "30d") == "2.592e+06s"
    assert checked_value("statement_logging_max_data_credit", "1MiB") == str(2**20)
    with pytest.raises(LoupeError) as unknown:
        checked_value("no_such_thing", "1")
    assert unknown.value.code == "42704"
    assert system_value({}, "statement_logging_max_sample_rate") == "0.99"


def test_builtin_views_are_inlined_as_subqueries():
    query = parse_one("SELECT sql FROM mz_internal.mz_recent_activity_log AS l").expression
    inlined = inline_builtin_views(query).sql()
    assert "mz_internal.mz_statement_execution_history" in inlined
    assert "mz_recent_activity_log" not in inlined.replace("AS l", "")
    untouched = parse_one("SELECT 1 FROM mz_internal.mz_sql_text").expression
    assert inline_builtin_views(untouched) is untouched


def _message(statements: int) -> list[Any]:
    """One message's updates for ``statements`` logged executions (logger not started)."""
    logger = stmtlog.StatementLogger(
        None, lambda: {"statement_logging_max_sample_rate": "1"}, cluster_id=lambda _: "u1"
    )
    session = _session("1")
    for number in range(statements):
        execution = logger.begin(session, f"SELECT {number % 3}", "select")
        assert execution is not None
        logger.end(execution, stmtlog.SUCCESS)
    return stmtlog.message_updates(logger._queue)


@pytest.mark.parametrize("statements", [1, 60])
def test_a_message_is_rows_when_small_and_columns_when_large_with_the_same_tables(statements):
    updates = _message(statements)
    columnar = stmtlog.in_columns(updates)
    assert columnar == (statements == 60)  # 60 executions make about 240 updates
    data = stmtlog.encode_message("b", updates)
    batch = storage_pb2.UpdateBatch.FromString(data)
    assert all(bool(c.arrow_ipc) == columnar for c in batch.collections)
    assert all(bool(c.updates) != columnar for c in batch.collections)
    # Either way the writer reads the same tables as from the other form.
    other = encode_batch_bytes("b", updates) if columnar else encode_batch_arrow("b", updates)
    tables = decode_batch(data, BY_ID)[1]
    assert tables.keys() == decode_batch(other, BY_ID)[1].keys()
    for cid, table in decode_batch(other, BY_ID)[1].items():
        assert tables[cid].to_pylist() == table.to_pylist()
    assert sum(t.num_rows for t in tables.values()) == len(updates)


LOST = "loupe_statement_logging_lost_updates_total"


def _logger(nc: Any, stream: Any, config: dict[str, str], owner: str, **kwargs: Any) -> Any:
    return stmtlog.StatementLogger(
        nc,
        lambda: config,
        owner=owner,
        subject=stream.subject,
        cluster_id=lambda _: "u1",
        **kwargs,
    )


def _session(rate: str) -> Any:
    return SessionManager().open(
        application_name="app", defaults={"statement_logging_sample_rate": rate}
    )


def _by_collection(updates: list[Any]) -> Counter[str]:
    return Counter(collection for collection, _, diff in updates if diff > 0)


async def test_records_are_published_once_each(nats_connection, stream):
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, f"c-{uuid.uuid4().hex[:6]}")
    await logger.start()
    try:
        session = _session("1")
        for status in (stmtlog.SUCCESS, stmtlog.ERROR):
            execution = logger.begin(session, "SELECT 1", "select")
            assert execution is not None
            logger.end(execution, status, error_message="boom" if status == "error" else None)
        await logger.drain()
        updates = await stream.updates()
    finally:
        await logger.stop()
    assert _by_collection(updates) == {
        MZ_SESSION_HISTORY.id: 1,  # once per session
        MZ_PREPARED_STATEMENT_HISTORY.id: 2,  # every simple-protocol execution prepares anew
        MZ_SQL_TEXT.id: 1,  # the same text the same day: once
        # Began and finished in one message: the began rows cancel out, unsent.
        MZ_STATEMENT_EXECUTION_HISTORY.id: 2,
        MZ_STATEMENT_LIFECYCLE_HISTORY.id: 4,
    }
    executions = [u for u in updates if u[0] == MZ_STATEMENT_EXECUTION_HISTORY.id]
    # Each began row is retracted as its finished row arrives: two rows remain.
    remaining = Counter()
    for _, row, diff in executions:
        remaining[row] += diff
    final = sorted(row[STATUS] for row, count in remaining.items() if count)
    assert final == ["error", "success"]
    assert all(count in (0, 1) for count in remaining.values())


async def test_rate_zero_publishes_nothing_and_the_max_rate_caps(nats_connection, stream):
    config = {"statement_logging_max_sample_rate": "0"}
    logger = _logger(nats_connection, stream, config, f"c-{uuid.uuid4().hex[:6]}")
    await logger.start()
    try:
        assert logger.begin(_session("1"), "SELECT 1", "select") is None
        config["statement_logging_max_sample_rate"] = "1"
        assert logger.begin(_session("0"), "SELECT 1", "select") is None
        await logger.drain()
        assert await stream.updates() == []
    finally:
        await logger.stop()


async def test_the_reproducible_generator_samples_the_same_executions(nats_connection, stream):
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, f"c-{uuid.uuid4().hex[:6]}")
    session = _session("0.5")
    samples = []
    for _ in range(2):
        config["statement_logging_use_reproducible_rng"] = "off"
        logger.begin(session, "SELECT 0", "select")  # off: a draw of the free generator
        config["statement_logging_use_reproducible_rng"] = "on"
        samples.append([logger.begin(session, "SELECT 1", "select") is not None for _ in range(32)])
    assert samples[0] == samples[1]
    assert 0 < sum(samples[0]) < 32


async def test_a_restart_marks_the_previous_runs_open_executions_aborted(nats_connection, stream):
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    first = _logger(nats_connection, stream, config, owner)
    await first.start()
    execution = first.begin(_session("1"), "SUBSCRIBE t", "subscribe")
    assert execution is not None
    await first.drain()
    # The first run dies without ending it (no stop: nothing more is published).
    first._publisher.cancel()
    began = [u for u in await stream.updates() if u[0] == MZ_STATEMENT_EXECUTION_HISTORY.id]
    assert [row[STATUS] for _, row, _ in began] == [None]

    other = _logger(nats_connection, stream, config, f"other-{owner}")
    await other.start()  # another coordinator's open executions are not its to abort
    await other.stop()
    assert await stream.updates() == []

    second = _logger(nats_connection, stream, config, owner)
    await second.start()
    try:
        updates = await stream.updates()
    finally:
        await second.stop()
    assert [(row[0], row[STATUS], diff) for _, row, diff in updates] == [
        (execution.id, None, -1),
        (execution.id, "aborted", 1),
    ]
    third = _logger(nats_connection, stream, config, owner)
    await third.start()  # aborted once: nothing left to abort
    await third.stop()
    await asyncio.sleep(0)
    assert await stream.updates() == []


async def test_only_executions_still_running_are_remembered(nats_connection, stream):
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, owner)
    await logger.start()
    try:
        session = _session("1")
        done = logger.begin(session, "SELECT 1", "select")
        running = logger.begin(session, "SUBSCRIBE t", "subscribe")
        assert done is not None
        assert running is not None
        logger.end(done, stmtlog.SUCCESS)  # before the publisher ran: one message for both
        await logger.drain()
        assert await _open_keys(nats_connection, owner) == [f"{owner}.{running.id}"]
        logger.end(running, stmtlog.CANCELED)
        await logger.drain()
        assert await _open_keys(nats_connection, owner) == []
    finally:
        await logger.stop()


async def test_a_began_row_is_sent_only_if_its_execution_was_open_at_a_message(
    nats_connection, stream
):
    """An execution begun and ended within one message sends its finished row alone."""
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, f"c-{uuid.uuid4().hex[:6]}")
    await logger.start()
    try:
        session = _session("1")
        quick = logger.begin(session, "SELECT 1", "select")
        running = logger.begin(session, "SUBSCRIBE t", "subscribe")
        assert quick is not None
        assert running is not None
        logger.end(quick, stmtlog.SUCCESS)  # before the publisher ran: one message for both
        await logger.drain()
        first = await stream.updates()
        logger.end(running, stmtlog.CANCELED)
        await logger.drain()
        second = await stream.updates()
    finally:
        await logger.stop()

    def executions(updates: list[Any]) -> list[tuple[str, str | None, int]]:
        history = MZ_STATEMENT_EXECUTION_HISTORY.id
        return [(row[0], row[STATUS], diff) for c, row, diff in updates if c == history]

    # The running one's start was held back for HOLD_RUNNING_S, then sent alone.
    assert executions(first) == [(quick.id, "success", 1), (running.id, None, 1)]
    assert executions(second) == [(running.id, None, -1), (running.id, "canceled", 1)]


async def test_a_statement_running_when_a_message_goes_out_sends_its_start_with_its_end(
    nats_connection, stream, monkeypatch
):
    """A start is held back while its execution runs (up to HOLD_RUNNING_S): one that
    ends meanwhile sends its finished row alone, and the bucket of open executions,
    a second request per message, is not written for it."""
    # Long enough that a slow machine cannot let the hold end before the test ends it.
    monkeypatch.setattr(stmtlog, "HOLD_RUNNING_S", 30.0)
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, owner)
    await logger.start()
    kv_stream = f"KV_{stmtlog.OPEN_EXECUTIONS_BUCKET}"
    history = MZ_STATEMENT_EXECUTION_HISTORY.id

    def executions(updates: list[Any]) -> list[tuple[str, str | None, int]]:
        return [(row[0], row[STATUS], diff) for c, row, diff in updates if c == history]

    try:
        bucket_writes = (await nats_connection.jetstream().stream_info(kv_stream)).state.last_seq
        sessions = [_session("1"), _session("1")]
        running = logger.begin(sessions[0], "SELECT 2", "select")
        quick = logger.begin(sessions[1], "SELECT 1", "select")
        assert running is not None
        assert quick is not None
        logger.end(quick, stmtlog.SUCCESS)
        first: list[Any] = []
        for _ in range(100):  # the first message after a quiet spell goes at once
            first += await stream.updates()
            if first:
                break
            await asyncio.sleep(0.01)
        logger.end(running, stmtlog.SUCCESS)
        await logger.drain()
        second = await stream.updates()
        after = (await nats_connection.jetstream().stream_info(kv_stream)).state.last_seq
    finally:
        await logger.stop()
    assert executions(first) == [(quick.id, "success", 1)]
    # The session, prepared statement and text of the running one went out at once.
    assert {row[0] for c, row, _ in first if c == MZ_SESSION_HISTORY.id} == {
        session.id for session in sessions
    }
    assert executions(second) == [(running.id, "success", 1)]
    assert after == bucket_writes


def test_consolidation_sums_the_diffs_of_retracted_rows_only():
    """Rows never retracted pass as they are; a row retracted where it was added is left out."""
    a, b = ("a", 1.0), ("b", None)
    assert stmtlog._consolidated([("e", a, 1), ("l", b, 1), ("e", a, -1), ("e", b, 1)]) == [
        ("l", b, 1),
        ("e", b, 1),
    ]
    assert stmtlog._consolidated([("e", a, 1), ("e", a, 1), ("e", a, -1)]) == [("e", a, 1)]
    assert stmtlog._consolidated([("e", a, -1), ("e", b, 1)]) == [("e", a, -1), ("e", b, 1)]
    unhashable = [("e", a, 1), ("e", (["x"],), -1)]
    assert stmtlog._consolidated(unhashable) == unhashable
    # Matched by identity (the logger retracts the tuple it added): an equal copy stays.
    copy = ("a", float("1"))  # built at run time: not the constant a is
    assert stmtlog._consolidated([("e", a, 1), ("e", copy, -1)]) == [("e", a, 1), ("e", copy, -1)]


async def _open_keys(nc: Any, owner: str) -> list[str]:
    return await stmtlog.open_execution_keys(nc, owner)


def test_the_token_bucket_starts_full_refills_at_its_rate_and_caps_at_its_credit():
    now = [0.0]
    bucket = stmtlog.TokenBucket(lambda: now[0])
    assert bucket.take(100, rate=10, credit=100)
    assert not bucket.take(1, rate=10, credit=100)  # spent
    now[0] = 5.0
    assert bucket.take(50, rate=10, credit=100)  # 5 s at 10 B/s
    assert not bucket.take(1, rate=10, credit=100)
    now[0] = 1000.0
    assert not bucket.take(101, rate=10, credit=100)  # never more than the credit
    assert bucket.take(100, rate=10, credit=100)


async def test_throttled_executions_are_counted_into_the_next_logged_statement(
    nats_connection, stream
):
    owner = f"c-{uuid.uuid4().hex[:6]}"
    # The credit holds one execution of this text and nothing refills it.
    sql = "SELECT 1"
    one = stmtlog.estimated_size(sql, new_session=True)[1]
    config = {
        "statement_logging_max_sample_rate": "1",
        "statement_logging_target_data_rate": "0",
        "statement_logging_max_data_credit": str(one),
    }
    now = [0.0]
    logger = _logger(nats_connection, stream, config, owner, clock=lambda: now[0])
    await logger.start()
    try:
        session = _session("1")
        before = (
            REGISTRY.get_sample_value("loupe_statement_logging_throttled_executions_total") or 0.0
        )
        first = logger.begin(session, sql, "select")
        assert first is not None
        assert [logger.begin(session, sql, "select") for _ in range(3)] == [None] * 3
        after = REGISTRY.get_sample_value("loupe_statement_logging_throttled_executions_total")
        assert after == before + 3
        # Credit again: the next logged prepared statement carries the three dropped.
        config["statement_logging_max_data_credit"] = str(100 * one)
        config["statement_logging_target_data_rate"] = str(one)
        now[0] = 1.0
        second = logger.begin(session, sql, "select")
        assert second is not None
        await logger.drain()
        prepared = [
            row
            for collection, row, diff in await stream.updates()
            if collection == MZ_PREPARED_STATEMENT_HISTORY.id and diff > 0
        ]
        assert [(row[0], row[-1]) for row in prepared] == [
            (first.prepared_statement_id, 0),
            (second.prepared_statement_id, 3),
        ]
    finally:
        await logger.stop()


async def test_a_full_publish_queue_drops_executions_without_waiting_and_counts_them(
    nats_connection, stream
):
    """Overload: records wait for the stream in a bounded queue; past it, not logged."""
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, f"c-{uuid.uuid4().hex[:6]}", max_queued=3)
    session = _session("1")
    dropped = "loupe_statement_logging_queue_dropped_executions_total"
    before = REGISTRY.get_sample_value(dropped) or 0.0
    # Not started: nothing takes from the queue, as when the stream is slower than statements.
    kept = [logger.begin(session, "SELECT 1", "select") for _ in range(3)]
    assert all(execution is not None for execution in kept)
    assert REGISTRY.get_sample_value("loupe_statement_logging_queue_depth") == 3
    assert [logger.begin(session, "SELECT 1", "select") for _ in range(2)] == [None, None]
    assert REGISTRY.get_sample_value(dropped) == before + 2
    for execution in kept:  # an execution already logged still logs its end
        logger.end(execution, stmtlog.SUCCESS)
    await logger.start()
    try:
        await logger.drain()
        assert REGISTRY.get_sample_value("loupe_statement_logging_queue_depth") == 0
        later = logger.begin(session, "SELECT 1", "select")
        assert later is not None
        await logger.drain()
        prepared = [
            row
            for collection, row, diff in await stream.updates()
            if collection == MZ_PREPARED_STATEMENT_HISTORY.id and diff > 0
        ]
        # The drops go into the next logged prepared statement's throttled_count.
        assert [row[-1] for row in prepared] == [0, 0, 0, 2]
    finally:
        await logger.stop()


async def test_a_throttled_first_execution_does_not_hide_its_session(nats_connection, stream):
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {
        "statement_logging_max_sample_rate": "1",
        "statement_logging_target_data_rate": "0",
        "statement_logging_max_data_credit": "0",
    }
    now = [0.0]
    logger = _logger(nats_connection, stream, config, owner, clock=lambda: now[0])
    await logger.start()
    try:
        session = _session("1")
        assert logger.begin(session, "SELECT 1", "select") is None  # throttled
        config["statement_logging_max_data_credit"] = str(2**20)
        config["statement_logging_target_data_rate"] = str(2**20)
        now[0] = 1.0
        execution = logger.begin(session, "SELECT 1", "select")
        assert execution is not None
        await logger.drain()
        updates = await stream.updates()
        sessions = [row for c, row, _ in updates if c == MZ_SESSION_HISTORY.id]
        assert [row[0] for row in sessions] == [session.id]
        prepared = [row for c, row, _ in updates if c == MZ_PREPARED_STATEMENT_HISTORY.id]
        assert [row[-1] for row in prepared] == [1]
    finally:
        await logger.stop()


async def test_the_dry_run_counts_what_every_rate_would_log(nats_connection, stream):
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, owner)
    await logger.start()

    def sample(name: str, label: str) -> float:
        return REGISTRY.get_sample_value(f"{name}_total", {"sample": label}) or 0.0

    try:
        names = ("loupe_statement_logging_records", "loupe_statement_logging_bytes")
        before = {(n, s): sample(n, s) for n in names for s in ("sampled", "unsampled")}
        sql = "SELECT 'some text'"
        records, size = stmtlog.estimated_size(sql, new_session=True)
        again = stmtlog.estimated_size(sql, new_session=False)
        assert logger.begin(_session("0"), sql, "select") is None  # not sampled: counted
        logged = logger.begin(_session("1"), sql, "select")
        assert logged is not None
        assert logger.begin(_session("0"), sql, "select") is None
        assert sample(names[0], "unsampled") - before[(names[0], "unsampled")] == 2 * records
        assert sample(names[1], "unsampled") - before[(names[1], "unsampled")] == 2 * size
        assert sample(names[0], "sampled") - before[(names[0], "sampled")] == records
        assert sample(names[1], "sampled") - before[(names[1], "sampled")] == size
        assert again[0] == records - 1  # the session row only once per session
    finally:
        await logger.stop()


async def test_open_executions_are_one_value_written_once_per_message(nats_connection, stream):
    """All of a coordinator's open executions live under one key; a quick one writes nothing."""
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, owner)
    await logger.start()
    kv_stream = f"KV_{stmtlog.OPEN_EXECUTIONS_BUCKET}"
    prefix = f"$KV.{stmtlog.OPEN_EXECUTIONS_BUCKET}."

    async def writes() -> dict[str, int]:
        info = await nats_connection.jetstream().stream_info(
            kv_stream, subjects_filter=f"{prefix}{owner}.>"
        )
        mine = await nats_connection.jetstream().stream_info(
            kv_stream, subjects_filter=f"{prefix}{owner}"
        )
        return {**(info.state.subjects or {}), **(mine.state.subjects or {})}

    try:
        session = _session("1")
        first = logger.begin(session, "SUBSCRIBE a", "subscribe")
        second = logger.begin(session, "SUBSCRIBE b", "subscribe")
        assert first is not None
        assert second is not None
        await logger.drain()
        assert await writes() == {f"{prefix}{owner}": 1}  # two executions, one value
        sequence = (await nats_connection.jetstream().stream_info(kv_stream)).state.last_seq
        quick = logger.begin(session, "SELECT 1", "select")
        assert quick is not None
        logger.end(quick, stmtlog.SUCCESS)
        await logger.drain()
        # Began and ended in one message: the bucket is not written.
        assert (await nats_connection.jetstream().stream_info(kv_stream)).state.last_seq == sequence
        assert await _open_keys(nats_connection, owner) == sorted(
            f"{owner}.{e.id}" for e in (first, second)
        )
        logger.end(first, stmtlog.CANCELED)
        await logger.drain()
        assert await _open_keys(nats_connection, owner) == [f"{owner}.{second.id}"]
    finally:
        await logger.stop()


async def test_a_refused_message_leaves_the_open_executions_as_they_were(nats_connection, stream):
    """If the stream refuses a message, its began executions are not remembered as open,
    and one it ended stays open (its finished row was lost: a restart aborts it)."""
    owner = f"c-{uuid.uuid4().hex[:6]}"
    config = {"statement_logging_max_sample_rate": "1"}
    logger = _logger(nats_connection, stream, config, owner)
    await logger.start()
    try:
        session = _session("1")
        running = logger.begin(session, "SUBSCRIBE a", "subscribe")
        assert running is not None
        await logger.drain()
        await nats_connection.jetstream().delete_stream(stream.name)  # refuses what follows
        lost_before = REGISTRY.get_sample_value(LOST) or 0.0
        lost = logger.begin(session, "SUBSCRIBE b", "subscribe")
        assert lost is not None
        logger.end(running, stmtlog.SUCCESS)
        await logger.drain()
        assert await _open_keys(nats_connection, owner) == [f"{owner}.{running.id}"]
        # Lost, and counted.
        assert (REGISTRY.get_sample_value(LOST) or 0.0) > lost_before
    finally:
        await logger.stop()
        await ensure_stream(nats_connection, stream.name, [stream.subject])  # for the fixture
