"""Incremental results equal a batch engine's: random inserts and deletes, checked against DuckDB.

Every view is an LIR plan written by hand next to the SQL DuckDB runs for it.
After every step each index must hold exactly what DuckDB computes over the
tables' current contents; peeks at the previous time must still answer the
previous results; and at the end a dataflow rendered from scratch at the
last time must agree with the one maintained incrementally.
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import duckdb
import polars as pl
import pytest

from loupe.dataflow import ComputeInstance, operators
from loupe.dataflow.testing import index_dataflow, persist_updates, read
from loupe.plan import lir, mir
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Cast, Column, Literal

T = (("k", "text"), ("v", "int4"), ("x", "float8"))
U = (("k", "text"), ("w", "int8"))
T_TYPES = ("text", "int4", "float8")
U_TYPES = ("text", "int8")


def t_get(node_id: int = 0) -> lir.Get:
    return lir.Get(node_id, "t", types=T_TYPES)


def u_get(node_id: int = 1) -> lir.Get:
    return lir.Get(node_id, "u", types=U_TYPES)


def join_t_u() -> lir.Join:
    arranged = (
        lir.ArrangeBy(2, t_get(), ((Column(0),),), types=T_TYPES),
        lir.ArrangeBy(3, u_get(), ((Column(0),),), types=U_TYPES),
    )
    return lir.Join(
        4, arranged, ((Column(0), Column(3)),), lir.JoinKind.LINEAR, types=T_TYPES + U_TYPES
    )


def project(node: lir.Node, node_id: int, columns: tuple[int, ...]) -> lir.Mfp:
    mfp = MapFilterProject(len(node.types), projection=columns)
    return lir.Mfp(node_id, node, mfp, types=tuple(node.types[c] for c in columns))


VIEWS: dict[str, tuple[lir.Node, str]] = {
    "mfp": (
        lir.Mfp(
            1,
            t_get(),
            MapFilterProject(
                3,
                (Call("mul", (Column(1), Literal(2, "int4"))),),
                (Call("gt", (Column(1), Literal(1, "int4"))),),
                (0, 3),
            ),
            types=("text", "int4"),
        ),
        "SELECT k, v * 2 FROM t WHERE v > 1",
    ),
    "sums": (
        lir.Reduce(
            1,
            t_get(),
            (Column(0),),
            (
                mir.Aggregate("count", None),
                mir.Aggregate("count", Column(2)),
                mir.Aggregate("sum", Column(1)),
                mir.Aggregate("sum", Column(2)),
                mir.Aggregate("avg", Column(1)),
            ),
            lir.ReduceKind.ACCUMULABLE,
            types=("text", "int8", "int8", "int8", "float8", "numeric"),
        ),
        "SELECT k, count(*), count(x), sum(v), sum(x), avg(v) FROM t GROUP BY k",
    ),
    "min_max": (
        lir.Reduce(
            1,
            t_get(),
            (Column(0),),
            (mir.Aggregate("min", Column(1)), mir.Aggregate("max", Column(2))),
            lir.ReduceKind.HIERARCHICAL,
            types=("text", "int4", "float8"),
        ),
        "SELECT k, min(v), max(x) FROM t GROUP BY k",
    ),
    "count_distinct": (
        lir.Reduce(
            1,
            t_get(),
            (Column(0),),
            (mir.Aggregate("count", Column(1), distinct=True), mir.Aggregate("sum", Column(1))),
            lir.ReduceKind.BASIC,
            types=("text", "int8", "int8"),
        ),
        "SELECT k, count(DISTINCT v), sum(v) FROM t GROUP BY k",
    ),
    # Keyless: one group, whose rows a multi-time step pairs with every time.
    "global_min_max": (
        lir.Reduce(
            1,
            t_get(),
            (),
            (mir.Aggregate("min", Column(1)), mir.Aggregate("max", Column(0))),
            lir.ReduceKind.HIERARCHICAL,
            types=("int4", "text"),
        ),
        "SELECT min(v), max(k) FROM t HAVING count(*) > 0",
    ),
    "global_distinct": (
        lir.Reduce(
            1,
            t_get(),
            (),
            (mir.Aggregate("count", Column(0), distinct=True),),
            lir.ReduceKind.BASIC,
            types=("int8",),
        ),
        "SELECT count(DISTINCT k) FROM t HAVING count(*) > 0",
    ),
    "string_agg": (
        lir.Reduce(
            1,
            t_get(),
            (Column(0),),
            (
                mir.Aggregate(
                    "string_agg",
                    Cast(Column(1), "text"),
                    args=(Literal(",", "text"),),
                    order_by=(mir.AggregateOrder(Column(1), desc=True),),
                ),
            ),
            lir.ReduceKind.BASIC,
            types=("text", "text"),
        ),
        "SELECT k, string_agg(CAST(v AS TEXT), ',' ORDER BY v DESC) FROM t GROUP BY k",
    ),
    "join": (join_t_u(), "SELECT * FROM t JOIN u ON t.k = u.k"),
    "join_reduce": (
        lir.Reduce(
            5,
            join_t_u(),
            (Column(0),),
            (mir.Aggregate("sum", Column(4)), mir.Aggregate("count", None)),
            lir.ReduceKind.ACCUMULABLE,
            types=("text", "numeric", "int8"),
        ),
        "SELECT t.k, sum(u.w), count(*) FROM t JOIN u ON t.k = u.k GROUP BY t.k",
    ),
    "top3": (
        lir.TopK(1, t_get(), (mir.OrderKey(1),), 3, 0, (), types=T_TYPES),
        "SELECT * FROM t ORDER BY v NULLS LAST, k NULLS LAST, v NULLS LAST, x NULLS LAST LIMIT 3",
    ),
    "top_per_key": (
        lir.TopK(
            1, t_get(), (mir.OrderKey(1, desc=True, nulls_last=False),), 2, 1, (0,), types=T_TYPES
        ),
        """SELECT k, v, x FROM (
             SELECT *, row_number() OVER (
               PARTITION BY k ORDER BY v DESC NULLS FIRST, k, v NULLS LAST, x NULLS LAST) AS rn
             FROM t) WHERE rn BETWEEN 2 AND 3""",
    ),
    "except_all": (
        lir.Threshold(
            5,
            lir.Union(
                4,
                (
                    project(t_get(), 1, (0,)),
                    lir.Negate(3, project(u_get(), 2, (0,)), types=("text",)),
                ),
                types=("text",),
            ),
            types=("text",),
        ),
        "SELECT k FROM t EXCEPT ALL SELECT k FROM u",
    ),
    "distinct_union": (
        lir.Reduce(
            4,
            lir.Union(3, (project(t_get(), 1, (0,)), project(u_get(), 2, (0,))), types=("text",)),
            (Column(0),),
            (),
            lir.ReduceKind.DISTINCT,
            types=("text",),
        ),
        "SELECT DISTINCT k FROM (SELECT k FROM t UNION ALL SELECT k FROM u)",
    ),
}


def normalize(row: tuple[object, ...]) -> tuple[object, ...]:
    """Numbers compared as floats to 6 decimals (DuckDB's sums are HUGEINT/DECIMAL)."""
    return tuple(
        round(float(v), 6)
        if isinstance(v, int | float | Decimal) and not isinstance(v, bool)
        else v
        for v in row
    )


def multiset(rows: list[tuple[object, ...]]) -> Counter:
    return Counter(normalize(r) for r in rows)


class Workload:
    """Random inserts and deletes on t and u, mirrored in DuckDB."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.rows: dict[str, list[tuple[object, ...]]] = {"t": [], "u": []}
        self.db = duckdb.connect()
        self.db.execute("CREATE TABLE t (k TEXT, v INTEGER, x DOUBLE)")
        self.db.execute("CREATE TABLE u (k TEXT, w BIGINT)")

    def _row(self, table: str) -> tuple[object, ...]:
        key = self.random.choice(["a", "b", "c", "d", None])
        if table == "t":
            v = self.random.choice([0, 1, 2, 3, 5, 8, None])
            x = self.random.choice([0.5, 1.25, -2.0, 3.0, None])
            return (key, v, x)
        return (key, self.random.choice([1, 10, 100, None]))

    def changes(self, table: str) -> list[tuple[tuple[object, ...], int]]:
        """Some inserts (duplicates possible) and deletes of existing rows, applied to DuckDB."""
        changes = [(self._row(table), 1) for _ in range(self.random.randint(0, 4))]
        current = self.rows[table]
        for _ in range(self.random.randint(0, 2)):
            if current:
                changes.append((current.pop(self.random.randrange(len(current))), -1))
        current.extend(row for row, diff in changes if diff > 0)
        self.db.execute(f"DELETE FROM {table}")
        if current:
            marks = ", ".join("?" * len(current[0]))
            self.db.executemany(f"INSERT INTO {table} VALUES ({marks})", [list(r) for r in current])
        return changes

    def expected(self, sql: str) -> Counter:
        return multiset(self.db.execute(sql).fetchall())


def create(instance: ComputeInstance, as_of: int) -> None:
    for name, (plan, _) in VIEWS.items():
        instance.create_dataflow(index_dataflow(name, plan, {"t": T, "u": U}, as_of))


def view_contents(instance: ComputeInstance, name: str, time: int) -> Counter:
    return multiset(list(read(instance, f"{name}_index", time).elements()))


@pytest.mark.parametrize("workers", [1, 3])
def test_random_updates_match_duckdb_and_a_recompute(workers: int) -> None:
    """20 steps of random changes; every view equals DuckDB after each, at old times too."""
    workload = Workload(seed=workers)
    instance = ComputeInstance(workers=workers)
    create(instance, as_of=0)
    previous: dict[str, Counter] = {}
    for time in range(20):
        for table, columns in (("t", T), ("u", U)):
            changes = workload.changes(table)
            updates = [(row, time, diff) for row, diff in changes]
            instance.push(table, persist_updates(columns, updates), time + 1)
        assert instance.step()
        for name, (_, sql) in VIEWS.items():
            assert view_contents(instance, name, time) == workload.expected(sql), (name, time)
            if time:
                assert view_contents(instance, name, time - 1) == previous[name], (name, time)
            previous[name] = view_contents(instance, name, time)

    fresh = ComputeInstance(workers=workers)
    create(fresh, as_of=19)
    for table, columns in (("t", T), ("u", U)):
        snapshot = [(row, 19, 1) for row in workload.rows[table]]
        fresh.push(table, persist_updates(columns, snapshot), 20)
    fresh.step()
    for name in VIEWS:
        assert view_contents(fresh, name, 19) == view_contents(instance, name, 19), name


@pytest.mark.parametrize("workers", [1, 3])
def test_many_times_in_one_step_match_each_times_recompute(workers: int) -> None:
    """Changes at eight times pushed at once: every time's result equals a recompute at it."""
    workload = Workload(seed=10 + workers)
    instance = ComputeInstance(workers=workers)
    create(instance, as_of=0)
    snapshots: dict[int, dict[str, list]] = {}
    pushed: dict[str, list] = {"t": [], "u": []}
    for time in range(8):
        for table in ("t", "u"):
            pushed[table] += [(row, time, diff) for row, diff in workload.changes(table)]
        snapshots[time] = {table: list(rows) for table, rows in workload.rows.items()}
    for table, columns in (("t", T), ("u", U)):
        instance.push(table, persist_updates(columns, pushed[table]), 8)
    assert instance.step()
    for time, tables in snapshots.items():
        fresh = ComputeInstance()
        create(fresh, as_of=time)
        for table, columns in (("t", T), ("u", U)):
            snapshot = [(row, time, 1) for row in tables[table]]
            fresh.push(table, persist_updates(columns, snapshot), time + 1)
        fresh.step()
        for name in VIEWS:
            expected = view_contents(fresh, name, time)
            assert view_contents(instance, name, time) == expected, (name, time)


def count_evaluations(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Per operator (re-evaluating reduces and top-k): how many times it evaluated groups."""
    calls: Counter[int] = Counter()
    for cls, method in ((operators.Reduce, "_aggregate"), (operators.TopK, "_top")):
        original = getattr(cls, method)

        def counted(self, rows, *args, _original=original, **kwargs):
            calls[id(self)] += 1
            return _original(self, rows, *args, **kwargs)

        monkeypatch.setattr(cls, method, counted)
    return calls


RECOMPUTED = (
    "min_max",
    "count_distinct",
    "global_min_max",
    "global_distinct",
    "string_agg",
    "top3",
    "top_per_key",
)


def _catch_up(
    workers: int, inserts_only: bool, times: int, monkeypatch: pytest.MonkeyPatch
) -> Counter[int]:
    """Random changes of t at ``times`` times after a snapshot at 0, pushed at once (a
    replica catching up) to one instance and time by time to another: every time's
    contents must agree. Returns how often each operator evaluated groups in the one step."""
    rng = random.Random(workers * 2 + inserts_only)
    workload = Workload(seed=rng.randrange(1000))
    at_once, stepwise = ComputeInstance(workers=workers), ComputeInstance(workers=workers)
    pushed = []
    for instance in (at_once, stepwise):
        for name in RECOMPUTED:
            plan, _ = VIEWS[name]
            instance.create_dataflow(index_dataflow(name, plan, {"t": T}, 0))
    for time in range(times):
        changes = workload.changes("t")
        if inserts_only:
            changes = [(row, diff) for row, diff in changes if diff > 0]
        updates = [(row, time, diff) for row, diff in changes]
        pushed += updates
        stepwise.push("t", persist_updates(T, updates), time + 1)
        stepwise.step()
    calls = count_evaluations(monkeypatch)
    at_once.push("t", persist_updates(T, pushed), times)
    assert at_once.step()
    for time in range(times):
        for name in RECOMPUTED:
            expected = view_contents(stepwise, name, time)
            assert view_contents(at_once, name, time) == expected, (name, time)
    return calls


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("inserts_only", [False, True])
def test_a_catch_up_of_many_times_aggregates_once_not_once_per_time(
    workers: int, inserts_only: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """min/max, count(DISTINCT), string_agg and top-k (re-evaluated, not accumulated) over
    40 times in one step answer every time as a step per time does, with one evaluation
    per worker and view (two with the snapshot's), not one per time: a replica that
    catches up after a restart pays a fixed number of dataframe operations, not one
    round per time."""
    calls = _catch_up(workers, inserts_only, 40, monkeypatch)
    assert sum(calls.values()) <= 2 * workers * len(RECOMPUTED), calls


def test_a_catch_up_past_the_expansion_limit_takes_its_times_in_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows times times over ``EXPANSION_LIMIT``: the times are split in runs, each stored
    before the next looks its keys up (or one at a time, for the keyless groups that hold
    every row), and every time still answers as stepwise."""
    monkeypatch.setattr(operators, "EXPANSION_LIMIT", 60)
    calls = _catch_up(1, False, 40, monkeypatch)
    assert len(calls) == len(RECOMPUTED)
    assert all(n > 2 for n in calls.values()), calls  # every view's times were split


def test_the_expansion_counts_each_keys_rows_times_its_times() -> None:
    """What decides the split: a keyless group's rows too (its key columns are none)."""
    delta = pl.DataFrame(
        {"k0": ["a", "a", "b"], "a0": [1, 2, 3], "time": [1, 2, 2], "diff": [1, 1, 1]},
        schema_overrides={"time": pl.UInt64},
    )
    prior = pl.DataFrame({"k0": ["a"] * 10 + [None] * 5, "a0": [5] * 15, "diff": [1] * 15})
    keyed = delta.select("k0", pl.col("time").alias("_at")).unique()
    # a: (2 updates + 10 rows) x 2 times; b: 1 update x 1 time; NULL: not touched.
    assert operators._expansion(prior, delta, keyed, ["k0"]) == 12 * 2 + 1
    keyless = delta.select(pl.col("time").alias("_at")).unique()
    assert operators._expansion(prior, delta, keyless, []) == (3 + 15) * 2
    assert operators._expansion(None, delta, keyless, []) == 3 * 2
