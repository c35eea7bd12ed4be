"""Replica introspection in SQL (issue 12): resolution, routing, per-replica views.

The replica side (feeding log ids from its in-memory logs) belongs to the
replica; here a ``StorageController`` stands in for it: a dataflow importing a
log id (empty shard id) is fed what the test put in ``logs[log_id]``, as the
targeted replica feeds its logs. Persisted ``mz_internal`` collections are real
shards (``StorageController``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from loupe.coordinator.builtin_views import inline_builtin_views
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.tests.conftest import StorageController, TableHarness, table_system
from loupe.interval import structs
from loupe.introspection.logs import BY_NAME
from loupe.persist import Shard, open_location
from loupe.persist.shard import arrow_schema

ELAPSED = BY_NAME["mz_scheduling_elapsed_raw"]
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]


class LogController(StorageController):
    """A controller whose replica feeds ``logs[log_id]`` (row -> count) to log imports."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.logs: dict[str, Counter] = {}

    def snapshot(self, collection_id: str, timestamp: int) -> pa.Table:
        variant = next((v for v in BY_NAME.values() if v.log_id == collection_id), None)
        if variant is None and collection_id.startswith("u"):
            # A user table: its shard, as a replica reads it.
            blob, consensus = open_location(self.blob_uri, self.consensus_uri)
            contents = Shard(collection_id, blob, consensus).snapshot(timestamp)
            return contents.append_column(
                "mz_timestamp", pa.array([timestamp] * contents.num_rows, pa.uint64())
            )
        if variant is None:
            return super().snapshot(collection_id, timestamp)
        names = [*variant.column_names, "mz_timestamp", "mz_diff"]
        return pa.Table.from_pylist(
            [
                dict(zip(names, [*structs(list(row)), timestamp, count], strict=True))
                for row, count in self.logs.get(collection_id, Counter()).items()
            ],
            schema=arrow_schema(list(variant.columns)),
        )

    def log_imports(self) -> list[Any]:
        """The source imports of the last dataflow created."""
        from loupe.plan.codec import dataflow_from_proto

        return list(dataflow_from_proto(self.created[-1].dataflow).source_imports)


@pytest.fixture
async def logs(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    async with table_system(nats_url, data_dir, controller_class=LogController) as harness:
        controller = harness.controller
        assert isinstance(controller, LogController)
        controller.logs[ELAPSED.log_id] = Counter({(7, 0): 100, (7, 1): 50, (8, 0): 5})
        controller.logs[OPERATORS.log_id] = Counter(
            {(7, 0, "Join"): 1, (7, 1, "Join"): 1, (8, 0, "Map"): 1}
        )
        yield harness


def _sql(sql: str, **options: Any) -> str:
    return inline_builtin_views(parse_one(sql).expression, **options).sql()  # type: ignore[attr-defined]


def test_introspection_views_inline_recursively_for_their_schema() -> None:
    mz = _sql("SELECT * FROM mz_introspection.mz_scheduling_elapsed")
    assert "mz_introspection.mz_scheduling_elapsed_raw" in mz
    assert "mz_scheduling_elapsed_per_worker" not in mz.replace("AS mz_scheduling", "")
    assert "replica_id" not in mz
    internal = _sql("SELECT * FROM mz_internal.mz_scheduling_elapsed")
    assert "mz_internal.mz_scheduling_elapsed_raw" in internal
    assert "replica_id, incarnation" in internal


def test_unqualified_introspection_views_need_the_search_path() -> None:
    assert "mz_scheduling_elapsed_raw" not in _sql("SELECT * FROM mz_scheduling_elapsed")
    found = _sql("SELECT * FROM mz_scheduling_elapsed", search_path=["mz_introspection"])
    assert "mz_introspection.mz_scheduling_elapsed_raw" in found
    shadowed = _sql(
        "SELECT * FROM mz_scheduling_elapsed",
        search_path=["public", "mz_introspection"],
        is_relation=lambda name: name == "public.mz_scheduling_elapsed",
    )
    assert "mz_scheduling_elapsed_raw" not in shadowed


async def test_the_consoles_search_path_means_the_replicas_own_relations(
    logs: TableHarness,
) -> None:
    """On the Console's search path (mz_internal before mz_introspection) an unqualified
    introspection name is the replica's relation, as in Materialize, not its persisted
    twin in mz_internal; other mz_internal names still resolve there."""
    session = await logs.session()
    await logs.execute(
        session, "SET search_path = mz_catalog, mz_internal, mz_catalog_unstable, mz_introspection"
    )
    rows = await logs.rows(session, "SELECT id, elapsed_ns FROM mz_scheduling_elapsed ORDER BY id")
    assert [(i, int(e)) for i, e in rows] == [(7, 150), (8, 5)]
    rows = await logs.rows(session, "SELECT count(*) FROM mz_dataflow_operators_per_worker")
    assert rows == [(3,)]
    assert await logs.rows(session, "SELECT count(*) FROM mz_cluster_replica_statuses") != []
    # Without mz_introspection on the path, mz_internal's relation is the one named.
    await logs.execute(session, "SET search_path = mz_internal")
    columns = await logs.rows(
        session, "SELECT replica_id FROM mz_scheduling_elapsed WHERE replica_id = 'none'"
    )
    assert columns == []


async def test_introspection_reads_the_only_replica_of_the_session_cluster(
    logs: TableHarness,
) -> None:
    session = await logs.session()
    rows = await logs.rows(
        session, "SELECT id, elapsed_ns FROM mz_introspection.mz_scheduling_elapsed ORDER BY id"
    )
    assert [(i, int(e)) for i, e in rows] == [(7, 150), (8, 5)]
    controller = logs.controller
    assert isinstance(controller, LogController)
    [source] = controller.log_imports()
    assert (source.id, source.shard_id) == (ELAPSED.log_id, "")
    quickstart = logs.service.coordinator.state.cluster("quickstart")  # type: ignore[attr-defined]
    [replica] = logs.service.coordinator.state.replicas_of(quickstart.id)  # type: ignore[attr-defined]
    peek = controller.peeks[-1]
    assert (peek.cluster_id, peek.replica_id) == (quickstart.id, replica.id)


async def test_raw_logs_join_catalog_and_user_relations(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE TABLE names (id uint8, label text)")
    await logs.tag(session, "INSERT INTO names VALUES (7, 'seven')")
    rows = await logs.rows(
        session,
        "SELECT DISTINCT n.label, o.name, c.name FROM mz_introspection.mz_dataflow_operators o "
        "JOIN names n ON n.id = o.id JOIN mz_catalog.mz_clusters c ON c.name = 'quickstart'",
    )
    assert rows == [("seven", "Join", "quickstart")]
    await logs.tag(session, "SET search_path = mz_introspection, public")
    rows = await logs.rows(session, "SELECT count(*) FROM mz_dataflow_operators_per_worker")
    assert rows == [(3,)]


def _state(harness: TableHarness) -> Any:
    return harness.service.coordinator.state  # type: ignore[union-attr]


async def test_log_reads_of_a_replicated_cluster_must_target_a_replica(
    logs: TableHarness,
) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    await logs.tag(session, "SET cluster = two")
    read = "SELECT count(*) FROM mz_introspection.mz_dataflow_operators"
    error = await logs.error(session, read)
    assert (error.code, error.message) == ("0A000", "log source reads must target a replica")
    assert "mz_dataflow_operators_per_worker" in error.detail
    assert "SET cluster_replica = <replica-name>" in error.hint
    await logs.tag(session, "SET cluster_replica = r2")
    assert await logs.rows(session, read) == [(2,)]
    two = _state(logs).cluster("two")
    assert logs.controller.peeks[-1].cluster_id == two.id
    assert logs.controller.peeks[-1].replica_id == _state(logs).replica(two.id, "r2").id


async def test_log_reads_of_a_cluster_without_introspection_are_refused(
    logs: TableHarness,
) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER quiet (SIZE '1', INTROSPECTION INTERVAL = 0)")
    await logs.tag(session, "SET cluster = quiet")
    error = await logs.error(session, "SELECT * FROM mz_introspection.mz_scheduling_elapsed_raw")
    assert error.code == "0A000"
    assert error.message == "cannot read log sources of replica with disabled introspection"
    assert "quiet" in error.hint


async def test_log_reads_refuse_as_of_and_materialized_views(logs: TableHarness) -> None:
    session = await logs.session()
    error = await logs.error(
        session, "SELECT * FROM mz_introspection.mz_dataflow_operators AS OF 1"
    )
    assert error.code == "0A000"
    assert "no history" in error.message
    error = await logs.error(
        session,
        "CREATE MATERIALIZED VIEW m AS SELECT * FROM mz_introspection.mz_dataflow_operators",
    )
    assert (error.code, error.message) == (
        "0A000",
        "materialized view objects cannot depend on log sources",
    )


async def test_a_view_over_logs_reads_them_on_the_session_replica(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(
        session, "CREATE VIEW ops AS SELECT name FROM mz_introspection.mz_dataflow_operators"
    )
    assert sorted(await logs.rows(session, "SELECT name FROM ops")) == [("Join",), ("Map",)]
    [source] = logs.controller.log_imports()  # type: ignore[attr-defined]
    assert (source.id, source.shard_id) == (OPERATORS.log_id, "")


async def _persist_elapsed(harness: TableHarness, replica_id: str) -> None:
    collection = ELAPSED.collection_id
    updates = [((replica_id, 1, 7, 0), 10), ((replica_id, 1, 7, 1), 5), (("u99", 1, 7, 0), 1)]
    for row, diff in updates:
        harness.controller.contents[collection][row] += diff
    await harness.controller._flush({collection: updates})


async def test_persisted_introspection_is_read_on_the_system_cluster(logs: TableHarness) -> None:
    session = await logs.session()
    await _persist_elapsed(logs, "u1")
    rows = await logs.rows(
        session,
        "SELECT replica_id, incarnation, id, elapsed_ns FROM mz_internal.mz_scheduling_elapsed "
        "ORDER BY replica_id",
    )
    assert [(r, i, o, int(e)) for r, i, o, e in rows] == [("u1", 1, 7, 15), ("u99", 1, 7, 1)]
    system = _state(logs).cluster("mz_catalog_server")
    assert logs.controller.peeks[-1].cluster_id == system.id
    [source] = logs.controller.log_imports()  # type: ignore[attr-defined]
    assert (source.id, source.shard_id) == (ELAPSED.collection_id, ELAPSED.collection_id)


async def test_per_replica_views_live_and_die_with_their_replica(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    c = _state(logs).cluster("c")
    r1 = _state(logs).replica(c.id, "r1").id
    await _persist_elapsed(logs, r1)
    per_replica = f"mz_internal.mz_scheduling_elapsed_{r1}"
    rows = await logs.rows(session, f"SELECT * FROM {per_replica}")
    assert [(i, o, int(e)) for i, o, e in rows] == [(1, 7, 15)]
    raw = await logs.rows(
        session,
        f"SELECT incarnation, id, worker_id, count(*) "
        f"FROM mz_internal.mz_scheduling_elapsed_raw_{r1} GROUP BY 1, 2, 3",
    )
    assert sorted(raw) == [(1, 7, 0, 10), (1, 7, 1, 5)]  # counts are multiplicities
    await logs.tag(session, f"CREATE VIEW mine AS SELECT id FROM {per_replica}")
    await logs.tag(session, "CREATE VIEW over_mine AS SELECT id FROM mine")
    assert await logs.rows(session, "SELECT * FROM over_mine") == [(7,)]

    error = await logs.error(session, "DROP CLUSTER REPLICA c.r1")
    assert error.code == "2BP01"
    assert error.message == (
        'cannot drop cluster replica "c.r1": still depended upon by '
        'view "materialize.public.mine", view "materialize.public.over_mine"'
    )
    error = await logs.error(session, "DROP CLUSTER c")
    assert error.code == "2BP01"
    assert "materialize.public.mine" in error.message
    error = await logs.error(session, "ALTER CLUSTER c SET (INTROSPECTION INTERVAL = 0)")
    assert error.code == "2BP01"
    assert error.message.startswith('cannot disable introspection of cluster "c"')
    await logs.tag(session, "DROP CLUSTER REPLICA c.r2")  # nothing reads r2's views
    await logs.tag(session, "DROP CLUSTER REPLICA c.r1 CASCADE")
    error = await logs.error(session, "SELECT * FROM mine")
    assert error.code == "42P01"
    error = await logs.error(session, f"SELECT * FROM {per_replica}")
    assert error.code == "42P01"


async def test_clusters_without_introspection_have_no_per_replica_views(
    logs: TableHarness,
) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER quiet (SIZE '1', INTROSPECTION INTERVAL = 0)")
    quiet = _state(logs).cluster("quiet")
    [replica] = _state(logs).replicas_of(quiet.id)
    error = await logs.error(
        session, f"SELECT * FROM mz_internal.mz_dataflow_operators_{replica.id}"
    )
    assert error.code == "42P01"


async def test_introspection_retention_is_a_system_variable(logs: TableHarness) -> None:
    session = await logs.session()
    assert await logs.rows(session, "SHOW introspection_retention") == [("86400s",)]
    await logs.tag(session, "ALTER SYSTEM SET introspection_retention = '2h'")
    assert await logs.rows(session, "SHOW introspection_retention") == [("7200s",)]


async def test_alter_cluster_changes_introspection_in_the_catalog(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'))")
    tag = await logs.tag(session, "ALTER CLUSTER c SET (INTROSPECTION INTERVAL = 0)")
    assert tag == "ALTER CLUSTER"
    c = _state(logs).cluster("c")
    assert c.introspection_interval_ns == 0
    # What the controller follows (ApplyCatalog) to reconfigure the replicas' logging.
    applied = logs.controller.applied[-1]
    assert next(x for x in applied.clusters if x.id == c.id).introspection_interval_ns == 0
    rows = await logs.rows(
        session,
        "SELECT introspection_interval, introspection_debugging FROM mz_catalog.mz_clusters "
        "WHERE name = 'c'",
    )
    assert rows == [(None, False)]
    shown = await logs.rows(session, "SHOW CREATE CLUSTER c")
    assert shown[0][-1].endswith("(INTROSPECTION INTERVAL = 0)")
    await logs.tag(session, "SET cluster = c")
    error = await logs.error(session, "SELECT * FROM mz_introspection.mz_dataflow_operators")
    assert error.code == "0A000"
    await logs.tag(session, "ALTER CLUSTER c RESET (INTROSPECTION INTERVAL)")
    await logs.tag(session, "ALTER CLUSTER c SET (INTROSPECTION DEBUGGING = true)")
    rows = await logs.rows(
        session,
        "SELECT introspection_interval::text, introspection_debugging FROM mz_catalog.mz_clusters "
        "WHERE name = 'c'",
    )
    assert rows == [("00:00:01", True)]
    assert (
        len(await logs.rows(session, "SELECT * FROM mz_introspection.mz_dataflow_operators")) == 2
    )
    error = await logs.error(
        session, "ALTER CLUSTER mz_catalog_server SET (INTROSPECTION INTERVAL = 0)"
    )
    assert error.code == "42501"


async def test_raw_logs_are_listed_as_log_sources(logs: TableHarness) -> None:
    session = await logs.session()
    rows = await logs.rows(
        session,
        "SELECT s.id, s.type, o.type, sc.name FROM mz_catalog.mz_sources s "
        "JOIN mz_catalog.mz_objects o ON o.id = s.id "
        "JOIN mz_catalog.mz_schemas sc ON sc.id = s.schema_id "
        "WHERE s.name = 'mz_scheduling_elapsed_raw'",
    )
    assert rows == [(ELAPSED.log_id, "log", "source", "mz_introspection")]
    columns = await logs.rows(
        session, f"SELECT name FROM mz_catalog.mz_columns WHERE id = '{ELAPSED.log_id}'"
    )
    assert sorted(columns) == [("id",), ("worker_id",)]


async def test_subscribe_to_logs_needs_a_single_replica_and_no_as_of(logs: TableHarness) -> None:
    session = await logs.session()
    subscribe = "SUBSCRIBE (SELECT * FROM mz_introspection.mz_dataflow_operators)"
    error = await logs.error(session, f"{subscribe} AS OF 1")
    assert error.code == "0A000"
    assert "no history" in error.message
    await logs.tag(session, "CREATE CLUSTER two REPLICAS (r1 (SIZE '1'), r2 (SIZE '1'))")
    await logs.tag(session, "SET cluster = two")
    error = await logs.error(session, subscribe)
    assert error.message == "log source reads must target a replica"
    await logs.tag(session, "SET cluster_replica = r1")
    error = await logs.error(session, subscribe)
    assert error.message == "SUBSCRIBE to log sources needs a cluster with a single replica"
    assert "mz_internal" in error.hint


async def test_persisted_introspection_reads_as_of_an_earlier_time(engine: TableHarness) -> None:
    """The persisted collections keep history: AS OF reads it (on the real engine, from shards)."""
    session = await engine.session()
    collection = ELAPSED.collection_id
    first = await engine.controller._flush({collection: [(("u1", 1, 7, 0), 3)]})
    await engine.controller._flush({collection: [(("u1", 2, 7, 0), 4)]})
    read = "SELECT incarnation, elapsed_ns FROM mz_internal.mz_scheduling_elapsed"
    assert [(i, int(e)) for i, e in await engine.rows(session, f"{read} AS OF {first - 1}")] == [
        (1, 3)
    ]
    assert sorted((i, int(e)) for i, e in await engine.rows(session, read)) == [(1, 3), (2, 4)]
