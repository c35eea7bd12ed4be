"""Dataflows through the compute controller: history, replay, frontiers, subscribes."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from loupe.common.errors import LoupeError
from loupe.controller.collections import SubscribeRelay, subscribe_subject
from loupe.controller.compute import ClusterInfo
from loupe.controller.history import CommandHistory
from loupe.controller.orchestrators.base import ReplicaSpec
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2, plan_pb2
from loupe.testing import assert_eventually


def dataflow(
    dataflow_id: str, *, indexes: tuple[str, ...] = (), subscribes: tuple[str, ...] = (), as_of=5
) -> plan_pb2.DataflowDescription:
    return plan_pb2.DataflowDescription(
        id=dataflow_id,
        as_of=as_of,
        index_exports=[plan_pb2.IndexExport(index_id=i, on_id=dataflow_id) for i in indexes],
        sink_exports=[
            plan_pb2.SinkExport(
                sink_id=s, from_id=dataflow_id, subscribe=plan_pb2.SubscribeTarget()
            )
            for s in subscribes
        ],
    )


def described(commands: list[compute_pb2.ComputeCommand]) -> list[tuple[Any, ...]]:
    """Commands as (kind, subject, detail) tuples, for comparing."""
    found: list[tuple[Any, ...]] = []
    for command in commands:
        kind = command.WhichOneof("kind")
        if kind == "create_dataflow":
            found.append(
                (kind, command.create_dataflow.dataflow.id, command.create_dataflow.dataflow.as_of)
            )
        elif kind == "schedule":
            found.append((kind, command.schedule.id))
        elif kind == "allow_compaction":
            c = command.allow_compaction
            found.append((kind, c.collection_id, c.since, c.empty))
        else:
            found.append((kind,))
    return found


# -- the command history -----------------------------------------------------------------


def test_history_keeps_live_dataflows_and_the_latest_since():
    """Compactions collapse to the latest since; a replayed dataflow starts at its least since."""
    history = CommandHistory()
    assert history.create_dataflow(dataflow("d1", indexes=("i1", "i2")))
    assert not history.create_dataflow(dataflow("d1", indexes=("i1", "i2"), as_of=9))
    assert history.create_dataflow(dataflow("d2", indexes=("i3",)))
    history.allow_compaction("i1", 7, False)
    history.allow_compaction("i1", 12, False)
    history.allow_compaction("i1", 10, False)  # sinces never go back
    history.allow_compaction("i2", 8, False)
    assert described(history.commands()) == [
        ("create_dataflow", "d1", 8),
        ("schedule", "d1"),
        ("create_dataflow", "d2", 5),
        ("schedule", "d2"),
        ("allow_compaction", "i1", 12, False),
        ("allow_compaction", "i2", 8, False),
        ("allow_compaction", "i3", 5, False),
    ]


def test_dropped_dataflow_vanishes_from_the_history():
    """Once every export of a dataflow is dropped, none of its commands are replayed."""
    history = CommandHistory()
    history.create_dataflow(dataflow("d1", indexes=("i1",), subscribes=("s1",)))
    history.create_dataflow(dataflow("d2", indexes=("i2",)))
    history.allow_compaction("i1", 9, True)
    assert history.collections() == ["s1", "i2"]
    assert history.has_dataflow("d1")
    history.allow_compaction("s1", 0, True)
    assert not history.has_dataflow("d1")
    assert not history.allow_compaction("s1", 0, True)
    assert described(history.commands()) == [
        ("create_dataflow", "d2", 5),
        ("schedule", "d2"),
        ("allow_compaction", "i2", 5, False),
    ]


# -- the subscribe relay -------------------------------------------------------------------


def batch(lower: int, upper: int, *times: int) -> compute_pb2.SubscribeBatch:
    return compute_pb2.SubscribeBatch(
        sink_id="s",
        lower=lower,
        upper=upper,
        updates=[
            compute_pb2.UpdateRow(
                row=common_pb2.Row(values=[common_pb2.Value(int_value=t)]), time=t, diff=1
            )
            for t in times
        ],
    )


async def test_subscribe_relay_publishes_each_time_once():
    """Duplicates are dropped, overlaps cut to their new times, unknown sinks ignored."""
    sent: list[tuple[str, compute_pb2.SubscribeBatch]] = []

    async def publish(subject: str, message: compute_pb2.SubscribeBatch) -> None:
        sent.append((subject, message))

    relay = SubscribeRelay(publish)
    await relay.on_batch(batch(0, 3, 1))  # not opened yet
    relay.open("s")
    await relay.on_batch(batch(0, 3, 0, 2))
    await relay.on_batch(batch(0, 3, 0, 2))  # the other replica, same batch
    await relay.on_batch(batch(0, 5, 0, 2, 4))  # a replica batching differently
    await relay.on_batch(batch(3, 5, 4))
    await relay.on_batch(batch(5, 6, 5))
    relay.close("s")
    await relay.on_batch(batch(6, 7, 6))
    assert {subject for subject, _ in sent} == {subscribe_subject("s")}
    assert [(b.lower, b.upper, [u.time for u in b.updates]) for _, b in sent] == [
        (0, 3, [0, 2]),
        (3, 5, [4]),
        (5, 6, [5]),
    ]


# -- the controller with test-side replicas --------------------------------------------------


async def online(compute: Any, *replica_ids: str) -> None:
    def check() -> None:
        for replica_id in replica_ids:
            status = compute.replica_status(replica_id)
            assert status is not None
            assert status.status == "online"

    await assert_eventually(check)


@pytest.fixture
async def cluster_of_two(make_compute, unique):
    compute, orchestrator = await make_compute()
    info = ClusterInfo(f"c{unique}", "quickstart")
    replicas = [f"a{unique}", f"b{unique}"]
    await compute.apply([info], [ReplicaSpec(r, info.id) for r in replicas])
    await online(compute, *replicas)
    return compute, orchestrator, info, replicas


async def test_dataflows_go_to_every_replica_and_are_replayed_to_a_new_incarnation(
    cluster_of_two,
):
    """CreateDataflow reaches both replicas once; a crashed one gets the compacted history."""
    compute, orchestrator, info, (first, second) = cluster_of_two
    assert await compute.create_dataflow(info.id, dataflow("d1", indexes=("i1",)))
    assert not await compute.create_dataflow(info.id, dataflow("d1", indexes=("i1",)))
    await compute.create_dataflow(info.id, dataflow("d2", indexes=("i2",)))
    await compute.allow_compaction(info.id, ["i1"], 7, False)
    await compute.allow_compaction(info.id, ["i2"], 0, True)
    live = [
        ("create_dataflow", "d1", 5),
        ("schedule", "d1"),
        ("create_dataflow", "d2", 5),
        ("schedule", "d2"),
        ("allow_compaction", "i1", 7, False),
        ("allow_compaction", "i2", 0, True),
    ]

    def sent_to_both() -> None:
        for replica_id in (first, second):
            commands = orchestrator.replicas[replica_id].commands
            assert described(commands)[2:] == live

    await assert_eventually(sent_to_both)

    await orchestrator.kill(first)

    def replayed() -> None:
        replica = orchestrator.replicas.get(first)
        assert replica is not None
        assert replica.incarnation == 2
        assert described(replica.commands) == [
            ("create_instance",),
            ("create_dataflow", "d1", 7),
            ("schedule", "d1"),
            ("allow_compaction", "i1", 7, False),
            ("initialization_complete",),
        ]

    await assert_eventually(replayed)


async def test_frontiers_are_kept_per_replica_and_forgotten_with_an_incarnation(
    cluster_of_two, nats_connection
):
    """The write frontier is the largest over replicas; a new incarnation starts from none."""
    compute, orchestrator, info, (first, second) = cluster_of_two
    await compute.create_dataflow(info.id, dataflow("d1", indexes=("i1",)))

    async def report(replica_id: str, incarnation: int, frontier: int) -> None:
        response = compute_pb2.ComputeResponse(
            replica_id=replica_id,
            incarnation=incarnation,
            frontiers=compute_pb2.Frontiers(collection_id="i1", write_frontier=frontier),
        )
        await nats_connection.publish(
            f"loupe.compute.v1.{replica_id}.response", response.SerializeToString()
        )

    await report(first, 1, 10)
    await report(second, 1, 12)
    await report(second, 7, 99)  # no such incarnation: fenced

    def frontiers() -> tuple[int, int, dict[str, int]]:
        (found,) = compute.list_frontiers(info.id)
        return found.write_frontier, found.since, found.replicas

    async def expect(wanted: Any) -> None:
        def check() -> None:
            assert frontiers() == wanted

        await assert_eventually(check)

    await expect((12, 5, {first: 10, second: 12}))
    await orchestrator.kill(second)
    await online(compute, second)
    await expect((10, 5, {first: 10}))
    with pytest.raises(LoupeError) as error:
        compute.list_frontiers(info.id, ["nope"])
    assert error.value.code == "NOT_FOUND"


async def test_peek_by_target_checks_the_index_and_its_since(cluster_of_two):
    """A peek of an unknown index, or before its since, fails before reaching a replica."""
    compute, orchestrator, info, (first, _) = cluster_of_two
    await compute.create_dataflow(info.id, dataflow("d1", indexes=("i1",)))
    await compute.allow_compaction(info.id, ["i1"], 9, False)
    with pytest.raises(LoupeError) as unknown:
        await compute.peek(info.id, compute_pb2.Peek(target_id="i9", timestamp=10))
    assert unknown.value.code == "NOT_FOUND"
    with pytest.raises(LoupeError) as early:
        await compute.peek(info.id, compute_pb2.Peek(target_id="i1", timestamp=8))
    assert "since 9" in early.value.message
    answer = await compute.peek(info.id, compute_pb2.Peek(target_id="i1", timestamp=9))
    assert answer.WhichOneof("result") == "rows"
    assert "peek" in orchestrator.replicas[first].kinds()


async def test_subscribe_batches_of_two_replicas_are_republished_once(
    cluster_of_two, nats_connection
):
    """Both replicas send the same batches; subscribers get each once, in order."""
    compute, orchestrator, info, (first, second) = cluster_of_two
    await compute.create_dataflow(info.id, dataflow("d1", subscribes=("s",)))
    received: list[compute_pb2.SubscribeBatch] = []

    async def record(msg: Any) -> None:
        received.append(compute_pb2.SubscribeBatch.FromString(msg.data))

    await nats_connection.subscribe(subscribe_subject("s"), cb=record)
    await nats_connection.flush()
    duplicates = (
        REGISTRY.get_sample_value(
            "loupe_controller_subscribe_batches_total", {"outcome": "duplicate"}
        )
        or 0.0
    )
    for replica_id in (first, second):
        fake = orchestrator.replicas[replica_id]
        for sent in (batch(5, 6, 5), batch(6, 8, 7)):
            await fake._publish(subscribe_batch=sent)

    def both_batches() -> None:
        dropped = REGISTRY.get_sample_value(
            "loupe_controller_subscribe_batches_total", {"outcome": "duplicate"}
        )
        assert dropped == duplicates + 2
        assert [(b.lower, b.upper) for b in received] == [(5, 6), (6, 8)]

    await assert_eventually(both_batches)
