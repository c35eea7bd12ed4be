"""The ``process`` orchestrator with real child processes."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from loupe.common.settings import BaseSettings
from loupe.controller.orchestrators import ReplicaEvent, ReplicaSpec, load_orchestrator
from loupe.controller.orchestrators.process import ProcessOrchestrator
from loupe.testing import assert_eventually

# A replica stand-in that ignores SIGTERM, to show the SIGKILL escalation.
STUBBORN = (
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
)
SLEEPER = (sys.executable, "-c", "import time; time.sleep(120)")
# A replica stand-in under a replica's OS memory limit (a 1-byte budget: 1 GiB and 2 bytes)
# asking polars for 16 GB: the allocation fails and Rust aborts the process.
OUT_OF_MEMORY = (
    sys.executable,
    "-c",
    "from loupe.compute_replica.os_limit import limit_memory; limit_memory(1);"
    " import polars as pl; pl.select(pl.int_range(0, 2_000_000_000))",
)


def running(pid: int | None) -> bool:
    """Alive and not a zombie (a reaped child's pid is gone)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def orchestrator_for(data_dir: Path, nats_url: str, program, **options) -> ProcessOrchestrator:
    return ProcessOrchestrator(data_dir, nats_url, program=program, restart_backoff=0.1, **options)


def recorder(orchestrator: ProcessOrchestrator) -> list[ReplicaEvent]:
    events: list[ReplicaEvent] = []
    orchestrator.add_listener(events.append)
    return events


async def test_killed_replica_is_reported_and_returns_as_new_incarnation(
    data_dir, nats_url, kit, unique
):
    """SIGKILL: reported as killed (signal 9), restarted as incarnation 2 with a new pid."""
    orchestrator = orchestrator_for(data_dir, nats_url, kit.FAKE_REPLICA_PROGRAM)
    events = recorder(orchestrator)
    replica_id = f"u{unique}"
    try:
        assert await orchestrator.ensure_replica(ReplicaSpec(replica_id, "c1", workers=2)) == 1
        first = orchestrator.pid(replica_id)
        assert running(first)
        os.kill(first, signal.SIGKILL)

        def restarted() -> None:
            assert [(e.kind, e.incarnation) for e in events] == [
                ("started", 1),
                ("exited", 1),
                ("started", 2),
            ]

        await assert_eventually(restarted)
        exited = events[1]
        assert (exited.signal, exited.reason, exited.requested) == (9, "killed", False)
        assert orchestrator.incarnation(replica_id) == 2
        second = orchestrator.pid(replica_id)
        assert running(second)
        assert second != first
        assert not running(first)
        log_text = (data_dir / "logs" / f"replica-{replica_id}.log").read_text()
        assert f"--replica-id {replica_id}" in log_text
        assert "--incarnation 2" in log_text
        assert "--workers 2" in log_text
    finally:
        await orchestrator.stop()
    assert not running(orchestrator.pid(replica_id))


async def test_exit_code_is_reported_as_exited(data_dir, nats_url):
    """A replica that exits by itself is reported with its exit code, then restarted."""
    failing = (sys.executable, "-c", "import sys; sys.exit(3)")
    orchestrator = orchestrator_for(data_dir, nats_url, failing)
    events = recorder(orchestrator)
    try:
        await orchestrator.ensure_replica(ReplicaSpec("u1", "c1"))

        def exited_twice() -> None:
            assert [e.incarnation for e in events if e.kind == "exited"][:2] == [1, 2]

        await assert_eventually(exited_twice)
        exit_event = next(e for e in events if e.kind == "exited")
        assert (exit_event.exit_code, exit_event.signal, exit_event.reason) == (3, None, "exited")
    finally:
        await orchestrator.stop()


async def test_a_replica_past_its_os_memory_limit_is_reported_out_of_memory(
    data_dir, nats_url, unique
):
    """Its own limit, not the machine's, ends it: the exit says so, and it comes back."""
    orchestrator = orchestrator_for(data_dir, nats_url, OUT_OF_MEMORY)
    events = recorder(orchestrator)
    replica_id = f"m{unique}"
    try:
        await orchestrator.ensure_replica(ReplicaSpec(replica_id, "c1"))

        def out_of_memory() -> ReplicaEvent:
            exited = [e for e in events if e.kind == "exited"]
            assert exited
            return exited[0]

        exit_event = await assert_eventually(out_of_memory, timeout=60)
        assert exit_event.oom_killed
        assert exit_event.reason == "oom-killed"
        assert exit_event.describe().startswith("oom-killed, signal 6")
        await assert_eventually(lambda: _incarnation_is(orchestrator, replica_id, 2), timeout=30)
    finally:
        await orchestrator.stop()


async def test_drop_terminates_the_child_for_good(data_dir, nats_url):
    """Drop: SIGTERM, reported as requested, and no restart."""
    orchestrator = orchestrator_for(data_dir, nats_url, SLEEPER)
    events = recorder(orchestrator)
    await orchestrator.ensure_replica(ReplicaSpec("u1", "c1"))
    pid = orchestrator.pid("u1")
    assert running(pid)
    await orchestrator.drop_replica("u1")
    assert not running(pid)
    assert [(e.kind, e.requested) for e in events] == [("started", False), ("exited", True)]
    assert events[1].signal == signal.SIGTERM
    assert orchestrator.replica_ids() == []
    await orchestrator.drop_replica("u1")  # idempotent


async def test_stubborn_replica_is_killed_after_the_grace(data_dir, nats_url):
    """A child that ignores SIGTERM gets SIGKILL after the grace period."""
    orchestrator = orchestrator_for(data_dir, nats_url, STUBBORN, terminate_grace=0.3)
    events = recorder(orchestrator)
    await orchestrator.ensure_replica(ReplicaSpec("u1", "c1"))
    pid = orchestrator.pid("u1")
    await assert_eventually(lambda: _ignores_sigterm(pid))
    await orchestrator.drop_replica("u1")
    assert not running(pid)
    assert events[-1].signal == signal.SIGKILL


def _ignores_sigterm(pid: int | None) -> None:
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(
        next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
    )
    assert ignored & (1 << (signal.SIGTERM - 1))


async def test_shutdown_leaves_nothing_running(data_dir, nats_url):
    """stop() ends every replica and none is restarted afterwards."""
    orchestrator = orchestrator_for(data_dir, nats_url, SLEEPER)
    events = recorder(orchestrator)
    for replica_id in ("u1", "u2", "u3"):
        await orchestrator.ensure_replica(ReplicaSpec(replica_id, "c1"))
    pids = [orchestrator.pid(r) for r in ("u1", "u2", "u3")]
    assert all(running(pid) for pid in pids)
    await orchestrator.stop()
    assert not any(running(pid) for pid in pids)
    assert sorted(e.kind for e in events) == ["exited"] * 3 + ["started"] * 3
    assert all(e.requested for e in events if e.kind == "exited")


async def test_incarnations_increase_across_controller_restarts(data_dir, nats_url):
    """The incarnation counter is persisted: a new orchestrator continues it."""
    first = orchestrator_for(data_dir, nats_url, SLEEPER)
    assert await first.ensure_replica(ReplicaSpec("u1", "c1")) == 1
    await first.restart_replica("u1")
    await assert_eventually(lambda: _incarnation_is(first, "u1", 2))
    await first.stop()

    second = orchestrator_for(data_dir, nats_url, SLEEPER)
    try:
        assert await second.ensure_replica(ReplicaSpec("u1", "c1")) == 3
        assert await second.ensure_replica(ReplicaSpec("u1", "c1")) == 3  # idempotent
        assert await second.ensure_replica(ReplicaSpec("u2", "c1")) == 1
        # A new spec (another size) restarts the replica as a new incarnation.
        assert await second.ensure_replica(ReplicaSpec("u1", "c1", workers=4)) == 4
    finally:
        await second.stop()
    assert (data_dir / "controller" / "incarnations.json").exists()


def _incarnation_is(orchestrator: ProcessOrchestrator, replica_id: str, expected: int) -> None:
    assert orchestrator.incarnation(replica_id) == expected
    assert running(orchestrator.pid(replica_id))


def test_process_orchestrator_is_the_registered_plugin(data_dir):
    """The `process` entry point loads through the plugin registry."""
    settings = BaseSettings(data_dir=data_dir, nats_url="nats://127.0.0.1:4222")
    orchestrator = load_orchestrator("process", settings)
    assert isinstance(orchestrator, ProcessOrchestrator)
    assert orchestrator.command(ReplicaSpec("u7", "u2", 2, memory_limit_bytes=1024), 5)[3:] == [
        "compute-replica",
        "--replica-id",
        "u7",
        "--cluster-id",
        "u2",
        "--incarnation",
        "5",
        "--workers",
        "2",
        "--memory-limit-bytes",
        "1024",
        "--nats-url",
        "nats://127.0.0.1:4222",
        "--data-dir",
        str(data_dir.resolve()),
    ]
