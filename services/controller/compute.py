"""The compute controller: replica lifecycle, the controller's side of the compute protocol, peeks.

Directions
    Commands go out on ``loupe.compute.v1.<replica_id>.command``; responses
    come in on ``loupe.compute.v1.<replica_id>.response`` (one subscription
    per replica). Both are core NATS: nothing is stored or replayed by the bus.
    Replicas' logs come on ``loupe.compute.v1.<replica_id>.introspection``,
    a subject of its own with a bounded queue per replica (``introspection.py``):
    a flood there never delays responses. A cluster's ``LoggingConfig``
    changing in the catalog reaches its running replicas as
    ``UpdateConfiguration.logging``.

Ordering
    Commands to a replica are published from one connection and arrive in
    order: ``CreateInstance``, the command history, ``InitializationComplete``,
    then ``Peek`` before its ``CancelPeek``. Responses of one replica arrive in
    the order it sent them; responses of different replicas interleave.

Stages (per incarnation)
    0. Hello: the controller waits for a ``Hello`` of the replica's current
       incarnation (the replica repeats it until created).
    1. Creation: it answers with ``CreateInstance`` carrying that replica's
       own ``LoggingConfig`` (from its cluster's introspection interval and
       debugging flag) and where storage lives.
    2. Initialization: it replays the compacted command history, then sends
       ``InitializationComplete``. A new incarnation is brought up the same
       way (reconciliation by replay). A repeated ``Hello`` of the same
       incarnation (the first ``CreateInstance`` was lost) is answered again,
       at most once per ``hello_resend_interval``.
    3. Computation: ``Peek`` and ``CancelPeek``; ``CreateDataflow`` (then
       ``Schedule``) and ``AllowCompaction`` to every created replica of the
       cluster, recorded in the cluster's ``CommandHistory`` (``history.py``)
       first; the replica heartbeats and reports ``Frontiers``, ``Hydration``,
       ``CollectionError`` and ``SubscribeBatch`` (``collections.py``).

Promises of the controller
    - Every command carries the incarnation it is meant for, and
      ``CreateInstance`` is the first command an incarnation receives.
    - Zombie fencing: the current incarnation of a replica is the one its
      orchestrator last started. Responses of any other incarnation, of a
      replica that is not (or no longer) managed, or of an incarnation the
      controller is replacing are dropped, counted in
      ``loupe_controller_stale_responses_total`` and change nothing.
    - A replica is ``online`` from the first heartbeat of its current
      incarnation; it goes ``offline`` when its process exits (reason
      ``exited``, ``killed`` or ``oom-killed``) or when the liveness rules
      (``liveness.py``) restart it after its heartbeats stopped (reason
      ``heartbeat-timeout``; a busy replica is not restarted, a stopped one is);
      ``controller-stopped`` when the controller stops it at shutdown,
      ``restarted`` when it is replaced on purpose. Every offline row has a
      reason; a new replica has no row until it is first online or gone.
    - A peek goes to every online replica of the cluster (or the one named);
      the first rows win (an error answer waits for the other targets, see
      ``peeks.py``) and every other target gets ``CancelPeek``. A peek has
      no deadline: with no online replica (none yet, every target crashed,
      timed out its heartbeats or canceled) it waits, and goes to each
      replica of its cluster that comes online. A peek gets exactly one
      answer: the winning response, ``canceled`` after ``cancel_peek``, or
      an error when what it reads is gone for good: its cluster, its pinned
      replica or its index was dropped (42704, in Materialize's words:
      ``query could not complete because cluster "c" was dropped``).
    - A ``PeekResponse`` after the peek was decided is dropped.
    - Every replica of a cluster sees the same commands in the same order:
      the history replay and every later command to the cluster go out
      under one lock, so a command is either in a replica's replay or sent
      to it after (a duplicate ``CreateDataflow`` is ignored by the replica).
    - ``CreateDataflow`` is idempotent by dataflow id.

Status and metrics rows are written through ``status.ReplicaStatusTables``;
hydration (current statuses, progress, times, dependencies and the hydration
histories) through ``hydration.HydrationTables``, fed only fenced responses
and the incarnations' starts and ends; peeks are raced by ``peeks.PeekRouter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter, Gauge

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.transport import publish, subscribe
from loupe.controller.collections import ReplicaReports, SubscribeRelay
from loupe.controller.history import CommandHistory, export_ids
from loupe.controller.hydration import DataflowInfo, HydrationTables, one_shot_peek
from loupe.controller.introspection import IntrospectionIngest
from loupe.controller.liveness import (
    LOOP_STALLED,
    REPLICA_RESTARTS,
    LivenessPolicy,
    Silence,
)
from loupe.controller.orchestrators.base import Orchestrator, ReplicaEvent, ReplicaSpec
from loupe.controller.peek_routes import PeekRoutePublisher, Route
from loupe.controller.peeks import PeekRouter
from loupe.controller.status import (
    OFFLINE,
    ONLINE,
    ReplicaMetrics,
    ReplicaStatus,
    ReplicaStatusTables,
    StagingWriter,
)
from loupe.introspection.logs import index_logs
from loupe.proto.compute.v1 import compute_pb2, plan_pb2

log = get_logger(__name__)

SUBJECT_PREFIX = "loupe.compute.v1"
HEARTBEAT_TIMEOUT_REASON = "heartbeat-timeout"
# A replica's status while the controller shuts down (it stops its replicas).
SHUTDOWN_REASON = "controller-stopped"
# Replaced on purpose by a new incarnation (its spec changed).
RESTARTED_REASON = "restarted"
DEFAULT_INTROSPECTION_INTERVAL_NS = 1_000_000_000

STALE_RESPONSES = Counter(
    "loupe_controller_stale_responses",
    "Compute responses dropped because they came from a stale or unknown incarnation",
    ["replica_id"],
)
REPLICA_ONLINE = Gauge(
    "loupe_controller_replica_online",
    "1 while a replica's current incarnation is online, else 0",
    ["replica_id"],
)
REPLICA_OFFLINE_EVENTS = Counter(
    "loupe_controller_replica_offline",
    "Times a replica went offline, by reason",
    ["replica_id", "reason"],
)


def command_subject(replica_id: str) -> str:
    return f"{SUBJECT_PREFIX}.{replica_id}.command"


def response_subject(replica_id: str) -> str:
    return f"{SUBJECT_PREFIX}.{replica_id}.response"


@dataclass(frozen=True)
class ClusterInfo:
    """What the compute controller needs to know about a cluster."""

    id: str
    name: str
    introspection_interval_ns: int = DEFAULT_INTROSPECTION_INTERVAL_NS
    introspection_debugging: bool = False


@dataclass
class _Replica:
    """The controller's view of one replica and its current incarnation."""

    spec: ReplicaSpec
    subscription: Subscription | None = None
    incarnation: int = 0
    # The current incarnation's process runs (between started and exited).
    alive: bool = False
    # A restart was requested; responses of this incarnation no longer count.
    replacing: bool = False
    started_at: float = 0.0
    last_heartbeat: float | None = None
    created_at: float | None = None
    # What liveness learned since the last heartbeat (reset by every heartbeat).
    silence: Silence = field(default_factory=Silence)
    # A restart for silence waits for its window (logged once per silence).
    deferred: bool = False


@dataclass(frozen=True)
class CollectionFrontiers:
    """A compute collection's frontiers: overall, held since, and per replica."""

    collection_id: str
    write_frontier: int
    since: int
    replicas: dict[str, int]


class ComputeController:
    """Runs every cluster's replicas through an orchestrator and speaks the compute protocol."""

    def __init__(
        self,
        nc: NatsConnection,
        orchestrator: Orchestrator,
        writer: StagingWriter,
        *,
        blob_uri: str,
        consensus_uri: str,
        heartbeat_timeout: float = 5.0,
        startup_timeout: float = 30.0,
        busy_timeout: float = 60.0,
        hello_resend_interval: float = 1.0,
        metrics_history_interval: float = 10.0,
        metrics_interval: float = 5.0,
        hydration_write_interval: float = 0.25,
        hydration_orphan_grace: float = 60.0,
        boot_id: str = "",
    ) -> None:
        self._nc = nc
        self._orchestrator = orchestrator
        self.statuses = ReplicaStatusTables(
            writer,
            metrics_history_interval=metrics_history_interval,
            metrics_interval=metrics_interval,
        )
        self.blob_uri = blob_uri
        self.consensus_uri = consensus_uri
        self.liveness = LivenessPolicy(heartbeat_timeout, startup_timeout, busy_timeout)
        self.heartbeat_timeout = heartbeat_timeout
        self.startup_timeout = self.liveness.startup_timeout
        self.hello_resend_interval = hello_resend_interval
        self.peeks = PeekRouter(self._send)
        # The online replicas, for coordinators that peek them directly.
        self.peek_routes = PeekRoutePublisher(nc, self._peek_routes, boot_id)
        self.reports = ReplicaReports()
        self.subscribes = SubscribeRelay(self._publish_subscribe_batch)
        # Replicas' introspection into mz_internal (``introspection.py``).
        self.introspection = IntrospectionIngest(
            nc,
            writer,
            current_incarnation=self._current_incarnation,
            request_snapshot=self._request_introspection_snapshot,
        )
        self._histories: dict[str, CommandHistory] = {}
        # cluster id -> (its history, that history's version, its dataflows' infos).
        self._hydration_cache: dict[str, tuple[CommandHistory, int, dict[str, DataflowInfo]]] = {}
        # Replicas' hydration into mz_internal (``hydration.py``).
        self.hydration = HydrationTables(
            writer,
            dataflows_of=self._hydration_dataflows,
            write_interval=hydration_write_interval,
            orphan_grace=hydration_orphan_grace,
        )
        # Held while a replay or a command to a cluster goes out: see the promises.
        self._command_lock = asyncio.Lock()
        # Responses dropped by zombie fencing, for tests and logs.
        self.stale_responses = 0
        self._clusters: dict[str, ClusterInfo] = {}
        # The catalog was applied once: a cluster not known since is dropped.
        self._applied = False
        self._replicas: dict[str, _Replica] = {}
        self._apply_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        # The replicas silent at the last check (logged when most are, once per change).
        self._herd: frozenset[str] = frozenset()
        self._disconnected = False
        orchestrator.add_listener(self._on_replica_event)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Load the status rows a previous run left and start watching heartbeats."""
        await self.statuses.load()
        await self.hydration.load()
        self.hydration.start()
        await self._orchestrator.start()
        self._watchdog = asyncio.create_task(self._watch_heartbeats(), name="heartbeat-watchdog")
        await self.peek_routes.start()

    async def stop(self) -> None:
        """Stop every replica; statuses say ``offline`` (controller-stopped). Idempotent."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        await self.peek_routes.stop()
        replicas = list(self._replicas.values())
        self._replicas.clear()
        # Its rows stay: the next controller reads them back and carries on.
        await self.introspection.stop()
        try:
            for replica in replicas:
                await self._unsubscribe(replica)
                self._set_status(replica, OFFLINE, SHUTDOWN_REASON)
                # Its replicas stop with it: their open hydration episodes end here.
                self.hydration.incarnation_ended(replica.spec.replica_id)
                _forget_gauge(replica.spec.replica_id)
            await self.hydration.stop()
            self.peeks.fail_all(LoupeError("UNAVAILABLE", "the controller is shutting down"))
        except Exception:
            # The writer may be gone already; the replicas must stop regardless.
            log.exception("could not record the replicas' final statuses")
        finally:
            await self._orchestrator.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the set of replicas -----------------------------------------------------------

    async def apply(
        self, clusters: Iterable[ClusterInfo], replicas: Iterable[ReplicaSpec]
    ) -> tuple[list[str], list[str]]:
        """Converge on these clusters and replicas: start new ones, stop dropped ones.

        Idempotent. Returns the replica ids (started, stopped).
        """
        async with self._apply_lock:
            previous = self._clusters
            self._clusters = {c.id: c for c in clusters}
            self._applied = True
            await self._reconfigure_logging(previous)
            for cluster_id in set(previous) - set(self._clusters):
                # Dropped: its dataflows go with its replicas, its peeks end.
                history = self._histories.pop(cluster_id, None)
                for collection_id in history.collections() if history else ():
                    self.hydration.object_dropped(collection_id)
                self.peeks.fail_cluster(cluster_id, dropped("cluster", previous[cluster_id].name))
            desired = {spec.replica_id: spec for spec in replicas}
            stopped = [rid for rid in self._replicas if rid not in desired]
            for replica_id in stopped:
                await self._drop_replica(replica_id)
            started = []
            for spec in desired.values():
                current = self._replicas.get(spec.replica_id)
                if current is None:
                    started.append(spec.replica_id)
                if current is None or current.spec != spec:
                    await self._ensure_replica(spec)
            gone = self.statuses.remove_all_but(desired)
            if gone:
                log.info("retracted statuses of replicas dropped earlier", replicas=gone)
            self.hydration.retain(desired)
            self._spawn(self.introspection.retain(desired), "introspection-retain")
            return started, stopped

    async def _reconfigure_logging(self, previous: dict[str, ClusterInfo]) -> None:
        """Send a cluster's new ``LoggingConfig`` to its running replicas (ALTER CLUSTER
        ... SET (INTROSPECTION INTERVAL ...)); turned off, their introspection rows go."""
        for cluster_id, cluster in self._clusters.items():
            before = previous.get(cluster_id)
            if before is None or logging_config(before) == logging_config(cluster):
                continue
            config = logging_config(cluster)
            log.info(
                "cluster introspection changed",
                cluster_id=cluster_id,
                interval_ns=config.interval_ns,
                debugging=config.log_logging,
            )
            for replica_id, replica in self._replicas.items():
                if replica.spec.cluster_id != cluster_id:
                    continue
                if replica.created_at is not None and replica.alive and not replica.replacing:
                    update = compute_pb2.UpdateConfiguration(logging=config)
                    await self._send(
                        replica_id,
                        replica.incarnation,
                        compute_pb2.ComputeCommand(update_configuration=update),
                    )
                if not config.enable_logging:
                    await self.introspection.unwatch(replica_id, retract=True)
                    await self.introspection.watch(replica_id)

    async def _ensure_replica(self, spec: ReplicaSpec) -> None:
        replica = self._replicas.get(spec.replica_id)
        if replica is None:
            replica = _Replica(spec)
            self._replicas[spec.replica_id] = replica
            replica.subscription = await subscribe(
                self._nc,
                response_subject(spec.replica_id),
                compute_pb2.ComputeResponse,
                self._response_handler(spec.replica_id),
            )
            await self.introspection.watch(spec.replica_id)
            # The subscriptions must be in place before the replica can say hello.
            await self._nc.flush()
        replica.spec = spec
        await self._orchestrator.ensure_replica(spec)

    async def _drop_replica(self, replica_id: str) -> None:
        replica = self._replicas.pop(replica_id, None)
        if replica is None:
            return
        await self._unsubscribe(replica)
        await self.introspection.unwatch(replica_id, retract=True)
        self.reports.forget_replica(replica_id)
        self.hydration.replica_dropped(replica_id)
        self.peeks.fail_pinned(replica_id, dropped("cluster replica", replica_id))
        self.peeks.forget_replica(replica_id, f"replica {replica_id} was dropped")
        await self._orchestrator.drop_replica(replica_id)
        self.statuses.remove(replica_id)
        _forget_gauge(replica_id)
        log.info("replica dropped", replica_id=replica_id)

    async def _unsubscribe(self, replica: _Replica) -> None:
        if replica.subscription is not None:
            with contextlib.suppress(Exception):
                await replica.subscription.unsubscribe()
            replica.subscription = None

    # -- what the rest of the controller asks --------------------------------------------

    def replica_status(self, replica_id: str) -> ReplicaStatus | None:
        return self.statuses.current(replica_id)

    def replica_incarnation(self, replica_id: str) -> int:
        replica = self._replicas.get(replica_id)
        return replica.incarnation if replica else 0

    def online_replicas(self, cluster_id: str) -> list[str]:
        return sorted(
            rid
            for rid, replica in self._replicas.items()
            if replica.spec.cluster_id == cluster_id and self._is_online(replica)
        )

    def _peek_routes(self) -> list[Route]:
        return [
            (replica.spec.cluster_id, rid, replica.incarnation)
            for rid, replica in self._replicas.items()
            if self._is_online(replica)
        ]

    def _current_incarnation(self, replica_id: str) -> int | None:
        """The incarnation whose introspection counts now (zombie fencing), or None."""
        replica = self._replicas.get(replica_id)
        if replica is None or not replica.alive or replica.replacing:
            return None
        cluster = self._clusters.get(replica.spec.cluster_id)
        if cluster is not None and cluster.introspection_interval_ns <= 0:
            return None  # logging off: what is still in flight is not applied
        return replica.incarnation

    async def _request_introspection_snapshot(self, replica_id: str, incarnation: int) -> None:
        update = compute_pb2.UpdateConfiguration(introspection_snapshot=True)
        await self._send(
            replica_id, incarnation, compute_pb2.ComputeCommand(update_configuration=update)
        )

    def replica_ids(self) -> list[str]:
        return sorted(self._replicas)

    def cluster_name(self, cluster_id: str) -> str:
        cluster = self._clusters.get(cluster_id)
        return cluster.name if cluster else cluster_id

    def _is_online(self, replica: _Replica) -> bool:
        status = self.statuses.current(replica.spec.replica_id)
        return (
            status is not None
            and status.status == ONLINE
            and status.incarnation == replica.incarnation
            and replica.alive
            and not replica.replacing
        )

    # -- orchestrator events --------------------------------------------------------------

    def _on_replica_event(self, event: ReplicaEvent) -> None:
        replica = self._replicas.get(event.replica_id)
        if replica is None:
            return  # dropped: its exit is expected and reported nowhere
        if event.kind == "started":
            if event.incarnation <= replica.incarnation:
                log.warning(
                    "incarnation did not increase", event=event, current=replica.incarnation
                )
                return
            replica.incarnation = event.incarnation
            replica.alive = True
            replica.replacing = False
            replica.started_at = time.monotonic()
            replica.last_heartbeat = None
            replica.created_at = None
            replica.silence, replica.deferred = Silence(), False
            # The new incarnation starts from nothing and reports afresh.
            self.reports.forget_replica(event.replica_id)
            self.hydration.incarnation_started(
                event.replica_id, replica.spec.cluster_id, event.incarnation
            )
            # No status yet: a replica's row says what is known (online from
            # its first heartbeat, offline with the reason it went away).
            return
        if event.incarnation != replica.incarnation:
            return
        replica.alive = False
        # Its frontiers no longer say what some replica can answer now.
        self.reports.forget_replica(event.replica_id)
        self.hydration.incarnation_ended(event.replica_id, event.incarnation)
        self.peeks.forget_replica(
            event.replica_id, f"replica {event.replica_id} went away ({event.describe()})"
        )
        if not event.requested and event.reason:
            REPLICA_RESTARTS.labels(reason=event.reason).inc()  # the orchestrator restarts it
        if event.requested:
            # Stopped on purpose: either the reason is recorded already
            # (heartbeat-timeout) or the replica is being replaced (new spec).
            current = self.statuses.current(event.replica_id)
            if current is not None and current.status == ONLINE:
                self._set_status(replica, OFFLINE, RESTARTED_REASON)
            return
        self._set_status(replica, OFFLINE, event.reason)

    def _set_status(self, replica: _Replica, status: str, reason: str | None) -> None:
        replica_id = replica.spec.replica_id
        changed = self.statuses.set_status(replica_id, status, reason, replica.incarnation)
        if changed is None:
            return
        self.peek_routes.changed()
        REPLICA_ONLINE.labels(replica_id=replica_id).set(1 if status == ONLINE else 0)
        if status == OFFLINE and reason:
            REPLICA_OFFLINE_EVENTS.labels(replica_id=replica_id, reason=reason).inc()

    # -- responses ---------------------------------------------------------------------------

    def _response_handler(self, replica_id: str) -> Any:
        async def handle(response: compute_pb2.ComputeResponse, _msg: Msg) -> None:
            await self._on_response(replica_id, response)

        return handle

    async def _on_response(self, replica_id: str, response: compute_pb2.ComputeResponse) -> None:
        replica = self._replicas.get(replica_id)
        kind = response.WhichOneof("kind")
        if (
            replica is None
            or response.replica_id != replica_id
            or response.incarnation != replica.incarnation
            or not replica.alive
            or replica.replacing
        ):
            self.stale_responses += 1
            STALE_RESPONSES.labels(replica_id=replica_id).inc()
            log.debug(
                "stale response dropped",
                replica_id=replica_id,
                sender=response.replica_id,
                incarnation=response.incarnation,
                current=replica.incarnation if replica else None,
                kind=kind,
            )
            return
        if kind == "hello":
            await self._create_instance(replica)
        elif kind == "heartbeat":
            await self._on_heartbeat(replica, response.heartbeat)
        elif kind == "peek_response":
            await self.peeks.on_response(replica_id, replica.incarnation, response.peek_response)
        elif kind == "frontiers":
            self.reports.on_frontiers(replica_id, response.frontiers)
        elif kind == "hydration":
            self.reports.on_hydration(replica_id, response.hydration)
            self.hydration.on_hydration(
                replica_id, replica.spec.cluster_id, replica.incarnation, response.hydration
            )
        elif kind == "collection_error":
            self.reports.on_error(replica_id, response.collection_error)
        elif kind == "subscribe_batch":
            await self.subscribes.on_batch(response.subscribe_batch)
        else:
            log.debug("response ignored", replica_id=replica_id, kind=kind)

    async def _create_instance(self, replica: _Replica) -> None:
        now = time.monotonic()
        if replica.created_at is not None and now - replica.created_at < self.hello_resend_interval:
            return
        replica.created_at = now
        spec = replica.spec
        cluster = self._clusters.get(spec.cluster_id) or ClusterInfo(
            spec.cluster_id, spec.cluster_id
        )
        create = compute_pb2.CreateInstance(
            replica_id=spec.replica_id,
            cluster_id=spec.cluster_id,
            incarnation=replica.incarnation,
            workers=spec.workers,
            memory_limit_bytes=spec.memory_limit_bytes,
            logging=logging_config(cluster),
            blob_uri=self.blob_uri,
            consensus_uri=self.consensus_uri,
        )
        async with self._command_lock:
            commands = [
                compute_pb2.ComputeCommand(create_instance=create),
                *self.history(spec.cluster_id).commands(),
                compute_pb2.ComputeCommand(
                    initialization_complete=compute_pb2.InitializationComplete()
                ),
            ]
            for command in commands:
                await self._send(replica.spec.replica_id, replica.incarnation, command)
        log.info(
            "instance created",
            replica_id=spec.replica_id,
            incarnation=replica.incarnation,
            history=len(commands) - 2,
        )

    async def _on_heartbeat(self, replica: _Replica, heartbeat: compute_pb2.Heartbeat) -> None:
        replica.last_heartbeat = time.monotonic()
        replica.silence, replica.deferred = Silence(), False
        if self.liveness.wedged(heartbeat.loop_lag_ms):
            self._replace_hung(replica, LOOP_STALLED, loop_lag_ms=heartbeat.loop_lag_ms)
            return
        was_online = self._is_online(replica)
        self._set_status(replica, ONLINE, None)
        self.hydration.on_heartbeat(
            replica.spec.replica_id, replica.incarnation, heartbeat.memory_bytes
        )
        self.statuses.set_metrics(
            replica.spec.replica_id,
            ReplicaMetrics(heartbeat.cpu_nano_cores, heartbeat.memory_bytes, heartbeat.disk_bytes),
        )
        if not was_online and self._is_online(replica):
            # Peeks waiting for a replica (or racing the others) get this one too.
            await self.peeks.offer(
                replica.spec.cluster_id, replica.spec.replica_id, replica.incarnation
            )

    async def _send(
        self, replica_id: str, incarnation: int, command: compute_pb2.ComputeCommand
    ) -> None:
        command.incarnation = incarnation
        await publish(self._nc, command_subject(replica_id), command)

    # -- heartbeats ------------------------------------------------------------------------------

    async def _watch_heartbeats(self) -> None:
        """Apply the liveness rules (``liveness.py``) every check interval."""
        interval = self.liveness.check_interval
        while True:
            asked = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            unseen = self.liveness.stalled_for(interval, now - asked)
            if not self._nc.is_connected:
                unseen = now - asked  # heartbeats cannot reach a disconnected controller
            if unseen:
                self._forgive_silence(unseen)
            else:
                self._disconnected = False
                self._check_silent(now)
            await self.peeks.expire(now)
            self.hydration.sweep_orphans(self.known_objects)

    def _forgive_silence(self, seconds: float) -> None:
        """Time the controller could not hear heartbeats does not count against replicas."""
        connected = self._nc.is_connected
        if connected or not self._disconnected:  # a lost connection is logged once
            log.warning(
                "controller_not_listening_silence_forgiven",
                seconds=round(seconds, 3),
                connected=connected,
            )
        self._disconnected = not connected
        for replica in self._replicas.values():
            replica.started_at += seconds
            if replica.last_heartbeat is not None:
                replica.last_heartbeat += seconds
            replica.silence = Silence()

    def _check_silent(self, now: float) -> None:
        watched = [r for r in self._replicas.values() if r.alive and not r.replacing]
        silent = sorted(
            ((self._silent_for(r, now), r) for r in watched if self._is_silent(r, now)),
            key=lambda pair: -pair[0],
        )
        herd = frozenset(r.spec.replica_id for _, r in silent)
        if len(herd) >= 2 and 2 * len(herd) >= len(watched) and herd != self._herd:
            log.warning(
                "most_replicas_silent_at_once",
                silent=sorted(herd),
                replicas=len(watched),
                hint="the machine, NATS or the controller is slow: one restart per window",
            )
        self._herd = herd
        for silent_for, replica in silent:
            replica_id = replica.spec.replica_id
            started = replica.last_heartbeat is not None
            probe = self._orchestrator.probe(replica_id)
            reason = self.liveness.verdict(replica.silence, silent_for, started, probe, now)
            if reason is None:
                continue
            if not self.liveness.may_restart(reason, now):
                if not replica.deferred:
                    replica.deferred = True
                    log.warning(
                        "replica_restart_deferred",
                        replica_id=replica_id,
                        reason=reason,
                        silent_for=round(silent_for, 3),
                        window=self.heartbeat_timeout,
                    )
                continue
            self._replace_hung(
                replica,
                reason,
                silent_for=round(silent_for, 3),
                probe=probe.state,
                cpu_share=replica.silence.cpu_share,
            )

    def _silent_for(self, replica: _Replica, now: float) -> float:
        heard = replica.last_heartbeat
        return now - (replica.started_at if heard is None else heard)

    def _is_silent(self, replica: _Replica, now: float) -> bool:
        heard = replica.last_heartbeat is not None
        limit = self.heartbeat_timeout if heard else self.startup_timeout
        return self._silent_for(replica, now) > limit

    def _replace_hung(self, replica: _Replica, reason: str, **context: Any) -> None:
        """Restart a replica the liveness rules gave up on; its status says heartbeat-timeout."""
        replica_id = replica.spec.replica_id
        log.warning(
            "replica_restarted_by_liveness",
            replica_id=replica_id,
            incarnation=replica.incarnation,
            reason=reason,
            timeout=self.heartbeat_timeout,
            **context,
        )
        REPLICA_RESTARTS.labels(reason=reason).inc()
        replica.replacing = True
        self.reports.forget_replica(replica_id)
        self.hydration.incarnation_ended(replica_id, replica.incarnation)
        self._set_status(replica, OFFLINE, HEARTBEAT_TIMEOUT_REASON)
        self.peeks.forget_replica(replica_id, f"replica {replica_id} stopped heartbeating")
        self._spawn(self._orchestrator.restart_replica(replica_id), f"restart-{replica_id}")

    def _spawn(self, coroutine: Any, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- dataflows -----------------------------------------------------------------------------

    def _hydration_dataflows(self, cluster_id: str) -> dict[str, DataflowInfo]:
        """The cluster's dataflows as the hydration tables see them."""
        history = self._histories.get(cluster_id)
        if history is None:
            return {}
        cached = self._hydration_cache.get(cluster_id)
        if cached is not None and cached[0] is history and cached[1] == history.version:
            return cached[2]
        infos = {
            dataflow_id: DataflowInfo(tuple(exports), one_shot_peek(description))
            for dataflow_id, (description, exports) in history.dataflows().items()
        }
        self._hydration_cache[cluster_id] = (history, history.version, infos)
        return infos

    def known_objects(self) -> set[str]:
        """Every compute collection of every cluster."""
        return {c for history in self._histories.values() for c in history.collections()}

    def history(self, cluster_id: str) -> CommandHistory:
        """The command history of ``cluster_id`` (made on first use)."""
        return self._histories.setdefault(cluster_id, CommandHistory())

    async def create_dataflow(
        self, cluster_id: str, dataflow: plan_pb2.DataflowDescription
    ) -> bool:
        """Install ``dataflow`` on every replica of the cluster, now and later; False if known."""
        if not dataflow.id:
            raise LoupeError("INVALID_ARGUMENT", "a dataflow needs an id")
        if not export_ids(dataflow):
            raise LoupeError("INVALID_ARGUMENT", f"dataflow {dataflow.id} exports nothing")
        if not self.history(cluster_id).create_dataflow(dataflow):
            return False
        self.hydration.dataflow_created(dataflow)
        for sink in dataflow.sink_exports:
            if sink.HasField("subscribe"):
                self.subscribes.open(sink.sink_id)
        await self._broadcast(
            cluster_id,
            compute_pb2.ComputeCommand(
                create_dataflow=compute_pb2.CreateDataflow(dataflow=dataflow)
            ),
            compute_pb2.ComputeCommand(schedule=compute_pb2.Schedule(id=dataflow.id)),
        )
        log.info(
            "dataflow created",
            cluster_id=cluster_id,
            dataflow_id=dataflow.id,
            name=dataflow.debug_name,
            as_of=dataflow.as_of,
        )
        return True

    async def allow_compaction(
        self, cluster_id: str, collection_ids: Iterable[str], since: int, empty: bool
    ) -> None:
        """Let replicas compact these collections to ``since``; ``empty`` drops them."""
        if cluster_id not in self._histories:
            return  # nothing created there (or its cluster was dropped with its dataflows)
        history = self.history(cluster_id)
        commands = []
        for collection_id in collection_ids:
            dataflow_id = history.dataflow_of(collection_id)
            if not history.allow_compaction(collection_id, since, empty):
                continue
            if empty:
                gone = dataflow_id if not history.has_dataflow(dataflow_id or "") else None
                self.reports.forget_collection(collection_id, gone)
                self.hydration.object_dropped(collection_id)
                self.subscribes.close(collection_id)
                # Nothing will make it readable again: peeks waiting on it end.
                self.peeks.fail_target(cluster_id, collection_id, dropped("index", collection_id))
            commands.append(
                compute_pb2.ComputeCommand(
                    allow_compaction=compute_pb2.AllowCompaction(
                        collection_id=collection_id, since=since, empty=empty
                    )
                )
            )
        await self._broadcast(cluster_id, *commands)

    def list_frontiers(
        self, cluster_id: str, collection_ids: Iterable[str] = ()
    ) -> list[CollectionFrontiers]:
        """Frontiers of the cluster's compute collections (all of them if none are named)."""
        history = self.history(cluster_id)
        return [
            CollectionFrontiers(
                collection_id,
                self.reports.write_frontier(collection_id),
                history.since(collection_id) or 0,
                self.reports.replica_frontiers(collection_id),
            )
            for collection_id in self._collections(cluster_id, collection_ids)
        ]

    def collection_status(
        self, cluster_id: str, collection_ids: Iterable[str] = ()
    ) -> list[tuple[str, Any, list[compute_pb2.Hydration]]]:
        """(collection id, its error or None, its dataflow's hydration per replica)."""
        history = self.history(cluster_id)
        found = []
        for collection_id in self._collections(cluster_id, collection_ids):
            dataflow_id = history.dataflow_of(collection_id) or ""
            found.append(
                (
                    collection_id,
                    self.reports.error(collection_id),
                    self.reports.hydration_of(dataflow_id),
                )
            )
        return found

    def _collections(self, cluster_id: str, collection_ids: Iterable[str]) -> list[str]:
        known = self.history(cluster_id).collections()
        wanted = list(collection_ids)
        if not wanted:
            return known
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise LoupeError(
                "NOT_FOUND",
                f"cluster '{self.cluster_name(cluster_id)}' has no compute collection"
                f" {', '.join(unknown)}",
            )
        return wanted

    async def _broadcast(self, cluster_id: str, *commands: compute_pb2.ComputeCommand) -> None:
        """Send ``commands`` to every replica of the cluster that has its history already."""
        async with self._command_lock:
            for replica in list(self._replicas.values()):
                if (
                    replica.spec.cluster_id != cluster_id
                    or replica.created_at is None
                    or not replica.alive
                    or replica.replacing
                ):
                    continue
                for command in commands:
                    sent = compute_pb2.ComputeCommand()
                    sent.CopyFrom(command)
                    await self._send(replica.spec.replica_id, replica.incarnation, sent)

    async def _publish_subscribe_batch(
        self, subject: str, batch: compute_pb2.SubscribeBatch
    ) -> None:
        await publish(self._nc, subject, batch)

    # -- peeks ---------------------------------------------------------------------------------

    async def peek(
        self,
        cluster_id: str,
        peek: compute_pb2.Peek,
        *,
        replica_id: str = "",
        wait: float | None = None,
    ) -> compute_pb2.PeekResponse:
        """Run ``peek`` on the cluster's online replicas (or one); the first answer wins.

        It waits for a replica when none is online. ``wait`` bounds this call,
        not the peek: ``DEADLINE_EXCEEDED`` then says what it waits for, and
        the same peek (uuid) asked again keeps waiting (``peeks.py``).
        """
        if self._applied and cluster_id not in self._clusters:
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT,
                f"query could not complete because cluster {cluster_id} does not exist",
            )
        name = self.cluster_name(cluster_id)
        # The controller routes it: every answer comes back here (``Peek.direct`` is a
        # coordinator's own peek, answered to it alone).
        peek.direct = False
        if peek.target_id and peek.uuid not in self.peeks:
            self._check_readable(cluster_id, peek.target_id, peek.timestamp)
        if replica_id:
            replica = self._replicas.get(replica_id)
            if replica is None or replica.spec.cluster_id != cluster_id:
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT,
                    f"query could not complete because cluster replica {replica_id}"
                    f" of cluster '{name}' does not exist",
                )
            candidates = [replica] if self._is_online(replica) else []
        else:
            candidates = [self._replicas[rid] for rid in self.online_replicas(cluster_id)]
        targets = {r.spec.replica_id: r.incarnation for r in candidates}
        return await self.peeks.run(
            cluster_id, name, targets, peek, replica_id=replica_id, wait=wait
        )

    def _check_readable(self, cluster_id: str, target_id: str, timestamp: int) -> None:
        since = self.history(cluster_id).since(target_id)
        if since is None:
            raise LoupeError(
                "NOT_FOUND",
                f"cluster '{self.cluster_name(cluster_id)}' has no index {target_id}",
            )
        if timestamp and timestamp < since:
            raise LoupeError(
                SqlState.INTERNAL_ERROR,
                f"Timestamp ({timestamp}) is not valid for all inputs: {target_id} since {since}",
                hint=f"Read AS OF {since} or later.",
            )

    async def cancel_peek(self, peek_uuid: str) -> bool:
        """Cancel a running peek: its caller gets ``canceled``. False if it was not running."""
        return await self.peeks.cancel(peek_uuid)


def dropped(kind: str, name: str) -> LoupeError:
    """What a peek fails with when ``kind`` ``name`` it reads was dropped while it waited.

    Materialize's words and code for a dependency dropped under a running
    query (``ConcurrentDependencyDrop``: 42704).
    """
    return LoupeError(
        SqlState.UNDEFINED_OBJECT, f'query could not complete because {kind} "{name}" was dropped'
    )


def _forget_gauge(replica_id: str) -> None:
    with contextlib.suppress(KeyError):
        REPLICA_ONLINE.remove(replica_id)


def logging_config(cluster: ClusterInfo) -> compute_pb2.LoggingConfig:
    """The ``LoggingConfig`` for a replica of ``cluster``.

    ``index_logs`` names the log ids the replica keeps (and replica-targeted
    reads import); ``sink_logs`` stays empty: the replica persists nothing
    itself, the controller writes what it publishes (``introspection.py``).
    """
    interval = cluster.introspection_interval_ns
    return compute_pb2.LoggingConfig(
        interval_ns=interval,
        enable_logging=interval > 0,
        log_logging=cluster.introspection_debugging,
        index_logs=index_logs(cluster.introspection_debugging) if interval > 0 else {},
    )
