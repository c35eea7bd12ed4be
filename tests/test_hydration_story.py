"""Issue 13, end to end: hydration you can watch, per plan node, per replica.

Real processes (``loupe up``): a TPC-H source (load generator), a cluster of
two replicas, a Q3-shaped materialized view. From any cluster, its nodes'
hydration statuses (ids those of ``EXPLAIN PHYSICAL PLAN WITH (node_ids)``),
their progress, the object's hydration status and time, its history and its
dependencies; ``EXPLAIN ANALYZE`` on one replica and on all of them;
``loupe sql`` showing progress while a view hydrates. Then a replica killed
while a view hydrates: its rows stay as they were, its next incarnation's
start over and finish, the other replica's are untouched, and the history
says the first episode was interrupted.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from loupe.common.errors import LoupeError
from loupe.testing.eventually import eventually_truthy
from loupe.testing.procs import Throttled
from loupe.testing.system import LoupeUp, replica_pid

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

Q3 = """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue,
               o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey
          AND l_orderkey = o_orderkey AND o_orderdate < DATE '1995-03-15'
          AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority"""
Q5 = """SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM customer, orders, lineitem, supplier, nation, region
        WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey
          AND l_suppkey = s_suppkey AND c_nationkey = s_nationkey
          AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
          AND r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01'
          AND o_orderdate < DATE '1995-01-01'
        GROUP BY n_name"""
Q1 = """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, count(*) AS count_order
        FROM lineitem WHERE l_shipdate <= DATE '1998-09-02'
        GROUP BY l_returnflag, l_linestatus"""


def eventually(check: Callable[[], Any], timeout: float, interval: float = 0.3) -> Any:
    return eventually_truthy(
        check, timeout, retry_on=(AssertionError, LoupeError), interval=interval
    )


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("hydration-story") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


@pytest.fixture(scope="module")
def heavy(system: LoupeUp) -> dict[str, str]:
    """The TPC-H source and cluster ``heavy`` (r1 SIZE 2, r2 SIZE 1); replica name -> id."""
    system.sql("CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.05)", timeout=300)
    system.sql("CREATE CLUSTER heavy REPLICAS (r1 (SIZE '2'), r2 (SIZE '1'))")
    ids = dict(
        system.sql(
            "SELECT r.name, r.id FROM mz_catalog.mz_cluster_replicas r"
            " JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = 'heavy'"
        )
    )

    def online() -> bool:
        rows = system.sql(
            "SELECT replica_id FROM mz_internal.mz_cluster_replica_statuses WHERE status = 'online'"
        )
        return set(ids.values()) <= {r for (r,) in rows}

    eventually(online, 120)
    return ids


def object_id(system: LoupeUp, name: str) -> str:
    rows = system.sql(f"SELECT id FROM mz_catalog.mz_materialized_views WHERE name = '{name}'")
    assert len(rows) == 1, rows
    return rows[0][0]


def node_ids(system: LoupeUp, name: str) -> set[int]:
    (plan,) = system.sql(f"EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR MATERIALIZED VIEW {name}")[0]
    return {int(n) for n in re.findall(r"// \{ node_id: (\d+) \}", plan)}


def statuses(system: LoupeUp, oid: str) -> dict[tuple[str, int], bool]:
    """(replica_id, node id) -> hydrated, read from the default cluster (not ``heavy``)."""
    rows = system.sql(
        "SELECT replica_id, physical_plan_node_id, hydrated"
        " FROM mz_internal.mz_compute_operator_hydration_statuses"
        f" WHERE object_id = '{oid}'"
    )
    return {(r, int(n)): h for r, n, h in rows}


def test_node_statuses_progress_and_history_of_a_hydrated_view(system, heavy):
    system.sql(f"SET cluster = heavy; CREATE MATERIALIZED VIEW q3 AS {Q3}", timeout=300)
    oid = object_id(system, "q3")
    nodes = node_ids(system, "q3")
    assert len(nodes) >= 5, nodes

    def all_hydrated() -> dict:
        current = statuses(system, oid)
        assert set(current) == {(r, n) for r in heavy.values() for n in nodes}, current
        assert all(current.values()), current
        return current

    eventually(all_hydrated, 120)

    progress = system.sql(
        "SELECT replica_id, physical_plan_node_id, records_done, records_estimated"
        f" FROM mz_internal.mz_compute_operator_hydration_progress WHERE object_id = '{oid}'"
    )
    assert {(r, int(n)) for r, n, _, _ in progress} == {
        (r, n) for r in heavy.values() for n in nodes
    }
    # Hydrated: every node processed what was estimated, and the inputs were not empty.
    assert all(done == estimated for _, _, done, estimated in progress), progress
    for replica_id in heavy.values():
        assert sum(d for r, _, d, _ in progress if r == replica_id) > 100_000
    # Both replicas processed the same records per node (the same plan over the same data).
    per_node: dict[int, set[int]] = {}
    for _replica_id, node, done, _ in progress:
        per_node.setdefault(int(node), set()).add(done)
    assert all(len(values) == 1 for values in per_node.values()), per_node

    object_rows = system.sql(
        "SELECT replica_id, hydrated, eta FROM mz_internal.mz_compute_hydration_progress"
        f" WHERE object_id = '{oid}'"
    )
    assert {r for r, _, _ in object_rows} == set(heavy.values())
    assert all(hydrated for _, hydrated, _ in object_rows)

    hydrated = system.sql(
        "SELECT replica_id, hydrated, hydration_time > INTERVAL '0'"
        f" FROM mz_internal.mz_compute_hydration_statuses WHERE object_id = '{oid}'"
    )
    assert sorted(hydrated) == sorted((r, True, True) for r in heavy.values())
    assert sorted(
        system.sql(
            f"SELECT replica_id, hydrated FROM mz_internal.mz_hydration_statuses"
            f" WHERE object_id = '{oid}'"
        )
    ) == sorted((r, True) for r in heavy.values())

    # What q3 reads: its dependencies are the three TPC-H tables it joins.
    dependencies = system.sql(
        "SELECT o.name FROM mz_internal.mz_compute_dependencies d"
        f" JOIN mz_catalog.mz_objects o ON o.id = d.dependency_id WHERE d.object_id = '{oid}'"
    )
    assert sorted(n for (n,) in dependencies) == ["customer", "lineitem", "orders"]

    history = system.sql(
        "SELECT replica_id, status, finished_at >= started_at, records"
        f" FROM mz_internal.mz_object_hydration_history WHERE object_id = '{oid}'"
    )
    assert sorted(history) == sorted(
        (r, "hydrated", True, sum(d for rr, _, d, _ in progress if rr == r)) for r in heavy.values()
    )


def test_explain_analyze_on_one_replica_and_on_all(system, heavy):
    oid = object_id(system, "q3")
    nodes = node_ids(system, "q3")
    # One replica: Materialize's relations, read on r1.
    rows = eventually(
        lambda: system.sql(
            "SET cluster = heavy; SET cluster_replica = r1;"
            " EXPLAIN ANALYZE CPU, MEMORY FOR MATERIALIZED VIEW q3",
            timeout=60,
        ),
        60,
    )
    assert len(rows) == len(nodes), rows
    operators = [r[0] for r in rows]
    # Indented by nesting: the root is not indented, some node is.
    assert not operators[0].startswith(" ")
    assert any(o.startswith("  ") for o in operators)

    skew = system.sql(
        "SET cluster = heavy; SET cluster_replica = r1;"
        " EXPLAIN ANALYZE CPU, MEMORY WITH SKEW FOR MATERIALIZED VIEW q3",
        timeout=60,
    )
    assert skew, "r1 has two workers: a row per node and worker"

    as_sql = system.sql("EXPLAIN ANALYZE MEMORY FOR MATERIALIZED VIEW q3 AS SQL", timeout=60)
    assert "mz_lir_mapping" in as_sql[0][0]

    # Without a replica target: every replica's persisted relations, a replica column.
    every = eventually(
        lambda: system.sql("EXPLAIN ANALYZE HYDRATION FOR MATERIALIZED VIEW q3", timeout=60),
        60,
    )
    assert len(every) == 2 * len(nodes), every
    assert {row[1] for row in every} == {"r1", "r2"}
    assert all(row[2] is True for row in every), every
    del oid


def test_loupe_sql_shows_progress_while_a_view_hydrates(system, heavy):
    done = system.cli("-c", f"SET cluster = heavy; CREATE MATERIALIZED VIEW q1 AS {Q1}")
    assert "CREATE MATERIALIZED VIEW" in done.stdout
    # Not a terminal: plain lines, no carriage returns, no escape sequences.
    lines = [line for line in done.stderr.splitlines() if "q1" in line]
    assert lines, done.stderr
    assert "\r" not in done.stderr
    assert "\x1b" not in done.stderr
    assert any("records" in line for line in lines), lines


def episodes_of(system: LoupeUp, replica_id: str) -> dict[str, str]:
    rows = system.sql(
        "SELECT object_id, status FROM mz_internal.mz_object_hydration_history"
        f" WHERE replica_id = '{replica_id}' AND incarnation = ("
        " SELECT max(incarnation) FROM mz_internal.mz_object_hydration_history"
        f" WHERE replica_id = '{replica_id}')"
    )
    return dict(rows)


def kill_while_hydrating(system: LoupeUp, replica_id: str, attempts: int = 5) -> tuple[str, str]:
    """Create Q5-shaped materialized views while ``replica_id`` runs throttled, until one is
    seen hydrating there; then stop the replica (SIGSTOP), confirm after two flushes that SQL
    still says hydrating (no report can come from a stopped process), and kill it -9.
    Returns the view's name and id. A view that finished before the stop is a miss: the
    replica runs again and the next view is tried, throttled twice as hard (on a loaded
    machine the throttle's own wake-ups come late, and the storage flush that makes a
    status visible takes longer)."""
    for attempt in range(attempts):
        # The replica's current process (a replica replaced meanwhile has a new one).
        pid = eventually(lambda: replica_pid(system.data_dir, replica_id), 120)
        name = f"q5_{attempt}"
        known = set(episodes_of(system, replica_id))
        # Never below 5 ms a period: starved more, a replica misses its heartbeats.
        with Throttled(pid, run=max(0.005, 0.02 / 2**attempt)) as throttled:
            creating = threading.Thread(
                target=lambda n=name: system.sql(
                    f"SET cluster = heavy; CREATE MATERIALIZED VIEW {n} AS {Q5}", timeout=300
                ),
                daemon=True,
            )
            creating.start()

            def started(known: set[str] = known) -> tuple[str, str]:
                new = {o: s for o, s in episodes_of(system, replica_id).items() if o not in known}
                return next(iter(new.items()), ("", ""))

            oid, status = eventually(lambda: started()[0] and started(), 120, interval=0.05)
            # A process starved past the heartbeat timeout was replaced: a miss.
            if status == "hydrating" and throttled.freeze():
                time.sleep(2.5)
                if episodes_of(system, replica_id).get(oid) == "hydrating":
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        # Stopped past the heartbeat timeout on a loaded machine, it was
                        # replaced first: a miss, try the next view.
                        creating.join(300)
                        continue
                    creating.join(300)
                    return name, oid
        creating.join(300)
    raise AssertionError(f"no view was caught hydrating on {replica_id} in {attempts} tries")


def test_a_replica_killed_mid_hydration(system, heavy):
    r1, r2 = heavy["r1"], heavy["r2"]
    system.sql(f"SET cluster = heavy; CREATE MATERIALIZED VIEW q1_kept AS {Q1}", timeout=300)
    kept = object_id(system, "q1_kept")
    kept_nodes = node_ids(system, "q1_kept")

    # Both replicas' rows, every node hydrated: they come in separate flushes, and a
    # wait for "all hydrated" alone once read r1's rows before r2's were visible.
    def hydrated_on_both() -> bool:
        current = statuses(system, kept)
        on = {replica: {n for (r, n) in current if r == replica} for replica in (r1, r2)}
        return on == {r1: kept_nodes, r2: kept_nodes} and all(current.values())

    eventually(hydrated_on_both, 120)
    before_r2 = {key: value for key, value in statuses(system, kept).items() if key[0] == r2}
    name, oid = kill_while_hydrating(system, r1)

    # The first incarnation's episode ends interrupted; the next one starts over and finishes.
    def restarted_and_hydrated() -> bool:
        episodes = system.sql(
            "SELECT incarnation, status FROM mz_internal.mz_object_hydration_history"
            f" WHERE object_id = '{oid}' AND replica_id = '{r1}' ORDER BY incarnation"
        )
        assert [s for _, s in episodes] == ["interrupted", "hydrated"], episodes
        current = statuses(system, oid)
        assert {n for (r, n) in current if r == r1} == node_ids(system, name)
        assert all(current.values()), current
        return True

    eventually(restarted_and_hydrated, 180)
    # r2 was never touched: its rows are what they were, and it hydrated the view too.
    after_r2 = {key: value for key, value in statuses(system, kept).items() if key[0] == r2}
    assert after_r2 == before_r2
    assert {n for (r, n) in statuses(system, oid) if r == r2} == node_ids(system, name)
    replicas = system.sql(
        "SELECT incarnation, status FROM mz_internal.mz_replica_hydration_history"
        f" WHERE replica_id = '{r1}' ORDER BY incarnation"
    )
    assert replicas[0][1] == "interrupted", replicas
    assert replicas[-1][1] == "hydrated", replicas
