"""The row path of small deltas computes exactly what the columnar path computes.

A reduce's small delta (at most ``SMALL_DELTA`` rows) is combined, looked up and
accumulated in Python, and small arrangement merges consolidate in Python
(``consolidate_rows``). Each must give the columnar path's rows: the same exact
numerics (avg rounds half to even at numeric's scale), integers and NULLs, on one
worker and on several. Floats agree to 12 significant digits: a float sum depends
on the order it adds in (polars adds a group's values in its own order, PostgreSQL
in the order it reads them), on either path.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import sys
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import polars as pl
import pytest

from loupe.common.errors import LoupeError
from loupe.dataflow import ComputeInstance, arrangement, batches, expr, operators, types
from loupe.dataflow import rows as rows_path
from loupe.dataflow.batches import DIFF, HASH, TIME, consolidate, consolidate_rows
from loupe.dataflow.expr import NUMERIC, apply_mfp
from loupe.dataflow.testing import index_dataflow, persist_updates
from loupe.dataflow.types import empty_frame, polars_dtype
from loupe.plan import lir, mir
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal

T = (("k", "text"), ("n", "numeric"), ("f", "float8"), ("i", "int8"), ("j", "int4"))
TYPES = tuple(t for _, t in T)
UNITS = [Decimal(u).scaleb(-16) for u in (1, 2, 3, 5, -1, -4)]


def reduce_of(group: tuple[int, ...], types: tuple[str, ...]) -> lir.Reduce:
    aggregates = (
        mir.Aggregate("count", None),
        mir.Aggregate("count", Column(2)),
        mir.Aggregate("sum", Column(1)),
        mir.Aggregate("avg", Column(1)),
        mir.Aggregate("sum", Column(2)),
        mir.Aggregate("avg", Column(2)),
        mir.Aggregate("sum", Column(4)),
        mir.Aggregate("sum", Column(3)),
        mir.Aggregate("avg", Column(4)),
    )
    return lir.Reduce(
        1,
        lir.Get(0, "t", types=TYPES),
        tuple(Column(c) for c in group),
        aggregates,
        lir.ReduceKind.ACCUMULABLE,
        types=types,
    )


AGGREGATE_TYPES = (
    "int8",
    "int8",
    "numeric",
    "numeric",
    "float8",
    "float8",
    "int8",
    "numeric",
    "numeric",
)
U = (("k", "text"), ("j", "int8"), ("w", "float8"))
V = (("i", "int8"), ("s", "text"))
JOIN_TYPES = TYPES + tuple(t for _, t in U) + tuple(t for _, t in V)


def join_t_u_v() -> lir.Join:
    """t.k = u.k, t.j = u.j (int4 = int8), t.i = v.i = u.j (a check once all are joined)."""
    inputs = tuple(
        lir.ArrangeBy(node, lir.Get(node + 10, name, types=types), ((Column(0),),), types=types)
        for node, (name, types) in enumerate(
            [("t", TYPES), ("u", tuple(t for _, t in U)), ("v", tuple(t for _, t in V))], start=2
        )
    )
    equivalences = (
        (Column(0), Column(5)),
        (Column(4), Column(6)),
        (Column(3), Column(8), Column(6)),
    )
    return lir.Join(5, inputs, equivalences, lir.JoinKind.LINEAR, types=JOIN_TYPES)


def arithmetic() -> lir.Reduce:
    """Keys and arguments that are expressions: sum(j * (1 - n)), avg(i + j), sum(j * j)
    grouped by j + 1 (the row path evaluates them in Python)."""
    one = Literal(1, "int4")
    return lir.Reduce(
        1,
        lir.Get(0, "t", types=TYPES),
        (Call("add", (Column(4), one)),),
        (
            mir.Aggregate("sum", Call("mul", (Column(4), Call("sub", (one, Column(1)))))),
            mir.Aggregate("avg", Call("add", (Column(3), Column(4)))),
            mir.Aggregate("sum", Call("mul", (Column(4), Column(4)))),
        ),
        lir.ReduceKind.ACCUMULABLE,
        types=("int4", "numeric", "numeric", "int8"),
    )


VIEWS = {
    "arithmetic": arithmetic(),
    "by_key": reduce_of((0,), ("text", *AGGREGATE_TYPES)),
    "keyless": reduce_of((), AGGREGATE_TYPES),
    "join": join_t_u_v(),
}
SOURCES: dict[str, Sequence[tuple[str, str]]] = {"t": T, "u": U, "v": V}
# Big enough that an avg of a few takes the row path's fallback to polars (10^28 units).
BIG = Decimal(4 * 10**27 + 3).scaleb(-16)


def row(rng: random.Random, table: str = "t") -> tuple[object, ...]:
    if table == "u":
        return (rng.choice(["a", "b", None]), rng.choice([1, 2, None]), rng.choice([0.5, None]))
    if table == "v":
        return (rng.choice([1, 2, None]), rng.choice(["x", "y"]))
    return (
        rng.choice(["a", "b", "c", None]),
        rng.choice([*UNITS, Decimal("1.5"), BIG, None]),
        rng.choice([0.1, 0.2, 1e16, -3.5, None]),
        rng.choice([1, 2, 2**62, -7, None]),
        rng.choice([1, 2, 3, None]),
    )


def calls_of(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple[Any, ...]]:
    """The arguments of every call of ``owner.name`` from now on (patched to record them and
    still run)."""
    calls: list[tuple[Any, ...]] = []
    original = getattr(owner, name)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls


def run(workers: int, seed: int, small: int, monkeypatch: pytest.MonkeyPatch) -> list[Counter]:
    """Every view's rows (exactly) after each of 30 steps of random small changes; with
    ``small`` 0, by the columnar path only (no operator, MFP or index read by rows)."""
    monkeypatch.setattr(operators, "SMALL_DELTA", small)
    if not small:
        monkeypatch.setattr(expr, "ROW_MFP_ROWS", 0)
        monkeypatch.setattr(batches, "READ_ROWS", 0)
    rng = random.Random(seed)
    instance = ComputeInstance(workers=workers)
    for name, plan in VIEWS.items():
        instance.create_dataflow(index_dataflow(name, plan, SOURCES, 0))
    current: dict[str, list[tuple[object, ...]]] = {name: [] for name in SOURCES}
    seen = []
    for time in range(30):
        for table, columns in SOURCES.items():
            changes = [(row(rng, table), time, 1) for _ in range(rng.randint(0, 4))]
            for _ in range(rng.randint(0, 2)):
                if current[table]:
                    rows = current[table]
                    changes.append((rows.pop(rng.randrange(len(rows))), time, -1))
            current[table] += [r for r, _, d in changes if d > 0]
            instance.push(table, persist_updates(columns, changes), time + 1)
        assert instance.step()
        for name in VIEWS:
            seen.append(Counter(map(floats_rounded, instance.peek(f"{name}_index", time).rows())))
    return seen


def floats_rounded(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in row)


@pytest.mark.parametrize("workers", [1, 3])
def test_the_row_path_gives_the_columnar_paths_rows_exactly(workers, monkeypatch):
    columnar = run(workers, seed=workers, small=0, monkeypatch=monkeypatch)
    rows = run(workers, seed=workers, small=64, monkeypatch=monkeypatch)
    assert rows == columnar
    # The workload reaches the cases that differ most easily: NULL keys, joined rows.
    assert any(r[0] is None for seen in rows for r in seen)
    assert sum(len(seen) for seen in rows[3::4]) > 30


def test_a_small_delta_skips_the_columnar_accumulator(monkeypatch):
    """After hydration a one-row change never calls ``Accumulator.step`` (the columnar path);
    a change of more than ``SMALL_DELTA`` rows does."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("v", VIEWS["by_key"], {"t": T}, 0))
    snapshot = [(("a", Decimal(1), 1.0, 1, 1), 0, 1)] * 10
    instance.push("t", persist_updates(T, snapshot), 1)
    instance.step()
    calls = calls_of(monkeypatch, operators.Accumulator, "step")
    instance.push("t", persist_updates(T, [(("b", UNITS[0], 0.5, 2, 3), 1, 1)]), 2)
    instance.step()
    assert calls == []
    assert (
        Counter(instance.peek("v_index", 1).rows())[
            ("b", 1, 1, UNITS[0], UNITS[0], 0.5, 0.5, 3, Decimal(2), Decimal(3))
        ]
        == 1
    )
    many = [(("c", Decimal(1), 1.0, 1, 1), 2, 1)] * (operators.SMALL_DELTA + 1)
    instance.push("t", persist_updates(T, many), 3)
    instance.step()
    assert calls


def test_an_exact_avg_rounds_as_polars_divides_up_to_its_limit():
    """``_exact_value`` against polars' decimal division (what ``_values`` runs): near
    ties of every size up to the row path's limit, and past it the row path declines."""
    rng = random.Random(7)
    pairs = []
    for digits in range(1, 29):
        for _ in range(40):
            count = rng.choice([2, 3, 4, 7, 16, 1000, rng.randrange(1, 10**6)])
            base = rng.randrange(10 ** (digits - 1), 10**digits) // count * count
            total = base + rng.choice([count // 2, count // 2 + 1, count // 2 - 1, 1, count - 1])
            total *= rng.choice([1, -1])
            if abs(total) < operators._EXACT_DIVISION:
                pairs.append((total, count))
    frame = pl.DataFrame(
        {"t": [Decimal(t).scaleb(-16) for t, _ in pairs], "c": [c for _, c in pairs]},
        schema={"t": NUMERIC, "c": pl.Int64},
    )
    divided = frame.select(pl.col("t") / pl.col("c").clip(1).cast(NUMERIC))["t"].to_list()
    assert [operators._exact_value(0, 1, True, pair) for pair in pairs] == divided
    totals = [3, 5, -3, -5, 7, 1, 10**28 + 1, -(10**37) - 3]
    counts = [2, 2, 2, 2, 3, 6, 2, 4]
    frame = pl.DataFrame(
        {"t": [Decimal(t).scaleb(-16) for t in totals], "c": counts},
        schema={"t": NUMERIC, "c": pl.Int64},
    )
    divided = frame.select(pl.col("t") / pl.col("c").clip(1).cast(NUMERIC))["t"].to_list()
    mine = [
        operators._exact_value(0, 1, True, (t, c)) for t, c in zip(totals[:6], counts, strict=False)
    ]
    assert mine == divided[:6]
    # From 10^28 units polars' quotient loses digits: the row path leaves it to polars.
    for total, count in zip(totals[6:], counts[6:], strict=True):
        with pytest.raises(operators._Inexact):
            operators._exact_value(0, 1, True, (total, count))
    exact = Decimal("1000000000000000000000.0000000000000001")
    assert operators._exact_value(0, 1, False, (10**37 + 1, 1)) == exact
    assert operators._exact_value(0, 1, True, (5, 0)) is None


def test_consolidate_rows_equals_consolidate_and_declines_what_a_dict_would_group_apart():
    frame = pl.DataFrame(
        {"k": ["a", "a", "b", None, None], "x": [1.5, 1.5, 2.0, 0.0, 0.0]}
        | {TIME: [1, 3, 2, 5, 5], DIFF: [1, -1, 2, 1, -1]},
        schema={"k": pl.String, "x": pl.Float64, TIME: pl.UInt64, DIFF: pl.Int64},
    )
    small = consolidate_rows(frame)
    assert small is not None
    assert sorted(small.rows()) == sorted(consolidate(frame).rows())
    # Times before 4 read as 4: the "a" updates cancel.
    advanced = consolidate_rows(frame, since=4)
    assert advanced is not None
    assert sorted(advanced.rows(), key=repr) == [("b", 2.0, 4, 2)]
    for odd in (math.nan, -0.0):
        tricky = frame.with_columns(pl.lit(odd, pl.Float64).alias("x"))
        assert consolidate_rows(tricky) is None


def _hydrated_join() -> ComputeInstance:
    """An instance with the join view's index hydrated on one row of each input at time 0."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("j", VIEWS["join"], SOURCES, 0))
    for table, columns, snapshot in (
        ("t", T, [("a", Decimal(1), 1.0, 1, 1)]),
        ("u", U, [("a", 1, 0.5)]),
        ("v", V, [(1, "x")]),
    ):
        instance.push(table, persist_updates(columns, [(r, 0, 1) for r in snapshot]), 1)
    instance.step()
    return instance


def test_a_small_delta_joins_without_the_columnar_match(monkeypatch):
    """After hydration a one-row change joins by the row path (no ``Join._match``, and no
    ``Join._filter``: the row path checked every equality); a change of more than
    ``SMALL_DELTA`` rows joins in polars."""
    instance = _hydrated_join()
    calls = calls_of(monkeypatch, operators.Join, "_match")
    filters = calls_of(monkeypatch, operators.Join, "_filter")
    instance.push("t", persist_updates(T, [(("a", Decimal(2), 2.0, 1, 1), 1, 1)]), 2)
    # Joins "a" but fails the check t.i = v.i = u.j once all are joined: not in the view.
    instance.push("t", persist_updates(T, [(("a", Decimal(5), 2.0, 2, 1), 1, 1)]), 2)
    instance.push("u", persist_updates(U, []), 2)
    instance.push("v", persist_updates(V, []), 2)
    instance.step()
    assert calls == []
    assert filters == []
    rows = Counter(instance.peek("j_index", 1).rows())
    assert rows[("a", Decimal(2), 2.0, 1, 1, "a", 1, 0.5, 1, "x")] == 1
    assert sum(rows.values()) == 2  # the snapshot's row and the first new one
    many = [(("a", Decimal(3), 3.0, 1, 1), 2, 1)] * (operators.SMALL_DELTA + 1)
    instance.push("t", persist_updates(T, many), 3)
    instance.push("u", persist_updates(U, []), 3)
    instance.push("v", persist_updates(V, []), 3)
    instance.step()
    assert calls


def test_a_small_delta_is_evaluated_without_polars(monkeypatch):
    """A one-row change of a reduce whose keys and arguments Python evaluates runs no
    polars ``evaluate``; a row whose product overflows numeric declines the row path and
    becomes polars' error row (22003)."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("a", VIEWS["arithmetic"], {"t": T}, 0))
    instance.push("t", persist_updates(T, [(("a", Decimal(2), 1.0, 1, 1), 0, 1)]), 1)
    instance.step()
    calls = calls_of(monkeypatch, operators, "evaluate")
    instance.push("t", persist_updates(T, [(("b", Decimal(3), 0.5, 2, 1), 1, 1)]), 2)
    instance.step()
    assert calls == []
    # 1 * (1 - 2) + 1 * (1 - 3) = -3; avg(1 + 1, 2 + 1) = 2.5; 1 * 1 + 1 * 1; key 1 + 1.
    assert instance.peek("a_index", 1).rows() == [(2, Decimal(-3), Decimal("2.5"), 2)]
    huge = 2**31 - 1  # j * j overflows int4: 22003 in PostgreSQL
    instance.push("t", persist_updates(T, [(("c", Decimal(1), 0.5, 2, huge), 2, 1)]), 3)
    instance.step()
    assert calls
    with pytest.raises(LoupeError) as raised:
        instance.peek("a_index", 2)
    assert raised.value.code == "22003"


@pytest.mark.parametrize(
    "scalar",
    [
        Call("mul", (Column(0), Column(1))),
        Call("add", (Column(0), Column(1))),
        Call("sub", (Column(0), Column(1))),
        Call("mul", (Column(0), Call("sub", (Literal(1, "int4"), Column(1))))),
        Call("mul", (Column(2), Column(3))),
        Call("add", (Column(2), Column(0))),
        Call("mod", (Column(2), Column(3))),
        Call("mod", (Column(2), Literal(10, "int4"))),
    ],
    ids=["mul", "add", "sub", "mul_sub", "int_mul", "int_add_numeric", "mod", "mod_10"],
)
def test_compile_row_evaluates_as_polars_does(scalar):
    """``rows.compile_row`` against the compiled polars expression on random numerics of
    every scale (products rounding half to even), NULLs and overflows: the same value,
    or the row path declines where polars makes an error row."""
    rng = random.Random(repr(scalar))
    types = ("numeric", "numeric", "int4", "int4")

    def number() -> Decimal | None:
        if rng.random() < 0.1:
            return None
        digits = rng.choice([1, 4, 9, 12, 20, 24])
        return Decimal(rng.randrange(-(10**digits), 10**digits)).scaleb(-rng.randrange(0, 17))

    def integer() -> int | None:
        if rng.random() < 0.1:
            return None
        return rng.choice([rng.randrange(-100, 100), 2**31 - 1, -(2**31), 0])

    data = [(number(), number(), integer(), integer()) for _ in range(2000)]
    frame = pl.DataFrame(
        data, schema={"c0": NUMERIC, "c1": NUMERIC, "c2": pl.Int32, "c3": pl.Int32}, orient="row"
    ).with_columns(pl.lit(0, pl.UInt64).alias(TIME), pl.lit(1, pl.Int64).alias(DIFF))
    valued, errors = operators.evaluate(frame.with_row_index("_row"), [scalar], types, ["v"])
    by_row = dict(zip(valued["_row"].to_list(), valued["v"].to_list(), strict=True))
    assert errors.height == len(data) - valued.height
    compiled = rows_path.compile_row(scalar, types)
    assert compiled is not None
    agreed = 0
    for position, row in enumerate(data):
        if position not in by_row:  # polars' error row: the row path must decline it
            with pytest.raises(rows_path.Declined):
                compiled(row)
            continue
        try:
            value = compiled(row)
        except rows_path.Declined:  # past the row path's exact range: polars decides
            continue
        assert value == by_row[position], (row, value, by_row[position])
        agreed += 1
    assert agreed > len(data) // 4  # not vacuous: most rows are evaluated both ways


@pytest.mark.parametrize("direct", [True, False], ids=["polars-row-reader", "public"])
def test_frame_of_rows_builds_what_the_public_constructor_builds(direct, monkeypatch):
    if not direct:
        monkeypatch.setattr(batches, "_FROM_ROWS", None)
    schema = {
        "a": NUMERIC,
        "b": pl.Date(),
        "c": pl.Datetime("us"),
        "d": pl.String(),
        "e": pl.Int128(),
        "f": pl.UInt64(),
        "g": pl.Boolean(),
        "h": pl.Float64(),
        "i": pl.Int32(),
        "j": pl.Datetime("us", "UTC"),
    }
    rows = [
        (
            Decimal("1.5"),
            dt.date(2020, 1, 2),
            dt.datetime(2020, 1, 2, 3, 4, 5, 6),
            "x",
            2**100,
            2**64 - 1,
            True,
            1.25,
            7,
            dt.datetime(2020, 1, 2, tzinfo=dt.UTC),
        ),
        (None,) * 10,
        (
            Decimal("-12345678901234567890.1234567890123456"),
            dt.date(1, 1, 1),
            dt.datetime(9999, 12, 31),
            "",
            -(2**100),
            0,
            False,
            -0.0,
            -7,
            None,
        ),
    ]
    built = batches.frame_of_rows(rows, schema)
    public = pl.DataFrame(rows, schema=schema, orient="row")
    assert built.schema == public.schema
    assert built.rows() == public.rows() == rows


def _mfp_case() -> tuple[pl.DataFrame, list[tuple[Any, ...]], MapFilterProject, tuple[str, ...]]:
    """3,000 random rows with NULLs (as a frame and as rows) and an MFP over them:
    comparisons of every compared type, and/or/not, a map feeding a predicate."""
    rng = random.Random(11)
    types = ("int4", "text", "date", "numeric", "int8", "bool")
    day = dt.date(1995, 3, 15)
    one = Literal(1, "int4")
    compare = [
        Call("lt", (Column(2), Literal(day, "date"))),
        Call("eq", (Column(1), Literal("b", "text"))),
        Call("gte", (Column(0), Column(4))),
        Call("neq", (Column(3), Column(0))),
        Call("lte", (Column(6), Literal(Decimal("0.5"), "numeric"))),
        Call("eq", (Column(5), Literal(True, "bool"))),
    ]
    predicates = (
        Call("or", (compare[0], Call("not", (compare[1],)))),
        Call("and", (compare[2], compare[3])),
        Call("or", (compare[4], compare[5])),
    )
    mfp = MapFilterProject(
        6, (Call("mul", (Column(3), Call("sub", (one, Column(3))))),), predicates, (6, 1, 0, 2)
    )

    def maybe(value: object) -> object:
        return None if rng.random() < 0.15 else value

    rows = [
        (
            maybe(rng.randrange(-3, 4)),
            maybe(rng.choice(["a", "b", "c", "B"])),
            maybe(day + dt.timedelta(days=rng.randrange(-2, 3))),
            maybe(Decimal(rng.randrange(-20, 20)).scaleb(-1)),
            maybe(rng.randrange(-3, 4)),
            maybe(rng.random() < 0.5),
            0,
            1,
        )
        for _ in range(3000)
    ]
    schema = dict(empty_frame(types).schema)
    return pl.DataFrame(rows, schema=schema, orient="row"), rows, mfp, types


def test_a_row_mfp_maps_filters_and_projects_as_polars_does():
    """``rows.compile_mfp`` against ``expr.apply_mfp`` (columnar, on 3,000 rows) on random
    rows with NULLs: the same rows pass, mapped and projected alike."""
    frame, rows, mfp, types = _mfp_case()
    compiled = rows_path.compile_mfp(mfp.expressions, mfp.predicates, mfp.projection, types)
    assert compiled is not None
    ok, errors = apply_mfp(frame, mfp, types)
    assert errors.height == 0
    assert compiled.apply(rows) == ok.rows()
    assert 0 < ok.height < len(rows)


def test_apply_mfp_takes_a_few_rows_the_row_way_and_gives_the_columnar_rows(monkeypatch):
    """``apply_mfp`` of at most ``ROW_MFP_ROWS`` rows (a peek's filter on a small read)
    evaluates them in Python, without a polars query, and gives the columnar rows and
    schema; a row whose map fails is left to the columnar way, which reports it."""
    frame, _, mfp, types = _mfp_case()
    for start in range(0, 1000, expr.ROW_MFP_ROWS):
        few = frame.slice(start, expr.ROW_MFP_ROWS)
        monkeypatch.setattr(expr, "ROW_MFP_ROWS", 0)
        columnar, _ = apply_mfp(few, mfp, types)
        monkeypatch.undo()
        queries = calls_of(monkeypatch, pl.LazyFrame, "collect")
        by_rows, errors = apply_mfp(few, mfp, types)
        assert not queries
        monkeypatch.undo()
        assert by_rows.schema == columnar.schema
        assert by_rows.rows() == columnar.rows()
        assert errors.height == 0
    division = MapFilterProject(2, (Call("div", (Column(0), Column(1))),), (), (2,))
    pairs = pl.DataFrame({"c0": [4, 5], "c1": [2, 0], TIME: [1, 1], DIFF: [1, 1]})
    pairs = pairs.cast({"c0": pl.Int32, "c1": pl.Int32, TIME: pl.UInt64})
    ok, errors = apply_mfp(pairs, division, ("int4", "int4"))
    assert ok.rows() == [(2, 1, 1)]
    assert errors.height == 1
    assert errors["error"][0].startswith("22012")


def test_keys_that_are_columns_are_picked_without_a_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """A join keyed on plain columns (the usual case) keys a delta by a column pick: the
    same frame the compiled query makes, casts across types included, and no query."""
    frame = pl.DataFrame(
        {
            "c0": pl.Series([1, None, 3], dtype=pl.Int32),
            "c1": pl.Series(["a", "b", None]),
            "c2": pl.Series(
                [
                    {"months": 1, "days": 0, "micros": 0},
                    None,
                    {"months": 0, "days": 0, "micros": 3_600_000_000},
                ],
                dtype=polars_dtype("interval"),
            ),
            TIME: pl.Series([1, 1, 2], dtype=pl.UInt64),
            DIFF: pl.Series([1, -1, 1], dtype=pl.Int64),
        }
    )
    types = ("int4", "text", "interval")
    cases = [
        ([Column(0), Column(1)], None, False),
        ([Column(0)], [pl.Int64()], True),  # compared with an int8 key of another input
        ([Column(1), Column(2)], None, False),
    ]
    collects = 0
    collect = pl.LazyFrame.collect

    def counted(self: pl.LazyFrame, *args: Any, **kwargs: Any) -> pl.DataFrame:
        nonlocal collects
        collects += 1
        return collect(self, *args, **kwargs)

    for exprs, dtypes, match in cases:
        names = [f"k{i}" for i in range(len(exprs))]
        monkeypatch.setattr(pl.LazyFrame, "collect", counted)
        picked, errors = operators.evaluate(frame, exprs, types, names, dtypes, match=match)
        monkeypatch.undo()
        assert collects == 0
        assert errors.height == 0
        with monkeypatch.context() as patched:
            patched.setattr(operators, "_picked_columns", lambda *_: None)
            queried, _ = operators.evaluate(frame, exprs, types, names, dtypes, match=match)
        assert picked.schema == queried.schema
        assert picked.rows() == queried.rows()
    # An interval compared by its span ('1 mon' = '30 days') still goes through the query.
    monkeypatch.setattr(pl.LazyFrame, "collect", counted)
    operators.evaluate(frame, [Column(2)], types, ["k0"], None, match=True)
    assert collects == 1


def test_a_key_changed_lately_is_not_looked_up_and_its_state_waits_as_rows(monkeypatch):
    """A reduce's row path keeps the state rows of the keys it changed (``known``) and hashes
    them from memory (``KeyHashes``): a second change of the same key looks nothing up and
    runs no polars query before the output; the new state rows wait in the spine as rows
    (``pending``), which later lookups and the columnar path still see."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("v", VIEWS["by_key"], {"t": T}, 0))
    # More rows than the row path takes: the snapshot's state is a batch, and not known.
    snapshot = [(("a", Decimal(1), 1.0, 1, 1), 0, 1)] * operators.SMALL_DELTA
    snapshot.append((("b", Decimal(2), 2.0, 2, 2), 0, 1))
    instance.push("t", persist_updates(T, snapshot), 1)
    instance.step()
    lookups = calls_of(monkeypatch, arrangement.Spine, "lookup")
    one = [(("b", UNITS[0], 0.5, 2, 3), 1, 1)]
    instance.push("t", persist_updates(T, one), 2)
    instance.step()
    assert len(lookups) == 1  # the first change of "b" looks its state up
    (dataflow,) = instance.dataflows.values()
    (reduce,) = [o for o in dataflow.operators if isinstance(o, operators.Reduce)]
    spine = reduce.state[0].spine
    assert len(spine.pending) == 2
    assert spine.records == 2 + 2
    queries = calls_of(monkeypatch, pl.DataFrame, "hash_rows")
    instance.push("t", persist_updates(T, [(("b", UNITS[1], None, 5, None), 2, 1)]), 3)
    instance.step()
    assert len(lookups) == 1
    assert queries == []
    assert len(spine.pending) == 4
    expected = ("b", 3, 2, Decimal(2) + UNITS[0] + UNITS[1])
    assert Counter(r[:4] for r in instance.peek("v_index", 2).rows())[expected] == 1
    monkeypatch.undo()
    # The columnar path (a delta too big for the row path) reads the pending rows too.
    many = [(("b", Decimal(1), 1.0, 1, 1), 3, 1)] * (operators.SMALL_DELTA + 1)
    instance.push("t", persist_updates(T, many), 4)
    instance.step()
    count = Counter(r[:2] for r in instance.peek("v_index", 3).rows())
    assert count[("b", 3 + operators.SMALL_DELTA + 1)] == 1
    assert reduce.state[0].known == {}


def test_spine_pending_rows_are_found_counted_and_flushed_as_one_batch():
    spine = arrangement.Spine(["k"])
    schema = {HASH: pl.UInt64(), "k": pl.Int64(), "s": pl.Int64(), DIFF: pl.Int64()}
    assert not spine.holds
    spine.append_rows([(7, 1, 10, 1), (9, 2, 20, 1)], schema)
    assert spine.holds
    assert spine.batches == []
    assert spine.batch_count == 1
    assert spine.records == 2
    assert spine.size > 0
    found = spine.lookup([9])
    assert found is not None
    assert found.rows() == [(9, 2, 20, 1)]
    assert spine.lookup([8]) is None
    # (7, 1, 10) retracted: it cancels with its insertion when the rows make a batch.
    spine.append_rows([(7, 1, 10, -1)], schema)
    for n in range(arrangement.PENDING_ROWS - 3):
        spine.append_rows([(7, 1, 100 + n, 1)], schema)
    # The 256th pending row made them a batch, without the two that cancelled.
    assert spine.pending == []
    assert len(spine.batches) == 1
    assert spine.records == arrangement.PENDING_ROWS - 2
    spine.append_rows([(7, 1, 5, 1), (9, 2, 6, 1)], schema)
    assert spine.records == arrangement.PENDING_ROWS
    found = spine.lookup(pl.Series([7, 9], dtype=pl.UInt64))
    assert found is not None
    assert found.height == arrangement.PENDING_ROWS
    assert (7, 1, 10, 1) not in found.rows()


def test_a_trace_merges_small_steps_batches_at_once_and_reads_the_same(monkeypatch):
    empty = pl.DataFrame(schema={"c0": pl.Int64, TIME: pl.UInt64, DIFF: pl.Int64})
    trace = arrangement.Trace(empty, 0, ["c0"])
    merges = calls_of(monkeypatch, trace, "_merge")
    expected: Counter = Counter()
    for time in range(1, 3 * (arrangement.TAIL_BATCHES + 1) + 1):
        rows = [(time % 3, time, 1), ((time - 1) % 3, time, -1)] if time > 1 else [(1, 1, 1)]
        trace.insert(pl.DataFrame(rows, schema=empty.schema, orient="row"))
        for value, _, diff in rows:
            expected[value] += diff
        at = Counter()
        for value, _, diff in trace.at(time).rows():
            at[value] += diff
        assert +at == +expected
        found = trace.lookup_at(pl.DataFrame({"c0": [time % 3]}), time)
        assert sum(d for v, _, d in found.rows() if v == time % 3) == expected[time % 3]
    # One merge per TAIL_BATCHES + 1 small batches, not one per batch.
    assert len(merges) <= 2 * 3
    assert len(trace.batches) <= arrangement.TAIL_BATCHES + 1


def test_a_trace_keeps_its_last_full_read_for_the_next_of_the_same_batches(monkeypatch):
    """``at`` of unchanged batches at or after their times relabels the last read; a new
    batch, a read before the batches' latest time, or a merge reads the batches again."""
    empty = pl.DataFrame(schema={"c0": pl.Int64, TIME: pl.UInt64, DIFF: pl.Int64})
    trace = arrangement.Trace(empty, 0, ["c0"])
    reads = calls_of(monkeypatch, trace, "_as_of")

    def at(time: int) -> dict[int, int]:
        """The trace's rows at ``time`` with their counts (every update labelled ``time``)."""
        counts: Counter = Counter()
        for value, label, diff in trace.at(time).rows():
            assert label == time
            counts[value] += diff
        return dict(+counts)

    trace.insert(pl.DataFrame([(1, 1, 1), (2, 1, 1), (2, 1, 1)], schema=empty.schema, orient="row"))
    trace.insert(pl.DataFrame([(2, 3, -1), (3, 3, 1)], schema=empty.schema, orient="row"))
    assert at(5) == {1: 1, 2: 1, 3: 1}
    assert at(9) == {1: 1, 2: 1, 3: 1}
    assert len(reads) == 1
    # Before the latest batch's time: read anew, and the later read is not taken from it.
    assert at(2) == {1: 1, 2: 2}
    assert at(3) == {1: 1, 2: 1, 3: 1}
    assert len(reads) == 3
    trace.insert(pl.DataFrame([(1, 7, -1)], schema=empty.schema, orient="row"))
    assert at(9) == {2: 1, 3: 1}
    assert len(reads) == 4
    trace.compact(8)
    trace.updates()  # merges the batches into one: new frames
    assert at(9) == {2: 1, 3: 1}
    assert len(reads) == 5
    # A peek's read is the kept one itself: no relabelling of its times either.
    kept = trace.contents_at(12)
    assert trace.contents_at(13) is kept
    assert len(reads) == 5
    # A trace past SNAPSHOT_ROWS keeps nothing.
    monkeypatch.setattr(arrangement, "SNAPSHOT_ROWS", 1)
    trace.insert(pl.DataFrame([(4, 9, 1)], schema=empty.schema, orient="row"))
    assert at(10) == at(11) == {2: 1, 3: 1, 4: 1}
    assert len(reads) == 7


def test_a_log_counts_its_tables_bytes_as_they_come_and_go(monkeypatch):
    """A log of a table pushed per one-row write keeps its bytes counted as tables are
    appended and consolidated: the memory budget reads them every step, without asking
    every table (it asked thousands of them at every step)."""
    columns = (("k", "int4"), ("v", "text"))
    log = arrangement.Log()
    pushed = [((i % 7, f"v{i % 5}"), i, 1 if i % 3 else -1) for i in range(1000)]
    for row, time, diff in pushed:
        log.append(persist_updates(columns, [(row, time, diff)]))
    assert log.rows == len(log.tables) == 1000
    assert log.nbytes == sum(t.get_total_buffer_size() for t in log.tables)

    class Unread(list):
        def __iter__(self) -> Any:
            raise AssertionError("the memory budget read the log's tables")

    class Source:
        pass

    tables, log.tables = log.tables, Unread(log.tables)
    source = Source()
    source.log = log  # type: ignore[attr-defined]
    instance = ComputeInstance()
    instance.sources["t"] = source  # type: ignore[assignment]
    assert instance._held_bytes() == log.nbytes
    log.tables = tables
    expected: Counter = Counter()
    for row, _time, diff in pushed:
        expected[row] += diff
    found: Counter = Counter()
    updates = log.updates()
    assert updates is not None
    assert log.nbytes == updates.get_total_buffer_size()
    for record in updates.to_pylist():
        found[(record["k"], record["v"])] += record[types.PERSIST_DIFF]
    assert {r: n for r, n in found.items() if n} == {r: n for r, n in expected.items() if n}


def test_a_big_batchs_lookup_bisects_a_view_of_its_hashes_and_finds_what_polars_finds():
    rng = random.Random(3)
    size = 2 * arrangement._VIEW_ROWS
    frame = pl.DataFrame({"k": [rng.randrange(size // 2) for _ in range(size)], DIFF: [1] * size})
    spine = arrangement.Spine(["k"])
    spine.insert(frame)
    stored, _order, view = arrangement.sorted_index(spine.batches[0][HASH])
    assert isinstance(view, memoryview)
    assert list(view) == stored.to_list()
    for keys in ([5], [1, 2, 3], list(range(40))):
        wanted = batches.key_hash(pl.DataFrame({"k": keys}), ["k"])
        found = spine.lookup(wanted)
        expected = frame.filter(pl.col("k").is_in(keys)).height
        assert (found.height if found is not None else 0) == expected
        if expected:
            assert set(found["k"].to_list()) <= set(keys)


def test_key_hashes_are_key_hash_and_remembered():
    schema = {"a": pl.Int32(), "b": pl.String()}
    keys = [(1, "x"), (2, None), (1, "x")]
    hashes = batches.KeyHashes(schema)
    frame = pl.DataFrame(keys, schema=schema, orient="row")
    assert hashes.of(keys) == batches.key_hash(frame, ["a", "b"]).to_list()
    assert set(hashes.known) == {(1, "x"), (2, None)}
    # No keys (a cross join's lookup): key_hash's 0, as the spine hashes its rows.
    assert batches.KeyHashes({}).of([(), (), ()]) == batches.key_hash(frame, []).to_list()


EVERY = (
    ("a", "int2"),
    ("b", "int4"),
    ("c", "int8"),
    ("d", "float8"),
    ("e", "bool"),
    ("f", "text"),
    ("g", "date"),
    ("h", "numeric"),
    ("i", "timestamp"),
    ("j", "interval"),
)


@pytest.mark.parametrize("kept", [(0, 1, 2, 3, 4, 5, 6, 7), (1, 7), (), (0, 8), (9,)])
def test_a_small_table_read_by_rows_is_the_columnar_read(kept):
    """A pushed table of a few rows is read by Python rows (``types.read_rows``) into exactly
    the batch ``from_persist`` converts, the unread columns NULL; a column of a type the
    rows do not build exactly (timestamp, interval) is read the columnar way."""
    rows = [
        (-3, 7, 2**40, -0.0, True, "é", dt.date(1992, 2, 29), UNITS[0], None, None),
        (None,) * 10,
        (2, None, -1, math.inf, False, "", dt.date(1, 1, 1), BIG, None, None),
    ]
    table = persist_updates(EVERY, [(r, 5, d) for r, d in zip(rows, [1, 1, -2], strict=True)])
    columnar = types.from_persist(table, EVERY).with_columns(
        pl.lit(None, polars_dtype(t)).alias(f"c{i}")
        for i, (_, t) in enumerate(EVERY)
        if i not in kept
    )
    how = types.row_read(table.schema, EVERY, kept)
    if any(EVERY[i][1] in ("timestamp", "interval") for i in kept):
        assert how is None
        return
    assert how is not None
    read = types.read_rows(table, how)
    assert read.schema == columnar.schema
    assert read.rows() == columnar.rows()
    if 3 in kept:  # -0.0 stays negative
        assert math.copysign(1.0, read.rows()[0][3]) < 0


@pytest.mark.parametrize("since", [None, 3])
def test_consolidate_rows_of_many_decimals_gathers_what_consolidate_keeps(since):
    """Past ``_DECIMAL_CELLS`` decimal values, ``consolidate_rows`` groups by the decimals'
    integers and gathers the rows it keeps: the same updates as ``consolidate``."""
    rng = random.Random(5)
    columns = {f"d{i}": NUMERIC for i in range(6)}
    rows = [
        (
            rng.choice(["a", None]),
            *(rng.choice([UNITS[0], BIG, None]) for _ in columns),
            rng.choice([0.5, 1.5]),
            rng.randrange(1, 6),
            rng.choice([1, -1, 2]),
        )
        for _ in range(100)
    ]
    schema = {"k": pl.String(), **columns, "f": pl.Float64(), TIME: pl.UInt64(), DIFF: pl.Int64()}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    assert 6 * frame.height > batches._DECIMAL_CELLS
    small = consolidate_rows(frame, since)
    assert small is not None
    expected = consolidate(frame if since is None else batches.advance(frame, since))
    assert small.schema == frame.schema
    assert Counter(small.rows()) == Counter(expected.rows())
    assert consolidate_rows(frame.with_columns(pl.lit(math.nan).alias("f")), since) is None


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Decimal(38, 16), pl.Float64])
def test_a_tail_in_which_nothing_can_cancel_is_not_consolidated(monkeypatch, dtype):
    """A tail of small steps' batches, every update at or after the since and no two of a
    row at one time, is merged without consolidating it; one whose updates cancel, one
    before the since, or a frame of floats (hashing and grouping may differ on -0.0) is
    consolidated, and reads the same."""
    empty = pl.DataFrame(schema={"c0": dtype, TIME: pl.UInt64, DIFF: pl.Int64})
    consolidations = calls_of(monkeypatch, arrangement, "consolidate_rows")

    def tail(rows_of: Any, since: int = 0) -> tuple[int, Counter]:
        trace = arrangement.Trace(empty, since, ["c0"])
        for time in range(1, arrangement.TAIL_BATCHES + 2):
            rows = rows_of(time)
            trace.insert(pl.DataFrame(rows, schema=empty.schema, orient="row"))
        counts: Counter = Counter()
        for value, _, diff in trace.at(100).rows():
            counts[value] += diff
        return len(trace.batches), +counts

    consolidations.clear()
    # Each step retracts the last step's row and inserts its own: at distinct times.
    batches, counts = tail(lambda t: [(t, t, 1), (t - 1, t, -1)] if t > 1 else [(1, 1, 1)])
    assert batches == 1  # merged
    assert counts == Counter({arrangement.TAIL_BATCHES + 1: 1})
    assert len(consolidations) == (1 if dtype == pl.Float64 else 0)
    # A row inserted and retracted at one time (in two batches) cancels: consolidated.
    consolidations.clear()
    batches, counts = tail(lambda t: [(7, 5, 1 if t % 2 else -1)])
    assert len(consolidations) == 1
    assert counts == Counter({7: 1})
    # Times before the since: advanced and consolidated.
    consolidations.clear()
    tail(lambda t: [(t, t, 1)], since=5)
    assert len(consolidations) == 1


def test_a_trace_stacks_merged_batches_of_times_apart_and_consolidates_once_compacted(monkeypatch):
    """A trace that only grows (its since not moving) merges batches that merges made, of
    times apart, by stacking them: only each tail of small batches is consolidated. Once
    compaction moves the since past their times, a merge consolidates what then cancels."""
    empty = pl.DataFrame(schema={"c0": pl.Int64, TIME: pl.UInt64, DIFF: pl.Int64})
    trace = arrangement.Trace(empty, 0, ["c0"])
    consolidations = calls_of(monkeypatch, arrangement, "consolidate_rows")
    steps = 200
    for time in range(1, steps + 1):
        rows = [(time % 3, time, 1), ((time - 1) % 3, time, -1)] if time > 1 else [(1, 1, 1)]
        trace.insert(pl.DataFrame(rows, schema=empty.schema, orient="row"))
    # Nothing but tails (under TAIL_ROWS rows, and the small batches after) was consolidated,
    # though the trace holds every step's rows (nor those: nothing in them cancels).
    consolidated = [frame.height for frame, *_ in consolidations]
    assert max(consolidated, default=0) < arrangement.TAIL_ROWS + 2 * (arrangement.TAIL_BATCHES + 1)
    assert trace.records == 2 * steps - 1
    trace.compact(steps)
    assert Counter(trace.updates().rows()) == Counter({(steps % 3, steps, 1): 1})
    assert trace.records == 1


def _counted(frame: pl.DataFrame, time: int) -> Counter:
    """A read's rows with their summed counts (NaN as a string, so it equals itself)."""
    counts: Counter = Counter()
    for *row, label, diff in frame.select([*frame.columns[:-2], TIME, DIFF]).rows():
        assert label == time
        counts[tuple("NaN" if v != v else v for v in row)] += diff
    return +counts


@pytest.mark.parametrize("seed", range(6))
def test_a_small_traces_read_is_made_of_rows_and_is_the_columnar_read(monkeypatch, seed):
    """A trace of few updates is read at a time in one pass over Python rows
    (``read_rows_at``), not by polars' concatenate, filter and consolidate: the same
    rows and counts, at every read time, whatever the column types. Floats a dict
    groups otherwise than polars (NaN, -0.0) are read the columnar way."""
    rng = random.Random(seed)
    schema = {
        "k": pl.String,
        "n": pl.Decimal(38, 2),
        "f": pl.Float64,
        "i": pl.Int32,
        TIME: pl.UInt64,
        DIFF: pl.Int64,
    }
    empty = pl.DataFrame(schema=schema)
    floats = [1.5, 2.0, 0.0] + ([math.nan, -0.0] if seed % 2 else [])
    trace = arrangement.Trace(empty, 0, ["k"])
    for time in range(1, 12):
        rows = [
            (
                rng.choice(["a", "b", None]),
                rng.choice([Decimal("1.25"), Decimal("-3.00"), None]),
                rng.choice(floats),
                rng.choice([1, 2, None]),
                time,
                rng.choice([1, -1, 2]),
            )
            for _ in range(rng.randint(1, 6))
        ]
        trace.insert(pl.DataFrame(rows, schema=schema, orient="row"))
    columnar = arrangement.Trace(empty, 0, ["k"])
    columnar.batches = list(trace.batches)
    for time in (3, 7, 11, 20):
        by_rows = batches.read_rows_at([b for b in trace.batches if b.height], time)
        monkeypatch.setattr(arrangement, "read_rows_at", lambda frames, time: None)
        expected = columnar._as_of(columnar.batches, time)
        monkeypatch.undo()
        if seed % 2 and any(v != v or str(v) == "-0.0" for b in trace.batches for v in b["f"]):
            assert by_rows is None  # NaN or -0.0 present: the columnar way decides
            continue
        assert by_rows is not None
        assert by_rows.schema == empty.schema
        assert _counted(by_rows, time) == _counted(expected, time)
        # The trace's own read takes the rows' way: polars' consolidation is not called.
        monkeypatch.setattr(arrangement, "cancel", _fail)
        trace._snapshot = None
        assert _counted(trace.at(time), time) == _counted(expected, time)
        monkeypatch.undo()
    # More than READ_ROWS updates, or too many decimals: the columnar way.
    wide = {name: dtype for name, dtype in schema.items() if name != "n"}
    plain = [(str(i), 1.0, i, 1, 1) for i in range(batches.READ_ROWS + 1)]
    assert batches.read_rows_at([pl.DataFrame(plain, schema=wide, orient="row")], 5) is None
    read = batches.read_rows_at([pl.DataFrame(plain[:-1], schema=wide, orient="row")], 5)
    assert read is not None
    assert read.height == batches.READ_ROWS
    decimals = [(None, Decimal(i), 1.0, i, 1, 1) for i in range(300)]
    assert batches.read_rows_at([pl.DataFrame(decimals, schema=schema, orient="row")], 5) is None


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the columnar path was taken")


def test_a_small_join_step_keys_its_delta_without_a_query(monkeypatch):
    """A one-row change through a join picks its columns, keys them and drops NULL keys
    without a polars query (``select``, ``with_columns``, ``drop_nulls`` cost about 50-170 us
    each on a few rows): the join's own code calls none of them, and the view is right,
    NULL keys included."""
    instance = _hydrated_join()
    queried: list[str] = []
    for name in ("select", "with_columns", "drop_nulls"):
        original = getattr(pl.DataFrame, name)

        def recorded(self: pl.DataFrame, *args: Any, _original=original, _name=name, **kw: Any):
            caller = sys._getframe(1).f_code
            if caller.co_filename == operators.__file__ and caller.co_name in (
                "run",
                "_keyed",
                "_keyed_per_worker",
                "_picked_columns",
                "_without_null_keys",
            ):
                queried.append(f"{_name} in {caller.co_name}")
            return _original(self, *args, **kw)

        monkeypatch.setattr(pl.DataFrame, name, recorded)
    instance.push("t", persist_updates(T, [(("a", Decimal(2), 2.0, 1, 1), 1, 1)]), 2)
    instance.push("t", persist_updates(T, [((None, Decimal(3), 2.0, 1, 1), 1, 1)]), 2)
    instance.push("u", persist_updates(U, []), 2)
    instance.push("v", persist_updates(V, []), 2)
    instance.step()
    # Only the batch holding the NULL key's row needs a drop (no view row may come of it).
    assert set(queried) <= {"drop_nulls in _without_null_keys"}
    assert len(queried) <= 1
    monkeypatch.undo()
    rows = Counter(instance.peek("j_index", 1).rows())
    assert rows[("a", Decimal(2), 2.0, 1, 1, "a", 1, 0.5, 1, "x")] == 1
    assert sum(rows.values()) == 2
    frame = pl.DataFrame({"k0": [1, None], "c0": [1, 2]})
    first = frame[:1]
    assert operators._without_null_keys(first, ["k0"]) is first
    assert operators._without_null_keys(frame, ["k0"]).rows() == [(1, 1)]
    assert operators._without_null_keys(frame, []) is frame
