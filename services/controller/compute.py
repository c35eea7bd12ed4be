"""The compute controller: replica lifecycle, the controller's side of the compute protocol, peeks.

Directions
    Commands go out on ``loupe.compute.v1.<replica_id>.command``; responses
    come in on ``loupe.compute.v1.<replica_id>.response`` (one subscription
    per replica). Both are core NATS: nothing is stored or replayed by the bus.

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
    3. Computation: ``Peek`` and ``CancelPeek``; the replica heartbeats.

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
      ``exited``, ``killed`` or ``oom-killed``) or when no heartbeat came for
      ``heartbeat_timeout`` (reason ``heartbeat-timeout``, and it is restarted);
      ``controller-stopped`` when the controller stops it at shutdown,
      ``restarted`` when it is replaced on purpose. Every offline row has a
      reason; a new replica has no row until it is first online or gone.
    - A peek goes to every online replica of the cluster (or the one named);
      the first ``PeekResponse`` wins and every other target gets
      ``CancelPeek``. A caller gets exactly one answer: the winning response,
      ``canceled`` after ``cancel_peek``, or an error (timeout; no online
      replica; every target went away).
    - A ``PeekResponse`` after the peek was decided is dropped.

Status and metrics rows are written through ``status.ReplicaStatusTables``;
peeks are raced by ``peeks.PeekRouter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import Counter, Gauge

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.transport import publish, subscribe
from loupe.controller.orchestrators.base import Orchestrator, ReplicaEvent, ReplicaSpec
from loupe.controller.peeks import PeekRouter
from loupe.controller.status import (
    OFFLINE,
    ONLINE,
    ReplicaMetrics,
    ReplicaStatus,
    ReplicaStatusTables,
    StagingWriter,
)
from loupe.proto.compute.v1 import compute_pb2

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


class CommandHistory:
    """The compacted commands a new incarnation replays after ``CreateInstance``.

    Empty for now: dataflows (the compute issue) are what it will hold. Peeks
    are not replayed; they are re-routed to the replicas that are online.
    """

    def __init__(self) -> None:
        self._commands: list[compute_pb2.ComputeCommand] = []

    def commands(self) -> list[compute_pb2.ComputeCommand]:
        return list(self._commands)


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
        hello_resend_interval: float = 1.0,
        metrics_history_interval: float = 10.0,
        default_peek_timeout: float = 30.0,
    ) -> None:
        self._nc = nc
        self._orchestrator = orchestrator
        self.statuses = ReplicaStatusTables(
            writer, metrics_history_interval=metrics_history_interval
        )
        self.blob_uri = blob_uri
        self.consensus_uri = consensus_uri
        self.heartbeat_timeout = heartbeat_timeout
        self.startup_timeout = max(startup_timeout, heartbeat_timeout)
        self.hello_resend_interval = hello_resend_interval
        self.peeks = PeekRouter(self._send, default_peek_timeout)
        self.history = CommandHistory()
        # Responses dropped by zombie fencing, for tests and logs.
        self.stale_responses = 0
        self._clusters: dict[str, ClusterInfo] = {}
        self._replicas: dict[str, _Replica] = {}
        self._apply_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        orchestrator.add_listener(self._on_replica_event)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Load the status rows a previous run left and start watching heartbeats."""
        await self.statuses.load()
        await self._orchestrator.start()
        self._watchdog = asyncio.create_task(self._watch_heartbeats(), name="heartbeat-watchdog")

    async def stop(self) -> None:
        """Stop every replica; statuses say ``offline`` (controller-stopped). Idempotent."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        replicas = list(self._replicas.values())
        self._replicas.clear()
        try:
            for replica in replicas:
                await self._unsubscribe(replica)
                self._set_status(replica, OFFLINE, SHUTDOWN_REASON)
                _forget_gauge(replica.spec.replica_id)
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
            self._clusters = {c.id: c for c in clusters}
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
            return started, stopped

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
            # The subscription must be in place before the replica can say hello.
            await self._nc.flush()
        replica.spec = spec
        await self._orchestrator.ensure_replica(spec)

    async def _drop_replica(self, replica_id: str) -> None:
        replica = self._replicas.pop(replica_id, None)
        if replica is None:
            return
        await self._unsubscribe(replica)
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
            # No status yet: a replica's row says what is known (online from
            # its first heartbeat, offline with the reason it went away).
            return
        if event.incarnation != replica.incarnation:
            return
        replica.alive = False
        self.peeks.forget_replica(
            event.replica_id, f"replica {event.replica_id} went away ({event.describe()})"
        )
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
            self._on_heartbeat(replica, response.heartbeat)
        elif kind == "peek_response":
            await self.peeks.on_response(replica_id, replica.incarnation, response.peek_response)
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
            logging=logging_config(cluster),
            blob_uri=self.blob_uri,
            consensus_uri=self.consensus_uri,
        )
        commands = [
            compute_pb2.ComputeCommand(create_instance=create),
            *self.history.commands(),
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

    def _on_heartbeat(self, replica: _Replica, heartbeat: compute_pb2.Heartbeat) -> None:
        replica.last_heartbeat = time.monotonic()
        self._set_status(replica, ONLINE, None)
        self.statuses.set_metrics(
            replica.spec.replica_id,
            ReplicaMetrics(heartbeat.cpu_nano_cores, heartbeat.memory_bytes, heartbeat.disk_bytes),
        )

    async def _send(
        self, replica_id: str, incarnation: int, command: compute_pb2.ComputeCommand
    ) -> None:
        command.incarnation = incarnation
        await publish(self._nc, command_subject(replica_id), command)

    # -- heartbeats ------------------------------------------------------------------------------

    async def _watch_heartbeats(self) -> None:
        interval = min(0.25, self.heartbeat_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for replica in list(self._replicas.values()):
                if not replica.alive or replica.replacing:
                    continue
                if replica.last_heartbeat is not None:
                    overdue = now - replica.last_heartbeat > self.heartbeat_timeout
                else:
                    overdue = now - replica.started_at > self.startup_timeout
                if overdue:
                    self._replace_hung(replica)

    def _replace_hung(self, replica: _Replica) -> None:
        replica_id = replica.spec.replica_id
        log.warning(
            "no heartbeat; restarting replica",
            replica_id=replica_id,
            incarnation=replica.incarnation,
            timeout=self.heartbeat_timeout,
        )
        replica.replacing = True
        self._set_status(replica, OFFLINE, HEARTBEAT_TIMEOUT_REASON)
        self.peeks.forget_replica(replica_id, f"replica {replica_id} stopped heartbeating")
        self._spawn(self._orchestrator.restart_replica(replica_id), f"restart-{replica_id}")

    def _spawn(self, coroutine: Any, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- peeks ---------------------------------------------------------------------------------

    async def peek(
        self,
        cluster_id: str,
        peek: compute_pb2.Peek,
        *,
        replica_id: str = "",
        timeout: float | None = None,
    ) -> compute_pb2.PeekResponse:
        """Run ``peek`` on the cluster's online replicas (or one); the first answer wins."""
        name = self.cluster_name(cluster_id)
        if replica_id:
            replica = self._replicas.get(replica_id)
            if replica is None or replica.spec.cluster_id != cluster_id:
                raise LoupeError("NOT_FOUND", f"cluster '{name}' has no replica {replica_id}")
            if not self._is_online(replica):
                raise LoupeError(
                    "UNAVAILABLE", f"replica {replica_id} of cluster '{name}' is not online"
                )
            candidates = [replica]
        else:
            candidates = [self._replicas[rid] for rid in self.online_replicas(cluster_id)]
        targets = {r.spec.replica_id: r.incarnation for r in candidates}
        return await self.peeks.run(name, targets, peek, timeout)

    async def cancel_peek(self, peek_uuid: str) -> bool:
        """Cancel a running peek: its caller gets ``canceled``. False if it was not running."""
        return await self.peeks.cancel(peek_uuid)


def _forget_gauge(replica_id: str) -> None:
    with contextlib.suppress(KeyError):
        REPLICA_ONLINE.remove(replica_id)


def logging_config(cluster: ClusterInfo) -> compute_pb2.LoggingConfig:
    """The ``LoggingConfig`` for a replica of ``cluster`` (no log indexes or sinks yet)."""
    interval = cluster.introspection_interval_ns
    return compute_pb2.LoggingConfig(
        interval_ns=interval,
        enable_logging=interval > 0,
        log_logging=cluster.introspection_debugging,
    )
