"""Overload slows statements down; it does not fail them (issue 11, item 4).

The admission queues on their own (they fill up, statements wait in order,
a full queue refuses with 53000, statement_timeout ends a wait with 57014,
every step in the metrics), then in a coordinator over real NATS: table
writes, peeks and DDL wait their turn, and DDL answers with a NOTICE when
storage does not take mz_catalog's append, which catches up later.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from loupe.builtins import MZ_TABLES, SYSTEM_CLUSTER_NAME
from loupe.client import SqlClient
from loupe.common.errors import LoupeError
from loupe.coordinator import admission
from loupe.coordinator.admission import AdmissionQueue, until_answered
from loupe.coordinator.tests.conftest import append_as_another_writer
from loupe.proto.common.v1 import common_pb2
from loupe.proto.sql.v1 import sql_pb2
from loupe.testing import assert_eventually


def holds(condition: bool) -> None:
    """For ``assert_eventually``: it retries on AssertionError only."""
    assert condition


def sample(name: str, queue: str) -> float:
    return REGISTRY.get_sample_value(name, {"queue": queue}) or 0.0


def with_deadline(seconds: float) -> None:
    admission.STATEMENT_DEADLINE.set(time.monotonic() + seconds)


async def test_a_full_place_makes_the_next_wait_in_order_and_the_metrics_show_it() -> None:
    queue = AdmissionQueue("test_order", capacity=1, max_waiting=8)
    waited = sample("loupe_coordinator_queue_waited_total", "test_order")
    order: list[int] = []
    release = asyncio.Event()

    async def holder(n: int) -> None:
        async with queue.admitted():
            order.append(n)
            await release.wait()

    first = asyncio.create_task(holder(0))
    await assert_eventually(lambda: holds(order == [0]))
    others = [asyncio.create_task(holder(n)) for n in (1, 2, 3)]
    await assert_eventually(lambda: holds(queue.waiting == 3))
    assert sample("loupe_coordinator_queue_waiting", "test_order") == 3
    assert sample("loupe_coordinator_queue_in_flight", "test_order") == 1
    release.set()
    await asyncio.gather(first, *others)
    assert order == [0, 1, 2, 3]  # first come, first served
    assert sample("loupe_coordinator_queue_waited_total", "test_order") == waited + 3
    assert sample("loupe_coordinator_queue_waiting", "test_order") == 0
    assert sample("loupe_coordinator_queue_in_flight", "test_order") == 0
    assert sample("loupe_coordinator_queue_admitted_total", "test_order") == 4


async def test_a_queue_at_its_bound_refuses_with_53000() -> None:
    queue = AdmissionQueue("test_bound", capacity=1, max_waiting=1, what="a test")
    release = asyncio.Event()

    async def holder() -> None:
        async with queue.admitted():
            await release.wait()

    running = [asyncio.create_task(holder()), asyncio.create_task(holder())]
    await assert_eventually(lambda: holds(queue.waiting == 1))
    with pytest.raises(LoupeError) as refused:
        async with queue.admitted():
            pass
    assert refused.value.code == "53000"
    assert "too many statements waiting for a test (1)" in refused.value.message
    assert sample("loupe_coordinator_queue_rejected_total", "test_bound") == 1
    release.set()
    await asyncio.gather(*running)
    async with queue.admitted():  # room again
        pass


async def test_the_statement_deadline_ends_a_wait_with_57014_and_frees_its_place() -> None:
    queue = AdmissionQueue("test_deadline", capacity=1, max_waiting=4)
    release = asyncio.Event()

    async def holder() -> None:
        async with queue.admitted():
            await release.wait()

    async def timed_out() -> None:
        with_deadline(0.2)
        async with queue.admitted():
            raise AssertionError("admitted past its deadline")

    running = asyncio.create_task(holder())
    await assert_eventually(lambda: holds(queue.in_flight == 1))
    with pytest.raises(LoupeError) as ended:
        await asyncio.create_task(timed_out())
    assert ended.value.code == "57014"
    assert queue.waiting == 0
    release.set()
    await running
    async with queue.admitted():
        assert queue.in_flight == 1


async def test_a_service_that_stays_away_is_asked_again_until_the_deadline() -> None:
    calls = 0

    async def away() -> None:
        nonlocal calls
        calls += 1
        raise LoupeError("DEADLINE_EXCEEDED", "no answer on loupe.catalog.v1.Catalog.Snapshot")

    async def statement() -> None:
        with_deadline(0.5)
        await until_answered("Snapshot", away)

    with pytest.raises(LoupeError) as ended:
        await asyncio.create_task(statement())
    assert ended.value.code == "57014"
    assert calls > 2
    assert REGISTRY.get_sample_value(
        "loupe_coordinator_service_retries_total", {"call": "Snapshot"}
    )


# -- a coordinator over real NATS ---------------------------------------------------------


def errors(responses: list[Any]) -> list[Any]:
    return [r.error for r in responses if r.HasField("error")]


def notices(responses: list[Any]) -> list[str]:
    return [r.notice.message for r in responses if r.HasField("notice")]


async def test_table_writes_wait_for_the_queue_and_statement_timeout_ends_the_wait(
    fleet: Any,
) -> None:
    harness = await fleet.add()
    coordinator = harness.service.coordinator
    session = await harness.session()
    assert not errors(await harness.execute(session, "CREATE TABLE t (a int)"))
    writes = coordinator.tables.writes
    release = asyncio.Event()
    held = asyncio.Event()

    async def hold() -> None:
        async with writes.admitted():
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    waited = sample("loupe_coordinator_queue_waited_total", "table_write")
    inserts = [
        asyncio.create_task(harness.execute(await harness.session(), f"INSERT INTO t VALUES ({n})"))
        for n in range(3)
    ]
    await assert_eventually(lambda: holds(writes.waiting == 3), timeout=10)
    assert sample("loupe_coordinator_queue_waiting", "table_write") == 3
    impatient = await harness.session(statement_timeout="300ms")
    timed_out = errors(await harness.execute(impatient, "INSERT INTO t VALUES (99)"))
    assert [(e.code, e.message) for e in timed_out] == [
        ("57014", "canceling statement due to statement timeout")
    ]
    assert not any(task.done() for task in inserts)  # still waiting, not failed
    release.set()
    await holder
    for responses in await asyncio.gather(*inserts):
        assert not errors(responses)
    assert sample("loupe_coordinator_queue_waited_total", "table_write") >= waited + 4
    (table,) = [t for t in coordinator.state.tables.values() if t.name == "t"]
    contents = await coordinator.tables.contents(table)
    # The timed-out write was never committed.
    assert sorted(contents.column("a").to_pylist()) == [0, 1, 2]


async def test_peeks_past_the_bound_wait_their_turn(fleet: Any) -> None:
    harness = await fleet.add(peek_concurrency=1)
    context = harness.service.coordinator.context
    peeks = context.peek_queue(context.state.cluster(SYSTEM_CLUSTER_NAME).id)
    # Another cluster's peeks are not held up by this one's.
    other = context.peek_queue(context.state.cluster("quickstart").id)
    release = asyncio.Event()
    held = asyncio.Event()

    async def hold() -> None:
        async with peeks.admitted():
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    read = asyncio.create_task(
        harness.rows(await harness.session(), "SELECT name FROM mz_clusters")
    )
    await assert_eventually(lambda: holds(peeks.waiting == 1), timeout=10)
    assert harness.controller.peeks == []  # nothing sent while it waits its turn
    impatient = await harness.session(statement_timeout="200ms")
    timed_out = errors(await harness.execute(impatient, "SELECT name FROM mz_clusters"))
    assert [e.code for e in timed_out] == ["57014"]
    async with other.admitted():
        pass  # free
    release.set()
    await holder
    assert ("quickstart",) in await asyncio.wait_for(read, 20)
    assert (peeks.waiting, peeks.in_flight) == (0, 0)


async def test_ddl_answers_with_a_notice_while_storage_is_down_and_mz_catalog_catches_up(
    fleet: Any,
) -> None:
    harness = await fleet.add(catalog_relations_wait=0.5)
    controller = harness.controller
    session = await harness.session()
    controller.refuse_appends = True
    began = time.monotonic()
    responses = await harness.execute(session, "CREATE TABLE late (a int)")
    assert not errors(responses), errors(responses)
    assert [r.complete.tag for r in responses if r.HasField("complete")] == ["CREATE TABLE"]
    (notice,) = notices(responses)
    assert "CREATE TABLE committed, but mz_catalog does not show it yet" in notice
    assert "storage did not confirm it within 0.5s" in notice
    assert time.monotonic() - began < 20  # not the writer's 30 s of retries
    assert REGISTRY.get_sample_value("loupe_coordinator_catalog_relations_behind") == 1
    # A second DDL while storage is known to be behind does not wait the full time.
    responses = await harness.execute(session, "CREATE TABLE later (a int)")
    assert not errors(responses)
    assert len(notices(responses)) == 1
    # The table exists and can be written meanwhile.
    assert not errors(await harness.execute(session, "INSERT INTO late VALUES (1)"))
    controller.refuse_appends = False

    def caught_up() -> None:
        names = {row[2] for row in controller.contents[MZ_TABLES.id] if len(row) > 2}
        assert {"late", "later"} <= names, names

    await assert_eventually(caught_up, timeout=30)
    await assert_eventually(
        lambda: holds(REGISTRY.get_sample_value("loupe_coordinator_catalog_relations_behind") == 0),
        timeout=10,
    )
    responses = await harness.execute(session, "CREATE TABLE on_time (a int)")
    assert not errors(responses)
    assert notices(responses) == []


async def test_drop_table_racing_another_drop_answers_42p01(fleet: Any) -> None:
    """The name resolved, then another coordinator dropped the table: 42P01, not 42704."""
    fleet.catalog.publish_changes = False  # neither hears of the other's commits
    first, second = await fleet.add(), await fleet.add()
    one, other = await first.session(), await second.session()
    assert not errors(await first.execute(one, "CREATE TABLE contested (a int)"))
    assert not errors(await second.execute(other, "DROP TABLE contested"))
    # ``first`` still resolves the name to the dropped table's id.
    assert any(t.name == "contested" for t in first.service.coordinator.state.tables.values())
    failed = errors(await first.execute(one, "DROP TABLE contested"))
    assert [(e.code, e.message) for e in failed] == [("42P01", "unknown catalog item 'contested'")]


async def test_a_client_waits_for_a_busy_coordinator_to_open_its_session(fleet: Any) -> None:
    """The client's connect timeout bounds reaching the server, not how long it takes to answer."""
    fleet.catalog.publish_changes = False
    busy, other = await fleet.add(), await fleet.add()
    assert not errors(await other.execute(await other.session(), "CREATE ROLE newcomer LOGIN"))
    # ``busy`` has not heard of the role: it asks the catalog, which is slow to answer.
    fleet.catalog.snapshot_delay = 1.5

    def open_session() -> str:
        client = SqlClient("127.0.0.1", busy.service.sql_port, user="newcomer", connect_timeout=0.5)
        with client:
            return client.session_id

    assert await asyncio.to_thread(open_session)


async def test_a_parameter_that_does_not_decode_is_a_sqlstate_not_a_grpc_error(
    fleet: Any,
) -> None:
    harness = await fleet.add()
    request = sql_pb2.ExecuteRequest(
        session_id=await harness.session(),
        sql="SELECT $1",
        params=[common_pb2.Value(jsonb_value="{not json")],
    )
    responses = [r async for r in harness.stub.Execute(request)]
    assert [e.code for e in errors(responses)] == ["22023"]


async def test_a_write_losing_many_races_is_planned_again_until_it_commits(fleet: Any) -> None:
    """No retry limit (it was 40001 after 10 lost races): only statement_timeout ends it.

    A race lost to rows (another writer appending between the plan's read and its
    append) plans again; one lost to an empty advance does not (``test_tables``).
    """
    harness = await fleet.add()
    coordinator = harness.service.coordinator
    session = await harness.session()
    assert not errors(await harness.execute(session, "CREATE TABLE raced (a int)"))
    (table,) = [t for t in coordinator.state.tables.values() if t.name == "raced"]
    store = coordinator.tables
    retries = REGISTRY.get_sample_value("loupe_coordinator_table_write_retries_total") or 0.0
    races = 12
    seen: list[int] = []

    def plan(contents: Any) -> tuple[list[Any], int]:
        nonlocal races
        seen.append(sum(contents.column("mz_diff").to_pylist()) if contents.num_rows else 0)
        if races:
            # Another writer appends a row first.
            races -= 1
            append_as_another_writer(store.shard(table.id), table, [(0,)])
        return [((7,), 1)], 1

    written = await store.write(table, plan, read=True)
    assert written.count == 1
    assert races == 0
    # Planned 13 times, each time on the rows the last race left.
    assert seen == list(range(13))
    assert REGISTRY.get_sample_value("loupe_coordinator_table_write_retries_total") == (
        retries + 12
    )
    contents = await store.contents(table)
    assert sorted(contents.column("a").to_pylist()) == [0, 7]
    assert sorted(contents.column("mz_diff").to_pylist()) == [1, 12]


async def test_sessions_past_max_connections_are_refused_with_53300(tables: Any) -> None:
    """The system variable lives in the catalog: the real catalog service is used here."""
    harness = tables
    admin = await harness.session()
    assert not errors(await harness.execute(admin, "ALTER SYSTEM SET max_connections = 2"))
    second = await harness.session()

    def open_one() -> None:
        with SqlClient("127.0.0.1", harness.service.sql_port):
            pass

    with pytest.raises(LoupeError) as refused:
        await asyncio.to_thread(open_one)
    assert refused.value.code == "53300"
    assert "max_connections limit (desired: 3, limit: 2, current: 2)" in refused.value.message
    assert REGISTRY.get_sample_value("loupe_coordinator_sessions_refused_total")
    await harness.stub.CloseSession(sql_pb2.CloseSessionRequest(session_id=second))
    await asyncio.to_thread(open_one)  # room again


async def test_background_work_a_statement_starts_outlives_its_deadline(fleet: Any) -> None:
    """A catch-up a DDL started goes on after the DDL's statement_timeout."""
    harness = await fleet.add()
    context = harness.service.coordinator.context
    seen: list[float | None] = []

    async def background() -> None:
        seen.append(admission.remaining())  # 57014 if it had the statement's deadline

    async def statement() -> None:
        with_deadline(0.01)
        await asyncio.sleep(0.05)  # past its deadline
        await context.spawn(background())

    await asyncio.create_task(statement())
    assert seen == [None]


async def test_a_read_waiting_on_a_table_dropped_meanwhile_ends_with_42704(fleet: Any) -> None:
    """Found by the load test: the dropped table's upper no longer moves, the read waited forever."""
    harness = await fleet.add(peek_round=0.2)
    session, other = await harness.session(), await harness.session()
    assert not errors(await harness.execute(session, "CREATE TABLE doomed (a int)"))
    harness.controller.block_peeks = True
    read = asyncio.create_task(harness.execute(session, "SELECT count(*) FROM doomed"))
    await assert_eventually(lambda: holds(len(harness.controller.peeks) >= 2), timeout=10)
    assert not errors(await harness.execute(other, "DROP TABLE doomed"))
    failed = errors(await asyncio.wait_for(read, 20))
    assert [(e.code, e.message) for e in failed] == [
        ("42704", 'query could not complete because table "materialize.public.doomed" was dropped')
    ]
    peek_ids = {p.peek.uuid for p in harness.controller.peeks}
    await assert_eventually(lambda: holds(peek_ids <= set(harness.controller.canceled)))
