"""The durable catalog: bootstrap, operations, atomicity, fencing, timestamps, damage."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loupe.catalog import (
    CatalogCorruptError,
    CatalogError,
    Cluster,
    ClusterReplica,
    DurableCatalogState,
    FencedError,
    FenceToken,
    create_backend,
)
from loupe.catalog.backends.sqlite import SqliteCatalogBackend
from loupe.catalog.durable import BACKENDS, now_ms
from loupe.catalog.errors import CatalogNotInitializedError, CatalogReadOnlyError
from loupe.catalog.kinds import KINDS, ObjectFormatError
from loupe.catalog.migrations import CATALOG_VERSION, CatalogTooNewError, Row, Write
from loupe.catalog.objects import IntrospectionSourceIndex, Item, SystemObjectMapping
from loupe.common.errors import LoupeError

OpenCatalog = Callable[..., DurableCatalogState]


# Every backend must pass these; new backends join the parametrisation.
@pytest.fixture(params=["stash-sqlite", "stash-postgres", "shadow", "persist"])
def open_catalog(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[OpenCatalog]:
    opened: list[DurableCatalogState] = []
    if request.param in ("stash-postgres", "shadow"):
        # A fresh PostgreSQL schema, found through the environment (skips without PostgreSQL).
        request.getfixturevalue("postgres_catalog")

    def open_(
        deploy_generation: int = 0, now: Callable[[], int] = now_ms, *, unopened: bool = False
    ) -> DurableCatalogState:
        catalog = create_backend(
            request.param, data_dir, deploy_generation=deploy_generation, now=now
        )
        if not unopened:
            catalog.open()
        opened.append(catalog)
        return catalog

    yield open_
    for catalog in opened:
        catalog.close()


@pytest.fixture
def catalog(open_catalog: OpenCatalog) -> DurableCatalogState:
    return open_catalog()


def cluster(name: str, size: str = "", replication_factor: int = 1) -> Cluster:
    return Cluster(
        id="",
        name=name,
        owner_id="",
        managed=False,
        size=size,
        replication_factor=replication_factor,
        introspection_interval_ns=1_000_000_000,
        introspection_debugging=False,
    )


def replica(name: str, size: str = "1") -> ClusterReplica:
    return ClusterReplica(id="", name=name, cluster_id="", size=size, owner_id="")


def commit(catalog: DurableCatalogState, *ops: Callable[..., object]) -> int:
    tx = catalog.transaction()
    for op in ops:
        op(tx)
    return catalog.commit_transaction(tx)


def names(catalog: DurableCatalogState) -> dict[str, list[tuple[str, str, str]]]:
    """cluster name -> [(replica id, replica name, size)]."""
    by_id = {c.id: c.name for c in catalog.get_clusters()}
    out: dict[str, list[tuple[str, str, str]]] = {name: [] for name in by_id.values()}
    for r in catalog.get_cluster_replicas():
        out[by_id[r.cluster_id]].append((r.id, r.name, r.size))
    return out


def expect_error(code: str, message: str, catalog: DurableCatalogState, *ops: Callable) -> None:
    with pytest.raises(LoupeError) as caught:
        commit(catalog, *ops)
    assert (caught.value.code, caught.value.message) == (code, message)


# Bootstrap


def test_new_catalog_holds_system_and_default_clusters(catalog: DurableCatalogState) -> None:
    """A new catalog has mz_catalog_server (s1) and quickstart (u1), one replica r1 each."""
    clusters = {c.id: c for c in catalog.get_clusters()}
    assert set(clusters) == {"s1", "u1"}
    for cluster_id, name in (("s1", "mz_catalog_server"), ("u1", "quickstart")):
        c = clusters[cluster_id]
        assert (c.name, c.owner_id, c.managed, c.size, c.replication_factor) == (
            name,
            cluster_id,
            True,
            "1",
            1,
        )
        assert c.introspection_interval_ns == 1_000_000_000
        assert c.introspection_debugging is False
    replicas = {
        (r.id, r.name, r.cluster_id, r.size, r.owner_id) for r in catalog.get_cluster_replicas()
    }
    assert replicas == {("s1", "r1", "s1", "1", "s1"), ("u1", "r1", "u1", "1", "u1")}


def test_backend_is_chosen_through_the_plugin_registry() -> None:
    """``stash-sqlite`` resolves through the loupe.catalog_backends entry point."""
    assert BACKENDS.load("stash-sqlite") is SqliteCatalogBackend


# Operations


def test_managed_cluster_gets_one_replica_per_replication_factor(
    catalog: DurableCatalogState,
) -> None:
    """SIZE '2', REPLICATION FACTOR 2 creates r1 and r2 of size 2 with allocated ids."""
    commit(catalog, lambda tx: tx.create_cluster(cluster("c", size="2", replication_factor=2)))
    created = next(c for c in catalog.get_clusters() if c.name == "c")
    assert (created.id, created.managed, created.owner_id) == ("u2", True, "u1")
    assert names(catalog)["c"] == [("u2", "r1", "2"), ("u3", "r2", "2")]


def test_unmanaged_cluster_gets_the_given_replicas(catalog: DurableCatalogState) -> None:
    """CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE '2'))."""
    commit(catalog, lambda tx: tx.create_cluster(cluster("c"), [replica("r1"), replica("r2", "2")]))
    created = next(c for c in catalog.get_clusters() if c.name == "c")
    assert (created.managed, created.size, created.replication_factor) == (False, "", 2)
    assert names(catalog)["c"] == [("u2", "r1", "1"), ("u3", "r2", "2")]


def test_replica_added_to_a_cluster_by_name(catalog: DurableCatalogState) -> None:
    """CREATE CLUSTER REPLICA c.r3 gets the next user replica id."""
    commit(catalog, lambda tx: tx.create_cluster(cluster("c"), [replica("r1")]))
    commit(catalog, lambda tx: tx.create_replica(replica("r3", "4"), "c"))
    assert names(catalog)["c"] == [("u2", "r1", "1"), ("u3", "r3", "4")]


def test_duplicate_names_are_refused_with_42710(catalog: DurableCatalogState) -> None:
    """Cluster names are unique, replica names unique within their cluster."""
    expect_error(
        "42710",
        'cluster "quickstart" already exists',
        catalog,
        lambda tx: tx.create_cluster(cluster("quickstart")),
    )
    expect_error(
        "42710",
        'cluster replica "c.r1" already exists',
        catalog,
        lambda tx: tx.create_cluster(cluster("c"), [replica("r1"), replica("r1")]),
    )
    expect_error(
        "42710",
        'cluster replica "quickstart.r1" already exists',
        catalog,
        lambda tx: tx.create_replica(replica("r1"), "quickstart"),
    )


def test_unknown_cluster_or_replica_is_42704_unless_if_exists(
    catalog: DurableCatalogState,
) -> None:
    """Unknown names are errors; IF EXISTS turns them into no-ops."""
    expect_error(
        "42704", "unknown cluster 'x'", catalog, lambda tx: tx.create_replica(replica("r"), "x")
    )
    expect_error("42704", "unknown cluster 'x'", catalog, lambda tx: tx.drop_cluster("x"))
    expect_error("42704", "unknown cluster 'x'", catalog, lambda tx: tx.drop_replica("x", "r1"))
    expect_error(
        "42704",
        "unknown cluster replica 'quickstart.r9'",
        catalog,
        lambda tx: tx.drop_replica("quickstart", "r9"),
    )
    before = names(catalog)
    commit(
        catalog,
        lambda tx: tx.drop_cluster("x", if_exists=True),
        lambda tx: tx.drop_replica("x", "r1", if_exists=True),
        lambda tx: tx.drop_replica("quickstart", "r9", if_exists=True),
    )
    assert names(catalog) == before


@pytest.mark.parametrize("size", ["0", "-1", "abc", "1.5", "", " 1", "01", "1000"])
def test_invalid_sizes_are_refused_with_22023(catalog: DurableCatalogState, size: str) -> None:
    """A size must be a row of the size table (``loupe.sizes``); the error lists the valid ones."""
    with pytest.raises(LoupeError) as caught:
        commit(catalog, lambda tx: tx.create_cluster(cluster("c"), [replica("r1", size)]))
    assert caught.value.code == "22023"
    if size:
        assert caught.value.message == f"unknown cluster replica size '{size}'"
        assert "Valid sizes: 3xsmall, 2xsmall, xsmall, 1, 2" in caught.value.hint
        with pytest.raises(LoupeError, match="unknown cluster replica size"):
            commit(catalog, lambda tx: tx.create_cluster(cluster("m", size=size)))


def test_system_cluster_cannot_be_modified(catalog: DurableCatalogState) -> None:
    """mz_catalog_server and its replicas cannot be dropped or added to (42501)."""
    message = "system cluster 'mz_catalog_server' cannot be modified"
    for op in (
        lambda tx: tx.drop_cluster("mz_catalog_server"),
        lambda tx: tx.drop_cluster("mz_catalog_server", if_exists=True),
        lambda tx: tx.drop_replica("mz_catalog_server", "r1"),
        lambda tx: tx.create_replica(replica("r2"), "mz_catalog_server"),
    ):
        expect_error("42501", message, catalog, op)
    assert names(catalog)["mz_catalog_server"] == [("s1", "r1", "1")]


def test_drop_cluster_drops_its_replicas(catalog: DurableCatalogState) -> None:
    """Dropping a cluster reports and removes its replicas, then the cluster."""
    commit(catalog, lambda tx: tx.create_cluster(cluster("c"), [replica("r1"), replica("r2")]))
    tx = catalog.transaction()
    tx.drop_cluster("c")
    catalog.commit_transaction(tx)
    assert [(ch.kind, ch.object.id) for ch in tx.changes] == [
        ("replica_dropped", "u2"),
        ("replica_dropped", "u3"),
        ("cluster_dropped", "u2"),
    ]
    assert "c" not in names(catalog)
    assert {r.cluster_id for r in catalog.get_cluster_replicas()} == {"s1", "u1"}


def test_default_cluster_and_its_replica_can_be_dropped(catalog: DurableCatalogState) -> None:
    """quickstart is a user cluster: dropping its replica and then it works."""
    commit(catalog, lambda tx: tx.drop_replica("quickstart", "r1"))
    assert names(catalog)["quickstart"] == []
    commit(catalog, lambda tx: tx.drop_cluster("quickstart"))
    assert [c.name for c in catalog.get_clusters()] == ["mz_catalog_server"]


def test_failed_transaction_changes_nothing(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """If one operation fails, earlier ones in the same transaction leave no trace."""
    before = catalog.dump()
    expect_error(
        "42710",
        'cluster "c1" already exists',
        catalog,
        lambda tx: tx.create_cluster(cluster("c1"), [replica("r1")]),
        lambda tx: tx.drop_cluster("quickstart"),
        lambda tx: tx.create_cluster(cluster("c1")),
    )
    assert catalog.dump() == before
    reopened = open_catalog()
    assert set(names(reopened)) == {"mz_catalog_server", "quickstart"}
    # The id allocator did not move either.
    commit(reopened, lambda tx: tx.create_cluster(cluster("c2")))
    assert {c.name: c.id for c in reopened.get_clusters()}["c2"] == "u2"


def test_later_operations_see_earlier_ones_in_a_transaction(
    catalog: DurableCatalogState,
) -> None:
    """Create a cluster and add a replica to it in one transaction."""
    commit(
        catalog,
        lambda tx: tx.create_cluster(cluster("c")),
        lambda tx: tx.create_replica(replica("r1"), "c"),
    )
    assert names(catalog)["c"] == [("u2", "r1", "1")]


def test_commits_survive_reopen(catalog: DurableCatalogState, open_catalog: OpenCatalog) -> None:
    """What was committed is there after reopening, ids keep counting up."""
    commit(catalog, lambda tx: tx.create_cluster(cluster("c", size="1", replication_factor=1)))
    catalog.close()
    reopened = open_catalog()
    assert names(reopened)["c"] == [("u2", "r1", "1")]
    commit(reopened, lambda tx: tx.create_cluster(cluster("d", size="1")))
    assert names(reopened)["d"] == [("u3", "r1", "1")]


def test_stale_transaction_is_refused(catalog: DurableCatalogState) -> None:
    """Two transactions begun on the same state cannot both commit."""
    first, second = catalog.transaction(), catalog.transaction()
    first.create_cluster(cluster("a"))
    second.create_cluster(cluster("b"))
    catalog.commit_transaction(first)
    with pytest.raises(CatalogError, match="stale"):
        catalog.commit_transaction(second)
    assert "b" not in names(catalog)


# Fencing


def test_epoch_is_bumped_at_every_open(open_catalog: OpenCatalog) -> None:
    """Each writable open takes the next epoch."""
    epochs = [open_catalog().epoch for _ in range(3)]
    assert epochs == [1, 2, 3]


def test_second_open_fences_the_first(open_catalog: OpenCatalog) -> None:
    """The first writer's next commit fails with both fence tokens named, and writes nothing."""
    first = open_catalog()
    second = open_catalog()
    with pytest.raises(FencedError) as caught:
        commit(first, lambda tx: tx.create_cluster(cluster("zombie")))
    assert caught.value.ours == FenceToken(deploy_generation=0, epoch=1)
    assert caught.value.current == FenceToken(deploy_generation=0, epoch=2)
    assert "(deploy_generation=0, epoch=1)" in str(caught.value)
    assert "(deploy_generation=0, epoch=2)" in str(caught.value)
    with pytest.raises(FencedError):
        first.confirm_leadership()
    second.confirm_leadership()
    commit(second, lambda tx: tx.create_cluster(cluster("live")))
    assert "zombie" not in names(open_catalog())


def test_newer_deploy_generation_fences_older_one(open_catalog: OpenCatalog) -> None:
    """A newer deploy generation takes over; the older one can neither write nor reopen."""
    old = open_catalog(deploy_generation=1)
    new = open_catalog(deploy_generation=2)
    assert new.fence == FenceToken(2, old.epoch + 1)
    with pytest.raises(FencedError) as caught:
        commit(old, lambda tx: tx.create_cluster(cluster("c")))
    assert caught.value.by_newer_deploy
    with pytest.raises(FencedError, match="deploy_generation=2"):
        open_catalog(deploy_generation=1)


def test_read_only_open_neither_fences_nor_writes(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """open_read_only keeps the epoch and refuses commits."""
    reader = open_catalog(unopened=True)
    reader.open_read_only()
    assert reader.mode == "read-only"
    assert reader.epoch == catalog.epoch
    with pytest.raises(CatalogReadOnlyError):
        commit(reader, lambda tx: tx.create_cluster(cluster("c")))
    with pytest.raises(CatalogReadOnlyError):
        reader.allocate_id("user_item")
    catalog.confirm_leadership()


# Timestamps


def test_timestamps_never_go_backwards_across_reopen(open_catalog: OpenCatalog) -> None:
    """After a clock far ahead, a restart with a slower clock still moves forward."""
    future = now_ms() + 10**9
    ahead = open_catalog(now=lambda: future)
    written = commit(ahead, lambda tx: tx.create_cluster(cluster("c")))
    assert written >= future
    ahead.close()
    reopened = open_catalog()
    assert reopened.read_timestamp() == written
    assert commit(reopened, lambda tx: tx.drop_cluster("c")) == written + 1


def test_timestamps_advance_when_the_clock_stands_still(open_catalog: OpenCatalog) -> None:
    """Each write gets a later timestamp than the last, even with a frozen clock."""
    catalog = open_catalog(now=lambda: 1_000)
    stamps = [commit(catalog) for _ in range(3)]
    assert stamps == [stamps[0], stamps[0] + 1, stamps[0] + 2]
    assert catalog.read_timestamp() == stamps[-1]


# Damage


def test_file_that_is_not_sqlite_is_refused(data_dir: Path) -> None:
    """A file that is not SQLite is an error and is left untouched."""
    path = data_dir / "catalog" / "catalog.sqlite"
    path.parent.mkdir()
    garbage = b"this is not a database, it is a shopping list\n" * 100
    path.write_bytes(garbage)
    with pytest.raises(CatalogCorruptError, match="not a Loupe catalog"):
        SqliteCatalogBackend(data_dir).open()
    assert path.read_bytes() == garbage


def test_foreign_sqlite_database_is_refused(data_dir: Path) -> None:
    """A SQLite file with someone else's tables is not re-initialised."""
    path = data_dir / "catalog" / "catalog.sqlite"
    path.parent.mkdir()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE recipes (name TEXT)")
        connection.execute("INSERT INTO recipes VALUES ('soup')")
    connection.close()
    with pytest.raises(CatalogCorruptError, match="recipes"):
        SqliteCatalogBackend(data_dir).open()
    with sqlite3.connect(path) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
    connection.close()
    assert tables == ["recipes"]


def test_damaged_entry_is_refused(catalog: DurableCatalogState, open_catalog: OpenCatalog) -> None:
    """A stored row that does not decode stops the open, naming kind and key, before any write."""
    catalog.close()
    damaged = open_catalog(unopened=True)
    # Through the backend's own primitive: `_load` stores whatever `migrate` says.
    fence = damaged._load(
        writable=True,
        initial_rows=[],
        migrate=lambda v, rows: (v, [("cluster", '{"id":"u1"}', '{"name": 1}')]),
    ).fence
    with pytest.raises(CatalogCorruptError, match=re.escape('cluster/{"id":"u1"}')):
        open_catalog()
    # Refused before the epoch bump: the damaged catalog was not written to.
    assert damaged.stored_fence() == fence
    for how in ("open_read_only", "check_open"):
        with pytest.raises(CatalogCorruptError, match="is damaged: bad cluster value"):
            getattr(open_catalog(unopened=True), how)()


# Every object kind


def test_new_catalog_holds_the_default_database_schemas_and_roles(
    catalog: DurableCatalogState,
) -> None:
    """materialize (u1) with public, the ambient system schemas, and the four roles."""
    assert [(d.id, d.name, d.owner_id) for d in catalog.get_databases()] == [
        ("u1", "materialize", "u1")
    ]
    assert [(s.id, s.name, s.database_id) for s in catalog.get_schemas()] == [
        ("s1", "mz_catalog", ""),
        ("s2", "mz_internal", ""),
        ("s3", "mz_introspection", ""),
        ("s4", "pg_catalog", ""),
        ("u1", "public", "u1"),
    ]
    assert [(r.id, r.name, r.superuser) for r in catalog.get_roles()] == [
        ("s1", "mz_system", True),
        ("s2", "mz_monitor", False),
        ("s3", "mz_monitor_redacted", False),
        ("u1", "materialize", True),
    ]
    assert [s.name for s in catalog.get_settings()] == ["catalog_content_version"]
    assert [(p.grantee, p.privileges) for p in catalog.get_system_privileges()] == [("s1", "RBN")]
    assert len(catalog.get_default_privileges()) == 1
    allocators = {a.name: a.next_id for a in catalog.get_id_allocators()}
    assert allocators["user_cluster"] == 2
    assert allocators["user_item"] == 1
    assert allocators["audit_log"] == 5


def test_every_kind_has_an_accessor(catalog: DurableCatalogState) -> None:
    """get_<kind>s returns the kind's dataclasses, the same as get_objects(kind)."""
    accessors = {
        "database": "get_databases",
        "schema": "get_schemas",
        "role": "get_roles",
        "cluster": "get_clusters",
        "cluster_replica": "get_cluster_replicas",
        "item": "get_items",
        "introspection_source_index": "get_introspection_source_indexes",
        "id_allocator": "get_id_allocators",
        "system_configuration": "get_system_configurations",
        "setting": "get_settings",
        "audit_log": "get_audit_logs",
        "storage_usage": "get_storage_usages",
        "system_object_mapping": "get_system_object_mappings",
        "default_privilege": "get_default_privileges",
        "system_privilege": "get_system_privileges",
    }
    assert set(accessors) == set(KINDS)
    tx = catalog.transaction()
    tx.create_item(table("t"))
    tx.set_system_configuration("max_tables", "200")
    tx.add_storage_usage("s101", 4096, 1_000)
    tx.set_system_object_mappings(
        [SystemObjectMapping("mz_catalog", "source", "mz_clusters", "s101", "abc")]
    )
    tx.table("introspection_source_index").set(
        IntrospectionSourceIndex("u1", "mz_frontiers", "s10000")
    )
    catalog.commit_transaction(tx)
    for kind, accessor in accessors.items():
        objects = getattr(catalog, accessor)()
        assert objects, f"{accessor} returned nothing"
        assert all(isinstance(o, KINDS[kind].value_type) for o in objects)
        assert objects == catalog.get_objects(kind)


def test_objects_of_every_kind_survive_reopen(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """Items, system variables and storage usage are stored, not just kept in memory."""
    tx = catalog.transaction()
    created = tx.create_item(table("orders", create_sql="CREATE TABLE orders (id int8)"))
    tx.set_system_configuration("statement_logging_sample_rate", "0.5")
    tx.add_storage_usage("s101", 4096, 1_000)
    catalog.commit_transaction(tx)
    before = catalog.dump()
    catalog.close()
    reopened = open_catalog()
    assert reopened.get_items() == [created]
    assert (created.id, created.owner_id) == ("u1", "u1")
    assert [(c.name, c.value) for c in reopened.get_system_configurations()] == [
        ("statement_logging_sample_rate", "0.5")
    ]
    assert [(u.id, u.shard_id, u.size_bytes) for u in reopened.get_storage_usages()] == [
        (1, "s101", 4096)
    ]
    assert _collections(reopened.dump()) == _collections(before)


def test_item_names_are_unique_within_a_schema(catalog: DurableCatalogState) -> None:
    """The same name in one schema is refused; in another schema it is fine."""
    commit(catalog, lambda tx: tx.create_item(table("t")))
    expect_error("42710", '"t" already exists', catalog, lambda tx: tx.create_item(table("t")))
    commit(catalog, lambda tx: tx.create_item(dataclasses.replace(table("t"), schema_id="s2")))
    with pytest.raises(LoupeError, match="unknown schema"):
        commit(catalog, lambda tx: tx.create_item(dataclasses.replace(table("x"), schema_id="u9")))
    with pytest.raises(LoupeError, match=r"Item\.type"):
        commit(catalog, lambda tx: tx.create_item(dataclasses.replace(table("x"), type="pizza")))
    tx = catalog.transaction()
    tx.drop_item("u1")
    tx.create_item(table("t"))
    catalog.commit_transaction(tx)
    assert [(i.id, i.name) for i in catalog.get_items()] == [("u2", "t"), ("u3", "t")]


def test_new_databases_get_a_public_schema(catalog: DurableCatalogState) -> None:
    """CREATE DATABASE makes the database and its public schema; names are unique."""
    commit(catalog, lambda tx: tx.create_database("shop"))
    assert [(d.id, d.name) for d in catalog.get_databases()] == [
        ("u1", "materialize"),
        ("u2", "shop"),
    ]
    assert ("u2", "public", "u2") in [(s.id, s.name, s.database_id) for s in catalog.get_schemas()]
    expect_error(
        "42P04", 'database "shop" already exists', catalog, lambda tx: tx.create_database("shop")
    )


def test_snapshot_carries_databases_schemas_and_roles(catalog: DurableCatalogState) -> None:
    """The wire snapshot has the shared objects, and no audit events unless given."""
    snapshot = catalog.snapshot().to_proto()
    assert [d.name for d in snapshot.databases] == ["materialize"]
    assert [s.name for s in snapshot.schemas][-1] == "public"
    assert [r.name for r in snapshot.roles] == [
        "mz_system",
        "mz_monitor",
        "mz_monitor_redacted",
        "materialize",
    ]
    assert list(snapshot.new_audit_events) == []


# Audit log


def test_bootstrap_clusters_are_in_the_audit_log(catalog: DurableCatalogState) -> None:
    """The creation of both bootstrap clusters and their replicas is recorded."""
    events = catalog.get_audit_logs()
    assert [(e.id, e.event_type, e.object_type) for e in events] == [
        (1, "create", "cluster"),
        (2, "create", "cluster-replica"),
        (3, "create", "cluster"),
        (4, "create", "cluster-replica"),
    ]
    assert events[3].details == {
        "cluster_id": "u1",
        "cluster_name": "quickstart",
        "replica_id": "u1",
        "replica_name": "r1",
        "logical_size": "1",
    }
    assert {e.occurred_at for e in events} == {events[0].occurred_at}
    assert events[0].occurred_at <= catalog.read_timestamp()


def test_cluster_ddl_appends_audit_events_stamped_with_the_commit(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """Create and drop of clusters and replicas are audited with user and commit time."""
    tx = catalog.transaction(user="alice")
    tx.create_cluster(cluster("c", size="2", replication_factor=2))
    created_at = catalog.commit_transaction(tx)
    assert [
        (e.id, e.event_type, e.object_type, e.user, e.occurred_at) for e in tx.audit_events
    ] == [
        (5, "create", "cluster", "alice", created_at),
        (6, "create", "cluster-replica", "alice", created_at),
        (7, "create", "cluster-replica", "alice", created_at),
    ]
    assert tx.audit_events[0].details == {
        "id": "u2",
        "name": "c",
        "managed": True,
        "size": "2",
        "replication_factor": 2,
    }
    tx = catalog.transaction(user="bob")
    tx.drop_cluster("c")
    dropped_at = catalog.commit_transaction(tx)
    assert [
        (e.event_type, e.object_type, e.details.get("replica_name")) for e in tx.audit_events
    ] == [
        ("drop", "cluster-replica", "r1"),
        ("drop", "cluster-replica", "r2"),
        ("drop", "cluster", None),
    ]
    assert tx.audit_events[0].details == {
        "cluster_id": "u2",
        "cluster_name": "c",
        "replica_id": "u2",
        "replica_name": "r1",
    }
    assert {(e.user, e.occurred_at) for e in tx.audit_events} == {("bob", dropped_at)}
    assert [e.id for e in catalog.audit_events_after(6)] == [7, 8, 9, 10]
    catalog.close()
    assert [e.id for e in open_catalog().get_audit_logs()] == list(range(1, 11))


def test_failed_transaction_appends_no_audit_event(catalog: DurableCatalogState) -> None:
    """Events belong to the commit: a refused transaction leaves none behind."""
    expect_error(
        "42710",
        'cluster "quickstart" already exists',
        catalog,
        lambda tx: tx.create_cluster(cluster("fresh")),
        lambda tx: tx.create_cluster(cluster("quickstart")),
    )
    assert len(catalog.get_audit_logs()) == 4
    commit(catalog, lambda tx: tx.create_cluster(cluster("later")))
    assert [e.id for e in catalog.audit_events_after(4)] == [5]


# Ids


def test_allocate_id_is_durable_and_never_repeats(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """Allocated ids are committed at once: a reopened catalog continues after them."""
    assert catalog.allocate_id("user_item") == "u1"
    assert catalog.allocate_ids("user_item", 3) == ["u2", "u3", "u4"]
    catalog.close()
    reopened = open_catalog()
    assert reopened.allocate_id("user_item") == "u5"
    assert reopened.allocate_id("system_item") == "s10000"
    with pytest.raises(LoupeError, match="unknown id allocator"):
        reopened.allocate_id("bananas")


def test_system_object_mappings_commit_only_when_they_change(catalog: DurableCatalogState) -> None:
    """Setting the same mappings twice commits once."""
    mappings = [SystemObjectMapping("mz_catalog", "source", "mz_clusters", "s101", "abc")]
    assert catalog.set_system_object_mappings(mappings) is True
    timestamp = catalog.read_timestamp()
    assert catalog.set_system_object_mappings(mappings) is False
    assert catalog.read_timestamp() == timestamp
    assert catalog.get_system_object_mappings() == mappings


# Raw edits (the debug tool and EditObject)


def test_raw_edit_replaces_an_object_and_returns_the_old_value(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """An edit given as stored JSON is decoded, stored, and the old JSON returned."""
    tx = catalog.transaction()
    old = tx.edit_raw("setting", '{"name": "catalog_content_version"}', '{"value": "9.9.9"}')
    assert json.loads(old or "")["value"]
    assert tx.edit_raw("system_configuration", '{"name":"max_tables"}', '{"value": "7"}') is None
    catalog.commit_transaction(tx)
    catalog.close()
    reopened = open_catalog()
    settings = {s.name: s.value for s in reopened.get_settings()}
    assert settings["catalog_content_version"] == "9.9.9"
    tx = reopened.transaction()
    assert tx.edit_raw("system_configuration", '{"name":"max_tables"}', None) == '{"value":"7"}'
    reopened.commit_transaction(tx)
    assert reopened.get_system_configurations() == []


@pytest.mark.parametrize(
    ("kind", "key", "value", "message"),
    [
        ("clusterz", '{"id": "u1"}', "{}", "unknown object kind 'clusterz'"),
        ("cluster", '{"id": 1}', "{}", "Key.id must be text"),
        ("cluster", "u1", "{}", "bad cluster key"),
        ("cluster", '{"id": "u1"}', '{"name": "x"}', "Cluster is missing owner_id"),
        ("setting", '{"name": "a"}', '{"value": 5}', "Setting.value must be text"),
        ("setting", '{"name": "a"}', '{"value": "5", "extra": 1}', "unknown field(s) extra"),
        ("setting", '{"name": "a"}', '{"name": "a", "value": "5"}', "repeats the key field"),
        ("setting", '{"name": "a"}', "[1]", "expected a JSON object"),
        ("item", '{"id": "u1"}', '{"name": "t"}', "Item is missing"),
    ],
)
def test_raw_edit_refuses_values_that_do_not_decode(
    catalog: DurableCatalogState, kind: str, key: str, value: str, message: str
) -> None:
    """A bad kind, key or value is an ObjectFormatError naming the problem."""
    tx = catalog.transaction()
    with pytest.raises(ObjectFormatError) as caught:
        tx.edit_raw(kind, key, value)
    assert message in str(caught.value)


# Opening modes


def test_savepoint_commits_are_visible_but_never_stored(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """A savepoint reads its own commits; the store and the writer's epoch are untouched."""
    stored = catalog.dump_stored()
    savepoint = open_catalog(unopened=True)
    savepoint.open_savepoint()
    assert savepoint.mode == "savepoint"
    assert savepoint.epoch == catalog.epoch
    first = commit(savepoint, lambda tx: tx.create_cluster(cluster("scratch", size="1")))
    assert "scratch" in names(savepoint)
    assert commit(savepoint, lambda tx: tx.drop_cluster("scratch")) > first
    assert savepoint.allocate_id("user_item") == "u1"
    assert savepoint.allocate_id("user_item") == "u2"
    assert catalog.dump_stored() == stored
    catalog.confirm_leadership()
    commit(catalog, lambda tx: tx.create_cluster(cluster("real")))
    assert catalog.allocate_id("user_item") == "u1"


def test_savepoint_of_a_new_catalog_initialises_nothing(open_catalog: OpenCatalog) -> None:
    """On an empty store a savepoint bootstraps in memory only."""
    savepoint = open_catalog(unopened=True)
    savepoint.open_savepoint()
    assert [c.name for c in savepoint.get_clusters()] == ["mz_catalog_server", "quickstart"]
    commit(savepoint, lambda tx: tx.create_cluster(cluster("c")))
    savepoint.confirm_leadership()
    assert not savepoint.is_initialized()
    assert not open_catalog(unopened=True).is_initialized()


def test_check_open_reports_and_changes_nothing(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """check_open on a current catalog passes, bumps no epoch, and writes nothing."""
    stored = catalog.dump_stored()
    checker = open_catalog(unopened=True)
    result = checker.check_open()
    assert (result.stored_version, result.version, result.upgrades) == (
        CATALOG_VERSION,
        CATALOG_VERSION,
        0,
    )
    assert result.fence == catalog.fence
    assert not checker.is_open
    assert catalog.dump_stored() == stored
    catalog.confirm_leadership()


def test_check_open_refuses_what_open_would_refuse(open_catalog: OpenCatalog) -> None:
    """Not initialised, or owned by a newer deploy generation: check_open raises."""
    with pytest.raises(CatalogNotInitializedError):
        open_catalog(unopened=True).check_open()
    assert not open_catalog(unopened=True).is_initialized()
    open_catalog(deploy_generation=2)
    with pytest.raises(FencedError, match="deploy_generation=2"):
        open_catalog(deploy_generation=1, unopened=True).check_open()
    assert open_catalog(deploy_generation=2, unopened=True).check_open().upgrades == 0


def test_epoch_is_none_until_opened(open_catalog: OpenCatalog) -> None:
    """An unopened catalog has no epoch; stored_fence reads the store without opening."""
    unopened = open_catalog(unopened=True)
    assert unopened.epoch is None
    assert unopened.stored_fence() is None
    writer = open_catalog()
    assert unopened.stored_fence() == writer.fence


# Migrations

# The rows of a catalog written by version 1 (Loupe before the durable
# catalog issue): the bootstrap plus cluster `analytics` (u2) with two replicas.
V1_ROWS = [
    ("cluster", "s1", '{"id": "s1", "introspection_debugging": false, "introspection_interval_ns": 1000000000, "managed": true, "name": "mz_catalog_server", "owner_id": "s1", "replication_factor": 1, "size": "1"}'),
    ("cluster", "u1", '{"id": "u1", "introspection_debugging": false, "introspection_interval_ns": 1000000000, "managed": true, "name": "quickstart", "owner_id": "u1", "replication_factor": 1, "size": "1"}'),
    ("cluster", "u2", '{"id": "u2", "introspection_debugging": true, "introspection_interval_ns": 500000000, "managed": false, "name": "analytics", "owner_id": "u1", "replication_factor": 2, "size": ""}'),
    ("cluster_replica", "s1", '{"cluster_id": "s1", "id": "s1", "log_collections": {}, "name": "r1", "owner_id": "s1", "size": "1"}'),
    ("cluster_replica", "u1", '{"cluster_id": "u1", "id": "u1", "log_collections": {}, "name": "r1", "owner_id": "u1", "size": "1"}'),
    ("cluster_replica", "u2", '{"cluster_id": "u2", "id": "u2", "log_collections": {"compute_frontiers": "u7"}, "name": "r1", "owner_id": "u1", "size": "2"}'),
    ("cluster_replica", "u3", '{"cluster_id": "u2", "id": "u3", "log_collections": {}, "name": "r2", "owner_id": "u1", "size": "4"}'),
    ("id_allocator", "system_cluster", "2"),
    ("id_allocator", "system_replica", "2"),
    ("id_allocator", "user_cluster", "3"),
    ("id_allocator", "user_replica", "4"),
]  # fmt: skip


def store_rows(catalog: DurableCatalogState, version: int, rows: list[Row]) -> FenceToken:
    """Make the store hold exactly ``rows`` at ``version``, through the backend's own ``_load``.

    The ``migrate`` a backend is given decides the stored version and the
    writes, so a test can write a catalog of any version with any backend.
    """
    if not catalog.is_initialized():
        catalog._load(writable=True, initial_rows=[], migrate=lambda v, old: (v, []))

    def replace(_version: int, old: list[Row]) -> tuple[int, list[Write]]:
        return version, [(k, key, None) for k, key, _ in old] + list(rows)

    return catalog._load(writable=True, initial_rows=[], migrate=replace).fence


def test_version_1_catalog_is_upgraded_by_the_open_that_bumps_the_epoch(
    open_catalog: OpenCatalog,
) -> None:
    """Opening a version-1 catalog stores version 2, the new epoch and the migrated rows."""
    old_fence = store_rows(open_catalog(unopened=True), 1, V1_ROWS)
    catalog = open_catalog()
    assert catalog.fence == FenceToken(0, old_fence.epoch + 1)
    stored = json.loads(catalog.dump_stored())
    assert stored["config"] == {
        "version": CATALOG_VERSION,
        "epoch": old_fence.epoch + 1,
        "deploy_generation": 0,
    }
    assert _as_sets(stored) == _as_sets(json.loads(catalog.dump()))
    # Keys became JSON objects, the values lost their ids, replicas gained their cluster's config.
    replicas = {r.id: r for r in catalog.get_cluster_replicas()}
    assert (replicas["u2"].introspection_interval_ns, replicas["u2"].introspection_debugging) == (
        500_000_000,
        True,
    )
    assert dict(replicas["u2"].log_collections) == {"compute_frontiers": "u7"}
    assert replicas["s1"].introspection_interval_ns == 1_000_000_000
    assert names(catalog)["analytics"] == [("u2", "r1", "2"), ("u3", "r2", "4")]
    assert [d.name for d in catalog.get_databases()] == ["materialize"]
    assert catalog.get_audit_logs() == []
    # Ids continue where version 1 left them.
    commit(catalog, lambda tx: tx.create_cluster(cluster("next", size="1")))
    assert names(catalog)["next"] == [("u4", "r1", "1")]
    assert {c.name: c.id for c in catalog.get_clusters()}["next"] == "u3"


def test_upgraded_catalog_matches_a_new_one(open_catalog: OpenCatalog, tmp_path: Path) -> None:
    """Migrating the version-1 bootstrap gives what a new catalog holds (bar history)."""
    v1_bootstrap = [
        *V1_ROWS[:2],
        *V1_ROWS[3:5],
        *[("id_allocator", name, "2") for name in ("system_cluster", "system_replica")],
        *[("id_allocator", name, "2") for name in ("user_cluster", "user_replica")],
    ]
    store_rows(open_catalog(unopened=True), 1, v1_bootstrap)
    upgraded = _collections(open_catalog().dump())
    fresh = create_backend("stash-sqlite", tmp_path / "fresh")
    fresh.open()
    try:
        new = _collections(fresh.dump())
    finally:
        fresh.close()
    # A version-1 catalog has no audit log: its history is unknown.
    for collections in (upgraded, new):
        collections.pop("audit_log")
        collections["id_allocator"] = [
            a for a in collections["id_allocator"] if a["key"]["name"] != "audit_log"
        ]
    assert upgraded == new


def test_failed_migration_leaves_the_catalog_and_its_epoch_alone(
    open_catalog: OpenCatalog,
) -> None:
    """A version-1 row the upgrade cannot read stops the open before anything is written."""
    fence = store_rows(open_catalog(unopened=True), 1, [*V1_ROWS, ("widget", "w1", "{}")])
    probe = open_catalog(unopened=True)
    before = probe.dump_stored()
    with pytest.raises(CatalogCorruptError, match="upgrading the catalog from version 1 to 2"):
        open_catalog()
    assert probe.stored_fence() == fence
    assert probe.dump_stored() == before
    with pytest.raises(CatalogCorruptError):
        probe.check_open()


def test_check_open_on_a_version_1_catalog_passes_and_writes_nothing(
    open_catalog: OpenCatalog,
) -> None:
    """check_open runs the migration in memory only; read-only and savepoint opens too."""
    fence = store_rows(open_catalog(unopened=True), 1, V1_ROWS)
    probe = open_catalog(unopened=True)
    before = probe.dump_stored()
    result = probe.check_open()
    assert (result.stored_version, result.version, result.upgrades) == (
        1,
        CATALOG_VERSION,
        CATALOG_VERSION - 1,
    )
    assert result.fence == fence
    reader = open_catalog(unopened=True)
    reader.open_read_only()
    assert [c.name for c in reader.get_clusters()] == [
        "mz_catalog_server",
        "quickstart",
        "analytics",
    ]
    savepoint = open_catalog(unopened=True)
    savepoint.open_savepoint()
    commit(savepoint, lambda tx: tx.create_cluster(cluster("scratch")))
    assert probe.dump_stored() == before
    assert json.loads(before)["config"]["version"] == 1


def test_catalog_from_a_newer_loupe_is_refused_and_not_rewritten(
    open_catalog: OpenCatalog,
) -> None:
    """Every way of opening refuses a newer version with a clear error; nothing changes."""
    open_catalog().close()
    newer = CATALOG_VERSION + 1
    probe = open_catalog(unopened=True)
    probe._load(writable=True, initial_rows=[], migrate=lambda v, rows: (newer, []))
    before = probe.dump_stored()
    for how in ("open", "open_read_only", "open_savepoint", "check_open"):
        with pytest.raises(CatalogTooNewError) as caught:
            getattr(open_catalog(unopened=True), how)()
        assert f"version {newer}, newer than this Loupe's {CATALOG_VERSION}" in str(caught.value)
        assert "left untouched" in str(caught.value)
    assert probe.dump_stored() == before


def _as_sets(dump: dict) -> dict[str, set[str]]:
    """A dump's objects per kind, ignoring order and empty kinds."""
    return {
        kind: {json.dumps(entry, sort_keys=True) for entry in entries}
        for kind, entries in dump["collections"].items()
        if entries
    }


def _collections(dump: str) -> dict[str, list[dict]]:
    return json.loads(dump)["collections"]


def table(name: str, create_sql: str = "") -> Item:
    return Item(
        id="",
        schema_id="u1",
        name=name,
        type="table",
        owner_id="",
        create_sql=create_sql or f"CREATE TABLE {name} (a int8)",
    )


def test_write_timestamps_come_from_the_oracle_and_survive_reopen(
    catalog: DurableCatalogState, open_catalog: OpenCatalog
) -> None:
    """An empty transaction moves the oracle: each write timestamp is later, reads follow it."""
    before = catalog.read_timestamp()
    stamps = [catalog.write_timestamp() for _ in range(3)]
    assert before < stamps[0] < stamps[1] < stamps[2]
    assert catalog.read_timestamp() == stamps[-1]
    assert catalog.get_items() == []  # nothing but the oracle changed
    catalog.close()
    reopened = open_catalog()
    assert reopened.read_timestamp() >= stamps[-1]
    assert reopened.write_timestamp() > stamps[-1]


def test_items_are_audited_and_reported_as_changes(catalog: DurableCatalogState) -> None:
    """Creating and dropping an item records create/drop events of its type, and changes."""
    tx = catalog.transaction(user="alice")
    created = tx.create_item(table("orders"))
    catalog.commit_transaction(tx)
    assert [c.kind for c in tx.changes] == ["item_created"]
    assert [(e.event_type, e.object_type, e.user) for e in tx.audit_events] == [
        ("create", "table", "alice")
    ]
    assert tx.audit_events[0].details == {
        "id": created.id,
        "name": {"database": "materialize", "schema": "public", "item": "orders"},
    }
    assert catalog.snapshot().to_proto().items[0].name == "orders"
    tx = catalog.transaction(user="bob")
    tx.drop_item(created.id)
    catalog.commit_transaction(tx)
    assert [(c.kind, c.object) for c in tx.changes] == [("item_dropped", created)]
    assert [(e.event_type, e.object_type) for e in tx.audit_events] == [("drop", "table")]
    assert list(catalog.snapshot().to_proto().items) == []
