"""EXPLAIN ANALYZE (issue 13) end to end, on real replicas (``loupe up``).

An indexed aggregate on the default cluster (one replica: its in-memory
logs) and on a cluster of two replicas (no target: every replica's
persisted logs, a ``replica`` column). The numbers are checked against the
relations they are built from, read separately (memory once it is stable,
CPU between a read before and one after, since it only grows).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from loupe.common.errors import LoupeError
from loupe.interval import Interval
from loupe.testing.eventually import eventually_truthy
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

INDEX = "materialize.public.s_primary_idx"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory):
    loupe = LoupeUp(tmp_path_factory.mktemp("explain-analyze-story") / "data")
    loupe.start()
    loupe.sql(
        "CREATE TABLE t (k int, v int);"
        " CREATE VIEW s AS SELECT k, sum(v) AS total, count(*) AS n FROM t GROUP BY k;"
        " CREATE DEFAULT INDEX ON s"
    )
    values = ", ".join(f"({i % 50}, {i})" for i in range(3_000))
    loupe.sql(f"INSERT INTO t VALUES {values}")
    assert loupe.sql("SELECT count(*) FROM s", timeout=120) == [(50,)]
    yield loupe
    loupe.stop()


def eventually(check: Callable[[], Any], timeout: float = 120, interval: float = 1.0) -> Any:
    return eventually_truthy(
        check, timeout, retry_on=(AssertionError, LoupeError), interval=interval
    )


def _nodes(system: LoupeUp, name: str, prefix: str = "") -> list[tuple[int, int, str, int, int]]:
    """(lir_id, nesting, operator, start, end) of ``name``'s plan, highest id first."""
    return system.sql(
        f"{prefix}SELECT mlm.lir_id, mlm.nesting, mlm.operator, mlm.operator_id_start,"
        " mlm.operator_id_end FROM mz_introspection.mz_lir_mapping mlm"
        " JOIN mz_introspection.mz_mappable_objects mo ON mo.global_id = mlm.global_id"
        f" WHERE mo.name = '{name}' ORDER BY mlm.lir_id DESC",
        timeout=60,
    )


def _per_node(nodes: list[tuple], values: dict[int, int]) -> dict[int, int | None]:
    """lir_id -> the sum of ``values`` (operator id -> value) over the node's operators."""
    out: dict[int, int | None] = {}
    for lir_id, _, _, start, end in nodes:
        found = [v for op, v in values.items() if start <= op < end]
        out[lir_id] = sum(found) if found else None
    return out


def _micros(value: Any) -> int:
    assert isinstance(value, Interval), value
    return value.micros


def test_memory_and_cpu_match_the_relations_on_the_only_replica(system: LoupeUp) -> None:
    nodes = eventually(lambda: _nodes(system, INDEX))
    indented = [" " * (nesting * 2) + operator for _, nesting, operator, _, _ in nodes]

    def stable() -> list[tuple]:
        sizes = system.sql(
            "SELECT operator_id, sum(records) FROM mz_introspection.mz_arrangement_sizes_per_worker"
            " GROUP BY operator_id",
            timeout=60,
        )
        rows = system.sql(f"EXPLAIN ANALYZE MEMORY FOR INDEX {INDEX}", timeout=60)
        again = system.sql(
            "SELECT operator_id, sum(records) FROM mz_introspection.mz_arrangement_sizes_per_worker"
            " GROUP BY operator_id",
            timeout=60,
        )
        assert sizes == again  # nothing moved while EXPLAIN ran
        records = _per_node(nodes, {op: int(n) for op, n in sizes if n is not None})
        # One row per node, indented by nesting, highest id first.
        assert [r[0] for r in rows] == indented
        assert [r[2] for r in rows] == [
            Decimal(records[lir]) if records[lir] is not None else None for lir, *_ in nodes
        ]
        assert any(r[2] for r in rows), rows  # the index's arrangement holds the 50 groups
        return rows

    eventually(stable)

    def elapsed() -> dict[int, int | None]:
        rows = system.sql(
            "SELECT id, elapsed_ns FROM mz_introspection.mz_scheduling_elapsed_per_worker",
            timeout=60,
        )
        totals: dict[int, int] = {}
        for op, ns in rows:
            totals[op] = totals.get(op, 0) + int(ns)
        return _per_node(nodes, totals)

    before = elapsed()
    rows = system.sql(f"EXPLAIN ANALYZE CPU FOR INDEX {INDEX}", timeout=60)
    after = elapsed()
    assert [r[0] for r in rows] == indented
    for (lir, *_), (_, total) in zip(nodes, rows, strict=True):
        if after[lir] is None:
            assert total is None
            continue
        # Nanoseconds / 1000 is numeric: the interval is rounded to the microsecond.
        assert (before[lir] or 0) // 1000 <= _micros(total) <= -(-after[lir] // 1000)

    # AS SQL: the query itself, which runs to the same answer.
    [(text,)] = system.sql(f"EXPLAIN ANALYZE MEMORY FOR INDEX {INDEX} AS SQL")
    assert "mz_introspection.mz_arrangement_sizes_per_worker" in text
    assert system.sql(text, timeout=60) == system.sql(
        f"EXPLAIN ANALYZE MEMORY FOR INDEX {INDEX}", timeout=60
    )


def test_every_replica_without_a_target(system: LoupeUp) -> None:
    system.sql("CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '2'))")
    system.sql("CREATE INDEX s_two IN CLUSTER two ON s (k)")
    name = "materialize.public.s_two"

    def both() -> list[tuple]:
        rows = system.sql(f"SET cluster = two; EXPLAIN ANALYZE MEMORY FOR INDEX {name}", timeout=60)
        assert {r[1] for r in rows} == {"r1", "r2"}
        # The index's arrangement, on each replica.
        assert {r[1] for r in rows if r[3]} == {"r1", "r2"}
        return rows

    rows = eventually(both, timeout=240)
    # A row per node and replica, nodes in plan order.
    assert [r[1] for r in rows] == ["r1", "r2"] * (len(rows) // 2)
    # r2's rows: what r2's own logs say (targeted: Materialize's columns).
    nodes = _nodes(system, name, "SET cluster = two; SET cluster_replica = r2; ")
    assert [r[0] for r in rows[1::2]] == [" " * (n * 2) + op for _, n, op, _, _ in nodes]
    targeted = system.sql(
        f"SET cluster = two; SET cluster_replica = r2; EXPLAIN ANALYZE MEMORY FOR INDEX {name}",
        timeout=60,
    )
    assert [len(r) for r in targeted] == [3] * len(nodes)
    assert [r[0] for r in targeted] == [r[0] for r in rows[1::2]]

    cluster = eventually(
        lambda: system.sql("SET cluster = two; EXPLAIN ANALYZE CLUSTER MEMORY", timeout=60)
    )
    assert {(r[0], r[2]) for r in cluster} == {(name, "r1"), (name, "r2")}


def test_skew_of_a_materialized_view_on_a_targeted_replica(system: LoupeUp) -> None:
    """The issue's story: ``SET cluster_replica = r1; EXPLAIN ANALYZE CPU, MEMORY WITH SKEW
    FOR MATERIALIZED VIEW``: a row per node and worker of r1 (SIZE '2': two workers)."""
    if not system.sql("SELECT 1 FROM mz_catalog.mz_clusters WHERE name = 'two'"):
        system.sql("CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '2'))")
    system.sql(
        "SET cluster = two; CREATE MATERIALIZED VIEW big AS SELECT k, max(v) FROM t GROUP BY k"
    )
    statement = (
        "SET cluster = two; SET cluster_replica = r2;"
        " EXPLAIN ANALYZE CPU, MEMORY WITH SKEW FOR MATERIALIZED VIEW big"
    )

    def measured() -> list[tuple]:
        rows = system.sql(statement, timeout=60)
        assert any(r[13] for r in rows)  # some node's arrangements hold records
        return rows

    rows = eventually(measured)
    # operator, worker_id, cpu_ratio, worker_elapsed, avg_elapsed, total_elapsed,
    # memory_ratio, worker_memory, avg_memory, total_memory, records_ratio, …
    assert {r[1] for r in rows} <= {0, 1}
    by_operator: dict[str, list[tuple]] = {}
    for row in rows:
        by_operator.setdefault(row[0], []).append(row)
    for operator, workers in by_operator.items():
        ratios = [r[6] for r in workers if r[6] is not None]
        if ratios:
            # Each worker's share of the average: the ratios add up to the workers counted.
            assert float(sum(ratios)) == pytest.approx(len(ratios), abs=0.02 * len(ratios)), (
                operator,
                workers,
            )
