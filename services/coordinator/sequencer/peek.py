"""The peek round trip: which replica answers, the controller's ``Peek``, canceling it.

``loupe.coordinator.compute`` decides what to peek (an index on the fast
path, or a transient dataflow's result); this module sends it.

A read waits as long as it must: for its timestamp to become readable, for a
replica to come back, for the controller to answer. Nothing here gives up on
a clock; the one limit is the session's ``statement_timeout`` (57014) or the
client's cancel, both of which cancel the statement's task, and a canceled
peek is canceled at the controller too (``CancelPeek`` reaches the
replicas), in the background. The controller is asked in rounds of
``peek_round`` seconds with the same peek uuid (the controller's peek goes on
between them, see ``loupe.controller.peeks``): a round that ends unanswered,
or a controller that is away (restarting), only means asking again, and a
read still waiting after its first round is logged once with what it waits
for. What ends a wait early is an answer that cannot change: what it reads
was dropped (42704, in Materialize's words), noticed as soon as the drop
commits (the catalog snapshot changes), not at the end of a round. Peeks in
flight to a cluster are bounded (``loupe.coordinator.admission``): a read past
the bound waits its turn.

The rows come back the shorter way when they can: a peek names a reply
subject of this coordinator, and the replica that has the rows publishes them
there as well as to the controller (``PeekReplies``); the first copy answers.

Shorter still, a peek goes to the replicas straight from here
(``Peek.direct``, two hops instead of three, and none through the
controller's event loop): the controller publishes which replicas of each
cluster are online, with their incarnations (``PeekRoutes``). The routes are
a hint. A direct peek whose replicas the controller takes offline (the
routes change), unanswered within ``peek_direct_wait`` (a replica hung, an
index far behind), or answered with an error (a replica of another
incarnation says so at once), is canceled on its replicas and asked of the
controller as above, with its own uuid: the controller knows replicas'
health, waits for one to come online, and says what failed. After a timeout
or an unavailable replica, the cluster skips the direct way until its routes
change or ``DIRECT_BACKOFF_S`` passes. A read still waiting after a round is
logged once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.transport import publish, subscribe
from loupe.common.values import from_row
from loupe.coordinator import metrics
from loupe.coordinator.admission import (
    RETRY_PAUSE,
    RETRY_PAUSE_CAP,
    TRANSIENT,
)
from loupe.coordinator.catalog_state import ClusterInfo
from loupe.coordinator.session import Session
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

log = get_logger(__name__)


class PeekReplies:
    """Rows a replica sends straight to this coordinator (``Peek.reply_subject``).

    The controller routes every peek and answers it; a replica that has the rows
    also publishes them to the subject the peek names, one per peek under this
    coordinator's inbox. That answer skips a hop and the controller's event loop,
    which decodes the storage writer's input between two peeks. Only rows come
    this way: an error still comes through the controller, which waits for the
    cluster's other replicas. Rows at the peek's timestamp are the same from
    every replica, so the first copy is the answer.
    """

    def __init__(self, connection: Any) -> None:
        self._nc = connection
        self._prefix = ""
        self._subscription: Any = None
        self._waiting: dict[str, asyncio.Future[compute_pb2.PeekResponse]] = {}
        # Direct peeks (``Peek.direct``): their errors and cancels come here too.
        self._direct: set[str] = set()

    async def start(self) -> None:
        self._prefix = f"{self._nc.new_inbox()}.peek"
        self._subscription = await subscribe(
            self._nc, f"{self._prefix}.*", compute_pb2.PeekResponse, self._received
        )

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
        self._subscription = None
        for future in self._waiting.values():
            future.cancel()
        self._waiting.clear()

    def expect(
        self, uuid: str, *, direct: bool = False
    ) -> tuple[str, asyncio.Future[compute_pb2.PeekResponse]] | None:
        """(reply subject, future of the rows) for peek ``uuid``; None before ``start``.
        ``direct``: a peek sent straight to replicas, whose every answer comes here."""
        if self._subscription is None:
            return None
        future = self._waiting[uuid] = asyncio.get_running_loop().create_future()
        if direct:
            self._direct.add(uuid)
        return f"{self._prefix}.{uuid}", future

    def forget(self, uuid: str) -> None:
        self._direct.discard(uuid)
        future = self._waiting.pop(uuid, None)
        if future is not None and not future.done():
            future.cancel()

    async def _received(self, response: compute_pb2.PeekResponse, msg: Any) -> None:
        uuid = msg.subject.rpartition(".")[2]
        future = self._waiting.get(uuid)
        if future is None or future.done():
            return  # a late copy: the peek was answered already
        rows = response.WhichOneof("result") == "rows"
        if response.uuid != uuid or not (rows or uuid in self._direct):
            log.warning("direct peek reply ignored", subject=msg.subject, uuid=response.uuid)
            return
        future.set_result(response)


# The controller's publisher (``loupe.controller.peek_routes``) and the replicas'
# command subjects (``loupe.compute_replica.protocol``).
PEEK_ROUTES_SUBJECT = "loupe.controller.v1.peek_routes"
REPLICA_SUBJECT_PREFIX = "loupe.compute.v1"
# How long a cluster whose direct peek failed sends its peeks through the
# controller, unless its routes change sooner (the controller republishes them
# every 5 s, and at once when a replica goes offline or online).
DIRECT_BACKOFF_S = 5.0


class PeekRoutes:
    """The online replicas of each cluster and their incarnations, as the controller
    last published them (``PeekRoutes``): where a peek may go straight from here."""

    def __init__(self, connection: Any) -> None:
        self._nc = connection
        self._subscription: Any = None
        # cluster id -> {replica id: incarnation}
        self._routes: dict[str, dict[str, int]] = {}
        # cluster id -> monotonic time until which its peeks go through the controller.
        self._backoff: dict[str, float] = {}
        # cluster id -> an event set when its routes next change (``changed``).
        self._changes: dict[str, asyncio.Event] = {}

    async def start(self) -> None:
        self._subscription = await subscribe(
            self._nc, PEEK_ROUTES_SUBJECT, controller_pb2.PeekRoutes, self._received
        )
        # The current routes now, not at the controller's next publication (a few
        # seconds); without an answer (no controller yet) that publication brings them.
        try:
            reply = await self._nc.request(f"{PEEK_ROUTES_SUBJECT}.get", b"", timeout=2.0)
            await self._received(controller_pb2.PeekRoutes.FromString(reply.data), reply)
        except Exception as error:
            log.info("peek routes not known yet", error=repr(error))

    async def stop(self) -> None:
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
        self._subscription = None
        self._routes = {}
        for event in self._changes.values():
            event.set()
        self._changes.clear()

    def changed(self, cluster_id: str) -> asyncio.Event:
        """An event set when the routes of ``cluster_id`` next change."""
        event = self._changes.get(cluster_id)
        if event is None:
            event = self._changes[cluster_id] = asyncio.Event()
        return event

    def still_routed(self, cluster_id: str, targets: dict[str, int]) -> bool:
        """Whether every one of ``targets`` is still online in the same incarnation."""
        routes = self._routes.get(cluster_id, {})
        return all(routes.get(r) == i for r, i in targets.items())

    def targets(self, cluster_id: str, replica_id: str = "") -> dict[str, int] | None:
        """{replica id: incarnation} to send a peek of ``cluster_id`` to (only
        ``replica_id`` when given); None: ask the controller."""
        routes = self._routes.get(cluster_id)
        if not routes:
            return None
        until = self._backoff.get(cluster_id)
        if until is not None:
            if time.monotonic() < until:
                return None
            del self._backoff[cluster_id]
        if replica_id:
            incarnation = routes.get(replica_id)
            return None if incarnation is None else {replica_id: incarnation}
        return dict(routes)

    def failed(self, cluster_id: str) -> None:
        """A direct peek of ``cluster_id`` went unanswered: use the controller for a while."""
        self._backoff[cluster_id] = time.monotonic() + DIRECT_BACKOFF_S

    async def _received(self, message: controller_pb2.PeekRoutes, _msg: Any) -> None:
        routes: dict[str, dict[str, int]] = {}
        for route in message.routes:
            routes.setdefault(route.cluster_id, {})[route.replica_id] = route.incarnation
        changed = {
            c for c in routes.keys() | self._routes.keys() if routes.get(c) != self._routes.get(c)
        }
        self._routes = routes
        for cluster_id in changed:
            self._backoff.pop(cluster_id, None)  # what failed has changed: try again
            event = self._changes.pop(cluster_id, None)
            if event is not None:
                event.set()


def canceled_error() -> LoupeError:
    """What a statement canceled by its session (``Cancel``) fails with: 57014."""
    return LoupeError(SqlState.QUERY_CANCELED, "canceling statement due to user request")


async def peek_target_replica(
    ctx: SequencerContext, session: Session, cluster: ClusterInfo
) -> tuple[str, str]:
    """(cluster_id, replica_id): ``SET cluster_replica`` picks one replica of ``cluster``."""
    cluster_name = cluster.name
    replica_id = ""
    if session.cluster_replica:
        replica = ctx.state.replica(cluster.id, session.cluster_replica)
        if replica is None:
            replica = (await ctx.refreshed_state()).replica(cluster.id, session.cluster_replica)
        if replica is None:
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT,
                f"cluster replica '{cluster_name}.{session.cluster_replica}' does not exist",
            )
        replica_id = replica.id
    return cluster.id, replica_id


async def send_peek(
    ctx: SequencerContext,
    request: controller_pb2.PeekRequest,
    *,
    reading: str = "",
    dropped: Callable[[], str | None] | None = None,
) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
    """Send a peek to the controller and wait for its answer: (columns, rows).

    Canceled with the statement. ``reading`` says what it reads, for the log.
    ``dropped`` is asked after every unanswered round: a relation the read
    depends on that was dropped meanwhile ends it (42704, Materialize's
    words), and the peek is canceled. At most ``peek_concurrency`` peeks are in flight to a cluster at once; the
    others wait their turn in its ``ctx.peek_queue`` (replicas flooded with
    more peeks than they can run answer all of them later, not sooner).
    """
    async with ctx.peek_queue(request.cluster_id).admitted():
        return await _send_peek(ctx, request, reading, dropped)


async def _send_peek(
    ctx: SequencerContext,
    request: controller_pb2.PeekRequest,
    reading: str,
    dropped: Callable[[], str | None] | None,
) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
    peek_id = request.peek.uuid
    round_seconds = ctx.config.peek_round
    request.timeout_ms = max(1, int(round_seconds * 1000))
    waiting = _Waiting(peek_id, reading or request.peek.target_id, request.peek.timestamp)
    answered = await _peek_directly(ctx, request, dropped, waiting)
    if answered is not None:
        waiting.answered()
        return _result(answered)
    pause = RETRY_PAUSE
    direct = ctx.peek_replies.expect(peek_id)
    if direct is not None:
        request.peek.reply_subject = direct[0]
    try:
        while True:
            try:
                # The transport's own limit is the round plus room for a busy controller.
                call = ctx.controller.call(
                    "Peek", request, timeout=round_seconds + ctx.config.request_timeout
                )
                watch = None if dropped is None else _dropped_meanwhile(ctx, dropped)
                response = await _first_answer(call, None if direct is None else direct[1], watch)
                break
            except _Dropped as dropping:
                raise _ended_by_drop(ctx, peek_id, dropping.what) from None
            except LoupeError as error:
                if error.code not in TRANSIENT:
                    raise
                why = error.message
                if error.code == "UNAVAILABLE":
                    # No controller now (restarting): ask again shortly.
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, RETRY_PAUSE_CAP)
                else:
                    pause = RETRY_PAUSE
                # A drop the watch of this round could not see (it came between rounds).
                gone = dropped() if dropped is not None else None
                if gone is not None:
                    raise _ended_by_drop(ctx, peek_id, gone) from None
            if waiting.waited() >= round_seconds:
                waiting.log(why)
    except asyncio.CancelledError:
        ctx.spawn(cancel_peek(ctx, peek_id))
        raise
    finally:
        ctx.peek_replies.forget(peek_id)
    waiting.answered()
    return _result(response)


class _Waiting:
    """A read that waits longer than a round is logged once, with what it waits for,
    whichever way its peek went; and again when it is answered."""

    def __init__(self, peek_id: str, reading: str, timestamp: int) -> None:
        self.peek_id, self.reading, self.timestamp = peek_id, reading, timestamp
        self.began = time.monotonic()
        self.logged = False

    def waited(self) -> float:
        return time.monotonic() - self.began

    def log(self, waiting_for: str) -> None:
        if self.logged:
            return
        self.logged = True
        log.info(
            "read is waiting",
            uuid=self.peek_id,
            reading=self.reading,
            timestamp=self.timestamp or "latest",
            waited=round(self.waited(), 1),
            waiting_for=waiting_for,
        )

    def answered(self) -> None:
        if self.logged:
            log.info("waiting read answered", uuid=self.peek_id, waited=round(self.waited(), 1))


def _result(
    response: compute_pb2.PeekResponse,
) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
    kind = response.WhichOneof("result")
    if kind == "error":
        raise LoupeError.from_proto(response.error)
    if kind == "canceled":
        raise canceled_error()
    columns = tuple((c.name, c.type) for c in response.rows.desc.columns)
    return columns, [from_row(row) for row in response.rows.rows]


async def _peek_directly(
    ctx: SequencerContext,
    request: controller_pb2.PeekRequest,
    dropped: Callable[[], str | None] | None,
    waiting: _Waiting,
) -> compute_pb2.PeekResponse | None:
    """Send the peek to the cluster's online replicas from here (``Peek.direct``); their
    rows, or None to ask the controller (no routes, no answer in time, an error)."""
    wait = ctx.config.peek_direct_wait
    targets = ctx.peek_routes.targets(request.cluster_id, request.replica_id) if wait > 0 else None
    if not targets:
        return None
    peek_id = str(uuid.uuid4())
    expected = ctx.peek_replies.expect(peek_id, direct=True)
    if expected is None:
        return None
    subject, answer = expected
    peek = compute_pb2.Peek()
    peek.CopyFrom(request.peek)
    peek.uuid, peek.reply_subject, peek.direct = peek_id, subject, True
    watching = asyncio.ensure_future(_dropped_meanwhile(ctx, dropped)) if dropped else None
    outcome = "timeout"
    try:
        for replica_id, incarnation in targets.items():
            command = compute_pb2.ComputeCommand(peek=peek, incarnation=incarnation)
            await publish(ctx.connection, _command_subject(replica_id), command)
        deadline = time.monotonic() + wait
        round_seconds = ctx.config.peek_round
        while not answer.done() and (watching is None or not watching.done()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if waiting.waited() >= round_seconds:
                waiting.log(
                    f"peek {peek_id} waits for replica(s) {', '.join(sorted(targets))} of"
                    f" cluster {request.cluster_id} to answer (sent to them directly)"
                )
            else:  # wake at the end of the round to say so
                left = min(left, round_seconds - waiting.waited())
            # A replica the controller takes offline (or replaces) ends the wait at once.
            changed = asyncio.ensure_future(ctx.peek_routes.changed(request.cluster_id).wait())
            waits: set[asyncio.Future[Any]] = {answer, changed}
            if watching is not None:
                waits.add(watching)
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
            if not answer.done() and not ctx.peek_routes.still_routed(request.cluster_id, targets):
                outcome = "unrouted"
                break
        if answer.done():
            response = answer.result()
            kind = response.WhichOneof("result")
            if kind == "rows":
                outcome = "answered"
                return response
            # The controller says what failed (it waits for the others, or for a replica).
            unavailable = kind == "canceled" or response.error.code == "UNAVAILABLE"
            outcome = "unavailable" if unavailable else "error"
        elif watching is not None and watching.done():
            outcome = "dropped"
            raise _drop_error(watching.result())
        if outcome in ("timeout", "unavailable"):
            ctx.peek_routes.failed(request.cluster_id)
        log.info(
            "direct peek asked of the controller",
            uuid=peek_id,
            cluster_id=request.cluster_id,
            replicas=sorted(targets),
            why=outcome,
        )
        return None
    except asyncio.CancelledError:
        outcome = "canceled"
        raise
    finally:
        if watching is not None:
            watching.cancel()
        ctx.peek_replies.forget(peek_id)
        metrics.PEEKS_DIRECT.labels(outcome).inc()
        if outcome != "answered" or len(targets) > 1:
            # Every replica still running it stops (the one that answered ignores it).
            ctx.spawn(_cancel_directly(ctx, targets, peek_id))


def _command_subject(replica_id: str) -> str:
    return f"{REPLICA_SUBJECT_PREFIX}.{replica_id}.command"


async def _cancel_directly(ctx: SequencerContext, targets: dict[str, int], peek_id: str) -> None:
    """Cancel direct peek ``peek_id`` on its replicas; a failure is only logged."""
    for replica_id, incarnation in targets.items():
        command = compute_pb2.ComputeCommand(
            cancel_peek=compute_pb2.CancelPeek(uuid=peek_id), incarnation=incarnation
        )
        try:
            await publish(ctx.connection, _command_subject(replica_id), command)
        except Exception as error:
            log.warning("direct cancel peek failed", uuid=peek_id, error=repr(error))


def _ended_by_drop(ctx: SequencerContext, peek_id: str, what: str) -> LoupeError:
    """Cancel peek ``peek_id`` (in the background) and say why: ``what`` was dropped."""
    ctx.spawn(cancel_peek(ctx, peek_id))
    return _drop_error(what)


def _drop_error(what: str) -> LoupeError:
    return LoupeError(
        SqlState.UNDEFINED_OBJECT, f"query could not complete because {what} was dropped"
    )


class _Dropped(Exception):
    """What a waiting read depends on was dropped (``what``, as the user names it)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


async def _dropped_meanwhile(ctx: SequencerContext, dropped: Callable[[], str | None]) -> str:
    """Return what ``dropped`` names once a catalog change drops it."""
    while True:
        await ctx.follower.changed()
        gone = dropped()
        if gone is not None:
            return gone


async def _first_answer(
    call: Coroutine[Any, Any, Any],
    direct: asyncio.Future[compute_pb2.PeekResponse] | None,
    watch: Coroutine[Any, Any, str] | None,
) -> Any:
    """The controller's answer to ``call``, or the rows a replica sent straight here if they
    come first (the controller's call is then dropped: it would bring the same rows).
    ``watch`` ends the wait with ``_Dropped`` if it returns first (what the read depends
    on was dropped)."""
    if direct is not None and direct.done():
        call.close()
        if watch is not None:
            watch.close()
        return direct.result()
    task = asyncio.ensure_future(call)
    watching = asyncio.ensure_future(watch) if watch is not None else None
    waits: set[asyncio.Future[Any]] = {task}
    waits.update(f for f in (direct, watching) if f is not None)
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        if watching is not None:
            watching.cancel()
    if task.done():
        return task.result()
    task.cancel()
    if direct is not None and direct.done():
        return direct.result()
    assert watching is not None
    raise _Dropped(watching.result())


async def cancel_peek(ctx: SequencerContext, peek_id: str) -> None:
    """Ask the controller to cancel peek ``peek_id``; a failure is only logged."""
    try:
        await ctx.controller.CancelPeek(compute_pb2.CancelPeek(uuid=peek_id), timeout=5)
    except LoupeError as error:
        log.warning("cancel peek failed", uuid=peek_id, error=error.message)
