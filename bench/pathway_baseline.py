"""Pathway's side of ``bench/compute.py``: one TPC-H view, hydrated, then one-row inserts.

Runs with the Python of the benchmark's own Pathway venv (``make
bench-pathway`` creates ``bench/.venv-pathway``; Pathway is never a
dependency of Loupe), as a subprocess of ``bench/compute.py``, which
writes the generated tables and the rows to insert as Parquet:

    bench/.venv-pathway/bin/python bench/pathway_baseline.py \
        --tables DIR --inserts FILE --query q3

It builds the query of ``bench/compute.py``'s ``QUERIES`` of that name in
Pathway's Python API (the same filters, joins, groups and aggregates).
The tables are read by Pathway's CSV reader in static mode (written
beforehand, outside the timing, with only the columns the query reads, as
DuckDB scans only those: Pathway's fastest bulk input here, Q1 at SF 0.1
hydrated in about a quarter of the time ``pw.debug.table_from_pandas``
took), and lineitem is
also fed by a Python connector. One ``pw.run``:

- hydration: from ``pw.run`` until the first closed time at which the
  output changed; ``bench/compute.py`` checks that it is the whole answer
  over the static tables (DuckDB's);
- inserts: each row of ``--inserts`` pushed (and committed) alone, the
  time from the push until the closed time at which the output reflects
  it (the subscription's ``on_time_end`` after its changes).

Prints one JSON object: hydration seconds, the insert samples, peak RSS,
and the output after hydration and after the inserts, in the query's column
order with dates as ISO strings, for ``bench/compute.py`` to compare with
DuckDB's answer. Numeric columns are float64 here (Pathway has no decimal),
dates whole days since 1970-01-01, compared as integers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pathway as pw
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet as pq

EPOCH = datetime.date(1970, 1, 1)
# The inserts' connector commits each row itself; its autocommit only moves its time on while
# it waits for hydration (with none, the static tables' time never closes).
AUTOCOMMIT_MS = 10

# The columns each query reads, per table (the rest of the table is not loaded).
COLUMNS = {
    "q1": {
        "lineitem": (
            "l_returnflag",
            "l_linestatus",
            "l_quantity",
            "l_extendedprice",
            "l_discount",
            "l_tax",
            "l_shipdate",
        ),
    },
    "q3": {
        "customer": ("c_custkey", "c_mktsegment"),
        "orders": ("o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"),
        "lineitem": ("l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"),
    },
    "q5": {
        "customer": ("c_custkey", "c_nationkey"),
        "orders": ("o_orderkey", "o_custkey", "o_orderdate"),
        "lineitem": ("l_orderkey", "l_suppkey", "l_extendedprice", "l_discount"),
        "supplier": ("s_suppkey", "s_nationkey"),
        "nation": ("n_nationkey", "n_name", "n_regionkey"),
        "region": ("r_regionkey", "r_name"),
    },
}
# Output columns in the SQL's order, and which of them are dates.
OUTPUT = {
    "q1": (
        "l_returnflag",
        "l_linestatus",
        "sum_qty",
        "sum_base_price",
        "sum_disc_price",
        "sum_charge",
        "avg_qty",
        "avg_price",
        "avg_disc",
        "count_order",
    ),
    "q3": ("l_orderkey", "revenue", "o_orderdate", "o_shippriority"),
    "q5": ("n_name", "revenue"),
}
DATE_OUTPUTS = {"o_orderdate"}


def day(iso: str) -> int:
    """A date as the whole days since 1970-01-01, how the tables hold dates here."""
    return (datetime.date.fromisoformat(iso) - EPOCH).days


def plain(table: pa.Table) -> pa.Table:
    """Decimals as float64, dates as int64 days: types Pathway computes natively."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_decimal(field.type):
            column = column.cast(pa.float64())
        elif pa.types.is_date32(field.type):
            column = column.cast(pa.int32()).cast(pa.int64())
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def schema_of(table: pa.Table) -> type[pw.Schema]:
    def kind(field: pa.Field) -> type:
        if pa.types.is_integer(field.type):
            return int
        if pa.types.is_floating(field.type):
            return float
        assert pa.types.is_string(field.type), field
        return str

    return pw.schema_from_types(**{field.name: kind(field) for field in table.schema})


# -- the queries -----------------------------------------------------------------------


def q1(t: dict[str, pw.Table]) -> pw.Table:
    lines = t["lineitem"].filter(pw.this.l_shipdate <= day("1998-09-02"))
    lines = lines.select(
        *pw.this,
        disc_price=pw.this.l_extendedprice * (1 - pw.this.l_discount),
    ).select(*pw.this, charge=pw.this.disc_price * (1 + pw.this.l_tax))
    return lines.groupby(pw.this.l_returnflag, pw.this.l_linestatus).reduce(
        pw.this.l_returnflag,
        pw.this.l_linestatus,
        sum_qty=pw.reducers.sum(pw.this.l_quantity),
        sum_base_price=pw.reducers.sum(pw.this.l_extendedprice),
        sum_disc_price=pw.reducers.sum(pw.this.disc_price),
        sum_charge=pw.reducers.sum(pw.this.charge),
        avg_qty=pw.reducers.avg(pw.this.l_quantity),
        avg_price=pw.reducers.avg(pw.this.l_extendedprice),
        avg_disc=pw.reducers.avg(pw.this.l_discount),
        count_order=pw.reducers.count(),
    )


def q3(t: dict[str, pw.Table]) -> pw.Table:
    customers = t["customer"].filter(pw.this.c_mktsegment == "BUILDING")
    orders = t["orders"].filter(pw.this.o_orderdate < day("1995-03-15"))
    lines = t["lineitem"].filter(pw.this.l_shipdate > day("1995-03-15"))
    customer_orders = customers.join(orders, pw.left.c_custkey == pw.right.o_custkey).select(
        pw.right.o_orderkey, pw.right.o_orderdate, pw.right.o_shippriority
    )
    revenue = lines.join(customer_orders, pw.left.l_orderkey == pw.right.o_orderkey).select(
        pw.left.l_orderkey,
        pw.right.o_orderdate,
        pw.right.o_shippriority,
        volume=pw.left.l_extendedprice * (1 - pw.left.l_discount),
    )
    return revenue.groupby(pw.this.l_orderkey, pw.this.o_orderdate, pw.this.o_shippriority).reduce(
        pw.this.l_orderkey,
        revenue=pw.reducers.sum(pw.this.volume),
        o_orderdate=pw.this.o_orderdate,
        o_shippriority=pw.this.o_shippriority,
    )


def q5(t: dict[str, pw.Table]) -> pw.Table:
    regions = t["region"].filter(pw.this.r_name == "ASIA")
    nations = (
        t["nation"]
        .join(regions, pw.left.n_regionkey == pw.right.r_regionkey)
        .select(pw.left.n_nationkey, pw.left.n_name)
    )
    suppliers = (
        t["supplier"]
        .join(nations, pw.left.s_nationkey == pw.right.n_nationkey)
        .select(pw.left.s_suppkey, pw.left.s_nationkey, pw.right.n_name)
    )
    orders = t["orders"].filter(
        (pw.this.o_orderdate >= day("1994-01-01")) & (pw.this.o_orderdate < day("1995-01-01"))
    )
    customer_orders = (
        t["customer"]
        .join(orders, pw.left.c_custkey == pw.right.o_custkey)
        .select(pw.right.o_orderkey, pw.left.c_nationkey)
    )
    lines = (
        t["lineitem"]
        .join(customer_orders, pw.left.l_orderkey == pw.right.o_orderkey)
        .select(
            pw.left.l_suppkey,
            pw.right.c_nationkey,
            volume=pw.left.l_extendedprice * (1 - pw.left.l_discount),
        )
    )
    by_nation = lines.join(
        suppliers,
        pw.left.l_suppkey == pw.right.s_suppkey,
        pw.left.c_nationkey == pw.right.s_nationkey,
    ).select(pw.right.n_name, pw.left.volume)
    return by_nation.groupby(pw.this.n_name).reduce(
        pw.this.n_name, revenue=pw.reducers.sum(pw.this.volume)
    )


QUERIES = {"q1": q1, "q3": q3, "q5": q5}


# -- the run ---------------------------------------------------------------------------


class Output:
    """The query's output as it stands, and the times its changes close at."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self.rows: dict[Any, tuple[Any, ...]] = {}
        self.changed = False
        self.lock = threading.Lock()
        self.closed = threading.Condition(self.lock)
        # perf_counter() of each closed time that carried changes, in order.
        self.closed_at: list[float] = []

    def on_change(self, key: Any, row: dict[str, Any], time: int, is_addition: bool) -> None:
        if is_addition:
            self.rows[key] = tuple(row[name] for name in self.columns)
        elif self.rows.get(key) == tuple(row[name] for name in self.columns):
            del self.rows[key]
        self.changed = True

    def on_time_end(self, time: int) -> None:
        if not self.changed:
            return
        now = time_now()
        with self.lock:
            self.changed = False
            self.closed_at.append(now)
            self.closed.notify_all()

    def wait_for_change(self, seen: int, timeout: float) -> float:
        """The time the next closed time with changes (after ``seen`` of them) ended."""
        with self.lock:
            if not self.closed.wait_for(lambda: len(self.closed_at) > seen, timeout):
                raise TimeoutError(f"no change in the output within {timeout} s")
            return self.closed_at[seen]

    def snapshot(self) -> list[list[Any]]:
        dates = [name in DATE_OUTPUTS for name in self.columns]
        return [
            [
                (EPOCH + datetime.timedelta(days=value)).isoformat() if is_date else value
                for value, is_date in zip(row, dates, strict=True)
            ]
            for row in self.rows.values()
        ]


def time_now() -> float:
    return time.perf_counter()


class Inserts(pw.io.python.ConnectorSubject):
    """Pushes each lineitem row alone once the output is hydrated; times each until reflected."""

    def __init__(self, rows: list[dict[str, Any]], output: Output, timeout: float) -> None:
        super().__init__()
        self.rows = rows
        self.output = output
        self.timeout = timeout
        self.hydrated_at = 0.0
        self.hydrated: list[list[Any]] = []
        self.samples: list[float] = []

    def run(self) -> None:
        self.hydrated_at = self.output.wait_for_change(0, self.timeout)
        with self.output.lock:
            self.hydrated = self.output.snapshot()
            seen = len(self.output.closed_at)
        for row in self.rows:
            began = time_now()
            self.next(**row)
            self.commit()
            self.samples.append(self.output.wait_for_change(seen, self.timeout) - began)
            seen += 1

    @property
    def _deletions_enabled(self) -> bool:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, required=True, help="a directory of TABLE.parquet")
    parser.add_argument("--inserts", type=Path, required=True, help="lineitem rows (Parquet)")
    parser.add_argument("--query", choices=sorted(QUERIES), required=True)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per wait")
    options = parser.parse_args()

    tables, schemas = {}, {}
    for name, columns in COLUMNS[options.query].items():
        table = plain(pq.read_table(options.tables / f"{name}.parquet", columns=list(columns)))
        path = options.tables / f"pathway_{options.query}_{name}.csv"
        pyarrow.csv.write_csv(table, path)
        schemas[name] = schema_of(table)
        tables[name] = pw.io.csv.read(path, schema=schemas[name], mode="static", name=name)
    new_rows = plain(
        pq.read_table(options.inserts, columns=list(COLUMNS[options.query]["lineitem"]))
    )
    output = Output(OUTPUT[options.query])
    inserts = Inserts(new_rows.to_pylist(), output, options.timeout)
    streamed = pw.io.python.read(
        inserts, schema=schemas["lineitem"], autocommit_duration_ms=AUTOCOMMIT_MS, name="inserts"
    )
    tables["lineitem"] = pw.Table.concat_reindex(tables["lineitem"], streamed)
    result = QUERIES[options.query](tables)
    pw.io.subscribe(result, on_change=output.on_change, on_time_end=output.on_time_end)

    rss_before = resident_bytes()
    began = time_now()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    json.dump(
        {
            "pathway": pw.__version__,
            "hydration_s": inserts.hydrated_at - began,
            "insert_s": inserts.samples,
            "peak_rss_bytes": peak_rss(),
            "peak_rss_growth_bytes": peak_rss() - rss_before,
            "hydrated": inserts.hydrated,
            "final": output.snapshot(),
        },
        sys.stdout,
    )
    return 0


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    sys.exit(main())
