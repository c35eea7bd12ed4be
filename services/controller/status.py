"""Replica status and metrics, kept as rows of storage-managed collections.

``mz_internal.mz_cluster_replica_statuses`` and ``mz_cluster_replica_metrics``
hold one current row per replica: every change retracts the old row and
inserts the new one, and a dropped replica's rows are retracted. The
``…_history`` collections only grow: a status history row at every status
change, a metrics history row at most every ``metrics_history_interval``.
The current metrics row changes at most every ``metrics_interval`` (a
replica's first heartbeat's at once): metrics change at every heartbeat,
and each change is a storage write, which at one a second kept Spark busy
on an idle system.

The rows go to the storage writer with ``stage`` as soon as they change, so
they are written at its next flush. At start ``load`` reads the rows a
previous controller left, so they are replaced rather than duplicated.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from loupe.builtins import (
    MZ_CLUSTER_REPLICA_METRICS,
    MZ_CLUSTER_REPLICA_METRICS_HISTORY,
    MZ_CLUSTER_REPLICA_STATUS_HISTORY,
    MZ_CLUSTER_REPLICA_STATUSES,
)
from loupe.common.logging import get_logger

log = get_logger(__name__)

ONLINE = "online"
OFFLINE = "offline"
# Loupe runs one process per replica.
PROCESS_ID = 0


class StagingWriter(Protocol):
    """The part of the storage writer the status tables use."""

    def stage(
        self, collection_id: str, row: tuple[Any, ...], diff: int, *, urgent: bool = False
    ) -> None: ...

    def snapshot(self, collection_id: str) -> list[tuple[Any, ...]]: ...


@dataclass(frozen=True)
class ReplicaStatus:
    """A replica's current status as the statuses collection shows it."""

    replica_id: str
    status: str
    reason: str | None
    incarnation: int
    updated_at: dt.datetime

    def row(self) -> tuple[Any, ...]:
        return (
            self.replica_id,
            PROCESS_ID,
            self.status,
            self.reason,
            self.updated_at,
            self.incarnation,
        )

    def history_row(self) -> tuple[Any, ...]:
        # Same shape, with occurred_at in place of updated_at.
        return self.row()


@dataclass(frozen=True)
class ReplicaMetrics:
    cpu_nano_cores: int
    memory_bytes: int
    disk_bytes: int


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ReplicaStatusTables:
    """Writes replica statuses and metrics, current and history, through the writer."""

    def __init__(
        self,
        writer: StagingWriter,
        *,
        metrics_history_interval: float = 10.0,
        metrics_interval: float = 5.0,
        clock: Callable[[], dt.datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._writer = writer
        self._metrics_history_interval = metrics_history_interval
        self._metrics_interval = metrics_interval
        self._monotonic = monotonic
        self._metrics_at: dict[str, float] = {}
        self._clock = clock
        self._current: dict[str, ReplicaStatus] = {}
        # Rows currently in the collections, per replica (incl. a previous run's).
        self._status_rows: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self._metrics_rows: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self._metrics: dict[str, ReplicaMetrics] = {}
        self._metrics_history_at: dict[str, float] = {}

    async def load(self) -> None:
        """Read the current rows (possibly left by an earlier controller) to replace later."""
        statuses = await asyncio.to_thread(self._writer.snapshot, MZ_CLUSTER_REPLICA_STATUSES.id)
        metrics = await asyncio.to_thread(self._writer.snapshot, MZ_CLUSTER_REPLICA_METRICS.id)
        for row in statuses:
            self._status_rows[row[0]].append(tuple(row))
        for row in metrics:
            self._metrics_rows[row[0]].append(tuple(row))
        log.info(
            "replica status rows loaded",
            statuses=len(statuses),
            metrics=len(metrics),
        )

    def current(self, replica_id: str) -> ReplicaStatus | None:
        """The status this controller last set for ``replica_id`` (None before any)."""
        return self._current.get(replica_id)

    def known_replicas(self) -> set[str]:
        """Replicas that have rows in the current collections."""
        return {r for r, rows in self._status_rows.items() if rows} | {
            r for r, rows in self._metrics_rows.items() if rows
        }

    def set_status(
        self, replica_id: str, status: str, reason: str | None, incarnation: int
    ) -> ReplicaStatus | None:
        """Record a status; returns it, or None when nothing changed."""
        previous = self._current.get(replica_id)
        if previous is not None and (previous.status, previous.reason, previous.incarnation) == (
            status,
            reason,
            incarnation,
        ):
            return None
        new = ReplicaStatus(replica_id, status, reason, incarnation, self._clock())
        self._current[replica_id] = new
        self._replace(MZ_CLUSTER_REPLICA_STATUSES.id, self._status_rows, replica_id, new.row())
        # Status changes are what people watch: flush them now, not at the next tick.
        self._writer.stage(MZ_CLUSTER_REPLICA_STATUS_HISTORY.id, new.history_row(), 1, urgent=True)
        log.info(
            "replica status",
            replica_id=replica_id,
            status=status,
            reason=reason,
            incarnation=incarnation,
        )
        return new

    def set_metrics(self, replica_id: str, metrics: ReplicaMetrics) -> None:
        """Record a heartbeat's metrics: the current row if changed, history now and then."""
        values = (metrics.cpu_nano_cores, metrics.memory_bytes, metrics.disk_bytes)
        now = self._monotonic()
        written = self._metrics_at.get(replica_id)
        due = written is None or now - written >= self._metrics_interval
        if due and self._metrics.get(replica_id) != metrics:
            self._metrics[replica_id] = metrics
            self._metrics_at[replica_id] = now
            self._replace(
                MZ_CLUSTER_REPLICA_METRICS.id,
                self._metrics_rows,
                replica_id,
                (replica_id, PROCESS_ID, *values),
            )
        last = self._metrics_history_at.get(replica_id)
        if last is None or now - last >= self._metrics_history_interval:
            self._metrics_history_at[replica_id] = now
            self._writer.stage(
                MZ_CLUSTER_REPLICA_METRICS_HISTORY.id,
                (replica_id, PROCESS_ID, *values, self._clock()),
                1,
            )

    def remove(self, replica_id: str) -> None:
        """The replica is gone: retract its current rows (history stays)."""
        for collection_id, rows in (
            (MZ_CLUSTER_REPLICA_STATUSES.id, self._status_rows),
            (MZ_CLUSTER_REPLICA_METRICS.id, self._metrics_rows),
        ):
            for row in rows.pop(replica_id, []):
                self._writer.stage(collection_id, row, -1)
        self._current.pop(replica_id, None)
        self._metrics.pop(replica_id, None)
        self._metrics_at.pop(replica_id, None)
        self._metrics_history_at.pop(replica_id, None)

    def remove_all_but(self, keep: Iterable[str]) -> list[str]:
        """Retract rows of replicas not in ``keep`` (dropped while no controller ran)."""
        keep = set(keep)
        gone = sorted(self.known_replicas() - keep)
        for replica_id in gone:
            self.remove(replica_id)
        return gone

    def _replace(
        self,
        collection_id: str,
        rows: dict[str, list[tuple[Any, ...]]],
        replica_id: str,
        row: tuple[Any, ...],
    ) -> None:
        for old in rows.pop(replica_id, []):
            self._writer.stage(collection_id, old, -1)
        rows[replica_id] = [row]
        self._writer.stage(collection_id, row, 1)
