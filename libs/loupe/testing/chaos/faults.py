"""The faults the chaos test injects, and how long the system takes to answer again.

Every kind but ``replica-stop`` is a SIGKILL of one process of ``loupe up``:
a replica chosen at random, the controller, the coordinator, the catalog
service, or the Spark JVM (the controller's java child). ``replica-stop``
SIGSTOPs a replica: it stays alive but silent past the controller's heartbeat
timeout, which must declare it offline, kill it and start a new incarnation.

Recovery is measured from the signal to the first query that succeeds (a
peek of the index on the quickstart cluster and a catalog query) and then to
the first acknowledged write.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loupe.cli.probe import query_once
from loupe.testing.procs import Proc, alive

KINDS = (
    "replica-kill",
    "replica-stop",
    "controller-kill",
    "coordinator-kill",
    "catalog-kill",
    "spark-kill",
)
SERVICE_OF = {
    "controller-kill": "controller",
    "coordinator-kill": "coordinator",
    "catalog-kill": "catalog",
    "spark-kill": "spark",
}
# The controller's default heartbeat timeout, and how long after it a SIGSTOPped
# replica may still be there before that is a finding.
HEARTBEAT_TIMEOUT = 5.0
STOPPED_REPLICA_GRACE = 30.0
# How many recovery bounds to keep waiting for a recovery that is late.
GIVE_UP = 2
PROBES = ("SELECT count(*) FROM chaos_by_grp", "SELECT count(*) FROM mz_catalog.mz_tables")


@dataclass
class Fault:
    kind: str
    target: str  # the role of the process hit
    pid: int
    at: float  # time.monotonic() of the signal
    query_seconds: float | None = None  # until queries are answered again
    write_seconds: float | None = None  # until a write is acknowledged again
    findings: list[str] = field(default_factory=list)


def schedule(rng: random.Random, count: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """``count`` fault kinds of ``kinds``, each as often as the others (±1), in random order."""
    chosen: list[str] = []
    while len(chosen) < count:
        cycle = list(kinds)
        rng.shuffle(cycle)
        chosen += cycle
    return chosen[:count]


def pick_target(
    kind: str, tree: list[Proc], rng: random.Random, replicas_of: str = "replica:"
) -> Proc | None:
    """The process to hit; a replica fault picks among replicas whose role starts with
    ``replicas_of`` (``replica:u``: user clusters' only)."""
    if kind.startswith("replica-"):
        replicas = sorted((p for p in tree if p.role.startswith(replicas_of)), key=lambda p: p.pid)
        return rng.choice(replicas) if replicas else None
    matching = [p for p in tree if p.role == SERVICE_OF[kind]]
    return matching[0] if matching else None


def inject(kind: str, target: Proc) -> Fault:
    fault = Fault(kind, target.role, target.pid, time.monotonic())
    os.kill(target.pid, signal.SIGSTOP if kind == "replica-stop" else signal.SIGKILL)
    return fault


def await_recovery(fault: Fault, port: int, bound: float, probe_id: int) -> None:
    """Fill in the recovery times. Past ``bound`` seconds that is a finding, but the wait
    goes on (up to ``GIVE_UP`` times the bound) to measure how long recovery does take;
    a time stays None when it did not happen at all.

    A write has recovered once a probe row is acknowledged and a query sees it: an
    acknowledged write that no read can see (the storage writer stuck) is no recovery."""
    give_up = fault.at + GIVE_UP * bound

    def query() -> bool:
        for probe in PROBES:
            query_once("127.0.0.1", port, probe, timeout=5)
        return True

    def write() -> bool:
        if not acknowledged:
            query_once("127.0.0.1", port, f"INSERT INTO chaos_probe VALUES ({probe_id})", timeout=5)
            acknowledged.append(True)
        seen = f"SELECT count(*) FROM chaos_probe WHERE id = {probe_id}"
        return query_once("127.0.0.1", port, seen, timeout=5)[0][0] > 0

    acknowledged: list[bool] = []
    fault.query_seconds = _first_success(fault, query, give_up)
    if fault.query_seconds is not None:
        fault.write_seconds = _first_success(fault, write, give_up)
    for what in ("query", "write"):
        seconds = getattr(fault, f"{what}_seconds")
        if seconds is None:
            fault.findings.append(f"no {what} answered within {GIVE_UP * bound:.0f}s of the fault")
        elif seconds > bound:
            fault.findings.append(
                f"first {what} answered after {seconds:.1f}s, past the {bound:.0f}s bound"
            )


def _first_success(fault: Fault, attempt: Callable[[], bool], give_up: float) -> float | None:
    """Seconds from the fault until ``attempt`` returns True (None: not before ``give_up``)."""
    while time.monotonic() < give_up:
        try:
            if attempt():
                return time.monotonic() - fault.at
        except Exception:  # not answering yet: that is what is being measured
            pass
        time.sleep(0.25)
    return None


def settle_stopped_replica(fault: Fault, target: Proc) -> None:
    """A SIGSTOPped replica must be killed by the controller once its heartbeat is overdue.
    One still there after the grace is a finding; it is then killed so later checks count
    processes from a clean slate."""
    deadline = fault.at + HEARTBEAT_TIMEOUT + STOPPED_REPLICA_GRACE
    while alive(target) and time.monotonic() < deadline:
        time.sleep(0.5)
    if alive(target):
        fault.findings.append(
            f"the SIGSTOPped {target.role} (pid {target.pid}) was still there"
            f" {HEARTBEAT_TIMEOUT + STOPPED_REPLICA_GRACE:.0f}s later: the controller did not kill it"
            " (the test killed it)"
        )
        os.kill(target.pid, signal.SIGKILL)
