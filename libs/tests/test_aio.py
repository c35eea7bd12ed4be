"""The asyncio helpers every service shares."""

from __future__ import annotations

import asyncio

from loupe.common.aio import cancel_all


async def test_cancel_all_ends_a_task_that_swallows_a_cancel() -> None:
    """A loop that survives one cancel (as one around nats-py's wait_for can on 3.11)
    is cancelled again until it ends; a plain one and one that failed end at once."""
    cancels = 0

    async def stubborn() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels += 1
                if cancels == 1:
                    continue  # swallowed, as wait_for can
                raise

    async def failed() -> None:
        raise RuntimeError("failed before the stop")

    tasks = [
        asyncio.create_task(stubborn()),
        asyncio.create_task(asyncio.sleep(3600)),
        asyncio.create_task(failed()),
    ]
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all(tasks, again_every=0.05), timeout=5)
    assert all(task.done() for task in tasks)
    assert cancels == 2
    assert tasks[0].cancelled()
    assert tasks[1].cancelled()
    assert isinstance(tasks[2].exception(), RuntimeError)


async def test_cancel_all_of_nothing_returns() -> None:
    await asyncio.wait_for(cancel_all([]), timeout=1)
