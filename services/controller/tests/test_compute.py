"""The compute controller with test-side replicas speaking the protocol over real NATS."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from loupe.builtins import (
    MZ_CLUSTER_REPLICA_METRICS,
    MZ_CLUSTER_REPLICA_METRICS_HISTORY,
    MZ_CLUSTER_REPLICA_STATUS_HISTORY,
    MZ_CLUSTER_REPLICA_STATUSES,
)
from loupe.common.errors import LoupeError
from loupe.controller.compute import ClusterInfo, ComputeController
from loupe.controller.orchestrators.base import ReplicaSpec
from loupe.proto.compute.v1 import compute_pb2, plan_pb2
from loupe.testing import assert_eventually


def cluster(unique: str, name: str = "quickstart", **options: Any) -> ClusterInfo:
    return ClusterInfo(f"c{unique}", name, **options)


def status_of(compute: ComputeController, replica_id: str) -> tuple[str, str | None, int]:
    status = compute.replica_status(replica_id)
    assert status is not None, f"no status for {replica_id}"
    return status.status, status.reason, status.incarnation


async def become(
    compute: ComputeController, replica_id: str, expected: tuple[str, str | None, int]
) -> None:
    def check() -> None:
        assert status_of(compute, replica_id) == expected

    await assert_eventually(check, timeout=10)


def rows(writer: Any, collection_id: str, replica_id: str) -> list[tuple[Any, ...]]:
    return [row for row in writer.snapshot(collection_id) if row[0] == replica_id]


async def test_replica_goes_online_after_create_instance_and_heartbeat(make_compute, unique):
    """Hello -> CreateInstance (logging config of its cluster) -> history -> online on heartbeat."""
    compute, orchestrator = await make_compute()
    info = cluster(unique, introspection_interval_ns=2_000_000_000, introspection_debugging=True)
    quiet = ClusterInfo(f"q{unique}", "quiet", introspection_interval_ns=0)
    specs = [ReplicaSpec(f"u{unique}", info.id, workers=2), ReplicaSpec(f"v{unique}", quiet.id)]
    started, stopped = await compute.apply([info, quiet], specs)
    assert (sorted(started), stopped) == (sorted(s.replica_id for s in specs), [])
    await become(compute, f"u{unique}", ("online", None, 1))
    await become(compute, f"v{unique}", ("online", None, 1))

    replica = orchestrator.replicas[f"u{unique}"]
    assert replica.kinds()[:2] == ["create_instance", "initialization_complete"]
    create = replica.commands[0].create_instance
    assert (create.replica_id, create.cluster_id, create.incarnation, create.workers) == (
        f"u{unique}",
        info.id,
        1,
        2,
    )
    assert create.logging.interval_ns == 2_000_000_000
    assert create.logging.enable_logging
    assert create.logging.log_logging
    assert create.blob_uri.startswith("file://")
    assert create.consensus_uri.startswith("sqlite://")
    quiet_logging = orchestrator.replicas[f"v{unique}"].commands[0].create_instance.logging
    assert (quiet_logging.interval_ns, quiet_logging.enable_logging) == (0, False)
    assert compute.online_replicas(info.id) == [f"u{unique}"]


async def test_apply_is_idempotent_and_stops_dropped_replicas(make_compute, unique):
    """Applying the same catalog twice starts nothing new; a replica left out is stopped."""
    compute, orchestrator = await make_compute()
    info = cluster(unique)
    specs = [ReplicaSpec(f"u{unique}", info.id), ReplicaSpec(f"w{unique}", info.id)]
    await compute.apply([info], specs)
    assert await compute.apply([info], specs) == ([], [])
    assert [e.kind for e in orchestrator.events] == ["started", "started"]
    assert await compute.apply([info], specs[:1]) == ([], [f"w{unique}"])
    assert compute.replica_ids() == [f"u{unique}"]
    assert orchestrator.replica_ids() == [f"u{unique}"]


async def test_status_rows_are_replaced_not_accumulated(make_compute, arrow_writer, unique):
    """One statuses row per replica, replaced on change; history grows; drop retracts."""
    compute, _ = await make_compute()
    info = cluster(unique)
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))
    await arrow_writer.flush()

    (current,) = rows(arrow_writer, MZ_CLUSTER_REPLICA_STATUSES.id, replica_id)
    assert current[:4] == (replica_id, 0, "online", None)
    assert current[5] == 1
    assert current[4].tzinfo is not None
    history = rows(arrow_writer, MZ_CLUSTER_REPLICA_STATUS_HISTORY.id, replica_id)
    # A new replica has no row before it is first online: no reasonless offline row.
    assert [(r[2], r[3], r[5]) for r in history] == [("online", None, 1)]
    assert rows(arrow_writer, MZ_CLUSTER_REPLICA_METRICS.id, replica_id) == [
        (replica_id, 0, 1000, 4096, 0)
    ]
    # Heartbeats come every 0.1 s; history is kept at most every 10 s.
    assert len(rows(arrow_writer, MZ_CLUSTER_REPLICA_METRICS_HISTORY.id, replica_id)) == 1

    await compute.apply([info], [])
    await arrow_writer.flush()
    assert rows(arrow_writer, MZ_CLUSTER_REPLICA_STATUSES.id, replica_id) == []
    assert rows(arrow_writer, MZ_CLUSTER_REPLICA_METRICS.id, replica_id) == []
    assert len(rows(arrow_writer, MZ_CLUSTER_REPLICA_STATUS_HISTORY.id, replica_id)) == 1


async def test_crash_is_offline_with_reason_then_a_new_incarnation(make_compute, unique):
    """A killed replica is offline (killed), an exited one (exited); each returns as a new incarnation."""
    compute, orchestrator = await make_compute()
    info = cluster(unique)
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))

    await orchestrator.kill(replica_id, signal=9)
    assert status_of(compute, replica_id) == ("offline", "killed", 1)
    await become(compute, replica_id, ("online", None, 2))

    await orchestrator.kill(replica_id, signal=None, exit_code=3)
    assert status_of(compute, replica_id) == ("offline", "exited", 2)
    await become(compute, replica_id, ("online", None, 3))


async def test_missing_heartbeats_mean_offline_and_a_restart(make_compute, arrow_writer, unique):
    """A replica that stops heartbeating goes offline (heartbeat-timeout) and is restarted."""
    compute, orchestrator = await make_compute(heartbeat_timeout=0.5)
    info = cluster(unique)
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))

    orchestrator.replicas[replica_id].behaviour.silent = True
    await become(compute, replica_id, ("online", None, 2))
    exits = [e for e in orchestrator.events if e.kind == "exited"]
    assert [(e.incarnation, e.requested) for e in exits] == [(1, True)]
    await arrow_writer.flush()
    history = rows(arrow_writer, MZ_CLUSTER_REPLICA_STATUS_HISTORY.id, replica_id)
    assert sorted((r[5], r[2], r[3] or "") for r in history) == [
        (1, "offline", "heartbeat-timeout"),
        (1, "online", ""),
        (2, "online", ""),
    ]


async def test_zombie_responses_change_nothing(make_compute, nats_connection, kit, unique):
    """Responses of a replaced incarnation are dropped and counted: no status, no CreateInstance."""
    compute, orchestrator = await make_compute(
        lambda _rid, incarnation: kit.Behaviour(silent=incarnation > 1, peek_delay=0.5)
    )
    info = cluster(unique)
    replica_id = f"u{unique}"
    commands: list[compute_pb2.ComputeCommand] = []

    async def record(msg: Any) -> None:
        commands.append(compute_pb2.ComputeCommand.FromString(msg.data))

    await nats_connection.subscribe(f"loupe.compute.v1.{replica_id}.command", cb=record)
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))

    await orchestrator.kill(replica_id)  # incarnation 1 is now a zombie
    assert status_of(compute, replica_id) == ("offline", "killed", 1)

    def second_created() -> None:
        assert [c.incarnation for c in commands if c.HasField("create_instance")] == [1, 2]

    await assert_eventually(second_created)
    stale_before = compute.stale_responses
    response_subject = f"loupe.compute.v1.{replica_id}.response"
    for kind in (
        {"hello": compute_pb2.Hello(pid=1)},
        {"heartbeat": compute_pb2.Heartbeat(cpu_nano_cores=1)},
        {"heartbeat": compute_pb2.Heartbeat(cpu_nano_cores=1)},
    ):
        response = compute_pb2.ComputeResponse(replica_id=replica_id, incarnation=1, **kind)
        await nats_connection.publish(response_subject, response.SerializeToString())

    await assert_eventually(lambda: _at_least(compute.stale_responses, stale_before + 3))
    # Incarnation 2 is silent, so only a zombie heartbeat could have brought it online.
    assert status_of(compute, replica_id) == ("offline", "killed", 1)
    assert [c.incarnation for c in commands if c.HasField("create_instance")] == [1, 2]
    assert compute.online_replicas(info.id) == []

    # Now incarnation 2 heartbeats; a zombie's quick peek answer must not win.
    orchestrator.replicas[replica_id].behaviour.silent = False
    await become(compute, replica_id, ("online", None, 2))
    peek = asyncio.create_task(compute.peek(info.id, compute_pb2.Peek(uuid=f"p{unique}"), wait=5))
    await assert_eventually(lambda: _has_peek(commands, f"p{unique}"))
    bogus = compute_pb2.ComputeResponse(
        replica_id=replica_id,
        incarnation=1,
        peek_response=compute_pb2.PeekResponse(uuid=f"p{unique}", canceled=True),
    )
    await nats_connection.publish(response_subject, bogus.SerializeToString())
    answer = await peek
    assert answer.WhichOneof("result") == "rows"
    assert answer.rows.rows[0].values[0].text_value == replica_id


def _at_least(value: int, minimum: int) -> None:
    assert value >= minimum, f"{value} < {minimum}"


def _has_peek(commands: list[compute_pb2.ComputeCommand], uuid: str) -> None:
    assert any(c.HasField("peek") and c.peek.uuid == uuid for c in commands)


# -- peeks ---------------------------------------------------------------------------


async def two_replicas(make_compute, kit, unique, fast_delay, slow_delay):
    delays = {f"fast{unique}": fast_delay, f"slow{unique}": slow_delay}
    compute, orchestrator = await make_compute(
        lambda rid, _incarnation: kit.Behaviour(peek_delay=delays[rid])
    )
    info = cluster(unique)
    await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in delays])
    for rid in delays:
        await become(compute, rid, ("online", None, 1))
    return compute, orchestrator, info


async def test_first_peek_answer_wins_and_the_others_are_cancelled(make_compute, kit, unique):
    """Every online replica gets the peek; the first answer is returned, the rest cancelled."""
    compute, orchestrator, info = await two_replicas(make_compute, kit, unique, 0.0, 0.5)
    fast, slow = orchestrator.replicas[f"fast{unique}"], orchestrator.replicas[f"slow{unique}"]
    answer = await compute.peek(info.id, compute_pb2.Peek(uuid=f"p{unique}"))
    assert answer.uuid == f"p{unique}"
    assert answer.rows.rows[0].values[0].text_value == f"fast{unique}"
    assert "peek" in fast.kinds()
    assert "peek" in slow.kinds()
    await assert_eventually(lambda: _cancelled(slow, f"p{unique}"))
    assert "cancel_peek" not in fast.kinds()


async def test_an_error_answer_waits_for_the_other_replicas(make_compute, kit, unique):
    """Rows from a slower replica beat a faster one's error; errors alone give the first."""
    failing, slow = f"fail{unique}", f"slow{unique}"
    behaviours = {
        failing: kit.Behaviour(peek_error=True),
        slow: kit.Behaviour(peek_delay=0.3),
    }
    compute, _ = await make_compute(lambda rid, _incarnation: behaviours[rid])
    info = cluster(unique)
    await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in behaviours])
    for rid in behaviours:
        await become(compute, rid, ("online", None, 1))
    answer = await compute.peek(info.id, compute_pb2.Peek())
    assert answer.rows.rows[0].values[0].text_value == slow

    behaviours[slow].peek_error = True
    answer = await compute.peek(info.id, compute_pb2.Peek())
    assert answer.error.message == f"{failing} cannot"


def _cancelled(replica: Any, uuid: str) -> None:
    assert uuid in replica.canceled


async def test_peek_for_one_replica_goes_only_there(make_compute, kit, unique):
    """With a target replica, only that replica is asked, even when another is faster."""
    compute, orchestrator, info = await two_replicas(make_compute, kit, unique, 0.0, 0.2)
    answer = await compute.peek(info.id, compute_pb2.Peek(), replica_id=f"slow{unique}")
    assert answer.rows.rows[0].values[0].text_value == f"slow{unique}"
    assert "peek" not in orchestrator.replicas[f"fast{unique}"].kinds()
    with pytest.raises(LoupeError) as error:
        await compute.peek(info.id, compute_pb2.Peek(), replica_id="nope")
    assert error.value.code == "42704"


async def test_a_round_ends_but_the_peek_goes_on_until_answered(make_compute, kit, unique):
    """A caller's round (``wait``) ends with DEADLINE_EXCEEDED saying what the peek waits
    for; the peek is not canceled, and the next round with its uuid gets the answer."""
    delays: dict[str, float | None] = {f"r{unique}": 1.0}
    compute, orchestrator = await make_compute(
        lambda rid, _inc: kit.Behaviour(peek_delay=delays[rid])
    )
    info = cluster(unique)
    await compute.apply([info], [ReplicaSpec(f"r{unique}", info.id)])
    await become(compute, f"r{unique}", ("online", None, 1))
    peek = compute_pb2.Peek(uuid=f"t{unique}", target_id="")
    with pytest.raises(LoupeError) as error:
        await compute.peek(info.id, peek, wait=0.3)
    assert error.value.code == "DEADLINE_EXCEEDED"
    assert f"waits for replica r{unique} of cluster 'quickstart' to answer" in error.value.message
    answer = await compute.peek(info.id, peek, wait=5)
    assert answer.rows.rows[0].values[0].text_value == f"r{unique}"
    replica = orchestrator.replicas[f"r{unique}"]
    assert replica.kinds().count("peek") == 1  # joined, not sent again
    assert f"t{unique}" not in replica.canceled


async def test_a_peek_nobody_waits_for_is_canceled_after_its_lease(make_compute, kit, unique):
    """A caller that stops asking (a coordinator that died) leaves no peek behind."""
    compute, orchestrator, info = await two_replicas(make_compute, kit, unique, None, None)
    with pytest.raises(LoupeError):
        await compute.peek(info.id, compute_pb2.Peek(uuid=f"a{unique}"), wait=0.1)
    assert f"a{unique}" in compute.peeks
    assert await compute.peeks.expire(time.monotonic() + 3600) == [f"a{unique}"]
    for replica in orchestrator.replicas.values():
        await assert_eventually(lambda replica=replica: _cancelled(replica, f"a{unique}"))
    assert f"a{unique}" not in compute.peeks


async def test_cancel_peek_answers_canceled_and_forwards(make_compute, kit, unique):
    """CancelPeek ends the caller's wait with `canceled` and reaches every replica."""
    compute, orchestrator, info = await two_replicas(make_compute, kit, unique, None, None)
    running = asyncio.create_task(compute.peek(info.id, compute_pb2.Peek(uuid=f"c{unique}")))
    for replica in orchestrator.replicas.values():
        await assert_eventually(lambda replica=replica: _asked(replica))
    assert await compute.cancel_peek(f"c{unique}")
    answer = await asyncio.wait_for(running, 2)
    assert answer.canceled
    for replica in orchestrator.replicas.values():
        await assert_eventually(lambda replica=replica: _cancelled(replica, f"c{unique}"))
    assert not await compute.cancel_peek(f"c{unique}")


def _asked(replica: Any) -> None:
    assert "peek" in replica.kinds()


async def test_a_cluster_without_replicas_waits_until_one_is_added(make_compute, kit, unique):
    """As in Materialize, a peek on a cluster with no replica waits: it is answered by
    the first replica that comes online, not refused."""
    compute, _ = await make_compute(lambda _rid, _inc: kit.Behaviour())
    info = cluster(unique)
    await compute.apply([info], [])
    running = asyncio.create_task(compute.peek(info.id, compute_pb2.Peek(uuid=f"z{unique}")))
    with pytest.raises(LoupeError) as error:
        await compute.peek(info.id, compute_pb2.Peek(uuid=f"z{unique}"), wait=0.2)
    assert error.value.message == (
        f"peek z{unique} waits for cluster 'quickstart' to have an online replica"
    )
    assert not running.done()
    await compute.apply([info], [ReplicaSpec(f"late{unique}", info.id)])
    answer = await asyncio.wait_for(running, 10)
    assert answer.rows.rows[0].values[0].text_value == f"late{unique}"


async def test_a_peek_whose_replica_crashes_goes_to_its_next_incarnation(make_compute, kit, unique):
    """The only replica crashes while a peek waits: the restarted incarnation answers it."""
    compute, orchestrator = await make_compute(
        lambda _rid, incarnation: kit.Behaviour(peek_delay=None if incarnation == 1 else 0.0)
    )
    info = cluster(unique)
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))
    running = asyncio.create_task(compute.peek(info.id, compute_pb2.Peek(uuid=f"k{unique}")))
    await assert_eventually(lambda: _asked(orchestrator.replicas[replica_id]))
    await orchestrator.kill(replica_id)
    answer = await asyncio.wait_for(running, 10)
    assert answer.rows.rows[0].values[0].text_value == replica_id
    assert orchestrator.replicas[replica_id].incarnation == 2


async def test_a_peek_survives_a_heartbeat_timeout_restart(make_compute, kit, unique):
    """A hung replica is restarted after its heartbeat timeout; its peek goes to the new one."""
    compute, orchestrator = await make_compute(
        lambda _rid, incarnation: kit.Behaviour(
            silent=incarnation == 1, peek_delay=None if incarnation == 1 else 0.0
        ),
        heartbeat_timeout=0.5,
        startup_timeout=0.5,
    )
    info = cluster(unique)
    replica_id = f"h{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    answer = await asyncio.wait_for(compute.peek(info.id, compute_pb2.Peek(uuid=f"h{unique}")), 15)
    assert answer.rows.rows[0].values[0].text_value == replica_id
    assert orchestrator.replicas[replica_id].incarnation >= 2


async def test_dropping_the_cluster_ends_its_waiting_peeks(make_compute, kit, unique):
    """A peek waiting on a cluster that is dropped fails with Materialize's words (42704)."""
    compute, _ = await make_compute(lambda _rid, _inc: kit.Behaviour(peek_delay=None))
    info = cluster(unique, "analytics")
    await compute.apply([info], [ReplicaSpec(f"d{unique}", info.id)])
    await become(compute, f"d{unique}", ("online", None, 1))
    running = asyncio.create_task(compute.peek(info.id, compute_pb2.Peek()))
    await asyncio.sleep(0.2)
    await compute.apply([], [])
    with pytest.raises(LoupeError) as error:
        await asyncio.wait_for(running, 5)
    assert (error.value.code, error.value.message) == (
        "42704",
        'query could not complete because cluster "analytics" was dropped',
    )
    assert len(compute.peeks) == 0


async def test_dropping_a_pinned_replica_ends_its_peeks(make_compute, kit, unique):
    """A peek for one replica (SET cluster_replica) ends when that replica is dropped."""
    compute, _orchestrator, info = await two_replicas(make_compute, kit, unique, None, None)
    running = asyncio.create_task(
        compute.peek(info.id, compute_pb2.Peek(), replica_id=f"slow{unique}")
    )
    await asyncio.sleep(0.2)
    await compute.apply([info], [ReplicaSpec(f"fast{unique}", info.id)])
    with pytest.raises(LoupeError) as error:
        await asyncio.wait_for(running, 5)
    assert error.value.code == "42704"
    assert f'cluster replica "slow{unique}" was dropped' in error.value.message


async def test_dropping_the_index_ends_the_peeks_waiting_on_it(make_compute, kit, unique):
    """AllowCompaction to the empty frontier (DROP INDEX) ends the peeks of that index."""
    compute, orchestrator, info = await two_replicas(make_compute, kit, unique, None, None)
    await compute.create_dataflow(
        info.id,
        plan_pb2.DataflowDescription(
            id="d1", as_of=5, index_exports=[plan_pb2.IndexExport(index_id="i1", on_id="d1")]
        ),
    )
    running = asyncio.create_task(
        compute.peek(info.id, compute_pb2.Peek(uuid=f"i{unique}", target_id="i1", timestamp=7))
    )
    for replica in orchestrator.replicas.values():
        await assert_eventually(lambda replica=replica: _asked(replica))
    await compute.allow_compaction(info.id, ["i1"], 0, True)
    with pytest.raises(LoupeError) as error:
        await asyncio.wait_for(running, 5)
    assert (error.value.code, error.value.message) == (
        "42704",
        'query could not complete because index "i1" was dropped',
    )
    for replica in orchestrator.replicas.values():
        await assert_eventually(lambda replica=replica: _cancelled(replica, f"i{unique}"))


# -- a controller restart ------------------------------------------------------------------


async def test_rows_of_a_previous_run_are_replaced(
    make_compute, kit, storage, arrow_writer, unique
):
    """A new controller replaces the statuses it finds and retracts those of dropped replicas."""
    await arrow_writer.stop()  # the two runs' writers below are the only ones
    first_writer = kit.ArrowStorageWriter(*storage)
    await first_writer.start()
    compute, _ = await make_compute(writer=first_writer)
    info = cluster(unique)
    kept, dropped = f"u{unique}", f"d{unique}"
    await compute.apply([info], [ReplicaSpec(kept, info.id), ReplicaSpec(dropped, info.id)])
    await become(compute, kept, ("online", None, 1))
    await become(compute, dropped, ("online", None, 1))
    await compute.stop()
    await first_writer.stop()
    statuses = first_writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert sorted((r[0], r[2], r[3]) for r in statuses if r[0] in (kept, dropped)) == [
        (dropped, "offline", "controller-stopped"),
        (kept, "offline", "controller-stopped"),
    ]

    second_writer = kit.ArrowStorageWriter(*storage)
    await second_writer.start()
    compute, _ = await make_compute(writer=second_writer)
    await compute.apply([info], [ReplicaSpec(kept, info.id)])
    await become(compute, kept, ("online", None, 1))
    await second_writer.flush()
    statuses = second_writer.snapshot(MZ_CLUSTER_REPLICA_STATUSES.id)
    assert [(r[0], r[2]) for r in statuses if r[0] in (kept, dropped)] == [(kept, "online")]
    metrics = second_writer.snapshot(MZ_CLUSTER_REPLICA_METRICS.id)
    assert [r[0] for r in metrics if r[0] in (kept, dropped)] == [kept]
    await compute.stop()
    await second_writer.stop()
