"""The peek round trip: which replica answers, the controller's ``Peek``, canceling it.

``loupe.coordinator.compute`` decides what to peek (an index on the fast
path, or a transient dataflow's result); this module sends it. A peek
canceled with its statement, or one that runs out of time, is canceled at
the controller too (``CancelPeek``), in the background.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.values import from_row
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
    ctx: SequencerContext, request: controller_pb2.PeekRequest
) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
    """Send a peek to the controller: (columns, rows); canceled with the statement."""
    peek_id = request.peek.uuid
    try:
        response = await ctx.controller.call("Peek", request, timeout=ctx.config.peek_timeout + 5)
    except asyncio.CancelledError:
        ctx.spawn(cancel_peek(ctx, peek_id))
        raise
    except LoupeError as error:
        if error.code == "DEADLINE_EXCEEDED":
            ctx.spawn(cancel_peek(ctx, peek_id))
            raise LoupeError(
                SqlState.QUERY_CANCELED, "canceling statement due to statement timeout"
            ) from None
        raise
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
