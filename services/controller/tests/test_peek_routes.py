"""The controller's peek routes: which replicas a coordinator may peek itself."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from loupe.controller.peek_routes import PEEK_ROUTES_SUBJECT, PeekRoutePublisher, Route
from loupe.proto.controller.v1 import controller_pb2
from loupe.testing import assert_eventually


def routes_of(message: controller_pb2.PeekRoutes) -> list[Route]:
    return [(r.cluster_id, r.replica_id, r.incarnation) for r in message.routes]


async def watch(nc: Any, boot_id: str) -> tuple[list[list[Route]], Any]:
    """(the routes published by the publisher of ``boot_id``, as they come; the
    subscription): the session's server is shared, so only this test's messages."""
    seen: list[list[Route]] = []

    async def received(msg: Any) -> None:
        message = controller_pb2.PeekRoutes.FromString(msg.data)
        if message.boot_id == boot_id:
            seen.append(routes_of(message))

    return seen, await nc.subscribe(PEEK_ROUTES_SUBJECT, cb=received)


async def test_routes_are_published_on_change_on_request_and_emptied_at_stop(nats_connection):
    nc = nats_connection
    boot_id = uuid.uuid4().hex
    online: list[Route] = [("u1", "u1", 1)]
    seen, subscription = await watch(nc, boot_id)
    # Checks every 60 s and republishes every 60 s: only a change or a request is answered.
    publisher = PeekRoutePublisher(
        nc, lambda: list(online), boot_id, check_interval=60, republish_interval=60
    )
    try:
        await publisher.start()
        await assert_eventually(lambda: _equal(seen, [[("u1", "u1", 1)]]))

        # A restart: a new incarnation, published as soon as the controller says so.
        online[:] = [("u1", "u1", 2), ("u2", "u2", 1)]
        publisher.changed()
        await assert_eventually(lambda: _equal(seen[-1], [("u1", "u1", 2), ("u2", "u2", 1)]))

        # Nothing changed: woken again, it publishes nothing.
        count = len(seen)
        publisher.changed()
        await asyncio.sleep(0.2)
        assert len(seen) == count

        # A coordinator that starts asks for the routes.
        reply = await nc.request(f"{PEEK_ROUTES_SUBJECT}.get", b"", timeout=5)
        answer = controller_pb2.PeekRoutes.FromString(reply.data)
        assert answer.boot_id == boot_id
        assert routes_of(answer) == [("u1", "u1", 2), ("u2", "u2", 1)]
    finally:
        await publisher.stop()
    # The replicas stop with the controller: nothing is routable any more.
    await assert_eventually(lambda: _equal(seen[-1], []))
    await subscription.unsubscribe()


async def test_routes_are_republished_while_nothing_changes(nats_connection):
    """A coordinator that missed a change (it reconnected) learns the routes anyway."""
    nc = nats_connection
    boot_id = uuid.uuid4().hex
    seen, subscription = await watch(nc, boot_id)
    publisher = PeekRoutePublisher(
        nc, lambda: [("u1", "u1", 1)], boot_id, check_interval=0.05, republish_interval=0.2
    )
    try:
        await publisher.start()
        await assert_eventually(lambda: _at_least(len(seen), 3), timeout=5)
        assert all(routes == [("u1", "u1", 1)] for routes in seen)
    finally:
        await publisher.stop()
        await subscription.unsubscribe()


def _equal(a: Any, b: Any) -> None:
    assert a == b, (a, b)


def _at_least(a: int, b: int) -> None:
    assert a >= b, (a, b)
