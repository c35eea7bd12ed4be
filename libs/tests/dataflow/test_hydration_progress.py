"""Per LIR node hydration and progress (seed 002): real dataflows over real data, on several
workers, observed through ``progress()``, ``hydration()`` and the logging hooks as they happen."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable

import pytest

from loupe.common.errors import LoupeError
from loupe.dataflow import ComputeInstance, DataflowProgress, LoggingHooks, NodeProgress
from loupe.dataflow.hydration import HydrationTracker
from loupe.dataflow.testing import index_dataflow, persist_updates, read
from loupe.plan import lir, mir
from loupe.plan.dataflow import IndexImport
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal
from loupe.sizes import MIB

T = (("k", "text"), ("n", "int4"))
TYPES = ("text", "int4")
WORKERS = 3
AS_OF = 5


def arranged(name: str, node_id: int) -> lir.Node:
    """``Get`` (``node_id``) arranged by its key (``node_id + 10``)."""
    return lir.ArrangeBy(
        node_id + 10, lir.Get(node_id, name, types=TYPES), ((Column(0),),), types=TYPES
    )


def join_t_u() -> lir.Join:
    return lir.Join(
        20,
        (arranged("t", 0), arranged("u", 1)),
        ((Column(0), Column(2)),),
        lir.JoinKind.LINEAR,
        types=TYPES * 2,
    )


def sum_of_join() -> lir.Reduce:
    """Per key of the join of t and u: the sum of t's n. Nodes 0, 10, 1, 11, 20, 21."""
    return lir.Reduce(
        21,
        join_t_u(),
        (Column(0),),
        (mir.Aggregate("sum", Column(1)),),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "int8"),
    )


def small_n() -> lir.Mfp:
    """t's rows with n < 10 (a filter: its output is a fraction of its input)."""
    predicate = Call("lt", (Column(1), Literal(10, "int4")))
    return lir.Mfp(
        1, lir.Get(0, "t", types=TYPES), MapFilterProject(2, (), (predicate,), (0, 1)), types=TYPES
    )


def rows_t(count: int) -> list:
    """``count`` rows with distinct keys k0…"""
    return [((f"k{i}", i), AS_OF - 2, 1) for i in range(count)]


def rows_u(count: int, keys: int) -> list:
    """``count`` rows over ``keys`` keys (each key ``count / keys`` times)."""
    return [((f"k{i % keys}", i), AS_OF - 2, 1) for i in range(count)]


def push(instance: ComputeInstance, source: str, updates: Iterable, upper: int) -> None:
    instance.push(source, persist_updates(T, list(updates)), upper)


def load(instance: ComputeInstance, t: int = 120, u: int = 90, keys: int = 30) -> None:
    """Snapshots of t and u queued at or before the as_of, the step not yet possible."""
    push(instance, "t", rows_t(t), AS_OF)
    push(instance, "u", rows_u(u, keys), AS_OF)
    instance.step()


def hydrate(instance: ComputeInstance) -> None:
    """The sources pass the as_of: the dataflow's hydrating step runs."""
    for source in instance.source_ids():
        push(instance, source, [], AS_OF + 1)
    instance.step()


def by_node(progress: DataflowProgress) -> dict[int, list[NodeProgress]]:
    nodes: dict[int, list[NodeProgress]] = {}
    for node in progress.nodes:
        nodes.setdefault(node.lir_id, []).append(node)
    return nodes


def totals(progress: DataflowProgress) -> dict[int, tuple[int, int]]:
    """Per LIR node: (records done, records estimated) summed over the workers."""
    return {
        lir_id: (sum(n.records_done for n in nodes), sum(n.records_estimated for n in nodes))
        for lir_id, nodes in by_node(progress).items()
    }


class Recorder(LoggingHooks):
    """Hydration events and operator runs as they happen, and ``progress()`` at each event."""

    enabled = True

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.instance: ComputeInstance | None = None
        self.seen: list[DataflowProgress] = []

    def scheduled(self, worker: int, operator_id: int, duration_ns: int) -> None:
        self.events.append(("scheduled", operator_id))

    def hydration(self, worker: int, export_id: str, lir_id: int, hydrated: bool) -> None:
        self.events.append(("hydration", export_id, lir_id, worker, hydrated))
        if self.instance is not None and hydrated:
            self.seen.extend(self.instance.progress())

    def hydrated_in_order(self) -> list[int]:
        """LIR ids as they were reported hydrated (each once, on worker 0)."""
        return [e[2] for e in self.events if e[0] == "hydration" and e[4] and e[3] == 0]


def test_nodes_hydrate_one_by_one_in_topological_order_as_their_operators_run() -> None:
    hooks = Recorder()
    instance = ComputeInstance(workers=WORKERS, logging=hooks)
    hooks.instance = instance
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    load(instance)
    assert hooks.hydrated_in_order() == []
    assert [h.hydrated for h in instance.hydration()] == [False] * 6 * WORKERS
    hooks.events.clear()
    hydrate(instance)

    assert hooks.hydrated_in_order() == [0, 10, 1, 11, 20, 21]  # the render order: inputs first
    # Each node is reported right after its operator ran, before the next one runs.
    dataflow = instance.dataflows["d"]
    operator_of = {r.lir_id: r.start for r in dataflow.regions}
    order = [e for e in hooks.events if e[0] == "scheduled" or (e[0] == "hydration" and e[3] == 0)]
    for lir_id in operator_of:
        reported = order.index(("hydration", "d_index", lir_id, 0, True))
        last_run = max(
            i for i, e in enumerate(order[:reported]) if e == ("scheduled", operator_of[lir_id])
        )
        assert set(order[last_run:reported]) == {("scheduled", operator_of[lir_id])}
    # Every worker of a node, for the export, once.
    events = [e for e in hooks.events if e[0] == "hydration"]
    assert len(events) == len(set(events)) == 6 * WORKERS
    # Mid-step, nodes were hydrated while later ones were not.
    assert [p.nodes_hydrated for p in hooks.seen[::WORKERS]] == [1, 2, 3, 4, 5, 6]
    assert all(not p.hydrated for p in hooks.seen)  # the dataflow: only after its step
    final = instance.progress()[0]
    assert final.hydrated
    assert final.nodes_hydrated == final.nodes_total == 6
    assert all(h.hydrated for h in instance.hydration())
    assert final.hydration_time_ns is not None
    assert final.hydration_time_ns > 0
    assert final.started_ns is not None
    assert final.installed_ns < final.started_ns


def test_records_done_per_worker_sum_to_what_each_node_consumed() -> None:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    load(instance, t=120, u=90, keys=30)
    hydrate(instance)
    progress = instance.progress()[0]
    # The join of t (k0..k119, once each) and u (k0..k29, 3 times each): 90 rows.
    assert totals(progress) == {
        0: (120, 120),  # Get t: t's snapshot
        10: (120, 120),  # ArrangeBy: what the Get produced
        1: (90, 90),
        11: (90, 90),
        20: (210, 210),  # the join consumes both inputs
        21: (90, 90),  # the reduce consumes the join's output
    }
    assert progress.records_done == progress.records_estimated == 120 * 2 + 90 * 2 + 210 + 90
    # Per worker: each node on each worker, as the import spread the snapshot.
    gets = by_node(progress)[0]
    assert [n.worker for n in gets] == list(range(WORKERS))
    assert [n.records_done for n in gets] == [40, 40, 40]
    assert progress.records_read == 210


def test_progress_summarises_an_unchanged_snapshot_once() -> None:
    """The replica asks every report interval: a dataflow whose tracking did not change since
    (every hydrated one) gets the same summary again, not a rebuilt one."""
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    load(instance, t=120, u=90, keys=30)
    before = instance.progress()[0]
    hydrate(instance)
    after = instance.progress()[0]
    assert after.nodes is not before.nodes
    assert after.records_done > before.records_done
    again = instance.progress()[0]
    assert again.nodes is after.nodes
    assert again == after


def test_estimates_come_from_the_snapshots_and_are_exact_once_the_inputs_hydrated() -> None:
    hooks = Recorder()
    instance = ComputeInstance(workers=WORKERS, logging=hooks)
    hooks.instance = instance
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    # Not yet started: nothing done, estimates grow as the snapshots arrive (a source's Get
    # counts what was read as done: reading is its work).
    first = instance.progress()[0]
    assert (first.records_done, first.records_estimated, first.started_ns) == (0, 0, None)
    push(instance, "t", rows_t(120), AS_OF)
    assert totals(instance.progress()[0])[0] == (120, 120)
    # An update after the as_of is not part of the snapshot.
    push(instance, "u", [*rows_u(90, 30), (("k0", 1), AS_OF + 3, 1)], AS_OF)
    instance.step()
    start = totals(instance.progress()[0])
    assert start[0] == (120, 120)
    assert start[1] == (90, 90)
    assert start[20] == (0, 210)  # a join consumes its inputs: exact from the snapshots
    # Its output is estimated as its largest input's (a key-foreign key join): 120 for 90.
    assert start[21] == (0, 120)
    hydrate(instance)
    final = totals(instance.progress()[0])
    assert all(done == estimated for done, estimated in final.values())
    # At each node's hydration: every node whose inputs had hydrated had its exact estimate.
    inputs = {0: [], 10: [0], 1: [], 11: [1], 20: [10, 11], 21: [20]}
    for seen in hooks.seen:
        hydrated = {n.lir_id for n in seen.nodes if n.hydrated}
        for lir_id, (done, estimated) in totals(seen).items():
            assert done <= estimated
            if set(inputs[lir_id]) <= hydrated:
                assert estimated == final[lir_id][1]


def test_a_filters_estimate_bounds_its_output_from_above() -> None:
    instance = ComputeInstance(workers=WORKERS)
    plan = lir.Reduce(
        2,
        small_n(),
        (Column(0),),
        (mir.Aggregate("count", None),),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "int8"),
    )
    instance.create_dataflow(index_dataflow("d", plan, {"t": T}, as_of=AS_OF))
    push(instance, "t", rows_t(100), AS_OF)
    instance.step()
    start = totals(instance.progress()[0])
    assert start == {0: (100, 100), 1: (0, 100), 2: (0, 100)}  # the reduce: at most the filter's
    push(instance, "t", [], AS_OF + 1)
    instance.step()
    assert totals(instance.progress()[0]) == {0: (100, 100), 1: (100, 100), 2: (10, 10)}


def test_an_index_imports_estimate_is_the_indexs_records_at_the_as_of() -> None:
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("a", lir.Get(0, "t", types=TYPES), {"t": T}, AS_OF))
    push(instance, "t", [*rows_t(40), (("late", 1), AS_OF + 1, 1)], AS_OF + 2)
    instance.step()
    imported = IndexImport("a_index", "a_view", T, ())
    plan = lir.Reduce(
        1,
        lir.Get(0, "a_view", types=TYPES),
        (),
        (mir.Aggregate("count", None),),
        lir.ReduceKind.ACCUMULABLE,
        types=("int8",),
    )
    reader = index_dataflow("b", plan, {}, as_of=AS_OF, index_imports=[imported])
    instance.create_dataflow(reader)
    progress = next(p for p in instance.progress() if p.dataflow_id == "b")
    # The index holds 41 records; 40 are at or before the as_of.
    assert totals(progress) == {0: (0, 40), 1: (0, 40)}
    instance.step()
    progress = next(p for p in instance.progress() if p.dataflow_id == "b")
    assert progress.hydrated
    assert totals(progress) == {0: (41, 41), 1: (41, 41)}  # the step took the later one too


def test_a_constant_is_estimated_exactly() -> None:
    instance = ComputeInstance(workers=2)
    constant = lir.Constant(0, ((("a", 1), ("b", 2), ("c", 3))), types=TYPES)
    instance.create_dataflow(index_dataflow("d", constant, {}, as_of=AS_OF))
    assert totals(instance.progress()[0]) == {0: (0, 3)}
    instance.step()
    assert totals(instance.progress()[0]) == {0: (3, 3)}
    assert instance.progress()[0].hydrated


def test_a_shared_node_is_one_node_hydrated_once() -> None:
    """``t UNION ALL t`` reading one Get (the plan is a DAG): one node 0, consumed once."""
    hooks = Recorder()
    instance = ComputeInstance(workers=WORKERS, logging=hooks)
    shared = lir.Get(0, "t", types=TYPES)
    instance.create_dataflow(
        index_dataflow("d", lir.Union(1, (shared, shared), types=TYPES), {"t": T}, as_of=AS_OF)
    )
    push(instance, "t", rows_t(30), AS_OF + 1)
    instance.step()
    assert hooks.hydrated_in_order() == [0, 1]
    assert totals(instance.progress()[0]) == {0: (30, 30), 1: (60, 60)}


def test_records_done_only_count_the_hydration() -> None:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    load(instance)
    hydrate(instance)
    hydrated = instance.progress()[0]
    push(instance, "t", [(("k1", 1), AS_OF + 1, 1)], AS_OF + 2)
    push(instance, "u", [], AS_OF + 2)
    instance.step()
    later = instance.progress()[0]
    assert later.nodes == hydrated.nodes
    assert later.records_read == hydrated.records_read + 1


def test_progress_from_another_thread_mid_step_sees_nodes_hydrate_one_by_one() -> None:
    """As the replica's event loop does while the engine thread runs a long hydrating step."""
    count = 300_000
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    push(instance, "t", rows_t(count), AS_OF)
    push(instance, "u", rows_u(count, count // 2), AS_OF)
    instance.step()
    seen: list[DataflowProgress] = []
    stepping = threading.Event()
    stepped = threading.Event()

    def poll() -> None:
        stepping.wait()
        while not stepped.is_set():
            seen.extend(instance.progress())
            time.sleep(0.0005)
        seen.extend(instance.progress())

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for source in ("t", "u"):
            push(instance, source, [], AS_OF + 1)
        stepping.set()
        instance.step()
    finally:
        stepped.set()
        poller.join(timeout=60)
    assert seen[-1].hydrated
    assert seen[-1].nodes_hydrated == 6
    partial = [p for p in seen if 0 < p.nodes_hydrated < p.nodes_total]
    assert partial, f"no call saw a partial hydration in {len(seen)} calls"
    # Monotonic per node and worker, and in total; never more done than estimated.
    done = [p.records_done for p in seen]
    assert done == sorted(done)
    assert done[-1] == seen[-1].records_estimated
    for before, after in itertools.pairwise(seen):
        for a, b in zip(before.nodes, after.nodes, strict=True):
            assert (a.lir_id, a.worker) == (b.lir_id, b.worker)
            assert a.records_done <= b.records_done
            assert a.hydrated <= b.hydrated
            assert b.records_done <= b.records_estimated
    assert seen[-1].records_done == 2 * count + 2 * count + 2 * count + count


def test_the_nodes_of_a_dataflow_that_fails_hydrating_stay_unhydrated() -> None:
    """A cross join past the memory budget fails the step after its inputs' nodes ran."""
    hooks = Recorder()
    instance = ComputeInstance(workers=2, logging=hooks, memory_limit_bytes=16 * MIB)
    ints = (("k", "int8"),)
    get = lir.ArrangeBy(10, lir.Get(0, "t", types=("int8",)), (), types=("int8",))
    cross = lir.Join(20, (get, get), (), lir.JoinKind.DELTA, types=("int8", "int8"))
    instance.create_dataflow(index_dataflow("big", cross, {"t": ints}, as_of=0))
    instance.push("t", persist_updates(ints, [((k,), 0, 1) for k in range(3_000)]), 1)
    instance.step()
    with pytest.raises(LoupeError, match="out of memory"):
        instance.peek("big_index", 0)
    progress = instance.progress()[0]
    assert not progress.hydrated
    assert progress.nodes_hydrated == 0
    assert not any(n.hydrated for n in progress.nodes)
    assert not any(h.hydrated for h in instance.hydration())
    # The nodes that ran were reported hydrated, then not: the last word is unhydrated.
    last: dict[tuple[int, int], bool] = {}
    for event in hooks.events:
        if event[0] == "hydration":
            last[(event[2], event[3])] = event[4]
    assert last
    assert not any(last.values())
    assert [e[2] for e in hooks.events if e[0] == "hydration" and e[4] and e[3] == 0] == [0, 10]
    assert progress.records_done == 6_000  # what they consumed stays counted


def test_without_hydration_logging_nodes_are_not_tracked(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = Recorder()
    instance = ComputeInstance(workers=WORKERS, logging=hooks, hydration_logging=False)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    assert instance.dataflows["d"].tracker is None
    calls: list[str] = []
    for name in ("__init__", "queue", "start", "ran", "fail", "_estimate", "_publish"):
        original = getattr(HydrationTracker, name)

        def counted(*args: object, _original=original, _name=name) -> object:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(HydrationTracker, name, counted)
    load(instance)
    hooks.events.clear()
    hydrate(instance)
    assert calls == []
    progress = instance.progress()[0]
    assert progress.nodes == ()
    assert (progress.records_done, progress.records_estimated) == (0, 0)
    assert progress.hydrated
    assert progress.nodes_hydrated == progress.nodes_total == 6
    assert progress.started_ns is not None
    assert progress.hydration_time_ns is not None
    # The hooks still hear of every node, all at once after the step.
    assert sorted(hooks.hydrated_in_order()) == [0, 1, 10, 11, 20, 21]
    last_run = max(i for i, e in enumerate(hooks.events) if e[0] == "scheduled")
    first_hydrated = min(i for i, e in enumerate(hooks.events) if e[0] == "hydration")
    assert last_run < first_hydrated


# -- snapshots read piece by piece (the replica pushes each as it is read) ---------------------


def min_and_sum_of_join() -> lir.Reduce:
    """Per key of the join of t and u: min and sum of t's n (a retraction matters to a min).
    Nodes 0, 10, 1, 11, 20, 21."""
    return lir.Reduce(
        21,
        join_t_u(),
        (Column(0),),
        (mir.Aggregate("min", Column(1)), mir.Aggregate("sum", Column(1))),
        lir.ReduceKind.HIERARCHICAL,
        types=("text", "int4", "int8"),
    )


def history_t() -> list:
    """t's history before the as_of, in the order a shard's parts hold it: inserts, some of
    them retracted in later parts, one retraction before its insert, a row updated twice."""
    inserts = [((f"k{i}", i), AS_OF - 4, 1) for i in range(60)]
    retractions = [((f"k{i}", i), AS_OF - 2, -1) for i in range(0, 60, 3)]
    early = [(("k1", -5), AS_OF - 3, -1)]  # its insert comes in a later part
    late = [(("k1", -5), AS_OF - 1, 1), (("k2", 7), AS_OF - 1, 2), (("k2", 7), AS_OF, -1)]
    return [*inserts, *early, *retractions, *late]


def chunks(rows: list, size: int) -> list[list]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def hydrated_with(pieces: list[list], expect: int | None) -> ComputeInstance:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(
        index_dataflow("d", min_and_sum_of_join(), {"t": T, "u": T}, as_of=AS_OF)
    )
    push(instance, "u", rows_u(90, 30), AS_OF + 1)
    if expect is not None:
        instance.expect_snapshot("t", expect)
    for piece in pieces:
        push(instance, "t", piece, AS_OF)  # every piece but the last leaves the frontier at it
        assert not instance.step()
        assert not instance.progress()[0].hydrated
    push(instance, "t", [], AS_OF + 1)
    assert instance.step()
    return instance


def test_a_snapshot_pushed_in_pieces_hydrates_to_the_one_piece_result() -> None:
    history = history_t()
    for size in (1, 7, 25):
        whole = hydrated_with([history], None)
        pieces = hydrated_with(chunks(history, size), len(history))
        assert read(pieces, "d_index", AS_OF) == read(whole, "d_index", AS_OF)
        # The same later: an update after the as_of on both.
        for instance in (whole, pieces):
            push(instance, "t", [(("k3", -1), AS_OF + 1, 1), (("k4", 4), AS_OF + 1, -1)], AS_OF + 2)
            push(instance, "u", [], AS_OF + 2)
            instance.step()
        assert read(pieces, "d_index", AS_OF + 1) == read(whole, "d_index", AS_OF + 1)
        # Nothing counted twice: every node consumed the same in both.
        assert totals(pieces.progress()[0]) == totals(whole.progress()[0])
    # The retractions cancelled (u has every key 3 times).
    rows = {row[0]: row for row in read(hydrated_with([history], None), "d_index", AS_OF)}
    assert "k0" not in rows  # t's k0 was retracted: the join has nothing
    assert rows["k1"][1:] == (1, 3)  # (k1, -5) retracted before it was inserted: gone
    assert rows["k2"][1:] == (2, (2 + 7) * 3)  # (k2, 7) twice, then once less


def test_a_sources_get_counts_the_snapshot_as_it_is_read() -> None:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    assert instance.progress()[0].started_ns is None
    instance.expect_snapshot("t", 150)  # an upper bound: t's parts hold 150, 120 remain
    instance.expect_snapshot("u", 90)
    # Reading started: so did the hydration (its rate counts the reading).
    started = instance.progress()[0].started_ns
    assert started is not None
    start = totals(instance.progress()[0])
    assert start[0] == (0, 150)
    assert start[10] == (0, 150)  # downstream estimates start from the expected sizes
    assert start[1] == (0, 90)
    assert start[20] == (0, 240)
    seen = [instance.progress()[0]]
    for piece in chunks(rows_t(120), 40):
        push(instance, "t", piece, AS_OF)
        instance.step()
        seen.append(instance.progress()[0])
    # Reading is the Get's work: done rises piece by piece, the estimate stays the bound.
    assert [totals(p)[0] for p in seen] == [(0, 150), (40, 150), (80, 150), (120, 150)]
    assert [totals(p)[10][0] for p in seen] == [0, 0, 0, 0]  # the arrangement waits for the step
    for piece in chunks(rows_u(90, 30), 45):
        push(instance, "u", piece, AS_OF)
        seen.append(instance.progress()[0])
    assert totals(seen[-1])[1] == (90, 90)
    assert not seen[-1].hydrated
    hydrate(instance)
    seen.append(instance.progress()[0])
    final = totals(seen[-1])
    # The step did not count the snapshots again; estimates are exact once hydrated.
    assert final[0] == (120, 120)
    assert final[1] == (90, 90)
    assert all(done == estimated for done, estimated in final.values())
    assert final == totals(hydrated_in_one_piece())
    assert seen[-1].started_ns == started
    for before, after in itertools.pairwise(seen):
        assert before.records_done <= after.records_done
        for a, b in zip(before.nodes, after.nodes, strict=True):
            assert a.records_done <= b.records_done <= b.records_estimated


def hydrated_in_one_piece() -> DataflowProgress:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    load(instance)
    hydrate(instance)
    return instance.progress()[0]


def test_a_snapshot_larger_than_expected_is_estimated_by_what_was_read() -> None:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("d", sum_of_join(), {"t": T, "u": T}, as_of=AS_OF))
    instance.expect_snapshot("t", 50)
    push(instance, "t", rows_t(120), AS_OF)
    assert totals(instance.progress()[0])[0] == (120, 120)
    # An expectation for a source not read, or once the step ran, changes nothing.
    instance.expect_snapshot("nope", 10)
    load(instance, t=0)
    hydrate(instance)
    hydrated = totals(instance.progress()[0])
    instance.expect_snapshot("t", 10_000)
    assert totals(instance.progress()[0]) == hydrated


def test_a_dataflow_created_while_its_source_is_read_learns_the_expected_size() -> None:
    instance = ComputeInstance(workers=WORKERS)
    instance.create_dataflow(index_dataflow("a", lir.Get(0, "t", types=TYPES), {"t": T}, AS_OF))
    instance.expect_snapshot("t", 200)
    push(instance, "t", rows_t(50), AS_OF)
    instance.create_dataflow(index_dataflow("b", small_n(), {"t": T}, AS_OF))
    later = next(p for p in instance.progress() if p.dataflow_id == "b")
    assert totals(later)[0] == (50, 200)
    assert totals(later)[1] == (0, 200)
