"""Rows of mz_clusters / mz_cluster_replicas derived from catalog snapshots, and their diffs."""

from __future__ import annotations

from collections import Counter

from loupe.coordinator.catalog_state import CatalogState, catalog_rows, cluster_row, row_diff
from loupe.interval import Interval
from loupe.proto.catalog.v1 import catalog_pb2


def snapshot(
    *clusters: catalog_pb2.Cluster, replicas=(), timestamp: int = 1
) -> catalog_pb2.CatalogSnapshot:
    return catalog_pb2.CatalogSnapshot(
        epoch=1, timestamp=timestamp, clusters=clusters, replicas=list(replicas)
    )


MANAGED = catalog_pb2.Cluster(
    id="u2",
    name="c",
    owner_id="u1",
    managed=True,
    size="2",
    replication_factor=2,
    introspection_interval_ns=1_000_000_000,
)


def test_cluster_rows_follow_materialize_columns() -> None:
    """Managed clusters have size and factor; unmanaged ones NULL; a 0 interval is NULL."""
    assert cluster_row(MANAGED) == (
        "u2",
        "c",
        "u1",
        True,
        "2",
        2,
        Interval(micros=1_000_000),
        False,
    )
    unmanaged = catalog_pb2.Cluster(id="u3", name="d", owner_id="u1", managed=False)
    assert cluster_row(unmanaged) == ("u3", "d", "u1", False, None, None, None, False)


def test_row_diff_retracts_then_inserts_only_what_changed() -> None:
    """Only changed rows travel; retractions first."""
    replica = catalog_pb2.ClusterReplica(
        id="u4", name="r1", cluster_id="u2", size="2", owner_id="u1"
    )
    before = catalog_rows(snapshot(MANAGED, replicas=[replica]))
    renamed = catalog_pb2.Cluster()
    renamed.CopyFrom(MANAGED)
    renamed.size = "4"
    after = catalog_rows(snapshot(renamed, replicas=[replica]))
    changes = row_diff(before, after)
    assert list(changes) == ["s101"]
    assert [diff for _, diff in changes["s101"]] == [-1, 1]
    assert changes["s101"][1][0][4] == "4"
    assert row_diff(after, after) == {}


def test_row_diff_handles_multiplicities() -> None:
    """Duplicate rows in storage are retracted down to what the catalog says."""
    row = ("u9", "x")
    changes = row_diff({"s1": Counter({row: 3})}, {"s1": Counter({row: 1})})
    assert changes == {"s1": [(row, -2)]}


def test_catalog_state_lookups() -> None:
    """Clusters by name, replicas by cluster and name, recency by epoch then time."""
    replica = catalog_pb2.ClusterReplica(id="u4", name="r1", cluster_id="u2")
    state = CatalogState(snapshot(MANAGED, replicas=[replica], timestamp=5))
    assert state.cluster("c").id == "u2"
    assert state.replica("u2", "r1").id == "u4"
    assert state.replica("u2", "r2") is None
    assert state.is_newer_than(CatalogState(snapshot(timestamp=4)))
    assert not CatalogState(snapshot(timestamp=4)).is_newer_than(state)
