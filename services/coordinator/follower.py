"""Following the catalog: the in-memory catalog, the controller and the catalog relations.

Every commit to the catalog, whoever made it, is published on
``loupe.catalog.v1.changes`` (core NATS, in commit order). Each coordinator
follows that stream one commit at a time:

1. it adopts the commit's snapshot, so name resolution sees it at once, and
   remembers the commit's audit events by id (an event seen twice counts once);
2. it hands the snapshot to the controller (``ApplyCatalog``, idempotent);
3. it appends the difference the commit makes to the catalog relations as
   batch ``catalog-<epoch>-<timestamp>``.

Every coordinator computes the same difference for the same commit (its rows
minus the previous commit's), and the controller applies a batch id once, so
each commit reaches storage once however many coordinators follow it.

An append that goes unconfirmed (the storage writer down) leaves the
catalog relations writer *stale*; the next commit, or ``resync`` (every few
seconds), brings storage to the catalog once the writer is back.

The coordinator's own DDL takes the same road: after ``Transact`` it waits
(bounded) until the stream has delivered its commit, so commits are followed
in catalog order even when another coordinator committed just before. If the
notification does not come, the response's snapshot is followed instead.

A notification can be lost. The catalog numbers audit events consecutively,
so a commit that went by unseen shows as a hole in the ids: the missing
events are fetched with ``ListAuditEvents`` and storage is read again before
the next append. A lost commit that records no audit event goes unnoticed;
its rows reach storage with the next commit followed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from loupe.common.aio import wait_event
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.transport import NatsServiceClient
from loupe.coordinator import metrics
from loupe.coordinator.admission import RETRY_PAUSE, backoff
from loupe.coordinator.audit_log import AuditLog
from loupe.coordinator.catalog_relations import CatalogRelationsWriter
from loupe.coordinator.catalog_state import (
    CATALOG_COLLECTIONS,
    SNAPSHOT_COLLECTIONS,
    CatalogState,
    catalog_rows,
    snapshot_key,
)
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.controller.v1 import controller_pb2

log = get_logger(__name__)

Retry = Callable[[Callable[[], Awaitable[Any]], str], Awaitable[Any]]


def batch_id(snapshot: catalog_pb2.CatalogSnapshot) -> str:
    """The storage batch of a commit's catalog relations, the same in every coordinator."""
    epoch, timestamp = snapshot_key(snapshot)
    return f"catalog-{epoch}-{timestamp}"


class CatalogFollower:
    """Keeps the coordinator's catalog, the controller and storage in step with the catalog."""

    def __init__(
        self,
        catalog: NatsServiceClient,
        controller: NatsServiceClient,
        writer: CatalogRelationsWriter,
        *,
        follow_timeout: float = 2.0,
    ) -> None:
        self._catalog = catalog
        self._controller = controller
        self.writer = writer
        self._follow_timeout = follow_timeout
        # The newest snapshot known (name resolution); may run ahead of ``_followed``
        # when a lookup asked the catalog directly.
        self.state = CatalogState()
        # None when the catalog keeps no audit log (it answered UNIMPLEMENTED).
        self.audit: AuditLog | None = AuditLog()
        # The last commit followed into the controller and storage.
        self._followed = catalog_pb2.CatalogSnapshot()
        # The result of the last ApplyCatalog: None, or why the controller refused it.
        self.apply_failure: str | None = None
        self._lock = asyncio.Lock()
        self._progress = asyncio.Condition()
        # Wakes ``keep_storage_in_sync`` (an append failed; a controller started).
        self._resync_wanted = asyncio.Event()
        # Set while storage is known to hold the last commit followed.
        self._in_sync = asyncio.Event()
        self._in_sync.set()
        # Why storage is behind the catalog (the last failure), None once it is not.
        self.behind_because: str | None = None
        # Own commits (``reach_storage``) not yet confirmed in storage.
        self._unconfirmed = 0
        # Set (and replaced) whenever ``state`` is replaced by a newer snapshot.
        self._changed = asyncio.Event()

    @property
    def followed_key(self) -> tuple[int, int]:
        return snapshot_key(self._followed)

    # -- start ------------------------------------------------------------------------

    async def start(
        self,
        collections: Mapping[str, common_pb2.CollectionMetadata],
        retry: Retry,
        *,
        append_wait: float | None = None,
    ) -> None:
        """Read the catalog (snapshot and audit log) and storage; append what storage lacks.

        Changes arriving meanwhile are adopted but not written: the
        reconciliation here covers them. The append waits ``append_wait``
        seconds at most (None: as long as the writer retries); a storage
        writer that does not confirm it by then (down, or still catching up
        after a restart) does not keep the coordinator from serving: the
        writer is left stale and ``keep_storage_in_sync`` finishes the job.
        """
        # The log before the snapshot: events of commits in between arrive on the stream.
        events = await self._list_audit_events(0, retry)
        snapshot = await retry(
            lambda: self._catalog.Snapshot(catalog_pb2.SnapshotRequest()), "catalog"
        )
        # Under the lock: no change is written before storage is reconciled.
        async with self._lock:
            if events is None:
                self.audit = None
            await self.writer.load(
                collections,
                CATALOG_COLLECTIONS if self.audit is not None else SNAPSHOT_COLLECTIONS,
            )
            if self.audit is not None:
                self.audit.add(events or [])
            if snapshot_key(snapshot) >= self.followed_key:
                self._advance(snapshot)
            await self._apply_to_controller(self._followed)
            try:
                await asyncio.wait_for(
                    self.writer.sync(self._target(), batch_id(self._followed)), append_wait
                )
            except (LoupeError, TimeoutError) as error:
                if not self.writer.stale:
                    raise
                because = str(error) or f"storage did not confirm it within {append_wait:g}s"
                log.warning(
                    "catalog relations behind the catalog at start; catching up in the background",
                    error=because,
                )
                self.resync_soon(because)
                self._show_behind()
        log.info(
            "coordinator reconciled with the catalog",
            clusters=len(self.state.clusters),
            replicas=len(self.state.replicas),
            audit_events=len(self.audit) if self.audit is not None else None,
            catalog_timestamp=self.state.timestamp,
        )

    async def _list_audit_events(
        self, after_id: int, retry: Retry | None = None
    ) -> list[catalog_pb2.AuditEvent] | None:
        """Audit events with id > ``after_id``; None when the catalog has no audit log."""

        async def call() -> catalog_pb2.ListAuditEventsResponse:
            return await self._catalog.ListAuditEvents(
                catalog_pb2.ListAuditEventsRequest(after_id=after_id)
            )

        try:
            response = await (retry(call, "catalog") if retry is not None else call())
        except LoupeError as error:
            if error.code != "UNIMPLEMENTED":
                raise
            log.warning(
                "the catalog keeps no audit log: mz_audit_events and"
                " mz_cluster_replica_history are not maintained",
                error=error.message,
            )
            return None
        return list(response.events)

    # -- following --------------------------------------------------------------------

    async def on_change(self, snapshot: catalog_pb2.CatalogSnapshot, _msg: Any = None) -> None:
        """Handler of ``loupe.catalog.v1.changes``."""
        await self.follow(snapshot)

    async def follow(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        """Follow one commit: adopt it, tell the controller, append its rows."""
        async with self._lock:
            await self._follow(snapshot)
        async with self._progress:
            self._progress.notify_all()

    async def _follow(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        newer = snapshot_key(snapshot) > self.followed_key
        audit = self.audit
        events = audit.unknown(snapshot.new_audit_events) if audit is not None else []
        if not newer and not events:
            return  # seen already (typically our own commit: its response, then the stream)
        missed = audit is not None and self.writer.loaded and not audit.follows_on(events)
        if audit is not None and missed:
            metrics.CATALOG_COMMITS_MISSED.inc()
            log.warning(
                "a catalog commit went by unseen; reading the audit log and storage again",
                known_through=audit.high_water,
                next_event=min(event.id for event in events),
            )
            events += await self._missing_events(audit.high_water)
        if audit is not None:
            audit.add(events)
        if newer:
            self._advance(snapshot)
        if not self.writer.loaded:
            return  # start() reconciles once storage has been read
        if newer:
            await self._apply_to_controller(snapshot)
        try:
            if missed:
                await self.writer.reload()
            await self.writer.sync(self._target(), batch_id(snapshot))
        except LoupeError as error:
            # Kept as pending by the writer: the next commit or DDL sends it again.
            log.warning("catalog change not yet in storage", error=error.message)

    async def _missing_events(self, after_id: int) -> list[catalog_pb2.AuditEvent]:
        try:
            return await self._list_audit_events(after_id) or []
        except LoupeError as error:
            log.warning("could not read the audit log", error=error.message)
            return []

    async def after_commit(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        """Follow our own commit (``snapshot`` from ``Transact``) and make sure it is in storage.

        Raises ``LoupeError`` when storage could not be brought up to date.
        """
        key = snapshot_key(snapshot)
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self.followed_key >= key),
                    self._follow_timeout,
                )
            except TimeoutError:
                log.info("own commit not seen on the changes stream; following the response")
        await self.follow(snapshot)
        async with self._lock:
            await self.writer.sync(self._target(), batch_id(self._followed))

    @property
    def storage_behind(self) -> bool:
        """Whether storage lacks a commit: an own commit not confirmed yet, or an append
        of the catalog relations that went unconfirmed and is not made good."""
        return self.writer.stale or self._unconfirmed > 0

    def _show_behind(self) -> None:
        metrics.CATALOG_RELATIONS_BEHIND.set(1 if self.storage_behind else 0)

    async def reach_storage(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        """Follow our own commit into storage (``after_commit``); when its append fails,
        wait until ``keep_storage_in_sync`` has brought storage up to date."""
        self._unconfirmed += 1
        self._show_behind()
        try:
            try:
                await self.after_commit(snapshot)
            except LoupeError as error:
                if not self.writer.stale:
                    raise
                log.warning(
                    "catalog relations are behind the catalog; catching up", error=error.message
                )
                self.resync_soon(error.message)
                self._show_behind()
                await self.wait_in_sync()
        finally:
            self._unconfirmed -= 1
            self._show_behind()

    def resync_soon(self, because: str | None = None) -> None:
        """Have ``keep_storage_in_sync`` try at once (after a failed append, or when a
        controller, and with it the storage writer, starts)."""
        if because is not None:
            self.behind_because = because
        self._resync_wanted.set()

    async def wait_in_sync(self) -> None:
        """Until storage holds the last commit followed (``keep_storage_in_sync`` gets it there)."""
        while self.writer.stale:
            self._in_sync.clear()
            self.resync_soon()
            await self._in_sync.wait()

    async def resync(self) -> bool:
        """Bring storage to the last commit followed if an append to it went unconfirmed
        (the storage writer was down); True once storage is known to match."""
        if not self.writer.loaded:
            return False
        async with self._lock:
            if not self.writer.stale:
                return True
            try:
                await self.writer.sync(self._target(), batch_id(self._followed))
            except LoupeError as error:
                log.info("catalog relations not yet in storage", error=error.message)
                self.behind_because = error.message
                return False
        log.info("catalog relations caught up with the catalog after a storage outage")
        return True

    async def keep_storage_in_sync(self, interval: float) -> None:
        """The one loop that makes storage converge on the catalog after an outage of the
        storage writer, whether or not more commits come: while the catalog relations
        writer is stale, ``resync`` with growing pauses (at most ``interval``), at once
        when woken (``resync_soon``). The gauge ``..._catalog_relations_behind`` is 1
        meanwhile, and DDL waiting in ``wait_in_sync`` is answered once it is done."""
        pause = RETRY_PAUSE
        while True:
            await wait_event(self._resync_wanted, pause if self.writer.stale else interval)
            self._resync_wanted.clear()
            if not self.writer.stale:
                continue
            self._show_behind()
            try:
                caught_up = await self.resync()
            except Exception:  # the loop must outlive any one failure
                log.exception("catalog relations resync failed")
                caught_up = False
            if caught_up and not self.writer.stale:
                pause = RETRY_PAUSE
                self.behind_because = None
                self._show_behind()
                self._in_sync.set()
            else:
                metrics.CATALOG_RELATIONS_RETRIES.inc()
                pause = backoff(pause, interval)

    async def refresh(self) -> CatalogState:
        """Ask the catalog for its latest snapshot, for name resolution (storage is not touched)."""
        snapshot = await self._catalog.Snapshot(catalog_pb2.SnapshotRequest())
        return self.resolve_with(snapshot)

    def resolve_with(self, snapshot: catalog_pb2.CatalogSnapshot) -> CatalogState:
        """Resolve names with ``snapshot`` from now on if it is newer (a commit's own
        snapshot, before following it: the statement that made it must see its object
        even while following waits for storage); nothing is followed by this."""
        fresh = CatalogState(snapshot)
        if fresh.is_newer_than(self.state):
            self.state = fresh
            self._changed.set()
            self._changed = asyncio.Event()
        return self.state

    async def changed(self) -> None:
        """Return once ``state`` is replaced by a newer snapshot (a commit, a refresh)."""
        await self._changed.wait()

    # -- helpers ----------------------------------------------------------------------

    def _advance(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        self._followed = snapshot
        self.resolve_with(snapshot)

    def _target(self) -> dict[str, Any]:
        return catalog_rows(self._followed, self.audit)

    async def _apply_to_controller(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        """``ApplyCatalog``; a failure is logged and kept in ``apply_failure``."""
        try:
            await self._controller.ApplyCatalog(
                controller_pb2.ApplyCatalogRequest(snapshot=snapshot)
            )
        except LoupeError as error:
            log.warning("controller did not apply the catalog", error=error.message)
            self.apply_failure = error.message
        else:
            self.apply_failure = None
