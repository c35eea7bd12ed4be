"""A replica's own cost of a fast-path peek: the engine reading an index, in process.

An index on ``t (k int, v text)`` of ``--rows`` rows (its key is every column,
as a default index of a table without a key), kept in the batches a replica's
arrangement holds after a load and ``--steps`` one-row inserts; then
``--peeks`` times ``SELECT * FROM t WHERE k = <n>`` as the replica runs it:
``ComputeInstance.peek`` with the filter as its map-filter-project. p50 and
p99. Baseline, in the same process: the same filter as one polars query on
the same rows in one frame (the floor of any dataframe engine's answer).
Each peek's answer is checked against the baseline's (a mismatch fails the run).

Run: ``.venv/bin/python bench/peek_engine.py [--rows 10000] [--peeks 1000]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import polars as pl

from loupe.dataflow import ComputeInstance
from loupe.dataflow.testing import index_dataflow, persist_updates
from loupe.plan import lir
from loupe.plan.dataflow import IndexExport
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal

COLUMNS = (("k", "int4"), ("v", "text"))
TYPES = tuple(t for _, t in COLUMNS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows of the index")
    parser.add_argument("--steps", type=int, default=40, help="one-row inserts after the load")
    parser.add_argument("--peeks", type=int, default=1_000, help="point reads timed")
    options = parser.parse_args()

    instance = ComputeInstance()
    desc = index_dataflow("d", lir.Get(0, "t", types=TYPES), {"t": COLUMNS}, as_of=0)
    instance.create_dataflow(
        dataclasses.replace(desc, index_exports=(IndexExport("d_index", "d_view", ()),))
    )
    rows = [(k, f"value {k}") for k in range(options.rows)]
    instance.push("t", persist_updates(COLUMNS, [(row, 0, 1) for row in rows]), 1)
    instance.step()
    for step in range(1, options.steps + 1):
        row = (options.rows + step, "inserted")
        rows.append(row)
        instance.push("t", persist_updates(COLUMNS, [(row, step, 1)]), step + 1)
        instance.step()
    at = options.steps
    frame = pl.DataFrame(rows, schema=["k", "v"], orient="row")

    engine, floor = [], []
    for peek in range(options.peeks):
        wanted = (peek * 7919) % len(rows)
        mfp = MapFilterProject(
            2, predicates=(Call("eq", (Column(0), Literal(wanted, "int4"))),), projection=(0, 1)
        )
        began = time.perf_counter()
        answer = instance.peek("d_index", at, mfp).rows()
        engine.append(time.perf_counter() - began)
        began = time.perf_counter()
        expected = frame.filter(pl.col("k") == wanted).rows()
        floor.append(time.perf_counter() - began)
        if answer != expected:
            print(f"peek of k = {wanted}: {answer} != {expected}", file=sys.stderr)
            return 1
    batches = len(instance.indexes["d_index"].ok.batches)
    print(f"index of {len(rows)} rows in {batches} batches, {options.peeks} point peeks")
    line("engine    point peek (ComputeInstance.peek)", engine, floor)
    line("baseline  one polars filter of the same rows", floor, None)
    return 0


def line(label: str, samples: list[float], baseline: list[float] | None) -> None:
    p50 = statistics.median(samples) * 1000
    p99 = statistics.quantiles(samples, n=100)[98] * 1000
    text = f"{label:<46} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms"
    if baseline is not None:
        text += f"   ({p50 / (statistics.median(baseline) * 1000):.2f}x the baseline's p50)"
    print(text)


if __name__ == "__main__":
    sys.exit(main())
