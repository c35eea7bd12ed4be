"""Listening to a shard: its new updates, batch by batch, as the upper advances.

``Shard.listen(as_of)`` returns a ``Listener``. It polls consensus (one
``head``: cheap) and reads Blob only when the upper has moved, and then only
the parts that can hold the new times. Writers can make it prompt: give their
``Shard`` the ``notify`` hook from ``nats_upper_notifier(nc)``, which
publishes every new upper on ``loupe.storage.v1.<shard_id>.upper``; a listener
given a NATS connection subscribes there and polls as soon as one arrives
(the message only wakes it: consensus stays the truth, so a lost message
costs at most one poll interval).

Compaction forwards updates before the since to the since, so a listener is
exact only while the since stays at or before the last time it has read
(``frontier - 1``); past that, ``poll`` raises ``SinceError`` rather than
hand out updates twice or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from loupe.common.aio import wait_event
from loupe.common.logging import get_logger
from loupe.persist.shard import TIMESTAMP_COLUMN, Shard, SinceError, overlaps

log = get_logger(__name__)

UPPER_SUBJECT = "loupe.storage.v1.{shard_id}.upper"
# Polls when nothing wakes the listener; with NATS, only a fallback.
POLL_INTERVAL_S = 0.05
POLL_INTERVAL_WITH_NATS_S = 1.0


def upper_subject(shard_id: str) -> str:
    """The NATS subject writers publish a shard's new upper on (payload: decimal ASCII)."""
    return UPPER_SUBJECT.format(shard_id=shard_id)


def nats_upper_notifier(
    connection: Any, loop: asyncio.AbstractEventLoop | None = None
) -> Callable[[str, int], None]:
    """A ``Shard(notify=…)`` hook publishing each new upper on ``upper_subject``.

    ``connection`` is a nats-py client bound to ``loop`` (default: the running
    loop, so create the hook on it). The hook may be called from any thread;
    it does not wait for the publish.
    """
    bound = loop or asyncio.get_running_loop()
    pending: set[asyncio.Task[Any]] = set()

    def publish(shard_id: str, upper: int) -> None:
        coroutine = connection.publish(upper_subject(shard_id), str(upper).encode())
        if _on_loop(bound):
            task = bound.create_task(coroutine)
            pending.add(task)  # a strong reference until it is done
            task.add_done_callback(pending.discard)
        else:
            asyncio.run_coroutine_threadsafe(coroutine, bound)

    return publish


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class ListenBatch(NamedTuple):
    """The updates at ``previous upper <= t < upper`` (raw, not consolidated) and the new upper."""

    updates: pa.Table
    upper: int


class Listener:
    """New updates of a shard after ``as_of``; an iterator and an async iterator of batches.

    ``frontier`` is how far it has read: every update before it has been
    handed out (or is in ``snapshot(as_of)``). Iteration blocks until the
    upper passes the frontier and never ends until ``close``. The NATS
    notification wakes async iteration only; blocking iteration polls (and
    ``wake()`` cuts a wait short, from any thread).
    """

    def __init__(
        self,
        shard: Shard,
        as_of: int,
        *,
        nats: Any = None,
        poll_interval: float | None = None,
    ) -> None:
        self.shard = shard
        self.frontier = as_of + 1
        self.nats = nats
        if poll_interval is None:
            poll_interval = POLL_INTERVAL_S if nats is None else POLL_INTERVAL_WITH_NATS_S
        self.poll_interval = poll_interval
        self._closed = False
        self._wakeup = threading.Event()
        self._async_wakeup: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscription: Any = None
        # A shard not created yet is like an empty one (since 0, upper 0).
        state = shard.state(missing_ok=True)
        if state is not None and as_of < state.since:
            raise SinceError(
                f"shard {shard.shard_id}: cannot listen from {as_of}, "
                f"history is compacted up to {state.since}"
            )

    # -- one step ---------------------------------------------------------------

    def poll(self) -> ListenBatch | None:
        """The next batch if the upper has passed the frontier, else None (never blocks)."""
        while True:
            state = self.shard.state(missing_ok=True)
            if state is None or state.upper <= self.frontier:
                return None
            if state.since >= self.frontier:
                raise SinceError(
                    f"shard {self.shard.shard_id}: listener at {self.frontier - 1} fell behind "
                    f"the since ({state.since}): compaction merged updates it had not read"
                )
            parts = [p for p in state.parts if overlaps(p, self.frontier, state.upper)]
            updates = self.shard._read_unless_compacted(dataclasses.replace(state, parts=parts))
            if updates is None:
                continue  # compacted away under us: read the new state
            times = updates.column(TIMESTAMP_COLUMN)
            lower = pa.scalar(self.frontier, pa.uint64())
            upper = pa.scalar(state.upper, pa.uint64())
            updates = updates.filter(pc.and_(pc.greater_equal(times, lower), pc.less(times, upper)))
            self.frontier = state.upper
            return ListenBatch(updates, state.upper)

    def wake(self) -> None:
        """Poll now instead of at the next interval (thread-safe)."""
        self._wakeup.set()
        if self._loop is not None and self._async_wakeup is not None:
            self._loop.call_soon_threadsafe(self._async_wakeup.set)

    # -- blocking iteration -----------------------------------------------------

    def __iter__(self) -> Listener:
        return self

    def __next__(self) -> ListenBatch:
        batch = self.next()
        if batch is None:
            raise StopIteration
        return batch

    def next(self, timeout: float | None = None) -> ListenBatch | None:
        """The next batch, waiting for it; None once closed; TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            self._wakeup.clear()
            batch = self.poll()
            if batch is not None:
                return batch
            wait = self._wait(deadline, timeout)
            self._wakeup.wait(wait)
        return None

    def _wait(self, deadline: float | None, timeout: float | None) -> float:
        """How long to sleep before polling again; TimeoutError once ``deadline`` passed."""
        if deadline is None:
            return self.poll_interval
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"shard {self.shard.shard_id}: upper did not pass {self.frontier} in {timeout}s"
            )
        return min(self.poll_interval, remaining)

    # -- async iteration --------------------------------------------------------

    def __aiter__(self) -> Listener:
        return self

    async def __anext__(self) -> ListenBatch:
        batch = await self.anext()
        if batch is None:
            raise StopAsyncIteration
        return batch

    async def anext(self, timeout: float | None = None) -> ListenBatch | None:
        """``next`` for asyncio: polls off the loop, wakes on the NATS notification."""
        await self._start_async()
        assert self._async_wakeup is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            self._async_wakeup.clear()
            batch = await asyncio.to_thread(self.poll)
            if batch is not None:
                return batch
            await self._sleep_until_woken(self._wait(deadline, timeout))
        return None

    async def _sleep_until_woken(self, seconds: float) -> None:
        """Wait for a wakeup (a writer's NATS notification), at most ``seconds``; a cancel
        always propagates (``loupe.common.aio.wait_event``)."""
        assert self._async_wakeup is not None
        await wait_event(self._async_wakeup, seconds)

    async def _start_async(self) -> None:
        if self._async_wakeup is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._async_wakeup = asyncio.Event()
        if self.nats is not None:

            async def notified(_message: Any) -> None:
                assert self._async_wakeup is not None
                self._async_wakeup.set()

            self._subscription = await self.nats.subscribe(
                upper_subject(self.shard.shard_id), cb=notified
            )

    # -- closing ----------------------------------------------------------------

    def close(self) -> None:
        """Stop: iteration ends. From async code prefer ``aclose`` (it unsubscribes first)."""
        self._closed = True
        self.wake()
        subscription, self._subscription = self._subscription, None
        if subscription is not None and self._loop is not None and not self._loop.is_closed():
            # Not awaited: close() may run on the loop's own thread.
            asyncio.run_coroutine_threadsafe(subscription.unsubscribe(), self._loop)

    async def aclose(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(Exception):  # the connection may be closed already
                await subscription.unsubscribe()
        self.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
