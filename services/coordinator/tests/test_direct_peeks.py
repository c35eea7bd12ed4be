"""Peeks the coordinator sends to replicas itself (``Peek.direct``), the controller the fallback.

The controller here is the fake one over real NATS; the test publishes the
``PeekRoutes`` a controller would, and plays the replica on its command
subject: it answers (or not) on the peek's reply subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from loupe.common.errors import LoupeError
from loupe.common.transport import publish, subscribe
from loupe.compute_replica.protocol import PeekResult
from loupe.coordinator.sequencer.peek import PEEK_ROUTES_SUBJECT
from loupe.coordinator.tests.conftest import _result_columns
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.testing import assert_eventually


class FakeReplica:
    """Commands to ``replica_id``; answers direct peeks with ``rows`` (or ``error``) unless
    ``silent``."""

    def __init__(self, connection: Any, replica_id: str) -> None:
        self.connection = connection
        self.replica_id = replica_id
        self.peeks: list[compute_pb2.ComputeCommand] = []
        self.cancels: list[compute_pb2.ComputeCommand] = []
        self.rows: list[tuple[Any, ...]] = []
        self.error: LoupeError | None = None
        self.silent = False
        self._subscription: Any = None

    async def start(self) -> None:
        self._subscription = await subscribe(
            self.connection,
            f"loupe.compute.v1.{self.replica_id}.command",
            compute_pb2.ComputeCommand,
            self._received,
        )

    async def stop(self) -> None:
        await self._subscription.unsubscribe()

    async def _received(self, command: compute_pb2.ComputeCommand, _msg: Any) -> None:
        kind = command.WhichOneof("kind")
        if kind == "cancel_peek":
            self.cancels.append(command)
            return
        if kind != "peek":
            return
        self.peeks.append(command)
        peek = command.peek
        if self.silent:
            return
        if self.error is not None:
            response = compute_pb2.PeekResponse(uuid=peek.uuid, error=self.error.to_proto())
        else:
            result = PeekResult(_result_columns(peek), list(self.rows)).to_proto()
            response = compute_pb2.PeekResponse(uuid=peek.uuid, rows=result)
        await publish(self.connection, peek.reply_subject, response)


@contextlib.asynccontextmanager
async def routed(
    fleet: Any, peek_direct_wait: float, replica_id: str, incarnation: int
) -> AsyncIterator[tuple[Any, str, FakeReplica]]:
    """A coordinator and a session with table ``kept`` and its index ``kept_a`` (the fake
    controller's peeks of it answer (3,)), and routes naming ``replica_id`` for quickstart
    published as a controller would: (harness, session, the fake replica)."""
    harness = await fleet.add(peek_direct_wait=peek_direct_wait)
    session = await harness.session()
    for sql in ("CREATE TABLE kept (a int)", "CREATE INDEX kept_a ON kept (a)"):
        assert await harness.rows(session, sql) == []
    context = harness.service.coordinator.context
    (index_id,) = [o.id for o in context.state.objects.values() if o.name == "kept_a"]
    harness.controller.answers[index_id] = [(3,)]
    cluster = context.state.cluster("quickstart")
    assert cluster is not None
    replica = FakeReplica(context.connection, replica_id)
    await replica.start()
    route = controller_pb2.PeekRoute(
        cluster_id=cluster.id, replica_id=replica_id, incarnation=incarnation
    )
    routes = controller_pb2.PeekRoutes(boot_id=uuid.uuid4().hex, routes=[route])
    await publish(context.connection, PEEK_ROUTES_SUBJECT, routes)
    await assert_eventually(lambda: _known(context.peek_routes.targets(cluster.id)), timeout=5)
    try:
        yield harness, session, replica
    finally:
        await replica.stop()


def _known(targets: Any) -> None:
    assert targets, targets


async def test_a_fast_path_read_goes_to_the_replica_and_not_through_the_controller(
    fleet: Any,
) -> None:
    async with routed(fleet, 5, "r7", 4) as (harness, session, replica):
        replica.rows = [(3,)]
        before = len(harness.controller.peeks)
        assert await harness.rows(session, "SELECT a FROM kept WHERE a = 3") == [(3,)]
        assert len(harness.controller.peeks) == before  # the controller was not asked
        (command,) = replica.peeks
        assert command.incarnation == 4
        assert command.peek.direct
        assert command.peek.reply_subject
        assert command.peek.target_id.startswith("u")  # the index itself: the fast path
        assert replica.cancels == []  # its one replica answered: nothing to cancel


async def test_an_unanswered_direct_peek_is_canceled_and_asked_of_the_controller(
    fleet: Any,
) -> None:
    """A replica paused or dead since the routes were published: after ``peek_direct_wait``
    the controller answers, the replica's peek is canceled, and the cluster's next read
    goes to the controller straight away (until its routes change)."""
    async with routed(fleet, 0.3, "r8", 2) as (harness, session, replica):
        replica.silent = True
        before = len(harness.controller.peeks)
        await harness.rows(session, "SELECT a FROM kept WHERE a = 3")
        (direct,) = replica.peeks
        asked = harness.controller.peeks[before:]
        assert len(asked) == 1
        assert asked[0].peek.uuid != direct.peek.uuid  # a peek of its own
        assert not asked[0].peek.direct
        await assert_eventually(lambda: _cancels(replica, direct.peek.uuid), timeout=5)
        assert replica.cancels[0].incarnation == 2
        # The next read does not wait for the replica again.
        await harness.rows(session, "SELECT a FROM kept WHERE a = 3")
        assert len(replica.peeks) == 1
        assert len(harness.controller.peeks) == before + 2


async def test_a_replica_taken_offline_sends_its_waiting_read_to_the_controller_at_once(
    fleet: Any,
) -> None:
    """The controller publishes routes without the replica (it died, or stopped
    heartbeating): the direct peek waiting on it goes to the controller then, not at the
    end of its wait (a minute here), and is canceled on the replica."""
    async with routed(fleet, 60, "r12", 3) as (harness, session, replica):
        replica.silent = True
        context = harness.service.coordinator.context
        cluster = context.state.cluster("quickstart")
        assert cluster is not None
        before = len(harness.controller.peeks)
        read = asyncio.create_task(harness.rows(session, "SELECT a FROM kept WHERE a = 3"))
        await assert_eventually(lambda: _equal(len(replica.peeks), 1), timeout=5)
        await asyncio.sleep(0.2)
        assert not read.done()  # the replica has not answered: the read waits for it
        offline = controller_pb2.PeekRoutes(boot_id=uuid.uuid4().hex, routes=[])
        await publish(context.connection, PEEK_ROUTES_SUBJECT, offline)
        assert await asyncio.wait_for(read, 10) == [(3,)]
        assert len(harness.controller.peeks) == before + 1
        (direct,) = replica.peeks
        await assert_eventually(lambda: _cancels(replica, direct.peek.uuid), timeout=5)


def _equal(a: Any, b: Any) -> None:
    assert a == b, (a, b)


async def test_an_unavailable_replica_sends_the_read_to_the_controller_at_once(
    fleet: Any,
) -> None:
    """A replica of another incarnation answers UNAVAILABLE: no waiting for the direct
    wait (a minute here) before the controller is asked."""
    async with routed(fleet, 60, "r9", 1) as (harness, session, replica):
        replica.error = LoupeError("UNAVAILABLE", "replica r9 is incarnation 2, not 1")
        before = len(harness.controller.peeks)
        read = harness.rows(session, "SELECT a FROM kept WHERE a = 3")
        await asyncio.wait_for(read, 10)
        assert len(replica.peeks) == 1
        assert len(harness.controller.peeks) == before + 1


async def test_an_error_from_the_replica_is_the_controllers_to_say(fleet: Any) -> None:
    """Any other error: the controller is asked (it waits for the cluster's other replicas
    and says what failed), and the direct way stays open for the next read."""
    async with routed(fleet, 60, "r10", 1) as (harness, session, replica):
        replica.error = LoupeError("XX000", "an error of this replica")
        before = len(harness.controller.peeks)
        await asyncio.wait_for(harness.rows(session, "SELECT a FROM kept WHERE a = 3"), 10)
        assert len(harness.controller.peeks) == before + 1
        replica.error, replica.rows = None, [(3,)]
        assert await harness.rows(session, "SELECT a FROM kept WHERE a = 3") == [(3,)]
        assert len(replica.peeks) == 2
        assert len(harness.controller.peeks) == before + 1


async def test_a_canceled_read_cancels_its_direct_peek_on_the_replica(fleet: Any) -> None:
    """statement_timeout while the replica has not answered: 57014, and the replica gets
    CancelPeek for the direct peek (the controller never had it)."""
    async with routed(fleet, 60, "r11", 5) as (harness, session, replica):
        replica.silent = True
        responses = await harness.execute(
            session, "SET statement_timeout = '300ms'; SELECT a FROM kept WHERE a = 3"
        )
        errors = [r.error for r in responses if r.HasField("error")]
        assert [e.code for e in errors] == ["57014"]
        (direct,) = replica.peeks
        await assert_eventually(lambda: _cancels(replica, direct.peek.uuid), timeout=5)
        assert replica.cancels[0].incarnation == 5


def _cancels(replica: FakeReplica, peek_id: str) -> None:
    assert [c.cancel_peek.uuid for c in replica.cancels] == [peek_id], replica.cancels
