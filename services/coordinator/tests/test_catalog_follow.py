"""The catalog relations in storage (objects, audit log, replica history) and following the catalog.

Fixtures (harness, fleet) live in conftest.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
from prometheus_client import REGISTRY

from loupe.builtins import (
    MZ_AUDIT_EVENTS,
    MZ_CLUSTER_REPLICA_HISTORY,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTERS,
    MZ_DATABASES,
    MZ_ROLES,
    MZ_SCHEMAS,
)
from loupe.common.transport import connect, publish
from loupe.common.values import EPOCH, from_row
from loupe.coordinator.coordinator import CATALOG_CHANGES_SUBJECT
from loupe.persist import Shard, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.testing import assert_eventually

Harness = Any


def at(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def audit_rows(catalog: Any) -> Counter:
    """The mz_audit_events rows the fake catalog's log implies."""
    return Counter(
        (
            e.id,
            e.event_type,
            e.object_type,
            json.dumps(json.loads(e.details_json), sort_keys=True),
            e.user or None,
            at(e.occurred_at),
        )
        for e in catalog.audit_events
    )


def assert_storage_matches_catalog(controller: Any, catalog: Any) -> None:
    """Every catalog relation holds exactly what the catalog says, each row once."""
    for builtin in (MZ_CLUSTERS, MZ_CLUSTER_REPLICAS, MZ_AUDIT_EVENTS, MZ_CLUSTER_REPLICA_HISTORY):
        counts = controller.counts(builtin.id)
        assert set(counts.values()) <= {1}, (builtin.name, counts)
    snapshot = catalog.snapshot()
    assert sorted(row[0] for row in controller.rows(MZ_CLUSTERS.id)) == sorted(
        c.id for c in snapshot.clusters
    )
    assert sorted(row[0] for row in controller.rows(MZ_CLUSTER_REPLICAS.id)) == sorted(
        r.id for r in snapshot.replicas
    )
    assert controller.counts(MZ_AUDIT_EVENTS.id) == audit_rows(catalog)


async def test_bootstrap_objects_and_audit_log_reach_storage(harness: Harness) -> None:
    """At start mz_databases, mz_schemas, mz_roles and mz_audit_events hold the catalog's rows."""
    controller = harness.controller
    assert controller.counts(MZ_DATABASES.id) == Counter({("u1", "materialize", "s1"): 1})
    assert controller.counts(MZ_SCHEMAS.id) == Counter(
        {
            ("s1", None, "mz_catalog", "s1"): 1,
            ("s2", None, "mz_internal", "s1"): 1,
            ("u1", "u1", "public", "s1"): 1,
        }
    )
    assert controller.counts(MZ_ROLES.id) == Counter(
        {("s1", "mz_system", True): 1, ("u1", "materialize", True): 1}
    )
    assert controller.counts(MZ_AUDIT_EVENTS.id) == audit_rows(harness.catalog)
    # The bootstrap replica of quickstart (a user cluster) is in the history, alive.
    assert controller.rows(MZ_CLUSTER_REPLICA_HISTORY.id) == {
        ("u1", "1", "u1", "quickstart", "r1", at(1_001), None)
    }
    session = await harness.session()
    assert await harness.rows(session, "SELECT name FROM mz_databases") == [("materialize",)]
    assert await harness.rows(
        session, "SELECT name FROM mz_catalog.mz_schemas WHERE database_id IS NULL ORDER BY name"
    ) == [("mz_catalog",), ("mz_internal",)]


async def test_ddl_is_audited_with_the_sessions_user(harness: Harness) -> None:
    """DDL sends the session's user; its audit events land in mz_audit_events once each."""
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER c (SIZE '2')")
    assert harness.catalog.requests[-1].user == "materialize"
    events = harness.controller.rows(MZ_AUDIT_EVENTS.id)
    created = sorted((row[1], row[2], row[4]) for row in events if row[0] > 2)
    assert created == [
        ("create", "cluster", "materialize"),
        ("create", "cluster-replica", "materialize"),
    ]
    assert harness.controller.counts(MZ_AUDIT_EVENTS.id) == audit_rows(harness.catalog)
    rows = await harness.rows(
        session,
        "SELECT id, object_type FROM mz_catalog.mz_audit_events "
        "WHERE event_type = 'create' ORDER BY id",
    )
    assert rows == [(1, "cluster"), (2, "cluster-replica"), (3, "cluster"), (4, "cluster-replica")]


async def test_replica_history_after_create_and_drop(harness: Harness) -> None:
    """A created replica is a history row with dropped_at NULL; its drop fills dropped_at."""
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'))")
    await harness.rows(session, "CREATE CLUSTER REPLICA c.r2 SIZE = '2'")
    created_at = at(harness.catalog.timestamp)
    cluster_id = harness.catalog.cluster("c").id
    r2 = next(r.id for r in harness.catalog.replicas if r.name == "r2")
    live = (r2, "2", cluster_id, "c", "r2", created_at, None)
    assert live in harness.controller.rows(MZ_CLUSTER_REPLICA_HISTORY.id)

    await harness.rows(session, "DROP CLUSTER REPLICA c.r2")
    dropped_at = at(harness.catalog.timestamp)
    history = harness.controller.counts(MZ_CLUSTER_REPLICA_HISTORY.id)
    assert history[live] == 0, "the live row is retracted"
    assert history[(r2, "2", cluster_id, "c", "r2", created_at, dropped_at)] == 1
    drop = harness.controller.appends[-1]
    history_updates = [
        (from_row(u.row)[-1], u.diff)
        for c in drop.collections
        if c.collection_id == MZ_CLUSTER_REPLICA_HISTORY.id
        for u in c.updates
    ]
    assert history_updates == [(None, -1), (dropped_at, 1)]
    rows = await harness.rows(
        session,
        "SELECT replica_name, size, dropped_at IS NULL AS alive "
        "FROM mz_internal.mz_cluster_replica_history WHERE cluster_name = 'c' "
        "ORDER BY replica_name",
    )
    assert rows == [("r1", "1", True), ("r2", "2", False)]

    # Dropping the cluster drops its remaining replica too.
    await harness.rows(session, "DROP CLUSTER c CASCADE")
    assert all(
        row[6] is not None
        for row in harness.controller.rows(MZ_CLUSTER_REPLICA_HISTORY.id)
        if row[2] == cluster_id
    )


async def test_audit_events_seen_twice_are_appended_once(harness: Harness, nats_url: str) -> None:
    """Commits re-delivered on the changes stream (same or newer snapshot) add no event twice."""
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER c (SIZE '1')")
    catalog = harness.catalog
    appends = len(harness.controller.appends)
    connection = await connect(nats_url, name="test-replayer")
    try:
        # The very same commit again, then a newer one repeating every event.
        await publish(connection, CATALOG_CHANGES_SUBJECT, catalog.snapshot(catalog._new_events))
        catalog.timestamp += 1
        await publish(connection, CATALOG_CHANGES_SUBJECT, catalog.snapshot(catalog.audit_events))
    finally:
        await connection.close()
    coordinator = harness.service.coordinator
    await assert_eventually(
        lambda: _assert(coordinator.follower.followed_key == (1, catalog.timestamp)), timeout=5
    )
    assert len(harness.controller.appends) == appends, "nothing new to append"
    assert harness.controller.counts(MZ_AUDIT_EVENTS.id) == audit_rows(catalog)


async def test_missed_commit_is_found_through_the_audit_log(fleet: Any) -> None:
    """A commit whose notification was lost shows as a hole in event ids and is filled in."""
    fleet.controller.persist = True  # the coordinator reads storage again after the hole
    harness = await fleet.add()
    catalog = fleet.catalog
    missed_before = _missed()
    # Another coordinator's commit, never published.
    catalog.publish_changes = False
    await catalog.Transact(
        catalog_pb2.TransactRequest(ops=[_create_cluster("elsewhere")], user="alice"), None
    )
    catalog.publish_changes = True
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER here (SIZE '1')")
    assert _missed() == missed_before + 1
    assert_storage_matches_catalog(fleet.controller, catalog)
    users = {row[4] for row in fleet.controller.rows(MZ_AUDIT_EVENTS.id)}
    assert {"alice", "materialize"} <= users


async def test_start_appends_only_what_storage_lacks(fleet: Any, data_dir: Path) -> None:
    """Reconciling at start inserts missing audit events and history, retracts strays, keeps the rest."""
    catalog, controller = fleet.catalog, fleet.controller
    # Storage already has event 1 (right) and a stray event 99; event 2 is missing.
    blob, consensus = open_location(*default_uris(data_dir))
    present = min(audit_rows(catalog))
    stray = (99, "drop", "cluster", "{}", None, at(5))
    _write(
        Shard(MZ_AUDIT_EVENTS.shard_id, blob, consensus), MZ_AUDIT_EVENTS.columns, [present, stray]
    )
    await fleet.add()
    (reconcile,) = [a for a in controller.appends if a.collections]
    updates = {
        c.collection_id: [(from_row(u.row), u.diff) for u in c.updates]
        for c in reconcile.collections
    }
    assert [(row[0], diff) for row, diff in updates[MZ_AUDIT_EVENTS.id]] == [(99, -1), (2, 1)]
    assert [diff for _, diff in updates[MZ_CLUSTER_REPLICA_HISTORY.id]] == [1]
    assert len(updates[MZ_ROLES.id]) == 2


async def test_start_without_an_audit_log_skips_audit_relations(fleet: Any) -> None:
    """A catalog answering ListAuditEvents with UNIMPLEMENTED: no audit relations, the rest works."""
    fleet.catalog.audit_unimplemented = True
    harness = await fleet.add()
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER c (SIZE '1')")
    written = {c.collection_id for a in fleet.controller.appends for c in a.collections}
    assert MZ_CLUSTERS.id in written
    assert MZ_AUDIT_EVENTS.id not in written
    assert MZ_CLUSTER_REPLICA_HISTORY.id not in written


# -- two coordinators ------------------------------------------------------------------


async def test_ddl_on_one_coordinator_is_visible_on_the_other(fleet: Any) -> None:
    """Clusters created via A resolve, show and collide via B, without restarting B."""
    fleet.controller.persist = True  # B reads at start what A wrote
    a, b = await fleet.add(), await fleet.add()
    on_a, on_b = await a.session(), await b.session()
    await a.rows(on_a, "CREATE CLUSTER shared (SIZE '1')")

    assert await b.rows(on_b, "SET cluster = shared") == []  # no "does not exist"
    assert ("shared",) in await b.rows(on_b, "SHOW CLUSTERS")
    assert b.service.coordinator.state.cluster("shared") is not None
    duplicate = await b.execute(on_b, "CREATE CLUSTER shared (SIZE '1')")
    assert duplicate[-1].error.code == "42710"

    await b.rows(on_b, "CREATE CLUSTER from_b (SIZE '1')")
    await assert_eventually(
        lambda: _assert(a.service.coordinator.state.cluster("from_b")), timeout=5
    )
    assert await a.rows(on_a, "SET cluster = from_b") == []
    await a.rows(on_a, "DROP CLUSTER shared CASCADE")
    await assert_eventually(
        lambda: _assert(b.service.coordinator.state.cluster("shared") is None), timeout=5
    )
    assert ("shared",) not in await b.rows(on_b, "SHOW CLUSTERS")
    # Both followed every commit, yet each reached storage once.
    assert_storage_matches_catalog(fleet.controller, fleet.catalog)


async def test_a_cluster_created_elsewhere_resolves_before_its_notification(fleet: Any) -> None:
    """A name this coordinator does not know yet is looked up in the catalog."""
    harness = await fleet.add()
    fleet.catalog.publish_changes = False
    await fleet.catalog.Transact(
        catalog_pb2.TransactRequest(ops=[_create_cluster("unseen")], user="alice"), None
    )
    session = await harness.session()
    assert await harness.rows(session, "SET cluster = unseen") == []


async def test_own_commit_is_followed_after_the_commits_before_it(fleet: Any) -> None:
    """When notifications lag, DDL waits for them so each commit's batch holds only its rows."""
    harness = await fleet.add()
    catalog = fleet.catalog
    catalog.publish_delay = 0.2
    await catalog.Transact(
        catalog_pb2.TransactRequest(ops=[_create_cluster("first")], user="alice"), None
    )
    session = await harness.session()
    await harness.rows(session, "CREATE CLUSTER second (SIZE '1')")
    batches = {
        a.batch_id: sorted(
            from_row(u.row)[1]
            for c in a.collections
            if c.collection_id == "s101"
            for u in c.updates
        )
        for a in fleet.controller.appends
    }
    assert batches["catalog-1-1001"] == ["first"]
    assert batches["catalog-1-1002"] == ["second"]
    assert_storage_matches_catalog(fleet.controller, catalog)


async def test_concurrent_ddl_on_two_coordinators_reaches_storage_once(fleet: Any) -> None:
    """Interleaved commits from both coordinators are followed in catalog order, each once."""
    fleet.controller.persist = True
    a, b = await fleet.add(), await fleet.add()
    on_a, on_b = await a.session(), await b.session()

    async def create(harness: Harness, session: str, prefix: str) -> None:
        for i in range(4):
            await harness.rows(session, f"CREATE CLUSTER {prefix}{i} (SIZE '1')")

    await asyncio.gather(create(a, on_a, "a"), create(b, on_b, "b"))
    assert len(fleet.catalog.clusters) == 10
    assert_storage_matches_catalog(fleet.controller, fleet.catalog)


# -- helpers ---------------------------------------------------------------------------


def _assert(condition: object) -> None:
    assert condition


def _write(shard: Shard, columns: Any, rows: list[tuple]) -> None:
    shard.ensure(columns)
    names = [name for name, _ in columns] + ["mz_timestamp", "mz_diff"]
    table = pa.Table.from_pylist(
        [dict(zip(names, [*row, 1, 1], strict=True)) for row in rows],
        schema=arrow_schema(columns),
    )
    shard.compare_and_append(table, 0, 2)


def _create_cluster(name: str) -> catalog_pb2.CatalogOp:
    return catalog_pb2.CatalogOp(
        create_cluster=catalog_pb2.CreateCluster(
            cluster=catalog_pb2.Cluster(
                name=name, owner_id="u1", managed=True, size="1", replication_factor=1
            )
        )
    )


def _missed() -> float:
    return REGISTRY.get_sample_value("loupe_coordinator_catalog_commits_missed_total") or 0.0


async def test_storage_catches_up_after_an_outage_without_further_ddl(fleet: Any) -> None:
    """DDL while the storage writer fails is committed but not in storage; once the writer
    works again the coordinator brings storage to the catalog by itself (issue 11)."""
    fleet.controller.persist = True  # storage is read back from the shards it writes
    harness = await fleet.add(catalog_relations_wait=0.5)
    session = await harness.session()
    fleet.controller.refuse_appends = True
    fleet.controller.refuse_code = "INTERNAL"  # the append fails at once, in doubt
    responses = await harness.execute(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'))")
    assert not [r.error for r in responses if r.HasField("error")]
    [notice] = [r.notice.message for r in responses if r.HasField("notice")]
    assert "committed, but mz_catalog does not show it yet" in notice
    assert fleet.catalog.cluster("c") is not None
    relations = harness.service.coordinator.writer
    assert relations.stale
    fleet.controller.refuse_appends = False
    await assert_eventually(
        lambda: assert_storage_matches_catalog(fleet.controller, fleet.catalog), timeout=30
    )
    assert not relations.stale


async def test_a_coordinator_starts_and_serves_while_storage_does_not_confirm(
    fleet: Any,
) -> None:
    """A coordinator (re)started while the storage writer is down or still catching up
    serves at once; mz_catalog reaches the catalog in the background once it is back.

    Before, its start waited for that append: after a controller restart under load, a
    killed coordinator's successor answered nothing for minutes (the chaos test)."""
    fleet.controller.persist = True
    fleet.controller.refuse_appends = True
    fleet.controller.refuse_code = "DEADLINE_EXCEEDED"  # retried, as a slow writer's
    harness = await fleet.add(catalog_relations_wait=0.5)
    session = await harness.session()
    assert await harness.rows(session, "SELECT 1") == [(1,)]
    created = await harness.execute(session, "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'))")
    assert not [r.error for r in created if r.HasField("error")]
    assert harness.service.coordinator.follower.storage_behind
    fleet.controller.refuse_appends = False
    await assert_eventually(
        lambda: assert_storage_matches_catalog(fleet.controller, fleet.catalog), timeout=30
    )
    follower = harness.service.coordinator.follower
    await assert_eventually(lambda: _assert_not(follower.storage_behind), timeout=30)


def _assert_not(condition: object) -> None:
    assert not condition
