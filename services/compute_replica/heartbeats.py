"""Heartbeats from a thread of their own, so neither the engine nor the command loop starves them.

A replica busy in a long engine step, or whose event loop is slow (a big
batch converted on it, a machine under memory pressure), must not look
dead to the controller. The heartbeat sender therefore owns a thread, an
asyncio loop in it and its own NATS connection: it needs nothing of the
replica's event loop, and the engine thread gives it the GIL at every
switch interval (5 ms) in pure Python and for good inside polars and
pyarrow calls, which release it.

What a heartbeat cannot prove by arriving, it says: how many engine calls
finished, how long the current one runs, and how long the replica's command
loop has not run (``LoopWatch``), so a wedged loop with a live heartbeat
thread is still found (the controller's ``loop-stalled`` restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from nats.aio.client import Client as NatsConnection

from loupe.common.aio import wait_event
from loupe.common.logging import get_logger
from loupe.common.transport import NatsUnavailable, connect, publish
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)


class LoopWatch:
    """Notes when the replica's event loop last ran; the heartbeat thread reads the lag."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._ran_at = time.monotonic()

    async def run(self) -> None:
        """On the watched loop, until cancelled."""
        while True:
            self._ran_at = time.monotonic()
            await asyncio.sleep(self.interval)

    def lag_seconds(self) -> float:
        """How much later than due the loop last ran (0 while it keeps time)."""
        return max(0.0, time.monotonic() - self._ran_at - self.interval)


class HeartbeatThread:
    """Publishes ``build()`` every ``interval`` from its own thread, loop and connection.

    Nothing is sent before ``begin()`` (the instance is created); the first
    heartbeat goes out at once then. ``stop()`` ends the thread and closes
    its connection.
    """

    def __init__(
        self,
        nats_url: str,
        subject: str,
        build: Callable[[], compute_pb2.ComputeResponse],
        *,
        interval: float,
        name: str,
    ) -> None:
        self.nats_url = nats_url
        self.subject = subject
        self.interval = interval
        self.name = name
        self._build = build
        self._begun = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The thread runs (started and not stopped yet)."""
        return self._thread.is_alive()

    def begin(self) -> None:
        """Start heartbeating now; idempotent."""
        if not self._begun.is_set():
            self._begun.set()
            self._poke()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (blocking, at most ``timeout`` seconds)."""
        self._stopped.set()
        self._poke()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _poke(self) -> None:
        with self._lock:
            loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(wake.set)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception:
            log.exception("heartbeat thread failed")

    async def _run(self) -> None:
        wake = asyncio.Event()
        with self._lock:
            self._loop, self._wake = asyncio.get_running_loop(), wake
        nc = await self._connect(wake)
        if nc is None:
            return
        try:
            while not self._stopped.is_set():
                wake.clear()
                if self._begun.is_set():
                    await self._send(nc)
                timeout = self.interval if self._begun.is_set() else None
                await wait_event(wake, timeout)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), timeout=2.0)
            with self._lock:
                self._loop = self._wake = None

    async def _connect(self, wake: asyncio.Event) -> NatsConnection | None:
        """The thread's own connection, retried until it works or the replica stops."""
        while not self._stopped.is_set():
            try:
                return await connect(self.nats_url, name=self.name)
            except NatsUnavailable as error:
                log.warning("heartbeat connection failed; retrying", error=str(error))
                wake.clear()
                await wait_event(wake, self.interval)
        return None

    async def _send(self, nc: NatsConnection) -> None:
        try:
            await publish(nc, self.subject, self._build())
            self.sent += 1
        except Exception as error:  # reconnecting: say so, try again next interval
            log.warning("heartbeat not sent", error=repr(error))
