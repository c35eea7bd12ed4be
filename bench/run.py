"""Loupe's benchmarks (``make bench``): numbers, and ratios against a baseline
measured in the same run.

- startup: ``loupe up`` to ready (a query answered by a replica), against a
  bare Spark session's cold start (the floor every start pays).
- status: ``kill -9`` of a replica process until its ``offline`` status is
  visible in SQL, against the storage flush interval.

Then the benchmarks of the parts, each its own script: the storage writer
(``bench/storage_writer.py``), catalog commits and opens per backend
(``bench/catalog_commit.py``), shard snapshots (``bench/persist_snapshot.py``),
the compute engine on TPC-H against DuckDB and Pathway (``bench/compute.py``;
Pathway in its own venv, ``make bench-pathway``), a replica's catch-up of
hundreds of times in one step against the per-time algorithm
(``bench/catch_up.py``), a replica's own cost of a point peek against one
polars filter (``bench/peek_engine.py``), the whole system's fast-path peeks and inserts to
visible changes through gRPC (``bench/compute_system.py``), peeks the coordinator
sends to replicas itself against through the controller: latency, CPU per process,
throughput of concurrent sessions (``bench/direct_peeks.py``), statement logging's overhead and delay to
visible (``bench/statement_logging.py``) and what a one-row INSERT and a small
SELECT cost with 1,000 tables against 10 (``bench/many_tables.py``) and
what the engine's introspection logging costs, on against off
(``bench/logging_cost.py``), and what replica introspection costs a whole
system: hydration, updates, an idle replica, change to visible, 10 replicas
(``bench/introspection.py``), what tracking each plan node's hydration costs
the engine, on against off (``bench/hydration_logging.py``), and hydration
through the system: a node hydrated until SQL shows it, progress while a view
hydrates (``bench/hydration.py``), and the PostgreSQL wire protocol: ``SELECT 1``
over pgwire against gRPC and PostgreSQL, a fast-path peek over pgwire, ``COPY
FROM STDIN`` against PostgreSQL's, 200 idle connections (``bench/pgwire.py``),
and the console: each page's first render with 50 objects on 5 replicas against
its own SQL on pgwire, a hydration update from visible in SQL to the open page,
and what it costs when nobody looks (``bench/console.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loupe.testing.system import LoupeUp, replica_pid


def spark_cold_start() -> float:
    code = "from loupe.common.spark import get_spark; get_spark().range(1).count()"
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable),
    )
    return time.monotonic() - began


def status_latency(system: LoupeUp, rounds: int) -> list[float]:
    system.sql("CREATE CLUSTER bench (SIZE '1')")
    replica_id = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c "
        "ON c.id = r.cluster_id WHERE c.name = 'bench'"
    )[0][0]
    count_query = (
        "SELECT count(*) FROM mz_internal.mz_cluster_replica_status_history "
        f"WHERE replica_id = '{replica_id}' AND status = 'offline'"
    )
    samples = []
    for _ in range(rounds):
        pid = wait_for(lambda: replica_online_pid(system, replica_id), 60)
        before = system.sql(count_query)[0][0]
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda b=before: system.sql(count_query)[0][0] > b or None, 30, interval=0.02)
        samples.append(time.monotonic() - killed)
    return samples


def replica_online_pid(system: LoupeUp, replica_id: str) -> int | None:
    rows = system.sql(
        f"SELECT status FROM mz_internal.mz_cluster_replica_statuses WHERE replica_id = '{replica_id}'"
    )
    if rows != [("online",)]:
        return None
    return replica_pid(system.data_dir, replica_id)


def wait_for(check, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("benchmark condition not reached")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="kill/restart rounds")
    options = parser.parse_args()
    baseline = spark_cold_start()
    print(f"baseline  spark cold start                 {baseline:6.2f} s")
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        try:
            ready = system.start()
            print(
                f"startup   loupe up -> ready                {ready:6.2f} s"
                f"   ({ready / baseline:.2f}x spark cold start; target < 30 s)"
            )
            samples = status_latency(system, options.rounds)
        finally:
            system.stop()
    flush = 1.0
    p50 = statistics.median(samples)
    print(
        f"status    kill -9 -> offline visible p50  {p50:6.2f} s   max {max(samples):.2f} s"
        f"   ({p50 / flush:.2f}x flush interval; target < 3 s)"
    )
    failures = 0
    scripts = (
        "storage_writer.py",
        "catalog_commit.py",
        "persist_snapshot.py",
        "compute.py",
        "catch_up.py",
        "peek_engine.py",
        "compute_system.py",
        "direct_peeks.py",
        "statement_logging.py",
        "many_tables.py",
        "logging_cost.py",
        "introspection.py",
        "hydration_logging.py",
        "hydration.py",
        "pgwire.py",
        "console.py",
    )
    for script in scripts:
        print(f"\n== {script}", flush=True)
        path = Path(__file__).with_name(script)
        failures += subprocess.run([sys.executable, str(path)], check=False).returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
