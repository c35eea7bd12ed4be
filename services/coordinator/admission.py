"""Overload slows statements down; it does not fail them (issue 11, item 4).

Work that arrives faster than it can be done waits in a bounded queue in
front of it (``AdmissionQueue``): peeks in flight to each cluster, DDL (one
catalog transaction at a time), table writes (one at a time). A statement
waiting in a queue, or asking a service that is away or slow
(``until_answered``), is limited only by its ``statement_timeout`` (57014,
the deadline the coordinator sets for every statement in
``STATEMENT_DEADLINE``), never by an internal timeout. Only a queue already
holding ``max_waiting`` statements refuses one more, with 53000
(insufficient_resources), which a client may retry.

Every queue shows in the metrics: ``loupe_coordinator_queue_waiting`` and
``…_in_flight`` (gauges), ``…_admitted_total``, ``…_waited_total`` (admitted
after waiting), ``…_rejected_total`` and ``…_wait_seconds`` (a histogram),
each labelled ``queue``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import TypeVar

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.coordinator import metrics
from loupe.coordinator.catalog_relations import TRANSIENT

# TRANSIENT is re-exported: what counts as "away or busy" is the writer's definition.
__all__ = ["TRANSIENT", "AdmissionQueue", "until_answered"]

log = get_logger(__name__)

T = TypeVar("T")

INSUFFICIENT_RESOURCES = "53000"
# Pause before asking a service that was away again; doubled up to the cap.
RETRY_PAUSE = 0.05
RETRY_PAUSE_CAP = 1.0
# A wait for another service longer than this is logged (once).
LOG_AFTER = 5.0

# When the running statement must end (time.monotonic()); None: no statement_timeout.
STATEMENT_DEADLINE: ContextVar[float | None] = ContextVar("statement_deadline", default=None)


def statement_timeout_error() -> LoupeError:
    """What a statement that ran out of its ``statement_timeout`` fails with: 57014."""
    return LoupeError(SqlState.QUERY_CANCELED, "canceling statement due to statement timeout")


def remaining() -> float | None:
    """Seconds the running statement has left (None: no limit); 57014 if none are left."""
    deadline = STATEMENT_DEADLINE.get()
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise statement_timeout_error()
    return left


async def pause(seconds: float) -> None:
    """Sleep ``seconds``, or until the statement's deadline (then 57014)."""
    left = remaining()
    if left is not None and left < seconds:
        await asyncio.sleep(left)
        raise statement_timeout_error()
    await asyncio.sleep(seconds)


def backoff(pause: float, cap: float = RETRY_PAUSE_CAP) -> float:
    """The next pause: doubled, capped, with jitter so that waiters do not retry in step."""
    return min(cap, pause * 2) * random.uniform(0.5, 1.0)


async def until_answered(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` until another service answers it: a statement waits, it does not fail.

    Only for calls that are safe to repeat (reads, idempotent commands). A
    service that is away or slow (UNAVAILABLE, DEADLINE_EXCEEDED) is asked
    again after a pause; any other error is the answer. The statement's
    ``statement_timeout`` (57014) or cancel ends the wait.
    """
    delay = RETRY_PAUSE
    began = time.monotonic()
    logged = False
    while True:
        try:
            return await call()
        except LoupeError as error:
            if error.code not in TRANSIENT:
                raise
            if not logged and time.monotonic() - began > LOG_AFTER:
                logged = True
                log.info("statement waits for a service", call=what, error=error.message)
        metrics.SERVICE_RETRIES.labels(what).inc()
        await pause(delay)
        delay = backoff(delay)


class AdmissionQueue:
    """At most ``capacity`` holders at once; up to ``max_waiting`` more wait in order.

    ``admitted()`` is the way in: it waits for a place (bounded by the
    statement's deadline: 57014) or, with ``max_waiting`` statements already
    waiting, refuses at once with 53000.
    """

    def __init__(self, name: str, *, capacity: int, max_waiting: int, what: str = "") -> None:
        if capacity < 1 or max_waiting < 0:
            raise ValueError("an admission queue needs capacity >= 1 and max_waiting >= 0")
        self.name = name
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.what = what or name.replace("_", " ")
        self.waiting = 0
        self.in_flight = 0
        self._semaphore = asyncio.Semaphore(capacity)
        self._waiting_gauge = metrics.QUEUE_WAITING.labels(name)
        self._in_flight_gauge = metrics.QUEUE_IN_FLIGHT.labels(name)
        self._admitted = metrics.QUEUE_ADMITTED.labels(name)
        self._waited = metrics.QUEUE_WAITED.labels(name)
        self._rejected = metrics.QUEUE_REJECTED.labels(name)
        self._wait_seconds = metrics.QUEUE_WAIT_SECONDS.labels(name)
        self._publish()

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Hold a place in the queue for the block."""
        await self._enter()
        try:
            yield
        finally:
            self.in_flight -= 1
            self._semaphore.release()
            self._publish()

    async def _enter(self) -> None:
        if not self._semaphore.locked() and self.waiting == 0:
            await self._semaphore.acquire()  # a free place: no wait
        else:
            await self._wait()
        self.in_flight += 1
        self._admitted.inc()
        self._publish()

    async def _wait(self) -> None:
        if self.waiting >= self.max_waiting:
            self._rejected.inc()
            raise LoupeError(
                INSUFFICIENT_RESOURCES,
                f"too many statements waiting for {self.what} ({self.max_waiting})",
                hint="The coordinator is overloaded: try again shortly.",
            )
        self._waited.inc()
        self.waiting += 1
        self._publish()
        began = time.monotonic()
        try:
            async with asyncio.timeout(remaining()):
                await self._semaphore.acquire()
        except TimeoutError:
            raise statement_timeout_error() from None
        finally:
            self.waiting -= 1
            self._wait_seconds.observe(time.monotonic() - began)
            self._publish()

    def _publish(self) -> None:
        self._waiting_gauge.set(self.waiting)
        self._in_flight_gauge.set(self.in_flight)
