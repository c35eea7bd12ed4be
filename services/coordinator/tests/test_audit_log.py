"""Rows of mz_audit_events, mz_cluster_replica_history and the snapshot relations."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

from loupe.builtins import (
    MZ_AUDIT_EVENTS,
    MZ_CLUSTER_REPLICA_HISTORY,
    MZ_DATABASES,
    MZ_ROLES,
    MZ_SCHEMAS,
)
from loupe.coordinator.audit_log import AuditLog
from loupe.coordinator.catalog_state import catalog_rows
from loupe.proto.catalog.v1 import catalog_pb2

T0 = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)


def ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def event(
    event_id: int,
    event_type: str,
    object_type: str,
    at: dt.datetime = T0,
    user: str = "materialize",
    **details: object,
) -> catalog_pb2.AuditEvent:
    return catalog_pb2.AuditEvent(
        id=event_id,
        event_type=event_type,
        object_type=object_type,
        details_json=json.dumps(details),
        user=user,
        occurred_at=ms(at),
    )


def replica_event(
    event_id: int, event_type: str, replica_id: str, cluster_id: str = "u2", logical_size: str = ""
) -> catalog_pb2.AuditEvent:
    return event(
        event_id,
        event_type,
        "cluster-replica",
        cluster_id=cluster_id,
        cluster_name="c",
        replica_id=replica_id,
        replica_name=f"r-{replica_id}",
        logical_size=logical_size,
    )


def test_audit_event_rows_follow_materialize_columns() -> None:
    """id, event_type, object_type, details as canonical JSON, user (NULL for the system), occurred_at."""
    log = AuditLog()
    log.add(
        [
            catalog_pb2.AuditEvent(
                id=7,
                event_type="create",
                object_type="cluster",
                details_json='{"name": "c", "id": "u2"}',
                user="",
                occurred_at=ms(T0),
            )
        ]
    )
    (row,) = log.rows()[MZ_AUDIT_EVENTS.id]
    assert row == (7, "create", "cluster", '{"id": "u2", "name": "c"}', None, T0)


def test_events_are_kept_once_by_id_and_holes_are_noticed() -> None:
    """The same event from two deliveries counts once; an id past high_water + 1 is a hole."""
    log = AuditLog()
    first = [event(1, "create", "cluster"), event(2, "create", "cluster")]
    assert log.add(first) == [1, 2]
    assert log.add([*first, event(3, "drop", "cluster")]) == [3]
    assert len(log) == 3
    assert sum(log.rows()[MZ_AUDIT_EVENTS.id].values()) == 3
    assert log.unknown(first) == []
    assert log.follows_on([event(4, "create", "cluster")])
    assert not log.follows_on([event(6, "create", "cluster")])
    assert AuditLog().follows_on([event(6, "create", "cluster")]), "an empty log has no holes"


def test_replica_history_from_create_and_drop_events() -> None:
    """Creates are rows with dropped_at NULL until their drop; system clusters are left out."""
    later = T0 + dt.timedelta(minutes=5)
    log = AuditLog()
    log.add([replica_event(1, "create", "u3", logical_size="2")])
    assert set(log.rows()[MZ_CLUSTER_REPLICA_HISTORY.id]) == {
        ("u3", "2", "u2", "c", "r-u3", T0, None)
    }
    log.add(
        [
            replica_event(2, "create", "s9", cluster_id="s1", logical_size="1"),
            event(3, "drop", "cluster-replica", at=later, replica_id="u3", cluster_id="u2"),
        ]
    )
    assert set(log.rows()[MZ_CLUSTER_REPLICA_HISTORY.id]) == {
        ("u3", "2", "u2", "c", "r-u3", T0, later)
    }


def test_a_cluster_drop_ends_its_replicas_history() -> None:
    """Should the catalog record only the cluster's drop, its live replicas end with it."""
    later = T0 + dt.timedelta(seconds=1)
    log = AuditLog()
    log.add(
        [
            replica_event(1, "create", "u3", logical_size="1"),
            replica_event(2, "create", "u4", logical_size="1"),
            event(3, "drop", "cluster-replica", at=T0, replica_id="u3"),
            event(4, "drop", "cluster", at=later, id="u2", name="c"),
        ]
    )
    dropped = {row[0]: row[6] for row in log.rows()[MZ_CLUSTER_REPLICA_HISTORY.id]}
    assert dropped == {"u3": T0, "u4": later}


def test_rows_are_a_copy() -> None:
    """Callers may keep the rows they got: later events do not change them."""
    log = AuditLog()
    log.add([event(1, "create", "cluster")])
    rows = log.rows()
    log.add([event(2, "create", "cluster")])
    assert sum(rows[MZ_AUDIT_EVENTS.id].values()) == 1


def test_snapshot_rows_of_databases_schemas_and_roles() -> None:
    """Ambient schemas have a NULL database_id; audit relations only with an audit log."""
    snapshot = catalog_pb2.CatalogSnapshot(
        databases=[catalog_pb2.Database(id="u1", name="materialize", owner_id="s1")],
        schemas=[
            catalog_pb2.Schema(id="s1", name="mz_catalog", owner_id="s1"),
            catalog_pb2.Schema(id="u3", name="public", database_id="u1", owner_id="u1"),
        ],
        roles=[catalog_pb2.Role(id="u1", name="materialize", inherit=True)],
    )
    rows = catalog_rows(snapshot)
    assert rows[MZ_DATABASES.id] == Counter({("u1", "materialize", "s1"): 1})
    assert rows[MZ_SCHEMAS.id] == Counter(
        {("s1", None, "mz_catalog", "s1"): 1, ("u3", "u1", "public", "u1"): 1}
    )
    assert rows[MZ_ROLES.id] == Counter({("u1", "materialize", True): 1})
    assert MZ_AUDIT_EVENTS.id not in rows
    assert rows.keys() | {MZ_AUDIT_EVENTS.id, MZ_CLUSTER_REPLICA_HISTORY.id} == set(
        catalog_rows(snapshot, AuditLog())
    )
