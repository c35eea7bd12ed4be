"""The orchestrator extension point: something that runs compute replicas.

An orchestrator keeps one running instance per replica it was asked to
ensure. Every (re)start is a new *incarnation*: a number that strictly
increases per replica, also across controller restarts, so the compute
controller can tell a replica's current life from a zombie of an earlier one.

The orchestrator tells its listeners (plain callables, called on the event
loop) about every start and every exit as ``ReplicaEvent``s. A ``started``
event for an incarnation is always delivered before that incarnation can be
exited, and before ``ensure_replica``/``restart_replica`` returns for it.
After an unrequested exit the orchestrator restarts the replica by itself,
after a short backoff, as a new incarnation.
"""

from __future__ import annotations

import abc
import json
import os
import signal as signals
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loupe.common.logging import get_logger
from loupe.common.plugins import Registry

log = get_logger(__name__)

ORCHESTRATORS = Registry("loupe.orchestrators")


@dataclass(frozen=True)
class ReplicaSpec:
    """What an orchestrator needs to run one replica."""

    replica_id: str
    cluster_id: str
    # Timely-style workers of the replica, and its memory budget: its SIZE (``loupe.sizes``).
    workers: int = 1
    # 0: no budget, no OS limit.
    memory_limit_bytes: int = 0


@dataclass(frozen=True)
class ReplicaEvent:
    """A replica incarnation started or exited."""

    kind: Literal["started", "exited"]
    replica_id: str
    incarnation: int
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    # The kernel's OOM killer, or the process's own OS memory limit (its SIZE's).
    oom_killed: bool = False
    # The orchestrator stopped it itself (drop, restart on request, shutdown).
    requested: bool = False

    @property
    def reason(self) -> str | None:
        """Why an incarnation went away: ``exited``, ``killed`` or ``oom-killed``."""
        if self.kind != "exited":
            return None
        if self.oom_killed:
            return "oom-killed"
        if self.signal is not None:
            return "killed"
        return "exited"

    def describe(self) -> str:
        if self.kind == "started":
            return f"started (pid {self.pid})"
        if self.signal is not None:
            try:
                name = signals.Signals(self.signal).name
            except ValueError:
                name = "unknown"
            what = f"signal {self.signal} ({name})"
            return f"oom-killed, {what}" if self.oom_killed else f"killed by {what}"
        if self.oom_killed:
            return f"out of memory, exited with code {self.exit_code}"
        return f"exited with code {self.exit_code}"


ReplicaListener = Callable[[ReplicaEvent], None]


@dataclass(frozen=True)
class ProcessProbe:
    """What an orchestrator can see of a replica's process, for telling busy from dead.

    ``running``: it exists and may run (CPU time in ``cpu_seconds`` when
    known; ``working`` when it is on a CPU's run queue or waiting in the
    kernel, e.g. for memory, rather than asleep); ``stopped``: it is stopped
    (SIGSTOP, a debugger) and cannot answer, which counts as dead;
    ``exited``: gone or a zombie (the exit event follows); ``unknown``: the
    orchestrator cannot tell.
    """

    state: Literal["running", "stopped", "exited", "unknown"]
    cpu_seconds: float | None = None
    working: bool = False


UNKNOWN_PROBE = ProcessProbe("unknown")


class Orchestrator(abc.ABC):
    """Runs compute replicas; one implementation per platform (processes, Kubernetes)."""

    def __init__(self) -> None:
        self._listeners: list[ReplicaListener] = []

    @classmethod
    @abc.abstractmethod
    def from_settings(cls, settings: Any) -> Orchestrator:
        """Build from the controller's settings (``data_dir``, ``nats_url``, …)."""

    def add_listener(self, listener: ReplicaListener) -> None:
        """Call ``listener`` with every ``ReplicaEvent`` from now on."""
        self._listeners.append(listener)

    def _emit(self, event: ReplicaEvent) -> None:
        log.info(
            "replica " + event.describe(),
            replica_id=event.replica_id,
            incarnation=event.incarnation,
            requested=event.requested,
        )
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("replica event listener failed", event=event)

    async def start(self) -> None:  # noqa: B027 - optional hook, most need nothing
        """Prepare (connect to the platform); called once before any replica."""

    @abc.abstractmethod
    async def ensure_replica(self, spec: ReplicaSpec) -> int:
        """Make ``spec`` run; idempotent. Returns the current incarnation.

        A replica already running with another spec is restarted with the new one.
        """

    @abc.abstractmethod
    async def drop_replica(self, replica_id: str) -> None:
        """Stop the replica for good; idempotent."""

    @abc.abstractmethod
    async def restart_replica(self, replica_id: str) -> None:
        """Stop the current incarnation (e.g. it hung) and start a new one."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop every replica (controller shutdown); nothing is left running."""

    def probe(self, replica_id: str) -> ProcessProbe:
        """The state of the replica's current process (``unknown`` unless overridden)."""
        return UNKNOWN_PROBE

    @abc.abstractmethod
    def incarnation(self, replica_id: str) -> int | None:
        """The current incarnation of ``replica_id``, or None if not managed."""

    @abc.abstractmethod
    def replica_ids(self) -> list[str]:
        """The replicas this orchestrator manages."""


class IncarnationCounter:
    """Per-replica incarnation numbers that survive restarts, in one JSON file.

    The counter is written (atomically, fsynced) before the incarnation runs,
    so no number is ever handed out twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._last: dict[str, int] = {}
        if self.path.exists():
            try:
                self._last = {str(k): int(v) for k, v in json.loads(self.path.read_text()).items()}
            except (ValueError, AttributeError) as error:
                raise RuntimeError(f"incarnation file {self.path} is corrupt: {error}") from error

    def last(self, replica_id: str) -> int:
        return self._last.get(replica_id, 0)

    def next(self, replica_id: str) -> int:
        """Allocate and persist the next incarnation of ``replica_id``."""
        incarnation = self.last(replica_id) + 1
        self._last[replica_id] = incarnation
        scratch = self.path.with_name(f".{self.path.name}.tmp")
        with open(scratch, "w") as handle:
            json.dump(self._last, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        scratch.replace(self.path)
        return incarnation


def load_orchestrator(name: str, settings: Any) -> Orchestrator:
    """The orchestrator plugin ``name`` (an entry point of ``loupe.orchestrators``)."""
    cls = ORCHESTRATORS.load(name)
    return cls.from_settings(settings)  # type: ignore[no-any-return]
