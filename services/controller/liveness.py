"""Liveness: when a silent replica is restarted, and when it is left alone.

A heartbeat that does not come is weak evidence: the replica may be dead,
stopped, or busy (its heartbeat thread starved by C code holding the GIL),
or the machine, NATS or the controller itself may be slow. Restarting on
silence alone once restarted every replica of a machine together, because
the machine ran out of memory. The rules, checked every ``check_interval``:

1. Silent means no heartbeat for ``heartbeat_timeout`` (``startup_timeout``
   before the first one of an incarnation).
2. A silent replica's process is looked at (``Orchestrator.probe``):
   stopped (SIGSTOP) counts as dead and is restarted at once
   (``process-stopped``); exited is left to the orchestrator's exit event;
   running and busy gets up to ``busy_timeout`` of silence (then
   ``busy-timeout``); anything else is restarted (``heartbeat-timeout``, or
   ``startup-timeout``). Busy is measured over at least ``CPU_SAMPLE_SECONDS``:
   CPU time advancing by ``BUSY_CPU_SHARE`` of a core, or the process found
   working (runnable, or waiting in the kernel for memory) at both ends of
   the window: on a machine with load 14 on 2 cores a busy process gets a
   seventh of a core, but it is always runnable, while an idle one sleeps.
3. Restarts on uncertain evidence (every reason but ``process-stopped``) go
   one per ``heartbeat_timeout`` window: when many replicas fall silent at
   once the cause is more likely the machine than all of them, and one
   restart a window cannot take them all down together.
4. Time the controller did not look does not count: when its watch loop
   wakes more than a check interval late (it was stalled) or its NATS
   connection is down, every replica's silence is shortened by that time.
5. A replica that heartbeats but whose command loop has not run for
   ``busy_timeout`` (``loop_lag_ms``) is wedged, and restarted (``loop-stalled``).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from loupe.controller.orchestrators.base import ProcessProbe

PROCESS_STOPPED = "process-stopped"
HEARTBEAT_TIMEOUT = "heartbeat-timeout"
STARTUP_TIMEOUT = "startup-timeout"
BUSY_TIMEOUT = "busy-timeout"
LOOP_STALLED = "loop-stalled"
# Proof of death: not limited to one per window.
CERTAIN = frozenset({PROCESS_STOPPED})

# A silent process using at least this share of a core is at work, not dead
# (an idle replica uses a few percent; a busy one on a loaded machine more).
BUSY_CPU_SHARE = 0.1
# CPU time is measured over at least this long (clock ticks are 10 ms).
CPU_SAMPLE_SECONDS = 0.5

REPLICA_RESTARTS = Counter(
    "loupe_controller_replica_restarts",
    "Replica restarts by reason: liveness verdicts and unrequested process exits",
    ["reason"],
)


@dataclass
class Silence:
    """What the controller learned of one replica since its last heartbeat."""

    # (monotonic time, CPU seconds of its process, working) when last sampled.
    sample: tuple[float, float, bool] | None = None
    # Known busy (True), known idle (False) or not known yet (None).
    busy: bool | None = None
    # Share of a core its process used over the last sample window, for logs.
    cpu_share: float | None = None


class LivenessPolicy:
    """The rules above, without the controller's state: verdicts from what is known."""

    def __init__(
        self, heartbeat_timeout: float, startup_timeout: float, busy_timeout: float
    ) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.startup_timeout = max(startup_timeout, heartbeat_timeout)
        self.busy_timeout = max(busy_timeout, heartbeat_timeout)
        self.check_interval = min(0.25, heartbeat_timeout / 4)
        self._last_uncertain_restart: float | None = None

    def stalled_for(self, asked: float, slept: float) -> float:
        """Seconds the controller was not looking: oversleep beyond one check interval, else 0."""
        late = slept - asked
        return late if late > self.check_interval else 0.0

    def verdict(
        self, silence: Silence, silent_for: float, started: bool, probe: ProcessProbe, now: float
    ) -> str | None:
        """The reason to restart a silent replica, or None to keep waiting."""
        if probe.state == "stopped":
            return PROCESS_STOPPED
        if probe.state == "exited":
            return None  # the orchestrator reports the exit and restarts it
        if probe.state == "running" and probe.cpu_seconds is not None:
            self._sample(silence, probe, probe.cpu_seconds, now)
            if silence.busy is None:
                return None  # the CPU rate is known at the next look
            if silence.busy:
                return BUSY_TIMEOUT if silent_for > self.busy_timeout else None
        return HEARTBEAT_TIMEOUT if started else STARTUP_TIMEOUT

    def _sample(self, silence: Silence, probe: ProcessProbe, cpu: float, now: float) -> None:
        if silence.sample is None:
            silence.sample = (now, cpu, probe.working)
            return
        since, before, working = silence.sample
        if now - since < CPU_SAMPLE_SECONDS:
            return
        share = (cpu - before) / (now - since)
        silence.busy = share >= BUSY_CPU_SHARE or (working and probe.working)
        silence.cpu_share = round(share, 3)
        silence.sample = (now, cpu, probe.working)

    def may_restart(self, reason: str, now: float) -> bool:
        """Whether a restart for ``reason`` may happen now (rule 3); True claims the window."""
        if reason in CERTAIN:
            return True
        last = self._last_uncertain_restart
        if last is not None and now - last < self.heartbeat_timeout:
            return False
        self._last_uncertain_restart = now
        return True

    def wedged(self, loop_lag_ms: int) -> bool:
        """A heartbeat saying the replica's command loop has not run for ``busy_timeout``."""
        return loop_lag_ms > self.busy_timeout * 1000
