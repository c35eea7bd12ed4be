"""The coordinator over real NATS and real gRPC, with small Catalog and Controller servicers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
import structlog

from loupe import sizes
from loupe.builtins import MZ_CLUSTERS
from loupe.common.errors import LoupeError, client_error
from loupe.common.transport import connect, publish
from loupe.common.values import from_row
from loupe.coordinator.coordinator import CATALOG_CHANGES_SUBJECT
from loupe.interval import Interval, structs
from loupe.persist import Shard, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.sql.v1 import sql_pb2
from loupe.testing import assert_eventually

# Fixtures (harness, start_fakes, start_coordinator) live in conftest.py.
Harness = Any


def kinds(responses: list[sql_pb2.ExecuteResponse]) -> list[str]:
    return [str(r.WhichOneof("kind")) for r in responses]


def error_of(responses: list[sql_pb2.ExecuteResponse]) -> sql_pb2.ExecuteResponse:
    assert responses[-1].HasField("error"), kinds(responses)
    return responses[-1].error


async def test_create_cluster_transacts_applies_and_appends_catalog_rows(harness: Harness) -> None:
    """CREATE CLUSTER -> Transact, ApplyCatalog, AppendUpdates with the new rows, then the answer."""
    session = await harness.session()
    responses = await harness.execute(session, "CREATE CLUSTER c (SIZE '2', REPLICATION FACTOR 2)")
    assert kinds(responses) == ["complete"]
    assert responses[0].complete.tag == "CREATE CLUSTER"

    (transact,) = harness.catalog.requests
    op = transact.ops[0].create_cluster
    assert (
        op.cluster.name,
        op.cluster.size,
        op.cluster.replication_factor,
        op.cluster.managed,
    ) == (
        "c",
        "2",
        2,
        True,
    )
    assert list(op.replicas) == []  # the catalog names a managed cluster's replicas
    assert op.cluster.owner_id == "u1"  # the materialize role

    applied = harness.controller.applied[-1]
    assert "c" in [c.name for c in applied.clusters]
    append = harness.controller.appends[-1]
    updates = {
        c.collection_id: [(from_row(u.row), u.diff) for u in c.updates] for c in append.collections
    }
    cluster_id = next(c.id for c in harness.catalog.clusters if c.name == "c")
    assert updates["s101"] == [
        ((cluster_id, "c", "u1", True, "2", 2, Interval(micros=1_000_000), False), 1)
    ]
    assert sorted((row[1], row[3]) for row, _ in updates["s102"]) == [("r1", "2"), ("r2", "2")]
    assert all(diff == 1 for _, diff in updates["s102"])


async def test_select_right_after_ddl_sees_it_through_the_system_cluster(harness: Harness) -> None:
    """A SELECT after CREATE CLUSTER peeks the system cluster's replica and sees the cluster."""
    session = await harness.session()
    await harness.execute(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE '2'))")
    rows = await harness.rows(
        session,
        "SELECT c.name, r.name AS replica, r.size FROM mz_catalog.mz_clusters c "
        "JOIN mz_catalog.mz_cluster_replicas r ON r.cluster_id = c.id WHERE c.name = 'c' "
        "ORDER BY replica",
    )
    assert rows == [("c", "r1", "1"), ("c", "r2", "2")]
    peek = harness.controller.peeks[-1]
    assert peek.cluster_id == "s1"  # mz_catalog_server
    assert peek.replica_id == ""
    # Strict serializable: read at the oracle's read timestamp, at or after the DDL's commit.
    assert peek.peek.timestamp >= harness.catalog.timestamp
    # A transient dataflow on that cluster read both collections from storage.
    _, dataflow = harness.controller.dataflows[peek.peek.target_id.removesuffix("_idx")]
    assert sorted(s.id for s in dataflow.source_imports) == ["s101", "s102"]
    assert all(s.blob_uri.startswith("file://") for s in dataflow.source_imports)
    assert dataflow.as_of == peek.peek.timestamp


async def test_select_streams_description_rows_and_tag(harness: Harness) -> None:
    """Execute streams description, rows and complete{SELECT n}."""
    session = await harness.session()
    responses = await harness.execute(session, "SELECT name FROM mz_clusters ORDER BY name")
    assert kinds(responses) == ["description", "rows", "complete"]
    assert [c.name for c in responses[0].description.columns] == ["name"]
    assert [from_row(r) for r in responses[1].rows.rows] == [
        ("mz_catalog_server",),
        ("quickstart",),
    ]
    assert responses[2].complete.tag == "SELECT 2"


async def test_cluster_replica_sizes_are_a_relation(harness: Harness) -> None:
    """mz_cluster_replica_sizes lists the size table; replicas show their size next to it."""
    session = await harness.session()
    rows = await harness.rows(
        session,
        "SELECT size, processes, workers, memory_bytes FROM mz_cluster_replica_sizes"
        " ORDER BY memory_bytes",
    )
    assert rows == [(s.size, s.processes, s.workers, s.memory_bytes) for s in sizes.DEFAULT_SIZES]
    joined = await harness.rows(
        session,
        "SELECT r.name, s.workers, s.memory_bytes FROM mz_cluster_replicas r"
        " JOIN mz_clusters c ON c.id = r.cluster_id"
        " JOIN mz_cluster_replica_sizes s ON s.size = r.size WHERE c.name = 'quickstart'",
    )
    assert joined == [("r1", 1, 2 * sizes.GIB)]


async def test_drop_cluster_retracts_its_rows(harness: Harness) -> None:
    """DROP CLUSTER removes the cluster and its replicas from mz_catalog."""
    session = await harness.session()
    await harness.execute(session, "CREATE CLUSTER c (SIZE '1')")
    responses = await harness.execute(session, "DROP CLUSTER c CASCADE")
    assert responses[-1].complete.tag == "DROP CLUSTER"
    assert harness.catalog.requests[-1].ops[0].drop_cluster.cascade
    append = harness.controller.appends[-1]
    assert all(
        u.diff == -1
        for c in append.collections
        if c.collection_id in ("s101", "s102")
        for u in c.updates
    )
    assert await harness.rows(session, "SELECT name FROM mz_clusters WHERE name = 'c'") == []


async def test_cluster_replica_ddl(harness: Harness) -> None:
    """CREATE / DROP CLUSTER REPLICA reach the catalog and mz_cluster_replicas."""
    session = await harness.session()
    await harness.execute(session, "CREATE CLUSTER c REPLICAS ()")
    created = await harness.execute(session, "CREATE CLUSTER REPLICA c.extra SIZE = '2'")
    assert created[-1].complete.tag == "CREATE CLUSTER REPLICA"
    query = "SELECT r.name FROM mz_cluster_replicas r JOIN mz_clusters c ON c.id = r.cluster_id WHERE c.name = 'c'"
    assert await harness.rows(session, query) == [("extra",)]
    dropped = await harness.execute(session, "DROP CLUSTER REPLICA c.extra")
    assert dropped[-1].complete.tag == "DROP CLUSTER REPLICA"
    assert await harness.rows(session, query) == []
    skipped = await harness.execute(session, "DROP CLUSTER REPLICA IF EXISTS c.extra")
    assert skipped[-1].complete.tag == "DROP CLUSTER REPLICA"


@pytest.mark.parametrize(
    ("setup", "sql", "code"),
    [
        ("CREATE CLUSTER c (SIZE '1')", "CREATE CLUSTER c (SIZE '1')", "42710"),
        ("", "DROP CLUSTER nope", "42704"),
        ("", "DROP CLUSTER mz_catalog_server", "42501"),
        ("", "CREATE CLUSTER big (SIZE '1000')", "22023"),
    ],
)
async def test_catalog_errors_surface_with_their_sqlstate(
    harness: Harness, setup: str, sql: str, code: str
) -> None:
    """Errors from the catalog reach the client with their SQLSTATE and end the stream."""
    session = await harness.session()
    if setup:
        await harness.execute(session, setup)
    appends = len(harness.controller.appends)
    error = error_of(await harness.execute(session, sql))
    assert error.code == code
    assert len(harness.controller.appends) == appends  # nothing written for a failed DDL


async def test_parse_and_name_errors_carry_positions(harness: Harness) -> None:
    """Syntax errors are 42601 and unknown relations 42P01, each with a position."""
    session = await harness.session()
    syntax = error_of(await harness.execute(session, "SELECT FROM WHERE"))
    assert syntax.code == "42601"
    assert syntax.position > 0
    unknown = error_of(await harness.execute(session, "SELECT * FROM mz_catalog.nope"))
    assert (unknown.code, unknown.message, unknown.position) == (
        "42P01",
        "unknown catalog item 'mz_catalog.nope'",
        15,
    )
    refused = error_of(await harness.execute(session, "CREATE SINK k FROM t INTO x"))
    assert refused.code == "0A000"


async def test_explain_returns_the_plan_as_one_text_row(harness: Harness) -> None:
    """EXPLAIN plans without peeking: one row, one text column named after the stage."""
    session = await harness.session()
    peeks = len(harness.controller.peeks)
    responses = await harness.execute(
        session,
        "EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR "
        "SELECT name FROM mz_catalog.mz_clusters WHERE managed LIMIT 5",
    )
    assert kinds(responses) == ["description", "rows", "complete"]
    assert [(c.name, c.type) for c in responses[0].description.columns] == [
        ("Physical Plan", "text")
    ]
    [row] = [from_row(r) for r in responses[1].rows.rows]
    lines = row[0].splitlines()
    assert lines[0] == "Explained Query:"
    assert "mz_catalog.mz_clusters // { node_id: 0 }" in row[0]
    node_lines = [line for line in lines[1:] if "// { node_id: " in line]
    assert len(node_lines) >= 2
    assert responses[2].complete.tag == "EXPLAIN"
    assert len(harness.controller.peeks) == peeks

    optimized = await harness.execute(session, "EXPLAIN SELECT name FROM mz_clusters")
    assert [c.name for c in optimized[0].description.columns] == ["Optimized Plan"]
    text = from_row(optimized[1].rows.rows[0])[0]
    assert text.startswith("Explained Query:\n")
    assert "mz_catalog.mz_clusters" in text
    assert "node_id" not in text


async def test_explain_errors_are_sql_errors(harness: Harness) -> None:
    """Unknown names are 42P01 with their position; what the planner refuses is 0A000."""
    session = await harness.session()
    unknown = error_of(await harness.execute(session, "EXPLAIN SELECT * FROM nope"))
    assert (unknown.code, unknown.message, unknown.position) == (
        "42P01",
        "unknown catalog item 'nope'",
        23,
    )
    refused = error_of(
        await harness.execute(
            session,
            "EXPLAIN SELECT count(*) OVER (ORDER BY name ROWS 1 PRECEDING EXCLUDE CURRENT ROW) "
            "FROM mz_clusters",
        )
    )
    assert refused.code == "0A000"


async def test_statements_run_in_order_and_an_error_ends_the_stream(harness: Harness) -> None:
    """Earlier statements' results arrive before the failing one's error; later ones do not run."""
    session = await harness.session()
    responses = await harness.execute(
        session,
        "SET cluster_replica = r1; SELECT 1; DROP CLUSTER nope; CREATE CLUSTER x (SIZE '1')",
    )
    assert kinds(responses) == ["complete", "description", "rows", "complete", "error"]
    assert harness.catalog.cluster("x") is None


async def test_constant_select_is_evaluated_locally(harness: Harness) -> None:
    """SELECT without FROM runs in the coordinator with PostgreSQL column names."""
    session = await harness.session()
    peeks = len(harness.controller.peeks)
    responses = await harness.execute(session, "SELECT 1, 'a' AS b, 1 + 2")
    assert [(c.name, c.type) for c in responses[0].description.columns] == [
        ("?column?", "int4"),
        ("b", "text"),
        ("?column?", "int4"),
    ]
    assert from_row(responses[1].rows.rows[0]) == (1, "a", 3)
    assert responses[-1].complete.tag == "SELECT 1"
    assert len(harness.controller.peeks) == peeks


async def test_an_unexpected_failure_is_xx000_with_an_incident_the_log_explains(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Python or library text reaches the client; the log has it, under the same incident."""

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("secret internals of a library")

    monkeypatch.setattr("loupe.coordinator.sequencer.select.evaluate_constant", broken)
    session = await harness.session()
    with structlog.testing.capture_logs() as logs:
        error = error_of(await harness.execute(session, "SELECT 1"))
    assert error.code == "XX000"
    assert "secret" not in error.message + error.detail
    incident = error.message.removeprefix("internal error (incident ").removesuffix(")")
    logged = [e for e in logs if e.get("incident") == incident]
    assert logged
    assert logged[0]["log_level"] == "error"
    # The session goes on.
    monkeypatch.undo()
    assert await harness.rows(session, "SELECT 2") == [(2,)]


async def test_service_status_codes_never_reach_a_client() -> None:
    """UNAVAILABLE, INTERNAL and the like become SQLSTATEs at the client edge."""
    for code, expected in [
        ("UNAVAILABLE", "58000"),
        ("FAILED_PRECONDITION", "55000"),
        ("INTERNAL", "XX000"),
        ("UNKNOWN", "XX000"),
        ("22012", "22012"),
    ]:
        assert client_error(LoupeError(code, "m")).code == expected


async def test_set_show_reset(harness: Harness) -> None:
    """Session variables: SET, SHOW, RESET, SHOW ALL, and unknown names."""
    session = await harness.session()
    responses = await harness.execute(session, "SET cluster = mz_catalog_server; SHOW cluster")
    assert [r.complete.tag for r in responses if r.HasField("complete")] == ["SET", "SHOW"]
    assert from_row(responses[2].rows.rows[0]) == ("mz_catalog_server",)
    assert await harness.rows(session, "RESET cluster; SHOW cluster") == [("quickstart",)]
    unknown = error_of(await harness.execute(session, "SET nope = 1"))
    assert (unknown.code, unknown.message) == (
        "42704",
        'unrecognized configuration parameter "nope"',
    )
    everything = await harness.rows(session, "SHOW ALL")
    assert ("cluster", "quickstart") in [row[:2] for row in everything]


async def test_set_cluster_to_a_missing_cluster_warns(harness: Harness) -> None:
    """SET cluster to a cluster that does not exist succeeds with a notice."""
    session = await harness.session()
    responses = await harness.execute(session, "SET cluster = ghost")
    assert kinds(responses) == ["notice", "complete"]
    assert 'cluster "ghost" does not exist' in responses[0].notice.message


async def test_cluster_replica_variable_targets_one_replica(harness: Harness) -> None:
    """SET cluster_replica sends peeks to that replica of the session's cluster; unknown is 42704.

    A named replica also keeps system-only queries on the session's cluster
    (Materialize routes catalog queries to mz_catalog_server only without one).
    """
    session = await harness.session()
    await harness.rows(session, "SET cluster_replica = r1; SELECT id FROM mz_clusters")
    assert (harness.controller.peeks[-1].cluster_id, harness.controller.peeks[-1].replica_id) == (
        "u1",
        "u1",
    )
    await harness.rows(session, "SET cluster = mz_catalog_server; SELECT id FROM mz_clusters")
    assert harness.controller.peeks[-1].replica_id == "s1"
    await harness.rows(session, "RESET cluster")
    error = error_of(
        await harness.execute(session, "SET cluster_replica = r9; SELECT id FROM mz_clusters")
    )
    assert error.code == "42704"


async def test_show_clusters_and_cluster_replicas(harness: Harness) -> None:
    """SHOW CLUSTERS lists names; SHOW CLUSTER REPLICAS has cluster, replica, size, ready."""
    session = await harness.session()
    assert await harness.rows(session, "SHOW CLUSTERS") == [("mz_catalog_server",), ("quickstart",)]
    responses = await harness.execute(session, "SHOW CLUSTER REPLICAS")
    assert [c.name for c in responses[0].description.columns] == [
        "cluster",
        "replica",
        "size",
        "ready",
    ]
    rows = [from_row(r) for r in responses[1].rows.rows]
    assert rows == [("mz_catalog_server", "r1", "1", False), ("quickstart", "r1", "1", False)]


async def test_cancel_of_a_long_peek_is_57014(harness: Harness) -> None:
    """Cancel ends a running peek with 57014 and tells the controller to cancel it."""
    session = await harness.session()
    harness.controller.block_peeks = True
    running = asyncio.create_task(harness.execute(session, "SELECT name FROM mz_clusters"))
    await assert_eventually(lambda: _assert(harness.controller.peeks), timeout=5)
    response = await harness.stub.Cancel(sql_pb2.CancelRequest(session_id=session))
    assert response.canceled
    error = error_of(await asyncio.wait_for(running, 5))
    assert (error.code, error.message) == ("57014", "canceling statement due to user request")
    peek_id = harness.controller.peeks[-1].peek.uuid
    await assert_eventually(lambda: _assert(peek_id in harness.controller.canceled), timeout=5)
    # The session is usable again.
    harness.controller.block_peeks = False
    assert await harness.rows(session, "SELECT 1") == [(1,)]


async def test_ddl_needs_a_superuser(harness: Harness) -> None:
    """A user who is not a superuser cannot create clusters."""
    session = await harness.session(user="alice")
    error = error_of(await harness.execute(session, "CREATE CLUSTER c (SIZE '1')"))
    assert error.code == "42501"
    assert harness.catalog.requests == []


async def test_open_session_with_a_bad_option_is_refused(harness: Harness) -> None:
    """Bad initial options: INVALID_ARGUMENT with the SQLSTATE in the trailer."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.session(nope="1")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(caught.value.trailing_metadata())["loupe-sqlstate"] == "42704"


async def test_unknown_session_is_08003(harness: Harness) -> None:
    """Execute on a session that does not exist is an error, not a hang."""
    error = error_of(await harness.execute("nope", "SELECT 1"))
    assert error.code == "08003"


async def test_catalog_changes_from_elsewhere_reach_storage(
    harness: Harness, nats_url: str
) -> None:
    """A newer snapshot on loupe.catalog.v1.changes is adopted and its rows appended."""
    harness.catalog.clusters.append(
        catalog_pb2.Cluster(
            id="u50", name="external", owner_id="u1", managed=True, size="1", replication_factor=0
        )
    )
    harness.catalog.timestamp += 1
    connection = await connect(nats_url, name="test-publisher")
    try:
        await publish(connection, CATALOG_CHANGES_SUBJECT, harness.catalog.snapshot())
    finally:
        await connection.close()

    def appended() -> None:
        assert any(row[0] == "u50" for row in harness.controller.rows("s101"))

    await assert_eventually(appended, timeout=5)
    session = await harness.session()
    assert await harness.rows(session, "SET cluster = external") == []  # no warning: it exists


async def test_start_reconciles_storage_with_the_catalog(
    nats_url: str, data_dir: Path, start_fakes: Any, start_coordinator: Any
) -> None:
    """At start, stale rows in storage are retracted and missing ones inserted; UNAVAILABLE is retried."""
    blob, consensus = open_location(*default_uris(data_dir))
    shard = Shard(MZ_CLUSTERS.shard_id, blob, consensus)
    shard.ensure(MZ_CLUSTERS.columns)
    ghost = ("u99", "ghost", "u1", True, "1", 1, Interval(micros=1_000_000), False)
    quickstart = ("u1", "quickstart", "s1", True, "1", 1, Interval(micros=1_000_000), False)
    table = pa.Table.from_pylist(
        [
            dict(
                zip(
                    [*MZ_CLUSTERS.column_names, "mz_timestamp", "mz_diff"],
                    [*structs(list(row)), 1, 1],
                    strict=True,
                )
            )
            for row in (ghost, quickstart)
        ],
        schema=arrow_schema(MZ_CLUSTERS.columns),
    )
    shard.compare_and_append(table, 0, 2)

    connection, _catalog, controller, endpoints = await start_fakes(nats_url, data_dir)
    controller.unavailable_for = 3
    # The fake controller never advances the shard's upper: do not wait long for it.
    service, task = await start_coordinator(nats_url, data_dir, storage_settle_timeout=0.2)
    try:
        reconcile = [a for a in controller.appends if a.collections]
        assert len(reconcile) == 1
        updates = {
            c.collection_id: [(from_row(u.row), u.diff) for u in c.updates]
            for c in reconcile[0].collections
        }
        assert updates["s101"] == [
            (("u99", "ghost", "u1", True, "1", 1, Interval(micros=1_000_000), False), -1),
            (("s1", "mz_catalog_server", "s1", True, "1", 1, Interval(micros=1_000_000), False), 1),
        ]
        assert len(updates["s102"]) == 2  # both bootstrap replicas were missing
        assert controller.applied, "the catalog is applied to the controller at start"
        ready = (data_dir / "run" / "coordinator.ready.json").read_text()
        assert f'"sql_port": {service.sql_port}' in ready
    finally:
        service.shutdown()
        await asyncio.wait_for(task, 10)
        for endpoint in endpoints:
            await endpoint.stop(grace=0.5)
        await connection.close()
    assert not (data_dir / "run" / "coordinator.ready.json").exists()


def _assert(condition: object) -> None:
    assert condition


async def test_garbage_on_the_catalog_changes_subject_is_ignored(
    harness: Harness, nats_url: str
) -> None:
    """Undecodable bytes on loupe.catalog.v1.changes are dropped; the coordinator keeps serving."""
    connection = await connect(nats_url, name="test-garbage")
    try:
        await connection.publish(CATALOG_CHANGES_SUBJECT, b"\xff\xfe not a protobuf")
        await connection.flush()
    finally:
        await connection.close()
    session = await harness.session()
    assert await harness.rows(session, "SHOW CLUSTERS") == [("mz_catalog_server",), ("quickstart",)]
