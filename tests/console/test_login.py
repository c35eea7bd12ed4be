"""Logging in to the console: the SQL roles' passwords, a session cookie, logout."""

from __future__ import annotations

import re

import pytest

from loupe.testing.system import LoupeUp

from .browser import PASSWORD, log_in

pytestmark = pytest.mark.timeout(240)


async def test_a_visitor_is_asked_to_log_in_and_a_wrong_password_is_refused(
    console_system: LoupeUp, page
) -> None:
    await page.goto(console_system.console_url + "clusters")
    # The coordinator asks for a password, so auto-login gives way to the form.
    assert re.search(r"/login\?next=(%2F|/)clusters$", page.url)
    await page.get_by_label("User").fill("materialize")
    await page.get_by_label("Password").fill("not-the-password")
    await page.get_by_role("button", name="Log in").click()
    alert = page.get_by_role("alert")
    await alert.wait_for()
    assert "Login refused" in await alert.inner_text()
    assert not [c for c in await page.context.cookies() if c["name"] == "loupe_console_session"]

    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(re.compile(r".*/clusters$"))
    (cookie,) = [c for c in await page.context.cookies() if c["name"] == "loupe_console_session"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    # The page is the real cluster list, read through SQL as this user.
    assert await page.locator("tr[data-replica]").count() >= 2
    assert await page.get_by_role("button", name="Log out").is_visible()


async def test_a_role_with_a_password_logs_in_and_logs_out(console_system: LoupeUp, page) -> None:
    console_system.sql("DROP ROLE IF EXISTS viewer")
    console_system.sql("CREATE ROLE viewer LOGIN PASSWORD 'v1ewer'")
    await log_in(page, console_system.console_url, "viewer", "v1ewer")
    assert (await page.locator(".who").inner_text()) == "viewer"
    await page.get_by_role("button", name="Log out").click()
    await page.wait_for_url(re.compile(r".*/login$"))
    await page.goto(console_system.console_url + "clusters")
    assert "/login" in page.url


async def test_show_sql_opens_with_the_keyboard(console_system: LoupeUp, page) -> None:
    await log_in(page, console_system.console_url)
    # The skip link comes first, then the navigation; "Show SQL" is reachable by Tab.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
    summary = page.locator("#replicas summary")
    await summary.focus()
    await page.keyboard.press("Enter")
    code = page.locator("#replicas details.sql pre code")
    await code.wait_for()
    text = await code.inner_text()
    assert "mz_cluster_replica_statuses" in text
    # What it shows runs as it is through psql's protocol, with the same answer.
    rows = console_system.sql(text.rstrip(";"))
    assert len(rows) == await page.locator("tr[data-replica]").count() + sum(
        1 for row in rows if row[2] is None
    )
