"""The Activity page in a browser: statements run through pgwire show up in the log;
the filters (a plain GET form, submitted with Enter) narrow it by status, user,
application and duration; a statement links to its lifecycle; a viewer who may read
only the redacted log gets that, and is told so."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import psycopg
import pytest

from loupe.testing.system import LoupeUp

from .browser import PASSWORD, log_in, screenshot

pytestmark = pytest.mark.timeout(600)

USER = "activity_user"
USER_PASSWORD = "act1vity"
VIEWER = "activity_viewer"
VIEWER_PASSWORD = "v1ewer-redacted"


def connect(system: LoupeUp, application: str, user: str = "materialize", password: str = PASSWORD):
    return psycopg.connect(
        host="127.0.0.1",
        port=system.pgwire_port,
        user=user,
        password=password,
        dbname="materialize",
        application_name=application,
        autocommit=True,
    )


def logged(system: LoupeUp, application: str) -> list[dict[str, Any]]:
    rows = system.sql(
        "SELECT execution_id, finished_status, authenticated_user, sql, "
        "extract(epoch FROM finished_at - began_at) * 1000 AS ms "
        "FROM mz_internal.mz_recent_activity_log "
        f"WHERE application_name = '{application}' AND finished_status IS NOT NULL"
    )
    return [
        {"id": r[0], "status": r[1], "user": r[2], "sql": r[3], "ms": float(r[4])} for r in rows
    ]


@pytest.fixture(scope="module")
def statements(console_system: LoupeUp) -> dict[str, Any]:
    """Four statements of one application: two that succeed and one that fails as
    materialize, one that succeeds as another user; waits until all are logged."""
    system = console_system
    system.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
    system.sql("ALTER SYSTEM SET statement_logging_default_sample_rate = 1")
    system.sql(f"DROP ROLE IF EXISTS {USER}")
    system.sql(f"CREATE ROLE {USER} LOGIN PASSWORD '{USER_PASSWORD}'")
    tag = uuid.uuid4().hex[:8]
    application = f"activity-test-{tag}"
    with connect(system, application) as connection:
        connection.execute(f"SELECT 1 AS activity_ok_{tag}")
        connection.execute(f"SELECT count(*) AS activity_count_{tag} FROM mz_catalog.mz_objects")
        with pytest.raises(psycopg.errors.UndefinedTable):
            connection.execute(f"SELECT * FROM activity_missing_{tag}")
    with connect(system, application, USER, USER_PASSWORD) as connection:
        connection.execute(f"SELECT 3 AS activity_other_user_{tag}")
    deadline = time.monotonic() + 120
    while len(rows := logged(system, application)) < 4:
        assert time.monotonic() < deadline, f"statements not logged in time: {rows}"
        time.sleep(1)
    return {"tag": tag, "application": application, "rows": rows}


async def shown(page) -> list[dict[str, str]]:
    rows = page.locator("#statements tr[data-execution]")
    out = []
    for i in range(await rows.count()):
        row = rows.nth(i)
        out.append(
            {
                "id": await row.get_attribute("data-execution") or "",
                "status": await row.get_attribute("data-status") or "",
                "user": await row.get_attribute("data-user") or "",
            }
        )
    return out


async def submit_with_enter(page, field: str) -> None:
    async with page.expect_navigation():
        await page.locator(field).press("Enter")


async def test_filters_narrow_the_log_and_a_statement_shows_its_lifecycle(
    console_system: LoupeUp, page, statements: dict[str, Any]
) -> None:
    application, rows = statements["application"], statements["rows"]
    by_status = {row["status"]: row for row in rows if row["user"] == "materialize"}
    failing = by_status["error"]
    await log_in(page, console_system.console_url)
    await page.get_by_role("link", name="Activity").click()
    await page.wait_for_url(re.compile(r"/activity$"))
    # Unfiltered: the log, newest first, with the count.
    assert await page.locator("#statement-count").count() == 1
    assert await page.locator("#statements tr[data-execution]").count() >= 4

    # Keyboard: Tab reaches the filter form; Enter in a field submits it.
    for _ in range(30):
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.id") == "f-status":
            break
    else:
        pytest.fail("the filter form is not reachable with Tab")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "f-application"
    await page.keyboard.type(application)
    async with page.expect_navigation():
        await page.keyboard.press("Enter")
    assert f"application={application}" in page.url
    listed = await shown(page)
    assert sorted(r["id"] for r in listed) == sorted(r["id"] for r in rows)
    count = page.locator("#statement-count")
    assert await count.get_attribute("data-count") == "4"
    assert "4 statements match" in await count.inner_text()

    # Status: only the failing statement, with its error.
    await page.locator("#f-status").select_option("error")
    await submit_with_enter(page, "#f-application")
    assert "status=error" in page.url
    listed = await shown(page)
    assert [r["id"] for r in listed] == [failing["id"]]
    text = await page.locator("#statements tbody").inner_text()
    assert f"activity_missing_{statements['tag']}" in text
    assert "unknown catalog item" in text
    await screenshot(page, "activity_status_error")

    # User: only the other user's statement.
    await page.locator("#f-status").select_option("")
    await page.locator("#f-user").fill(USER)
    await submit_with_enter(page, "#f-user")
    listed = await shown(page)
    assert [r["user"] for r in listed] == [USER]
    await page.locator("#f-user").fill("")

    # Duration: those that took at least as long as the slowest but one.
    threshold = sorted(row["ms"] for row in rows)[-2]
    expected = sorted(row["id"] for row in rows if row["ms"] >= threshold)
    await page.locator("#f-duration").fill(f"{threshold:g}")
    await submit_with_enter(page, "#f-duration")
    assert "min_duration=" in page.url
    assert sorted(r["id"] for r in await shown(page)) == expected
    # Show SQL: the filter values are parameters, written in as literals.
    await page.locator("#statements summary").click()
    sql = await page.locator("#statements details.sql").inner_text()
    assert f"application_name = '{application}'" in sql
    assert "began_at >= '" in sql

    # A text search; and the execution estimates of the fingerprints it matches.
    await page.locator("#f-duration").fill("")
    await page.locator("#f-q").fill(f"activity_missing_{statements['tag']}")
    await submit_with_enter(page, "#f-q")
    assert [r["id"] for r in await shown(page)] == [failing["id"]]
    estimates = await page.locator("#estimates tbody").inner_text()
    assert f"activity_missing_{statements['tag']}" in estimates

    # The failing statement's lifecycle.
    await page.locator(f'tr[data-execution="{failing["id"]}"] a').click()
    await page.wait_for_url(re.compile(rf"/activity/{failing['id']}$"))
    assert "error" in await page.locator("#statement-status").inner_text()
    assert "unknown catalog item" in await page.locator("#statement-error").inner_text()
    assert (
        f"activity_missing_{statements['tag']}"
        in await page.locator("pre.statement-sql").inner_text()
    )
    events = await page.locator("ol.lifecycle li[data-event]").evaluate_all(
        "items => items.map(item => item.dataset.event)"
    )
    stored = console_system.sql(
        "SELECT event_type FROM mz_internal.mz_statement_lifecycle_history "
        f"WHERE statement_id = '{failing['id']}' ORDER BY occurred_at"
    )
    assert events == [row[0] for row in stored]
    assert events[0] == "execution-began"
    assert events[-1] == "execution-finished"
    await screenshot(page, "activity_lifecycle")

    # Phone width: no sideways scroll on the lifecycle page nor the log.
    await page.set_viewport_size({"width": 390, "height": 844})
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    await page.goto(console_system.console_url + "activity")
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    await screenshot(page, "activity_phone")


async def test_a_viewer_of_the_redacted_log_gets_it_and_is_told(
    console_system: LoupeUp, page, statements: dict[str, Any]
) -> None:
    console_system.sql(f"DROP ROLE IF EXISTS {VIEWER}")
    console_system.sql(f"CREATE ROLE {VIEWER} LOGIN PASSWORD '{VIEWER_PASSWORD}'")
    console_system.sql(f"GRANT mz_monitor_redacted TO {VIEWER}")
    await log_in(page, console_system.console_url, VIEWER, VIEWER_PASSWORD)
    await page.goto(
        console_system.console_url + f"activity?application={statements['application']}"
    )
    assert "redacted" in await page.get_by_role("status").inner_text()
    listed = await shown(page)
    assert sorted(r["id"] for r in listed) == sorted(r["id"] for r in statements["rows"])
    body = await page.locator("#statements tbody").inner_text()
    # Literals and error messages are not shown to this viewer.
    assert "<REDACTED>" in body
    assert "unknown catalog item" not in body
    await page.locator("#statements summary").click()
    assert (
        "mz_recent_activity_log_redacted"
        in await page.locator("#statements details.sql").inner_text()
    )
    assert await page.locator("#estimates .error").count() == 0
    # The lifecycle page: the redacted row; the lifecycle relation is refused, and says so.
    failing = next(r for r in statements["rows"] if r["status"] == "error")
    await page.goto(console_system.console_url + f"activity/{failing['id']}")
    assert "error" in await page.locator("#statement-status").inner_text()
    assert await page.locator("#statement-error").count() == 0
    assert "42501" in await page.locator("#lifecycle .error").inner_text()
