"""Overload slows Loupe down; it never breaks it (issue 11, item 4), every service a real process.

More concurrent clients than the machine has cores run a mix of SELECT,
INSERT, CREATE TABLE and DROP TABLE for a while. Statements queue and take
longer, but each either succeeds or fails with the SQLSTATE its SQL calls for
(a duplicate name or a table another client dropped a moment ago, or 57014 for
the clients that set a statement_timeout); none fails with an internal
timeout, XX000, a service status name or a gRPC error. The coordinator's
queues show in its metrics.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import re
import signal
import statistics
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from loupe.client import ServerNotice, SqlClient, StatementResult
from loupe.common.errors import LoupeError
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CLIENTS = max(16, 4 * (os.cpu_count() or 1))
DURATION = float(os.environ.get("LOUPE_OVERLOAD_SECONDS", "40"))
STATEMENT_TIMEOUT = "5s"
# Names every client uses, so that CREATE and DROP race for them.
SHARED_NAMES = [f"contested_{i}" for i in range(4)]

DUPLICATE = {"42710", "42P07"}  # Loupe answers 42710 (duplicate_object), PostgreSQL 42P07
UNDEFINED = {"42P01"}
# What each kind of statement may fail with under this workload: the SQL's own answers.
# A read whose table another client drops while it waits: Materialize's words and code.
DROPPED_MEANWHILE = {"42704"}
EXPECTED = {
    "select": UNDEFINED | DROPPED_MEANWHILE,
    "select_catalog": set(),
    "insert": UNDEFINED,
    "create": DUPLICATE,
    "drop": UNDEFINED,
}


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("overload") / "data")
    loupe.start()
    loupe.sql("CREATE TABLE shared (client int, n int)")
    yield loupe
    loupe.stop()


def statement(rng: random.Random, client: int, step: int) -> tuple[str, str]:
    """(kind, sql): a random statement of the mix."""
    name = rng.choice(SHARED_NAMES)
    roll = rng.random()
    if roll < 0.35:
        return "select", rng.choice(["SELECT count(*) FROM shared", f"SELECT count(*) FROM {name}"])
    if roll < 0.45:
        return "select_catalog", "SELECT count(*) FROM mz_catalog.mz_tables"
    if roll < 0.75:
        table = rng.choice(["shared", name])
        return "insert", f"INSERT INTO {table} VALUES ({client}, {step})"
    if roll < 0.88:
        return "create", f"CREATE TABLE {name} (client int, n int)"
    return "drop", f"DROP TABLE {name}"


def impatient(client: int) -> bool:
    """Every fourth client sets a statement_timeout: its statements may also end with 57014."""
    return client % 4 == 3


def run_client(port: int, client: int, until: float) -> list[tuple[str, float, str, bool]]:
    """Run the mix until ``until``: (kind, seconds, outcome: "ok" or the error's code)."""
    rng = random.Random(client)
    results: list[tuple[str, float, str]] = []
    options = {"statement_timeout": STATEMENT_TIMEOUT} if impatient(client) else {}
    with SqlClient(
        "127.0.0.1", port, application_name=f"overload-{client}", options=options
    ) as sql:
        step = 0
        while time.monotonic() < until:
            kind, text = statement(rng, client, step)
            step += 1
            began = time.monotonic()
            try:
                sql.execute(text)
                outcome = "ok"
            except LoupeError as error:
                outcome = f"{error.code}: {error.message}"
            except Exception as error:  # a gRPC error or a dropped connection: a failure
                outcome = f"{type(error).__name__}: {error}"
            results.append((kind, time.monotonic() - began, outcome))
    return [(kind, seconds, outcome, impatient(client)) for kind, seconds, outcome in results]


def coordinator_metrics(data_dir: Path) -> str:
    # Where the coordinator announces itself (``write_ready_file``): not a walk of the
    # whole data dir, whose storage flush directories come and go meanwhile.
    ready = data_dir / "run" / "coordinator.ready.json"
    port = json.loads(ready.read_text())["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def test_more_clients_than_cores_only_wait(system: LoupeUp) -> None:
    began = time.monotonic()
    until = began + DURATION
    with concurrent.futures.ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        futures = [pool.submit(run_client, system.sql_port, c, until) for c in range(CLIENTS)]
        per_client = [f.result(timeout=DURATION + 600) for f in futures]
    elapsed = time.monotonic() - began
    results = [r for client in per_client for r in client]
    unexpected = [
        (kind, outcome)
        for kind, _, outcome, timeout in results
        if outcome != "ok"
        and outcome.split(":")[0] not in EXPECTED[kind] | ({"57014"} if timeout else set())
    ]
    latencies: dict[str, list[float]] = defaultdict(list)
    outcomes: Counter[tuple[str, str]] = Counter()
    for kind, seconds, outcome, _ in results:
        latencies[kind].append(seconds)
        outcomes[kind, outcome.split(":")[0]] += 1
    every = [seconds for _, seconds, _, _ in results]
    print(  # the numbers for the report (pytest -s)
        f"\n{CLIENTS} clients on {os.cpu_count()} cores, {elapsed:.1f}s: {len(results)} statements,"
        f" {len(results) / elapsed:.1f}/s; p50 {statistics.median(every):.3f}s"
        f" p99 {percentile(every, 0.99):.3f}s max {max(every):.3f}s"
    )
    for kind, values in sorted(latencies.items()):
        print(
            f"  {kind:15} n={len(values):5} p50 {statistics.median(values):.3f}s"
            f" p99 {percentile(values, 0.99):.3f}s max {max(values):.3f}s"
        )
    print("  outcomes:", dict(outcomes))
    assert not unexpected, Counter(unexpected).most_common(10)
    assert all(client for client in per_client), "a client finished no statement"
    assert all(any(r[2] == "ok" for r in client) for client in per_client)
    # The system is still whole: a fresh session's statements run.
    assert system.sql("SELECT count(*) FROM shared")[0][0] > 0
    text = coordinator_metrics(system.data_dir)
    peek_queues = set(re.findall(r'queue_admitted_total\{queue="(peek:[^"]+)"\}', text))
    assert len(peek_queues) == 2, peek_queues  # the system cluster's and quickstart's
    for queue in (*peek_queues, "ddl", "table_write"):
        assert f'loupe_coordinator_queue_waiting{{queue="{queue}"}}' in text, queue
        assert f'loupe_coordinator_queue_admitted_total{{queue="{queue}"}}' in text, queue
    # DDL arrived faster than it could be done: it waited (it did not fail).
    waited = re.search(r'loupe_coordinator_queue_waited_total\{queue="ddl"\} (\S+)', text)
    assert waited is not None
    assert float(waited.group(1)) > 0
    assert "loupe_statement_logging_queue_depth" in text


def controller_pid(system: LoupeUp) -> int:
    (pid,) = [pid for pid, cmdline in system.processes() if "loupe.cli.main controller " in cmdline]
    return pid


def test_ddl_while_the_storage_writer_is_stuck_answers_and_mz_catalog_catches_up(
    system: LoupeUp,
) -> None:
    """The user trial's failure: DDL answered ``no answer on … AppendUpdates within 30.0s``.

    With the controller (and its storage writer) stopped, CREATE TABLE commits
    and answers with a notice; once the controller runs again, mz_catalog
    shows the table without another DDL.
    """
    pid = controller_pid(system)
    began = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        with SqlClient("127.0.0.1", system.sql_port) as sql:
            items = list(sql.stream("CREATE TABLE made_while_stuck (a int)"))
        answered = time.monotonic() - began
    finally:
        os.kill(pid, signal.SIGCONT)
    notices = [item.message for item in items if isinstance(item, ServerNotice)]
    assert [item.tag for item in items if isinstance(item, StatementResult)] == ["CREATE TABLE"]
    assert any("mz_catalog does not show it yet" in notice for notice in notices), notices
    assert answered < 120
    deadline = time.monotonic() + 120
    while not system.sql("SELECT 1 FROM mz_catalog.mz_tables WHERE name = 'made_while_stuck'"):
        assert time.monotonic() < deadline, "mz_catalog did not catch up"
        time.sleep(1)
