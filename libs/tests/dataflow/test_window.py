"""The Window operator on small inputs whose answers are worked out by hand."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from loupe.common.errors import LoupeError
from loupe.dataflow import ComputeInstance
from loupe.dataflow.batches import concat
from loupe.dataflow.testing import Update, index_dataflow, persist_updates, read
from loupe.introspection.collector import LogCollector
from loupe.plan import lir, mir

T = (("k", "text"), ("v", "int4"), ("x", "float8"))
TYPES = tuple(t for _, t in T)
ROWS = mir.WindowFrame("rows", mir.FrameBound("offset_preceding", 1), mir.FrameBound("current_row"))


def window(
    functions: Sequence[mir.WindowFunction],
    partition_by: tuple[int, ...] = (0,),
    order: tuple[mir.OrderKey, ...] = (mir.OrderKey(1),),
) -> lir.Window:
    types = TYPES + tuple(f.result_type(TYPES) for f in functions)
    source = lir.Get(0, "t", types=TYPES)
    return lir.Window(1, source, partition_by, order, tuple(functions), types=types)


class Harness:
    def __init__(self, plan: lir.Node, workers: int) -> None:
        # Logging on with 3 workers: metered exchanges must not change the results.
        hooks = LogCollector(workers) if workers == 3 else None
        self.instance = ComputeInstance(workers=workers, logging=hooks)
        self.instance.create_dataflow(index_dataflow("df", plan, {"t": T}, 1))
        self.upper = 1

    def feed(self, updates: Sequence[Update]) -> None:
        self.upper += 1
        self.instance.push("t", persist_updates(T, updates), self.upper)
        self.instance.step()

    def rows(self) -> Counter:
        return read(self.instance, "df_index", self.upper - 1)

    def changed(self) -> list[tuple[object, ...]]:
        """The rows the Window operator emitted in the last step."""
        operator = next(o for o in self.instance.dataflows["df"].operators if o.name == "Window")
        return concat(operator.ok, operator.empty).rows()


@pytest.fixture(params=[1, 3], ids=["workers1", "workers3"])
def workers(request: pytest.FixtureRequest) -> int:
    return request.param


def test_ranks_per_partition_follow_inserts_and_deletes(workers: int) -> None:
    """row_number, rank and dense_rank over ORDER BY v; ties share ranks; a delete closes gaps."""
    plan = window(
        [
            mir.WindowFunction("row_number"),
            mir.WindowFunction("rank"),
            mir.WindowFunction("dense_rank"),
        ]
    )
    harness = Harness(plan, workers)
    harness.feed(
        [
            (("a", 1, 0.5), 1, 1),
            (("a", 3, 1.0), 1, 1),
            (("a", 3, 2.0), 1, 1),
            (("a", 7, 0.0), 1, 1),
            (("b", 2, 0.0), 1, 1),
        ]
    )
    assert harness.rows() == Counter(
        {
            ("a", 1, 0.5, 1, 1, 1): 1,
            ("a", 3, 1.0, 2, 2, 2): 1,  # peers of v = 3, in the order of the whole row
            ("a", 3, 2.0, 3, 2, 2): 1,
            ("a", 7, 0.0, 4, 4, 3): 1,
            ("b", 2, 0.0, 1, 1, 1): 1,
        }
    )
    harness.feed([(("a", 1, 0.5), 2, -1), (("b", 1, 9.0), 2, 1)])
    assert harness.rows() == Counter(
        {
            ("a", 3, 1.0, 1, 1, 1): 1,
            ("a", 3, 2.0, 2, 1, 1): 1,
            ("a", 7, 0.0, 3, 3, 2): 1,
            ("b", 1, 9.0, 1, 1, 1): 1,
            ("b", 2, 0.0, 2, 2, 2): 1,
        }
    )


def test_a_change_recomputes_only_its_partition(workers: int) -> None:
    """Inserting into partition b emits rows of b only; a's rows are left alone."""
    harness = Harness(window([mir.WindowFunction("row_number")]), workers)
    harness.feed([(("a", 1, 0.0), 1, 1), (("a", 2, 0.0), 1, 1), (("b", 5, 0.0), 1, 1)])
    harness.feed([(("b", 4, 0.0), 2, 1)])
    changed = harness.changed()
    assert {row[0] for row in changed} == {"b"}
    # b's old row retracted with its old number, then both rows with their new ones.
    assert sorted(changed) == sorted(
        [("b", 5, 0.0, 1, 2, -1), ("b", 4, 0.0, 1, 2, 1), ("b", 5, 0.0, 2, 2, 1)]
    )


def test_duplicate_rows_each_get_their_own_number(workers: int) -> None:
    """A row inserted twice is two rows of the partition: row_number 1 and 2, count 2."""
    plan = window([mir.WindowFunction("row_number"), mir.WindowFunction("count")])
    harness = Harness(plan, workers)
    harness.feed([(("a", 1, 0.0), 1, 2)])
    assert harness.rows() == Counter({("a", 1, 0.0, 1, 2): 1, ("a", 1, 0.0, 2, 2): 1})
    harness.feed([(("a", 1, 0.0), 2, -1)])
    assert harness.rows() == Counter({("a", 1, 0.0, 1, 1): 1})


def test_lag_frames_and_peers_by_hand(workers: int) -> None:
    """lag with a default, a ROWS frame of one row back, and RANGE frames ending at the
    last peer (the default), without ORDER BY the whole partition."""
    functions = [
        mir.WindowFunction("lag", (1,)),
        mir.WindowFunction("sum", (2,), ROWS),
        mir.WindowFunction("sum", (1,)),
        mir.WindowFunction("last_value", (2,)),
    ]
    harness = Harness(window(functions), workers)
    harness.feed(
        [
            (("a", 1, 1.0), 1, 1),
            (("a", 2, 2.0), 1, 1),
            (("a", 2, 4.0), 1, 1),
            (("a", None, 8.0), 1, 1),
        ]
    )
    assert harness.rows() == Counter(
        {
            ("a", 1, 1.0, None, 1.0, 1, 1.0): 1,
            ("a", 2, 2.0, 1, 3.0, 5, 4.0): 1,  # the peers of v = 2 end at x = 4.0
            ("a", 2, 4.0, 2, 6.0, 5, 4.0): 1,
            ("a", None, 8.0, 2, 12.0, 5, 8.0): 1,  # NULLs sort last; sum skips them
        }
    )
    whole = Harness(window([mir.WindowFunction("sum", (1,))], order=()), workers)
    whole.feed([(("a", 1, 0.0), 1, 1), (("a", 2, 0.0), 1, 1), (("b", 5, 0.0), 1, 1)])
    assert whole.rows() == Counter({("a", 1, 0.0, 3): 1, ("a", 2, 0.0, 3): 1, ("b", 5, 0.0, 5): 1})


def test_an_argument_error_lasts_as_long_as_its_row(workers: int) -> None:
    """nth_value(x, v) with v = 0 fails reads (22016) until that row is deleted."""
    harness = Harness(window([mir.WindowFunction("nth_value", (2, 1))]), workers)
    harness.feed([(("a", 0, 1.0), 1, 1), (("a", 1, 2.0), 1, 1)])
    with pytest.raises(LoupeError) as raised:
        harness.rows()
    assert raised.value.code == "22016"
    harness.feed([(("a", 0, 1.0), 2, -1)])
    assert harness.rows() == Counter({("a", 1, 2.0, 2.0): 1})
