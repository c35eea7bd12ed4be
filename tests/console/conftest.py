"""The console's browser tests: one secured Loupe for the package, Debian's Chromium.

``console_system`` is a whole ``loupe up`` (real processes, the console among them)
with the ``password`` authenticator, so the login form is really asked for.
``page`` is a fresh Chromium tab (1280x800) driven by Playwright; when the test
ends it saves a screenshot to ``LOUPE_TEST_ARTIFACTS`` (default
``test-artifacts/console/``), named after the test, for a reader of CI's output.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from loupe.testing.system import LoupeUp

from .browser import CHROMIUM_ARGS, PASSWORD, chromium, screenshot


@pytest.fixture(scope="package")
def console_system() -> Iterator[LoupeUp]:
    with tempfile.TemporaryDirectory(prefix="loupe-console-") as data_dir:
        system = LoupeUp(
            Path(data_dir),
            env={"LOUPE_AUTHENTICATOR": "password", "LOUPE_SUPERUSER_PASSWORD": PASSWORD},
        )
        system.start()
        try:
            yield system
        finally:
            system.stop()


@pytest.fixture(scope="package")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        instance = await playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            await instance.close()


@pytest.fixture
async def page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A new tab in a new context (no cookies), 1280x800; JavaScript errors fail the test."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    # Errors of the page's scripts; a 4xx answer (a refused login) is not one.
    tab.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if message.type == "error" and not message.text.startswith("Failed to load resource")
            else None
        ),
    )
    try:
        yield tab
    finally:
        await screenshot(tab, request.node.name)
        await context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"
