"""Peek routing: one peek to several replicas, the first answer wins.

The compute controller picks the targets (the online replicas of a cluster,
or the one asked for) and feeds every ``PeekResponse`` of a current
incarnation to ``PeekRouter.on_response``. The router promises each caller
exactly one outcome: the first rows, ``canceled`` after ``cancel``, an error
response, or a ``LoupeError`` (timeout; every target went away). An error
response waits for the other targets (one of them may still answer: a
replica restarted after its inputs were compacted cannot read times the
others still can); it is the outcome once no target is left, or at the
timeout. Once a peek is decided, every target that has not answered gets
``CancelPeek``, and later responses for it are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid as uuids
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import Counter

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

PEEKS = Counter("loupe_controller_peeks", "Peeks the controller routed, by outcome", ["outcome"])

# Sends a command to (replica_id, incarnation).
Send = Callable[[str, int, compute_pb2.ComputeCommand], Awaitable[None]]


@dataclass
class _PendingPeek:
    uuid: str
    cluster_name: str
    future: asyncio.Future[compute_pb2.PeekResponse]
    # replica_id -> the incarnation the peek was sent to; those still racing.
    targets: dict[str, int] = field(default_factory=dict)
    # The first error response, kept while other targets may still answer.
    error: compute_pb2.PeekResponse | None = None


class PeekRouter:
    """Sends peeks, takes the first answer, cancels the rest."""

    def __init__(self, send: Send, default_timeout: float = 30.0) -> None:
        self._send = send
        self.default_timeout = default_timeout
        self._peeks: dict[str, _PendingPeek] = {}

    def __len__(self) -> int:
        return len(self._peeks)

    async def run(
        self,
        cluster_name: str,
        targets: dict[str, int],
        peek: compute_pb2.Peek,
        timeout: float | None = None,
    ) -> compute_pb2.PeekResponse:
        """Send ``peek`` to ``targets`` (replica_id -> incarnation) and await the first answer."""
        if not targets:
            PEEKS.labels(outcome="unavailable").inc()
            raise LoupeError("UNAVAILABLE", f"cluster '{cluster_name}' has no online replicas")
        peek_uuid = peek.uuid or uuids.uuid4().hex
        if peek_uuid in self._peeks:
            raise LoupeError("ALREADY_EXISTS", f"peek {peek_uuid} is already running")
        timeout = timeout or self.default_timeout
        pending = _PendingPeek(
            peek_uuid, cluster_name, asyncio.get_running_loop().create_future(), dict(targets)
        )
        self._peeks[peek_uuid] = pending
        try:
            for replica_id, incarnation in list(pending.targets.items()):
                command = compute_pb2.ComputeCommand()
                command.peek.CopyFrom(peek)
                command.peek.uuid = peek_uuid
                await self._send(replica_id, incarnation, command)
            try:
                response = await asyncio.wait_for(asyncio.shield(pending.future), timeout)
            except TimeoutError:
                if pending.error is not None:
                    PEEKS.labels(outcome="error").inc()
                    return pending.error
                PEEKS.labels(outcome="timeout").inc()
                raise LoupeError(
                    "DEADLINE_EXCEEDED",
                    f"peek on cluster '{cluster_name}' was not answered within {timeout:g}s",
                ) from None
            except LoupeError:
                PEEKS.labels(outcome="unavailable").inc()
                raise
            PEEKS.labels(outcome=response.WhichOneof("result") or "empty").inc()
            return response
        finally:
            # Timed out, or the caller went away: the peek is still undecided.
            if self._peeks.get(peek_uuid) is pending:
                del self._peeks[peek_uuid]
                await self._cancel_on(pending.targets, peek_uuid)

    async def cancel(self, peek_uuid: str) -> bool:
        """Cancel a running peek: its caller gets ``canceled``. False if it was not running."""
        pending = self._peeks.pop(peek_uuid, None)
        if pending is None:
            return False
        if not pending.future.done():
            pending.future.set_result(compute_pb2.PeekResponse(uuid=peek_uuid, canceled=True))
        await self._cancel_on(pending.targets, peek_uuid)
        return True

    async def on_response(
        self, replica_id: str, incarnation: int, response: compute_pb2.PeekResponse
    ) -> None:
        """A ``PeekResponse`` of (replica_id, incarnation), already checked to be current."""
        pending = self._peeks.get(response.uuid)
        if pending is None or pending.targets.get(replica_id) != incarnation:
            log.debug("late peek response dropped", uuid=response.uuid, replica_id=replica_id)
            return
        del pending.targets[replica_id]
        result = response.WhichOneof("result")
        if result == "error" and pending.error is None:
            pending.error = response
        if result in ("canceled", "error") and pending.targets:
            return  # others may still answer
        if result == "canceled":
            # The replica gave up on its own (it is going away).
            if pending.error is not None:
                self._answer(pending, pending.error)
                return
            self._fail(
                pending,
                LoupeError(
                    "UNAVAILABLE",
                    f"every replica of cluster '{pending.cluster_name}' canceled the peek",
                ),
            )
            return
        if result == "error" and pending.error is not None:
            response = pending.error  # the first of them all
        del self._peeks[response.uuid]
        if not pending.future.done():
            pending.future.set_result(response)
        log.debug("peek answered", uuid=response.uuid, replica_id=replica_id)
        await self._cancel_on(pending.targets, response.uuid)

    def forget_replica(self, replica_id: str, why: str) -> None:
        """A replica went away: its peeks wait for the others, or fail if none are left."""
        for pending in list(self._peeks.values()):
            if pending.targets.pop(replica_id, None) is None or pending.targets:
                continue
            if pending.error is not None:
                self._answer(pending, pending.error)
                continue
            self._fail(
                pending,
                LoupeError(
                    "UNAVAILABLE",
                    f"cluster '{pending.cluster_name}' has no online replicas: {why}",
                ),
            )

    def fail_all(self, error: LoupeError) -> None:
        for pending in list(self._peeks.values()):
            self._fail(pending, error)

    async def _cancel_on(self, targets: dict[str, int], peek_uuid: str) -> None:
        for replica_id, incarnation in list(targets.items()):
            command = compute_pb2.ComputeCommand(cancel_peek=compute_pb2.CancelPeek(uuid=peek_uuid))
            with contextlib.suppress(Exception):
                await self._send(replica_id, incarnation, command)

    def _answer(self, pending: _PendingPeek, response: compute_pb2.PeekResponse) -> None:
        self._peeks.pop(pending.uuid, None)
        if not pending.future.done():
            pending.future.set_result(response)

    def _fail(self, pending: _PendingPeek, error: LoupeError) -> None:
        self._peeks.pop(pending.uuid, None)
        if not pending.future.done():
            pending.future.set_exception(error)
