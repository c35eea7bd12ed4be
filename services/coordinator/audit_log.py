"""The coordinator's copy of the catalog's audit log, and the relations derived from it.

``mz_catalog.mz_audit_events`` holds one row per audit event;
``mz_internal.mz_cluster_replica_history`` is a function of the events, as
Materialize defines it: one row per ``create`` of a ``cluster-replica`` of a
user cluster, with ``dropped_at`` taken from the matching ``drop`` event
(NULL while the replica exists).

Events arrive from several places (the whole log at start, each commit's
``new_audit_events`` on our own responses and on ``loupe.catalog.v1.changes``)
and may arrive twice; they are kept by id, so each is counted once.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loupe.builtins import MZ_AUDIT_EVENTS, MZ_CLUSTER_REPLICA_HISTORY
from loupe.common.logging import get_logger
from loupe.common.values import EPOCH
from loupe.proto.catalog.v1 import catalog_pb2

log = get_logger(__name__)

Row = tuple[Any, ...]

AUDIT_COLLECTIONS = (MZ_AUDIT_EVENTS, MZ_CLUSTER_REPLICA_HISTORY)

REPLICA_OBJECT = "cluster-replica"
CLUSTER_OBJECT = "cluster"


@dataclass(frozen=True)
class AuditEvent:
    """One audit event with its details parsed."""

    id: int
    event_type: str
    object_type: str
    details: dict[str, Any]
    # The details as stored in ``mz_audit_events.details`` (canonical JSON text).
    details_text: str
    user: str | None
    occurred_at: dt.datetime

    @classmethod
    def from_proto(cls, event: catalog_pb2.AuditEvent) -> AuditEvent:
        details = _parse_details(event.id, event.details_json)
        return cls(
            id=event.id,
            event_type=event.event_type,
            object_type=event.object_type,
            details=details if isinstance(details, dict) else {},
            details_text=json.dumps(details, sort_keys=True),
            # Events the system records itself (bootstrap) have no user: NULL.
            user=event.user or None,
            occurred_at=EPOCH + dt.timedelta(milliseconds=event.occurred_at),
        )

    def row(self) -> Row:
        """The event's row of ``mz_catalog.mz_audit_events``."""
        return (
            self.id,
            self.event_type,
            self.object_type,
            self.details_text,
            self.user,
            self.occurred_at,
        )

    def text(self, key: str) -> str | None:
        """``details ->> key``."""
        value = self.details.get(key)
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value)


def _parse_details(event_id: int, text: str) -> Any:
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        # Keep what the catalog said, as a JSON string, rather than lose the event.
        log.warning("audit event details are not JSON", event_id=event_id)
        return text


class AuditLog:
    """The audit events known so far, by id, and the rows derived from them."""

    def __init__(self) -> None:
        self._events: dict[int, AuditEvent] = {}
        self._rows: dict[str, Counter[Row]] | None = None

    def __len__(self) -> int:
        return len(self._events)

    def __contains__(self, event_id: int) -> bool:
        return event_id in self._events

    @property
    def high_water(self) -> int:
        """The highest event id known (0 when none is)."""
        return max(self._events, default=0)

    def unknown(self, events: Iterable[catalog_pb2.AuditEvent]) -> list[catalog_pb2.AuditEvent]:
        """The events of ``events`` not known yet, each once, by id."""
        fresh: dict[int, catalog_pb2.AuditEvent] = {}
        for event in events:
            if event.id not in self._events:
                fresh.setdefault(event.id, event)
        return [fresh[event_id] for event_id in sorted(fresh)]

    def follows_on(self, events: Iterable[catalog_pb2.AuditEvent]) -> bool:
        """Whether ``events`` (unknown ones) continue the log without a hole.

        The catalog numbers events consecutively, so an event further on than
        ``high_water + 1`` means a commit we never heard of.
        """
        ids = sorted(event.id for event in events)
        return not ids or not self._events or ids[0] <= self.high_water + 1

    def add(self, events: Iterable[catalog_pb2.AuditEvent]) -> list[int]:
        """Remember ``events``; returns the ids that were new."""
        added = []
        for event in self.unknown(events):
            self._events[event.id] = AuditEvent.from_proto(event)
            added.append(event.id)
        if added:
            self._rows = None
        return added

    def rows(self) -> dict[str, Counter[Row]]:
        """Collection id -> the rows the audit log implies (a fresh copy)."""
        if self._rows is None:
            events = [self._events[event_id] for event_id in sorted(self._events)]
            self._rows = {
                MZ_AUDIT_EVENTS.id: Counter(event.row() for event in events),
                MZ_CLUSTER_REPLICA_HISTORY.id: Counter(replica_history_rows(events)),
            }
        return {collection_id: Counter(rows) for collection_id, rows in self._rows.items()}


def replica_history_rows(events: Iterable[AuditEvent]) -> list[Row]:
    """Rows of ``mz_internal.mz_cluster_replica_history`` for ``events`` (in id order).

    Like Materialize's view: replicas of system clusters (ids ``s…``) are left
    out. A replica is dropped by its ``drop`` event, or, should the catalog
    record only the cluster's drop, by that of its cluster.
    """
    created: dict[str, AuditEvent] = {}
    dropped: dict[str, dt.datetime] = {}
    for event in events:
        if event.object_type == REPLICA_OBJECT:
            replica_id = event.text("replica_id")
            if replica_id is None:
                continue
            if event.event_type == "create":
                cluster_id = event.text("cluster_id") or ""
                if not cluster_id.startswith("s"):
                    created.setdefault(replica_id, event)
            elif event.event_type == "drop":
                dropped.setdefault(replica_id, event.occurred_at)
        elif event.object_type == CLUSTER_OBJECT and event.event_type == "drop":
            dropped_cluster = event.text("id") or event.text("cluster_id")
            for replica_id, create in created.items():
                if create.text("cluster_id") == dropped_cluster:
                    dropped.setdefault(replica_id, event.occurred_at)
    return [
        (
            replica_id,
            create.text("logical_size") or create.text("size"),
            create.text("cluster_id"),
            create.text("cluster_name"),
            create.text("replica_name"),
            create.occurred_at,
            dropped.get(replica_id),
        )
        for replica_id, create in created.items()
    ]
