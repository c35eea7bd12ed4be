"""``assert_eventually``: poll instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def assert_eventually(
    check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.05, message: str = ""
) -> Any:
    """Call ``check`` (sync or async) until it returns without AssertionError.

    Returns its value; after ``timeout`` re-raises the last AssertionError.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            return result
        except AssertionError as error:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{message or 'condition'} not met within {timeout}s: {error}"
                ) from error
        await asyncio.sleep(interval)


def wait_until(
    check: Callable[[], Any],
    timeout: float,
    *,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
    interval: float = 0.5,
) -> Any:
    """``check()`` until it returns without one of ``retry_on``; its value (blocking, for
    tests driving a whole system from a thread). After ``timeout`` the last error is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except retry_on:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


def eventually_truthy(
    check: Callable[[], Any],
    timeout: float,
    *,
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
    interval: float = 0.5,
) -> Any:
    """``wait_until`` a truthy value of ``check()``; a falsy one is retried like an
    AssertionError, and raised as one after ``timeout``."""

    def truthy() -> Any:
        value = check()
        assert value, f"condition not reached within {timeout}s"
        return value

    return wait_until(truthy, timeout, retry_on=(*retry_on, AssertionError), interval=interval)
