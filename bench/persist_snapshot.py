"""Snapshot speed of a 1,000,000-row shard, compaction time, and CAS latency per consensus.

Measures, on a fresh local blob (best of ``--rounds``):

- ``Shard.snapshot`` of a collection of ``--rows`` rows (text, int8, float8)
  appended in ``--parts`` parts of inserts; after ``compact`` (one part); and
  with churn (10% of the rows retracted and re-inserted changed, so the exact
  group-by consolidation runs). Target (issue 4): < 1 s.
- the pyarrow-only baseline: reading the same parts with ``pq.read_table`` and
  concatenating them, nothing else (the floor a snapshot pays); ratios print
  against it.
- ``Shard.compact`` of the whole collection (one part out of ``--parts``).
- compare-and-set latency (median, p90) of each consensus: sqlite, postgres
  (a temporary server when none is running; skipped without PostgreSQL) and
  NATS JetStream KV (a nats-server of its own), as a shard does it: ``head``
  then ``compare_and_set``. Also the shard state bytes per part (NATS KV holds
  a state in one message).

Run: ``.venv/bin/python bench/persist_snapshot.py [--rows N] [--parts N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loupe.common.nats_server import NatsServerProcess
from loupe.persist import LocalBlob, Part, Shard, ShardState, SqliteConsensus
from loupe.persist.location import Consensus
from loupe.persist.nats_kv import NatsKvConsensus
from loupe.persist.postgres import PostgresConsensus
from loupe.persist.shard import arrow_schema
from loupe.testing.postgres import PostgresUnavailable, postgres_database

COLUMNS = [("id", "int8"), ("name", "text"), ("value", "float8")]
TARGET_S = 1.0


def best_of(rounds: int, step: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(rounds):
        began = time.perf_counter()
        result = step()
        best = min(best, time.perf_counter() - began)
    return best, result


def collection(first: int, count: int, timestamp: int, diff: int = 1, shift: float = 0) -> pa.Table:
    ids = pa.array(range(first, first + count), pa.int64())
    names = pc.binary_join_element_wise("name-", pc.cast(ids, pa.string()), "")
    values = pc.add(pc.multiply(pc.cast(ids, pa.float64()), 0.5), shift)
    return pa.table(
        {
            "id": ids,
            "name": names,
            "value": values,
            "mz_timestamp": pa.array([timestamp] * count, pa.uint64()),
            "mz_diff": pa.array([diff] * count, pa.int64()),
        },
        schema=arrow_schema(COLUMNS),
    )


def fill(shard: Shard, rows: int, parts: int) -> None:
    per_part = rows // parts
    for index in range(parts):
        shard.compare_and_append(collection(index * per_part, per_part, index), index, index + 1)


def pyarrow_read(shard: Shard) -> pa.Table:
    """The baseline: the shard's parts read and concatenated, nothing more."""
    tables = []
    for part in shard.state().parts:
        filesystem, path = shard.blob.filesystem_path(part.key)
        tables.append(pq.read_table(path, filesystem=filesystem))
    return pa.concat_tables(tables)


def snapshot_benchmarks(root: Path, rows: int, parts: int, rounds: int) -> None:
    shard = Shard("bench", LocalBlob(root / "blob"), SqliteConsensus(root / "consensus.sqlite"))
    shard.ensure(COLUMNS)
    fill(shard, rows, parts)
    baseline, table = best_of(rounds, lambda: pyarrow_read(shard))
    assert table.num_rows == rows
    print(f"baseline  pyarrow read of {parts} parts ({rows:,} rows)      {baseline * 1000:7.1f} ms")

    def report(label: str, seconds: float, result: pa.Table) -> None:
        verdict = "ok" if seconds < TARGET_S else "OVER TARGET"
        print(
            f"snapshot  {label:<40} {seconds * 1000:7.1f} ms   {result.num_rows:,} rows"
            f"   ({seconds / baseline:.2f}x pyarrow read; target < {TARGET_S:.0f} s: {verdict})"
        )

    seconds, result = best_of(rounds, shard.snapshot)
    report(f"{parts} parts of inserts", seconds, result)

    began = time.perf_counter()
    shard.compact(since=shard.upper - 1)
    compaction = time.perf_counter() - began
    print(
        f"compact   {parts} parts -> 1 ({rows:,} rows)                {compaction * 1000:7.1f} ms"
    )
    seconds, result = best_of(rounds, shard.snapshot)
    report("after compaction (1 part)", seconds, result)

    churn = rows // 10
    upper = shard.upper
    shard.compare_and_append(
        pa.concat_tables(
            [
                collection(0, churn, upper, diff=-1),
                collection(0, churn, upper, diff=1, shift=1.0),
            ]
        ),
        upper,
        upper + 1,
    )
    seconds, result = best_of(rounds, shard.snapshot)
    report(f"with churn ({churn:,} rows updated)", seconds, result)


def cas_latency(consensus: Consensus, rounds: int) -> list[float]:
    """head + compare_and_set of a 1 KiB value, as a shard's append does it."""
    key = f"bench-{time.monotonic_ns()}"
    consensus.compare_and_set(key, None, b"x" * 1024)
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        head = consensus.head(key)
        assert head is not None
        assert consensus.compare_and_set(key, head[0], b"y" * 1024)
        samples.append(time.perf_counter() - began)
    return samples


@contextlib.contextmanager
def consensus_stores(root: Path) -> Iterator[Iterator[tuple[str, Consensus | str]]]:
    """(name, consensus or the reason it is missing), each closed afterwards."""
    with contextlib.ExitStack() as stack:

        def stores() -> Iterator[tuple[str, Consensus | str]]:
            yield "sqlite", SqliteConsensus(root / "cas.sqlite")
            try:
                url = stack.enter_context(postgres_database())
            except PostgresUnavailable as error:
                yield "postgres", str(error)
            else:
                postgres = PostgresConsensus(url, "bench_consensus")
                stack.callback(postgres.close)
                yield "postgres", postgres
            server = NatsServerProcess(root / "nats")
            server.start()
            stack.callback(server.stop)
            kv = NatsKvConsensus(server.url, "bench")
            stack.callback(kv.close)
            yield "nats-kv", kv

        yield stores()


def state_bytes_per_part() -> float:
    """Serialized shard state bytes per part, for a state of 1,000 typical parts."""
    parts = [
        Part(f"u1/{index:032x}.parquet", index * 1000, index * 1000 + 1, 1000, 50_000)
        for index in range(1000)
    ]
    empty = ShardState("u1", 1, 0, 10**12, [], COLUMNS, {"writer": 10**9})
    full = ShardState("u1", 1, 0, 10**12, parts, COLUMNS, {"writer": 10**9})
    size = len(full.to_proto().SerializeToString()) - len(empty.to_proto().SerializeToString())
    return size / len(parts)


def cas_benchmarks(root: Path, rounds: int) -> None:
    with consensus_stores(root) as stores:
        for name, store in stores:
            if isinstance(store, str):
                print(f"cas       {name:<40} skipped: {store}")
                continue
            samples = sorted(cas_latency(store, rounds))
            p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
            print(
                f"cas       {name + ' head + compare_and_set':<40} median "
                f"{statistics.median(samples) * 1000:6.2f} ms   p90 {p90 * 1000:6.2f} ms   (n={rounds})"
            )
            if isinstance(store, NatsKvConsensus):
                per_part = state_bytes_per_part()
                print(
                    f"state     {per_part:.0f} bytes per part: NATS KV holds up to "
                    f"{store.max_value // per_part:,.0f} parts per shard state "
                    f"(max payload {store.max_value + 8 + 512:,} bytes)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parts", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="snapshot repetitions (best of)")
    parser.add_argument("--cas-rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        snapshot_benchmarks(Path(scratch), args.rows, args.parts, args.rounds)
        cas_benchmarks(Path(scratch), args.cas_rounds)


if __name__ == "__main__":
    main()
