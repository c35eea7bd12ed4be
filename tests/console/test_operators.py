"""The operators page: an object's dataflow operators on a replica, as a laid-out
graph (inline SVG) and as tables, for one LIR node or the whole dataflow; readable
at 200 operators; no page-level horizontal scroll at phone width."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from loupe.testing.eventually import assert_eventually
from loupe.testing.system import LoupeUp

from .browser import log_in, screenshot

pytestmark = pytest.mark.timeout(600)

CLUSTER = "operators_c"


def ensure_objects(system: LoupeUp) -> None:
    """This test's own cluster, tables, index, join view and ~200-operator view."""
    if system.sql(f"SELECT id FROM mz_catalog.mz_clusters WHERE name = '{CLUSTER}'"):
        return
    system.sql(f"CREATE CLUSTER {CLUSTER} REPLICAS (r1 (SIZE '1'))")
    system.sql("CREATE TABLE operators_t1 (a int, b text)")
    system.sql("CREATE TABLE operators_t2 (a int, c text)")
    system.sql("INSERT INTO operators_t1 VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    system.sql("INSERT INTO operators_t2 VALUES (1, 'p'), (3, 'q')")
    system.sql(f"CREATE INDEX operators_t1_idx IN CLUSTER {CLUSTER} ON operators_t1 (a)")
    system.sql(
        f"CREATE MATERIALIZED VIEW operators_join IN CLUSTER {CLUSTER} AS "
        "SELECT operators_t1.a, b, c FROM operators_t1 "
        "JOIN operators_t2 ON operators_t1.a = operators_t2.a"
    )
    # Fourteen joins under a union: about 16 operators each.
    branches = " UNION ALL ".join(
        f"SELECT operators_t1.a + {k} AS a, c FROM operators_t1 "
        f"JOIN operators_t2 ON operators_t1.a = operators_t2.a + {k}"
        for k in range(14)
    )
    system.sql(f"CREATE MATERIALIZED VIEW operators_big IN CLUSTER {CLUSTER} AS {branches}")


def object_and_replica(system: LoupeUp, name: str) -> tuple[str, str]:
    ((object_id,),) = system.sql(f"SELECT id FROM mz_catalog.mz_objects WHERE name = '{name}'")
    ((replica_id,),) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r "
        f"JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = '{CLUSTER}'"
    )
    return str(object_id), str(replica_id)


def operator_ids(system: LoupeUp, object_id: str, replica_id: str) -> list[int]:
    """The dataflow's operators but its own (the scope), as SQL has them."""
    rows = system.sql(
        "SELECT dod.id FROM mz_internal.mz_compute_exports e "
        "JOIN mz_internal.mz_dataflow_operator_dataflows dod "
        "ON dod.replica_id = e.replica_id AND dod.incarnation = e.incarnation "
        "AND dod.dataflow_id = e.dataflow_id "
        "JOIN mz_internal.mz_dataflow_addresses a "
        "ON a.replica_id = dod.replica_id AND a.incarnation = dod.incarnation AND a.id = dod.id "
        f"WHERE e.export_id = '{object_id}' AND e.replica_id = '{replica_id}' "
        "AND mz_catalog.list_length(a.address) > 1 ORDER BY dod.id",
        timeout=120,
    )
    return [int(row[0]) for row in rows]


async def settled_operators(system: LoupeUp, object_id: str, replica_id: str) -> list[int]:
    """The operator ids once the persisted introspection has them and they stop changing."""
    previous: list[list[int]] = []

    def check() -> list[int]:
        ids = operator_ids(system, object_id, replica_id)
        lir = system.sql(
            "SELECT count(*) FROM mz_internal.mz_lir_mapping "
            f"WHERE global_id = '{object_id}' AND replica_id = '{replica_id}'"
        )
        assert ids, "no operators yet"
        assert lir[0][0] > 0, "no LIR mapping yet"
        stable = previous and previous[-1] == ids
        previous.append(ids)
        assert stable, "operators still changing"
        return ids

    result: list[int] = await assert_eventually(check, timeout=180, interval=1.0)
    return result


async def open_page(page: Any, url: str) -> tuple[float, str]:
    """Go to ``url``; the server's render time (ms, from Server-Timing) and the header."""
    began = time.perf_counter()
    response = await page.goto(url, timeout=120_000)
    wall = (time.perf_counter() - began) * 1000
    assert response is not None
    assert response.ok, response.status
    timing = response.headers.get("server-timing", "")
    parts = dict(re.findall(r"(\w+);dur=([\d.]+)", timing))
    total = sum(float(v) for v in parts.values())
    print(f"\n{url}: server {total:.0f} ms ({timing}), page load {wall:.0f} ms")
    return total, timing


async def test_the_operators_of_a_join_for_a_node_and_for_the_whole_dataflow(
    console_system: LoupeUp, page
) -> None:
    ensure_objects(console_system)
    object_id, replica_id = object_and_replica(console_system, "operators_join")
    ids = await settled_operators(console_system, object_id, replica_id)
    await log_in(page, console_system.console_url)
    base = f"{console_system.console_url}objects/{object_id}/operators?replica={replica_id}"

    # The whole dataflow: one box per operator, the table lists the same.
    await open_page(page, base)
    boxes = page.locator("svg.operator-graph g[data-operator-id]")
    assert (
        sorted(
            [int(i) for i in await boxes.evaluate_all("gs => gs.map(g => g.dataset.operatorId)")]
        )
        == ids
    )
    rows = page.locator("table.operators tbody tr[data-operator-id]")
    assert await rows.count() == len(ids)
    names = await page.locator("table.operators td.name").all_inner_texts()
    assert "Join" in names
    assert any(n.startswith("Get(") for n in names)
    # Names are visible in the graph itself (text, not only in titles).
    join_box = page.locator("svg.operator-graph g[data-operator-id] text.op-name", has_text="Join")
    assert await join_box.count() >= 1
    assert await join_box.first.is_visible()
    channels = await page.locator("svg.operator-graph g[data-channel-id]").count()
    assert channels >= 4
    assert await page.locator("table.channels tbody tr[data-channel-id]").count() == channels
    # Show SQL has the operators query, pasteable with the ids written in.
    sql = await page.locator("#graph details.sql pre").first.text_content() or ""
    assert "mz_internal.mz_dataflow_operator_dataflows" in sql
    assert f"'{object_id}'" in sql
    await screenshot(page, "operators_whole_dataflow")

    # The Join node: its operators marked "▶", its neighbours "◌".
    ((lir_id, start, end),) = console_system.sql(
        "SELECT lir_id, operator_id_start, operator_id_end FROM mz_internal.mz_lir_mapping "
        f"WHERE global_id = '{object_id}' AND replica_id = '{replica_id}' AND operator = 'Join'"
    )
    in_node = [i for i in ids if int(start) <= i < int(end)]
    await open_page(page, f"{base}&node={lir_id}")
    selected = page.locator("svg.operator-graph g.op-selected")
    assert await selected.count() == len(in_node)
    assert all(
        t.startswith("▶ ") for t in await selected.locator("text.op-name").all_text_contents()
    )
    context = page.locator("svg.operator-graph g.op-context")
    assert await context.count() >= 2  # the two arranged inputs, the Mfp after it
    assert all(
        t.startswith("◌ ") for t in await context.locator("text.op-name").all_text_contents()
    )
    assert await page.locator("table.operators tbody tr.selected").count() == len(in_node)
    assert f"node {lir_id}" in await page.locator("h1").inner_text()
    await screenshot(page, "operators_join_node")

    # Without a replica: the first of the object's cluster.
    await open_page(page, f"{console_system.console_url}objects/{object_id}/operators")
    current = page.locator('#object nav a[aria-current="true"]')
    assert replica_id in await current.inner_text()
    assert await boxes.count() == len(ids)

    # Phone width: the page does not scroll sideways; the graph scrolls in its panel.
    await page.set_viewport_size({"width": 390, "height": 844})
    await open_page(page, base)
    assert await page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    scroller = page.locator(".graph-scroll")
    assert await scroller.evaluate("e => e.scrollWidth > e.clientWidth")
    await screenshot(page, "operators_phone")


async def test_two_hundred_operators_render_at_natural_size(console_system: LoupeUp, page) -> None:
    ensure_objects(console_system)
    object_id, replica_id = object_and_replica(console_system, "operators_big")
    ids = await settled_operators(console_system, object_id, replica_id)
    assert len(ids) >= 200, len(ids)
    await log_in(page, console_system.console_url)
    url = f"{console_system.console_url}objects/{object_id}/operators?replica={replica_id}"
    await open_page(page, url)
    # A second time, warm: what a reader sees on a reload.
    server_ms, timing = await open_page(page, url)
    boxes = page.locator("svg.operator-graph g[data-operator-id]")
    assert await boxes.count() == len(ids)
    assert await page.locator("table.operators tbody tr[data-operator-id]").count() == len(ids)
    # Natural size: the SVG is not shrunk to fit (1 unit = 1 CSS px), its panel scrolls.
    svg = page.locator("svg.operator-graph")
    width = float(await svg.get_attribute("width") or 0)
    shown = await svg.evaluate("e => e.getBoundingClientRect().width")
    assert abs(shown - width) < 1
    assert await page.locator(".graph-scroll").evaluate("e => e.scrollWidth > e.clientWidth")
    # Box names keep a legible size.
    font = await page.locator("svg.operator-graph text.op-name").first.evaluate(
        "e => parseFloat(getComputedStyle(e).fontSize)"
    )
    assert font >= 12
    # Zoom buttons (JavaScript) scale it; 100% puts it back.
    await page.get_by_role("button", name="Zoom out").click()
    assert float(await svg.get_attribute("width") or 0) < width
    assert await page.locator(".zoom-level").inner_text() == "80%"
    await page.get_by_role("button", name="100%").click()
    assert float(await svg.get_attribute("width") or 0) == pytest.approx(width, abs=1)
    assert await page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    layout_ms = float(dict(re.findall(r"(\w+);dur=([\d.]+)", timing)).get("layout", "nan"))
    print(f"{len(ids)} operators: server render {server_ms:.0f} ms, layout {layout_ms:.1f} ms")
    await page.locator("svg.operator-graph").scroll_into_view_if_needed()
    await screenshot(page, "operators_200")
