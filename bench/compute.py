"""Compute engine benchmarks on TPC-H: hydration, one-row updates, memory; against DuckDB.

For TPC-H Q1-, Q3- and Q5-shaped views at ``--scale`` (default SF 0.1):

- hydration: plan the SQL with the coordinator's planner (SQL -> MIR -> LIR),
  render it in ``loupe.dataflow.ComputeInstance`` as a view with an index,
  push every table as the replica would (the updates read back from shards
  the TPC-H load generator filled) and step until the index's write
  frontier passes the as_of. Baseline: DuckDB (in process, its default
  threads) running the same SQL over the same generated Arrow tables
  (numeric as DECIMAL(15, 2); the engine receives persist's format, numeric
  as decimal128(38, 16), and computes numeric exactly). Target <= 5x DuckDB.
- one-row insert: ``--inserts`` times, a new lineitem row (a copy of one
  that contributes to the view, with a fresh line number) pushed at the
  next time, then steps until the index's frontier passes it; p50 and p99.
  Baseline: DuckDB inserting the row and recomputing the query in full
  (its inserts run after the engine's, not between them). Target p50 < 50 ms.
- memory: the process's resident set growth over hydration, per million
  rows the engine's arrangements hold.

Second baseline, Pathway (an incremental engine, like this one): the same
tables, the same query in Pathway's Python API and the same inserted rows,
run by ``bench/pathway_baseline.py`` in a venv of the benchmark's own
(``bench/.venv-pathway``, which ``make bench-pathway`` creates and ``make
bench`` creates when missing; Pathway is never a dependency of Loupe), once
per query after the engine's inserts. Printed in the same run: hydration
against Pathway's (target <= 1x), the one-row insert p50 against Pathway's
(target <= 1x) and the engine's p99 against its p50 (target <= 3x). Without
the venv (or with ``--no-pathway``) it says the baseline was skipped and why,
and the rest runs as before.

After the inserts the index is peeked and compared with DuckDB's answer, and
so are Pathway's output after hydration and after the inserts (a mismatch
makes the run fail). ``--profile q5`` prints the hottest functions
(cProfile) of that query's hydration and inserts instead.

Run: ``.venv/bin/python bench/compute.py [--scale 0.1] [--inserts 50] [--queries q1,q3,q5]
[--no-pathway]``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import json
import math
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.dataflow import ComputeInstance
from loupe.dataflow.hooks import LoggingHooks
from loupe.loadgen import tpch
from loupe.persist import LocalBlob, Shard, SqliteConsensus
from loupe.plan import lir
from loupe.plan.dataflow import (
    BuildDesc,
    DataflowDescription,
    IndexExport,
    SourceImport,
)

HYDRATION_TARGET = 5.0
INSERT_P50_TARGET_S = 0.050
# Against Pathway: hydration and the one-row insert p50 at most Pathway's.
PATHWAY_TARGET = 1.0
# The engine's one-row insert p99 at most this many times its p50.
INSERT_P99_OVER_P50_TARGET = 3.0
# The benchmark's own venv holding Pathway (``make bench-pathway``), and its runner.
PATHWAY_VENV = Path(__file__).with_name(".venv-pathway")
PATHWAY_RUNNER = Path(__file__).with_name("pathway_baseline.py")
# Seconds the Pathway runner may take for one query (hydration and every insert).
PATHWAY_TIMEOUT_S = 900
# The time the tables are loaded at; dataflows are built as of it.
LOAD_TS = 1
# Views arranging fewer rows than this get no per-million memory figure.
MEMORY_MIN_RECORDS = 10_000
# Relative tolerance comparing the engine's float8 numeric with DuckDB's decimals.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    # Index key of the view (column positions): its group key.
    key: tuple[int, ...]


# TPC-H Q1, Q3 and Q5 (spec §2.4) as views: dates as literals, no ORDER BY / LIMIT.
QUERIES = (
    Query(
        "q1",
        """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty,
            sum(l_extendedprice) AS sum_base_price,
            sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
            sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
            avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price,
            avg(l_discount) AS avg_disc, count(*) AS count_order
        FROM lineitem
        WHERE l_shipdate <= DATE '1998-09-02'
        GROUP BY l_returnflag, l_linestatus""",
        (0, 1),
    ),
    Query(
        "q3",
        """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue,
            o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
            AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority""",
        (0, 2, 3),
    ),
    Query(
        "q5",
        """SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM customer, orders, lineitem, supplier, nation, region
        WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
            AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey
            AND n_regionkey = r_regionkey AND r_name = 'ASIA'
            AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
        GROUP BY n_name""",
        (0,),
    ),
)


# -- data ------------------------------------------------------------------------------


@dataclass
class TpchData:
    """The generated tables in Loupe's types, and the same as the shards' updates."""

    tables: dict[str, pa.Table]
    updates: dict[str, pa.Table]


def load_tpch(scale: float, root: Path) -> TpchData:
    """Generate TPC-H, load it into shards at ``LOAD_TS`` and read the updates back."""
    began = time.perf_counter()
    tables = tpch.generate(scale, root / "tpchgen")
    generated = time.perf_counter()
    blob, consensus = LocalBlob(root / "blob"), SqliteConsensus(root / "consensus.sqlite")
    shards = {name: Shard(f"tpch_{name}", blob, consensus) for name in tables}
    tpch.load(tables, shards, LOAD_TS)
    loaded = time.perf_counter()
    updates = {name: shard.read_updates() for name, shard in shards.items()}
    rows = sum(t.num_rows for t in tables.values())
    print(
        f"data      TPC-H SF {scale:g}: {rows:,} rows   generate {generated - began:5.2f} s"
        f"   load into shards {loaded - generated:5.2f} s"
        f"   read back {time.perf_counter() - loaded:5.2f} s"
    )
    return TpchData(tables, updates)


# -- DuckDB, the baseline --------------------------------------------------------------


class DuckDb:
    """An in-process DuckDB scanning the generated Arrow tables (no copy into its own storage)."""

    def __init__(self, tables: dict[str, pa.Table]) -> None:
        self.connection = duckdb.connect()
        self.tables = dict(tables)
        for name, table in tables.items():
            self.connection.register(name, table)

    def query(self, sql: str) -> pa.Table:
        return self.connection.sql(sql).to_arrow_table()

    def insert(self, table: str, rows: pa.Table) -> None:
        """Append ``rows`` (a new chunk of the same Arrow table: no copy of the old rows)."""
        self.tables[table] = pa.concat_tables(
            [self.tables[table], rows.cast(self.tables[table].schema)]
        )
        self.connection.register(table, self.tables[table])

    def lineitems_to_insert(self, query: Query, count: int) -> pa.Table:
        """``count`` lineitem rows that pass ``query``'s joins and filters (deterministic).

        Any lineitems when none does (tiny scale factors): the frontier must
        still pass each insert.
        """
        witness = sqlglot.parse_one(query.sql, read="postgres")
        assert isinstance(witness, exp.Select)
        witness.set("group", None)
        witness = witness.select("lineitem.*", append=False)
        order = f"ORDER BY l_orderkey, l_linenumber LIMIT {count}"
        rows = self.query(f"{witness.sql(dialect='duckdb')} {order}")
        return rows if rows.num_rows else self.query(f"SELECT * FROM lineitem {order}")


def best_of(rounds: int, step: Callable[[], Any]) -> float:
    best = math.inf
    for _ in range(rounds):
        began = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - began)
    return best


# -- Pathway, the incremental baseline -------------------------------------------------


@dataclass
class PathwayRun:
    """What ``bench/pathway_baseline.py`` measured for one query."""

    version: str
    hydration: float
    inserts: list[float]
    peak_rss: int
    peak_rss_growth: int
    hydrated: list[tuple[Any, ...]]
    final: list[tuple[Any, ...]]


class Pathway:
    """Runs the Pathway baseline in its own venv, one subprocess per query.

    ``skipped`` says why it does not run (no venv, ``--no-pathway``); a run
    that fails says why and the benchmark goes on without its ratios.
    """

    def __init__(self, python: Path | None, scratch: Path, tables: dict[str, pa.Table]) -> None:
        self.python = python
        self.scratch = scratch
        self.skipped = "" if python is not None else "--no-pathway"
        if python is not None and not python.exists():
            self.skipped = f"{python} not found ({install_hint()})"
        if not self.skipped:
            for name, table in tables.items():
                pq.write_table(table, scratch / f"{name}.parquet")

    def run(self, query: Query, rows: pa.Table) -> PathwayRun | None:
        """Hydrate ``query`` in Pathway, then insert ``rows`` one at a time; None if it failed."""
        assert self.python is not None
        inserts = self.scratch / f"inserts_{query.name}.parquet"
        pq.write_table(rows, inserts)
        command = [str(self.python), str(PATHWAY_RUNNER), "--tables", str(self.scratch)]
        command += ["--inserts", str(inserts), "--query", query.name]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=PATHWAY_TIMEOUT_S,
                check=False,
                # Loupe's import paths mean nothing to the other venv's Python.
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            )
        except subprocess.TimeoutExpired:
            print(f"pathway   {query.name}  baseline timed out after {PATHWAY_TIMEOUT_S} s")
            return None
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-5:])
            print(f"pathway   {query.name}  baseline failed (exit {done.returncode}): {tail}")
            return None
        out = json.loads(done.stdout)
        return PathwayRun(
            version=out["pathway"],
            hydration=out["hydration_s"],
            inserts=out["insert_s"],
            peak_rss=out["peak_rss_bytes"],
            peak_rss_growth=out["peak_rss_growth_bytes"],
            hydrated=[tuple(row) for row in out["hydrated"]],
            final=[tuple(row) for row in out["final"]],
        )


def install_hint() -> str:
    log = PATHWAY_VENV.with_name(PATHWAY_VENV.name + ".log")
    hint = "make bench-pathway creates it"
    if log.exists():
        lines = [line.strip() for line in log.read_text().splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")]
        if lines:
            hint += f"; its last attempt ended: {(errors or lines)[-1]}"
    return hint


def iso_dates(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Dates as ISO strings, as the Pathway runner returns them."""
    return [
        tuple(v.isoformat() if isinstance(v, datetime.date) else v for v in row) for row in rows
    ]


# -- the engine ------------------------------------------------------------------------


def resolve(name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The planner's catalog: the TPC-H tables, each named by its own name."""
    columns = tpch.TPCH_TABLES.get(name)
    return None if columns is None else (name, columns)


def dataflow(query: Query) -> DataflowDescription:
    """``query`` as a view built and indexed by one dataflow, as of ``LOAD_TS``."""
    relation = plan_query(sqlglot.parse_one(query.sql, read="postgres"), resolve)
    plan = lower_to_lir(relation)
    sources = sorted({node.name for node in lir.walk(plan) if isinstance(node, lir.Get)})
    return DataflowDescription(
        id=f"dataflow_{query.name}",
        debug_name=query.name,
        source_imports=tuple(
            SourceImport(name, f"tpch_{name}", tpch.TPCH_TABLES[name]) for name in sources
        ),
        objects_to_build=(BuildDesc(f"view_{query.name}", plan, relation.columns, query.name),),
        index_exports=(IndexExport(index_id(query), f"view_{query.name}", query.key),),
        as_of=LOAD_TS,
    )


def index_id(query: Query) -> str:
    return f"index_{query.name}"


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class ArrangementSizes(LoggingHooks):
    """The latest size the engine reported for each arrangement (records, bytes)."""

    enabled = True

    def __init__(self) -> None:
        self.sizes: dict[tuple[int, int], tuple[int, int]] = {}

    def arrangement_size(
        self,
        worker: int,
        operator_id: int,
        records: int,
        batches: int,
        size: int,
        capacity: int | None = None,
        allocations: int | None = None,
    ) -> None:
        self.sizes[(worker, operator_id)] = (records, size)

    def records(self) -> int:
        return sum(records for records, _ in self.sizes.values())

    def bytes(self) -> int:
        return sum(size for _, size in self.sizes.values())


class Engine:
    """One query's dataflow in its own ``ComputeInstance``, fed the TPC-H updates."""

    def __init__(self, query: Query, data: TpchData) -> None:
        self.query = query
        self.data = data
        self.arrangements = ArrangementSizes()
        self.instance = ComputeInstance(logging=self.arrangements)
        self.time = LOAD_TS

    def hydrate(self) -> float:
        """Create the dataflow, push the snapshot, step until the index is complete at the as_of."""
        desc = dataflow(self.query)
        began = time.perf_counter()
        self.instance.create_dataflow(desc)
        for source in self.instance.source_ids():
            updates = self.data.updates[source]
            if PIECE_ROWS:
                # As the replica reads a snapshot: its size first, then piece by piece at the
                # as_of, the frontier passing it only after the last piece.
                self.instance.expect_snapshot(source, updates.num_rows)
                for offset in range(0, updates.num_rows, PIECE_ROWS):
                    self.instance.push(source, updates.slice(offset, PIECE_ROWS), LOAD_TS)
                updates = updates.slice(0, 0)
            self.instance.push(source, updates, LOAD_TS + 1)
        self._step_past(LOAD_TS)
        return time.perf_counter() - began

    def insert(self, rows: pa.Table) -> float:
        """Push lineitem ``rows`` at the next time; seconds until the index passes it."""
        self.time += 1
        updates = tpch.storage_updates(rows, tpch.TPCH_TABLES["lineitem"], self.time)
        began = time.perf_counter()
        for source in self.instance.source_ids():
            # Every source's frontier moves on: joins wait for all their inputs.
            pushed = updates if source == "lineitem" else self.data.updates[source].slice(0, 0)
            self.instance.push(source, pushed, self.time + 1)
        self._step_past(self.time)
        return time.perf_counter() - began

    def _step_past(self, timestamp: int) -> None:
        while self.instance.write_frontier(index_id(self.query)) <= timestamp:
            if not self.instance.step():
                raise RuntimeError(f"{self.query.name}: engine idle before passing {timestamp}")

    def contents(self) -> list[tuple[Any, ...]]:
        return self.instance.peek(index_id(self.query), self.time).rows()


def arrow_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in table.to_pylist()]


# -- comparison ------------------------------------------------------------------------


def same_rows(
    engine: list[tuple[Any, ...]], duck: list[tuple[Any, ...]], key: tuple[int, ...]
) -> bool:
    """Equal row for row when sorted by the group ``key``; numbers within a relative tolerance.

    The engine computes numeric as float8, DuckDB as decimals: sums may
    differ in the last digits, and each side sorts by its own key columns
    (text, integers, dates), which both compute exactly.
    """
    if len(engine) != len(duck):
        return False

    def by_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(row[i] for i in key)

    return all(
        all(same_value(a, b) for a, b in zip(x, y, strict=True))
        for x, y in zip(sorted(engine, key=by_key), sorted(duck, key=by_key), strict=True)
    )


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return a == b


# -- the benchmarks --------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def hydrate(query: Query, data: TpchData, rounds: int) -> tuple[Engine, float, int]:
    """The best of ``rounds`` hydrations, each in a fresh instance, as DuckDB's runs are.

    Returns the last instance (for the inserts), the best time and the RSS
    growth over the first hydration (later ones reuse memory the allocator kept).
    """
    best, rss_growth = math.inf, 0
    engine: Engine | None = None
    for round_index in range(rounds):
        engine = None  # the previous round's instance is garbage before the next one starts
        gc.collect()
        rss_before = resident_bytes()
        engine = Engine(query, data)
        best = min(best, engine.hydrate())
        if round_index == 0:
            rss_growth = resident_bytes() - rss_before
    assert engine is not None
    return engine, best, rss_growth


def bench_query(query: Query, data: TpchData, inserts: int, rounds: int, pathway: Pathway) -> bool:
    """All three measurements for one query, then Pathway's; False when an answer is wrong."""
    duck = DuckDb(data.tables)
    duck_hydration = best_of(rounds, lambda: duck.query(query.sql))
    duck_hydrated = arrow_rows(duck.query(query.sql))
    engine, hydration, rss_growth = hydrate(query, data, rounds)
    ratio = hydration / duck_hydration
    verdict = "ok" if ratio <= HYDRATION_TARGET else "OVER TARGET"
    print(
        f"hydrate   {query.name}  engine {hydration * 1000:9.1f} ms   DuckDB {duck_hydration * 1000:7.1f} ms"
        f"   ({ratio:.1f}x DuckDB; target <= {HYDRATION_TARGET:.0f}x: {verdict})   best of {rounds}",
        flush=True,
    )
    report_memory(query, engine, rss_growth)

    new_rows = duck.lineitems_to_insert(query, inserts)
    inserted = [fresh_line(new_rows.slice(index, 1), index) for index in range(new_rows.num_rows)]
    # The engine's inserts in a row, then DuckDB's: a DuckDB recompute between two of the
    # engine's (all cores, the whole table) would time its cache misses as the engine's.
    engine_samples = [engine.insert(row) for row in inserted]
    duck_samples = []
    for row in inserted:
        began = time.perf_counter()
        duck.insert("lineitem", row)
        duck.query(query.sql)
        duck_samples.append(time.perf_counter() - began)
    p50, duck_p50 = statistics.median(engine_samples), statistics.median(duck_samples)
    p99 = percentile(engine_samples, 0.99)
    verdict = "ok" if p50 < INSERT_P50_TARGET_S else "OVER TARGET"
    print(
        f"insert    {query.name}  engine p50 {p50 * 1000:7.1f} ms  p99 "
        f"{p99 * 1000:7.1f} ms   DuckDB recompute p50 "
        f"{duck_p50 * 1000:6.1f} ms   ({p50 / duck_p50:.2f}x; target p50 < "
        f"{INSERT_P50_TARGET_S * 1000:.0f} ms: {verdict})   n={len(engine_samples)}",
        flush=True,
    )
    tail = p99 / p50
    verdict = "ok" if tail <= INSERT_P99_OVER_P50_TARGET else "OVER TARGET"
    print(
        f"insert    {query.name}  engine p99 / p50 {tail:.2f}"
        f"   (target <= {INSERT_P99_OVER_P50_TARGET:.0f}: {verdict})",
        flush=True,
    )
    duck_final = arrow_rows(duck.query(query.sql))
    correct = same_rows(engine.contents(), duck_final, query.key)
    print(f"check     {query.name}  index after the inserts equals DuckDB: {correct}")
    if pathway.skipped:
        return correct
    run = pathway.run(query, pa.concat_tables(inserted))
    if run is None:
        return correct
    return (
        report_pathway(query, run, hydration, engine_samples, duck_hydrated, duck_final) and correct
    )


def report_pathway(
    query: Query,
    run: PathwayRun,
    hydration: float,
    engine_samples: list[float],
    duck_hydrated: list[tuple[Any, ...]],
    duck_final: list[tuple[Any, ...]],
) -> bool:
    """Print the engine against Pathway; False when Pathway's answers differ from DuckDB's."""
    ratio = hydration / run.hydration
    verdict = "ok" if ratio <= PATHWAY_TARGET else "OVER TARGET"
    print(
        f"hydrate   {query.name}  engine {hydration * 1000:9.1f} ms   Pathway {run.hydration * 1000:7.1f} ms"
        f"   ({ratio:.2f}x Pathway; target <= {PATHWAY_TARGET:.0f}x: {verdict})",
        flush=True,
    )
    p50, pathway_p50 = statistics.median(engine_samples), statistics.median(run.inserts)
    ratio = p50 / pathway_p50
    verdict = "ok" if ratio <= PATHWAY_TARGET else "OVER TARGET"
    print(
        f"insert    {query.name}  engine p50 {p50 * 1000:7.1f} ms   Pathway p50 "
        f"{pathway_p50 * 1000:6.2f} ms  p99 {percentile(run.inserts, 0.99) * 1000:6.2f} ms"
        f"   ({ratio:.1f}x Pathway; target <= {PATHWAY_TARGET:.0f}x: {verdict})"
        f"   n={len(run.inserts)}",
        flush=True,
    )
    print(
        f"memory    {query.name}  Pathway {run.version} peak RSS {run.peak_rss / 2**20:.0f} MiB"
        f" (+{run.peak_rss_growth / 2**20:.0f} MiB over its resident size before pw.run)",
        flush=True,
    )
    hydrated = same_rows(run.hydrated, iso_dates(duck_hydrated), query.key)
    final = same_rows(run.final, iso_dates(duck_final), query.key)
    print(
        f"check     {query.name}  Pathway after hydration equals DuckDB: {hydrated},"
        f" after the inserts: {final}"
    )
    return hydrated and final


def fresh_line(row: pa.Table, index: int) -> pa.Table:
    """``row`` as a new line of the same order: a line number no generated line has (1..7)."""
    position = row.schema.get_field_index("l_linenumber")
    return row.set_column(
        position, "l_linenumber", pa.array([100 + index], row.schema.field(position).type)
    )


def report_memory(query: Query, engine: Engine, rss_growth: int) -> None:
    """RSS growth and the engine's own arrangement bytes, per million arranged rows.

    RSS also grows by what is not arranged (the instance's copy of each
    source, batches in flight), so only views that arrange many rows give a
    meaningful per-million figure.
    """
    records, arranged = engine.arrangements.records(), engine.arrangements.bytes()
    line = (
        f"memory    {query.name}  {records:,} arranged rows ({arranged / 2**20:.1f} MiB by the"
        f" engine's count)   RSS +{rss_growth / 2**20:.1f} MiB"
    )
    if records >= MEMORY_MIN_RECORDS:
        per_million = 1_000_000 / records / 2**20
        line += (
            f"   per million arranged rows: RSS {rss_growth * per_million:.0f} MiB,"
            f" arrangements {arranged * per_million:.0f} MiB"
        )
    print(line, flush=True)


def profile(query: Query, data: TpchData, inserts: int, top: int) -> None:
    """Print the hottest functions of ``query``'s hydration, then of its one-row inserts."""
    engine = Engine(query, data)
    print_profile(f"{query.name} hydration", engine.hydrate, top)
    rows = DuckDb(data.tables).lineitems_to_insert(query, inserts)

    def insert_all() -> None:
        for index in range(rows.num_rows):
            engine.insert(fresh_line(rows.slice(index, 1), index))

    print_profile(f"{query.name} {rows.num_rows} one-row inserts", insert_all, top)


def print_profile(label: str, work: Callable[[], Any], top: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(work)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    print(f"\n== cProfile of {label} (top {top} by cumulative time)\n{out.getvalue()}")


def chosen(names: str) -> Iterator[Query]:
    by_name = {q.name: q for q in QUERIES}
    for name in names.split(","):
        if name not in by_name:
            raise SystemExit(f"unknown query {name!r}: choose from {', '.join(by_name)}")
        yield by_name[name]


# Rows per piece a snapshot is pushed in (``--piece-rows``); 0: one piece.
PIECE_ROWS = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--inserts", type=int, default=50, help="one-row inserts per query")
    parser.add_argument(
        "--rounds", type=int, default=3, help="hydrations per query, engine and DuckDB (best of)"
    )
    parser.add_argument("--queries", default="q1,q3,q5")
    parser.add_argument(
        "--piece-rows",
        type=int,
        default=0,
        help="push each snapshot in pieces of this many rows, as the replica reads it (0: one)",
    )
    parser.add_argument(
        "--profile", metavar="QUERY", help="cProfile that query's hydration and inserts"
    )
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--no-pathway", action="store_true", help="skip the Pathway baseline")
    parser.add_argument(
        "--pathway-python",
        type=Path,
        default=PATHWAY_VENV / "bin" / "python",
        help="the Python of a venv with Pathway (make bench-pathway creates the default)",
    )
    options = parser.parse_args()
    global PIECE_ROWS
    PIECE_ROWS = options.piece_rows
    queries = list(chosen(options.queries))
    with tempfile.TemporaryDirectory() as scratch:
        data = load_tpch(options.scale, Path(scratch))
    if options.profile:
        profile(next(chosen(options.profile)), data, options.inserts, options.profile_top)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        python = None if options.no_pathway else options.pathway_python
        pathway = Pathway(python, Path(scratch), data.tables)
        if pathway.skipped:
            print(f"pathway   baseline skipped: {pathway.skipped}", flush=True)
        failures = sum(
            not bench_query(q, data, options.inserts, options.rounds, pathway) for q in queries
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
