"""Time per flush of the controller's storage writer (Spark local mode).

Measures, on a fresh data directory:

- an idle flush (no buffered updates: only the compare-and-appends that move
  every builtin collection's upper);
- a flush with updates in every builtin collection, written by ONE Spark job
  (the writer's plan), against one Spark job per collection (the baseline);
- ``append`` of a small batch until durable (what ``Controller.AppendUpdates`` waits).

Run: ``.venv/bin/python bench/storage_writer.py [--rounds N] [--rows N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loupe.builtins import BUILTIN_COLLECTIONS, BuiltinCollection
from loupe.common.spark import get_spark
from loupe.controller.storage import StorageWriter, WriteGroup
from loupe.persist import LocalBlob, SqliteConsensus

SAMPLE_VALUES: dict[str, Any] = {
    "text": "value",
    "uint8": 7,
    "int8": -7,
    "float8": 1.5,
    "bool": True,
    "timestamptz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    "interval": dt.timedelta(seconds=1),
}


def sample_row(collection: BuiltinCollection, index: int) -> tuple[Any, ...]:
    _key, *rest = collection.columns
    return (f"row-{index}", *(SAMPLE_VALUES[kind] for _, kind in rest))


def open_writer(root: Path, *, job_per_collection: bool) -> StorageWriter:
    blob = LocalBlob(root / "blob")
    consensus = SqliteConsensus(root / "consensus.sqlite")
    writer = StorageWriter(get_spark(), blob, consensus, flush_interval=3600)
    if job_per_collection:
        # The baseline: every collection its own write group, so its own Spark job.
        writer._groups = [WriteGroup((c,), c.columns) for c in BUILTIN_COLLECTIONS]
    return writer


async def timed(rounds: int, step: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for index in range(rounds):
        began = time.perf_counter()
        await step(index)
        samples.append(time.perf_counter() - began)
    return samples


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return (
        f"{name:<44} median {statistics.median(samples) * 1000:7.1f} ms"
        f"   p90 {p90 * 1000:7.1f} ms   (n={len(samples)})"
    )


async def bench(rounds: int, rows: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        began = time.perf_counter()
        get_spark().range(1).count()
        print(f"spark session start: {time.perf_counter() - began:.1f} s")

        for job_per_collection in (False, True):
            writer = open_writer(
                root / str(job_per_collection), job_per_collection=job_per_collection
            )
            await writer.start()
            label = (
                "one Spark job per collection" if job_per_collection else "one Spark job per flush"
            )
            await staged_flush(writer, rows, -1)  # warm up: the first write plans the job
            full = await timed(rounds, lambda i, w=writer: staged_flush(w, rows, i))  # type: ignore[misc]
            print(summary(f"flush, {rows} rows x 6 collections, {label}", full))
            if not job_per_collection:
                idle = await timed(rounds, lambda _i, w=writer: w.flush())  # type: ignore[misc]
                print(summary("idle flush (uppers only, no Spark)", idle))
                appends = await timed(rounds, lambda i, w=writer: append_one(w, i))  # type: ignore[misc]
                print(summary("append of one row until durable", appends))
            await writer.stop()


async def staged_flush(writer: StorageWriter, rows: int, index: int) -> int:
    """Stage ``rows`` rows in every builtin collection, then flush."""
    for collection in BUILTIN_COLLECTIONS:
        for row in range(rows):
            writer.stage(collection.id, sample_row(collection, index * rows + row), 1)
    return await writer.flush()


async def append_one(writer: StorageWriter, index: int) -> int:
    statuses = BUILTIN_COLLECTIONS[2]
    return await writer.append(f"bench-{index}", [(statuses.id, sample_row(statuses, index), 1)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--rows", type=int, default=10, help="rows per collection per flush")
    args = parser.parse_args()
    asyncio.run(bench(args.rounds, args.rows))


if __name__ == "__main__":
    main()
