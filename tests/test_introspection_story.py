"""Issue 12, end to end: every replica's dataflows in SQL, kept after the replica dies.

Real processes (``loupe up``): a cluster of two replicas with an indexed
aggregate; a replica-targeted query over ``mz_introspection`` joins
scheduling time with operators (Materialize's troubleshooting query); the
persisted ``mz_internal`` relations hold both replicas' data, readable from
any cluster; ``kill -9`` of one replica leaves its last state readable, its
next incarnation replaces it (the old one stays readable with ``AS OF``);
per-replica views come and go with their replica and guard their
dependents; ``INTROSPECTION INTERVAL 0`` means no data at all.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from loupe.common.errors import LoupeError
from loupe.introspection.troubleshooting import runnable
from loupe.testing.eventually import eventually_truthy
from loupe.testing.system import LoupeUp, replica_pid

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CONSOLE_SEARCH_PATH = "mz_catalog, mz_internal, mz_catalog_unstable, mz_introspection"
ELAPSED_QUERY = (
    "SELECT mdo.id, mdo.name, mse.elapsed_ns"
    " FROM mz_introspection.mz_scheduling_elapsed mse"
    " JOIN mz_introspection.mz_dataflow_operators mdo ON mse.id = mdo.id"
    " ORDER BY elapsed_ns DESC LIMIT 5"
)


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("introspection-story") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


def replicas(system: LoupeUp, cluster: str) -> dict[str, str]:
    """Replica name -> id of ``cluster``."""
    rows = system.sql(
        "SELECT r.name, r.id FROM mz_catalog.mz_cluster_replicas r"
        f" JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = '{cluster}'"
    )
    return dict(rows)


def status(system: LoupeUp, replica_id: str) -> tuple[str, int] | None:
    rows = system.sql(
        "SELECT status, incarnation FROM mz_internal.mz_cluster_replica_statuses"
        f" WHERE replica_id = '{replica_id}'"
    )
    return rows[0] if rows else None


def targeted(system: LoupeUp, replica: str, query: str) -> list[tuple]:
    return system.sql(f"SET cluster = prod; SET cluster_replica = {replica}; {query}", timeout=60)


def persisted_incarnations(system: LoupeUp, relation: str, replica_id: str, as_of: str = "") -> set:
    rows = system.sql(
        f"SELECT DISTINCT incarnation FROM mz_internal.{relation}"
        f" WHERE replica_id = '{replica_id}'{as_of}"
    )
    return {incarnation for (incarnation,) in rows}


@pytest.fixture(scope="module")
def prod(system: LoupeUp) -> dict[str, str]:
    system.sql("CREATE CLUSTER prod REPLICAS (r1 (SIZE '2'), r2 (SIZE '1'))")
    ids = replicas(system, "prod")

    def online() -> bool:
        assert all(status(system, i) == ("online", 1) for i in ids.values())
        return True

    assert_eventually_sync(online, 90)
    system.sql(
        "SET cluster = prod; CREATE TABLE t (k int, v int);"
        " CREATE VIEW s AS SELECT k, sum(v) FROM t GROUP BY k; CREATE DEFAULT INDEX ON s"
    )
    values = ", ".join(f"({i % 50}, {i})" for i in range(2_000))
    system.sql(f"INSERT INTO t VALUES {values}")
    assert system.sql("SET cluster = prod; SELECT count(*) FROM s", timeout=60) == [(50,)]
    return ids


def assert_eventually_sync(check, timeout: float, interval: float = 0.5):
    """``check()`` until it returns without raising (AssertionError, LoupeError) and truthy."""
    return eventually_truthy(
        check, timeout, retry_on=(AssertionError, LoupeError), interval=interval
    )


def test_replica_targeted_query_reads_that_replica(system, prod):
    def answered():
        rows = targeted(system, "r1", ELAPSED_QUERY)
        # The operators that ran: the import, its Get and the Reduce at least.
        assert len(rows) >= 3
        return rows

    rows = assert_eventually_sync(answered, 60)
    assert all(elapsed > 0 for _, _, elapsed in rows)
    assert [e for _, _, e in rows] == sorted((e for _, _, e in rows), reverse=True)
    # The operators of the indexed aggregate are among them, by their engine names.
    names = {
        name
        for (name,) in targeted(
            system, "r1", "SELECT name FROM mz_introspection.mz_dataflow_operators"
        )
    }
    assert any("Reduce" in name for name in names), names
    # r1 has 2 workers, r2 one: the per-worker relations say so.
    workers = targeted(
        system,
        "r1",
        "SELECT DISTINCT worker_id FROM mz_introspection.mz_scheduling_elapsed_per_worker ORDER BY 1",
    )
    assert workers == [(0,), (1,)]
    workers = targeted(
        system,
        "r2",
        "SELECT DISTINCT worker_id FROM mz_introspection.mz_scheduling_elapsed_per_worker",
    )
    assert workers == [(0,)]


def test_untargeted_introspection_on_two_replicas_is_refused(system, prod):
    with pytest.raises(LoupeError) as caught:
        system.sql("SET cluster = prod; SELECT * FROM mz_introspection.mz_dataflow_operators")
    error = caught.value
    assert (error.code, error.message) == ("0A000", "log source reads must target a replica")
    assert "SET cluster_replica" in f"{error.detail} {error.hint}"


def test_persisted_relations_hold_every_replica(system, prod):
    def both():
        rows = dict(
            system.sql(
                "SELECT replica_id, count(*) FROM mz_internal.mz_dataflow_operators GROUP BY 1"
            )
        )
        assert set(prod.values()) <= set(rows), rows
        return rows

    counts = assert_eventually_sync(both, 60)
    assert all(counts[i] > 0 for i in prod.values())

    # Read from another cluster than prod's, without a target.
    def sizes():
        rows = system.sql(
            "SET cluster = quickstart; SELECT replica_id, sum(records)"
            " FROM mz_internal.mz_arrangement_sizes GROUP BY 1"
        )
        by_replica = dict(rows)
        assert all(by_replica.get(i, 0) > 0 for i in prod.values()), by_replica
        return by_replica

    assert_eventually_sync(sizes, 60)


def test_a_killed_replica_keeps_its_rows_until_its_next_incarnation(system, prod):
    r1 = prod["r1"]
    assert_eventually_sync(
        lambda: persisted_incarnations(system, "mz_arrangement_sizes", r1) == {1}, 60
    )
    before_kill = system.sql("SELECT mz_now()")[0][0]
    pid = replica_pid(system.data_dir, r1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # The crash is visible, and the replacement runs as incarnation 2.
    assert_eventually_sync(
        lambda: (
            system.sql(
                "SELECT count(*) FROM mz_internal.mz_cluster_replica_status_history"
                f" WHERE replica_id = '{r1}' AND status = 'offline' AND incarnation = 1"
            )[0][0]
            == 1
        ),
        60,
    )
    assert_eventually_sync(lambda: status(system, r1) == ("online", 2), 120)
    # Incarnation 2's rows replace incarnation 1's: never both, never neither.
    seen = []

    def replaced():
        incarnations = persisted_incarnations(system, "mz_arrangement_sizes", r1)
        seen.append(incarnations)
        return incarnations == {2}

    assert_eventually_sync(replaced, 90, interval=0.2)
    assert all(s in ({1}, {2}) for s in seen), seen
    # Incarnation 1's last state stays readable with AS OF.
    assert persisted_incarnations(
        system, "mz_arrangement_sizes", r1, as_of=f" AS OF {before_kill}"
    ) == {1}


def test_per_replica_views_guard_their_dependents(system, prod):
    r2 = prod["r2"]
    rows = system.sql(f"SELECT count(*) FROM mz_internal.mz_dataflow_operators_{r2}")
    assert rows[0][0] > 0
    system.sql(f"CREATE VIEW r2_ops AS SELECT * FROM mz_internal.mz_dataflow_operators_{r2}")
    with pytest.raises(LoupeError) as caught:
        system.sql("DROP CLUSTER REPLICA prod.r2")
    assert caught.value.code == "2BP01"
    assert "r2_ops" in caught.value.message
    system.sql("DROP CLUSTER REPLICA prod.r2 CASCADE")
    assert system.sql("SELECT count(*) FROM mz_catalog.mz_views WHERE name = 'r2_ops'") == [(0,)]
    with pytest.raises(LoupeError) as caught:
        system.sql(f"SELECT * FROM mz_internal.mz_dataflow_operators_{r2}")
    assert caught.value.code == "42P01"
    # The dropped replica's rows are retracted.
    assert_eventually_sync(
        lambda: (
            system.sql(
                f"SELECT count(*) FROM mz_internal.mz_dataflow_operators WHERE replica_id = '{r2}'"
            )
            == [(0,)]
        ),
        60,
    )


def test_introspection_interval_zero_means_nothing(system, prod):
    system.sql("CREATE CLUSTER quiet (SIZE '1', INTROSPECTION INTERVAL = 0)")
    (quiet,) = replicas(system, "quiet").values()
    assert_eventually_sync(lambda: status(system, quiet) == ("online", 1), 90)
    system.sql(
        "CREATE VIEW qv AS SELECT count(*) FROM t; CREATE DEFAULT INDEX IN CLUSTER quiet ON qv"
    )
    assert system.sql("SET cluster = quiet; SELECT * FROM qv", timeout=60) == [(2_000,)]
    time.sleep(3)  # several intervals of other clusters
    assert system.sql(
        f"SELECT count(*) FROM mz_internal.mz_dataflow_operators WHERE replica_id = '{quiet}'"
    ) == [(0,)]
    with pytest.raises(LoupeError):
        system.sql(f"SELECT * FROM mz_internal.mz_dataflow_operators_{quiet}")
    # ALTER turns it on without restarting the replica, and off again.
    system.sql("ALTER CLUSTER quiet SET (INTROSPECTION INTERVAL = '1s')")
    assert_eventually_sync(
        lambda: (
            system.sql(
                f"SELECT count(*) FROM mz_internal.mz_dataflow_operators WHERE replica_id = '{quiet}'"
            )[0][0]
            > 0
        ),
        60,
    )
    system.sql("ALTER CLUSTER quiet SET (INTROSPECTION INTERVAL = 0)")
    assert_eventually_sync(
        lambda: (
            system.sql(
                f"SELECT count(*) FROM mz_internal.mz_dataflow_operators WHERE replica_id = '{quiet}'"
            )
            == [(0,)]
        ),
        60,
    )
    assert status(system, quiet) == ("online", 1)
    assert (
        system.sql("SELECT introspection_interval FROM mz_catalog.mz_clusters WHERE name = 'quiet'")
        != []
    )


def test_materializes_troubleshooting_queries_run_unchanged(system, prod):
    """Item 9: every query of Materialize's documentation and Console runs on a replica
    (``SET cluster_replica``), as written; those over ``mz_introspection`` run again over
    ``mz_internal`` from another cluster, for every replica at once."""
    failures = {}
    answered = {}
    for entry in runnable():
        # The Console's sessions name relations on its search path (executeSql.tsx).
        sql = f"SET search_path = {CONSOLE_SEARCH_PATH}; {entry.sql}"
        try:
            answered[entry.name] = targeted(system, "r1", sql)
        except LoupeError as error:
            failures[entry.name] = f"{error.code}: {error.message}"
            continue
        if "mz_introspection." in entry.sql:
            persisted = entry.sql.replace("mz_introspection.", "mz_internal.")
            try:
                system.sql(f"SET cluster = quickstart; {persisted}", timeout=60)
            except LoupeError as error:
                failures[f"{entry.name} (mz_internal)"] = f"{error.code}: {error.message}"
    assert not failures, failures
    # The expensive-dataflow query names the index's dataflow, with a positive time.
    assert any(elapsed.micros > 0 for _, _, elapsed in answered["dataflow_elapsed"])
    assert answered["dataflow_arrangement_sizes"], answered
