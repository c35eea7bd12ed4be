"""Under load a query waits, it does not fail (issue 10, item 3), every service a real process.

A read whose only replica is paused or gone waits and is answered once a
replica is back; ``statement_timeout`` is the one limit (57014) and its
cancel reaches the replica; dropping what a waiting read needs (its cluster,
its index) ends it with a clear error instead of a hang.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loupe.common.errors import LoupeError
from loupe.testing import eventually
from loupe.testing.system import LoupeUp, replica_pid

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


# A read still waiting after a round is logged ("read is waiting"): rounds of 2 s, well
# below the 4-5 s a paused replica takes to be replaced, so the first test's read is
# always logged (with the default 5 s round, whether it was depended on when the
# replica's last heartbeat fell before the pause).
PEEK_ROUND_S = "2"


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(
        tmp_path_factory.mktemp("waits") / "data", env={"LOUPE_PEEK_ROUND": PEEK_ROUND_S}
    )
    loupe.start()
    yield loupe
    loupe.stop()


@pytest.fixture
def background():
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


@contextlib.contextmanager
def paused(pid: int):
    """SIGSTOP ``pid`` for the block (SIGCONT after, if it still exists)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def replica_of(system: LoupeUp, cluster: str) -> tuple[str, int]:
    ((replica_id,),) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c "
        f"ON c.id = r.cluster_id WHERE c.name = '{cluster}'"
    )
    pid = replica_pid(system.data_dir, replica_id)
    assert pid is not None, f"no process for replica {replica_id}"
    return replica_id, pid


def log_text(data_dir: Path, name: str) -> str:
    path = data_dir / "logs" / name
    return path.read_text(errors="replace") if path.exists() else ""


def wait_until(check: Any, timeout: float) -> Any:
    return eventually.wait_until(check, timeout, retry_on=(AssertionError, LoupeError))


def counter(data_dir: Path, service: str, name: str, **labels: str) -> float:
    """The sum of the samples of counter ``name`` (with ``labels``) that ``service`` serves."""
    ready = data_dir / "run" / f"{service}.ready.json"
    port = json.loads(ready.read_text())["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_a_fast_path_read_goes_to_the_replica_not_through_the_controller(system):
    """The coordinator sends a fast-path peek to the replica itself (``Peek.direct``, the
    routes the controller publishes): the controller routes none of them."""
    system.sql("CREATE TABLE fp (a int); INSERT INTO fp VALUES (1), (2)")
    system.sql("CREATE DEFAULT INDEX ON fp")
    assert system.sql("SELECT a FROM fp WHERE a = 2") == [(2,)]  # hydrated

    def direct() -> float:
        name = "loupe_coordinator_peeks_direct_total"
        return counter(system.data_dir, "coordinator", name, outcome="answered")

    def routed() -> float:
        return counter(system.data_dir, "controller", "loupe_controller_peeks_total")

    direct_before, routed_before = direct(), routed()
    for value in (1, 2, 1):
        assert system.sql(f"SELECT a FROM fp WHERE a = {value}") == [(value,)]
    assert direct() == direct_before + 3
    assert routed() == routed_before


def test_a_read_waits_for_its_replica_to_come_back(system, background):
    """The only replica of quickstart hangs (SIGSTOP) while a read waits on it: the
    controller restarts it after its heartbeat timeout and the read is answered."""
    system.sql("CREATE TABLE w (a int); INSERT INTO w VALUES (1), (2)")
    system.sql("CREATE DEFAULT INDEX ON w")
    assert system.sql("SELECT a FROM w WHERE a = 1") == [(1,)]
    _, pid = replica_of(system, "quickstart")
    with paused(pid):
        began = time.monotonic()
        read = background.submit(system.sql, "SELECT a FROM w WHERE a = 2", 180)
        rows = read.result(timeout=180)
        waited = time.monotonic() - began
    assert rows == [(2,)]
    # It did wait: for the heartbeat timeout (5 s) that restarted the replica, counted
    # from its last heartbeat, which came up to one heartbeat interval (1 s) before the pause.
    assert waited > 5 - 1, waited
    assert replica_of(system, "quickstart")[1] != pid
    output = "".join(system.output) + log_text(system.data_dir, "coordinator.log")
    assert "read is waiting" in output
    # It went to the replica first, then (unanswered) to the controller, which waited.
    assert "direct peek asked of the controller" in output


def test_statement_timeout_cancels_the_waiting_peek_on_the_replica(system):
    """statement_timeout = '1s' on a paused replica: 57014, and the replica gets CancelPeek."""
    system.sql("CREATE TABLE st (a int); INSERT INTO st VALUES (7)")
    system.sql("CREATE DEFAULT INDEX ON st")
    assert system.sql("SELECT a FROM st") == [(7,)]
    replica_id, pid = replica_of(system, "quickstart")
    log_name = f"replica-{replica_id}.log"

    def cancels() -> int:
        # The replica, resumed, may read the peek and its cancel in two reads and answer
        # the peek first: the cancel then finds it answered, and says so.
        text = log_text(system.data_dir, log_name)
        return text.count("peek canceled") + text.count("cancel of a peek that is not running")

    canceled_before = cancels()
    with paused(pid):
        with pytest.raises(LoupeError) as caught:
            system.sql("SET statement_timeout = '1s'; SELECT a FROM st WHERE a = 7", 30)
        # The cancel goes out after the error; resumed once it waits for the replica
        # (well within the heartbeat timeout), the same process sees it.
        time.sleep(1.0)
    assert (caught.value.code, caught.value.message) == (
        "57014",
        "canceling statement due to statement timeout",
    )

    def canceled_on_the_replica() -> None:
        assert cancels() > canceled_before, "the replica never saw CancelPeek"

    wait_until(canceled_on_the_replica, 30)
    assert replica_pid(system.data_dir, replica_id) == pid


def test_dropping_the_cluster_ends_a_waiting_read(system, background):
    """DROP CLUSTER while a read waits on it: 42704 naming the cluster, not a hang."""
    system.sql("CREATE TABLE dc (a int); INSERT INTO dc VALUES (1)")
    system.sql("CREATE CLUSTER doomed REPLICAS (r1 (SIZE '1'))")
    wait_until(lambda: replica_of(system, "doomed"), 60)
    _, pid = replica_of(system, "doomed")
    with paused(pid):
        read = background.submit(system.sql, "SET cluster = 'doomed'; SELECT count(*) FROM dc", 120)
        time.sleep(1)
        assert not read.done()
        system.sql("DROP CLUSTER doomed")
        with pytest.raises(LoupeError) as caught:
            read.result(timeout=60)
    assert (caught.value.code, caught.value.message) == (
        "42704",
        'query could not complete because cluster "doomed" was dropped',
    )


def test_dropping_the_index_ends_a_waiting_read(system, background):
    """DROP INDEX while a fast-path read of it waits: 42704 naming the index."""
    system.sql("CREATE TABLE di (a int); INSERT INTO di VALUES (3)")
    system.sql("CREATE INDEX di_a ON di (a)")
    assert system.sql("SELECT a FROM di") == [(3,)]
    _, pid = replica_of(system, "quickstart")
    with paused(pid):
        read = background.submit(system.sql, "SELECT a FROM di WHERE a = 3", 120)
        time.sleep(1.5)
        assert not read.done()
        system.sql("DROP INDEX di_a")
        with pytest.raises(LoupeError) as caught:
            read.result(timeout=60)
    assert (caught.value.code, caught.value.message) == (
        "42704",
        'query could not complete because index "materialize.public.di_a" was dropped',
    )
