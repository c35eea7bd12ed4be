"""What the engine's introspection logging costs: the same work with logging off and on.

For TPC-H Q1-, Q3- and Q5-shaped views at ``--scale`` (default SF 0.03,
about 180,000 lineitem rows), on ``--workers`` (default 2 and 4):

- hydration: create the view's index dataflow in a fresh ``ComputeInstance``,
  push every table, step until the index passes the as_of. Off: no logging
  hooks (the engine's ``hooks`` is None). On: a ``LogCollector`` of every
  variant, ticked once after the hydration as a replica would at the end of
  an interval (its tick counted). Off and on alternate, best of ``--rounds``.
- one-row inserts: ``--inserts`` lineitem rows, each pushed at the next time
  and stepped through, on the hydrated instances of both kinds, alternating;
  the collector ticks once per second of engine time, as at a 1 s interval.

Each line prints the ratio on/off measured in this run (target <= 1.03).

Run: ``.venv/bin/python bench/logging_cost.py [--scale 0.03] [--workers 2,4] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from compute import LOAD_TS, QUERIES, Query, TpchData, chosen, dataflow, index_id, load_tpch

from loupe.dataflow import ComputeInstance
from loupe.introspection.collector import LogCollector
from loupe.loadgen import tpch

TARGET = 1.03
TICK_INTERVAL_S = 1.0


class Run:
    """One query's dataflow on ``workers`` workers, logging off or on."""

    def __init__(self, query: Query, data: TpchData, workers: int, logging: bool) -> None:
        self.query = query
        self.data = data
        self.collector = LogCollector(workers) if logging else None
        self.instance = ComputeInstance(workers=workers, logging=self.collector)
        self.time = LOAD_TS
        self.last_tick = time.perf_counter()
        self.ticks = 0

    def hydrate(self) -> float:
        began = time.perf_counter()
        self.instance.create_dataflow(dataflow(self.query))
        for source in self.instance.source_ids():
            self.instance.push(source, self.data.updates[source], LOAD_TS + 1)
        self._step_past(LOAD_TS)
        self._tick()
        return time.perf_counter() - began

    def insert(self, row: pa.Table) -> float:
        self.time += 1
        updates = tpch.storage_updates(row, tpch.TPCH_TABLES["lineitem"], self.time)
        began = time.perf_counter()
        for source in self.instance.source_ids():
            pushed = updates if source == "lineitem" else self.data.updates[source].slice(0, 0)
            self.instance.push(source, pushed, self.time + 1)
        self._step_past(self.time)
        if time.perf_counter() - self.last_tick >= TICK_INTERVAL_S:
            self._tick()
        return time.perf_counter() - began

    def _tick(self) -> None:
        if self.collector is not None:
            self.ticks += 1
            self.collector.tick(self.ticks)
        self.last_tick = time.perf_counter()

    def _step_past(self, timestamp: int) -> None:
        while self.instance.write_frontier(index_id(self.query)) <= timestamp:
            if not self.instance.step():
                raise RuntimeError(f"{self.query.name}: engine idle before passing {timestamp}")


def hydrations(
    query: Query, data: TpchData, workers: int, rounds: int
) -> tuple[Run, Run, float, float]:
    """Best of ``rounds`` hydrations off and on, alternating; the last instance of each."""
    best = {False: math.inf, True: math.inf}
    last: dict[bool, Run] = {}
    for _ in range(rounds):
        for logging in (False, True):
            last.pop(logging, None)
            gc.collect()
            run = Run(query, data, workers, logging)
            best[logging] = min(best[logging], run.hydrate())
            last[logging] = run
    return last[False], last[True], best[False], best[True]


def lines_to_insert(data: TpchData, count: int) -> list[pa.Table]:
    """Copies of the first lineitem rows with fresh line numbers (new rows of existing orders)."""
    lineitem = data.tables["lineitem"]
    position = lineitem.schema.get_field_index("l_linenumber")
    field = lineitem.schema.field(position)
    return [
        lineitem.slice(i, 1).set_column(position, field, pa.array([100 + i], field.type))
        for i in range(count)
    ]


def verdict(ratio: float) -> str:
    return "ok" if ratio <= TARGET else "OVER TARGET"


def bench(query: Query, data: TpchData, workers: int, rounds: int, inserts: int) -> None:
    off, on, off_s, on_s = hydrations(query, data, workers, rounds)
    ratio = on_s / off_s
    print(
        f"hydrate  {query.name} w={workers}  off {off_s * 1000:8.1f} ms  on {on_s * 1000:8.1f} ms"
        f"   on/off {ratio:.3f} (target <= {TARGET}: {verdict(ratio)})   best of {rounds}",
        flush=True,
    )
    samples: dict[bool, list[float]] = {False: [], True: []}
    for row in lines_to_insert(data, inserts):
        for logging, run in ((False, off), (True, on)):
            samples[logging].append(run.insert(row))
    off_p50, on_p50 = statistics.median(samples[False]), statistics.median(samples[True])
    ratio = on_p50 / off_p50
    print(
        f"insert   {query.name} w={workers}  off p50 {off_p50 * 1000:7.2f} ms  on p50 "
        f"{on_p50 * 1000:7.2f} ms   on/off {ratio:.3f} (target <= {TARGET}: {verdict(ratio)})"
        f"   n={inserts}",
        flush=True,
    )
    same = off.instance.peek(index_id(query), off.time).rows()
    assert sorted(map(repr, same)) == sorted(
        map(repr, on.instance.peek(index_id(query), on.time).rows())
    ), f"{query.name}: logging changed the result"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.03, help="TPC-H scale factor")
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inserts", type=int, default=30)
    parser.add_argument("--queries", default=",".join(q.name for q in QUERIES))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = load_tpch(options.scale, Path(scratch))
    for workers in (int(w) for w in options.workers.split(",")):
        for query in chosen(options.queries):
            bench(query, data, workers, options.rounds, options.inserts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
