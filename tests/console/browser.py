"""Helpers of the console's browser tests: Chromium's flags, screenshots, logging in."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "console-test-secret"
ARTIFACTS = Path(os.environ.get("LOUPE_TEST_ARTIFACTS", "test-artifacts")) / "console"
# As the machine's notes say: without the background-networking flags Chromium
# keeps trying to reach the internet, which this machine refuses.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = os.environ.get("LOUPE_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail(
            "Chromium is missing: `make install` installs Debian's chromium "
            "(scripts/ensure_system_deps.sh); or set LOUPE_CHROMIUM"
        )
    return found


async def screenshot(tab: Any, name: str) -> Path | None:
    """Save what ``tab`` shows to the artifacts folder (also usable mid-test)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".png")
    try:
        await tab.screenshot(path=str(path), full_page=True)
    except Exception:  # a closed or crashed tab has nothing to show
        return None
    return path


async def log_in(
    tab: Any, base_url: str, user: str = "materialize", password: str = PASSWORD
) -> None:
    """Fill in the login form the console sends a new visitor to."""
    await tab.goto(base_url)
    await tab.get_by_label("User").fill(user)
    await tab.get_by_label("Password").fill(password)
    await tab.get_by_role("button", name="Log in").click()
    await tab.wait_for_url(re.compile(r".*/clusters$"))
