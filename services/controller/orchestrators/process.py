"""The ``process`` orchestrator: every replica is a child process of the controller.

Each incarnation runs ``loupe compute-replica --replica-id … --incarnation N …``
with its output appended to ``<data_dir>/logs/replica-<id>.log``. Children
die with the controller (``die_with_parent``) and run in their own session,
so a Ctrl-C in the terminal reaches the controller, which then stops them in
order, rather than every replica at once. Stopping is SIGTERM, then SIGKILL
after a grace period. Incarnations are counted in
``<data_dir>/controller/incarnations.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loupe.common.aio import wait_event
from loupe.common.logging import get_logger
from loupe.common.nats_server import die_with_parent
from loupe.controller.orchestrators.base import (
    UNKNOWN_PROBE,
    IncarnationCounter,
    Orchestrator,
    ProcessProbe,
    ReplicaEvent,
    ReplicaSpec,
)

log = get_logger(__name__)

DEFAULT_PROGRAM = (sys.executable, "-m", "loupe.cli.main", "compute-replica")
# A replica that ran at least this long before crashing restarts after the base backoff.
STABLE_AFTER_SECONDS = 30.0


class ProcessOrchestrator(Orchestrator):
    """Runs each replica as a local child process (the embedded default)."""

    def __init__(
        self,
        data_dir: Path,
        nats_url: str,
        *,
        program: Sequence[str] = DEFAULT_PROGRAM,
        restart_backoff: float = 0.5,
        max_restart_backoff: float = 10.0,
        terminate_grace: float = 5.0,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir).resolve()
        self.nats_url = nats_url
        self.program = tuple(program)
        self.restart_backoff = restart_backoff
        self.max_restart_backoff = max_restart_backoff
        self.terminate_grace = terminate_grace
        self.env = dict(env or {})
        self.log_dir = self.data_dir / "logs"
        self.incarnations = IncarnationCounter(self.data_dir / "controller" / "incarnations.json")
        self._supervisors: dict[str, _Supervisor] = {}

    @classmethod
    def from_settings(cls, settings: Any) -> ProcessOrchestrator:
        return cls(
            settings.data_dir,
            settings.nats_url,
            terminate_grace=float(getattr(settings, "replica_terminate_grace", 5.0)),
        )

    async def ensure_replica(self, spec: ReplicaSpec) -> int:
        supervisor = self._supervisors.get(spec.replica_id)
        if supervisor is not None and supervisor.spec == spec:
            return supervisor.incarnation
        if supervisor is not None:
            log.info("replica spec changed; restarting it", replica_id=spec.replica_id)
            await supervisor.stop()
        supervisor = _Supervisor(self, spec)
        self._supervisors[spec.replica_id] = supervisor
        await supervisor.start()
        return supervisor.incarnation

    async def drop_replica(self, replica_id: str) -> None:
        supervisor = self._supervisors.pop(replica_id, None)
        if supervisor is not None:
            await supervisor.stop()

    async def restart_replica(self, replica_id: str) -> None:
        supervisor = self._supervisors.get(replica_id)
        if supervisor is not None:
            await supervisor.restart()

    async def stop(self) -> None:
        supervisors = list(self._supervisors.values())
        self._supervisors.clear()
        await asyncio.gather(*(s.stop() for s in supervisors), return_exceptions=True)

    def incarnation(self, replica_id: str) -> int | None:
        supervisor = self._supervisors.get(replica_id)
        return supervisor.incarnation if supervisor else None

    def replica_ids(self) -> list[str]:
        return sorted(self._supervisors)

    def pid(self, replica_id: str) -> int | None:
        """The pid of the replica's current process, if it is running."""
        supervisor = self._supervisors.get(replica_id)
        return supervisor.pid if supervisor else None

    def probe(self, replica_id: str) -> ProcessProbe:
        pid = self.pid(replica_id)
        return ProcessProbe("exited") if pid is None else probe_process(pid)

    def command(self, spec: ReplicaSpec, incarnation: int) -> list[str]:
        return [
            *self.program,
            "--replica-id",
            spec.replica_id,
            "--cluster-id",
            spec.cluster_id,
            "--incarnation",
            str(incarnation),
            "--workers",
            str(spec.workers),
            "--memory-limit-bytes",
            str(spec.memory_limit_bytes),
            "--nats-url",
            self.nats_url,
            "--data-dir",
            str(self.data_dir),
        ]

    def child_env(self) -> dict[str, str]:
        # A metrics port configured for the controller must not be inherited:
        # every replica would try to bind it.
        return {**os.environ, "LOUPE_METRICS_PORT": "0", **self.env}


class _Supervisor:
    """Keeps one replica running: spawn, watch, restart; stop on request."""

    def __init__(self, orchestrator: ProcessOrchestrator, spec: ReplicaSpec) -> None:
        self.orchestrator = orchestrator
        self.spec = spec
        self.incarnation = 0
        self.process: asyncio.subprocess.Process | None = None
        self._started_at = 0.0
        self._oom_kills_at_start: int | None = None
        # Where the current incarnation's output starts in the replica's log.
        self._log_path: Path | None = None
        self._log_offset = 0
        # The incarnation this supervisor terminated itself (drop, restart, shutdown).
        self._terminated_incarnation = 0
        self._stopping = False
        self._wake = asyncio.Event()
        # Spawning and terminating never interleave: a stop during a spawn
        # waits for it and then terminates the new process.
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._backoff = orchestrator.restart_backoff

    @property
    def pid(self) -> int | None:
        if self.process is None or self.process.returncode is not None:
            return None
        return self.process.pid

    async def start(self) -> None:
        async with self._lock:
            try:
                await self._spawn()
            except OSError:
                # The watch loop retries after a backoff.
                log.exception("cannot start replica", replica_id=self.spec.replica_id)
        self._task = asyncio.create_task(self._watch(), name=f"replica-{self.spec.replica_id}")

    async def restart(self) -> None:
        async with self._lock:
            await self._terminate()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        async with self._lock:
            await self._terminate()
        if self._task is not None:
            await self._task

    async def _spawn(self) -> None:
        orchestrator = self.orchestrator
        incarnation = orchestrator.incarnations.next(self.spec.replica_id)
        orchestrator.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = orchestrator.log_dir / f"replica-{self.spec.replica_id}.log"
        command = orchestrator.command(self.spec, incarnation)
        # A local append-only file the child inherits; opening it does not block for long.
        with open(log_path, "ab") as output:  # noqa: ASYNC230
            output.write(f"--- incarnation {incarnation}: {' '.join(command)}\n".encode())
            output.flush()
            self._log_path, self._log_offset = log_path, output.tell()
            self._oom_kills_at_start = oom_kill_count()
            self.process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                env=orchestrator.child_env(),
                preexec_fn=die_with_parent,
                start_new_session=True,
            )
        self.incarnation = incarnation
        self._started_at = time.monotonic()
        orchestrator._emit(
            ReplicaEvent("started", self.spec.replica_id, incarnation, pid=self.process.pid)
        )

    async def _terminate(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        self._terminated_incarnation = self.incarnation
        with contextlib.suppress(ProcessLookupError):
            if probe_process(process.pid).state == "stopped":
                # It cannot act on SIGTERM until continued: no grace to wait out.
                process.kill()
            else:
                process.terminate()
        try:
            await asyncio.wait_for(process.wait(), self.orchestrator.terminate_grace)
        except TimeoutError:
            log.warning(
                "replica did not stop in time; killing it",
                replica_id=self.spec.replica_id,
                grace=self.orchestrator.terminate_grace,
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _watch(self) -> None:
        process = self.process
        while True:
            requested = False
            if process is not None:
                returncode = await process.wait()
                requested = self._terminated_incarnation == self.incarnation
                self._report_exit(returncode, requested)
            if self._stopping:
                return
            await self._sleep(self._next_backoff(requested))
            async with self._lock:
                if self._stopping:
                    return
                try:
                    await self._spawn()
                    process = self.process
                except OSError:
                    log.exception("cannot start replica", replica_id=self.spec.replica_id)
                    process = None  # back off, then try again

    def _report_exit(self, returncode: int, requested: bool) -> None:
        signal_number = -returncode if returncode < 0 else None
        oom_killed = (
            signal_number == signal.SIGKILL
            and self._oom_kills_at_start is not None
            and (oom_kill_count() or 0) > self._oom_kills_at_start
        )
        oom = oom_killed or (
            returncode != 0
            and not requested
            and self._log_path is not None
            and ran_out_of_memory(self._log_path, self._log_offset)
        )
        self.orchestrator._emit(
            ReplicaEvent(
                "exited",
                self.spec.replica_id,
                self.incarnation,
                pid=self.process.pid if self.process else None,
                exit_code=returncode if returncode >= 0 else None,
                signal=signal_number,
                oom_killed=oom,
                requested=requested,
            )
        )

    def _next_backoff(self, requested: bool) -> float:
        base = self.orchestrator.restart_backoff
        if requested:
            return 0.0
        if time.monotonic() - self._started_at >= STABLE_AFTER_SECONDS:
            self._backoff = base
        delay = self._backoff
        # Crash loops back off exponentially, up to the maximum.
        self._backoff = min(self._backoff * 2, self.orchestrator.max_restart_backoff)
        return delay

    async def _sleep(self, delay: float) -> None:
        if delay <= 0:
            return
        await wait_event(self._wake, delay)


# What a replica that hit its OS memory limit (``loupe.compute_replica.os_limit``) last says:
# Rust's allocation failure (polars, then SIGABRT) or Python's.
_OUT_OF_MEMORY_MARKS = (b"memory allocation of ", b"MemoryError")
# How much of the end of an incarnation's output is searched for them.
_LOG_TAIL_BYTES = 64 * 1024


def ran_out_of_memory(log_path: Path, offset: int) -> bool:
    """Whether the output an incarnation wrote from ``offset`` on ends with an out-of-memory."""
    try:
        with open(log_path, "rb") as log_file:
            size = log_file.seek(0, os.SEEK_END)
            log_file.seek(max(offset, size - _LOG_TAIL_BYTES))
            tail = log_file.read()
    except OSError:
        return False
    return any(mark in tail for mark in _OUT_OF_MEMORY_MARKS)


def oom_kill_count() -> int | None:
    """OOM kills in this process's cgroup (v2), which replicas share; None if unknown."""
    try:
        with open("/proc/self/cgroup") as handle:
            path = next((line[3:].strip() for line in handle if line.startswith("0::")), None)
        if path is None:
            return None
        events = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
        for line in events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def probe_process(pid: int) -> ProcessProbe:
    """State and CPU time of process ``pid`` from ``/proc/<pid>/stat`` (Linux; else unknown).

    The process's own line gives its state and the CPU time of all its
    threads; whether it is working takes every thread's line
    (``/proc/<pid>/task/*/stat``): the replica's main thread sleeps in its
    event loop while its engine thread computes.
    """
    try:
        state, cpu = _stat(f"/proc/{pid}/stat")
    except FileNotFoundError:
        return ProcessProbe("exited")
    except (OSError, IndexError, ValueError):
        return UNKNOWN_PROBE
    if state in ("T", "t"):
        return ProcessProbe("stopped", cpu)
    if state in ("Z", "X", "x"):
        return ProcessProbe("exited", cpu)
    return ProcessProbe("running", cpu, working=_any_thread_working(pid))


def _stat(path: str) -> tuple[str, float]:
    """(state letter, user + system CPU seconds) of one ``stat`` file."""
    with open(path) as handle:
        stat = handle.read()
    # The command name (field 2) may hold spaces and parentheses: fields follow its last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _any_thread_working(pid: int) -> bool:
    """Some thread is runnable (R: on a CPU or waiting for one, as busy threads on a
    crowded machine are) or waiting in the kernel (D: e.g. paging under memory
    pressure), rather than asleep."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for thread in threads:
        try:
            state, _ = _stat(f"/proc/{pid}/task/{thread}/stat")
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
        if state in ("R", "D"):
            return True
    return False
