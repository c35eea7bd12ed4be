"""Peek routing: one peek to several replicas, the first answer wins; a peek waits, it does not time out.

The compute controller picks the targets (the online replicas of a cluster,
or the one asked for) and feeds every ``PeekResponse`` of a current
incarnation to ``PeekRouter.on_response``. The router promises each peek
exactly one outcome: the first rows, ``canceled`` after ``cancel``, an error
response, or a ``LoupeError`` when what it reads is gone for good (its
cluster, its pinned replica or its index was dropped). An error response
waits for the other targets (one of them may still answer: a replica
restarted after its inputs were compacted cannot read times the others
still can); it is the outcome once no target is left.

No deadline ends a peek. When every target went away (a crash, a
heartbeat timeout, a replica that canceled because it is stopping) or the
cluster has no online replica at all, the peek waits, and ``offer`` sends it
to each replica (incarnation) of its cluster that comes online. The one
limit is the caller's: the coordinator cancels the peek (``cancel``) when
its statement is canceled or runs out of ``statement_timeout``.

Callers wait in rounds: ``run(…, wait=seconds)`` returns the answer, or
raises ``DEADLINE_EXCEEDED`` saying what the peek waits for, while the peek
goes on; the caller calls ``run`` again with the same uuid to keep waiting
(a request-reply transport cannot hold one call open forever, and a
controller that restarted meanwhile simply starts the peek again). A peek no
caller waits for longer than its lease (twice the round, plus a margin) was
abandoned by its caller (a coordinator that died) and is canceled by
``expire``, so nothing leaks.

Once a peek is decided, every target that has not answered gets
``CancelPeek``, and later responses for it are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid as uuids
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

PEEKS = Counter("loupe_controller_peeks", "Peeks the controller routed, by outcome", ["outcome"])
PEEKS_WAITING = Gauge(
    "loupe_controller_peeks_waiting", "Peeks with no target: waiting for a replica to come online"
)
PEEKS_REISSUED = Counter(
    "loupe_controller_peeks_reissued",
    "Peeks sent again to a replica that came online after they began",
)

# Sends a command to (replica_id, incarnation).
Send = Callable[[str, int, compute_pb2.ComputeCommand], Awaitable[None]]

# A lease is twice the caller's round plus this, in seconds: room for a busy
# caller or transport between two rounds.
LEASE_MARGIN = 10.0


@dataclass
class _PendingPeek:
    uuid: str
    cluster_id: str
    cluster_name: str
    peek: compute_pb2.Peek
    future: asyncio.Future[compute_pb2.PeekResponse]
    # Pinned to one replica (``SET cluster_replica``); empty: any of the cluster.
    replica_id: str = ""
    # replica_id -> the incarnation the peek was sent to; those still racing.
    targets: dict[str, int] = field(default_factory=dict)
    # The first error response, kept while other targets may still answer.
    error: compute_pb2.PeekResponse | None = None
    # Callers waiting on it now; when none, it is abandoned after ``lease_until``.
    waiters: int = 0
    lease_until: float = 0.0
    # Why its last targets went away, for ``waiting_for``.
    lost: str = ""


class PeekRouter:
    """Sends peeks, takes the first answer, cancels the rest; re-sends peeks left without target."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._peeks: dict[str, _PendingPeek] = {}
        self._tasks: set[asyncio.Future[None]] = set()
        # Decided between two rounds of their caller: the outcome waits for the
        # next round until the lease ends (uuid -> peek).
        self._unclaimed: dict[str, _PendingPeek] = {}

    def __len__(self) -> int:
        return len(self._peeks)

    def __contains__(self, peek_uuid: str) -> bool:
        return peek_uuid in self._peeks or peek_uuid in self._unclaimed

    async def run(
        self,
        cluster_id: str,
        cluster_name: str,
        targets: dict[str, int],
        peek: compute_pb2.Peek,
        *,
        replica_id: str = "",
        wait: float | None = None,
    ) -> compute_pb2.PeekResponse:
        """Send ``peek`` to ``targets`` (replica_id -> incarnation) and await the first answer.

        ``targets`` may be empty: the peek waits for a replica to come online.
        A peek with the uuid of one still running joins it (nothing is sent).
        With ``wait``, at most that many seconds: then ``DEADLINE_EXCEEDED``
        saying what it waits for, and the peek goes on for the next round.
        """
        peek_uuid = peek.uuid or uuids.uuid4().hex
        unclaimed = self._unclaimed.pop(peek_uuid, None)
        if unclaimed is not None:
            return self._outcome(unclaimed.future)
        pending = self._peeks.get(peek_uuid)
        if pending is None:
            sent = compute_pb2.Peek()
            sent.CopyFrom(peek)
            sent.uuid = peek_uuid
            pending = _PendingPeek(
                peek_uuid,
                cluster_id,
                cluster_name,
                sent,
                asyncio.get_running_loop().create_future(),
                replica_id=replica_id,
            )
            self._peeks[peek_uuid] = pending
        for target, incarnation in targets.items():
            # Joining: only an online replica the peek has not reached yet.
            if pending.targets.get(target) != incarnation:
                await self._send_to(pending, target, incarnation)
        self._count_waiting()
        pending.waiters += 1
        try:
            if wait is None:
                response = await asyncio.shield(pending.future)
            else:
                response = await asyncio.wait_for(asyncio.shield(pending.future), wait)
        except TimeoutError:
            pending.lease_until = time.monotonic() + 2 * wait + LEASE_MARGIN  # type: ignore[operator]
            raise LoupeError("DEADLINE_EXCEEDED", self.waiting_for(pending)) from None
        except asyncio.CancelledError:
            # A caller of this process went away (a caller over the transport
            # never does: its round ends or its lease runs out).
            if pending.waiters == 1 and self._peeks.get(peek_uuid) is pending:
                await self.cancel(peek_uuid)
            raise
        except LoupeError as error:
            PEEKS.labels(outcome="unavailable" if error.code == "UNAVAILABLE" else "gone").inc()
            raise
        finally:
            pending.waiters -= 1
        PEEKS.labels(outcome=response.WhichOneof("result") or "empty").inc()
        return response

    @staticmethod
    def _outcome(future: asyncio.Future[compute_pb2.PeekResponse]) -> compute_pb2.PeekResponse:
        error = future.exception()
        if error is not None:
            raise error
        return future.result()

    def waiting_for(self, pending: _PendingPeek) -> str:
        """What a peek waits for, in words an operator reads in a log line."""
        where = f"cluster '{pending.cluster_name}'"
        if pending.targets:
            replicas = ", ".join(sorted(pending.targets))
            return (
                f"peek {pending.uuid} waits for replica {replicas} of {where} to answer"
                f" (index {pending.peek.target_id or '?'} readable at"
                f" {pending.peek.timestamp or 'its latest complete time'})"
            )
        who = f"replica {pending.replica_id} of {where}" if pending.replica_id else where
        lost = f" ({pending.lost})" if pending.lost else ""
        return f"peek {pending.uuid} waits for {who} to have an online replica{lost}"

    async def cancel(self, peek_uuid: str) -> bool:
        """Cancel a running peek: its caller gets ``canceled``. False if it was not running."""
        self._unclaimed.pop(peek_uuid, None)
        pending = self._peeks.pop(peek_uuid, None)
        if pending is None:
            return False
        if not pending.future.done():
            pending.future.set_result(compute_pb2.PeekResponse(uuid=peek_uuid, canceled=True))
        self._count_waiting()
        await self._cancel_on(pending.targets, peek_uuid)
        return True

    async def offer(self, cluster_id: str, replica_id: str, incarnation: int) -> int:
        """Replica (incarnation) of ``cluster_id`` came online: it gets every peek of its
        cluster it does not have. Returns how many it was sent."""
        sent = 0
        for pending in list(self._peeks.values()):
            if (
                pending.cluster_id != cluster_id
                or (pending.replica_id and pending.replica_id != replica_id)
                or pending.targets.get(replica_id) == incarnation
                or pending.future.done()
            ):
                continue
            await self._send_to(pending, replica_id, incarnation)
            PEEKS_REISSUED.inc()
            sent += 1
            log.info(
                "peek sent to a replica that came online",
                uuid=pending.uuid,
                replica_id=replica_id,
                incarnation=incarnation,
            )
        self._count_waiting()
        return sent

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
            # The replica gave up on its own (it is going away): the peek waits
            # for a replica to come online, unless an error was all there was.
            if pending.error is not None:
                self._answer(pending, pending.error)
            else:
                pending.lost = f"replica {replica_id} canceled it"
                self._count_waiting()
            return
        if result == "error" and pending.error is not None:
            response = pending.error  # the first of them all
        self._answer(pending, response)
        log.debug("peek answered", uuid=response.uuid, replica_id=replica_id)
        await self._cancel_on(pending.targets, response.uuid)

    def forget_replica(self, replica_id: str, why: str) -> None:
        """A replica went away: its peeks wait for the others, or for a replica to come online."""
        for pending in list(self._peeks.values()):
            if pending.targets.pop(replica_id, None) is None or pending.targets:
                continue
            if pending.error is not None:
                self._answer(pending, pending.error)
                continue
            pending.lost = why
            log.info("peek left without replica; it waits", uuid=pending.uuid, why=why)
        self._count_waiting()

    def fail_where(self, error: LoupeError, predicate: Callable[[_PendingPeek], bool]) -> int:
        """Fail the peeks ``predicate`` picks with ``error`` (what they read is gone for good)."""
        failed = 0
        for pending in list(self._peeks.values()):
            if predicate(pending):
                self._fail(pending, error)
                failed += 1
        self._count_waiting()
        return failed

    def fail_cluster(self, cluster_id: str, error: LoupeError) -> int:
        return self.fail_where(error, lambda p: p.cluster_id == cluster_id)

    def fail_pinned(self, replica_id: str, error: LoupeError) -> int:
        return self.fail_where(error, lambda p: p.replica_id == replica_id)

    def fail_target(self, cluster_id: str, target_id: str, error: LoupeError) -> int:
        return self.fail_where(
            error, lambda p: p.cluster_id == cluster_id and p.peek.target_id == target_id
        )

    def fail_all(self, error: LoupeError) -> None:
        self.fail_where(error, lambda _pending: True)

    async def expire(self, now: float | None = None) -> list[str]:
        """Cancel the peeks no caller waited for during their lease (their caller is gone)."""
        now = time.monotonic() if now is None else now
        for peek_uuid, unclaimed in list(self._unclaimed.items()):
            if now > unclaimed.lease_until:
                del self._unclaimed[peek_uuid]
        expired = [
            p.uuid
            for p in self._peeks.values()
            if p.waiters == 0 and p.lease_until and now > p.lease_until
        ]
        for peek_uuid in expired:
            log.info("peek abandoned by its caller; canceled", uuid=peek_uuid)
            PEEKS.labels(outcome="abandoned").inc()
            await self.cancel(peek_uuid)
        return expired

    async def _send_to(self, pending: _PendingPeek, replica_id: str, incarnation: int) -> None:
        pending.targets[replica_id] = incarnation
        command = compute_pb2.ComputeCommand()
        command.peek.CopyFrom(pending.peek)
        await self._send(replica_id, incarnation, command)

    async def _cancel_on(self, targets: dict[str, int], peek_uuid: str) -> None:
        for replica_id, incarnation in list(targets.items()):
            command = compute_pb2.ComputeCommand(cancel_peek=compute_pb2.CancelPeek(uuid=peek_uuid))
            with contextlib.suppress(Exception):
                await self._send(replica_id, incarnation, command)

    def _count_waiting(self) -> None:
        PEEKS_WAITING.set(sum(1 for p in self._peeks.values() if not p.targets))

    def _answer(self, pending: _PendingPeek, response: compute_pb2.PeekResponse) -> None:
        self._peeks.pop(pending.uuid, None)
        if not pending.future.done():
            pending.future.set_result(response)
            self._keep_unclaimed(pending)
        self._count_waiting()

    def _keep_unclaimed(self, pending: _PendingPeek) -> None:
        if not pending.waiters and pending.lease_until:
            self._unclaimed[pending.uuid] = pending

    def _fail(self, pending: _PendingPeek, error: LoupeError) -> None:
        self._peeks.pop(pending.uuid, None)
        if not pending.future.done():
            pending.future.set_exception(error)
            if not pending.waiters:
                pending.future.exception()  # nobody waits now: retrieved, not leaked
                self._keep_unclaimed(pending)
        # Its targets that still run it stop.
        if pending.targets:
            task = asyncio.ensure_future(self._cancel_on(dict(pending.targets), pending.uuid))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
