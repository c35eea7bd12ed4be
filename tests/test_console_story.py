"""The console on a laptop: `loupe up` with its defaults (trust), no browser.

`loupe up` prints the console's URL; opening it logs in as materialize without a
form (the coordinator trusts it) and lands on the cluster list, read through SQL;
`/healthz` answers; and once nobody looks, the console holds no session in the
coordinator and runs nothing there.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from loupe.testing import assert_eventually
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

IDLE_CLOSE = 1.0
COOKIE = "loupe_console_session"
CONSOLE_STATEMENTS = (
    "SELECT count(*) FROM mz_internal.mz_recent_activity_log "
    "WHERE application_name = 'loupe-console'"
)


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(
        tmp_path_factory.mktemp("console-story") / "data",
        # A console session's unused connections close after a second.
        env={"LOUPE_CONNECTION_IDLE_CLOSE": str(IDLE_CLOSE)},
    )
    loupe.start()
    yield loupe
    loupe.stop()


def coordinator_sessions(system: LoupeUp) -> int:
    """The coordinator's open client sessions (its ``loupe_coordinator_sessions`` gauge)."""
    ready = json.loads((Path(system.data_dir) / "run" / "coordinator.ready.json").read_text())
    url = f"http://127.0.0.1:{ready['metrics_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r"^loupe_coordinator_sessions (\S+)$", text, re.MULTILINE)
    assert match, "no loupe_coordinator_sessions in the coordinator's metrics"
    return int(float(match.group(1)))


def console_pid(system: LoupeUp) -> int:
    ready = json.loads((Path(system.data_dir) / "run" / "console.ready.json").read_text())
    return int(ready["pid"])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_loupe_up_prints_the_console_url(system):
    lines = [line for line in system.output if line.strip().startswith("Console:")]
    assert lines, "".join(system.output)
    assert system.console_url in lines[0]


async def test_a_visit_logs_in_by_trust_and_shows_the_clusters(system):
    before = coordinator_sessions(system)
    # Cookies of 127.0.0.1 are kept only by an "unsafe" jar (an IP, not a domain).
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar, headers={"Accept": "text/html"}) as client:
        async with client.get(system.console_url) as response:
            assert response.status == 200
            assert str(response.url) == system.console_url + "clusters"
            # Set on the redirect from / and kept: HttpOnly, SameSite=Strict.
            assert [r.status for r in response.history] == [303]
            set_cookie = response.history[0].headers["Set-Cookie"]
            page = await response.text()
        # The real cluster list, read through SQL as materialize, with no login form.
        assert "quickstart" in page
        assert "mz_catalog_server" in page
        assert "data-replica" in page
        assert 'name="password"' not in page
        assert COOKIE in set_cookie
        assert "HttpOnly" in set_cookie
        assert "SameSite=Strict" in set_cookie
        # A second page view reuses the session (no second login).
        async with client.get(system.console_url + "clusters") as response:
            assert response.status == 200
            assert not response.history
        async with client.get(system.console_url + "healthz") as response:
            health = await response.json()
    assert health["status"] == "ok"
    assert health["sessions"] == 1, health
    # (Its connection was open in the coordinator a moment ago; asserting that
    # here would race with the 1 s idle close on a loaded machine. The
    # statement log below shows what it ran.)

    # Nobody looks any more: the console's connections close and nothing runs.
    await assert_eventually(
        lambda: _assert_equal(coordinator_sessions(system), before), timeout=IDLE_CLOSE + 15
    )
    # The statement log shows what the console ran as loupe-console (the
    # application_name its connections give), and then that it runs nothing.
    # The log is written in batches: wait until two reads a few flushes apart agree.
    logged = await assert_eventually(lambda: _settled(system), timeout=60)
    pid = console_pid(system)
    cpu_before = cpu_seconds(pid)
    await asyncio.sleep(5)
    assert coordinator_sessions(system) == before
    assert system.sql(CONSOLE_STATEMENTS)[0][0] == logged
    # The reaper wakes once a second and finds nothing to do.
    assert cpu_seconds(pid) - cpu_before < 0.5


def _assert_equal(value: int, expected: int) -> None:
    assert value == expected, f"{value} sessions open, {expected} expected"


def _settled(system: LoupeUp) -> int:
    """The count of the console's logged statements, once it stopped growing."""
    first = system.sql(CONSOLE_STATEMENTS)[0][0]
    time.sleep(3)
    second = system.sql(CONSOLE_STATEMENTS)[0][0]
    assert first > 0
    assert first == second, f"{first} then {second} statements: still being written"
    return second


def test_healthz_answers_without_a_session(system):
    began = time.monotonic()
    with urllib.request.urlopen(system.console_url + "healthz", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")
        assert json.loads(response.read())["status"] == "ok"
    assert time.monotonic() - began < 5
