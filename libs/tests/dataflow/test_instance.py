"""The engine's contract: frontiers, peeks, compaction, sinks, index imports, errors, hydration, logging."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pyarrow as pa
import pytest

from loupe.common.errors import LoupeError, SqlState
from loupe.dataflow import ComputeInstance, Finishing, LoggingHooks, NotReady
from loupe.dataflow.instance import FEED_HISTORY_MS
from loupe.dataflow.testing import index_dataflow, persist_updates, read
from loupe.plan import lir, mir
from loupe.plan.dataflow import IndexExport, IndexImport, PersistSink, SubscribeSink
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal

T = (("k", "text"), ("n", "int4"))
TYPES = ("text", "int4")


def get(node_id: int = 0) -> lir.Get:
    return lir.Get(node_id, "t", types=TYPES)


def count_by_key() -> lir.Reduce:
    return lir.Reduce(
        1,
        get(),
        (Column(0),),
        (mir.Aggregate("sum", Column(1)),),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "int8"),
    )


def push(instance: ComputeInstance, updates: list, upper: int, source: str = "t") -> None:
    instance.push(source, persist_updates(T, updates), upper)
    instance.step()


def rows_of(table: pa.Table) -> Counter:
    """(data columns..., mz_timestamp, mz_diff) per update."""
    return Counter(tuple(r.values()) for r in table.to_pylist())


def test_peeks_wait_for_the_frontier_and_refuse_compacted_times() -> None:
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("d", get(), {"t": T}, as_of=2))
    assert instance.write_frontier("d_index") == 2
    push(instance, [(("a", 1), 1, 1)], upper=4)
    assert instance.write_frontier("d_index") == 4
    assert instance.write_frontier("d_view") == 4
    with pytest.raises(NotReady):
        instance.peek("d_index", 4)
    push(instance, [(("b", 2), 4, 1), (("a", 1), 5, -1)], upper=6)
    assert read(instance, "d_index", 3) == Counter({("a", 1): 1})
    assert read(instance, "d_index", 4) == Counter({("a", 1): 1, ("b", 2): 1})
    assert read(instance, "d_index", 5) == Counter({("b", 2): 1})

    instance.allow_compaction("d_index", 5)
    assert read(instance, "d_index", 5) == Counter({("b", 2): 1})
    with pytest.raises(LoupeError, match="not valid"):
        instance.peek("d_index", 4)


def test_peek_applies_mfp_and_finishing() -> None:
    """Filter n > 1, append n * 10, ORDER BY n DESC, OFFSET 1 LIMIT 2, project (k, n * 10)."""
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("d", get(), {"t": T}, as_of=0))
    push(
        instance, [((k, n), 0, 1) for k, n in [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]], 1
    )
    mfp = MapFilterProject(
        2,
        (Call("mul", (Column(1), Literal(10, "int4"))),),
        (Call("gt", (Column(1), Literal(1, "int4"))),),
        (0, 1, 2),
    )
    finishing = Finishing((mir.OrderKey(1, desc=True),), limit=2, offset=1, project=(0, 2))
    result = instance.peek("d_index", 0, mfp, finishing)
    assert result.rows() == [("d", 40), ("c", 30)]
    assert result.types == ("text", "int4")


def test_duplicate_rows_are_returned_once_per_occurrence() -> None:
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("d", get(), {"t": T}, as_of=0))
    push(instance, [(("a", 1), 0, 3)], 1)
    assert instance.peek("d_index", 0).rows() == [("a", 1)] * 3


def test_persist_sink_batches_cover_every_interval_once() -> None:
    """Contiguous [lower, upper) batches from the as_of, the first with the snapshot, consolidated."""
    instance = ComputeInstance(workers=3)
    sink = PersistSink("mv", "d_view", "shard-mv", (("k", "text"), ("n", "int8")))
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=3, sinks=[sink]))
    push(instance, [(("a", 1), 0, 1), (("a", 2), 2, 1), (("b", 5), 3, 1)], upper=4)
    push(instance, [(("a", 4), 4, 1), (("a", 4), 5, -1)], upper=6)
    push(instance, [], upper=7)
    batches = instance.take_sink_batches()
    assert [(b.sink_id, b.lower, b.upper) for b in batches] == [
        ("mv", 3, 4),
        ("mv", 4, 6),
        ("mv", 6, 7),
    ]
    # Only the first holds the snapshot (the contents through the as_of).
    assert [b.snapshot for b in batches] == [True, False, False]
    assert rows_of(batches[0].updates) == Counter({("a", 3, 3, 1): 1, ("b", 5, 3, 1): 1})
    assert rows_of(batches[1].updates) == Counter(
        {("a", 3, 4, -1): 1, ("a", 7, 4, 1): 1, ("a", 7, 5, -1): 1, ("a", 3, 5, 1): 1}
    )
    assert batches[2].updates.num_rows == 0
    assert batches[0].updates.column_names == ["k", "n", "mz_timestamp", "mz_diff"]
    assert instance.take_sink_batches() == []


def test_subscribe_without_snapshot_starts_after_the_as_of() -> None:
    instance = ComputeInstance()
    sinks = [SubscribeSink("sub", "d_view", snapshot=False), SubscribeSink("all", "d_view")]
    instance.create_dataflow(index_dataflow("d", get(), {"t": T}, as_of=1, sinks=sinks))
    push(instance, [(("a", 1), 0, 1), (("b", 2), 2, 1)], upper=3)
    batches = {b.sink_id: b for b in instance.take_sink_batches()}
    assert rows_of(batches["sub"].updates) == Counter({("b", 2, 2, 1): 1})
    assert rows_of(batches["all"].updates) == Counter({("a", 1, 1, 1): 1, ("b", 2, 2, 1): 1})


def test_index_import_reads_the_exporters_arrangement() -> None:
    """B sums A's index; created after A advanced, B starts from A's state at its as_of."""
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("a", get(), {"t": T}, as_of=0))
    push(instance, [(("x", 1), 0, 1), (("y", 2), 1, 1)], upper=2)
    imported = IndexImport("a_index", "a_view", (("k", "text"), ("n", "int4")), ())
    plan = lir.Reduce(
        1,
        lir.Get(0, "a_view", types=TYPES),
        (),
        (mir.Aggregate("sum", Column(1)),),
        lir.ReduceKind.ACCUMULABLE,
        types=("int8",),
    )
    instance.create_dataflow(index_dataflow("b", plan, {}, as_of=1, index_imports=[imported]))
    assert "a_view" not in instance.source_ids()
    instance.step()
    assert read(instance, "b_index", 1) == Counter({(3,): 1})
    push(instance, [(("z", 10), 2, 1), (("x", 1), 3, -1)], upper=4)
    assert instance.write_frontier("b_index") == 4
    assert read(instance, "b_index", 2) == Counter({(13,): 1})
    assert read(instance, "b_index", 3) == Counter({(12,): 1})


def test_a_dataflow_created_later_reads_what_its_source_already_holds() -> None:
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("a", get(), {"t": T}, as_of=0))
    push(instance, [(("x", 1), 0, 1), (("y", 2), 1, 1), (("x", 1), 2, -1)], upper=3)
    instance.create_dataflow(index_dataflow("b", count_by_key(), {"t": T}, as_of=2))
    instance.step()
    assert read(instance, "b_index", 2) == Counter({("y", 2): 1})
    assert instance.source_ids() == {"t": 0}


def test_a_dataflow_older_than_its_sources_log_starts_at_the_logs_since() -> None:
    """Data already advanced past a new dataflow's as_of must not be read as of that as_of;
    within FEED_HISTORY_MS of the readers' frontier, it still can be."""
    later = FEED_HISTORY_MS + 5
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("a", get(), {"t": T}, as_of=1))
    push(instance, [(("x", 1), 1, 1)], upper=2)
    push(instance, [(("y", 2), later, 1)], upper=later + 1)
    instance.create_dataflow(index_dataflow("b", get(), {"t": T}, as_of=2))
    instance.step()
    with pytest.raises(LoupeError, match="not valid"):
        instance.peek("b_index", 2)
    assert read(instance, "b_index", later) == Counter({("x", 1): 1, ("y", 2): 1})
    # A read chosen a moment ago (behind the frontier, within the history kept) starts there.
    instance.create_dataflow(index_dataflow("c", get(), {"t": T}, as_of=later - 1))
    instance.step()
    assert read(instance, "c_index", later - 1) == Counter({("x", 1): 1})
    assert read(instance, "c_index", later) == Counter({("x", 1): 1, ("y", 2): 1})


def test_a_second_dataflow_on_a_source_stepped_before_any_data() -> None:
    """A replayed history creates dataflows after steps that saw no data yet."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("a", get(), {"t": T}, as_of=3))
    instance.step()
    instance.create_dataflow(index_dataflow("b", count_by_key(), {"t": T}, as_of=3))
    push(instance, [(("x", 1), 3, 1)], upper=4)
    assert read(instance, "b_index", 3) == Counter({("x", 1): 1})


def test_an_index_straight_on_a_source_reads_all_its_columns() -> None:
    instance = ComputeInstance()
    desc = index_dataflow("a", get(), {"t": T}, as_of=0)
    on_source = dataclasses.replace(
        desc, objects_to_build=(), index_exports=(IndexExport("t_index", "t", (0,)),)
    )
    instance.create_dataflow(on_source)
    (before,) = instance.progress()
    push(instance, [(("x", 1), 0, 1)], upper=1)
    assert read(instance, "t_index", 0) == Counter({("x", 1): 1})
    # Its one plan node (EXPLAIN's `Get::PassArrangements`, node 0) reports hydration
    # like any other: not hydrated before the data, hydrated after, exported as t_index.
    (after,) = instance.progress()
    assert [(n.lir_id, n.hydrated) for n in before.nodes] == [(0, False)]
    assert [(n.lir_id, n.hydrated) for n in after.nodes] == [(0, True)]
    assert after.hydrated
    assert after.export_ids == ("t_index",)


def divide_by_n() -> lir.Mfp:
    mfp = MapFilterProject(2, (Call("div", (Literal(10, "int4"), Column(1))),), (), (0, 2))
    return lir.Mfp(1, get(), mfp, types=("text", "int4"))


def test_division_by_zero_is_an_error_of_the_collection_not_a_crash() -> None:
    instance = ComputeInstance(workers=2)
    sink = PersistSink("mv", "d_view", "shard-mv", (("k", "text"), ("q", "int4")))
    instance.create_dataflow(index_dataflow("d", divide_by_n(), {"t": T}, as_of=0, sinks=[sink]))
    push(instance, [(("a", 2), 0, 1), (("b", 0), 1, 1)], upper=2)
    assert read(instance, "d_index", 0) == Counter({("a", 5): 1})
    with pytest.raises(LoupeError) as raised:
        instance.peek("d_index", 1)
    assert raised.value.code == SqlState.DIVISION_BY_ZERO
    assert set(instance.errors()) == {"d_index", "mv"}
    assert instance.errors()["d_index"].code == SqlState.DIVISION_BY_ZERO
    batches = instance.take_sink_batches()
    assert batches[-1].error is not None
    assert batches[-1].error.code == SqlState.DIVISION_BY_ZERO

    push(instance, [(("b", 0), 2, -1)], upper=3)
    assert read(instance, "d_index", 2) == Counter({("a", 5): 1})
    assert instance.errors() == {}
    assert instance.take_sink_batches()[-1].error is None
    with pytest.raises(LoupeError):
        instance.peek("d_index", 1)


def test_a_step_that_raises_stops_its_dataflow_and_loses_no_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reads of the failed dataflow are XX000, never an answer missing the step's updates;
    the step's input stays queued and other dataflows go on."""
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=0))
    instance.create_dataflow(index_dataflow("e", get(), {"t": T}, as_of=0))
    push(instance, [(("a", 1), 0, 1)], upper=1)
    assert read(instance, "d_index", 0) == Counter({("a", 1): 1})
    reduce_operator = next(o for o in instance.dataflows["d"].operators if "Reduce" in o.name)

    def broken(lower: int, upper: int) -> None:
        raise RuntimeError("an engine bug")

    monkeypatch.setattr(reduce_operator, "run", broken)
    push(instance, [(("a", 2), 1, 1)], upper=2)
    failed = instance.dataflows["d"]
    assert failed.frontier == 1  # it did not pretend to have processed time 1
    with pytest.raises(LoupeError) as raised:
        instance.peek("d_index", 1)
    assert raised.value.code == SqlState.INTERNAL_ERROR
    assert "incident" in raised.value.message
    with pytest.raises(LoupeError):
        instance.peek("d_index", 0)  # not even the old time: the dataflow is not trusted
    assert instance.errors()["d_index"].code == SqlState.INTERNAL_ERROR
    queued = failed.queues["t"]
    assert sum(frame.height for frame in queued.ok) == 1  # the update waits, not dropped
    assert read(instance, "e_index", 1) == Counter({("a", 1): 1, ("a", 2): 1})


def test_errors_flow_through_stateful_operators_and_index_imports() -> None:
    instance = ComputeInstance()
    instance.create_dataflow(index_dataflow("a", divide_by_n(), {"t": T}, as_of=0))
    imported = IndexImport("a_index", "a_view", (("k", "text"), ("q", "int4")), ())
    plan = lir.Reduce(
        1,
        lir.Get(0, "a_view", types=("text", "int4")),
        (Column(0),),
        (mir.Aggregate("max", Column(1)),),
        lir.ReduceKind.HIERARCHICAL,
        types=("text", "int4"),
    )
    instance.create_dataflow(index_dataflow("b", plan, {}, as_of=0, index_imports=[imported]))
    push(instance, [(("a", 0), 0, 1)], upper=1)
    with pytest.raises(LoupeError, match="division by zero"):
        instance.peek("b_index", 0)


def test_hydration_is_reported_per_export_lir_node_and_worker() -> None:
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=5))
    before = instance.hydration()
    assert {(h.object_id, h.lir_id, h.worker_id) for h in before} == {
        ("d_index", lir_id, worker) for lir_id in (0, 1) for worker in (0, 1)
    }
    assert not any(h.hydrated for h in before)
    push(instance, [(("a", 1), 3, 1)], upper=5)
    assert not any(h.hydrated for h in instance.hydration())
    push(instance, [], upper=6)
    assert all(h.hydrated for h in instance.hydration())
    progress = instance.progress()[0]
    assert (progress.hydrated, progress.nodes_total, progress.records_read) == (True, 2, 1)


class Recorder(LoggingHooks):
    enabled = True

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def dataflow_created(self, *args: object) -> None:
        self.events.append(("dataflow_created", *args))

    def operator_created(self, *args: object) -> None:
        self.events.append(("operator_created", *args))

    def operator_dropped(self, *args: object) -> None:
        self.events.append(("operator_dropped", *args))

    def lir_mapping(self, *args: object) -> None:
        self.events.append(("lir_mapping", *args))

    def scheduled(self, *args: object) -> None:
        self.events.append(("scheduled", *args))

    def arrangement_size(self, *args: object) -> None:
        self.events.append(("arrangement_size", *args))

    def frontier(self, *args: object) -> None:
        self.events.append(("frontier", *args))

    def hydration(self, *args: object) -> None:
        self.events.append(("hydration", *args))

    def channel_created(self, *args: object) -> None:
        self.events.append(("channel_created", *args))

    def messages(self, *args: object, to_worker: int | None = None) -> None:
        self.events.append(("messages", *args, to_worker))

    def of(self, kind: str) -> list[tuple]:
        return [e[1:] for e in self.events if e[0] == kind]


def test_logging_hooks_see_operators_scheduling_arrangements_frontiers_and_hydration() -> None:
    hooks = Recorder()
    instance = ComputeInstance(workers=2, logging=hooks)
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=0))
    created = hooks.of("operator_created")
    operator_ids = {e[1] for e in created}
    assert {e[0] for e in created} == {0, 1}
    assert all(e[2][0] == 0 for e in created)  # address: (dataflow index, operator index)
    mapping = {e[1]: e for e in hooks.of("lir_mapping")}
    assert set(mapping) == {0, 1}
    assert mapping[1][2] == "Reduce::Accumulable"
    assert mapping[0][3] == 1
    assert all(set(range(m[5], m[6])) <= operator_ids for m in mapping.values())
    assert {e[3] for e in hooks.of("hydration")} == {False}
    # Source -> Get -> Reduce -> Index: three channels per worker, the Reduce's an exchange.
    channels = [e for e in hooks.of("channel_created") if e[0] == 0]
    assert len(channels) == 3
    assert sorted(e[7] for e in channels) == ["exchange", "pipeline", "pipeline"]

    push(instance, [(("a", 1), 0, 1), (("b", 1), 0, 1)], upper=1)
    sent: dict[int, int] = {}
    for _, channel, records, _, _ in hooks.of("messages"):
        sent[channel] = sent.get(channel, 0) + records
    into_reduce = next(e[1] for e in channels if e[7] == "exchange")
    assert sent[into_reduce] == 2  # both updates reached the Reduce
    assert {e[1] for e in hooks.of("scheduled")} <= operator_ids
    names = {e[1]: e[3] for e in created}
    sizes = [e for e in hooks.of("arrangement_size") if e[2] > 0]
    reduce_records = [e[2] for e in sizes if names[e[1]] == "Reduce::Accumulable"]
    assert sum(reduce_records) == 2  # one state row per key, spread over the workers
    index_records = [e[2] for e in sizes if names[e[1]] == "Index(d_index)"]
    assert index_records == [2]
    assert ("d_index", 1) in {(e[1], e[2]) for e in hooks.of("frontier")}
    assert {(e[0], e[2], e[3]) for e in hooks.of("hydration") if e[3]} == {
        (w, lir_id, True) for w in (0, 1) for lir_id in (0, 1)
    }

    instance.drop("d_index")
    assert {e[1] for e in hooks.of("operator_dropped")} == operator_ids
    assert instance.source_ids() == {}


class Exploding(LoggingHooks):
    """Logging off: any call is a bug."""

    def __getattribute__(self, name: str) -> object:
        if name == "enabled":
            return False
        raise AssertionError(f"hook {name} called while logging is off")


def test_logging_off_calls_no_hooks() -> None:
    instance = ComputeInstance(workers=2, logging=Exploding())
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=0))
    push(instance, [(("a", 1), 0, 1)], upper=1)
    instance.drop("d_index")


def test_dropping_the_last_export_drops_the_dataflow() -> None:
    instance = ComputeInstance()
    sink = SubscribeSink("sub", "d_view")
    instance.create_dataflow(index_dataflow("d", get(), {"t": T}, as_of=0, sinks=[sink]))
    instance.drop("d_index")
    assert instance.source_ids() == {"t": 0}
    instance.drop("sub")
    assert instance.source_ids() == {}
    with pytest.raises(LoupeError):
        instance.write_frontier("d_view")


def test_create_dataflow_is_idempotent_and_refuses_what_it_cannot_render() -> None:
    instance = ComputeInstance()
    desc = index_dataflow("d", get(), {"t": T}, as_of=0)
    instance.create_dataflow(desc)
    instance.create_dataflow(desc)
    push(instance, [(("a", 1), 0, 1)], upper=1)
    assert read(instance, "d_index", 0) == Counter({("a", 1): 1})
    flat = lir.FlatMap(
        1,
        get(),
        "generate_subscripts",
        (Column(1),),
        MapFilterProject.identity(3),
        types=(*TYPES, "int8"),
    )
    with pytest.raises(LoupeError) as raised:
        instance.create_dataflow(index_dataflow("f", flat, {"t": T}, as_of=0))
    assert raised.value.code == SqlState.FEATURE_NOT_SUPPORTED


def test_generate_series_flat_maps_each_row_and_retracts_with_it() -> None:
    """A row per value from 1 to n; retracting the input row retracts its values."""
    instance = ComputeInstance(workers=2)
    flat = lir.FlatMap(
        1,
        get(),
        "generate_series",
        (Literal(1, "int4"), Column(1)),
        MapFilterProject.identity(3),
        types=(*TYPES, "int4"),
    )
    instance.create_dataflow(index_dataflow("g", flat, {"t": T}, as_of=0))
    push(instance, [(("a", 2), 0, 1), (("b", 0), 0, 1), (("c", None), 0, 1)], upper=1)
    assert read(instance, "g_index", 0) == Counter({("a", 2, 1): 1, ("a", 2, 2): 1})
    push(instance, [(("a", 2), 1, -1), (("d", 1), 1, 1)], upper=2)
    assert read(instance, "g_index", 1) == Counter({("d", 1, 1): 1})


def test_a_later_reader_gets_the_columns_earlier_readers_did_not_convert() -> None:
    """The first dataflow reads only k (n is never converted for it); the second reads n too."""
    instance = ComputeInstance()
    only_k = lir.Mfp(1, get(), MapFilterProject(2, projection=(0,)), types=("text",))
    instance.create_dataflow(index_dataflow("a", only_k, {"t": T}, as_of=0))
    push(instance, [(("x", 1), 0, 1), (("y", 2), 0, 1)], upper=1)
    assert read(instance, "a_index", 0) == Counter({("x",): 1, ("y",): 1})
    instance.create_dataflow(index_dataflow("b", get(), {"t": T}, as_of=0))
    push(instance, [(("z", 3), 1, 1)], upper=2)
    assert read(instance, "b_index", 1) == Counter({("x", 1): 1, ("y", 2): 1, ("z", 3): 1})


def test_footprint_counts_arranged_and_logged_records() -> None:
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(index_dataflow("d", count_by_key(), {"t": T}, as_of=0))
    push(instance, [(("a", 1), 0, 1), (("a", 2), 0, 1), (("b", 3), 0, 1)], upper=1)
    footprint = instance.footprint()
    # Two keys in the reduce's state, two rows in the index; three updates logged.
    assert footprint.arranged_records == 4
    assert footprint.logged_records == 3
    assert footprint.arranged_bytes > 0
    assert footprint.logged_bytes > 0


def test_point_peeks_on_the_index_key_read_only_matching_rows() -> None:
    """WHERE n = 2 on an index on n: the key lookup answers, at every time, retractions included."""
    instance = ComputeInstance()
    desc = index_dataflow("d", get(), {"t": T}, as_of=0)
    desc = dataclasses.replace(desc, index_exports=(IndexExport("d_index", "d_view", (1,)),))
    instance.create_dataflow(desc)
    rows = [((f"k{i}", i % 50), 0, 1) for i in range(500)]
    push(instance, rows, upper=1)
    push(instance, [(("k2", 2), 1, -1), (("new", 2), 1, 1)], upper=2)

    def where_n_is(time: int, literal: Literal, reversed_args: bool = False) -> Counter:
        args = (literal, Column(1)) if reversed_args else (Column(1), literal)
        mfp = MapFilterProject(2, predicates=(Call("eq", args),), projection=(0,))
        return Counter(instance.peek("d_index", time, mfp).rows())

    assert where_n_is(0, Literal(2, "int8")) == Counter({(f"k{i}",): 1 for i in range(2, 500, 50)})
    expected = Counter({(f"k{i}",): 1 for i in range(52, 500, 50)} | {("new",): 1})
    assert where_n_is(1, Literal(2, "int4"), reversed_args=True) == expected
    assert where_n_is(1, Literal(2.5, "float8")) == Counter()
    export = instance.indexes["d_index"]
    assert export.ok._indexes, "the peek should have used the key index"
