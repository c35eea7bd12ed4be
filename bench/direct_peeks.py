"""Fast-path peeks sent to replicas by the coordinator itself, against through the controller.

Two ``loupe up`` in turn, the same load on each: one with the default
settings (the coordinator sends a peek to the cluster's online
replicas itself, ``Peek.direct``), the baseline with ``peek_direct_wait = 0``
(every peek through the controller, as before). On each, a table ``t (k int,
v text)`` of ``--rows`` rows with a default index, then:

- one session, ``--peeks`` times ``SELECT * FROM t WHERE k = <n>``: p50, p99;
- the CPU each process spent per SELECT meanwhile (``/proc``), less what it
  spends idle: where the controller's share goes;
- ``--clients`` sessions at once for ``--seconds``: SELECTs per second, p50, p99.

Printed as ratios of the direct way to the baseline. The coordinator's
``loupe_coordinator_peeks_direct_total{outcome="answered"}`` must count every
SELECT of the direct run and none of the baseline's (else the run fails).

Run: ``.venv/bin/python bench/direct_peeks.py [--rows 10000] [--peeks 1000]
[--clients 4] [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from loupe.client import SqlClient
from loupe.testing.system import LoupeUp

# The processes whose CPU is reported, by what their command line holds.
PROCESSES = {
    "coordinator": "main coordinator ",
    "controller": "main controller ",
    "replica": "--replica-id u1",
    "catalog": "main catalog-server ",
    "nats": "nats-server",
}
IDLE_SECONDS = 5.0


@dataclass
class Run:
    single: list[float] = field(default_factory=list)
    cpu_ms: dict[str, float] = field(default_factory=dict)
    throughput: float = 0.0
    concurrent: list[float] = field(default_factory=list)
    direct_answered: float = 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(data_dir: Path, service: str, name: str, **labels: str) -> float:
    port = json.loads((data_dir / "run" / f"{service}.ready.json").read_text())["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def point(client: SqlClient, key: int) -> float:
    began = time.perf_counter()
    rows = client.query(f"SELECT * FROM t WHERE k = {key}")
    elapsed = time.perf_counter() - began
    if rows != [(key, f"v{key}")]:
        raise AssertionError(f"SELECT k = {key} returned {rows}")
    return elapsed


def measure(direct: bool, options: argparse.Namespace) -> Run:
    """The load on a ``loupe up`` with direct peeks (its default) or without them."""
    run = Run()
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch) / "data"
        system = LoupeUp(data_dir, env={} if direct else {"LOUPE_PEEK_DIRECT_WAIT": "0"})
        system.start()
        try:
            with SqlClient("127.0.0.1", system.sql_port) as client:
                client.query("CREATE TABLE t (k int, v text)")
                client.query(
                    f"INSERT INTO t SELECT g, 'v' || g FROM generate_series(0, {options.rows - 1}) g"
                )
                client.query("CREATE DEFAULT INDEX ON t")
                for key in range(100):  # warm: hydrated, routes known
                    point(client, key)
                pids = {
                    name: pid
                    for pid, command in system.processes()
                    for name, marker in PROCESSES.items()
                    if marker in command
                }
                idle_from = {name: cpu_seconds(pid) for name, pid in pids.items()}
                time.sleep(IDLE_SECONDS)
                idle = {n: (cpu_seconds(p) - idle_from[n]) / IDLE_SECONDS for n, p in pids.items()}
                answered = metric(
                    data_dir,
                    "coordinator",
                    "loupe_coordinator_peeks_direct_total",
                    outcome="answered",
                )
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                began = time.monotonic()
                for index in range(options.peeks):
                    run.single.append(point(client, (index * 7919) % options.rows))
                wall = time.monotonic() - began
                run.cpu_ms = {
                    name: (cpu_seconds(pid) - before[name] - idle[name] * wall)
                    / options.peeks
                    * 1000
                    for name, pid in pids.items()
                }
                run.direct_answered = (
                    metric(
                        data_dir,
                        "coordinator",
                        "loupe_coordinator_peeks_direct_total",
                        outcome="answered",
                    )
                    - answered
                )
            run.throughput, run.concurrent = concurrent(system.sql_port, options)
        finally:
            system.stop()
    return run


def concurrent(port: int, options: argparse.Namespace) -> tuple[float, list[float]]:
    """(SELECTs per second, their latencies) of ``--clients`` sessions at once."""
    samples: list[list[float]] = [[] for _ in range(options.clients)]
    until = time.monotonic() + options.seconds

    def client_loop(index: int) -> None:
        with SqlClient("127.0.0.1", port) as client:
            count = 0
            while time.monotonic() < until:
                key = (count * 7919 + index * 13) % options.rows
                samples[index].append(point(client, key))
                count += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(options.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [s for client in samples for s in client]
    return len(flat) / options.seconds, flat


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--peeks", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args()
    direct = measure(True, options)
    routed = measure(False, options)
    if direct.direct_answered != options.peeks or routed.direct_answered != 0:
        print(
            f"FAILED: direct peeks answered {direct.direct_answered:.0f} of {options.peeks}"
            f" (direct run) and {routed.direct_answered:.0f} (through the controller)"
        )
        return 1
    d50, d99 = percentiles(direct.single)
    r50, r99 = percentiles(routed.single)
    print(
        f"peek      direct, one session        p50 {d50 * 1000:6.2f} ms   p99 {d99 * 1000:6.2f} ms"
        f"   ({d50 / r50:.2f}x / {d99 / r99:.2f}x through the controller:"
        f" p50 {r50 * 1000:.2f} ms, p99 {r99 * 1000:.2f} ms)"
    )
    cpu = ", ".join(
        f"{name} {direct.cpu_ms[name]:.2f} ({routed.cpu_ms.get(name, 0.0):.2f})"
        for name in direct.cpu_ms
    )
    print(f"          CPU ms per SELECT, direct (through the controller): {cpu}")
    c50, c99 = percentiles(direct.concurrent)
    b50, b99 = percentiles(routed.concurrent)
    print(
        f"peek      direct, {options.clients} sessions       {direct.throughput:6.0f} SELECT/s"
        f"   p50 {c50 * 1000:.1f} ms   p99 {c99 * 1000:.1f} ms"
        f"   ({direct.throughput / routed.throughput:.2f}x the throughput through the controller:"
        f" {routed.throughput:.0f} SELECT/s, p50 {b50 * 1000:.1f} ms, p99 {b99 * 1000:.1f} ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
