"""Replica introspection into storage: the controller's side of ``IntrospectionUpdates``.

Every managed replica publishes its logs' changes on
``loupe.compute.v1.<replica_id>.introspection`` (the replica's
``introspection.py``). The controller subscribes to each replica's subject
and writes what it receives into the persisted ``mz_internal`` collections
(``loupe.builtins.INTROSPECTION_COLLECTIONS``, ``replica_id`` and
``incarnation`` in front of the log's columns) through the storage writer,
which assigns the time of the flush that writes them.

Isolation
    A subscription's callback only queues the message: each replica has a
    bounded queue (``max_pending_msgs`` / ``max_pending_bytes``, and
    nats-py's own pending limits behind it) and a worker task of its own.
    A message that finds the queue full is dropped and its updates counted
    (``loupe_controller_introspection_dropped_updates_total``): a flooding
    replica, or anyone publishing on its subject, fills only its own
    queue, and the controller's responses have subscriptions of their own.

Fencing and gaps
    Only messages of the replica's current incarnation (the one its
    orchestrator last started, alive and not being replaced) are applied;
    the others are counted (``loupe_controller_introspection_stale_messages_total``)
    and dropped. Each incarnation numbers its messages from 0; a message
    whose ``seq`` is not the next one, or any change before the
    incarnation's first snapshot, means updates were lost: the controller
    asks the replica for a snapshot (``UpdateConfiguration.introspection_snapshot``,
    at most once per ``snapshot_request_interval``) and ignores changes
    until it comes.

Snapshots replace
    The controller keeps a consolidated mirror of what the collections hold
    per replica (every incarnation's rows). A snapshot is written as the
    retraction of the mirror plus the new rows, consolidated, in ONE batch:
    one flush applies it, so no reader sees both or neither (a snapshot
    too large for one NATS message comes in parts, the first marked
    ``snapshot`` and the rest as changes, and a batch too large for one is
    split: then a flush may fall between the parts). After a
    controller restart the mirror is read back from the shards
    (consolidated, never expanded: count logs carry nanoseconds as diffs).
    A crashed incarnation's rows stay until the next one's snapshot; a
    dropped replica's, or one whose cluster turned introspection off, are
    retracted.

Completeness
    ``mz_internal.mz_cluster_replica_introspection_status`` has one row per
    replica with logging on: whether what the collections hold is complete,
    since when not, and how many updates were dropped (by the replica,
    reported in its messages, or here). A snapshot applied makes it complete.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from prometheus_client import Counter

from loupe.builtins import BY_ID, MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS
from loupe.common.aio import wait_event
from loupe.common.logging import get_logger
from loupe.common.transport import decode
from loupe.introspection.logs import BY_NAME, LOG_VARIANTS
from loupe.persist import DIFF_COLUMN
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.storage.v1 import storage_pb2
from loupe.sqltypes import sql_type

log = get_logger(__name__)

SUBJECT_PREFIX = "loupe.compute.v1"
STATUS = MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS

DROPPED_UPDATES = Counter(
    "loupe_controller_introspection_dropped_updates",
    "Introspection updates lost: dropped by the replica, by a full queue here, or in a seq gap",
    ["replica_id"],
)
STALE_MESSAGES = Counter(
    "loupe_controller_introspection_stale_messages",
    "Introspection messages dropped: another incarnation than the current one, or no replica",
    ["replica_id"],
)

Row = tuple[Any, ...]
# Per persisted collection id: row (replica_id, incarnation, log columns) -> count.
Mirror = dict[str, dict[Row, int]]


def introspection_subject(replica_id: str) -> str:
    return f"{SUBJECT_PREFIX}.{replica_id}.introspection"


@dataclass
class _ReplicaLogs:
    """What the controller knows of one replica's introspection."""

    replica_id: str
    subscription: Any = None
    worker: asyncio.Task[None] | None = None
    queue: collections.deque[bytes] = field(default_factory=collections.deque)
    queued_bytes: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # The incarnation whose messages were applied last, its next seq, and
    # whether its snapshot came (changes before it cannot be applied).
    incarnation: int = 0
    next_seq: int = 0
    synced: bool = False
    # Updates were lost: a snapshot is asked for until one comes (not before the
    # first message: an incarnation's first message is a snapshot anyway).
    wants_snapshot: bool = False
    # Drops the replica reported for this incarnation (its counter is cumulative).
    replica_dropped: int = 0
    dropped_updates: int = 0
    incomplete_since_ms: int = 0
    snapshot_requested_at: float = float("-inf")
    status_row: Row | None = None
    status_dirty: bool = False

    @property
    def complete(self) -> bool:
        return self.synced and not self.incomplete_since_ms


class IntrospectionIngest:
    """Subscribes to replicas' introspection subjects and writes what they send (see module)."""

    def __init__(
        self,
        nc: NatsConnection,
        writer: Any,
        *,
        current_incarnation: Callable[[str], int | None],
        request_snapshot: Callable[[str, int], Awaitable[None]],
        max_pending_msgs: int = 16,
        max_pending_bytes: int = 64 * 2**20,
        snapshot_request_interval: float = 1.0,
    ) -> None:
        self._nc = nc
        self._writer = writer
        self._current = current_incarnation
        self._request_snapshot = request_snapshot
        self.max_pending_msgs = max_pending_msgs
        self.max_pending_bytes = max_pending_bytes
        self.snapshot_request_interval = snapshot_request_interval
        # 0: as much as one NATS message holds (``_batch_bytes``).
        self.max_batch_bytes = 0
        self._replicas: dict[str, _ReplicaLogs] = {}
        # What the collections hold, per replica; None until read back from the shards.
        self._mirrors: dict[str, Mirror] | None = None
        # Status rows read back with the mirrors, until their replica's state takes them.
        self._status_rows: dict[str, Row] = {}
        self._load_lock = asyncio.Lock()
        # Held while a batch is built and handed to the writer: the mirror and the
        # stream agree on the order of every replica's writes.
        self._write_lock = asyncio.Lock()
        # For tests and the report.
        self.stale_messages = 0
        self.written_updates = 0
        self.snapshots_requested = 0

    # -- the set of replicas --------------------------------------------------------------

    def watching(self, replica_id: str) -> bool:
        return replica_id in self._replicas

    async def watch(self, replica_id: str) -> None:
        """Subscribe to ``replica_id``'s introspection (idempotent)."""
        if replica_id in self._replicas:
            return
        state = _ReplicaLogs(replica_id)
        self._replicas[replica_id] = state
        state.subscription = await self._nc.subscribe(
            introspection_subject(replica_id),
            cb=self._receiver(state),
            # Behind our own queue: bounds what nats-py buffers if the callback lags.
            pending_msgs_limit=self.max_pending_msgs * 4,
            pending_bytes_limit=self.max_pending_bytes * 2,
        )
        state.worker = asyncio.create_task(self._work(state), name=f"introspection-{replica_id}")

    async def unwatch(self, replica_id: str, *, retract: bool) -> None:
        """Stop listening to ``replica_id``; ``retract`` its rows (dropped, or logging off)."""
        state = self._replicas.pop(replica_id, None)
        if state is not None:
            with contextlib.suppress(Exception):
                await state.subscription.unsubscribe()
            if state.worker is not None:
                state.worker.cancel()
                await asyncio.gather(state.worker, return_exceptions=True)
        if retract:
            await self.retract(replica_id, state)

    async def retract(self, replica_id: str, state: _ReplicaLogs | None = None) -> None:
        """Retract every row of ``replica_id`` (all incarnations) and its status row."""
        mirrors = await self._loaded()
        async with self._write_lock:
            mirror = mirrors.pop(replica_id, {})
            changes = {
                cid: {row: -count for row, count in rows.items()} for cid, rows in mirror.items()
            }
            status = self._status_rows.pop(replica_id, None)
            if state is not None and state.status_row is not None:
                status = state.status_row
            if status is not None:
                changes.setdefault(STATUS.id, {})[status] = -1
            await self._submit(changes)
        if mirror or status:
            log.info("introspection of a replica retracted", replica_id=replica_id)

    async def retain(self, replica_ids: Iterable[str]) -> None:
        """Retract the rows of replicas not in ``replica_ids`` (dropped while we were away)."""
        keep = set(replica_ids)
        mirrors = await self._loaded()
        gone = (set(mirrors) | set(self._status_rows)) - keep - set(self._replicas)
        for replica_id in sorted(gone):
            await self.retract(replica_id)

    async def stop(self) -> None:
        for replica_id in list(self._replicas):
            await self.unwatch(replica_id, retract=False)

    def status(self, replica_id: str) -> _ReplicaLogs | None:
        return self._replicas.get(replica_id)

    def mirror(self, replica_id: str) -> Mirror:
        """What the collections hold of ``replica_id`` (for tests)."""
        return (self._mirrors or {}).get(replica_id, {})

    # -- receiving ------------------------------------------------------------------------------

    def _receiver(self, state: _ReplicaLogs) -> Callable[[Msg], Awaitable[None]]:
        async def receive(msg: Msg) -> None:
            data = msg.data
            if (
                len(state.queue) >= self.max_pending_msgs
                or state.queued_bytes + len(data) > self.max_pending_bytes
            ):
                self._drop_received(state, data)
                return
            state.queue.append(data)
            state.queued_bytes += len(data)
            state.wake.set()

        return receive

    def _drop_received(self, state: _ReplicaLogs, data: bytes) -> None:
        """A message for a full queue: counted, and what follows needs a snapshot."""
        updates = _count_updates(data)
        self._lost(state, updates)
        state.synced, state.wants_snapshot = False, True
        state.wake.set()

    def _lost(self, state: _ReplicaLogs, updates: int) -> None:
        state.dropped_updates += updates
        DROPPED_UPDATES.labels(replica_id=state.replica_id).inc(updates)
        if not state.incomplete_since_ms:
            state.incomplete_since_ms = time.time_ns() // 1_000_000
        state.status_dirty = True

    async def _work(self, state: _ReplicaLogs) -> None:
        while True:
            # The snapshot request is repeated (it or its answer may be lost).
            timeout = self.snapshot_request_interval if state.wants_snapshot else None
            await wait_event(state.wake, timeout)
            state.wake.clear()
            while state.queue:
                data = state.queue.popleft()
                state.queued_bytes -= len(data)
                try:
                    await self._handle(state, data)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("introspection message not applied", replica_id=state.replica_id)
                    state.synced, state.wants_snapshot = False, True
            if state.status_dirty:
                await self._write_status(state)
            if state.wants_snapshot:
                await self._ask_snapshot(state)

    async def _handle(self, state: _ReplicaLogs, data: bytes) -> None:
        response = decode(
            compute_pb2.ComputeResponse, data, subject=introspection_subject(state.replica_id)
        )
        if response is None:
            return
        current = self._current(state.replica_id)
        if (
            response.replica_id != state.replica_id
            or current is None
            or response.incarnation != current
            or response.WhichOneof("kind") != "introspection_updates"
        ):
            self.stale_messages += 1
            STALE_MESSAGES.labels(replica_id=state.replica_id).inc()
            log.debug(
                "stale introspection dropped",
                replica_id=state.replica_id,
                sender=response.replica_id,
                incarnation=response.incarnation,
                current=current,
            )
            return
        updates = response.introspection_updates
        if response.incarnation != state.incarnation:
            state.incarnation, state.next_seq, state.synced = response.incarnation, 0, False
            state.replica_dropped = 0
            state.status_dirty = True
        self._note_replica_drops(state, updates)
        if updates.snapshot:
            await self._apply(state, updates, snapshot=True)
            state.synced, state.wants_snapshot = True, False
            state.incomplete_since_ms = 0
            state.status_dirty = True
        elif state.synced and updates.seq == state.next_seq:
            await self._apply(state, updates, snapshot=False)
        else:
            if state.synced:
                log.info(
                    "introspection gap: snapshot needed",
                    replica_id=state.replica_id,
                    expected=state.next_seq,
                    seq=updates.seq,
                )
            state.synced, state.wants_snapshot = False, True
            if not state.incomplete_since_ms:
                state.incomplete_since_ms = time.time_ns() // 1_000_000
                state.status_dirty = True
        state.next_seq = updates.seq + 1

    def _note_replica_drops(
        self, state: _ReplicaLogs, updates: compute_pb2.IntrospectionUpdates
    ) -> None:
        if updates.dropped_updates > state.replica_dropped:
            self._lost(state, updates.dropped_updates - state.replica_dropped)
            state.replica_dropped = updates.dropped_updates
        if updates.incomplete_since_ms and not state.incomplete_since_ms:
            state.incomplete_since_ms = updates.incomplete_since_ms
            state.status_dirty = True

    async def _ask_snapshot(self, state: _ReplicaLogs) -> None:
        now = time.monotonic()
        current = self._current(state.replica_id)
        if current is None or now - state.snapshot_requested_at < self.snapshot_request_interval:
            return
        state.snapshot_requested_at = now
        self.snapshots_requested += 1
        log.info(
            "introspection snapshot requested", replica_id=state.replica_id, incarnation=current
        )
        await self._request_snapshot(state.replica_id, current)

    # -- writing ---------------------------------------------------------------------------

    async def _apply(
        self, state: _ReplicaLogs, updates: compute_pb2.IntrospectionUpdates, *, snapshot: bool
    ) -> None:
        incoming = await asyncio.to_thread(
            _decode_logs, state.replica_id, state.incarnation, updates.logs
        )
        mirrors = await self._loaded()
        async with self._write_lock:
            mirror = mirrors.setdefault(state.replica_id, {})
            changes = _replacement(mirror, incoming) if snapshot else incoming
            status = self._status_change(state)
            if status:
                changes[STATUS.id] = status
            await self._submit(changes)
            _fold(mirror, changes)

    async def _write_status(self, state: _ReplicaLogs) -> None:
        async with self._write_lock:
            status = self._status_change(state)
            if status:
                await self._submit({STATUS.id: status})

    def _status_change(self, state: _ReplicaLogs) -> dict[Row, int]:
        """The status row's retraction and new row, if it changed; made current."""
        if not state.status_dirty:
            return {}
        state.status_dirty = False
        if state.status_row is None:
            state.status_row = self._status_rows.pop(state.replica_id, None)
        since = state.incomplete_since_ms or (0 if state.synced else time.time_ns() // 1_000_000)
        row = (
            state.replica_id,
            state.incarnation,
            state.complete,
            _timestamp(since) if since else None,
            state.dropped_updates,
        )
        old = state.status_row
        if old is not None and old[:5] == row:
            return {}
        new = (*row, dt.datetime.now(dt.UTC))
        state.status_row = new
        change = {new: 1}
        if old is not None:
            change[old] = -1
        return change

    async def _submit(self, changes: Mapping[str, Mapping[Row, int]]) -> None:
        """One batch for the writer: one flush applies all of it.

        A batch larger than a NATS message (a big replica's snapshot: its
        retractions and its rows) is split into batches that fit, published
        back to back; a flush takes every batch received, so they are almost
        always applied together, but a flush may fall between them (logged).
        """
        entries = [
            entry
            for cid, rows in sorted(changes.items())
            if any(rows.values())
            for entry in _entries(cid, rows, self._batch_bytes())
        ]
        if not entries:
            return
        count = sum(1 for rows in changes.values() for diff in rows.values() if diff)
        batches = _pack(entries, self._batch_bytes())
        if len(batches) > 1:
            log.warning("introspection batch split to fit NATS messages", batches=len(batches))
        for batch in batches:
            await self._writer.submit_collections(f"introspection-{uuid.uuid4().hex}", batch)
        self.written_updates += count

    def _batch_bytes(self) -> int:
        """What one batch may hold: a NATS message, less room for its envelope."""
        if self.max_batch_bytes:
            return self.max_batch_bytes
        max_payload = int(getattr(self._nc, "max_payload", 0) or 2**20)
        return max(max_payload - 64 * 1024, max_payload // 2)

    # -- reading back after a restart ------------------------------------------------------

    async def _loaded(self) -> dict[str, Mirror]:
        """The mirrors, read from the shards (consolidated) on first use."""
        if self._mirrors is not None:
            return self._mirrors
        async with self._load_lock:
            if self._mirrors is None:
                mirrors, status = await asyncio.to_thread(self._read_back)
                self._status_rows = status
                self._mirrors = mirrors
                log.info("introspection rows read back", replicas=sorted(mirrors))
        return self._mirrors

    def _read_back(self) -> tuple[dict[str, Mirror], dict[str, Row]]:
        mirrors: dict[str, Mirror] = {}
        for variant in LOG_VARIANTS:
            cid = variant.collection_id
            for row, count in self._writer.consolidated(cid):
                mirrors.setdefault(row[0], {}).setdefault(cid, {})[_hashable(row)] = count
        status: dict[str, Row] = {}
        for row, count in self._writer.consolidated(STATUS.id):
            if count > 0:
                status[row[0]] = _hashable(row)
        return mirrors, status


# -- rows --------------------------------------------------------------------------------------


def _hashable(row: Iterable[Any]) -> Row:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


def _timestamp(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _decode_logs(
    replica_id: str, incarnation: int, logs: Iterable[compute_pb2.LogUpdates]
) -> dict[str, dict[Row, int]]:
    """Per persisted collection: the message's rows, consolidated, replica columns in front."""
    found: dict[str, dict[Row, int]] = {}
    for entry in logs:
        variant = BY_NAME.get(entry.log)
        if variant is None:
            log.warning("introspection of an unknown log ignored", log=entry.log)
            continue
        table = pa.ipc.open_stream(entry.arrow_ipc).read_all()
        columns = [table.column(name).to_pylist() for name in variant.column_names]
        diffs = table.column(DIFF_COLUMN).to_pylist()
        rows = found.setdefault(variant.collection_id, {})
        for values, diff in zip(zip(*columns, strict=True), diffs, strict=True):
            key = _hashable((replica_id, incarnation, *values))
            rows[key] = rows.get(key, 0) + diff
    return found


def _replacement(mirror: Mirror, snapshot: dict[str, dict[Row, int]]) -> dict[str, dict[Row, int]]:
    """What turns ``mirror`` into ``snapshot``: retractions and insertions, consolidated."""
    changes: dict[str, dict[Row, int]] = {}
    for cid in set(mirror) | set(snapshot):
        held, wanted = mirror.get(cid, {}), snapshot.get(cid, {})
        diff = {row: wanted.get(row, 0) - count for row, count in held.items()}
        for row, count in wanted.items():
            if row not in held:
                diff[row] = count
        changes[cid] = {row: d for row, d in diff.items() if d}
    return changes


def _fold(mirror: Mirror, changes: Mapping[str, Mapping[Row, int]]) -> None:
    for cid, rows in changes.items():
        if cid == STATUS.id:
            continue
        held = mirror.setdefault(cid, {})
        for row, diff in rows.items():
            count = held.get(row, 0) + diff
            if count:
                held[row] = count
            else:
                held.pop(row, None)


def _encode(collection_id: str, rows: Mapping[Row, int]) -> bytes:
    collection = BY_ID[collection_id]
    live = [(row, diff) for row, diff in rows.items() if diff]
    fields = [pa.field(name, sql_type(kind).arrow) for name, kind in collection.columns]
    arrays = [
        pa.array([_plain(row[i]) for row, _ in live], type=f.type) for i, f in enumerate(fields)
    ]
    arrays.append(pa.array([diff for _, diff in live], type=pa.int64()))
    table = pa.Table.from_arrays(
        arrays, schema=pa.schema([*fields, pa.field(DIFF_COLUMN, pa.int64())])
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def _entries(
    collection_id: str, rows: Mapping[Row, int], budget: int
) -> list[storage_pb2.CollectionUpdates]:
    """``rows`` as columnar updates of at most ``budget`` bytes each (split in halves)."""
    data = _encode(collection_id, rows)
    if len(data) <= budget or len(rows) < 2:
        return [storage_pb2.CollectionUpdates(collection_id=collection_id, arrow_ipc=data)]
    items = list(rows.items())
    half = len(items) // 2
    return [
        *_entries(collection_id, dict(items[:half]), budget),
        *_entries(collection_id, dict(items[half:]), budget),
    ]


def _pack(
    entries: list[storage_pb2.CollectionUpdates], budget: int
) -> list[list[storage_pb2.CollectionUpdates]]:
    batches: list[list[storage_pb2.CollectionUpdates]] = [[]]
    size = 0
    for entry in entries:
        length = len(entry.arrow_ipc) + len(entry.collection_id) + 16
        if batches[-1] and size + length > budget:
            batches.append([])
            size = 0
        batches[-1].append(entry)
        size += length
    return batches


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _count_updates(data: bytes) -> int:
    """The updates a dropped message carried (0 if it does not decode)."""
    try:
        response = compute_pb2.ComputeResponse.FromString(data)
        total = 0
        for entry in response.introspection_updates.logs:
            reader = pa.ipc.open_stream(entry.arrow_ipc)
            total += sum(batch.num_rows for batch in reader)
        return total
    except Exception:
        return 0
