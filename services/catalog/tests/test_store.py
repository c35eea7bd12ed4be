"""The durable catalog: bootstrap, operations, atomicity, fencing, timestamps, damage."""

from __future__ import annotations

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
from loupe.catalog.errors import CatalogReadOnlyError
from loupe.common.errors import LoupeError

OpenCatalog = Callable[..., DurableCatalogState]


# Every backend must pass these; new backends join the parametrisation.
@pytest.fixture(params=["stash-sqlite"])
def open_catalog(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[OpenCatalog]:
    opened: list[DurableCatalogState] = []

    def open_(deploy_generation: int = 0, now: Callable[[], int] = now_ms) -> DurableCatalogState:
        catalog = create_backend(
            request.param, data_dir, deploy_generation=deploy_generation, now=now
        )
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


@pytest.mark.parametrize("size", ["0", "-1", "abc", "1.5", "", " 1", "01"])
def test_invalid_sizes_are_refused_with_22023(catalog: DurableCatalogState, size: str) -> None:
    """A size is a positive number of workers, written as text."""
    with pytest.raises(LoupeError) as caught:
        commit(catalog, lambda tx: tx.create_cluster(cluster("c"), [replica("r1", size)]))
    assert caught.value.code == "22023"
    if size:
        assert caught.value.message == f"invalid SIZE '{size}'"
        with pytest.raises(LoupeError, match="invalid SIZE"):
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
    catalog: DurableCatalogState, data_dir: Path
) -> None:
    """open_read_only keeps the epoch and refuses commits."""
    reader = SqliteCatalogBackend(data_dir)
    reader.open_read_only()
    try:
        assert reader.epoch == catalog.epoch
        with pytest.raises(CatalogReadOnlyError):
            commit(reader, lambda tx: tx.create_cluster(cluster("c")))
        catalog.confirm_leadership()
    finally:
        reader.close()


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


def test_damaged_entry_is_refused(catalog: DurableCatalogState, data_dir: Path) -> None:
    """A catalog row that does not decode stops the open with its kind and key."""
    catalog.close()
    with sqlite3.connect(data_dir / "catalog" / "catalog.sqlite") as connection:
        connection.execute("UPDATE collections SET value = '{\"id\": 1}' WHERE key = 'u1'")
    connection.close()
    with pytest.raises(CatalogCorruptError, match="cluster/u1"):
        SqliteCatalogBackend(data_dir).open()
