"""The engine's logging through a ``LogCollector``: every log variant fed with measured values.

Real dataflows over real data on several workers; each test checks a log's
values against what the engine actually holds or did.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

import pytest

from loupe.common.errors import LoupeError
from loupe.dataflow import ComputeInstance
from loupe.dataflow.batches import concat
from loupe.dataflow.instance import QUEUE_WORKER, TRACE_WORKER
from loupe.dataflow.testing import index_dataflow, persist_updates
from loupe.introspection.collector import LOGGING_NAME, LOGGING_OPERATOR, LogCollector, Row
from loupe.introspection.logs import BY_NAME
from loupe.plan import lir, mir
from loupe.plan.dataflow import IndexImport
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Column, Literal

T = (("k", "text"), ("n", "int4"))
U = (("k", "text"), ("m", "int4"))
TYPES = ("text", "int4")
WORKERS = 3


def get(name: str = "t", node_id: int = 0) -> lir.Get:
    return lir.Get(node_id, name, types=TYPES)


def distinct_rows() -> lir.Threshold:
    """Threshold exchanges the very rows it reads (by the whole row): no combining first."""
    return lir.Threshold(1, get(), types=TYPES)


def sum_by_key() -> lir.Reduce:
    return lir.Reduce(
        1,
        get(),
        (Column(0),),
        (mir.Aggregate("sum", Column(1)),),
        lir.ReduceKind.ACCUMULABLE,
        types=("text", "int8"),
    )


def join_t_u() -> lir.Join:
    return lir.Join(
        3,
        (get("t", 0), get("u", 1)),
        ((Column(0), Column(2)),),
        lir.JoinKind.LINEAR,
        types=(*TYPES, *TYPES),
    )


def failing_division() -> lir.Mfp:
    """n / (n - 1): a row with n = 1 is an error."""
    quotient = Call("div", (Column(1), Call("sub", (Column(1), Literal(1, "int4")))))
    return lir.Mfp(1, get(), MapFilterProject(2, (quotient,), (), (0, 2)), types=TYPES)


class Engine:
    """A ``ComputeInstance`` on ``WORKERS`` workers logging into a collector, ticked on demand."""

    def __init__(self, workers: int = WORKERS, log_logging: bool = False) -> None:
        self.collector = LogCollector(workers, log_logging=log_logging)
        self.instance = ComputeInstance(workers=workers, logging=self.collector)
        self.time = 0

    def push(self, source: str, updates: list, upper: int) -> None:
        columns = T if source == "t" else U
        self.instance.push(source, persist_updates(columns, updates), upper)
        self.instance.step()

    def state(self, log: str) -> Mapping[Row, int]:
        """``log``'s state after a tick."""
        self.time += 1
        self.collector.tick(self.time)
        return dict(self.collector.state_rows()[log])

    def names(self) -> dict[int, str]:
        return {row[0]: row[2] for row in self.state("mz_dataflow_operators_per_worker")}

    def operator(self, name: str) -> int:
        return next(i for i, n in self.names().items() if n == name)

    def per_worker(self, log: str, operator_id: int) -> dict[int, int]:
        """A count log keyed (operator, worker): its value per worker."""
        return {row[1]: count for row, count in self.state(log).items() if row[0] == operator_id}


def rows(count: int) -> list:
    return [((f"k{i}", i), 0, 1) for i in range(count)]


def test_scheduling_is_measured_per_worker_and_only_where_there_is_work() -> None:
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    # One row: the import spreads it to worker 0 alone.
    engine.push("t", [(("a", 1), 0, 1)], upper=1)
    source = engine.operator("Source(t)")
    reduce = engine.operator("Reduce::Accumulable")
    elapsed = engine.state("mz_scheduling_elapsed_raw")
    assert set(engine.per_worker("mz_scheduling_elapsed_raw", source)) == {0}
    # The Reduce combined the row on worker 0, sent it to the key's owner, which summed it.
    owner = next(w for w, n in engine.per_worker("mz_arrangement_records_raw", reduce).items() if n)
    assert set(engine.per_worker("mz_scheduling_elapsed_raw", reduce)) == {0, owner}
    assert all(ns > 0 for ns in elapsed.values())
    # One run per worker that worked, each in the bucket of its duration.
    histogram = engine.state("mz_compute_operator_durations_histogram_raw")
    for (operator_id, worker), ns in elapsed.items():
        buckets = {r[2]: c for r, c in histogram.items() if r[:2] == (operator_id, worker)}
        assert sum(buckets.values()) == 1
        (bucket,) = buckets
        assert bucket // 2 < ns <= bucket

    # Many rows: every worker has its share, and the times add up over runs.
    engine.push("t", rows(3000), upper=2)
    after = engine.per_worker("mz_scheduling_elapsed_raw", reduce)
    assert set(after) == set(range(WORKERS))
    assert after[owner] > elapsed[(reduce, owner)]
    runs: Counter[int] = Counter()
    for row, count in engine.state("mz_compute_operator_durations_histogram_raw").items():
        if row[0] == reduce:
            runs[row[1]] += count
    assert runs[owner] == 2


def exchange_counts(engine: Engine, channel: int) -> dict[tuple[int, int], int]:
    return {
        (row[1], row[2]): count
        for row, count in engine.state("mz_message_counts_sent_raw").items()
        if row[0] == channel
    }


def test_message_counts_say_which_worker_sent_how_many_rows_to_which() -> None:
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", distinct_rows(), {"t": T}, as_of=0))
    engine.push("t", rows(300), upper=1)
    names = engine.names()
    channels = {
        row[0]: row for row in engine.state("mz_dataflow_channels_per_worker") if row[1] == 0
    }
    dataflow = engine.instance.dataflows["d"]
    local = {k: names[op] for op, k in dataflow.local.items()}
    (into_threshold,) = [c for c, r in channels.items() if local[r[4]] == "Threshold"]
    assert channels[into_threshold][6] == "exchange"
    sent = exchange_counts(engine, into_threshold)
    threshold = next(o for o in dataflow.operators if o.name == "Threshold")
    source = threshold.inputs[0]
    # What each worker sent is its batch; what each received is what it now holds.
    for worker in range(WORKERS):
        from_worker = sum(n for (f, _), n in sent.items() if f == worker)
        assert from_worker == source.ok[worker].height
        to_worker = sum(n for (_, t), n in sent.items() if t == worker)
        assert to_worker == sum(s.records for s in threshold.spines()[worker])
    assert sum(sent.values()) == 300
    assert any(f != t for f, t in sent)  # rows really crossed between workers
    for log in (
        "mz_message_counts_received_raw",
        "mz_message_batch_counts_sent_raw",
        "mz_message_batch_counts_received_raw",
    ):
        counted = {(r[1], r[2]) for r in engine.state(log) if r[0] == into_threshold}
        assert counted == set(sent)
    received = {
        (r[1], r[2]): n
        for r, n in engine.state("mz_message_counts_received_raw").items()
        if r[0] == into_threshold
    }
    assert received == sent
    # A pipeline stays within each worker.
    pipelines = [c for c, r in channels.items() if r[6] == "pipeline"]
    for channel in pipelines:
        assert all(f == t for f, t in exchange_counts(engine, channel))
    # Counts add up over steps.
    engine.push("t", [(("k0", 0), 1, -1)], upper=2)
    assert sum(exchange_counts(engine, into_threshold).values()) == 301


def test_arrangements_are_what_each_worker_holds_and_the_index_is_shared() -> None:
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    engine.push("t", rows(1000) + rows(1000), upper=1)
    dataflow = engine.instance.dataflows["d"]
    reduce = next(o for o in dataflow.operators if o.name == "Reduce::Accumulable")
    records = engine.per_worker("mz_arrangement_records_raw", reduce.operator_id)
    sizes = engine.per_worker("mz_arrangement_heap_size_raw", reduce.operator_id)
    batches = engine.per_worker("mz_arrangement_batches_raw", reduce.operator_id)
    for worker, spines in enumerate(reduce.spines()):
        assert records.get(worker, 0) == sum(s.records for s in spines)
        assert sizes.get(worker, 0) == sum(s.size for s in spines)
        assert batches.get(worker, 0) == sum(len(s.batches) for s in spines)
    assert sum(records.values()) == 1000  # one state row per key
    assert len([w for w, n in records.items() if n]) == WORKERS
    assert engine.per_worker("mz_arrangement_heap_capacity_raw", reduce.operator_id) == sizes
    assert engine.per_worker("mz_arrangement_heap_allocations_raw", reduce.operator_id) == batches

    index = dataflow.index_exports["d_index"]
    assert engine.per_worker("mz_arrangement_records_raw", index.operator_id) == {
        TRACE_WORKER: index.ok.records
    }
    assert index.ok.records == 1000
    assert engine.per_worker("mz_arrangement_heap_size_raw", index.operator_id) == {
        TRACE_WORKER: index.ok.size
    }
    sharing = "mz_arrangement_sharing_raw"
    assert engine.per_worker(sharing, index.operator_id) == {TRACE_WORKER: 1}
    assert engine.per_worker(sharing, reduce.operator_id) == dict.fromkeys(range(WORKERS), 1)

    # Two dataflows read the index: three operators share its arrangement.
    for reader in ("r1", "r2"):
        imported = IndexImport("d_index", "d_view", (("k", "text"), ("s", "int8")), ())
        plan = lir.Get(0, "d_view", types=("text", "int8"))
        engine.instance.create_dataflow(index_dataflow(reader, plan, {}, 0, [imported]))
    assert engine.per_worker(sharing, index.operator_id) == {TRACE_WORKER: 3}
    engine.instance.drop("r1_index")
    assert engine.per_worker(sharing, index.operator_id) == {TRACE_WORKER: 2}


def test_queued_updates_are_the_batcher_of_their_import() -> None:
    """A join waits for both inputs: what ``t`` sent meanwhile waits in the import's queue."""
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", join_t_u(), {"t": T, "u": U}, as_of=0))
    engine.push("t", rows(500), upper=1)
    source = engine.operator("Source(t)")
    queue = engine.instance.dataflows["d"].queues["t"]
    held = concat(queue.ok, queue.ok[0])
    assert engine.per_worker("mz_arrangement_batcher_records_raw", source) == {QUEUE_WORKER: 500}
    assert engine.per_worker("mz_arrangement_batcher_size_raw", source) == {
        QUEUE_WORKER: int(held.estimated_size())
    }
    assert engine.per_worker("mz_arrangement_batcher_allocations_raw", source) == {
        QUEUE_WORKER: len(queue.ok)
    }
    engine.push("u", [(("k1", 7), 0, 1)], upper=1)
    assert engine.per_worker("mz_arrangement_batcher_records_raw", source) == {}
    # The join's arrangements: the 500 rows of t and the one of u, spread by key.
    join = engine.operator("Join")
    assert sum(engine.per_worker("mz_arrangement_records_raw", join).values()) == 501


def test_dataflows_are_scope_operators_and_channels_join_their_operators() -> None:
    """mz_dataflows (addresses of length 1) and mz_dataflow_channel_operators, as Materialize
    derives them, from the logged rows."""
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    dataflow = engine.instance.dataflows["d"]
    operators = engine.state("mz_dataflow_operators_per_worker")
    addresses = engine.state("mz_dataflow_addresses_per_worker")
    name = {(r[0], r[1]): r[2] for r in operators}
    address = {(r[0], r[1]): r[2] for r in addresses}
    dataflows = {
        (a[0], w, name[(i, w)]) for (i, w), a in address.items() if len(a) == 1 and (i, w) in name
    }
    assert dataflows == {(dataflow.index, w, "d") for w in range(WORKERS)}
    assert {len(a) for a in address.values()} == {1, 2}
    operator_addresses = {(a, w): i for (i, w), a in address.items() if (i, w) in name}
    for i, w in name:
        a = address[(i, w)]
        assert a[0] == dataflow.index
        assert len(a) == 1 or a[1] >= 1
    channels = engine.state("mz_dataflow_channels_per_worker")
    assert len(channels) == 3 * WORKERS
    for channel_id, worker, from_index, _, to_index, _, _ in channels:
        scope = address[(channel_id, worker)]  # a channel has the address of its scope
        assert scope == (dataflow.index,)
        source = operator_addresses[((*scope, from_index), worker)]
        target = operator_addresses[((*scope, to_index), worker)]
        assert dataflow.local[source] == from_index
        assert dataflow.local[target] == to_index
    # Operator ids and channel ids are one sequence: an address per id and worker.
    assert len(addresses) == len(name) + len(channels)


def test_compute_logs_follow_exports_frontiers_hydration_errors_and_reachability() -> None:
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", failing_division(), {"t": T}, as_of=0))
    index = engine.instance.dataflows["d"].index
    workers = range(WORKERS)
    assert set(engine.state("mz_compute_exports_per_worker")) == {
        ("d_index", w, index) for w in workers
    }
    assert set(engine.state("mz_compute_dataflow_global_ids_per_worker")) == {
        (index, w, g) for w in workers for g in ("d_index", "d_view")
    }
    assert set(engine.state("mz_compute_hydration_times_per_worker")) == {
        ("d_index", w, None) for w in workers
    }
    assert {r[3] for r in engine.state("mz_compute_operator_hydration_statuses_per_worker")} == {
        False
    }
    assert {r[0] for r in engine.state("mz_compute_lir_mapping_per_worker")} == {"d_view"}

    engine.push("t", [(("a", 1), 0, 1), (("b", 3), 0, 1)], upper=2)
    assert set(engine.state("mz_compute_frontiers_per_worker")) == {
        ("d_index", w, 2) for w in workers
    }
    assert set(engine.state("mz_compute_import_frontiers_per_worker")) == {
        ("d_index", "t", w, 2) for w in workers
    }
    times = engine.state("mz_compute_hydration_times_per_worker")
    assert {r[:2] for r in times} == {("d_index", w) for w in workers}
    assert all(r[2] is not None and r[2] > 0 for r in times)
    assert {r[3] for r in engine.state("mz_compute_operator_hydration_statuses_per_worker")} == {
        True
    }
    assert set(engine.state("mz_compute_error_counts_raw")) == {("d_index", TRACE_WORKER, 1)}
    engine.push("t", [(("a", 1), 2, -1)], upper=3)
    assert engine.state("mz_compute_error_counts_raw") == {}

    # Reachability: every port of the dataflow at its frontier, one row each per worker.
    reachability = engine.state("mz_dataflow_operator_reachability_raw")
    scope = engine.instance.dataflows["d"].scope_id
    assert {r[0] for r in reachability} == {scope}
    assert {r[5] for r in reachability} == {3}
    channels = [r for r in engine.state("mz_dataflow_channels_per_worker") if r[1] == 0]
    targets = {(r[4], r[5]) for r in channels}
    sources = {(r[2], r[3]) for r in channels}
    assert {(r[2], r[3]) for r in reachability if r[4] == "target"} == targets
    assert {(r[2], r[3]) for r in reachability if r[4] == "source"} == sources
    assert set(reachability.values()) == {1}
    assert len(reachability) == WORKERS * (len(targets) + len(sources))


def test_dropping_every_dataflow_leaves_no_rows_behind() -> None:
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    imported = IndexImport("d_index", "d_view", (("k", "text"), ("s", "int8")), ())
    plan = lir.Threshold(1, lir.Get(0, "d_view", types=("text", "int8")), types=("text", "int8"))
    engine.instance.create_dataflow(index_dataflow("r", plan, {}, 0, [imported]))
    # A join whose u never advances (t's updates queue) and an export with an error.
    engine.instance.create_dataflow(index_dataflow("q", join_t_u(), {"t": T, "u": U}, as_of=0))
    engine.instance.create_dataflow(index_dataflow("e", failing_division(), {"t": T}, as_of=0))
    engine.push("t", rows(200), upper=1)
    engine.push("t", [(("k2", 2), 1, -1)], upper=2)
    engine.collector.parked(0, 1000, 0)
    engine.collector.peek_started("p", "d_index", "index", 1)
    engine.collector.peek_finished("p", "index", 5000)
    engine.state("mz_dataflow_operators_per_worker")
    filled = {log for log, state in engine.collector.state_rows().items() if state}
    # Every variant has rows while the dataflows run (the collector gets them all).
    assert filled == set(BY_NAME) - {"mz_active_peeks_per_worker"}

    engine.instance.drop("d_index")  # the dataflows reading it stay
    assert engine.state("mz_compute_exports_per_worker")
    engine.instance.drop("r_index")
    engine.instance.drop("q_index")
    engine.instance.drop("e_index")
    engine.state("mz_dataflow_operators_per_worker")
    left = {log for log, state in engine.collector.state_rows().items() if state}
    assert left == {"mz_scheduling_parks_histogram_raw", "mz_peek_durations_histogram_raw"}


def test_log_logging_logs_the_collectors_own_ticks() -> None:
    engine = Engine(log_logging=True)
    operators = engine.state("mz_dataflow_operators_per_worker")
    assert (LOGGING_OPERATOR - 1, 0, LOGGING_NAME) in operators
    elapsed = engine.state("mz_scheduling_elapsed_raw")
    assert elapsed[(LOGGING_OPERATOR, 0)] > 0
    assert {r[1] for r in elapsed} == {0}
    plain = LogCollector(WORKERS)
    plain.tick(1)
    plain.tick(2)
    assert not plain.state_rows()["mz_scheduling_elapsed_raw"]
    assert not plain.state_rows()["mz_dataflow_operators_per_worker"]


@pytest.mark.parametrize("workers", [1, 2])
def test_logged_per_worker_values_sum_to_the_totals(workers: int) -> None:
    engine = Engine(workers)
    engine.instance.create_dataflow(index_dataflow("d", distinct_rows(), {"t": T}, as_of=0))
    engine.push("t", rows(100), upper=1)
    threshold = engine.operator("Threshold")
    records = engine.per_worker("mz_arrangement_records_raw", threshold)
    assert sum(records.values()) == 100
    per_channel: defaultdict[int, int] = defaultdict(int)
    for row, count in engine.state("mz_message_counts_sent_raw").items():
        per_channel[row[0]] += count
    # Source -> Get -> Threshold -> Index: 100 rows through each channel.
    assert sorted(per_channel.values()) == [100, 100, 100]


def test_a_join_key_that_fails_for_some_rows_counts_what_each_worker_sent() -> None:
    """t.n / (t.n - 1) = u.m: the row with n = 1 is an error, the others are joined and
    counted from the worker that held them; the result is the same as without logging."""
    key = Call("div", (Column(1), Call("sub", (Column(1), Literal(1, "int4")))))
    plan = lir.Join(
        3,
        (get("t", 0), get("u", 1)),
        ((key, Column(3)),),
        lir.JoinKind.LINEAR,
        types=(*TYPES, *TYPES),
    )
    results = []
    for logging in (False, True):
        engine = Engine()
        if not logging:
            engine.instance = ComputeInstance(workers=WORKERS)
        engine.instance.create_dataflow(index_dataflow("d", plan, {"t": T, "u": U}, as_of=0))
        engine.instance.push("u", persist_updates(U, [(("x", 2), 0, 1), (("y", 3), 0, 1)]), 1)
        engine.push(
            "t", [(("a", 1), 0, 1), (("b", 2), 0, 1), (("c", 3), 0, 1), (("d", 4), 0, 1)], 1
        )
        with pytest.raises(LoupeError, match="division by zero"):
            engine.instance.peek("d_index", 0)
        results.append(engine.instance.errors()["d_index"].message)
        if logging:
            join = next(o for o in engine.instance.dataflows["d"].operators if o.name == "Join")
            into_join = [
                r[0]
                for r in engine.state("mz_dataflow_channels_per_worker")
                if r[1] == 0
                and r[4] == engine.instance.dataflows["d"].local[join.operator_id]
                and r[5] == 0
            ]
            (channel,) = into_join
            sent = exchange_counts(engine, channel)
            # Of t's 4 rows, the failing one is an error and 3 reached the arrangement.
            assert sum(sent.values()) == 3
            assert {f for f, _ in sent} <= {w for w, p in enumerate(join.inputs[0].ok) if p.height}
    assert results[0] == results[1]


# The logs that describe what exists (not what ran): the same whenever logging started.
_STRUCTURE = (
    "mz_dataflow_operators_per_worker",
    "mz_dataflow_addresses_per_worker",
    "mz_dataflow_channels_per_worker",
    "mz_compute_exports_per_worker",
    "mz_compute_frontiers_per_worker",
    "mz_compute_import_frontiers_per_worker",
    "mz_compute_operator_hydration_statuses_per_worker",
    "mz_compute_lir_mapping_per_worker",
    "mz_compute_dataflow_global_ids_per_worker",
    "mz_arrangement_records_raw",
    "mz_arrangement_batches_raw",
    "mz_arrangement_sharing_raw",
    "mz_arrangement_heap_size_raw",
    "mz_compute_error_counts_raw",
)


def _build_and_run(instance: ComputeInstance) -> None:
    instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    imported = IndexImport("d_index", "d_view", (("k", "text"), ("s", "int8")), ())
    plan = lir.Threshold(1, lir.Get(0, "d_view", types=("text", "int8")), types=("text", "int8"))
    instance.create_dataflow(index_dataflow("r", plan, {}, 0, [imported]))
    instance.create_dataflow(index_dataflow("e", failing_division(), {"t": T}, as_of=0))
    instance.push("t", persist_updates(T, rows(100)), 1)
    instance.step()


def test_logging_turned_on_later_describes_every_running_dataflow() -> None:
    """``set_logging`` on a running instance (ALTER CLUSTER … INTROSPECTION INTERVAL from 0)
    tells the new collector everything that exists, as logging from the start would have."""
    from_start = Engine()
    _build_and_run(from_start.instance)
    later = ComputeInstance(workers=WORKERS)
    _build_and_run(later)
    collector = LogCollector(WORKERS)
    later.set_logging(collector)
    collector.tick(1)
    from_start.collector.tick(1)
    for log in _STRUCTURE:
        assert collector.state_rows()[log] == from_start.collector.state_rows()[log], log
    hydrated = collector.state_rows()["mz_compute_hydration_times_per_worker"]
    assert hydrated
    assert all(row[2] is not None and row[2] > 0 for row in hydrated)
    # And it goes on logging: new updates run the operators again, and are timed.
    later.push("t", persist_updates(T, rows(10)), 2)
    later.step()
    collector.tick(2)
    assert collector.state_rows()["mz_scheduling_elapsed_raw"]
    # Off again: no hooks, no meters.
    later.set_logging(None)
    assert later.hooks is None
    assert all(o.meter is None for d in later.dataflows.values() for o in d.operators)


def test_a_dataflows_scope_is_scheduled_for_what_its_operators_took() -> None:
    """As timely's region: the scope operator (address of length 1, what Materialize's
    "which dataflow uses the most CPU" query reads) ran, on each worker, for the sum of
    its operators' time there."""
    engine = Engine()
    engine.instance.create_dataflow(index_dataflow("d", sum_by_key(), {"t": T}, as_of=0))
    engine.push("t", rows(500), upper=1)
    engine.push("t", rows(20), upper=2)
    addresses = engine.state("mz_dataflow_addresses_per_worker")
    operators = engine.names()
    (scope,) = {row[0] for row in addresses if len(row[2]) == 1 and row[0] in operators}
    elapsed = engine.state("mz_scheduling_elapsed_raw")
    scope_ns = {w: ns for (op, w), ns in elapsed.items() if op == scope}
    operators_ns: Counter[int] = Counter()
    for (op, worker), ns in elapsed.items():
        if op != scope:
            operators_ns[worker] += ns
    assert scope_ns == dict(operators_ns)
    assert all(ns > 0 for ns in scope_ns.values())
