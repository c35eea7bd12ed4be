"""Liveness that tells busy from dead (``liveness.py``), with real replica processes where it matters.

Busy replicas (long pure-Python, polars and GIL-holding steps) and a machine
with both cores busy keep their incarnation; a stopped (SIGSTOP) replica is
replaced at once and its process killed; a controller that stalled, or many
replicas silent at once, do not restart every replica together.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from loupe.common.nats_server import NatsServerProcess
from loupe.common.transport import connect
from loupe.controller.compute import ClusterInfo, ComputeController
from loupe.controller.liveness import (
    BUSY_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    LOOP_STALLED,
    PROCESS_STOPPED,
    STARTUP_TIMEOUT,
    LivenessPolicy,
    Silence,
)
from loupe.controller.orchestrators import ReplicaSpec
from loupe.controller.orchestrators.base import ProcessProbe, ReplicaEvent
from loupe.controller.orchestrators.process import ProcessOrchestrator, probe_process
from loupe.persist.location import default_uris
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

LIVENESS_REASONS = (PROCESS_STOPPED, HEARTBEAT_TIMEOUT, STARTUP_TIMEOUT, BUSY_TIMEOUT, LOOP_STALLED)


def restarts(reason: str) -> float:
    value = REGISTRY.get_sample_value("loupe_controller_replica_restarts_total", {"reason": reason})
    return value or 0.0


def liveness_restarts() -> float:
    return sum(restarts(reason) for reason in LIVENESS_REASONS)


def process_orchestrator(data_dir: Any, nats_url: str, **options: Any) -> ProcessOrchestrator:
    """Real replica processes heartbeating every 0.2 s that accept debug commands."""
    return ProcessOrchestrator(
        data_dir,
        nats_url,
        restart_backoff=0.1,
        env={"LOUPE_HEARTBEAT_INTERVAL": "0.2", "LOUPE_DEBUG_COMMANDS": "true"},
        **options,
    )


async def online(compute: ComputeController, replica_id: str, incarnation: int) -> None:
    def check() -> None:
        status = compute.replica_status(replica_id)
        assert status is not None
        assert (status.status, status.incarnation) == ("online", incarnation)

    await assert_eventually(check, timeout=30)


class HeartbeatLog:
    """Every heartbeat of a replica, as the test sees it on NATS."""

    def __init__(self) -> None:
        self.heartbeats: list[compute_pb2.Heartbeat] = []

    async def listen(self, nats_connection: Any, replica_id: str) -> None:
        async def record(msg: Any) -> None:
            response = compute_pb2.ComputeResponse.FromString(msg.data)
            if response.WhichOneof("kind") == "heartbeat":
                self.heartbeats.append(response.heartbeat)

        await nats_connection.subscribe(f"loupe.compute.v1.{replica_id}.response", cb=record)

    def longest_gap_ms(self) -> int:
        sent = [h.sent_at_ms for h in self.heartbeats]
        return max((b - a for a, b in itertools.pairwise(sent)), default=0)


async def send_command(nats_connection: Any, replica_id: str, **kind: Any) -> None:
    command = compute_pb2.ComputeCommand(incarnation=1, **kind)
    await nats_connection.publish(
        f"loupe.compute.v1.{replica_id}.command", command.SerializeToString()
    )


async def test_a_replica_busy_in_long_steps_keeps_its_incarnation(
    make_compute, data_dir, nats_url, nats_connection, unique
):
    """Steps longer than the timeout (pure Python, GIL-holding C, polars): no restart."""
    orchestrator = process_orchestrator(data_dir, nats_url)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=1.0)
    # Introspection off: its ticks are engine calls too, and this counts the steps.
    info = ClusterInfo(f"c{unique}", "quickstart", introspection_interval_ns=0)
    replica_id = f"u{unique}"
    beats = HeartbeatLog()
    await beats.listen(nats_connection, replica_id)
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await online(compute, replica_id, 1)
    before = liveness_restarts()

    for step in ("python:3", "gil:4", "polars:3"):
        await send_command(
            nats_connection,
            replica_id,
            update_configuration=compute_pb2.UpdateConfiguration(
                parameters={"debug_busy_step": step}
            ),
        )

    def all_steps_done() -> None:
        last = beats.heartbeats[-1]
        assert last.engine_calls == 3
        assert last.engine_busy_ms == 0

    await assert_eventually(all_steps_done, timeout=90)
    # The GIL-holding step starved the heartbeat thread past the timeout: the
    # controller saw silence and told it busy from the process's CPU time.
    assert beats.longest_gap_ms() > 1000
    assert max(h.engine_busy_ms for h in beats.heartbeats) >= 2000
    assert liveness_restarts() == before
    assert compute.replica_incarnation(replica_id) == 1
    await online(compute, replica_id, 1)


# Spins at full CPU for the given seconds (a separate interpreter: nothing shared with the test).
BURN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: sum(range(10_000))"


async def test_a_machine_with_both_cores_busy_restarts_no_replica(
    make_compute, data_dir, nats_url, unique
):
    """Two spinning processes per core for 8 s, a 1 s heartbeat timeout: every incarnation stays."""
    orchestrator = process_orchestrator(data_dir, nats_url)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=1.0)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_ids = [f"u{unique}a", f"u{unique}b"]
    await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in replica_ids])
    for replica_id in replica_ids:
        await online(compute, replica_id, 1)
    before = liveness_restarts()

    burners = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", BURN, "8")
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        codes = await asyncio.wait_for(asyncio.gather(*(b.wait() for b in burners)), 60)
    finally:
        for burner in burners:
            with contextlib.suppress(ProcessLookupError):
                burner.kill()
    assert codes == [0] * len(burners)
    assert liveness_restarts() == before
    assert [compute.replica_incarnation(rid) for rid in replica_ids] == [1, 1]
    for replica_id in replica_ids:
        await online(compute, replica_id, 1)


async def test_a_stopped_replica_is_killed_and_replaced_at_once(
    make_compute, data_dir, nats_url, unique
):
    """SIGSTOP past the timeout: replaced by incarnation 2, the stopped process killed, no orphan."""
    # A grace this long would show: a stopped process cannot act on SIGTERM.
    orchestrator = process_orchestrator(data_dir, nats_url, terminate_grace=60.0)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=1.0)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await online(compute, replica_id, 1)
    stopped = orchestrator.pid(replica_id)
    assert stopped is not None
    before = restarts(PROCESS_STOPPED)

    os.kill(stopped, signal.SIGSTOP)
    began = time.monotonic()
    await online(compute, replica_id, 2)
    assert time.monotonic() - began < 30
    assert restarts(PROCESS_STOPPED) == before + 1
    assert probe_process(stopped).state == "exited"
    with pytest.raises(ProcessLookupError):
        os.kill(stopped, signal.SIGCONT)  # nothing left to continue
    await asyncio.sleep(1.5)
    await online(compute, replica_id, 2)


async def test_a_stalled_controller_restarts_no_replica(make_compute, unique):
    """The controller's loop blocked past the timeout: silence it did not hear is forgiven."""
    compute, orchestrator = await make_compute(heartbeat_timeout=0.5)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_ids = [f"u{unique}{n}" for n in range(3)]
    await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in replica_ids])
    for replica_id in replica_ids:
        await online(compute, replica_id, 1)
    before = liveness_restarts()

    # On purpose: blocks the loop the controller (and these in-process replicas) run on.
    time.sleep(2.0)  # noqa: ASYNC251
    await asyncio.sleep(1.5)
    assert liveness_restarts() == before
    assert [compute.replica_incarnation(rid) for rid in replica_ids] == [1, 1, 1]
    assert not [e for e in orchestrator.events if e.kind == "exited"]


async def test_replicas_silent_at_once_are_restarted_one_per_window(make_compute, unique):
    """Three replicas fall silent together: one restart per heartbeat-timeout window, not three."""
    timeout = 1.5
    compute, orchestrator = await make_compute(heartbeat_timeout=timeout)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_ids = [f"u{unique}{n}" for n in range(3)]
    await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in replica_ids])
    for replica_id in replica_ids:
        await online(compute, replica_id, 1)
    restarted: list[float] = []

    def note(event: ReplicaEvent) -> None:
        if event.kind == "started" and event.incarnation == 2:
            restarted.append(time.monotonic())

    orchestrator.add_listener(note)
    for replica_id in replica_ids:
        orchestrator.replicas[replica_id].behaviour.silent = True

    await assert_eventually(lambda: _assert(len(restarted) == 3), timeout=30)
    gaps = [b - a for a, b in itertools.pairwise(restarted)]
    assert min(gaps) >= timeout * 0.9, gaps
    for replica_id in replica_ids:
        await online(compute, replica_id, 2)


async def test_a_heartbeating_replica_whose_loop_is_wedged_is_restarted(
    make_compute, nats_connection, unique
):
    """Heartbeats that say the command loop has not run for the busy timeout: restarted."""
    compute, _ = await make_compute(heartbeat_timeout=0.5, busy_timeout=2.0)
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_id = f"u{unique}"
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await online(compute, replica_id, 1)
    before = restarts(LOOP_STALLED)

    wedged = compute_pb2.ComputeResponse(
        replica_id=replica_id, incarnation=1, heartbeat=compute_pb2.Heartbeat(loop_lag_ms=2500)
    )
    await nats_connection.publish(
        f"loupe.compute.v1.{replica_id}.response", wedged.SerializeToString()
    )
    await online(compute, replica_id, 2)
    assert restarts(LOOP_STALLED) == before + 1


def _assert(condition: bool) -> None:
    assert condition


def test_verdicts_for_a_silent_replica() -> None:
    """Stopped is dead, exited waits for its event, CPU advancing is busy up to the busy timeout."""
    policy = LivenessPolicy(heartbeat_timeout=1.0, startup_timeout=10.0, busy_timeout=5.0)
    stopped = ProcessProbe("stopped", 1.0)
    assert policy.verdict(Silence(), 1.5, True, stopped, 100.0) == PROCESS_STOPPED
    assert policy.verdict(Silence(), 1.5, True, ProcessProbe("exited"), 100.0) is None
    unknown = ProcessProbe("unknown")
    assert policy.verdict(Silence(), 1.5, True, unknown, 100.0) == HEARTBEAT_TIMEOUT
    assert policy.verdict(Silence(), 11.0, False, unknown, 100.0) == STARTUP_TIMEOUT

    busy = Silence()
    assert policy.verdict(busy, 1.5, True, ProcessProbe("running", 10.0), 100.0) is None
    # Half a core over a second: busy, waited on until the busy timeout.
    assert policy.verdict(busy, 2.5, True, ProcessProbe("running", 10.5), 101.0) is None
    assert busy.busy is True
    assert policy.verdict(busy, 5.5, True, ProcessProbe("running", 12.5), 105.0) == BUSY_TIMEOUT

    idle = Silence()
    assert policy.verdict(idle, 1.5, True, ProcessProbe("running", 10.0), 100.0) is None
    # A hundredth of a core, asleep at the first look: not working.
    idle_probe = ProcessProbe("running", 10.01, working=True)
    assert policy.verdict(idle, 2.5, True, idle_probe, 101.0) == HEARTBEAT_TIMEOUT

    # A twentieth of a core on a crowded machine, but runnable whenever looked at: busy.
    crowded = Silence()
    assert policy.verdict(crowded, 1.5, True, ProcessProbe("running", 10.0, True), 100.0) is None
    assert policy.verdict(crowded, 2.5, True, ProcessProbe("running", 10.05, True), 101.0) is None
    assert crowded.busy is True


def test_uncertain_restarts_take_turns_and_stalls_are_measured() -> None:
    policy = LivenessPolicy(heartbeat_timeout=2.0, startup_timeout=10.0, busy_timeout=60.0)
    assert policy.may_restart(HEARTBEAT_TIMEOUT, 100.0)
    assert not policy.may_restart(STARTUP_TIMEOUT, 101.0)
    assert policy.may_restart(PROCESS_STOPPED, 101.0)  # proof of death does not wait
    assert policy.may_restart(HEARTBEAT_TIMEOUT, 102.5)
    assert policy.stalled_for(0.25, 0.3) == 0.0
    assert policy.stalled_for(0.25, 3.25) == pytest.approx(3.0)
    assert policy.wedged(61_000)
    assert not policy.wedged(5_000)


async def test_a_nats_outage_restarts_no_replica(arrow_writer, data_dir, tmp_path, kit, unique):
    """NATS down for longer than the timeout: nobody could heartbeat, so nobody is restarted."""
    server = NatsServerProcess(tmp_path / "outage-nats")
    server.start()
    nc = await connect(server.url, name="test-controller")
    orchestrator = kit.InProcessOrchestrator(server.url)
    blob_uri, consensus_uri = default_uris(data_dir)
    compute = ComputeController(
        nc,
        orchestrator,
        arrow_writer,
        blob_uri=blob_uri,
        consensus_uri=consensus_uri,
        heartbeat_timeout=3.0,
        hello_resend_interval=0.3,
    )
    await compute.start()
    try:
        info = ClusterInfo(f"c{unique}", "quickstart")
        replica_ids = [f"u{unique}{n}" for n in range(2)]
        await compute.apply([info], [ReplicaSpec(rid, info.id) for rid in replica_ids])
        for replica_id in replica_ids:
            await online(compute, replica_id, 1)
        before = liveness_restarts()

        server.stop()
        await asyncio.sleep(5.0)
        server.start()
        logs = {rid: HeartbeatLog() for rid in replica_ids}
        listener = await connect(server.url, name="test-listener")
        for replica_id, log in logs.items():
            await log.listen(listener, replica_id)

        def heard_again() -> None:
            assert all(log.heartbeats for log in logs.values())

        await assert_eventually(heard_again, timeout=20)
        await asyncio.sleep(1.0)  # the controller handles what it heard
        await listener.close()
        assert liveness_restarts() == before
        assert [compute.replica_incarnation(rid) for rid in replica_ids] == [1, 1]
    finally:
        await compute.stop()
        await nc.close()
        server.stop()


async def test_probing_a_process_tells_asleep_working_stopped_and_exited() -> None:
    """``/proc`` says what a process does: the facts the verdicts are made of."""
    sleeper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    spinner = await asyncio.create_subprocess_exec(sys.executable, "-c", BURN, "60")
    try:
        await assert_eventually(lambda: _assert(probe_process(spinner.pid).working))
        # Once its interpreter has started, the sleeper sleeps.
        await assert_eventually(lambda: _assert(not probe_process(sleeper.pid).working))
        asleep = probe_process(sleeper.pid)
        assert asleep.state == "running"
        assert asleep.cpu_seconds is not None

        os.kill(spinner.pid, signal.SIGSTOP)
        await assert_eventually(lambda: _assert(probe_process(spinner.pid).state == "stopped"))
        sleeper.kill()
        await sleeper.wait()
        assert probe_process(sleeper.pid).state == "exited"
    finally:
        for process in (sleeper, spinner):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
