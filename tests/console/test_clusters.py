"""The Clusters page in a browser: replicas with their status and a timeline each;
a replica killed with SIGKILL is marked as crashed on its timeline and comes back as
a new incarnation; a dropped replica stays listed, with the time it was dropped."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable

import pytest

from loupe.testing.system import LoupeUp, replica_pid

from .browser import log_in, screenshot

pytestmark = pytest.mark.timeout(600)

CLUSTER = "clusters_test"


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 90.0, every: float = 1.0
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not so within {timeout} s: {check.__doc__ or check}")
        await asyncio.sleep(every)


def replica_id(system: LoupeUp, name: str) -> str:
    (row,) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r "
        f"JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id "
        f"WHERE c.name = '{CLUSTER}' AND r.name = '{name}'"
    )
    return str(row[0])


def status_of(system: LoupeUp, replica: str) -> tuple[str, int] | None:
    rows = system.sql(
        "SELECT status, incarnation FROM mz_internal.mz_cluster_replica_statuses "
        f"WHERE replica_id = '{replica}'"
    )
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


async def test_replicas_show_their_status_and_a_timeline(console_system: LoupeUp, page) -> None:
    await log_in(page, console_system.console_url)
    quickstart = page.locator("#replicas tr[data-replica]").filter(has_text="r1").first
    await quickstart.wait_for()
    assert "online" in await page.locator("#replicas").inner_text()
    # Each replica links to the Objects page filtered by it.
    link = quickstart.get_by_role("link").first
    assert re.fullmatch(r"/objects\?replica=\w+", await link.get_attribute("href") or "")

    async def charted() -> bool:
        """a replica's timeline draws its CPU and memory"""
        await page.reload()
        return await page.locator("figure[data-replica-timeline] svg polyline.cpu").count() > 0

    await eventually(charted)
    figure = page.locator("figure[data-replica-timeline]").first
    svg = figure.locator("svg.timeline")
    assert await svg.get_attribute("role") == "img"
    # The chart's text alternative: its <desc>, the summary under it and a table.
    desc = await svg.locator("desc").text_content() or ""
    assert "Peak CPU" in desc
    assert "peak memory" in desc
    assert desc in await figure.locator(".summary").inner_text()
    assert await page.locator("#timelines table.timeline-table").count() >= 1
    # Its numbers come from the queries Show SQL shows.
    await page.locator("#timelines summary").click()
    shown = await page.locator("#timelines details.sql").inner_text()
    assert "mz_cluster_replica_metrics_history" in shown
    assert "mz_cluster_replica_status_history" in shown
    # The window is a link: 15 minutes.
    await page.get_by_role("link", name="15 min").click()
    await page.wait_for_url(re.compile(r"window=15m"))
    assert await page.locator('.windows a[aria-current="true"]').inner_text() == "15 min"

    # At phone width the page does not scroll sideways.
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.reload()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    await screenshot(page, "clusters_phone")


async def test_a_killed_replica_is_marked_and_a_dropped_one_stays_listed(
    console_system: LoupeUp, page
) -> None:
    console_system.sql(f"DROP CLUSTER IF EXISTS {CLUSTER} CASCADE")
    console_system.sql(f"CREATE CLUSTER {CLUSTER} REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    try:
        r1, r2 = replica_id(console_system, "r1"), replica_id(console_system, "r2")

        async def online() -> bool:
            """both replicas of the test cluster are online"""
            return all(status_of(console_system, r) == ("online", 1) for r in (r1, r2))

        await eventually(online)
        await log_in(page, console_system.console_url)
        row = page.locator(f'#replicas tr[data-replica="{r1}"]')
        assert "online" in await row.inner_text()

        pid = replica_pid(console_system.data_dir, r1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        crash = page.locator(f'figure[data-replica-timeline="{r1}"] g.marker-crash')

        async def crash_marked() -> bool:
            """the page marks the crash on r1's timeline"""
            await page.goto(console_system.console_url + "clusters?window=15m")
            return await crash.count() > 0

        await eventually(crash_marked)
        # The crash is a visible label with its reason, and a <title> saying when.
        label = await crash.first.locator("text").text_content() or ""
        title = await crash.first.locator("title").text_content() or ""
        assert label.startswith("✕ ")
        assert re.search(r"offline \(\w[\w-]*\) at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", title)
        assert "incarnation 1" in title
        reason = label.removeprefix("✕ ")
        (stored,) = console_system.sql(
            "SELECT reason FROM mz_internal.mz_cluster_replica_status_history "
            f"WHERE replica_id = '{r1}' AND status = 'offline'"
        )
        assert stored[0] == reason
        crashes = page.locator("#timelines table.timeline-table tr").filter(has_text=reason)
        assert await crashes.count() >= 1
        await screenshot(page, "clusters_crash_marked")

        async def new_incarnation() -> bool:
            """r1 is back online as incarnation 2, and its timeline says so"""
            await page.goto(console_system.console_url + "clusters?window=15m")
            cells = await row.locator("td").all_inner_texts()
            marker = page.locator(f'figure[data-replica-timeline="{r1}"] g.marker-incarnation')
            labels = await marker.all_text_contents()
            return (
                "online" in cells[2]
                and cells[3].strip() == "2"
                and any("incarnation 2" in label for label in labels)
            )

        await eventually(new_incarnation)

        console_system.sql(f"DROP CLUSTER REPLICA {CLUSTER}.r2")
        (dropped_at,) = console_system.sql(
            "SELECT dropped_at FROM mz_internal.mz_cluster_replica_history "
            f"WHERE replica_id = '{r2}'"
        )
        assert dropped_at[0] is not None
        await page.goto(console_system.console_url + "clusters?window=15m")
        gone = page.locator(f'#dropped tr[data-dropped-replica="{r2}"]')
        text = await gone.inner_text()
        assert "⊘ dropped" in text
        assert CLUSTER in text
        when = await gone.locator("time").nth(1).get_attribute("datetime") or ""
        assert when.startswith(str(dropped_at[0])[:19].replace(" ", "T"))
        # No longer among the live replicas, but its timeline stays, marked.
        assert await page.locator(f'#replicas tr[data-replica="{r2}"]').count() == 0
        figure = page.locator(f'figure[data-replica-timeline="{r2}"]')
        assert "dropped" in await figure.locator("figcaption").inner_text()
        assert await figure.locator("g.marker-dropped").count() == 1
        await screenshot(page, "clusters_dropped")
    finally:
        console_system.sql(f"DROP CLUSTER IF EXISTS {CLUSTER} CASCADE")
