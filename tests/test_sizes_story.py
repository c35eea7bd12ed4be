"""Issue 11 item 2, end to end: replicas live within their size.

A cluster of a small size (``2xsmall``: 128 MiB) gets an index on a cross
join built to exceed that: reading it fails with 53200 (and so does a
materialized view of the cross join), while a small index
on the same replica keeps answering and following its table, a SELECT that
would exceed the budget fails and the next one works, and the replica never
restarts nor grows to hold the join. ``mz_cluster_replica_sizes`` lists the
sizes, and an unknown size is refused.
"""

from __future__ import annotations

import pytest

from loupe.common.errors import LoupeError
from loupe.sizes import GIB, MIB
from loupe.testing import assert_eventually
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROWS = 8_000  # the cross join: 64 million rows, about 1.5 GB as polars holds them
REPLICA_QUERY = (
    "SELECT r.id, s.status, s.incarnation FROM mz_internal.mz_cluster_replica_statuses s "
    "JOIN mz_catalog.mz_cluster_replicas r ON r.id = s.replica_id "
    "JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = 'small'"
)


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("sizes-story") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


def on_small(system: LoupeUp, query: str) -> list[tuple]:
    return system.sql(f"SET cluster = 'small'; {query}", timeout=120)


def error_of(system: LoupeUp, query: str) -> LoupeError:
    with pytest.raises(LoupeError) as caught:
        on_small(system, query)
    return caught.value


def test_sizes_are_a_relation_and_unknown_ones_are_refused(system):
    rows = system.sql(
        "SELECT size, workers, memory_bytes FROM mz_catalog.mz_cluster_replica_sizes"
        " WHERE size IN ('2xsmall', '1') ORDER BY memory_bytes"
    )
    assert rows == [("2xsmall", 1, 128 * MIB), ("1", 1, 2 * GIB)]
    with pytest.raises(LoupeError) as caught:
        system.sql("CREATE CLUSTER huge (SIZE 'enormous')")
    assert caught.value.code == "22023"
    assert caught.value.message == "unknown cluster replica size 'enormous'"


async def test_a_cross_join_past_the_budget_fails_alone(system):
    system.sql("CREATE CLUSTER small (SIZE '2xsmall')")

    def online():
        rows = system.sql(REPLICA_QUERY)
        assert len(rows) == 1, rows  # (its first status may not be written yet)
        ((replica_id, status, incarnation),) = rows
        assert status == "online"
        return replica_id, incarnation

    replica_id, incarnation = await assert_eventually(online, timeout=60)
    values = ", ".join(f"({i})" for i in range(ROWS))
    system.sql(f"CREATE TABLE t (a int); INSERT INTO t VALUES {values}")
    system.sql("CREATE TABLE s (a int); INSERT INTO s VALUES (1)")
    system.sql("CREATE VIEW sv AS SELECT a FROM s")
    system.sql("CREATE DEFAULT INDEX IN CLUSTER small ON sv")
    system.sql("CREATE VIEW big AS SELECT x.a AS a, y.a AS b FROM t AS x CROSS JOIN t AS y")
    system.sql("CREATE DEFAULT INDEX IN CLUSTER small ON big")

    # The index on the cross join, and what reads it, answer 53200.
    error = error_of(system, "SELECT * FROM big LIMIT 1")
    assert error.code == "53200"
    assert "out of memory" in error.message
    assert "128 MiB" in error.message
    assert error_of(system, "SELECT count(*) FROM big").code == "53200"

    # The other index on the same replica answers and follows its table.
    assert on_small(system, "SELECT a FROM sv") == [(1,)]
    system.sql("INSERT INTO s VALUES (2)")
    assert sorted(on_small(system, "SELECT a FROM sv")) == [(1,), (2,)]

    # A materialized view of it: reads answer its error rather than wait for it to write.
    system.sql(
        "CREATE MATERIALIZED VIEW bigmv IN CLUSTER small AS"
        " SELECT x.a AS a, y.a AS b FROM t AS x CROSS JOIN t AS y"
    )
    assert error_of(system, "SELECT count(*) FROM bigmv").code == "53200"

    # A SELECT that would exceed the budget fails; the next one works.
    assert error_of(system, "SELECT count(*) FROM t AS x, t AS y").code == "53200"
    assert on_small(system, "SELECT count(*) FROM t") == [(ROWS,)]

    # Same incarnation (no restart), and the replica never held the join.
    assert online() == (replica_id, incarnation)

    def metrics():
        rows = system.sql(
            "SELECT memory_bytes FROM mz_internal.mz_cluster_replica_metrics"
            f" WHERE replica_id = '{replica_id}'"
        )
        assert rows
        return rows[0][0]

    assert await assert_eventually(metrics, timeout=30) < GIB

    # Dropping the failed index and view lets go of them; the cluster serves on.
    system.sql("DROP INDEX big_primary_idx; DROP MATERIALIZED VIEW bigmv")
    assert sorted(on_small(system, "SELECT a FROM sv")) == [(1,), (2,)]
