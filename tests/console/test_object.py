"""The Objects list and the Object page in Chromium: a view's plan tree hydrating live.

On the shared ``console_system``: a cluster of our own (``objpage``, one replica), a
TPC-H source, and a Q3-shaped materialized view created while the replica runs
throttled (SIGSTOP/SIGCONT, as tests/test_hydration_story.py does), so its hydration
takes long enough to watch. The Object page is opened while it hydrates; its nodes
turn hydrated without a reload; then the replica is killed (SIGKILL) and the page
marks it. The page's SUBSCRIBE ends when the page is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time
from typing import Any

import pytest

from loupe.testing.procs import Throttled
from loupe.testing.system import LoupeUp, replica_pid

from .browser import log_in, screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CLUSTER = "objpage"
Q3 = """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue,
               o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey
          AND l_orderkey = o_orderkey AND o_orderdate < DATE '1995-03-15'
          AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority"""


def poll(check: Any, timeout: float, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {check}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def objpage(console_system: LoupeUp) -> dict[str, str]:
    """Our cluster (one replica) and the TPC-H tables; returns {'replica': id}."""
    system = console_system
    if not system.sql("SELECT id FROM mz_catalog.mz_tables WHERE name = 'lineitem'"):
        system.sql(
            "CREATE SOURCE objpage_tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.01)", timeout=300
        )
    system.sql(f"CREATE CLUSTER {CLUSTER} REPLICAS (r1 (SIZE '1'))", timeout=120)
    ((replica,),) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r"
        f" JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = '{CLUSTER}'"
    )
    poll(
        lambda: system.sql(
            "SELECT 1 FROM mz_internal.mz_cluster_replica_statuses"
            f" WHERE replica_id = '{replica}' AND status = 'online'"
        ),
        120,
    )
    return {"replica": replica}


def view_id(system: LoupeUp, name: str) -> str | None:
    rows = system.sql(f"SELECT id FROM mz_catalog.mz_materialized_views WHERE name = '{name}'")
    return rows[0][0] if rows else None


async def cell_states(page: Any) -> list[tuple[str, str, str]]:
    """(node, state, label text) of every node cell on the page."""
    return await page.eval_on_selector_all(
        "li.cell",
        "cells => cells.map(c => [c.dataset.node, c.dataset.state,"
        " c.querySelector('[data-field=label]').textContent.trim()])",
    )


def transient_exports(system: LoupeUp) -> set[str]:
    """The SUBSCRIBE dataflows running (transient exports; one-shot SELECTs are not listed)."""
    rows = system.sql(
        "SELECT DISTINCT export_id FROM mz_internal.mz_compute_exports WHERE export_id LIKE 't%'"
    )
    return {r for (r,) in rows}


async def test_object_page_hydrates_live_and_marks_a_killed_replica(
    console_system: LoupeUp, objpage: dict[str, str], page: Any
) -> None:
    system = console_system
    replica = objpage["replica"]
    pid = replica_pid(system.data_dir, replica)
    assert pid is not None
    subscribes_before = transient_exports(system)
    await log_in(page, system.console_url)
    base = system.console_url.rstrip("/")

    with Throttled(pid, run=0.01, stop=0.3):
        creating = threading.Thread(
            target=lambda: system.sql(
                f"SET cluster = {CLUSTER}; CREATE MATERIALIZED VIEW objpage_q3 AS {Q3}",
                timeout=600,
            ),
            daemon=True,
        )
        creating.start()
        oid = await asyncio.to_thread(poll, lambda: view_id(system, "objpage_q3"), 120, 0.1)
        began = time.monotonic()
        await page.goto(f"{base}/objects/{oid}")
        render_s = time.monotonic() - began
        await page.evaluate("window.loupeNotReloaded = true")
        tree = page.locator("div.tree")
        await tree.wait_for()
        first = await cell_states(page)
        assert first, "the plan tree has node cells"
        assert {node for node, _, _ in first} >= {"0", "12"}
        # Opened while hydrating: not every node is hydrated yet.
        assert any(state != "hydrated" for _, state, _ in first), first
        await screenshot(page, "object_page_hydrating_start")
        # Still throttled: the first live update (rows of the replica's first report).
        with contextlib.suppress(Exception):
            await page.wait_for_function(
                "() => Number(document.querySelector('div.tree').dataset.updates || 0) > 0",
                timeout=30_000,
            )
            await screenshot(page, "object_page_hydrating_mid")
    # Unthrottled now: every node turns hydrated, on the page, without a reload.
    await page.wait_for_function(
        "() => { const cells = [...document.querySelectorAll('li.cell')];"
        " return cells.length > 0 && cells.every(c => c.dataset.state === 'hydrated'); }",
        timeout=240_000,
    )
    assert await page.evaluate("window.loupeNotReloaded === true")
    assert int(await tree.get_attribute("data-updates") or 0) > 0
    final = await cell_states(page)
    # The words follow the colour: every label says hydrated.
    assert all(label == "✓ hydrated" for _, _, label in final), final
    percents = await page.eval_on_selector_all(
        "li.cell [data-field=percent]", "es => es.map(e => e.textContent)"
    )
    assert set(percents) == {"100 %"}, percents
    # SQL agrees with the page.
    rows = system.sql(
        "SELECT bool_and(hydrated) FROM mz_internal.mz_compute_operator_hydration_statuses"
        f" WHERE object_id = '{oid}'"
    )
    assert rows == [(True,)]
    await screenshot(page, "object_page_hydrated")
    creating.join(300)

    # While the page is open its SUBSCRIBE runs as a transient dataflow.
    ours = await asyncio.to_thread(poll, lambda: transient_exports(system) - subscribes_before, 60)

    # Kill the replica: the live page marks it offline, its nodes keep their last state.
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    # The node states are read in the same moment the mark first says offline: the
    # next incarnation's report (its statuses starting over) may follow soon after.
    marked = await page.wait_for_function(
        f"() => {{ const row = document.querySelector('#replicas tr[data-replica=\"{replica}\"]');"
        " const mark = row && row.querySelector('[data-field=replica-mark]');"
        " if (!(mark && /offline/.test(mark.textContent))) return null;"
        " return [...document.querySelectorAll('li.cell')].map(c => c.dataset.state); }",
        timeout=120_000,
    )
    marked_s = time.monotonic() - killed
    await screenshot(page, "object_page_replica_killed")
    states = set(await marked.json_value())
    assert states == {"hydrated"}, states
    # After a reload the crash stays marked, with its time (offline since / last offline at).
    await page.reload()
    text = await page.locator("#replicas").inner_text()
    assert re.search(r"offline (since|at) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text

    # Leaving the page ends its SUBSCRIBE.
    await page.goto(f"{base}/objects?cluster={CLUSTER}")
    await asyncio.to_thread(poll, lambda: not (transient_exports(system) & ours), 90)
    print(
        f"object page first render {render_s * 1000:.0f} ms; killed replica marked live after"
        f" {marked_s:.1f} s"
    )


def q3_view(system: LoupeUp) -> str:
    """The id of ``objpage_q3`` on our cluster, created if an earlier test did not."""
    system.sql(
        f"SET cluster = {CLUSTER}; CREATE MATERIALIZED VIEW IF NOT EXISTS objpage_q3 AS {Q3}",
        timeout=600,
    )
    return view_id(system, "objpage_q3")


async def test_objects_list_shows_the_view_with_its_state(
    console_system: LoupeUp, objpage: dict[str, str], page: Any
) -> None:
    system = console_system
    oid = q3_view(system)
    poll(
        lambda: system.sql(
            "SELECT 1 FROM mz_internal.mz_compute_hydration_statuses"
            f" WHERE object_id = '{oid}' AND hydrated"
        ),
        180,
    )
    await log_in(page, system.console_url)
    base = system.console_url.rstrip("/")
    group = page.locator(f"tbody[data-object='{oid}']")
    text = ""
    deadline = time.monotonic() + 120
    # A replica restarted by the test before reports its state again after a while.
    while "✓ hydrated" not in text and time.monotonic() < deadline:
        await page.goto(f"{base}/objects")
        await group.wait_for()
        text = await group.inner_text()
    assert "objpage_q3" in text
    assert "materialized view" in text
    assert CLUSTER in text
    assert "✓ hydrated" in text, text
    # Filtered by cluster: only our cluster's objects; each links to its page.
    await page.goto(f"{base}/objects?cluster={CLUSTER}")
    clusters = await page.eval_on_selector_all(
        "table.objects tbody[data-object] td:nth-child(3)", "es => es.map(e => e.textContent)"
    )
    assert clusters, clusters
    assert all(CLUSTER in c for c in clusters), clusters
    await page.get_by_role("link", name="objpage_q3").click()
    await page.wait_for_url(re.compile(rf".*/objects/{oid}$"))
    await page.locator("div.tree").wait_for()


async def test_object_page_at_phone_width_and_by_keyboard(
    console_system: LoupeUp, objpage: dict[str, str], page: Any
) -> None:
    system = console_system
    oid = q3_view(system)
    await log_in(page, system.console_url)
    base = system.console_url.rstrip("/")
    await page.set_viewport_size({"width": 390, "height": 844})
    for path in (f"/objects/{oid}", "/objects"):
        await page.goto(base + path)
        overflow = await page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} scrolls sideways by {overflow} px at 390 px"
        await screenshot(page, "phone" + path.replace("/", "_"))
    await page.goto(f"{base}/objects/{oid}")
    # Keyboard: Tab reaches the replica switcher and a node's operators link.
    reached: set[str] = set()
    for _ in range(60):
        await page.keyboard.press("Tab")
        where = await page.evaluate(
            "() => { const e = document.activeElement;"
            " if (e.closest('nav.switcher')) return 'switcher';"
            " if (e.matches('a.ops')) return 'node'; return e.tagName; }"
        )
        reached.add(where)
        if {"switcher", "node"} <= reached:
            break
    assert {"switcher", "node"} <= reached, reached
    # The switcher shows one replica: its cells only.
    await page.set_viewport_size({"width": 1280, "height": 800})
    await page.get_by_role("navigation", name="Replica").get_by_role("link", name="r1").click()
    await page.wait_for_url(re.compile(r".*replica=.*"))
    replicas = await page.eval_on_selector_all(
        "li.cell", "cs => [...new Set(cs.map(c => c.dataset.replica))]"
    )
    assert replicas == [objpage["replica"]], replicas
