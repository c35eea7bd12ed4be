"""Small asyncio helpers every service shares."""

from __future__ import annotations

import asyncio
import contextlib


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
