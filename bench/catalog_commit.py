"""Commit latency and open time of each durable catalog backend.

For every backend (``stash-sqlite``, ``stash-postgres``, ``shadow``, and
``persist`` when ``loupe.catalog.backends.persist`` exists), on a fresh store:

- commit latency p50/p99 of a small DDL-like transaction (alternately
  CREATE CLUSTER with one replica, 4 rows written, and DROP CLUSTER, 2 rows
  deleted);
- the time to open a catalog holding 10,000 items (tables, created 500 per
  transaction): connect, read, decode.

Ratios are against ``stash-sqlite`` measured in the same run. Targets:
SQLite p50 < 2 ms, PostgreSQL p50 < 5 ms, open with 10,000 items < 1 s.

PostgreSQL: ``--postgres-url`` or ``LOUPE_TEST_POSTGRES_URL`` as given, else a
scratch database on the local server at 127.0.0.1:5432 (dropped after), else
a temporary cluster (not durable: fsync off, so its numbers flatter it).

Run: ``.venv/bin/python bench/catalog_commit.py [--commits N] [--items N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loupe.catalog import Cluster, ClusterReplica, DurableCatalogState, create_backend
from loupe.catalog.durable import BACKENDS
from loupe.catalog.objects import Item
from loupe.catalog.testing import unmanaged_cluster
from loupe.testing.postgres import LOCAL_ADMIN_URL, PostgresUnavailable, postgres_database

TARGETS_MS = {"stash-sqlite": 2.0, "stash-postgres": 5.0}
OPEN_TARGET_S = 1.0
# materialize.public, created with every catalog.
PUBLIC_SCHEMA_ID = "u1"


@dataclass
class Result:
    backend: str
    commits: list[float]
    opens: list[float]
    # The commits that created the items.
    load: float

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.commits)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]

    @property
    def p50(self) -> float:
        return statistics.median(self.commits)

    @property
    def p99(self) -> float:
        return self.percentile(0.99)

    @property
    def open(self) -> float:
        return statistics.median(self.opens)


def backends() -> list[str]:
    names = ["stash-sqlite", "stash-postgres", "shadow"]
    if importlib.util.find_spec("loupe.catalog.backends.persist") and "persist" in BACKENDS.names():
        names.append("persist")
    return names


def bench_cluster(name: str) -> Cluster:
    return replace(
        unmanaged_cluster(name), replication_factor=1, introspection_interval_ns=1_000_000_000
    )


def ddl(catalog: DurableCatalogState, index: int) -> None:
    """One small DDL transaction: create a cluster with a replica, or drop it again."""
    tx = catalog.transaction()
    if index % 2 == 0:
        replica = ClusterReplica(id="", name="r1", cluster_id="", size="1", owner_id="")
        tx.create_cluster(bench_cluster("bench"), [replica])
    else:
        tx.drop_cluster("bench")
    catalog.commit_transaction(tx)


def create_items(catalog: DurableCatalogState, count: int, batch: int = 500) -> None:
    """``count`` tables in ``materialize.public``, ``batch`` per transaction."""
    for start in range(0, count, batch):
        tx = catalog.transaction()
        for index in range(start, min(count, start + batch)):
            tx.create_item(
                Item(
                    id="",
                    schema_id=PUBLIC_SCHEMA_ID,
                    name=f"t{index}",
                    type="table",
                    owner_id="",
                    create_sql=f"CREATE TABLE t{index} (id int8, name text)",
                )
            )
        catalog.commit_transaction(tx)


def measure(
    name: str, make: Callable[[], DurableCatalogState], commits: int, items: int, opens: int
) -> Result:
    catalog = make()
    catalog.open()
    try:
        for index in range(20):  # warm up: connections, prepared statements, caches
            ddl(catalog, index)
        samples = []
        for index in range(commits):
            began = time.perf_counter()
            ddl(catalog, index)
            samples.append(time.perf_counter() - began)
        began = time.perf_counter()
        create_items(catalog, items)
        load = time.perf_counter() - began
    finally:
        catalog.close()
    open_times = []
    for _ in range(opens):
        reopened = make()
        began = time.perf_counter()
        reopened.open()
        open_times.append(time.perf_counter() - began)
        count = len(reopened.get_items())
        reopened.close()
        assert count == items, f"{name}: opened {count} items, expected {items}"
    return Result(name, samples, open_times, load)


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[tuple[str | None, str]]:
    """A PostgreSQL database for the run, and where it came from."""
    if url:
        yield url, "given URL"
        return
    try:
        with postgres_database() as found:
            source = (
                "LOUPE_TEST_POSTGRES_URL"
                if os.environ.get("LOUPE_TEST_POSTGRES_URL")
                else "local server (scratch database)"
                if found.startswith(LOCAL_ADMIN_URL.rsplit("/", 1)[0])
                else "temporary cluster, fsync off"
            )
            yield found, source
    except PostgresUnavailable as error:
        yield None, str(error)


def report(results: list[Result], items: int) -> None:
    base = next(r for r in results if r.backend == "stash-sqlite")
    print(
        f"{'backend':<16}{'commit p50':>12}{'p99':>10}{'x sqlite':>10}"
        f"{f'open {items}':>14}{'x sqlite':>10}   target"
    )
    for r in results:
        target = TARGETS_MS.get(r.backend)
        verdict = []
        if target is not None:
            verdict.append(f"p50 < {target:g} ms {'ok' if r.p50 * 1000 < target else 'MISSED'}")
        verdict.append(f"open < {OPEN_TARGET_S:g} s {'ok' if r.open < OPEN_TARGET_S else 'MISSED'}")
        print(
            f"{r.backend:<16}{r.p50 * 1000:>9.2f} ms{r.p99 * 1000:>7.2f} ms{r.p50 / base.p50:>9.2f}x"
            f"{r.open * 1000:>11.0f} ms{r.open / base.open:>9.2f}x   {', '.join(verdict)}"
        )
    print(", ".join(f"{r.backend} {r.load * 1000:.0f} ms" for r in results), end="")
    print(f"  (creating the {items} items, 500 per transaction)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300, help="timed commits per backend")
    parser.add_argument("--items", type=int, default=10_000, help="items for the open time")
    parser.add_argument("--opens", type=int, default=3, help="timed opens per backend")
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch, postgres(args.postgres_url) as (url, source):
        print(f"PostgreSQL: {source}")
        for name in backends():
            options: dict[str, Any] = {}
            if name in ("stash-postgres", "shadow"):
                if url is None:
                    print(f"{name}: skipped (no PostgreSQL)")
                    continue
                options = {"postgres_url": url, "postgres_schema": f"bench_{uuid.uuid4().hex[:8]}"}
            data_dir = Path(scratch) / name
            data_dir.mkdir()

            def make(name: str = name, data_dir: Path = data_dir, options: dict = options) -> Any:
                return create_backend(name, data_dir, **options)

            try:
                results.append(measure(name, make, args.commits, args.items, args.opens))
            except Exception as error:  # one broken backend must not hide the others' numbers
                print(f"{name}: failed: {type(error).__name__}: {error}")
    report(results, args.items)


if __name__ == "__main__":
    main()
