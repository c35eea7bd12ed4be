"""The replicas a coordinator may peek itself: ``PeekRoutes`` on a core NATS subject.

A peek routed by the controller crosses three hops (coordinator -> controller
-> replica -> coordinator) and waits its turn in the controller's event loop,
which also decodes the storage writer's input. The coordinator can send the
``Peek`` to the replicas itself (``Peek.direct``) when it knows which
replicas of a cluster are online and their incarnations: this publisher
tells it.

- It publishes every online replica (current incarnation online, alive, not
  being replaced) as ``(cluster_id, replica_id, incarnation)`` whenever that
  set changes (``changed()`` wakes it; it also looks every ``check_interval``)
  and every ``republish_interval`` regardless, so a coordinator that starts
  or reconnects learns the routes within that time.
- The routes are a hint, not a promise: a replica that died since (or is
  paused) does not answer, and one of another incarnation answers with an
  error; either way the coordinator asks the controller instead, which
  tracks replicas' health and waits for one to come online.
- A request on ``PEEK_ROUTES_SUBJECT + ".get"`` is answered with the current
  routes: a coordinator that starts asks instead of waiting for the next
  publication.
- ``stop`` publishes an empty set: the replicas stop with the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg

from loupe.common.aio import cancel_all, wait_event
from loupe.common.logging import get_logger
from loupe.common.transport import publish
from loupe.proto.controller.v1 import controller_pb2

log = get_logger(__name__)

PEEK_ROUTES_SUBJECT = "loupe.controller.v1.peek_routes"

Route = tuple[str, str, int]  # (cluster_id, replica_id, incarnation)


class PeekRoutePublisher:
    def __init__(
        self,
        nc: NatsConnection,
        routes: Callable[[], list[Route]],
        boot_id: str,
        *,
        check_interval: float = 0.5,
        republish_interval: float = 5.0,
    ) -> None:
        self._nc = nc
        self._routes = routes
        self.boot_id = boot_id
        self._check_interval = check_interval
        self._republish_interval = republish_interval
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: Any = None

    async def start(self) -> None:
        if self._task is None:
            self._requests = await self._nc.subscribe(f"{PEEK_ROUTES_SUBJECT}.get", cb=self._answer)
            self._task = asyncio.create_task(self._run(), name="peek-routes")

    def changed(self) -> None:
        """A replica's status changed: publish the routes now if they differ."""
        self._changed.set()

    async def stop(self) -> None:
        if self._task is None:
            return
        await cancel_all([self._task])
        self._task = None
        if self._requests is not None:
            with contextlib.suppress(Exception):
                await self._requests.unsubscribe()
            self._requests = None
        with contextlib.suppress(Exception):
            await self._publish([])

    async def _run(self) -> None:
        last: list[Route] | None = None
        published_at = 0.0
        while True:
            routes = sorted(self._routes())
            now = time.monotonic()
            if routes != last or now - published_at >= self._republish_interval:
                try:
                    await self._publish(routes)
                    last, published_at = routes, now
                except Exception as error:  # a lost connection: the next round tries again
                    log.warning("peek routes not published", error=repr(error))
            await wait_event(self._changed, self._check_interval)
            self._changed.clear()

    async def _answer(self, msg: Msg) -> None:
        with contextlib.suppress(Exception):
            await msg.respond(self._message(sorted(self._routes())).SerializeToString())

    async def _publish(self, routes: list[Route]) -> None:
        await publish(self._nc, PEEK_ROUTES_SUBJECT, self._message(routes))

    def _message(self, routes: list[Route]) -> controller_pb2.PeekRoutes:
        return controller_pb2.PeekRoutes(
            boot_id=self.boot_id,
            routes=[
                controller_pb2.PeekRoute(cluster_id=c, replica_id=r, incarnation=i)
                for c, r, i in routes
            ],
        )
