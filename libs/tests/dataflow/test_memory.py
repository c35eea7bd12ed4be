"""The replica's memory budget in the engine: dataflows and peeks that would exceed it fail 53200."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loupe.common.errors import LoupeError, SqlState
from loupe.compute_replica.process_metrics import ProcessMetrics
from loupe.dataflow import ComputeInstance, Finishing, LoggingHooks
from loupe.dataflow import memory as budget
from loupe.dataflow.testing import index_dataflow, persist_updates, read
from loupe.introspection.collector import LogCollector
from loupe.plan import lir
from loupe.plan.dataflow import IndexImport
from loupe.sizes import MIB

T = (("k", "int8"),)
TYPES = ("int8",)


def get(name: str, node_id: int) -> lir.Node:
    return lir.ArrangeBy(node_id + 10, lir.Get(node_id, name, types=TYPES), (), types=TYPES)


def cross_join() -> lir.Join:
    """``t x t``: n squared rows from n."""
    return lir.Join(20, (get("t", 0), get("t", 1)), (), lir.JoinKind.DELTA, types=TYPES * 2)


def identity() -> lir.Node:
    return lir.Get(0, "s", types=TYPES)


def feed(instance: ComputeInstance, source: str, keys: range, time: int) -> None:
    instance.push(source, persist_updates(T, [((k,), time, 1) for k in keys]), time + 1)
    instance.step()


def test_a_cross_join_past_the_budget_fails_53200_and_the_others_keep_running() -> None:
    """The join's output is estimated before it exists: the dataflow fails, its state goes."""
    instance = ComputeInstance(memory_limit_bytes=16 * MIB)
    instance.create_dataflow(index_dataflow("big", cross_join(), {"t": T}, as_of=0))
    instance.create_dataflow(index_dataflow("small", identity(), {"s": T}, as_of=0))
    feed(instance, "s", range(3), 0)
    # 3,000² rows of two int8 columns (plus time and diff) are ~288 MB: far past 16 MiB.
    feed(instance, "t", range(3_000), 0)

    with pytest.raises(LoupeError) as caught:
        instance.peek("big_index", 0)
    assert caught.value.code == SqlState.OUT_OF_MEMORY == "53200"
    assert "out of memory: dataflow big" in caught.value.message
    assert "16 MiB" in caught.value.message
    assert instance.errors()["big_index"].code == "53200"
    # Released: nothing of the join, its inputs or its source's log is held any more.
    assert instance.footprint().arranged_bytes < MIB
    assert "t" not in instance.source_ids()

    feed(instance, "s", range(3, 5), 1)
    assert read(instance, "small_index", 1) == Counter((k,) for k in range(5))
    # It stays failed (until dropped), whatever its source does.
    feed(instance, "t", range(1), 1)
    with pytest.raises(LoupeError, match="out of memory"):
        instance.peek("big_index", 0)
    instance.drop("big_index")
    assert "big" not in instance.dataflows


def test_readers_of_a_failed_index_fail_with_its_error_instead_of_waiting() -> None:
    """An index import whose exporter ran out: the reader's frontier could never move."""
    instance = ComputeInstance(memory_limit_bytes=16 * MIB)
    instance.create_dataflow(index_dataflow("big", cross_join(), {"t": T}, as_of=0))
    on_big = IndexImport("big_index", "big_view", (("a", "int8"), ("b", "int8")), ())
    count = lir.Get(0, "big_view", types=TYPES * 2)
    instance.create_dataflow(index_dataflow("before", count, {}, 0, index_imports=(on_big,)))
    feed(instance, "t", range(3_000), 0)
    assert instance.failed()["before_index"].message == instance.failed()["big_index"].message
    instance.create_dataflow(index_dataflow("after", count, {}, 0, index_imports=(on_big,)))
    with pytest.raises(LoupeError, match="out of memory: dataflow big"):
        instance.peek("after_index", 0)


def test_a_cross_join_within_the_budget_is_computed() -> None:
    instance = ComputeInstance(memory_limit_bytes=64 * MIB)
    instance.create_dataflow(index_dataflow("j", cross_join(), {"t": T}, as_of=0))
    feed(instance, "t", range(100), 0)
    assert sum(read(instance, "j_index", 0).values()) == 10_000


def test_without_a_budget_nothing_is_refused() -> None:
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("j", cross_join(), {"t": T}, as_of=0))
    feed(instance, "t", range(300), 0)
    assert sum(read(instance, "j_index", 0).values()) == 90_000


def test_state_growing_past_the_budget_releases_the_largest_dataflow() -> None:
    """No single join is to blame: after the step the instance holds too much, the largest goes."""
    instance = ComputeInstance(memory_limit_bytes=MIB)
    instance.create_dataflow(index_dataflow("small", identity(), {"s": T}, as_of=0))
    instance.create_dataflow(index_dataflow("big", lir.Get(0, "t", types=TYPES), {"t": T}, 0))
    feed(instance, "s", range(10), 0)
    feed(instance, "t", range(100_000), 0)  # ~2.4 MB logged, as much arranged
    assert instance.errors()["big_index"].code == "53200"
    assert "small_index" not in instance.errors()
    assert read(instance, "small_index", 0) == Counter((k,) for k in range(10))


def test_a_released_dataflow_gives_its_memory_back_to_the_os() -> None:
    """The process's resident memory goes down when a dataflow is released, not later."""
    instance = ComputeInstance(memory_limit_bytes=64 * MIB)
    instance.create_dataflow(index_dataflow("big", lir.Get(0, "t", types=TYPES), {"t": T}, 0))
    rows = 8_000_000  # 192 MB of Arrow in the source's log
    ones = pa.repeat(pa.scalar(1, pa.int64()), rows)
    table = pa.table(
        {
            "k": pc.cumulative_sum(ones),
            "mz_timestamp": pa.repeat(pa.scalar(0, pa.uint64()), rows),
            "mz_diff": ones,
        }
    )
    instance.push("t", table, 1)
    del table
    before = ProcessMetrics.memory_bytes()
    instance.step()
    assert instance.errors()["big_index"].code == "53200"
    assert before - ProcessMetrics.memory_bytes() > 100 * MIB


class Sizes(LoggingHooks):
    """Records the last arrangement size logged per (worker, operator)."""

    enabled = True

    def __init__(self) -> None:
        self.sizes: dict[tuple[int, int], int] = {}

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
        self.sizes[(worker, operator_id)] = records


def test_a_released_dataflow_logs_its_arrangements_empty() -> None:
    """mz_arrangement_sizes must not keep showing what was let go."""
    hooks = Sizes()
    instance = ComputeInstance(memory_limit_bytes=MIB, logging=hooks)
    instance.create_dataflow(index_dataflow("big", lir.Get(0, "t", types=TYPES), {"t": T}, 0))
    feed(instance, "t", range(10_000), 0)
    assert any(hooks.sizes.values())
    feed(instance, "t", range(10_000, 100_000), 1)
    assert instance.errors()["big_index"].code == "53200"
    assert not any(hooks.sizes.values())


def test_a_peek_whose_result_would_not_fit_fails_and_the_next_one_works() -> None:
    instance = ComputeInstance(memory_limit_bytes=8 * MIB)
    instance.create_dataflow(index_dataflow("i", lir.Get(0, "t", types=TYPES), {"t": T}, 0))
    feed(instance, "t", range(100_000), 0)  # 2.4 MB held; as Python values ~6.4 MB more
    with pytest.raises(LoupeError) as caught:
        instance.peek("i_index", 0)
    assert caught.value.code == "53200"
    assert "the result of reading i" in caught.value.message
    limited = instance.peek("i_index", 0, finishing=Finishing(limit=10))
    assert len(limited.rows()) == 10
    assert "i_index" not in instance.errors()  # a peek failing leaves the index alone


def test_join_rows_counts_matches_per_key_without_joining() -> None:
    left = pl.DataFrame({"k": [1, 1, 2, 3, None]})
    right = pl.DataFrame({"k": [1, 2, 2, 2, 4]})
    assert budget.join_rows(left, right, ["k"]) == 2 * 1 + 1 * 3
    assert budget.join_rows(left, right, []) == 25
    assert budget.join_rows(left, right.filter(pl.col("k") == 4), ["k"]) == 0


def test_reservations_add_up_within_a_step_and_only_there() -> None:
    limit = budget.MemoryBudget(1_000, held=lambda: 600)
    frame = pl.DataFrame({"k": list(range(10))}, schema={"k": pl.Int64})  # 8 bytes a row
    with limit.charging("dataflow x") as reservation:
        budget.reserve_join(frame, frame.head(2), [])  # 20 rows x 16 bytes
        assert reservation.reserved == 320
        with pytest.raises(LoupeError) as caught:
            budget.reserve_join(frame, frame.head(1), [])  # 160 more: 1,080 > 1,000
    assert caught.value.code == "53200"
    assert "dataflow x needs about" in caught.value.message
    budget.reserve(10**12)  # outside a step: nothing to charge


def test_a_keyed_join_is_charged_its_exact_matches_when_the_bound_does_not_fit() -> None:
    limit = budget.MemoryBudget(100_000, held=lambda: 0)
    keys = pl.DataFrame({"k": list(range(1_000))}, schema={"k": pl.Int64})
    with limit.charging("dataflow y") as reservation:
        # The bound (10⁶ rows) does not fit, the 1,000 matches do.
        budget.reserve_join(keys, keys.head(1_000), ["k"])
        assert reservation.reserved == 1_000 * 16


def test_no_budget_charges_nothing() -> None:
    unlimited = budget.MemoryBudget(0, held=lambda: 10**15)
    with unlimited.charging("dataflow z"):
        budget.reserve(10**15)
    assert not unlimited.enabled


def test_out_of_memory_names_what_the_budget_and_what_is_held() -> None:
    error = budget.out_of_memory("dataflow v", 3 * MIB, MIB, 2 * MIB)
    assert error.code == "53200"
    assert error.message == (
        "out of memory: dataflow v needs about 3 MiB, more than the replica's memory budget"
        " of 2 MiB allows"
    )
    assert error.detail == "The replica holds 1 MiB already."


def test_a_released_dataflow_logs_its_arrangements_empty_in_a_collector() -> None:
    """The same through a ``LogCollector``, which takes sizes once per interval: the released
    operators are reported empty and nothing of them is kept for the next flush."""
    collector = LogCollector(1)
    instance = ComputeInstance(memory_limit_bytes=MIB, logging=collector)
    instance.create_dataflow(index_dataflow("big", lir.Get(0, "t", types=TYPES), {"t": T}, 0))
    feed(instance, "t", range(10_000), 0)
    collector.tick(1)
    assert collector.state_rows()["mz_arrangement_records_raw"]
    feed(instance, "t", range(10_000, 100_000), 1)
    assert instance.errors()["big_index"].code == "53200"
    collector.tick(2)
    assert not collector.state_rows()["mz_arrangement_records_raw"]
    assert not instance.dataflows["big"].changed_spines
