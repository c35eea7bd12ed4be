"""The compute replica against a controller played by the test over real NATS."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import structlog
from prometheus_client import REGISTRY

from loupe.builtins import MZ_CLUSTER_REPLICAS
from loupe.common import values
from loupe.compute_replica.protocol import command_subject
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

REPLICAS = MZ_CLUSTER_REPLICAS


def replica_row(replica_id, name, cluster_id="u1", size="1"):
    return {
        "id": replica_id,
        "name": name,
        "cluster_id": cluster_id,
        "size": size,
        "owner_id": "u1",
    }


def as_tuple(row):
    return tuple(row[name] for name, _ in REPLICAS.columns)


def rows_of(response):
    assert response.WhichOneof("result") == "rows", response
    return [values.from_row(row) for row in response.rows.rows]


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- stages: hello, creation, initialization --------------------------------------------


async def test_hello_repeats_until_create_instance_then_heartbeats_take_over(
    start_replica, controller, storage
):
    """A fresh replica says hello until CreateInstance, then only heartbeats."""
    await start_replica()
    hellos = await controller.wait_for("hello", count=3)
    assert hellos[0].pid == os.getpid()
    assert hellos[0].hostname
    assert {(r.replica_id, r.incarnation) for r in controller.responses} == {
        (controller.replica_id, 3)
    }
    assert not controller.of_kind("heartbeat")

    await controller.create_instance(storage, workers=2)
    await controller.wait_for("heartbeat")
    hellos_at_first_heartbeat = len(controller.of_kind("hello"))
    await controller.wait_for("heartbeat", count=3)
    assert len(controller.of_kind("hello")) == hellos_at_first_heartbeat


async def test_heartbeats_report_metrics_and_initialization(start_replica, controller, storage):
    """Heartbeats carry workers, memory, a send time, and initialized after InitializationComplete."""
    replica = await start_replica(workers=1)
    await controller.wait_for("hello")
    before_ms = time.time_ns() // 1_000_000
    await controller.create_instance(storage, workers=2)
    first = (await controller.wait_for("heartbeat"))[0]
    assert first.workers == 2
    assert first.memory_bytes > 10_000_000  # a Python process with polars loaded
    assert first.process_id == 0
    assert first.disk_bytes == 0
    assert before_ms <= first.sent_at_ms <= time.time_ns() // 1_000_000
    assert not first.initialized
    assert replica.instance_config.storage.blob_uri == storage.blob_uri
    assert replica.instance_config.logging.enable_logging

    await controller.send(initialization_complete=compute_pb2.InitializationComplete())

    def initialized_heartbeat():
        assert any(h.initialized for h in controller.of_kind("heartbeat"))

    await assert_eventually(initialized_heartbeat)


async def test_commands_for_another_incarnation_are_ignored(start_replica, controller, storage):
    """CreateInstance and Peek stamped with another incarnation change nothing."""
    replica = await start_replica()
    await controller.wait_for("hello")
    ignored_before = sample(
        "loupe_compute_replica_commands_ignored_total",
        replica_id=controller.replica_id,
        reason="other incarnation",
    )
    await controller.create_instance(storage, incarnation=2)
    stale_peek = await controller.peek(incarnation=4)
    hellos = len(controller.of_kind("hello"))
    await controller.wait_for("hello", count=hellos + 3)  # still saying hello
    assert replica.instance_config is None
    assert not controller.of_kind("heartbeat")
    assert not controller.peek_responses(stale_peek)
    ignored_after = sample(
        "loupe_compute_replica_commands_ignored_total",
        replica_id=controller.replica_id,
        reason="other incarnation",
    )
    assert ignored_after == ignored_before + 2

    await controller.create_instance(storage)
    await controller.wait_for("heartbeat")


async def test_repeated_create_instance_is_accepted_idempotently(created, controller, storage):
    """A second CreateInstance (a restarted controller) keeps the instance running."""
    await controller.wait_for("heartbeat")
    hellos = len(controller.of_kind("hello"))
    await controller.create_instance(storage, workers=3)

    def reconfigured():
        assert created.instance_config.workers == 3

    await assert_eventually(reconfigured)
    count = len(controller.of_kind("heartbeat"))
    heartbeats = await controller.wait_for("heartbeat", count=count + 2)
    assert heartbeats[-1].workers == 3
    assert heartbeats[-1].initialized
    assert len(controller.of_kind("hello")) == hellos


# -- peeks -----------------------------------------------------------------------------------


async def test_peek_without_a_target_is_refused_and_the_next_peek_answers(
    created, controller, storage
):
    """A Peek naming no index (the old SQL peek) gets 0A000; the replica keeps answering."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=5)
    await controller.create_index(REPLICAS, as_of=5)
    legacy = str(uuid.uuid4())
    await controller.send(peek=compute_pb2.Peek(uuid=legacy, sql="SELECT 1"))
    error = (await controller.peek_response(legacy)).error
    assert (error.code, error.message.split(":")[0]) == ("0A000", "peeks name an index")

    good = await controller.peek(columns=REPLICAS.columns)
    assert rows_of(await controller.peek_response(good)) == [as_tuple(replica_row("u1", "r1"))]


async def test_garbage_on_the_command_subject_is_dropped_and_counted(created, controller, storage):
    """Undecodable bytes are counted as malformed and the replica keeps serving."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=5)
    await controller.create_index(REPLICAS, as_of=5)
    subject = command_subject(controller.replica_id)
    before = sample("loupe_bus_malformed_messages_total", subject=subject)
    await controller.nc.publish(subject, b"not a protobuf \xff\xff\x00")
    await controller.nc.flush()

    def counted():
        assert sample("loupe_bus_malformed_messages_total", subject=subject) == before + 1

    await assert_eventually(counted)
    peek_id = await controller.peek(columns=REPLICAS.columns)
    assert rows_of(await controller.peek_response(peek_id)) == [as_tuple(replica_row("u1", "r1"))]


async def test_peek_waits_for_the_index_to_pass_its_timestamp(created, controller, storage):
    """A peek at a future timestamp answers once the data at that time is written."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    await controller.create_index(REPLICAS, as_of=10)
    peek_id = await controller.peek(columns=REPLICAS.columns, timestamp=20)
    await asyncio.sleep(0.3)  # give a wrong early answer the chance to show up
    assert not controller.peek_responses(peek_id)

    storage.append(REPLICAS, [replica_row("u2", "r2")], timestamp=20)
    response = await controller.peek_response(peek_id)
    expected = [as_tuple(replica_row("u1", "r1")), as_tuple(replica_row("u2", "r2"))]
    assert sorted(rows_of(response)) == expected


async def test_peek_at_latest_waits_for_a_source_never_written(created, controller, storage):
    """With timestamp 0 over a shard whose upper is 0, the peek waits for the first write."""
    storage.shard(REPLICAS)  # exists, upper 0
    await controller.create_index(REPLICAS)
    peek_id = await controller.peek(columns=REPLICAS.columns)
    await asyncio.sleep(0.2)
    assert not controller.peek_responses(peek_id)
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=0)  # the index's as_of
    response = await controller.peek_response(peek_id)
    assert rows_of(response) == [as_tuple(replica_row("u1", "r1"))]


async def test_a_peek_waits_for_its_timestamp_however_long_and_logs_once(
    start_replica, controller, storage
):
    """A peek whose timestamp is not readable yet waits (no internal deadline) and is
    answered once the upper passes it; the wait is logged once, with the frontier."""
    await start_replica(slow_peek_log=0.3)
    await controller.wait_for("hello")
    await controller.create_instance(storage)
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    await controller.create_index(REPLICAS, as_of=10)
    with structlog.testing.capture_logs() as logs:
        peek_id = await controller.peek(timestamp=50)
        await asyncio.sleep(1.5)  # five times the old deadline of such a test
        assert not controller.peek_responses(peek_id)
        storage.append(REPLICAS, [replica_row("u2", "r2")], timestamp=50)
        response = await controller.peek_response(peek_id)
    assert sorted(rows_of(response)) == sorted(
        [as_tuple(replica_row("u1", "r1")), as_tuple(replica_row("u2", "r2"))]
    )
    waits = [e for e in logs if e["event"] == "peek waits for its index to become readable"]
    assert len(waits) == 1, waits
    assert (waits[0]["log_level"], waits[0]["write_frontier"]) == ("info", 11)


async def test_a_waiting_peek_of_a_dropped_index_fails_with_a_clear_error(
    created, controller, storage
):
    """Dropping the index a peek waits on ends the wait: 42704, naming the index."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    index_id = "i"
    await controller.create_index(REPLICAS, as_of=10, index=index_id)
    peek_id = await controller.peek(timestamp=50)
    await asyncio.sleep(0.3)
    assert not controller.peek_responses(peek_id)
    await controller.send(
        allow_compaction=compute_pb2.AllowCompaction(collection_id=index_id, empty=True)
    )
    error = (await controller.peek_response(peek_id)).error
    assert error.code == "42704"
    assert index_id in error.message


async def test_cancel_peek_answers_canceled_and_nothing_after(created, controller, storage):
    """CancelPeek of a waiting peek answers canceled=true once; the late result is dropped."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    await controller.create_index(REPLICAS, as_of=10)
    peek_id = await controller.peek(timestamp=30)
    await controller.send(cancel_peek=compute_pb2.CancelPeek(uuid=peek_id))
    assert (await controller.peek_response(peek_id)).canceled

    storage.append(REPLICAS, [replica_row("u2", "r2")], timestamp=30)
    answered = await controller.peek(timestamp=30)
    await controller.peek_response(answered)
    await controller.send(cancel_peek=compute_pb2.CancelPeek(uuid=answered))
    after = await controller.peek()
    await controller.peek_response(after)  # the replica handled the cancel before this peek
    assert len(controller.peek_responses(peek_id)) == 1
    assert len(controller.peek_responses(answered)) == 1
    assert not controller.peek_responses(answered)[0].canceled


async def test_peek_rows_go_to_the_reply_subject_too_and_errors_do_not(
    created, controller, storage
):
    """A peek naming a reply subject gets its rows there as well as through the controller
    (the coordinator takes the first copy); an error goes to the controller only."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=3)
    await controller.create_index(REPLICAS, as_of=3)
    subject = f"{controller.nc.new_inbox()}.peek"
    direct: list[compute_pb2.PeekResponse] = []

    async def received(msg: Any) -> None:
        direct.append(compute_pb2.PeekResponse.FromString(msg.data))

    subscription = await controller.nc.subscribe(f"{subject}.*", cb=received)
    try:
        answered = await controller.peek(columns=REPLICAS.columns, reply_subject=f"{subject}.rows")
        refused = await controller.peek(target_id="", reply_subject=f"{subject}.error")
        by_controller = await controller.peek_response(answered)
        assert (await controller.peek_response(refused)).HasField("error")
        await assert_eventually(lambda: _assert(len(direct) >= 1))
        (response,) = direct  # the error was not sent there
        assert response.uuid == answered
        assert response == by_controller
        assert rows_of(response) == [as_tuple(replica_row("u1", "r1"))]
    finally:
        await subscription.unsubscribe()


async def test_a_direct_peek_answers_its_coordinator_alone(created, controller, storage):
    """``Peek.direct`` (a coordinator's own peek): rows, errors and cancels go to its reply
    subject and none to the controller; one meant for another incarnation is answered
    there with UNAVAILABLE at once, so the coordinator asks the controller instead."""
    storage.append(REPLICAS, [replica_row("u1", "r1")], timestamp=3)
    await controller.create_index(REPLICAS, as_of=3)
    subject = f"{controller.nc.new_inbox()}.peek"
    direct: dict[str, compute_pb2.PeekResponse] = {}

    async def received(msg: Any) -> None:
        direct[msg.subject.rpartition(".")[2]] = compute_pb2.PeekResponse.FromString(msg.data)

    subscription = await controller.nc.subscribe(f"{subject}.*", cb=received)
    try:
        answered = await controller.peek(
            columns=REPLICAS.columns, reply_subject=f"{subject}.rows", direct=True
        )
        refused = await controller.peek(target_id="", reply_subject=f"{subject}.error", direct=True)
        stale = await controller.peek(
            columns=REPLICAS.columns,
            reply_subject=f"{subject}.stale",
            direct=True,
            incarnation=2,
        )
        # Waits for a time the index does not reach: canceled by its coordinator.
        waiting = await controller.peek(
            columns=REPLICAS.columns,
            timestamp=1 << 60,
            reply_subject=f"{subject}.waiting",
            direct=True,
        )
        await asyncio.sleep(0.2)
        await controller.send(cancel_peek=compute_pb2.CancelPeek(uuid=waiting))
        await assert_eventually(lambda: _assert(len(direct) == 4))
        assert rows_of(direct["rows"]) == [as_tuple(replica_row("u1", "r1"))]
        assert direct["rows"].uuid == answered
        assert direct["error"].uuid == refused
        assert direct["error"].HasField("error")
        assert direct["stale"].uuid == stale
        assert direct["stale"].error.code == "UNAVAILABLE"
        assert "incarnation 3, not 2" in direct["stale"].error.message
        assert direct["waiting"].uuid == waiting
        assert direct["waiting"].canceled
        # A routed peek after them all is answered through the controller: by then the
        # replica handled (and sent nowhere else) every direct one.
        routed = await controller.peek(columns=REPLICAS.columns)
        await controller.peek_response(routed)
        for peek_id in (answered, refused, stale, waiting):
            assert controller.peek_responses(peek_id) == []
    finally:
        await subscription.unsubscribe()


def _assert(condition: bool) -> None:
    assert condition


async def test_peek_before_create_instance_is_an_error(start_replica, controller):
    """A Peek before CreateInstance is answered with an error, not left hanging."""
    await start_replica()
    await controller.wait_for("hello")
    peek_id = await controller.peek()
    error = (await controller.peek_response(peek_id)).error
    assert "CreateInstance" in error.message


async def test_peek_names_its_columns_and_caps_rows(created, controller, storage):
    """The result is named after the peek's result_desc; max_result_rows caps the rows sent."""
    storage.append(REPLICAS, [replica_row(f"u{i}", f"r{i}") for i in range(5)], timestamp=3)
    await controller.create_index(REPLICAS, as_of=3)
    renamed = [(f"col{i}", t) for i, (_, t) in enumerate(REPLICAS.columns)]
    peek_id = await controller.peek(columns=renamed, max_result_rows=2)
    response = await controller.peek_response(peek_id)
    rows = rows_of(response)
    assert [(c.name, c.type) for c in response.rows.desc.columns] == renamed
    everything = {as_tuple(replica_row(f"u{i}", f"r{i}")) for i in range(5)}
    assert len(rows) == 2
    assert set(rows) <= everything
