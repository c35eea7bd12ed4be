"""Small asyncio helpers every service shares."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set, at most ``timeout`` seconds (None: no limit); whether it is.

    Not ``asyncio.wait_for``: on Python 3.11 it returns the inner result when
    the task is cancelled in the same loop turn as the event fires, swallowing
    the cancel. A loop sleeping with it then outlives its cancellation: a
    replica's source feeder did, and fed the next reader of a materialized
    view its shard's uppers without the snapshot (the view read as empty).
    ``asyncio.timeout`` always lets a cancel through.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


async def cancel_all(tasks: Iterable[asyncio.Task[Any]], *, again_every: float = 1.0) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again those that
    outlive a cancel (every ``again_every`` seconds).

    One cancel is not always enough on Python 3.11: ``asyncio.wait_for`` (which
    nats-py's requests use) returns the inner result when the task is cancelled in
    the same loop turn as the result arrives, swallowing the cancel. A loop
    around such a request then goes on, and a service stopping by gathering its
    cancelled tasks waited for it forever (a coordinator's storage resync did).
    """
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=again_every)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved, as gather(return_exceptions=True) would
