"""``EXPLAIN ANALYZE`` (issue 13): parsing, ``AS SQL``, and runs over introspection data.

The runs use ``test_introspection_sql``'s ``LogController``: the targeted
replica feeds the log rows the test gives (as a replica feeds its in-memory
logs), and the persisted ``mz_internal`` collections are real shards the test
writes, as the controller does. Expected numbers are computed here from those
rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from loupe.builtins import (
    MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER,
    MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES,
)
from loupe.common.errors import LoupeError
from loupe.coordinator import explain_analyze as analyze
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import ExplainAnalyze, ObjectName
from loupe.coordinator.tests.conftest import TableHarness, table_system
from loupe.coordinator.tests.test_introspection_sql import LogController
from loupe.interval import Interval
from loupe.introspection.logs import BY_NAME

# -- parsing -------------------------------------------------------------------------------


def _parsed(sql: str) -> ExplainAnalyze:
    statement = parse_one(sql)
    assert isinstance(statement, ExplainAnalyze)
    return statement


def test_object_forms_parse_as_materialize_reads_them() -> None:
    s = _parsed("EXPLAIN ANALYZE CPU, MEMORY WITH SKEW FOR MATERIALIZED VIEW q3")
    assert (s.properties, s.skew, s.cluster, s.object_kind, s.as_sql) == (
        ("cpu", "memory"),
        True,
        False,
        "materialized-view",
        False,
    )
    assert s.object_name == ObjectName(parts=("q3",), position=61)
    s = _parsed("explain analyze memory, cpu for index public.i as sql")
    assert (s.properties, s.skew, s.object_kind, s.as_sql) == (
        ("memory", "cpu"),
        False,
        "index",
        True,
    )
    assert s.object_name is not None
    assert s.object_name.parts == ("public", "i")
    assert _parsed("EXPLAIN ANALYZE HINTS FOR INDEX i").properties == ("hints",)
    assert _parsed("EXPLAIN ANALYZE HYDRATION FOR MATERIALIZED VIEW m").properties == ("hydration",)


def test_statement_log_types_are_materializes() -> None:
    from loupe.coordinator.statement_logging import statement_type

    assert statement_type(_parsed("EXPLAIN ANALYZE CPU FOR INDEX i")) == "explain_analyze_object"
    assert statement_type(_parsed("EXPLAIN ANALYZE CLUSTER CPU")) == "explain_analyze_cluster"


def test_cluster_forms_parse() -> None:
    s = _parsed("EXPLAIN ANALYZE CLUSTER MEMORY, CPU WITH SKEW AS SQL")
    assert (s.properties, s.skew, s.cluster, s.object_name, s.as_sql) == (
        ("memory", "cpu"),
        True,
        True,
        None,
        True,
    )


@pytest.mark.parametrize(
    ("sql", "message", "position"),
    [
        ("EXPLAIN ANALYZE CPU, CPU FOR INDEX i", 'Expected MEMORY, found "CPU"', 22),
        (
            "EXPLAIN ANALYZE CPU, MEMORY, CPU FOR INDEX i",
            "both CPU and MEMORY were specified, expected WITH SKEW or FOR",
            30,
        ),
        (
            "EXPLAIN ANALYZE FOR INDEX i",
            'Expected CPU, MEMORY, HINTS or HYDRATION, found "FOR"',
            17,
        ),
        ("EXPLAIN ANALYZE CPU FOR VIEW v", 'Expected INDEX or MATERIALIZED VIEW, found "VIEW"', 25),
        ("EXPLAIN ANALYZE CLUSTER HINTS", 'Expected CPU or MEMORY, found "HINTS"', 25),
        ("EXPLAIN ANALYZE CPU FOR INDEX i AS TEXT", 'Expected end of statement, found "AS"', 33),
    ],
)
def test_malformed_statements_are_syntax_errors(sql: str, message: str, position: int) -> None:
    with pytest.raises(LoupeError) as raised:
        parse_one(sql)
    assert (raised.value.code, raised.value.message, raised.value.position) == (
        "42601",
        message,
        position,
    )


# -- the queries ------------------------------------------------------------------------------


def test_targeted_queries_read_the_replicas_logs_as_materialize_does() -> None:
    sql = analyze.object_sql(("memory", "cpu"), True, "materialize.public.w", analyze.Target())
    assert "mz_internal" not in sql
    assert "replica_id" not in sql
    assert sql.count("mz_introspection.mz_lir_mapping mlm") == 5
    assert "WHERE pwc.worker_id = pwm.worker_id AND mo.name = 'materialize.public.w'" in sql
    assert sql.endswith("ORDER BY mlm.lir_id DESC, worker_id")
    # Every replica: the persisted relations, joined on the replica, with its name.
    sql = analyze.object_sql(("cpu",), False, "it's", analyze.Target(persisted=True))
    assert "mz_introspection" not in sql
    assert "USING (replica_id, incarnation, global_id, lir_id)" in sql
    assert "r.name AS replica" in sql
    assert "mo.name = 'it''s'" in sql
    assert sql.endswith("ORDER BY mlm.lir_id DESC, replica")
    sql = analyze.cluster_sql(("memory",), False, analyze.Target(persisted=True, cluster_id="u2"))
    assert "r.cluster_id = 'u2'" in sql
    assert sql.endswith("ORDER BY omt.total_memory DESC, total_records DESC, replica, mo.name DESC")


def test_generated_queries_plan_on_a_replica() -> None:
    """Every form's query over mz_introspection plans, with Materialize's columns."""
    from tests.introspection.harness import plan

    cases = {
        (("memory",), False): ["operator", "total_memory", "total_records"],
        (("cpu",), False): ["operator", "total_elapsed"],
        (("cpu", "memory"), True): [
            "operator",
            "worker_id",
            "cpu_ratio",
            "worker_elapsed",
            "avg_elapsed",
            "total_elapsed",
            "memory_ratio",
            "worker_memory",
            "avg_memory",
            "total_memory",
            "records_ratio",
            "worker_records",
            "avg_records",
            "total_records",
        ],
        (("hints",), False): ["operator", "levels", "to_cut", "hint", "savings"],
    }
    # Materialize's types (describe_explain_analyze_object).
    types = {
        "operator": "text",
        "worker_id": "uint8",
        "levels": "int8",
        "to_cut": "int8",
        "hint": "float8",
        "savings": "text",
    }
    types |= dict.fromkeys(("worker_memory", "avg_memory", "total_memory"), "text")
    types |= dict.fromkeys(("worker_elapsed", "avg_elapsed", "total_elapsed"), "interval")
    for (properties, skew), columns in cases.items():
        sql = analyze.object_sql(properties, skew, "materialize.public.w", analyze.Target())
        assert plan(sql, "mz_introspection").columns == tuple(
            (c, types.get(c, "numeric")) for c in columns
        )
    sql = analyze.cluster_sql(("memory", "cpu"), True, analyze.Target())
    assert [name for name, _ in plan(sql, "mz_introspection").columns] == [
        "object",
        "global_id",
        "worker_id",
        "max_operator_memory_ratio",
        "worker_memory",
        "avg_memory",
        "total_memory",
        "max_operator_records_ratio",
        "worker_records",
        "avg_records",
        "total_records",
        "max_operator_cpu_ratio",
        "worker_elapsed",
        "avg_elapsed",
        "total_elapsed",
    ]


# -- runs ---------------------------------------------------------------------------------------

LIR = BY_NAME["mz_compute_lir_mapping_per_worker"]
GLOBAL_IDS = BY_NAME["mz_compute_dataflow_global_ids_per_worker"]
EXPORTS = BY_NAME["mz_compute_exports_per_worker"]
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]
RECORDS = BY_NAME["mz_arrangement_records_raw"]
HEAP = BY_NAME["mz_arrangement_heap_size_raw"]
ELAPSED = BY_NAME["mz_scheduling_elapsed_raw"]
DATAFLOW = 4
# The index's plan: (lir_id, operator, parent, nesting, [start, end) operator ids).
NODES = [
    (2, "Arrange", None, 0, 10, 12),
    (1, "Map", 2, 1, 12, 13),
    (0, "Get materialize.public.t", 1, 2, 13, 14),
]
WORKERS = (0, 1)
# (operator, worker) -> value, per replica (log rows' counts).
ARRANGED = {"records": {(10, 0): 100, (10, 1): 300}, "size": {(11, 0): 1000, (11, 1): 3000}}
SCHEDULED = {(10, 0): 500_000, (10, 1): 1_500_000, (12, 0): 2_000, (13, 1): 7_000}


def _logs(global_id: str, scale: int = 1) -> dict[str, Counter]:
    """The replica's log rows for the index's dataflow (values times ``scale``)."""
    return {
        LIR.log_id: Counter(
            {
                (global_id, lir, w, op, parent, nesting, start, end): 1
                for lir, op, parent, nesting, start, end in NODES
                for w in WORKERS
            }
        ),
        GLOBAL_IDS.log_id: Counter({(DATAFLOW, w, global_id): 1 for w in WORKERS}),
        EXPORTS.log_id: Counter({(global_id, w, DATAFLOW): 1 for w in WORKERS}),
        OPERATORS.log_id: Counter({(op, w, f"op{op}"): 1 for op in range(10, 14) for w in WORKERS}),
        RECORDS.log_id: Counter({k: v * scale for k, v in ARRANGED["records"].items()}),
        HEAP.log_id: Counter({k: v * scale for k, v in ARRANGED["size"].items()}),
        ELAPSED.log_id: Counter({k: v * scale for k, v in SCHEDULED.items()}),
    }


def _node_of(operator_id: int) -> int:
    return next(lir for lir, _, _, _, start, end in NODES if start <= operator_id < end)


def _per_node(values: dict[tuple[int, int], int], scale: int = 1) -> dict[int, dict[int, int]]:
    """lir_id -> worker -> the sum of ``values`` of the node's operators."""
    out: dict[int, dict[int, int]] = {}
    for (operator, worker), value in values.items():
        node = out.setdefault(_node_of(operator), {})
        node[worker] = node.get(worker, 0) + value * scale
    return out


def _indented() -> dict[int, str]:
    return {lir: " " * (nesting * 2) + op for lir, op, _, nesting, _, _ in NODES}


def _micros(value: object) -> int:
    assert isinstance(value, Interval), value
    return value.micros


def _pretty(size: int) -> str:
    """PostgreSQL's pg_size_pretty below 10 MB: bytes, then kB half-rounded."""
    if size < 10 * 1024:
        return f"{size} bytes"
    assert size < 10 * 1024 * 1024
    return f"{((size >> 9) + 1) // 2} kB"


@pytest.fixture
async def logs(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    async with table_system(nats_url, data_dir, controller_class=LogController) as harness:
        yield harness


def _controller(harness: TableHarness) -> LogController:
    assert isinstance(harness.controller, LogController)
    return harness.controller


async def _index(harness: TableHarness, session: str, cluster: str = "") -> str:
    await harness.tag(session, "CREATE TABLE t (a int)")
    in_cluster = f" IN CLUSTER {cluster}" if cluster else ""
    await harness.tag(session, f"CREATE INDEX t_idx{in_cluster} ON t (a)")
    [(index_id,)] = await harness.rows(
        session, "SELECT id FROM mz_catalog.mz_indexes WHERE name = 't_idx'"
    )
    return index_id


async def test_memory_and_cpu_on_the_targeted_replica(logs: TableHarness) -> None:
    session = await logs.session()
    index_id = await _index(logs, session)
    _controller(logs).logs.update(_logs(index_id))
    records, sizes = _per_node(ARRANGED["records"]), _per_node(ARRANGED["size"])
    elapsed = _per_node(SCHEDULED)
    names = _indented()

    rows = await logs.rows(session, "EXPLAIN ANALYZE MEMORY, CPU FOR INDEX t_idx")
    # One row per LIR node, highest id first, indented by nesting.
    assert [r[0] for r in rows] == [names[lir] for lir, *_ in NODES]
    for (lir, *_), (_, memory, total_records, total_elapsed) in zip(NODES, rows, strict=True):
        if lir in sizes:
            assert memory == _pretty(sum(sizes[lir].values()))
            assert total_records == sum(records[lir].values())
        else:
            assert (memory, total_records) == (None, None)
        expected_ns = sum(elapsed.get(lir, {}).values())
        assert _micros(total_elapsed) == expected_ns // 1000

    rows = await logs.rows(session, "EXPLAIN ANALYZE CPU WITH SKEW FOR INDEX t_idx")
    arrange = [r for r in rows if r[0] == "Arrange"]
    average = sum(elapsed[2].values()) / len(elapsed[2])
    assert [(r[1], float(r[2])) for r in arrange] == [
        (w, round(elapsed[2][w] / average, 2)) for w in WORKERS
    ]
    assert {_micros(r[5]) for r in arrange} == {sum(elapsed[2].values()) // 1000}

    [(text,)] = await logs.rows(session, "EXPLAIN ANALYZE MEMORY FOR INDEX t_idx AS SQL")
    assert text == analyze.object_sql(
        ("memory",), False, "materialize.public.t_idx", analyze.Target()
    )
    # The same numbers as the underlying relation, summed over the node's operators.
    [(arranged,)] = await logs.rows(
        session,
        "SELECT sum(size) FROM mz_introspection.mz_arrangement_sizes_per_worker"
        " WHERE operator_id >= 10 AND operator_id < 12",
    )
    assert arranged == sum(sizes[2].values())


async def test_cluster_form_totals_objects(logs: TableHarness) -> None:
    session = await logs.session()
    index_id = await _index(logs, session)
    _controller(logs).logs.update(_logs(index_id))
    rows = await logs.rows(session, "EXPLAIN ANALYZE CLUSTER MEMORY, CPU")
    assert rows == [
        (
            "materialize.public.t_idx",
            index_id,
            _pretty(sum(ARRANGED["size"].values())),
            sum(ARRANGED["records"].values()),
            Interval(0, 0, sum(SCHEDULED.values()) // 1000),
        )
    ]


async def test_unknown_and_wrong_objects(logs: TableHarness) -> None:
    session = await logs.session()
    await _index(logs, session)
    error = await logs.error(session, "EXPLAIN ANALYZE CPU FOR INDEX nope")
    assert (error.code, error.message) == ("42P01", "unknown catalog item 'nope'")
    await logs.tag(session, "CREATE MATERIALIZED VIEW mv AS SELECT 1 AS x")
    error = await logs.error(session, "EXPLAIN ANALYZE CPU FOR INDEX mv")
    assert (error.code, error.message) == (
        "42809",
        "Expected materialize.public.mv to be an index, not a materialized view",
    )
    error = await logs.error(session, "EXPLAIN ANALYZE HYDRATION FOR MATERIALIZED VIEW t_idx")
    # Materialize's words, article and all.
    assert (error.code, error.message) == (
        "42809",
        "Expected materialize.public.t_idx to be a materialized view, not a index",
    )


async def _persist(harness: TableHarness, replica_id: str, logs: dict[str, Counter]) -> None:
    """``logs`` (by log id) written into the persisted collections as ``replica_id``'s."""
    updates: dict[str, list[tuple[tuple, int]]] = {}
    by_log = {v.log_id: v for v in BY_NAME.values()}
    for log_id, rows in logs.items():
        collection = by_log[log_id].collection_id
        for row, count in rows.items():
            persisted = (replica_id, 1, *row)
            harness.controller.contents[collection][persisted] += count
            updates.setdefault(collection, []).append((persisted, count))
    await harness.controller._flush(updates)


async def test_every_replica_from_the_persisted_relations(logs: TableHarness) -> None:
    """Two replicas, none targeted: the persisted relations, a row per node and replica."""
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    await logs.tag(session, "SET cluster = two")
    index_id = await _index(logs, session, "two")
    state = logs.service.coordinator.state  # type: ignore[union-attr]
    two = state.cluster("two")
    r1, r2 = (state.replica(two.id, n).id for n in ("r1", "r2"))
    await _persist(logs, r1, _logs(index_id))
    await _persist(logs, r2, _logs(index_id, scale=3))

    rows = await logs.rows(session, "EXPLAIN ANALYZE MEMORY FOR INDEX t_idx")
    names = _indented()
    expected = []
    for lir, *_ in NODES:
        for replica, scale in (("r1", 1), ("r2", 3)):
            sizes = _per_node(ARRANGED["size"], scale).get(lir)
            records = _per_node(ARRANGED["records"], scale).get(lir)
            expected.append(
                (
                    names[lir],
                    replica,
                    _pretty(sum(sizes.values())) if sizes else None,
                    sum(records.values()) if records else None,
                )
            )
    assert rows == expected

    rows = await logs.rows(session, "EXPLAIN ANALYZE CLUSTER CPU")
    assert [(r[0], r[2], _micros(r[3])) for r in rows] == [
        ("materialize.public.t_idx", replica, sum(SCHEDULED.values()) * scale // 1000)
        for replica, scale in (("r2", 3), ("r1", 1))
    ]
    # A target: that replica's own logs, Materialize's columns.
    await logs.tag(session, "SET cluster_replica = r2")
    _controller(logs).logs.update(_logs(index_id, scale=3))
    rows = await logs.rows(session, "EXPLAIN ANALYZE MEMORY FOR INDEX t_idx")
    assert rows == [(name, memory, records) for name, _, memory, records in expected[1::2]]


async def test_hydration_per_node_and_replica(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    index_id = await _index(logs, session, "two")
    state = logs.service.coordinator.state  # type: ignore[union-attr]
    two = state.cluster("two")
    r1, r2 = (state.replica(two.id, n).id for n in ("r1", "r2"))
    # r1 keeps introspection (its LIR mapping is persisted); r2's is not there.
    await _persist(logs, r1, {LIR.log_id: _logs(index_id)[LIR.log_id]})
    for log_id in (GLOBAL_IDS.log_id, EXPORTS.log_id):
        await _persist(logs, r1, {log_id: _logs(index_id)[log_id]})
    # r1 has not reported node 0 yet (its mapping lists it): not hydrated.
    hydrated = {(r1, 1): True, (r1, 2): False, (r2, 0): True, (r2, 1): False}
    progress = {  # (replica, node, worker) -> (done, estimated)
        (r1, 2, 0): (40, 100),
        (r1, 2, 1): (10, 100),
        (r2, 1, 0): (5, 50),
    }
    statuses = [(replica, index_id, node, done) for (replica, node), done in hydrated.items()]
    per_worker = [
        (replica, index_id, node, worker, done, estimated, None)
        for (replica, node, worker), (done, estimated) in progress.items()
    ]
    for collection, rows in (
        (MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES, statuses),
        (MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER, per_worker),
    ):
        for row in rows:
            logs.controller.contents[collection.id][row] += 1
        await logs.controller._flush({collection.id: [(row, 1) for row in rows]})

    names = _indented()
    nodes = set(hydrated) | {(r1, lir) for lir, *_ in NODES}
    expected = []
    for replica, node in sorted(nodes, key=lambda k: (-k[1], k[0])):
        sums = [v for (r, n, _), v in progress.items() if (r, n) == (replica, node)]
        expected.append(
            (
                names[node] if replica == r1 else f"node {node}",
                "r1" if replica == r1 else "r2",
                hydrated.get((replica, node), False),
                Decimal(sum(d for d, _ in sums)) if sums else None,
                Decimal(sum(e for _, e in sums)) if sums else None,
            )
        )
    rows = await logs.rows(session, "EXPLAIN ANALYZE HYDRATION FOR INDEX t_idx")
    assert rows == expected
    # A replica targeted: its rows only.
    await logs.tag(session, "SET cluster = two; SET cluster_replica = r2")
    rows = await logs.rows(session, "EXPLAIN ANALYZE HYDRATION FOR INDEX t_idx")
    assert rows == [row for row in expected if row[1] == "r2"]
    await logs.tag(session, "RESET cluster_replica")
    [(text,)] = await logs.rows(session, "EXPLAIN ANALYZE HYDRATION FOR INDEX t_idx AS SQL")
    assert text == analyze.hydration_sql(index_id, "materialize.public.t_idx")
