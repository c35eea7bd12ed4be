"""The compute replica against a controller played by the test over real NATS."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time

import pyarrow as pa
from prometheus_client import REGISTRY

from loupe.builtins import MZ_CLUSTER_REPLICA_STATUSES, MZ_CLUSTER_REPLICAS
from loupe.common import values
from loupe.compute_replica.protocol import command_subject
from loupe.persist.shard import arrow_schema
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

JOIN = (
    "SELECT r.name, s.status, s.reason FROM mz_cluster_replica_statuses AS s"
    " JOIN mz_cluster_replicas AS r ON r.id = s.replica_id"
)
UPDATED_AT = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def replica_row(replica_id, name, cluster_id="u1", size="1"):
    return {
        "id": replica_id,
        "name": name,
        "cluster_id": cluster_id,
        "size": size,
        "owner_id": "u1",
    }


def status_row(replica_id, status, reason=None, incarnation=1):
    return {
        "replica_id": replica_id,
        "process_id": 0,
        "status": status,
        "reason": reason,
        "updated_at": UPDATED_AT,
        "incarnation": incarnation,
    }


def join_sources(storage, **options):
    return [
        storage.source("mz_cluster_replica_statuses", MZ_CLUSTER_REPLICA_STATUSES, **options),
        storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS, **options),
    ]


def rows_of(response):
    assert response.WhichOneof("result") == "rows", response
    return [values.from_row(row) for row in response.rows.rows]


def desc_of(response):
    return [(c.name, c.type) for c in response.rows.desc.columns]


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
    stale_peek = await controller.peek("SELECT 1 AS one", [], incarnation=4)
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


async def test_peek_joins_two_shards(created, controller, storage):
    """The status join over two real shards answers the matching rows, typed."""
    storage.append(
        MZ_CLUSTER_REPLICAS,
        [replica_row("u1", "r1"), replica_row("u2", "r2"), replica_row("u3", "r3")],
        timestamp=100,
    )
    storage.append(
        MZ_CLUSTER_REPLICA_STATUSES,
        [
            status_row("u1", "online"),
            status_row("u2", "offline", "oom-killed", incarnation=2),
            status_row("u9", "online"),  # no such replica: the inner join drops it
        ],
        timestamp=100,
    )
    peek_id = await controller.peek(JOIN, join_sources(storage))
    response = await controller.peek_response(peek_id)
    assert sorted(rows_of(response)) == [("r1", "online", None), ("r2", "offline", "oom-killed")]
    assert desc_of(response) == [("name", "text"), ("status", "text"), ("reason", "text")]


async def test_peek_at_latest_reads_at_the_smallest_upper_minus_one(created, controller, storage):
    """Timestamp 0 reads at min(upper) - 1: a source ahead of the others is read in the past."""
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=100)
    storage.append(MZ_CLUSTER_REPLICA_STATUSES, [status_row("u1", "starting")], timestamp=100)
    shard = storage.shard(MZ_CLUSTER_REPLICA_STATUSES)
    retract = {**status_row("u1", "starting"), "mz_timestamp": 101, "mz_diff": -1}
    insert = {**status_row("u1", "online"), "mz_timestamp": 101, "mz_diff": 1}
    table = pa.Table.from_pylist(
        [retract, insert], schema=arrow_schema(MZ_CLUSTER_REPLICA_STATUSES.columns)
    )
    shard.compare_and_append(table, 101, 102)

    at_latest = await controller.peek(JOIN, join_sources(storage))
    assert rows_of(await controller.peek_response(at_latest)) == [("r1", "starting", None)]

    storage.append(MZ_CLUSTER_REPLICAS, [], timestamp=101)
    caught_up = await controller.peek(JOIN, join_sources(storage))
    assert rows_of(await controller.peek_response(caught_up)) == [("r1", "online", None)]


async def test_peek_with_unknown_column_is_an_error_and_the_next_peek_answers(
    created, controller, storage
):
    """A peek naming a missing column gets 42703; the replica keeps answering."""
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=5)
    sources = [storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS)]
    bad = await controller.peek("SELECT r.nope FROM mz_cluster_replicas AS r", sources)
    error = (await controller.peek_response(bad)).error
    assert error.code == "42703"
    assert "nope" in error.message

    unqualified = await controller.peek("SELECT nope FROM mz_cluster_replicas", sources)
    assert (await controller.peek_response(unqualified)).error.code == "42703"

    syntax = await controller.peek("SELEC name FROM mz_cluster_replicas", sources)
    assert (await controller.peek_response(syntax)).error.code == "42601"

    good = await controller.peek("SELECT name FROM mz_cluster_replicas", sources)
    assert rows_of(await controller.peek_response(good)) == [("r1",)]


async def test_garbage_on_the_command_subject_is_dropped_and_counted(created, controller, storage):
    """Undecodable bytes are counted as malformed and the replica keeps serving."""
    subject = command_subject(controller.replica_id)
    before = sample("loupe_bus_malformed_messages_total", subject=subject)
    await controller.nc.publish(subject, b"not a protobuf \xff\xff\x00")
    await controller.nc.flush()

    def counted():
        assert sample("loupe_bus_malformed_messages_total", subject=subject) == before + 1

    await assert_eventually(counted)
    peek_id = await controller.peek("SELECT 1 AS one", [])
    assert rows_of(await controller.peek_response(peek_id)) == [(1,)]


async def test_peek_waits_for_the_upper_to_pass_its_timestamp(created, controller, storage):
    """A peek at a future timestamp answers once the data at that time is written."""
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    sources = [storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS, with_location=False)]
    peek_id = await controller.peek(
        "SELECT id, name FROM mz_cluster_replicas ORDER BY id", sources, timestamp=20
    )
    await asyncio.sleep(0.3)  # give a wrong early answer the chance to show up
    assert not controller.peek_responses(peek_id)

    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u2", "r2")], timestamp=20)
    response = await controller.peek_response(peek_id)
    assert rows_of(response) == [("u1", "r1"), ("u2", "r2")]


async def test_peek_at_latest_waits_for_a_source_never_written(created, controller, storage):
    """With timestamp 0 and an upper of 0, the peek waits for the first write."""
    storage.shard(MZ_CLUSTER_REPLICAS)  # exists, upper 0
    sources = [storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS)]
    peek_id = await controller.peek("SELECT name FROM mz_cluster_replicas", sources)
    await asyncio.sleep(0.2)
    assert not controller.peek_responses(peek_id)
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=7)
    assert rows_of(await controller.peek_response(peek_id)) == [("r1",)]


async def test_peek_times_out_when_the_upper_does_not_advance(start_replica, controller, storage):
    """A peek whose timestamp never becomes readable fails with a clear error."""
    await start_replica(peek_wait_timeout=0.3)
    await controller.wait_for("hello")
    await controller.create_instance(storage)
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    sources = [storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS)]
    peek_id = await controller.peek("SELECT name FROM mz_cluster_replicas", sources, timestamp=50)
    error = (await controller.peek_response(peek_id)).error
    assert error.code == "XX000"
    assert "timed out" in error.message
    assert "mz_cluster_replicas upper 11" in error.message


async def test_cancel_peek_answers_canceled_and_nothing_after(created, controller, storage):
    """CancelPeek of a waiting peek answers canceled=true once; the late result is dropped."""
    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u1", "r1")], timestamp=10)
    sources = [storage.source("mz_cluster_replicas", MZ_CLUSTER_REPLICAS)]
    peek_id = await controller.peek("SELECT name FROM mz_cluster_replicas", sources, timestamp=30)
    await controller.send(cancel_peek=compute_pb2.CancelPeek(uuid=peek_id))
    assert (await controller.peek_response(peek_id)).canceled

    storage.append(MZ_CLUSTER_REPLICAS, [replica_row("u2", "r2")], timestamp=30)
    answered = await controller.peek("SELECT name FROM mz_cluster_replicas", sources, timestamp=30)
    await controller.peek_response(answered)
    await controller.send(cancel_peek=compute_pb2.CancelPeek(uuid=answered))
    after = await controller.peek("SELECT 1 AS one", [])
    await controller.peek_response(after)  # the replica handled the cancel before this peek
    assert len(controller.peek_responses(peek_id)) == 1
    assert len(controller.peek_responses(answered)) == 1
    assert not controller.peek_responses(answered)[0].canceled


async def test_peek_before_create_instance_is_an_error(start_replica, controller):
    """A Peek before CreateInstance is answered with an error, not left hanging."""
    await start_replica()
    await controller.wait_for("hello")
    peek_id = await controller.peek("SELECT 1 AS one", [])
    error = (await controller.peek_response(peek_id)).error
    assert "CreateInstance" in error.message


async def test_peek_names_columns_like_postgres_and_caps_rows(created, controller, storage):
    """Aggregates get PostgreSQL's names and types; max_result_rows caps the rows sent."""
    storage.append(
        MZ_CLUSTER_REPLICAS,
        [replica_row(f"u{i}", f"r{i}", cluster_id="u1" if i < 3 else "u2") for i in range(5)],
        timestamp=3,
    )
    storage.append(
        MZ_CLUSTER_REPLICA_STATUSES,
        [status_row(f"u{i}", "online", incarnation=i) for i in range(5)],
        timestamp=3,
    )
    sources = join_sources(storage)
    counted = await controller.peek(
        "SELECT cluster_id, COUNT(*), MAX(name) AS last FROM mz_cluster_replicas"
        " GROUP BY cluster_id ORDER BY cluster_id",
        sources,
    )
    response = await controller.peek_response(counted)
    assert desc_of(response) == [("cluster_id", "text"), ("count", "int8"), ("last", "text")]
    assert rows_of(response) == [("u1", 3, "r2"), ("u2", 2, "r4")]

    typed = await controller.peek(
        "SELECT s.replica_id, s.process_id, s.updated_at, s.incarnation, r.name"
        " FROM mz_cluster_replica_statuses AS s JOIN mz_cluster_replicas AS r"
        " ON r.id = s.replica_id WHERE s.incarnation >= 1 ORDER BY s.incarnation DESC LIMIT 3",
        sources,
        max_result_rows=2,
    )
    response = await controller.peek_response(typed)
    assert desc_of(response) == [
        ("replica_id", "text"),
        ("process_id", "uint8"),
        ("updated_at", "timestamptz"),
        ("incarnation", "uint8"),
        ("name", "text"),
    ]
    assert rows_of(response) == [
        ("u4", 0, UPDATED_AT, 4, "r4"),
        ("u3", 0, UPDATED_AT, 3, "r3"),
    ]
