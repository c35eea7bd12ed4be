"""One chaos run: ``loupe up``, the workload, faults at random times, checks after each.

After each fault the run waits for the system to answer again (the recovery
time, within ``recovery_bound`` seconds), pauses the writing sessions, and
checks writes, views, catalog and processes (``checker``). At the end it
checks again, optionally runs the strict-serializability histories on the
same (battered) system, stops ``loupe up`` and looks for leftover processes.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loupe.testing.chaos import faults as fault_kinds
from loupe.testing.chaos.checker import CATALOG_BOUND, Checker, check_processes
from loupe.testing.chaos.faults import KINDS, Fault
from loupe.testing.chaos.report import Report
from loupe.testing.chaos.workload import Workload
from loupe.testing.postgres import postgres_database
from loupe.testing.procs import Tracker, read_proc
from loupe.testing.system import LoupeUp, processes_mentioning

# The bound this test holds Loupe to: every fault answered again within it.
RECOVERY_BOUND = 120.0


@dataclass
class Options:
    faults: int = len(KINDS)
    minutes: float | None = None  # stop injecting faults after this long (None: after ``faults``)
    seed: int | None = None
    writers: int = 3
    readers: int = 2
    gap: tuple[float, float] = (3.0, 10.0)  # seconds of workload between recovery and a fault
    # Seconds the DDL session rests between rounds (3-5 DDL each). mz_catalog takes about
    # one commit per storage flush: DDL faster than that leaves a backlog after an outage.
    ddl_pause: tuple[float, float] = (0.2, 1.0)
    # Seconds the catalog relations may take to equal the catalog at a check.
    catalog_bound: float = CATALOG_BOUND
    recovery_bound: float = RECOVERY_BOUND
    # Kinds held to another bound than ``recovery_bound`` (kind -> seconds).
    kind_bounds: dict[str, float] = field(default_factory=dict)
    kinds: tuple[str, ...] = KINDS
    # Replica faults hit replicas whose role starts with this ("replica:u": user ones).
    replicas_of: str = "replica:"
    serializability_rounds: int = 0
    data_dir: Path | None = None  # kept afterwards; default a temporary one, kept on findings


def run_chaos(options: Options, say: Callable[[str], None] = print) -> Report:
    seed = options.seed if options.seed is not None else random.randrange(2**31)
    say(f"chaos: seed {seed} (rerun with --seed {seed})")
    rng = random.Random(seed)
    report = Report(
        seed=seed, recovery_bound=options.recovery_bound, kind_bounds=dict(options.kind_bounds)
    )
    scratch = None if options.data_dir else Path(tempfile.mkdtemp(prefix="loupe-chaos-"))
    data_dir = options.data_dir or scratch / "data"  # type: ignore[operator]
    began = time.monotonic()
    system = LoupeUp(data_dir)
    system.start()
    assert system.process is not None
    tracker = Tracker(system.process.pid)
    tracker.snapshot()
    try:
        with postgres_database() as postgres_url:
            _run(
                options,
                system,
                tracker,
                Checker(system.sql_port, postgres_url, catalog_bound=options.catalog_bound),
                rng,
                report,
                say,
            )
    finally:
        system.stop()
        # `loupe up`'s own lines (which service exited, restarts) next to the services' logs.
        (data_dir / "logs" / "up.log").write_text("".join(system.output))
        report.findings += _leftovers(tracker, data_dir)
        report.seconds = time.monotonic() - began
    if scratch is not None:
        if report.ok:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            say(f"chaos: logs kept in {data_dir / 'logs'}")
    return report


def _run(
    options: Options,
    system: LoupeUp,
    tracker: Tracker,
    checker: Checker,
    rng: random.Random,
    report: Report,
    say: Callable[[str], None],
) -> None:
    workload = Workload(
        system.sql_port,
        writers=options.writers,
        readers=options.readers,
        seed=rng.randrange(2**31),
        ddl_pause=options.ddl_pause,
    )
    workload.setup()
    workload.start()
    stop_at = time.monotonic() + options.minutes * 60 if options.minutes else None
    count = options.faults if stop_at is None else 100_000  # --minutes ends it first
    try:
        for number, kind in enumerate(fault_kinds.schedule(rng, count, options.kinds), 1):
            if stop_at is not None and time.monotonic() > stop_at:
                break
            time.sleep(rng.uniform(*options.gap))
            fault = _one_fault(kind, number, system, tracker, rng, options)
            if fault is None:
                report.findings.append(f"no process to inject {kind} into")
                continue
            report.faults.append(fault)
            say(
                f"fault {number}: {kind} of {fault.target} (pid {fault.pid}):"
                f" queries after {_seconds(fault.query_seconds)}, writes after"
                f" {_seconds(fault.write_seconds)}"
            )
            if fault.query_seconds is None or fault.write_seconds is None:
                say("chaos: the system did not recover; stopping the run")
                break
            catalog_bound = catalog_bound_after(options, kind)
            fault.findings += _check(workload, checker, tracker, system, report, catalog_bound)
            for finding in fault.findings:
                say(f"  finding: {finding}")
    finally:
        workload.stop()
        report.counts.update(workload.ledger.counts)
        report.errors.update(workload.ledger.errors)
        report.error_examples.update(workload.ledger.examples)
    final = _check(workload, checker, tracker, system, report)
    report.findings += [f"at the end: {text}" for text in final]
    report.catalog_lags = checker.catalog_lags
    report.lost = checker.lost
    if options.serializability_rounds:
        from loupe.testing.chaos.serializability import run_rounds

        report.findings += run_rounds(system, options.serializability_rounds, say=say)


def catalog_bound_after(options: Options, kind: str) -> float:
    """Seconds the catalog relations may take to converge after a fault of ``kind``: a kind
    held to a longer recovery bound (a Spark restart: mz_catalog waits for the cold JVM's
    backlog) has that long for them too."""
    return max(options.catalog_bound, options.kind_bounds.get(kind, 0.0))


def _one_fault(
    kind: str,
    number: int,
    system: LoupeUp,
    tracker: Tracker,
    rng: random.Random,
    options: Options,
) -> Fault | None:
    target = fault_kinds.pick_target(kind, tracker.snapshot(), rng, options.replicas_of)
    if target is None:
        return None
    fault = fault_kinds.inject(kind, target)
    bound = options.kind_bounds.get(kind, options.recovery_bound)
    fault_kinds.await_recovery(fault, system.sql_port, bound, probe_id=number)
    if kind == "replica-stop":
        fault_kinds.settle_stopped_replica(fault, target)
    return fault


def _check(
    workload: Workload,
    checker: Checker,
    tracker: Tracker,
    system: LoupeUp,
    report: Report,
    catalog_bound: float | None = None,
) -> list[str]:
    """Every check with the writers paused; a check that cannot run is itself a finding
    (``catalog_bound``: the catalog relations' bound, default the checker's)."""
    findings: list[str] = []
    report.checks += 1
    with workload.gate.paused():
        for name, check in (
            ("writes and views", lambda: checker.data(workload.ledger)),
            ("catalog", lambda: checker.catalog(workload.ledger, catalog_bound)),
            ("processes", lambda: check_processes(tracker, _replica_ids(checker))),
        ):
            try:
                findings += check()
            except Exception as error:  # the system failed the check by not answering it
                findings.append(f"{name} check failed to run: {type(error).__name__}: {error}")
    return findings


def _replica_ids(checker: Checker) -> set[str]:
    return {row[0] for row in checker.query("SELECT id FROM mz_catalog.mz_cluster_replicas")}


def _leftovers(tracker: Tracker, data_dir: Path, grace: float = 20.0) -> list[str]:
    """After ``loupe up`` stopped: nothing it started may still run."""
    deadline = time.monotonic() + grace
    ancestors = _ancestors()
    while True:
        orphans = tracker.orphans()
        mentioning = [p for p in processes_mentioning(str(data_dir)) if p[0] not in ancestors]
        if (not orphans and not mentioning) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    findings = [f"after stop: process {p.pid} ({p.role}) still running" for p in orphans]
    known = {p.pid for p in orphans}
    findings += [
        f"after stop: process {pid} still running: {cmd[:120]}"
        for pid, cmd in mentioning
        if pid not in known
    ]
    return findings


def _ancestors() -> set[int]:
    """This process and those above it (their command lines may name the data dir too)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        proc = read_proc(pid)
        pid = proc.ppid if proc else 0
    return found


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"
