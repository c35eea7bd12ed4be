"""The console's speed (issue 15's targets), each page against its own SQL.

One ``loupe up`` with its defaults (trust: the console logs ``materialize`` in
without a form) and 5 user replicas (``quickstart`` and a cluster ``bench`` of
``--replicas`` 4) holding ``--objects`` 50 objects (tables, their indexes and
materialized views over them on ``bench``), every dataflow hydrated:

- first render of each page the console has (``/clusters``, ``/objects``,
  ``/activity``, an object (a materialized view), its operators): the time from
  the request to the whole HTML, ``--rounds`` times, p50 and p99 against the
  target 500 ms; against a baseline in the same run, interleaved round by round:
  the page's own SQL (what its panels' "Show SQL" show) run directly with
  psycopg over pgwire, as concurrently as the console runs it (its 4
  connections), so the ratio is the console's own cost (HTTP, rendering,
  formatting). ``cold`` is a first visit: a new visitor's auto-login and new
  connections included. A page that answers 404 is not built yet: "not built".
  With Chromium (``/usr/bin/chromium``, Playwright; ``--no-browser`` skips it):
  navigation to the ``load`` event, styles and scripts included.
- update latency: an object's live page (``/objects/<id>/events``, server-sent
  events) is open while a new replica joins the object's cluster; from the
  moment SQL shows the object's first hydration row on that replica (polled
  every 20 ms over pgwire) until an event naming that replica reaches the
  client. Target < 1 s.
- idle cost: nobody looks (no client, no SSE) for ``--idle`` 10 s after the
  console's connections have closed (``LOUPE_CONNECTION_IDLE_CLOSE`` is 5 s
  here): the console's CPU (``/proc/<pid>/stat``), the coordinator's sessions
  (its ``loupe_coordinator_sessions`` gauge, against the count before anyone
  opened the console) and the statements the console ran meanwhile (the
  statement log, ``application_name = 'loupe-console'``). Target: nothing.

Run: ``.venv/bin/python bench/console.py [--rounds 20] [--replicas 4] [--objects 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from loupe.testing.eventually import eventually_truthy
from loupe.testing.system import LoupeUp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RENDER_TARGET_S = 0.5
UPDATE_TARGET_S = 1.0
IDLE_CLOSE_S = 5.0
CONNECTIONS = 4  # ConsoleSettings.session_connections
SHOW_SQL = re.compile(r'<details class="sql">(.*?)</details>', re.DOTALL)
CODE = re.compile(r"<pre><code>(.*?)</code></pre>", re.DOTALL)


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in seconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def verdict(value: float, target: float) -> str:
    return "met" if value < target else "NOT met"


def pgwire_url(system: LoupeUp) -> str:
    return f"postgresql://materialize@127.0.0.1:{system.pgwire_port}/materialize"


def ready_file(system: LoupeUp, name: str) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((system.data_dir / "run" / f"{name}.ready.json").read_text())
    return info


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def coordinator_sessions(system: LoupeUp) -> int:
    url = f"http://127.0.0.1:{ready_file(system, 'coordinator')['metrics_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r"^loupe_coordinator_sessions (\S+)$", text, re.MULTILINE)
    return int(float(match.group(1))) if match else -1


# -- the system -----------------------------------------------------------------


DDL_TIMEOUT_S = 300.0  # a loaded machine's storage writer can take a while


def populate(system: LoupeUp, replicas: int, objects: int) -> list[str]:
    """A cluster ``bench`` of ``replicas`` replicas and ``objects`` objects: tables
    (2/5), an index on each of most of them and materialized views over the rest of
    them (3/5 between them), all on ``bench``; the ids of the compute objects."""
    names = ", ".join(f"r{n} (SIZE 'xsmall')" for n in range(1, replicas + 1))
    system.sql(f"CREATE CLUSTER bench REPLICAS ({names})", DDL_TIMEOUT_S)
    tables = objects * 2 // 5
    computed = objects - tables
    for n in range(tables):
        system.sql(f"CREATE TABLE bench_t{n} (k int, v text)", DDL_TIMEOUT_S)
        rows = ", ".join(f"({k}, 'v{k}')" for k in range(n * 10, n * 10 + 200))
        system.sql(f"INSERT INTO bench_t{n} VALUES {rows}", DDL_TIMEOUT_S)
    for n in range(computed):
        table = f"bench_t{n % tables}"
        if n % 2 == 0:
            system.sql(f"CREATE INDEX bench_i{n} IN CLUSTER bench ON {table} (k)", DDL_TIMEOUT_S)
        else:
            system.sql(
                f"CREATE MATERIALIZED VIEW bench_mv{n} IN CLUSTER bench AS "
                f"SELECT k % 10 AS bucket, count(*) AS n, max(v) AS v FROM {table} GROUP BY 1",
                DDL_TIMEOUT_S,
            )
    rows = system.sql(
        "SELECT id FROM mz_catalog.mz_indexes WHERE name LIKE 'bench_%' "
        "UNION ALL SELECT id FROM mz_catalog.mz_materialized_views WHERE name LIKE 'bench_%'"
    )
    return [row[0] for row in rows]


def hydrated(system: LoupeUp, ids: list[str], replicas: int) -> bool:
    listed = ", ".join(f"'{oid}'" for oid in ids)
    # mz_object_hydration_history rather than mz_compute_hydration_statuses: an
    # index straight on a table (one Get node) never shows in the latter.
    ((count,),) = system.sql(
        "SELECT count(*) FROM (SELECT DISTINCT object_id, replica_id"
        " FROM mz_internal.mz_object_hydration_history"
        f" WHERE status = 'hydrated' AND object_id IN ({listed})) AS h"
    )
    return int(count) >= len(ids) * replicas


# -- first render ---------------------------------------------------------------


def page_sql(page: str) -> list[str]:
    """The statements the page's panels show under "Show SQL"."""
    texts = []
    for block in SHOW_SQL.findall(page):
        for code in CODE.findall(block):
            texts.append(html.unescape(code).strip().rstrip(";"))
    return texts


class Baseline:
    """The page's SQL run directly over pgwire, as concurrently as the console does."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connections: list[psycopg.AsyncConnection[Any]] = []
        self.failed: set[str] = set()

    async def __aenter__(self) -> Baseline:
        for _ in range(CONNECTIONS):
            self.connections.append(
                await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, application_name="loupe-console-bench"
                )
            )
        return self

    async def __aexit__(self, *_: object) -> None:
        for connection in self.connections:
            await connection.close()

    async def run(self, statements: list[str]) -> float:
        queue: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        for connection in self.connections:
            queue.put_nowait(connection)

        async def one(sql: str) -> None:
            connection = await queue.get()
            try:
                async with connection.cursor() as cursor:
                    await cursor.execute(sql)
                    if cursor.description:
                        await cursor.fetchall()
            except psycopg.Error as error:
                self.failed.add(f"{sql[:60]}…: {error}".splitlines()[0])
            finally:
                queue.put_nowait(connection)

        began = time.perf_counter()
        await asyncio.gather(*(one(sql) for sql in statements))
        return time.perf_counter() - began


def client(base: str) -> aiohttp.ClientSession:
    # 127.0.0.1's cookies are kept only by an "unsafe" jar (an IP, not a domain).
    return aiohttp.ClientSession(
        base_url=base,
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        headers={"Accept": "text/html"},
        timeout=aiohttp.ClientTimeout(total=60),
    )


async def fetch(http: aiohttp.ClientSession, path: str) -> tuple[int, str, float]:
    began = time.perf_counter()
    async with http.get(path) as response:
        body = await response.text()
        status = response.status
    return status, body, time.perf_counter() - began


async def renders(
    system: LoupeUp, pages: list[tuple[str, str]], rounds: int
) -> list[tuple[str, str]]:
    """Time each page against its SQL; the (label, path) of those that exist."""
    base = system.console_url.rstrip("/")
    built = []
    async with client(base) as http, Baseline(pgwire_url(system)) as baseline:
        await fetch(http, "/")  # logs in (trust)
        for label, path in pages:
            # A first visit: a new visitor (auto-login, new connections).
            async with client(base) as fresh:
                status, body, cold = await fetch(fresh, path)
            if status == 404:
                print(f"{label:<28} not built (404)", flush=True)
                continue
            if status != 200:
                print(f"{label:<28} HTTP {status}: {body[:200]!r}", flush=True)
                continue
            built.append((label, path))
            statements = page_sql(body)
            for _ in range(3):  # warm: connections, caches
                await fetch(http, path)
                await baseline.run(statements)
            console, direct = [], []
            for _ in range(rounds):
                status, _, seconds = await fetch(http, path)
                if status != 200:
                    raise RuntimeError(f"{path}: HTTP {status}")
                console.append(seconds)
                direct.append(await baseline.run(statements))
            p50, p99 = percentiles(console)
            b50, _ = percentiles(direct)
            print(
                f"{label:<28} p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms"
                f"   cold {cold * 1000:7.1f} ms   ({p50 / b50:.2f}x its {len(statements)}"
                f" queries on pgwire: p50 {b50 * 1000:.1f} ms; target < 500 ms:"
                f" {verdict(p99, RENDER_TARGET_S)})",
                flush=True,
            )
        for failure in sorted(baseline.failed):
            print(f"{'':<28} (baseline query failed: {failure})", flush=True)
    return built


async def browser_loads(system: LoupeUp, pages: list[tuple[str, str]], rounds: int) -> None:
    try:
        from playwright.async_api import async_playwright

        from tests.console.browser import CHROMIUM_ARGS, chromium
    except ImportError as error:
        print(f"Chromium: skipped ({error})", flush=True)
        return
    executable = os.environ.get("LOUPE_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(executable, os.X_OK):
        executable = chromium()
    base = system.console_url.rstrip("/")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            tab = await context.new_page()
            await tab.goto(base + "/", wait_until="load")
            for label, path in pages:
                samples = []
                for round_ in range(rounds + 2):
                    began = time.perf_counter()
                    await tab.goto(base + path, wait_until="load")
                    if round_ >= 2:  # the first two warm the cache of static files
                        samples.append(time.perf_counter() - began)
                p50, p99 = percentiles(samples)
                print(
                    f"{'Chromium ' + label:<28} p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms"
                    f"   (navigation to load; target < 500 ms: {verdict(p99, RENDER_TARGET_S)})",
                    flush=True,
                )
            await context.close()
        finally:
            await browser.close()


# -- update latency ---------------------------------------------------------------


async def read_events(
    response: aiohttp.ClientResponse, replica_id: str, found: asyncio.Future[float]
) -> None:
    """Read the event stream until an event's data names replica ``replica_id``."""
    needle = re.compile(rf'"replica(_id)?": "{re.escape(replica_id)}"')
    event_data: list[str] = []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            event_data.append(line[5:].strip())
        elif not line and event_data:
            if needle.search("\n".join(event_data)) and not found.done():
                found.set_result(time.perf_counter())
                return
            event_data = []


async def first_visible(url: str, sql: str, params: tuple[Any, ...]) -> float:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        while True:
            rows = await (await connection.execute(sql, params)).fetchall()
            if rows and rows[0][0]:
                return time.perf_counter()
            await asyncio.sleep(0.02)


async def update_latency(system: LoupeUp, object_id: str, rounds: int) -> None:
    base = system.console_url.rstrip("/")
    samples = []
    async with client(base) as http:
        await fetch(http, "/")
        for round_ in range(rounds):
            name = f"live{round_}"
            async with http.get(
                f"/objects/{object_id}/events",
                headers={"Accept": "text/event-stream"},
                timeout=aiohttp.ClientTimeout(total=None),
            ) as response:
                if response.status == 404:
                    print(f"{'update latency':<28} not built (404)", flush=True)
                    return
                if response.status != 200:
                    print(f"{'update latency':<28} HTTP {response.status}", flush=True)
                    return
                await response.content.readline()  # ": connected"
                await asyncio.sleep(1.0)  # the snapshot's events pass
                system.sql(f"CREATE CLUSTER REPLICA bench.{name} SIZE 'xsmall'", DDL_TIMEOUT_S)
                ((replica_id,),) = system.sql(
                    "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c"
                    f" ON c.id = r.cluster_id WHERE c.name = 'bench' AND r.name = '{name}'"
                )
                arrived: asyncio.Future[float] = asyncio.get_running_loop().create_future()
                reader = asyncio.create_task(read_events(response, replica_id, arrived))
                visible = await asyncio.wait_for(
                    first_visible(
                        pgwire_url(system),
                        "SELECT count(*) > 0 FROM mz_internal.mz_compute_operator_hydration_statuses"
                        " WHERE object_id = %s AND replica_id = %s",
                        (object_id, replica_id),
                    ),
                    120,
                )
                try:
                    at = await asyncio.wait_for(arrived, 30)
                except TimeoutError:
                    print(f"{'update latency':<28} no event named {replica_id} in 30 s", flush=True)
                    reader.cancel()
                    return
                samples.append(at - visible)
            system.sql(f"DROP CLUSTER REPLICA bench.{name}", DDL_TIMEOUT_S)
    p50, _ = percentiles(samples)
    print(
        f"{'update latency':<28} p50 {p50 * 1000:7.1f} ms   max {max(samples) * 1000:7.1f} ms"
        f"   (visible in SQL -> event at the client, {len(samples)} new replicas;"
        f" {p50 / UPDATE_TARGET_S:.2f}x the 1 s target: {verdict(max(samples), UPDATE_TARGET_S)})",
        flush=True,
    )


# -- idle cost --------------------------------------------------------------------


def idle_cost(system: LoupeUp, before_sessions: int, seconds: float) -> None:
    console_pid = int(ready_file(system, "console")["pid"])
    coordinator_pid = int(ready_file(system, "coordinator")["pid"])
    statements = (
        "SELECT count(*) FROM mz_internal.mz_recent_activity_log "
        "WHERE application_name = 'loupe-console'"
    )
    # The console's connections close IDLE_CLOSE_S after their last use.
    eventually_truthy(
        lambda: coordinator_sessions(system) <= before_sessions, IDLE_CLOSE_S + 30, interval=0.2
    )
    time.sleep(2.0)  # the statement log's last flush
    logged_before = system.sql(statements)[0][0]
    console_cpu, coordinator_cpu = cpu_seconds(console_pid), cpu_seconds(coordinator_pid)
    began = time.monotonic()
    most = 0
    while time.monotonic() - began < seconds:
        most = max(most, coordinator_sessions(system) - before_sessions)
        time.sleep(0.5)
    wall = time.monotonic() - began
    console_used = cpu_seconds(console_pid) - console_cpu
    coordinator_used = cpu_seconds(coordinator_pid) - coordinator_cpu
    time.sleep(2.0)
    logged = system.sql(statements)[0][0] - logged_before
    ok = most <= 0 and logged == 0 and console_used < 0.05 * wall
    print(
        f"{f'idle {wall:.0f} s, nobody looking':<28} console CPU {console_used * 1000:.0f} ms"
        f" ({console_used / wall * 100:.2f} % of a core; the coordinator's"
        f" {coordinator_used * 1000:.0f} ms), console sessions in the coordinator {max(most, 0)},"
        f" statements by loupe-console {logged} (target: nothing: {'met' if ok else 'NOT met'})",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="renders timed per page")
    parser.add_argument("--replicas", type=int, default=4, help="replicas of cluster bench")
    parser.add_argument("--objects", type=int, default=50, help="tables, indexes and MVs")
    parser.add_argument("--browser-rounds", type=int, default=5, help="Chromium loads per page")
    parser.add_argument("--no-browser", action="store_true", help="skip Chromium")
    parser.add_argument("--update-rounds", type=int, default=3, help="replicas added live")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle measured")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(
            Path(scratch) / "data", env={"LOUPE_CONNECTION_IDLE_CLOSE": str(IDLE_CLOSE_S)}
        )
        try:
            system.start()
            before_sessions = coordinator_sessions(system)
            ids = populate(system, options.replicas, options.objects)
            began = time.monotonic()
            eventually_truthy(lambda: hydrated(system, ids, options.replicas), 600, interval=1.0)
            ((replicas,),) = system.sql(
                "SELECT count(*) FROM mz_catalog.mz_cluster_replicas WHERE id LIKE 'u%'"
            )
            ((count,),) = system.sql(
                "SELECT (SELECT count(*) FROM mz_catalog.mz_tables WHERE name LIKE 'bench_%')"
                " + (SELECT count(*) FROM mz_catalog.mz_indexes WHERE name LIKE 'bench_%')"
                " + (SELECT count(*) FROM mz_catalog.mz_materialized_views"
                " WHERE name LIKE 'bench_%')"
            )
            print(
                f"{count} objects on {replicas} user replicas, {len(ids)} dataflows per"
                f" bench replica hydrated in {time.monotonic() - began:.1f} s",
                flush=True,
            )
            ((mv_id,),) = system.sql(
                "SELECT id FROM mz_catalog.mz_materialized_views WHERE name LIKE 'bench_mv%'"
                " ORDER BY id LIMIT 1"
            )
            pages = [
                ("/clusters", "/clusters"),
                ("/objects", "/objects"),
                ("/activity", "/activity"),
                ("/objects/<mv>", f"/objects/{mv_id}"),
                ("/objects/<mv>/operators", f"/objects/{mv_id}/operators"),
            ]
            built = asyncio.run(renders(system, pages, options.rounds))
            if built and not options.no_browser:
                asyncio.run(browser_loads(system, built, options.browser_rounds))
            asyncio.run(update_latency(system, mv_id, options.update_rounds))
            idle_cost(system, before_sessions, options.idle)
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
