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
was dropped (42704, in Materialize's words). Peeks in flight to a cluster
are bounded (``loupe.coordinator.admission``): a read past the bound waits
its turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.values import from_row
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
    began = time.monotonic()
    logged = False
    pause = RETRY_PAUSE
    try:
        while True:
            try:
                # The transport's own limit is the round plus room for a busy controller.
                response = await ctx.controller.call(
                    "Peek", request, timeout=round_seconds + ctx.config.request_timeout
                )
                break
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
                gone = dropped() if dropped is not None else None
                if gone is not None:
                    ctx.spawn(cancel_peek(ctx, peek_id))
                    raise LoupeError(
                        SqlState.UNDEFINED_OBJECT,
                        f"query could not complete because {gone} was dropped",
                    ) from None
            waited = time.monotonic() - began
            if not logged and waited >= round_seconds:
                logged = True
                log.info(
                    "read is waiting",
                    uuid=peek_id,
                    reading=reading or request.peek.target_id,
                    timestamp=request.peek.timestamp or "latest",
                    waited=round(waited, 1),
                    waiting_for=why,
                )
    except asyncio.CancelledError:
        ctx.spawn(cancel_peek(ctx, peek_id))
        raise
    if logged:
        log.info("waiting read answered", uuid=peek_id, waited=round(time.monotonic() - began, 1))
    kind = response.WhichOneof("result")
    if kind == "error":
        raise LoupeError.from_proto(response.error)
    if kind == "canceled":
        raise canceled_error()
    columns = tuple((c.name, c.type) for c in response.rows.desc.columns)
    return columns, [from_row(row) for row in response.rows.rows]


async def cancel_peek(ctx: SequencerContext, peek_id: str) -> None:
    """Ask the controller to cancel peek ``peek_id``; a failure is only logged."""
    try:
        await ctx.controller.CancelPeek(compute_pb2.CancelPeek(uuid=peek_id), timeout=5)
    except LoupeError as error:
        log.warning("cancel peek failed", uuid=peek_id, error=error.message)
