"""A replica's catch-up through re-evaluated reduces: many times in one step.

A replica that restarts (or a dataflow that starts at an old since) receives
every write since its as_of at once, each at its own time. Min/max with
deletes, count(DISTINCT) and top-k re-evaluate the groups a time touches, so their
cost per step used to grow with the number of times in it: one round of
spine lookups, inserts and an aggregation per time. Now one step aggregates
every touched (key, time) pair at once (``ReEvaluating._recompute_times``).

The benchmark: ``--rows`` rows at the as_of (four keys, one NULL: min/max,
count(DISTINCT), a top 3 per key; and a keyless min, whose one group holds every
row, the worst case), then
``--times`` times of two inserts and, at 30 % of them, a delete, pushed at
once; the step that processes them is timed. Baseline, in the same process:
the same step with ``ReEvaluating._recompute`` replaced by a loop of
``_recompute_at`` over the times (the per-time algorithm). Both instances'
indexes are compared at every time (a mismatch fails the run).

Run: ``.venv/bin/python bench/catch_up.py [--rows 15000] [--times 100,500]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import polars as pl

from loupe.dataflow import ComputeInstance, operators
from loupe.dataflow.testing import index_dataflow, persist_updates, read
from loupe.plan import lir, mir
from loupe.plan.scalar import Column

COLUMNS = (("k", "text"), ("v", "int4"), ("x", "float8"))
TYPES = tuple(t for _, t in COLUMNS)
VIEWS = {
    "min_max": lir.Reduce(
        1,
        lir.Get(0, "t", types=TYPES),
        (Column(0),),
        (mir.Aggregate("min", Column(1)), mir.Aggregate("max", Column(2))),
        lir.ReduceKind.HIERARCHICAL,
        types=("text", "int4", "float8"),
    ),
    "count_distinct": lir.Reduce(
        1,
        lir.Get(0, "t", types=TYPES),
        (Column(0),),
        (mir.Aggregate("count", Column(1), distinct=True),),
        lir.ReduceKind.BASIC,
        types=("text", "int8"),
    ),
    # The top 3 per key by v (ties by the whole row).
    "top_per_key": lir.TopK(
        1, lir.Get(0, "t", types=TYPES), (mir.OrderKey(1),), 3, 0, (0,), types=TYPES
    ),
    # Keyless: one group holds every row, so few times fit in a run (the worst case).
    "global_min": lir.Reduce(
        1,
        lir.Get(0, "t", types=TYPES),
        (),
        (mir.Aggregate("min", Column(1)),),
        lir.ReduceKind.HIERARCHICAL,
        types=("int4",),
    ),
}


def per_time(self: operators.ReEvaluating, worker: int, part: pl.DataFrame) -> pl.DataFrame:
    """The per-time algorithm: one ``_recompute_at`` per time, in time order."""
    if part.height == 0:
        return self.empty
    changes = [self._recompute_at(worker, at, delta) for at, delta in operators._by_time(part)]
    return pl.concat(changes, how="vertical_relaxed")


@contextmanager
def replaced(body: Callable[..., Any] | None):
    original = operators.ReEvaluating._recompute
    if body is not None:
        operators.ReEvaluating._recompute = body  # type: ignore[method-assign]
    try:
        yield
    finally:
        operators.ReEvaluating._recompute = original  # type: ignore[method-assign]


def catch_up(rows: int, times: int, body: Callable[..., Any] | None) -> tuple[float, dict]:
    rng = random.Random(rows + times)
    keys = ["a", "b", "c", None]
    current = [(rng.choice(keys), rng.randint(0, 1000), rng.random()) for _ in range(rows)]
    instance = ComputeInstance(workers=1)
    for name, plan in VIEWS.items():
        instance.create_dataflow(index_dataflow(name, plan, {"t": COLUMNS}, 0))
    instance.push("t", persist_updates(COLUMNS, [(r, 0, 1) for r in current]), 1)
    instance.step()
    updates = []
    for at in range(1, times + 1):
        for _ in range(2):
            row = (rng.choice(keys), rng.randint(0, 1000), rng.random())
            current.append(row)
            updates.append((row, at, 1))
        if rng.random() < 0.3:
            updates.append((current.pop(rng.randrange(len(current))), at, -1))
    instance.push("t", persist_updates(COLUMNS, updates), times + 1)
    with replaced(body):
        began = time.perf_counter()
        assert instance.step()
        seconds = time.perf_counter() - began
    contents = {
        (name, at): read(instance, f"{name}_index", at)
        for name in VIEWS
        for at in range(0, times + 1, max(1, times // 50))
    }
    return seconds, contents


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=15_000)
    parser.add_argument("--times", default="100,500")
    args = parser.parse_args()
    for times in [int(t) for t in args.times.split(",")]:
        baseline, expected = catch_up(args.rows, times, per_time)
        seconds, actual = catch_up(args.rows, times, None)
        if actual != expected:
            print(f"catch-up {times} times: the results differ from the per-time algorithm's")
            return 1
        print(
            f"catch-up  {args.rows} rows + {times:4d} times in one step  {seconds:6.2f} s"
            f"   per time {baseline:6.2f} s   ({seconds / baseline:.2f}x the per-time algorithm)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
