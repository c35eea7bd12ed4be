"""Each LIR operator rendered by the engine, on small inputs whose answers are worked out by hand."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext

import pytest

from loupe.dataflow import ComputeInstance
from loupe.dataflow.testing import Update, index_dataflow, persist_updates, read
from loupe.introspection.collector import LogCollector
from loupe.plan import lir, mir
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal

T = (("k", "text"), ("v", "int4"), ("x", "float8"))
TYPES = tuple(t for _, t in T)
U = (("k", "text"), ("w", "int8"))


def get(name: str = "t", types: tuple[str, ...] = TYPES, node_id: int = 0) -> lir.Get:
    return lir.Get(node_id, name, types=types)


class Harness:
    """One index dataflow over sources ``t`` and ``u``, fed step by step."""

    # Set by the ``logged`` fixture: every test runs with the engine's logging off and on
    # (logging meters exchanges and keys a join per worker: the results must not change).
    logging = False

    def __init__(self, plan: lir.Node, workers: int, as_of: int = 1) -> None:
        hooks = LogCollector(workers) if Harness.logging else None
        self.instance = ComputeInstance(workers=workers, logging=hooks)
        desc = index_dataflow("df", plan, {"t": T, "u": U}, as_of)
        self.instance.create_dataflow(desc)
        self.upper = 0

    def feed(
        self, t: Sequence[Update] = (), u: Sequence[Update] = (), upper: int | None = None
    ) -> None:
        upper = upper if upper is not None else self.upper + 2
        self.instance.push("t", persist_updates(T, t), upper)
        self.instance.push("u", persist_updates(U, u), upper)
        self.upper = upper
        self.instance.step()

    def input_lookups(self) -> bool:
        """Whether a stateful operator looked its input arrangement up (indexed a batch of it)."""
        operators = self.instance.dataflows["df"].operators
        states = [inputs for op in operators for inputs, _ in getattr(op, "state", [])]
        return any(i is not None for inputs in states for i in inputs.indexes)

    def rows(self, time: int | None = None) -> Counter:
        return read(self.instance, "df_index", self.upper - 1 if time is None else time)


@pytest.fixture(params=[1, 3], ids=["workers1", "workers3"])
def workers(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture(params=[False, True], ids=["", "logged"], autouse=True)
def logged(request: pytest.FixtureRequest) -> Iterator[None]:
    Harness.logging = request.param
    yield
    Harness.logging = False


def test_mfp_maps_filters_and_projects(workers: int) -> None:
    """v * 2 for rows with v > 1, projected to (k, v*2)."""
    mfp = MapFilterProject(
        3,
        (Call("mul", (Column(1), Literal(2, "int4"))),),
        (Call("gt", (Column(1), Literal(1, "int4"))),),
        (0, 3),
    )
    h = Harness(lir.Mfp(1, get(), mfp, types=("text", "int4")), workers)
    h.feed(t=[(("a", 1, 0.0), 0, 1), (("b", 2, 0.0), 0, 1), (("c", 3, 0.0), 0, 2)])
    assert h.rows() == Counter({("b", 4): 1, ("c", 6): 2})
    h.feed(t=[(("c", 3, 0.0), 2, -1)])
    assert h.rows() == Counter({("b", 4): 1, ("c", 6): 1})


def test_except_all_is_threshold_of_union_with_negate(workers: int) -> None:
    """t.k EXCEPT ALL u.k keeps the surplus of each key, never a negative count."""
    left = lir.Mfp(1, get(), MapFilterProject(3, projection=(0,)), types=("text",))
    right = lir.Mfp(
        3, get("u", ("text", "int8"), 2), MapFilterProject(2, projection=(0,)), types=("text",)
    )
    plan = lir.Threshold(
        6,
        lir.Union(5, (left, lir.Negate(4, right, types=("text",))), types=("text",)),
        types=("text",),
    )
    h = Harness(plan, workers)
    h.feed(
        t=[(("a", 1, 0.0), 0, 3), (("b", 1, 0.0), 0, 1)],
        u=[(("a", 1), 0, 1), (("b", 1), 0, 2), (("c", 1), 0, 1)],
    )
    assert h.rows() == Counter({("a",): 2})
    h.feed(u=[(("b", 1), 2, -2), (("a", 1), 2, 4)])
    assert h.rows() == Counter({("b",): 1})


def test_distinct_counts_each_row_once(workers: int) -> None:
    plan = lir.Reduce(
        2,
        lir.Mfp(1, get(), MapFilterProject(3, projection=(0,)), types=("text",)),
        (Column(0),),
        (),
        lir.ReduceKind.DISTINCT,
        types=("text",),
    )
    h = Harness(plan, workers)
    h.feed(t=[(("a", 1, 0.0), 0, 1), (("a", 2, 0.0), 0, 1), ((None, 3, 0.0), 0, 1)])
    assert h.rows() == Counter({("a",): 1, (None,): 1})
    h.feed(t=[(("a", 1, 0.0), 2, -1)])
    assert h.rows() == Counter({("a",): 1, (None,): 1})
    h.feed(t=[(("a", 2, 0.0), 4, -1)])
    assert h.rows() == Counter({(None,): 1})


def accumulable_plan() -> lir.Reduce:
    aggregates = (
        mir.Aggregate("count", None),
        mir.Aggregate("count", Column(2)),
        mir.Aggregate("sum", Column(1)),
        mir.Aggregate("sum", Column(2)),
        mir.Aggregate("avg", Column(1)),
    )
    return lir.Reduce(
        1,
        get(),
        (Column(0),),
        aggregates,
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "int8", "int8", "int8", "float8", "numeric"),
    )


def test_accumulable_reduce_keeps_running_sums(workers: int) -> None:
    """count(*), count(x), sum(v), sum(x), avg(v) per k, through inserts, NULLs and deletes."""
    h = Harness(accumulable_plan(), workers)
    h.feed(t=[(("a", 1, 1.5), 0, 1), (("a", 3, None), 0, 1), (("b", 10, None), 0, 2)])
    assert h.rows() == Counter({("a", 2, 1, 4, 1.5, 2.0): 1, ("b", 2, 0, 20, None, 10.0): 1})
    h.feed(t=[(("a", 1, 1.5), 2, -1), (("b", 10, None), 2, -2), (("c", 5, 0.25), 2, 1)])
    assert h.rows() == Counter({("a", 1, 0, 3, None, 3.0): 1, ("c", 1, 1, 5, 0.25, 5.0): 1})
    assert h.rows(1) == Counter({("a", 2, 1, 4, 1.5, 2.0): 1, ("b", 2, 0, 20, None, 10.0): 1})


def test_accumulable_reduce_over_several_times_in_one_step(workers: int) -> None:
    """Updates at times 1, 2, 3 pushed together: each time's result is visible."""
    h = Harness(accumulable_plan(), workers)
    h.feed(t=[(("a", 1, 1.0), 1, 1), (("a", 2, 1.0), 2, 1), (("a", 1, 1.0), 3, -1)], upper=4)
    assert h.rows(1) == Counter({("a", 1, 1, 1, 1.0, 1.0): 1})
    assert h.rows(2) == Counter({("a", 2, 2, 3, 2.0, 1.5): 1})
    assert h.rows(3) == Counter({("a", 1, 1, 2, 1.0, 2.0): 1})


def test_float_sums_leave_no_ghost_rows(workers: int) -> None:
    """Sums of floats in varying orders still retract exactly what they emitted."""
    plan = lir.Reduce(
        1,
        get(),
        (Column(0),),
        (mir.Aggregate("sum", Column(2)),),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "float8"),
    )
    h = Harness(plan, workers)
    for step, value in enumerate([0.1, 0.2, 0.3, 1e16, 0.7]):
        h.feed(t=[(("a", step, value), h.upper, 1)])
    assert len(h.rows()) == 1
    h.feed(
        t=[
            (("a", step, value), h.upper, -1)
            for step, value in enumerate([0.1, 0.2, 0.3, 1e16, 0.7])
        ]
    )
    assert h.rows() == Counter()


@pytest.mark.parametrize("kind", [lir.ReduceKind.HIERARCHICAL, lir.ReduceKind.BASIC])
def test_min_max_re_evaluate_changed_groups(workers: int, kind: lir.ReduceKind) -> None:
    plan = lir.Reduce(
        1,
        get(),
        (Column(0),),
        (mir.Aggregate("min", Column(1)), mir.Aggregate("max", Column(2))),
        kind,
        types=("text", "int4", "float8"),
    )
    h = Harness(plan, workers)
    h.feed(t=[(("a", 5, 1.0), 0, 1), (("a", 2, None), 0, 1), (("b", 7, 2.0), 0, 1)])
    assert h.rows() == Counter({("a", 2, 1.0): 1, ("b", 7, 2.0): 1})
    h.feed(t=[(("a", 2, None), 2, -1), (("a", 9, 4.0), 2, 1)])
    assert h.rows() == Counter({("a", 5, 4.0): 1, ("b", 7, 2.0): 1})
    h.feed(t=[(("b", 7, 2.0), 4, -1)])
    assert h.rows() == Counter({("a", 5, 4.0): 1})


def test_count_distinct_and_global_group(workers: int) -> None:
    """count(DISTINCT v) and count(*) over the whole input (no group key)."""
    plan = lir.Reduce(
        1,
        get(),
        (),
        (mir.Aggregate("count", Column(1), distinct=True), mir.Aggregate("count", None)),
        lir.ReduceKind.BASIC,
        types=("int8", "int8"),
    )
    h = Harness(plan, workers)
    h.feed(
        t=[
            (("a", 1, 0.0), 0, 1),
            (("b", 1, 0.0), 0, 1),
            (("c", 2, 0.0), 0, 1),
            (("d", None, 0.0), 0, 1),
        ]
    )
    assert h.rows() == Counter({(2, 4): 1})
    h.feed(t=[(("c", 2, 0.0), 2, -1)])
    assert h.rows() == Counter({(1, 3): 1})
    h.feed(t=[(("a", 1, 0.0), 4, -1), (("b", 1, 0.0), 4, -1), (("d", None, 0.0), 4, -1)])
    assert h.rows() == Counter()


def test_topk_per_group_with_offset_and_duplicates(workers: int) -> None:
    """Per k: the 2nd and 3rd smallest v (offset 1, limit 2), duplicates counted."""
    plan = lir.TopK(1, get(), (mir.OrderKey(1),), 2, 1, (0,), types=TYPES)
    h = Harness(plan, workers)
    h.feed(
        t=[
            (("a", 1, 0.0), 0, 1),
            (("a", 2, 0.0), 0, 2),
            (("a", 3, 0.0), 0, 1),
            (("b", 5, 0.0), 0, 1),
            (("b", 6, 0.0), 0, 1),
        ]
    )
    assert h.rows() == Counter({("a", 2, 0.0): 2, ("b", 6, 0.0): 1})
    h.feed(t=[(("a", 1, 0.0), 2, -1), (("b", 4, 0.0), 2, 1)])
    assert h.rows() == Counter(
        {("a", 2, 0.0): 1, ("a", 3, 0.0): 1, ("b", 5, 0.0): 1, ("b", 6, 0.0): 1}
    )


def test_topk_descending_with_nulls_first(workers: int) -> None:
    """ORDER BY x DESC NULLS FIRST LIMIT 2 over the whole input."""
    plan = lir.TopK(
        1, get(), (mir.OrderKey(2, desc=True, nulls_last=False),), 2, 0, (), types=TYPES
    )
    h = Harness(plan, workers)
    h.feed(
        t=[
            (("a", 1, 1.0), 0, 1),
            (("b", 2, None), 0, 1),
            (("c", 3, 3.0), 0, 1),
            (("d", 4, 2.0), 0, 1),
        ]
    )
    assert h.rows() == Counter({("b", 2, None): 1, ("c", 3, 3.0): 1})
    h.feed(t=[(("b", 2, None), 2, -1)])
    assert h.rows() == Counter({("c", 3, 3.0): 1, ("d", 4, 2.0): 1})


def join_plan(
    *inputs: lir.Node, equivalences: tuple, kind: lir.JoinKind = lir.JoinKind.LINEAR
) -> lir.Join:
    arranged = tuple(lir.ArrangeBy(10 + i, n, (), types=n.types) for i, n in enumerate(inputs))
    types = tuple(t for n in inputs for t in n.types)
    return lir.Join(20, arranged, equivalences, kind, types=types)


def test_two_way_join_matches_keys_not_nulls(workers: int) -> None:
    plan = join_plan(get(), get("u", ("text", "int8"), 1), equivalences=((Column(0), Column(3)),))
    h = Harness(plan, workers)
    h.feed(
        t=[(("a", 1, 0.0), 0, 1), ((None, 2, 0.0), 0, 1)], u=[(("a", 10), 0, 2), ((None, 20), 0, 1)]
    )
    assert h.rows() == Counter({("a", 1, 0.0, "a", 10): 2})
    # Both sides change in the same step: the new pair is counted once.
    h.feed(t=[(("b", 3, 0.0), 2, 1)], u=[(("b", 30), 2, 1), (("a", 10), 2, -1)])
    assert h.rows() == Counter({("a", 1, 0.0, "a", 10): 1, ("b", 3, 0.0, "b", 30): 1})
    assert h.rows(1) == Counter({("a", 1, 0.0, "a", 10): 2})


def test_join_on_mixed_integer_widths_and_expressions(workers: int) -> None:
    """t.v (int4) = u.w (int8), and t.v + 1 = u.w through an expression key."""
    plan = join_plan(
        get(),
        get("u", ("text", "int8"), 1),
        equivalences=((Call("add", (Column(1), Literal(1, "int4"))), Column(4)),),
    )
    h = Harness(plan, workers)
    h.feed(t=[(("a", 1, 0.0), 0, 1), (("b", 5, 0.0), 0, 1)], u=[(("x", 2), 0, 1), (("y", 5), 0, 1)])
    assert h.rows() == Counter({("a", 1, 0.0, "x", 2): 1})


def test_delta_join_of_three_inputs_and_a_cross_join(workers: int) -> None:
    """t JOIN u JOIN t (as a delta join), and t CROSS JOIN u (no equivalences)."""
    t2 = get("t", TYPES, 2)
    three = join_plan(
        get(),
        get("u", ("text", "int8"), 1),
        t2,
        equivalences=((Column(0), Column(3), Column(5)),),
        kind=lir.JoinKind.DELTA,
    )
    h = Harness(three, workers)
    h.feed(t=[(("a", 1, 0.0), 0, 1), (("a", 2, 0.0), 0, 1)], u=[(("a", 7), 0, 1)])
    expected = Counter({("a", i, 0.0, "a", 7, "a", j, 0.0): 1 for i in (1, 2) for j in (1, 2)})
    assert h.rows() == expected
    h.feed(t=[(("a", 3, 0.0), 2, 1)], u=[(("a", 7), 2, 1)])
    expected = Counter(
        {("a", i, 0.0, "a", 7, "a", j, 0.0): 2 for i in (1, 2, 3) for j in (1, 2, 3)}
    )
    assert h.rows() == expected

    cross = join_plan(get(), get("u", ("text", "int8"), 1), equivalences=())
    c = Harness(cross, workers)
    c.feed(t=[(("a", 1, 0.0), 0, 1), (("b", 2, 0.0), 0, 1)], u=[(("x", 7), 0, 1)])
    c.feed(u=[(("y", 8), 2, 1)])
    assert c.rows() == Counter(
        {(k, v, 0.0, w, n): 1 for k, v in (("a", 1), ("b", 2)) for w, n in (("x", 7), ("y", 8))}
    )


def test_a_shared_node_is_one_operator_reading_what_all_its_readers_use(workers: int) -> None:
    """t's k and t's v, each read through one Get node (a DAG, as outer joins plan): one
    operator feeds both, and t is read with both columns (each reader drops the other)."""
    shared = get()
    keys = lir.Mfp(1, shared, MapFilterProject(3, projection=(0,)), types=("text",))
    values = lir.Mfp(2, shared, MapFilterProject(3, projection=(1,)), types=("int4",))
    h = Harness(join_plan(keys, values, equivalences=()), workers)
    h.feed(t=[(("a", 1, 0.0), 0, 1), (("b", 2, 0.0), 0, 1)])
    assert h.rows() == Counter({(k, v): 1 for k in ("a", "b") for v in (1, 2)})
    h.feed(t=[(("a", 1, 0.0), 2, -1)])
    assert h.rows() == Counter({("b", 2): 1})
    operators = h.instance.dataflows["df"].operators
    assert [o.name for o in operators].count("Get(t)") == 1


def test_constant_appears_at_the_as_of(workers: int) -> None:
    plan = lir.Constant(0, (("x", 1), ("y", None)), types=("text", "int4"))
    h = Harness(plan, workers, as_of=3)
    h.feed(upper=5)
    assert h.rows(3) == Counter({("x", 1): 1, ("y", None): 1})


def test_inserts_alone_move_min_max_and_topk_from_the_old_result(workers: int) -> None:
    """Insert-only steps take the fast path (old result plus new rows); results stay exact."""
    min_max = lir.Reduce(
        1,
        get(),
        (Column(0),),
        (mir.Aggregate("min", Column(1)), mir.Aggregate("max", Column(1))),
        lir.ReduceKind.HIERARCHICAL,
        types=("text", "int4", "int4"),
    )
    h = Harness(min_max, workers)
    h.feed(t=[(("a", 5, 0.0), 0, 1)])
    h.feed(t=[(("a", 3, 0.0), 2, 1), (("b", None, 0.0), 2, 1)])
    assert h.rows() == Counter({("a", 3, 5): 1, ("b", None, None): 1})
    h.feed(t=[(("a", 9, 0.0), 4, 1), (("b", 2, 0.0), 4, 1)])
    assert h.rows() == Counter({("a", 3, 9): 1, ("b", 2, 2): 1})
    assert not h.input_lookups()

    top = lir.TopK(1, get(), (mir.OrderKey(1),), 2, 0, (), types=TYPES)
    h = Harness(top, workers)
    h.feed(t=[(("a", 5, 0.0), 0, 1), (("b", 7, 0.0), 0, 1)])
    h.feed(t=[(("c", 6, 0.0), 2, 1)])
    assert h.rows() == Counter({("a", 5, 0.0): 1, ("c", 6, 0.0): 1})
    h.feed(t=[(("d", 1, 0.0), 4, 1), (("e", 9, 0.0), 4, 1)])
    assert h.rows() == Counter({("d", 1, 0.0): 1, ("a", 5, 0.0): 1})
    h.feed(t=[(("f", 0, 0.0), 6, 2)])
    assert h.rows() == Counter({("f", 0, 0.0): 2})
    assert not h.input_lookups()
    h.feed(t=[(("f", 0, 0.0), 8, -1)])
    assert h.rows() == Counter({("f", 0, 0.0): 1, ("d", 1, 0.0): 1})


def test_large_batches_at_one_time_and_at_many_times_sum_alike(workers: int) -> None:
    """12,000 rows (over the single-time grouping threshold) at one time, then at several."""
    h = Harness(accumulable_plan(), workers)
    rows = [((("a", "b", "c")[i % 3], i % 7, 0.5), 0, 1) for i in range(12_000)]
    h.feed(t=rows)
    expected = {}
    for key in ("a", "b", "c"):
        values = [i % 7 for i in range(12_000) if ("a", "b", "c")[i % 3] == key]
        expected[key] = (key, len(values), len(values), sum(values), 0.5 * len(values))
    got = {row[0]: row[:5] for row in h.rows()}
    assert got == expected
    h.feed(t=[(row, h.upper + i % 2, -1) for i, (row, _, _) in enumerate(rows)], upper=h.upper + 2)
    assert h.rows() == Counter()


def test_topk_over_many_rows_picks_the_first_in_order(workers: int) -> None:
    """Limit 3 of 60 rows (candidates found without a full sort), NULLs first, ties by row."""
    plan = lir.TopK(
        1, get(), (mir.OrderKey(2, desc=True, nulls_last=False),), 3, 1, (), types=TYPES
    )
    rows = [
        (("abcdef"[i % 6], i % 5, None if i % 17 == 0 else float(i % 4)), 0, 1) for i in range(60)
    ]
    h = Harness(plan, workers)
    h.feed(t=rows)

    def order(row: tuple) -> tuple:
        k, v, x = row
        return (x is not None, -(x or 0.0), k, v)

    everything = sorted((row for row, _, _ in rows), key=order)
    assert h.rows() == Counter(everything[1:4])


def test_exact_sums_of_bigints_never_wrap_around(workers: int) -> None:
    """sum(int8) is an exact numeric; past numeric's range the dataflow fails with 22003."""
    plan = lir.Reduce(
        1,
        get("u", ("text", "int8")),
        (Column(0),),
        (mir.Aggregate("sum", Column(1)), mir.Aggregate("avg", Column(1))),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "numeric", "numeric"),
    )
    h = Harness(plan, workers)
    big = 2**63 - 1
    h.feed(u=[(("a", big), 0, 1000), (("a", -big), 0, 1), (("a", big), 0, 1)])
    # Beyond bigint's range: exact, as PostgreSQL's numeric sum of bigints.
    with localcontext(Context(prec=60)):
        mean = (Decimal(big) * 1000 / 1002).quantize(Decimal("1e-16"), rounding=ROUND_HALF_UP)
    assert h.rows() == Counter({("a", Decimal(big) * 1000, mean): 1})
    h.feed(u=[(("a", big), h.upper, 1000)])  # 1.8e22: beyond numeric's 10^22
    failed = h.instance.dataflows["df"].failed
    assert failed is not None
    assert failed.code == "22003"


def test_exact_sums_with_min_re_evaluate_without_wrapping(workers: int) -> None:
    """A Basic reduce (sum next to min) sums exactly too, and fails with 22003 past the range."""
    plan = lir.Reduce(
        1,
        get("u", ("text", "int8")),
        (Column(0),),
        (mir.Aggregate("sum", Column(1)), mir.Aggregate("min", Column(1))),
        lir.ReduceKind.BASIC,
        types=("text", "numeric", "int8"),
    )
    h = Harness(plan, workers)
    big = 2**63 - 1
    # Added in this order, the first two pass numeric's range; the total is within it.
    h.feed(u=[(("a", big), 0, 1000), (("a", big - 1), 0, 1000), (("a", -big), 0, 1000)])
    assert h.rows() == Counter({("a", Decimal(big - 1) * 1000, -big): 1})
    h.feed(u=[(("a", big), h.upper, 2000)])
    failed = h.instance.dataflows["df"].failed
    assert failed is not None
    assert failed.code == "22003"
