"""What a write and a small read cost when many tables exist, through the whole system (gRPC).

Creates ``--tables`` small tables, then times one-row INSERTs into one of them
and slow-path SELECTs (a transient dataflow: a filter and an aggregate) on it,
and prints p50/p99 for each against the same measured with ``--baseline``
tables (the ratio says how the cost grows with the number of tables; targets
with 1,000 tables: INSERT p50 < 20 ms, SELECT p50 < 50 ms). Also reports the
sqllogictest-style throughput: records (statements and queries) a second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loupe.client import SqlClient
from loupe.testing.system import LoupeUp


def timed(client: SqlClient, sql: str, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        client.execute(sql)
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(client: SqlClient, rounds: int) -> dict[str, list[float]]:
    inserts = timed(client, "INSERT INTO t0 VALUES (1, 2)", rounds)
    selects = timed(client, "SELECT count(*), sum(b) FROM t0 WHERE a > 0", rounds)
    return {"insert": inserts, "select": selects}


def create_tables(client: SqlClient, first: int, count: int) -> float:
    began = time.perf_counter()
    for i in range(first, first + count):
        client.execute(f"CREATE TABLE t{i} (a int, b int)")
        client.execute(f"INSERT INTO t{i} VALUES ({i}, {i})")
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--baseline", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=40)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        system.start()
        try:
            with SqlClient("127.0.0.1", system.sql_port) as client:
                create_tables(client, 0, options.baseline)
                base = measure(client, options.rounds)
                seconds = create_tables(client, options.baseline, options.tables - options.baseline)
                created = options.tables - options.baseline
                print(
                    f"tables    {created} CREATE TABLE + INSERT  {created * 2 / seconds:7.1f} statements/s"
                )
                many = measure(client, options.rounds)
        finally:
            system.stop()
    for kind, target in (("insert", 20), ("select", 50)):
        few, lots = base[kind], many[kind]
        print(
            f"{kind:<9} p50 {statistics.median(lots):6.1f} ms  p99 {p(lots, 0.99):6.1f} ms"
            f" with {options.tables} tables;  {statistics.median(few):6.1f} ms with"
            f" {options.baseline}  ({statistics.median(lots) / statistics.median(few):.2f}x;"
            f" target p50 < {target} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
