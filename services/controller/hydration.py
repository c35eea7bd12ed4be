"""Hydration, as replicas report it, kept in storage-managed collections (seed 002).

Replicas send a ``Hydration`` response per dataflow whenever it changes
(whether or not introspection logging is on): every LIR node's status and
progress on every worker, the dataflow's exports, its hydration time and
when it was installed and started. The compute controller feeds
``HydrationTables`` only responses that passed zombie fencing, and tells it
about incarnations starting and ending, heartbeats, dataflows created and
objects and replicas dropped. It keeps, and writes through the storage
writer's ``stage``:

Current state (one row per replica and object; object ids are the
dataflow's export ids, ``physical_plan_node_id`` the node's LIR id)
    - ``mz_compute_operator_hydration_statuses``: hydrated when every worker
      says so;
    - ``mz_compute_operator_hydration_progress_per_worker``: records done and
      estimated, ``updated_at`` when the controller received the values (a
      row whose values did not change keeps its time);
    - ``mz_compute_hydration_times``: NULL until the dataflow is hydrated;
    - ``mz_compute_dependencies``: each export's source and index imports,
      from the dataflow descriptions the controller installs.

    A replica's report for a dataflow replaces the rows of the dataflow's
    exports on that replica, whatever incarnation wrote them: so a crashed
    incarnation's rows stay until its next incarnation's first report for
    that dataflow (its statuses starting over), and another replica's rows
    are never touched. A dropped object's rows (every replica's) and a
    dropped replica's rows are retracted. After a controller restart
    ``load`` reads the rows the previous one left, so they are replaced, not
    duplicated; rows of objects no cluster runs ``orphan_grace`` seconds
    after the start (dropped while no controller ran; coordinators send
    every live dataflow to a new controller at once) are retracted.

Histories (``mz_replica_hydration_history``, ``mz_object_hydration_history``)
    One episode per replica incarnation: ``started_at`` when the
    incarnation came up, ``finished_at`` when every dataflow of its cluster
    is hydrated on it (``object_count`` their exports; an incarnation with
    nothing to run is hydrated at its first heartbeat), ``peak_memory_bytes``
    the largest heartbeat memory while it hydrated. While the incarnation
    lives its episode goes hydrating again when a dataflow it has not
    hydrated comes (a new object; after a controller restart, the dataflows
    coordinators send again), and hydrated once that is. One episode per
    object and replica incarnation: ``installed_at`` / ``started_at`` as the
    replica says, ``finished_at`` = installed + hydration time, ``records``
    processed. ``status`` goes hydrating -> hydrated, or ends
    ``interrupted`` (the incarnation died or was restarted first; also an
    open episode a restarted controller finds: its incarnation died with the
    old controller) or ``dropped`` (the object or the replica was dropped
    first); an episode that ends unhydrated has ``finished_at`` = when it
    ended. One-shot peeks' transient dataflows are not reported at all (no rows, no
    episodes): every read of these relations is one.

Retention (``hydration_history_retention``)
    An object's episode is never changed once it ended, and ``finished_at``
    is set exactly then: the storage writer expires those rows by
    ``finished_at`` (``expire_by``), as it does finished statement
    executions, without racing the controller. A replica's episode stays the
    controller's to change as long as its incarnation lives, however old its
    ``finished_at`` (a replica hydrated a month ago that gets a new index):
    the writer expiring it would make the controller's next change retract a
    row that is gone. So the controller expires those itself
    (``expire``, every ``expire_interval``): rows of ended episodes only,
    none it holds, has pending or has retracted already.

Writes are batched: every change updates an in-memory mirror of what the
collections hold and adds to a consolidated set of pending updates; every
``write_interval`` the pending updates are staged. A row that changes many
times between two writes is staged once (its last value), and a report that
changes nothing stages nothing. A write that opens an object episode (a
hydration began) is staged ``urgent``: the storage writer flushes it at once
rather than at its next interval, so a hydration shorter than that interval
is still seen hydrating; everything else waits for the regular flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from loupe.builtins import (
    MZ_COMPUTE_DEPENDENCIES,
    MZ_COMPUTE_HYDRATION_TIMES,
    MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER,
    MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES,
    MZ_OBJECT_HYDRATION_HISTORY,
    MZ_REPLICA_HYDRATION_HISTORY,
)
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.proto.compute.v1 import compute_pb2, plan_pb2

log = get_logger(__name__)

STATUSES = MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES.id
PROGRESS = MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER.id
TIMES = MZ_COMPUTE_HYDRATION_TIMES.id
DEPENDENCIES = MZ_COMPUTE_DEPENDENCIES.id
REPLICA_HISTORY = MZ_REPLICA_HYDRATION_HISTORY.id
OBJECT_HISTORY = MZ_OBJECT_HYDRATION_HISTORY.id
# Current-state collections keyed by (replica_id, object_id).
PER_REPLICA_OBJECT = (STATUSES, PROGRESS, TIMES)

HYDRATING = "hydrating"
HYDRATED = "hydrated"
INTERRUPTED = "interrupted"
DROPPED = "dropped"

STAGED = Counter(
    "loupe_controller_hydration_updates",
    "Updates to the hydration collections staged for the storage writer",
    ["collection"],
)

Row = tuple[Any, ...]
Key = tuple[str, str]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _from_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


@dataclass(frozen=True)
class DataflowInfo:
    """What the tables need of a dataflow the controller installs on a cluster."""

    exports: tuple[str, ...]
    # One-shot peeks: current state only, no history episodes.
    transient: bool = False


@dataclass
class _ReplicaEpisode:
    replica_id: str
    cluster_id: str
    incarnation: int
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    object_count: int = 0
    peak_memory_bytes: int = 0
    status: str = HYDRATING
    # When it last went hydrating (a dataflow to hydrate came): it cannot finish before.
    since: dt.datetime | None = None
    # dataflow id -> when it hydrated (wall clock) in this incarnation.
    hydrated: dict[str, dt.datetime] = field(default_factory=dict)
    # The row the collection holds (None: not written yet).
    held: Row | None = None

    def row(self) -> Row:
        return (
            self.replica_id,
            self.cluster_id,
            self.started_at,
            self.finished_at,
            self.object_count,
            self.peak_memory_bytes,
            self.status,
            self.incarnation,
        )


@dataclass
class _ObjectEpisode:
    object_id: str
    cluster_id: str
    replica_id: str
    incarnation: int
    installed_at: dt.datetime | None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    status: str = HYDRATING
    records: int = 0
    held: Row | None = None

    def row(self) -> Row:
        return (
            self.object_id,
            self.cluster_id,
            self.replica_id,
            self.installed_at,
            self.started_at,
            self.finished_at,
            self.status,
            self.incarnation,
            self.records,
        )


class HydrationTables:
    """The hydration collections: what they hold, what changes, what is staged (see module)."""

    def __init__(
        self,
        writer: Any,
        *,
        dataflows_of: Callable[[str], Mapping[str, DataflowInfo]],
        write_interval: float = 0.25,
        orphan_grace: float = 60.0,
        expire_interval: float = 60.0,
        clock: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self._writer = writer
        self._dataflows_of = dataflows_of
        self.write_interval = write_interval
        self.orphan_grace = orphan_grace
        self._clock = clock
        # collection id -> (replica, object) -> row -> count, as the collections hold them.
        self._held: dict[str, dict[Key, dict[Row, int]]] = {c: {} for c in PER_REPLICA_OBJECT}
        # (replica, object) -> the incarnation whose report wrote its rows (0: a previous run).
        self._written_by: dict[Key, int] = {}
        # object id -> row -> count (mz_compute_dependencies).
        self._dependencies: dict[str, dict[Row, int]] = {}
        # collection id -> row -> diff, not staged yet (consolidated).
        self._pending: dict[str, dict[Row, int]] = {}
        # Open episodes: replica id -> its current incarnation's episode.
        self._replicas: dict[str, _ReplicaEpisode] = {}
        # (replica, incarnation, object) -> its open episode.
        self._objects: dict[tuple[str, int, str], _ObjectEpisode] = {}
        # (replica, incarnation, object) whose episode ended: no second one.
        self._objects_ended: set[tuple[str, int, str]] = set()
        # Rows read back at start whose objects no cluster runs yet: retracted after the grace.
        self._loaded_at: float | None = None
        # mz_replica_hydration_history's retention (``hydration_history_retention``), applied
        # here every ``expire_interval``; the replica history rows this controller retracted
        # that may still be in the shard (never retracted twice).
        self.retention_ms = MZ_REPLICA_HYDRATION_HISTORY.retention_ms
        self.expire_interval = expire_interval
        self._retracted: set[Row] = set()
        # A hydration began (an object episode opened): flush at once, not at the
        # writer's next interval, so a short hydration is seen hydrating at all.
        self._urgent = False
        self._expired_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------

    async def load(self) -> None:
        """Read what a previous controller left: current rows to replace, open episodes to end."""
        read = await asyncio.to_thread(self._read_back)
        for cid in PER_REPLICA_OBJECT:
            for row, count in read[cid]:
                key = (row[0], row[1])
                self._held[cid].setdefault(key, {})[row] = count
                self._written_by.setdefault(key, 0)
        for row, count in read[DEPENDENCIES]:
            self._dependencies.setdefault(row[0], {})[row] = count
        now = self._clock()
        ended = 0
        # Open episodes of incarnations that died with the previous controller.
        for cid, status_at in ((REPLICA_HISTORY, 6), (OBJECT_HISTORY, 6)):
            for row, count in read[cid]:
                if row[status_at] != HYDRATING or count <= 0:
                    continue
                finished_at = 3 if cid == REPLICA_HISTORY else 5
                closed = list(row)
                closed[finished_at] = now
                closed[status_at] = INTERRUPTED
                self._add(cid, row, -count)
                self._add(cid, tuple(closed), 1)
                ended += 1
        self._loaded_at = time.monotonic()
        log.info(
            "hydration rows read back",
            rows=sum(len(read[c]) for c in (*PER_REPLICA_OBJECT, DEPENDENCIES)),
            episodes_interrupted=ended,
        )

    def _read_back(self) -> dict[str, list[tuple[Row, int]]]:
        read = {}
        for cid in (*PER_REPLICA_OBJECT, DEPENDENCIES, REPLICA_HISTORY, OBJECT_HISTORY):
            read[cid] = [
                (tuple(row), count) for row, count in self._writer.consolidated(cid) if count
            ]
        return read

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hydration-writes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.write()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.write_interval)
            try:
                if time.monotonic() - self._expired_at >= self.expire_interval:
                    self._expired_at = time.monotonic()
                    await self.expire()
                self.write()
            except Exception:
                log.exception("hydration updates not staged")

    async def expire(self) -> int:
        """Retract ended replica episodes whose ``finished_at`` is older than
        ``retention_ms``; how many (staged at the next write).

        Not the storage writer's ``expire_by``: a live incarnation's episode stays
        this controller's to change (hydrated, then hydrating again when a new
        dataflow comes), however old its ``finished_at``. So only rows no live
        episode holds, that are not pending, and that this controller has not
        retracted already are expired; the shard is read for them.
        """
        found = await asyncio.to_thread(self._writer.consolidated, REPLICA_HISTORY)
        present = {tuple(row): count for row, count in found if count > 0}
        self._retracted &= set(present)  # the others' retractions are in the shard
        live = {e.held for e in self._replicas.values() if e.held is not None}
        pending = self._pending.get(REPLICA_HISTORY, {})
        cutoff = self._clock() - dt.timedelta(milliseconds=self.retention_ms)
        expired = 0
        for row, count in present.items():
            finished_at = row[3]
            if row in live or row in pending or row in self._retracted or finished_at is None:
                continue
            if finished_at < cutoff:
                self._add(REPLICA_HISTORY, row, -count)
                expired += 1
        if expired:
            log.info("replica hydration episodes expired", rows=expired, cutoff=str(cutoff))
        return expired

    def write(self) -> int:
        """Stage the pending updates (consolidated); how many."""
        staged = 0
        pending, self._pending = self._pending, {}
        urgent, self._urgent = self._urgent, False
        for cid, rows in pending.items():
            for row, diff in rows.items():
                if not diff:
                    continue
                try:
                    self._writer.stage(cid, row, diff, urgent=urgent)
                except LoupeError as error:
                    if error.code != "INVALID_ARGUMENT":
                        raise  # the writer is stopping
                    # A row the collection cannot hold must not hold up the others.
                    log.error("hydration row refused", collection=cid, row=row, error=str(error))
                    continue
                staged += 1
                STAGED.labels(collection=cid).inc()
        return staged

    def _add(self, cid: str, row: Row, diff: int) -> None:
        if cid == REPLICA_HISTORY and diff < 0:
            self._retracted.add(row)
        rows = self._pending.setdefault(cid, {})
        total = rows.get(row, 0) + diff
        if total:
            rows[row] = total
        else:
            rows.pop(row, None)

    # -- current state ----------------------------------------------------------------------

    def _replace(self, cid: str, key: Key, rows: Iterable[Row]) -> None:
        """Make the collection hold ``rows`` for ``key``: the difference becomes pending."""
        held = self._held[cid]
        old = held.pop(key, {})
        new: dict[Row, int] = {}
        for row in rows:
            new[row] = new.get(row, 0) + 1
        if new:
            held[key] = new
        for row, count in old.items():
            if new.get(row, 0) != count:
                self._add(cid, row, -count)
        for row, count in new.items():
            if old.get(row, 0) != count:
                self._add(cid, row, count)

    def _retract_key(self, key: Key) -> None:
        for cid in PER_REPLICA_OBJECT:
            self._replace(cid, key, ())
        self._written_by.pop(key, None)

    # -- what the compute controller tells -----------------------------------------------------

    def on_hydration(
        self, replica_id: str, cluster_id: str, incarnation: int, message: compute_pb2.Hydration
    ) -> None:
        """A fenced ``Hydration`` of ``replica_id``'s current incarnation."""
        dataflows = self._dataflows_of(cluster_id)
        info = dataflows.get(message.dataflow_id)
        if info is None:
            return  # dropped meanwhile (or never installed by this controller)
        if info.transient:
            # A one-shot SELECT's dataflow lives for one peek: reporting it would make every
            # read of these relations (itself a one-shot dataflow) a write to them.
            return
        objects = [o for o in (message.export_ids or info.exports) if o in info.exports]
        if message.nodes:
            self._current(replica_id, incarnation, objects, message)
        for object_id in objects:
            self._object_episode(replica_id, cluster_id, incarnation, object_id, message)
        episode = self._replicas.get(replica_id)
        if episode is not None and episode.incarnation == incarnation and message.hydrated:
            episode.hydrated.setdefault(message.dataflow_id, _finished_at(message, self._clock))
        self._refresh(replica_id)

    def _current(
        self,
        replica_id: str,
        incarnation: int,
        objects: Sequence[str],
        message: compute_pb2.Hydration,
    ) -> None:
        received = self._clock()
        by_node: dict[int, bool] = {}
        for node in message.nodes:
            by_node[node.lir_id] = by_node.get(node.lir_id, True) and node.hydrated
        time_ns = message.hydration_time_ns if message.HasField("hydration_time_ns") else None
        for object_id in objects:
            key = (replica_id, object_id)
            same_incarnation = self._written_by.get(key) == incarnation
            self._written_by[key] = incarnation
            self._replace(
                STATUSES,
                key,
                [
                    (replica_id, object_id, lir, hydrated)
                    for lir, hydrated in sorted(by_node.items())
                ],
            )
            # A row whose values did not change keeps its updated_at.
            previous: dict[tuple[int, int], Row] = {}
            if same_incarnation:
                for row in self._held[PROGRESS].get(key, {}):
                    previous[(row[2], row[3])] = row
            rows = []
            for node in message.nodes:
                old = previous.get((node.lir_id, node.worker_id))
                if old is not None and old[4:6] == (node.records_done, node.records_estimated):
                    rows.append(old)
                else:
                    rows.append(
                        (
                            replica_id,
                            object_id,
                            node.lir_id,
                            node.worker_id,
                            node.records_done,
                            node.records_estimated,
                            received,
                        )
                    )
            self._replace(PROGRESS, key, rows)
            self._replace(TIMES, key, [(replica_id, object_id, time_ns)])

    def _object_episode(
        self,
        replica_id: str,
        cluster_id: str,
        incarnation: int,
        object_id: str,
        message: compute_pb2.Hydration,
    ) -> None:
        ident = (replica_id, incarnation, object_id)
        if ident in self._objects_ended:
            return
        episode = self._objects.get(ident)
        if episode is None:
            installed = _from_ms(message.installed_at_ms) if message.installed_at_ms else None
            episode = _ObjectEpisode(object_id, cluster_id, replica_id, incarnation, installed)
            self._objects[ident] = episode
        if message.installed_at_ms:
            episode.installed_at = _from_ms(message.installed_at_ms)
        if message.started_at_ms:
            episode.started_at = _from_ms(message.started_at_ms)
        episode.records = max(episode.records, message.records_done)
        if message.hydrated:
            episode.status = HYDRATED
            episode.finished_at = _finished_at(message, self._clock)
            self._end_object(ident)
        else:
            self._write_episode(OBJECT_HISTORY, episode)

    def _write_episode(self, cid: str, episode: _ReplicaEpisode | _ObjectEpisode) -> None:
        row = episode.row()
        if row == episode.held:
            return
        if cid == OBJECT_HISTORY and episode.held is None and episode.status == HYDRATING:
            self._urgent = True
        if episode.held is not None:
            self._add(cid, episode.held, -1)
        self._add(cid, row, 1)
        episode.held = row

    def _end_object(self, ident: tuple[str, int, str], status: str | None = None) -> None:
        episode = self._objects.pop(ident, None)
        if episode is None:
            return
        if status is not None:
            episode.status = status
            episode.finished_at = self._clock()
        self._write_episode(OBJECT_HISTORY, episode)
        self._objects_ended.add(ident)

    def on_heartbeat(self, replica_id: str, incarnation: int, memory_bytes: int) -> None:
        episode = self._replicas.get(replica_id)
        if episode is None or episode.incarnation != incarnation:
            return
        if episode.status == HYDRATING:
            episode.peak_memory_bytes = max(episode.peak_memory_bytes, memory_bytes)
        self._refresh(replica_id)

    def _refresh(self, replica_id: str) -> None:
        """The replica's live episode, rewritten if changed: hydrated while every dataflow
        of its cluster is hydrated on it, hydrating again when one that is not comes."""
        episode = self._replicas.get(replica_id)
        if episode is None:
            return
        dataflows = {
            d: info
            for d, info in self._dataflows_of(episode.cluster_id).items()
            if not info.transient
        }
        episode.object_count = sum(len(info.exports) for info in dataflows.values())
        if all(d in episode.hydrated for d in dataflows):
            if episode.status != HYDRATED:
                episode.status = HYDRATED
                times = [episode.hydrated[d] for d in dataflows]
                episode.finished_at = max([*times, episode.since or self._clock()])
        elif episode.status != HYDRATING or episode.since is None:
            episode.status, episode.finished_at = HYDRATING, None
            episode.since = self._clock()
        self._write_episode(REPLICA_HISTORY, episode)

    def _end_replica(self, replica_id: str, status: str) -> None:
        """The incarnation is gone: its episode ends, ``status`` unless it was hydrated."""
        episode = self._replicas.pop(replica_id, None)
        if episode is None:
            return
        if episode.status != HYDRATED:
            episode.status = status
            episode.finished_at = self._clock()
        self._write_episode(REPLICA_HISTORY, episode)
        log.info(
            "replica hydration episode ended",
            replica_id=replica_id,
            incarnation=episode.incarnation,
            status=episode.status,
            objects=episode.object_count,
        )

    def incarnation_started(self, replica_id: str, cluster_id: str, incarnation: int) -> None:
        """A new incarnation came up: the previous one's open episodes end interrupted."""
        self.incarnation_ended(replica_id)
        episode = _ReplicaEpisode(replica_id, cluster_id, incarnation, self._clock())
        self._replicas[replica_id] = episode
        self._write_episode(REPLICA_HISTORY, episode)

    def incarnation_ended(
        self, replica_id: str, incarnation: int | None = None, status: str = INTERRUPTED
    ) -> None:
        """``replica_id``'s incarnation (any if None) is gone: its open episodes end with
        ``status``. Its current rows stay until the next incarnation reports."""
        episode = self._replicas.get(replica_id)
        if episode is not None and (incarnation is None or episode.incarnation == incarnation):
            self._end_replica(replica_id, status)
        for ident in [i for i in self._objects if i[0] == replica_id]:
            if incarnation is None or ident[1] == incarnation:
                self._end_object(ident, status)
        self._objects_ended = {
            i
            for i in self._objects_ended
            if i[0] != replica_id or (incarnation is not None and i[1] != incarnation)
        }

    def replica_dropped(self, replica_id: str) -> None:
        """Its open episodes end dropped; its current rows are retracted."""
        self.incarnation_ended(replica_id, status=DROPPED)
        keys = {k for cid in PER_REPLICA_OBJECT for k in self._held[cid] if k[0] == replica_id}
        for key in keys:
            self._retract_key(key)

    def retain(self, replica_ids: Iterable[str]) -> list[str]:
        """Retract the rows of replicas not in ``replica_ids`` (dropped while no controller
        ran); the replicas retracted."""
        keep = set(replica_ids)
        gone = {k[0] for cid in PER_REPLICA_OBJECT for k in self._held[cid]} - keep
        gone |= set(self._replicas) - keep
        for replica_id in sorted(gone):
            self.replica_dropped(replica_id)
        return sorted(gone)

    def dataflow_created(self, dataflow: plan_pb2.DataflowDescription) -> None:
        """Each export depends on the dataflow's source and index imports (one-shot peeks'
        dataflows are not reported: see ``on_hydration``)."""
        if one_shot_peek(dataflow):
            return
        imports = sorted(
            {s.id for s in dataflow.source_imports} | {i.index_id for i in dataflow.index_imports}
        )
        exports = [e.index_id for e in dataflow.index_exports] + [
            s.sink_id for s in dataflow.sink_exports
        ]
        for object_id in exports:
            wanted = {(object_id, dependency): 1 for dependency in imports}
            held = self._dependencies.pop(object_id, {})
            for row, count in held.items():
                if wanted.get(row, 0) != count:
                    self._add(DEPENDENCIES, row, -count)
            for row, count in wanted.items():
                if held.get(row, 0) != count:
                    self._add(DEPENDENCIES, row, count)
            if wanted:
                self._dependencies[object_id] = wanted

    def object_dropped(self, object_id: str) -> None:
        """Every replica's rows of ``object_id`` are retracted; its open episodes end dropped."""
        for row, count in self._dependencies.pop(object_id, {}).items():
            self._add(DEPENDENCIES, row, -count)
        keys = {k for cid in PER_REPLICA_OBJECT for k in self._held[cid] if k[1] == object_id}
        for key in keys:
            self._retract_key(key)
        for ident in [i for i in self._objects if i[2] == object_id]:
            self._end_object(ident, DROPPED)
        self._objects_ended = {i for i in self._objects_ended if i[2] != object_id}
        for replica_id in list(self._replicas):
            self._refresh(replica_id)

    def sweep_orphans(self, known_objects: Callable[[], Iterable[str]]) -> list[str]:
        """Once ``orphan_grace`` after a start that read rows back: retract rows of objects
        not in ``known_objects()`` (dropped while no controller ran). The objects retracted."""
        if self._loaded_at is None or time.monotonic() - self._loaded_at < self.orphan_grace:
            return []
        self._loaded_at = None
        known = set(known_objects())
        held = {k[1] for cid in PER_REPLICA_OBJECT for k in self._held[cid]}
        gone = sorted((held | set(self._dependencies)) - known)
        for object_id in gone:
            self.object_dropped(object_id)
        if gone:
            log.info("hydration rows of objects dropped earlier retracted", objects=gone)
        return gone


def _finished_at(message: compute_pb2.Hydration, clock: Callable[[], dt.datetime]) -> dt.datetime:
    """When the dataflow hydrated: installation plus hydration time, as the replica says."""
    if message.installed_at_ms and message.HasField("hydration_time_ns"):
        return _from_ms(message.installed_at_ms) + dt.timedelta(
            microseconds=message.hydration_time_ns // 1000
        )
    return clock()


def one_shot_peek(dataflow: plan_pb2.DataflowDescription) -> bool:
    """The coordinator's one-shot peeks: ``transient <id>``, an index export, no sink."""
    return dataflow.debug_name.startswith("transient ") and not dataflow.sink_exports
