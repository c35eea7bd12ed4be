"""CPU and memory of this process, for heartbeats."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ProcessMetrics:
    """Samples CPU use (nano-cores since the previous sample) and resident memory."""

    def __init__(self) -> None:
        self._last_cpu = time.process_time()
        self._last_wall = time.monotonic()

    def cpu_nano_cores(self) -> int:
        """CPU time used per wall time since the last call, in billionths of a core."""
        cpu, wall = time.process_time(), time.monotonic()
        elapsed = wall - self._last_wall
        used = cpu - self._last_cpu
        self._last_cpu, self._last_wall = cpu, wall
        if elapsed <= 0:
            return 0
        return max(0, round(used / elapsed * 1e9))

    @staticmethod
    def memory_bytes() -> int:
        """The resident set size now (``/proc/self/statm``; peak RSS elsewhere)."""
        try:
            with open("/proc/self/statm") as statm:
                resident_pages = int(statm.read().split()[1])
            return resident_pages * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            # Not Linux: the peak is the best cheap approximation (KiB on Linux, bytes on macOS).
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if os.uname().sysname == "Darwin" else peak * 1024


class EngineActivity:
    """Calls into the engine: how many finished, and since when the current one runs.

    Written by the engine thread only and read by the heartbeat thread: a
    heartbeat then says "busy in a step for 40 s" rather than nothing, so
    the controller can tell a replica at work from a dead one.
    """

    def __init__(self) -> None:
        self.calls = 0
        self._busy_since: float | None = None

    def run(self, function: Callable[[], T]) -> T:
        """``function()``, counted and timed (on the engine thread)."""
        self._busy_since = time.monotonic()
        try:
            return function()
        finally:
            self.calls += 1
            self._busy_since = None

    def busy_seconds(self) -> float:
        """How long the running engine call has run; 0 when the engine is idle."""
        since = self._busy_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)
