"""The chaos and soak tests' own logic, without a system: the checker must catch what it
claims to catch (a lost, doubled, phantom or torn write; a duplicated or orphaned process),
and the reports must compute what they print."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

from loupe.common.errors import LoupeError
from loupe.testing.chaos.checker import check_rows, normalized, process_findings
from loupe.testing.chaos.faults import KINDS, schedule
from loupe.testing.chaos.report import Report, percentile
from loupe.testing.chaos.run import Options, catalog_bound_after
from loupe.testing.chaos.workload import Gate, Ledger, NotSent, definite_failure
from loupe.testing.procs import Proc, Tracker, role_of
from loupe.testing.soak import Sample, svg, verdicts


def ledger(rows: dict[int, str], batches: list[tuple[int, ...]] | None = None) -> Ledger:
    return Ledger(rows=rows, batches=batches or [])


def test_check_rows_accepts_what_the_ledger_allows() -> None:
    states = {1: "present", 2: "maybe", 3: "maybe", 4: "deleted", 5: "maybe-deleted"}
    findings, lost = check_rows([(1,), (2,), (5,)], ledger(states, [(2,), (3,)]))
    assert (findings, lost) == ([], 0)


def test_check_rows_finds_lost_doubled_undeleted_phantom_and_torn_writes() -> None:
    states = {1: "present", 2: "present", 3: "deleted", 4: "maybe", 5: "maybe", 6: "maybe"}
    rows = [(2,), (2,), (3,), (4,), (99,), (6,), (6,)]
    findings, lost = check_rows(rows, ledger(states, [(4, 5)]))
    assert lost == 1
    text = "\n".join(findings)
    assert "lost 1 acknowledged rows, e.g. ids [1]" in text
    assert "2 rows present more than once, e.g. ids [2, 6]" in text
    assert "1 acknowledged deletes did not take: [3]" in text
    assert "1 rows never sent are present: [99]" in text
    assert "1 inserts of unknown outcome are partly there: [(4, 5)]" in text


def test_numbers_compare_exactly_whatever_their_python_type() -> None:
    from decimal import Decimal

    assert normalized([(1, Decimal("2.50"), "a")]) == normalized([(1.0, 2.5, "a")])
    assert normalized([(1,), (1,)]) != normalized([(1,)])


def test_errors_that_prove_nothing_was_written_are_definite() -> None:
    assert definite_failure(LoupeError("42P01", "no such table"))
    assert definite_failure(NotSent("connection refused"))
    assert definite_failure(LoupeError("53000", "the queue is full"))
    assert not definite_failure(LoupeError("58000", "internal"))
    assert not definite_failure(LoupeError("57014", "statement timeout"))
    assert not definite_failure(TimeoutError())


def proc(pid: int, cmdline: str, state: str = "S") -> Proc:
    return Proc(pid=pid, ppid=1, start=pid, state=state, cmdline=cmdline)


PY = "python -m loupe.cli.main"


def test_roles_by_command_line() -> None:
    assert role_of(f"{PY} compute-replica --replica-id u1 --cluster-id u1") == "replica:u1"
    assert role_of(f"{PY} catalog-server --data-dir d") == "catalog"
    assert role_of(f"{PY} controller --data-dir d") == "controller"
    assert role_of("/usr/lib/jvm/bin/java -cp x org.apache.spark.deploy.SparkSubmit") == "spark"
    assert role_of("/x/.venv/bin/nats-server -p 1") == "nats"


def test_process_findings_name_missing_duplicated_stray_and_orphaned_processes() -> None:
    services = [proc(n, f"{PY} {c}") for n, c in enumerate(("catalog-server", "coordinator"))]
    tree = [
        *services,
        proc(10, "/bin/nats-server"),
        proc(11, f"{PY} compute-replica --replica-id u1"),
        proc(12, f"{PY} compute-replica --replica-id u1", state="T"),
        proc(13, f"{PY} compute-replica --replica-id u9"),
    ]
    orphan = proc(20, "/usr/lib/jvm/bin/java org.apache.spark.deploy.SparkSubmit")
    findings = process_findings(tree, [orphan], {"u1", "s1"})
    assert "0 controller processes, not 1" in findings
    assert "2 processes of replica u1, not 1" in findings
    assert "0 processes of replica s1, not 1" in findings
    assert "processes of replicas not in the catalog: ['replica:u9']" in findings
    assert "orphan process 20 (spark, state S)" in findings


def test_tracker_finds_a_child_that_outlived_its_parent(tmp_path) -> None:
    """A real orphan: a shell starts a sleeper in the background and exits."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)",
        ],
    )
    try:
        tracker = Tracker(os.getpid())
        deadline = time.monotonic() + 10
        while not any(p.cmdline == "sleep 30" for p in tracker.snapshot()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert tracker.orphans() == []
        parent.kill()
        parent.wait()
        (orphan,) = tracker.orphans()
        assert orphan.cmdline == "sleep 30"
    finally:
        parent.kill()
        for p in tracker.orphans():
            os.kill(p.pid, 9)


def test_the_gate_waits_for_statements_in_flight() -> None:
    gate, stop = Gate(), threading.Event()
    inside, release = threading.Event(), threading.Event()

    def writer() -> None:
        with gate.passage(stop):
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    inside.wait(5)
    paused = threading.Event()

    def pauser() -> None:
        with gate.paused():
            paused.set()

    pausing = threading.Thread(target=pauser)
    pausing.start()
    assert not paused.wait(0.2)  # the writer is still inside
    release.set()
    assert paused.wait(5)
    thread.join(5)
    pausing.join(5)


def test_schedule_gives_each_kind_its_turn() -> None:
    kinds = schedule(random.Random(3), 2 * len(KINDS))
    assert sorted(kinds) == sorted(KINDS * 2)
    subset = ("replica-kill", "spark-kill")
    chosen = schedule(random.Random(3), 5, subset)
    assert len(chosen) == 5
    assert set(chosen) == set(subset)
    assert abs(chosen.count("replica-kill") - chosen.count("spark-kill")) == 1


def test_report_percentiles_per_kind() -> None:
    from loupe.testing.chaos.faults import Fault

    assert percentile([3.0, 1.0, 2.0, 10.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0, 10.0], 0.95) == 10.0
    report = Report(seed=1, recovery_bound=120)
    report.faults = [
        Fault("controller-kill", "controller", 1, 0.0, 10.0, 11.0),
        Fault("controller-kill", "controller", 2, 0.0, 20.0, None, ["no write"]),
    ]
    row = report.recovery()["controller-kill"]
    assert row["query"] == {"p50": 10.0, "p95": 20.0, "max": 20.0}
    assert row["write_unrecovered"] == 1
    assert not report.ok
    assert "after controller-kill of controller: no write" in report.render()
    assert '"ok": false' in report.to_json()


def test_a_kind_held_to_its_own_bound_is_shown_with_it() -> None:
    report = Report(seed=1, recovery_bound=120, kind_bounds={"spark-kill": 240})
    assert "bound 120s, spark-kill 240s" in report.render()


def test_a_kind_held_to_a_longer_bound_gives_the_catalog_as_long_after_it() -> None:
    options = Options(catalog_bound=120, kind_bounds={"spark-kill": 300, "replica-kill": 60})
    assert catalog_bound_after(options, "spark-kill") == 300
    assert catalog_bound_after(options, "replica-kill") == 120  # a shorter one: the catalog's
    assert catalog_bound_after(options, "controller-kill") == 120


def test_soak_verdicts_tell_growth_from_a_plateau() -> None:
    mib = 1024 * 1024
    samples = [Sample(t, "rss", "flat", 200 * mib + (t % 3) * mib) for t in range(0, 600, 10)]
    samples += [Sample(t, "rss", "leak", 100 * mib + t * mib) for t in range(0, 600, 10)]
    found = {v.series: v for v in verdicts(samples)}
    assert found["flat"].bounded
    assert not found["leak"].bounded
    assert found["leak"].peak == 100 * mib + 590 * mib
    picture = svg(samples, "t")
    assert picture.startswith("<svg")
    assert picture.count("<polyline") == 2
