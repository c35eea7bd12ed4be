"""DDL answers once committed; the catalog relations catch up with it (issue 11, item 4).

A DDL statement's success is its catalog commit. Bringing ``mz_catalog``
(the catalog relations in storage) up to date is what the coordinator does
next, and the statement waits for it a while (``catalog_relations_wait``,
within its ``statement_timeout``) so that a SELECT right after sees the
change. When the storage writer is slow or down, the statement answers
anyway, with a NOTICE, and this catch-up keeps following the commit in the
background, with growing pauses, until storage has it: the relations become
consistent eventually, the way they would on the next commit, but without
waiting for one. One catch-up runs at a time and always aims at the newest
commit (following it covers every earlier one). While it runs, the gauge
``loupe_coordinator_catalog_relations_behind`` is 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.coordinator import metrics
from loupe.coordinator.admission import RETRY_PAUSE, backoff
from loupe.coordinator.catalog_state import snapshot_key
from loupe.coordinator.follower import CatalogFollower
from loupe.proto.catalog.v1 import catalog_pb2

log = get_logger(__name__)

# The longest pause between two attempts to bring storage up to date.
CATCH_UP_PAUSE_CAP = 5.0


class RelationsCatchUp:
    """Follows DDL commits into storage until it has them, however long that takes."""

    def __init__(
        self,
        follower: CatalogFollower,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[Any]],
    ) -> None:
        self._follower = follower
        self._spawn = spawn
        self._target: catalog_pb2.CatalogSnapshot | None = None
        self._task: asyncio.Task[Any] | None = None
        # The last failure while catching up (for the NOTICE), None once caught up.
        self.last_error: str | None = None

    @property
    def behind(self) -> bool:
        """Whether a catch-up is still running (storage lacks a commit)."""
        return self._task is not None and not self._task.done()

    def follow(self, snapshot: catalog_pb2.CatalogSnapshot) -> asyncio.Task[Any]:
        """Bring storage up to ``snapshot`` (or newer); the task ends once it is there."""
        if self._target is None or snapshot_key(snapshot) > snapshot_key(self._target):
            self._target = snapshot
        if not self.behind:
            self._task = self._spawn(self._run())
        assert self._task is not None
        return self._task

    async def _run(self) -> None:
        metrics.CATALOG_RELATIONS_BEHIND.set(1)
        delay = RETRY_PAUSE
        try:
            while True:
                target = self._target
                assert target is not None
                try:
                    await self._follower.after_commit(target)
                except LoupeError as error:
                    if self.last_error is None:
                        log.warning(
                            "catalog relations are behind the catalog; catching up",
                            error=error.message,
                        )
                    self.last_error = error.message
                    metrics.CATALOG_RELATIONS_RETRIES.inc()
                    await asyncio.sleep(delay)
                    delay = backoff(delay, CATCH_UP_PAUSE_CAP)
                    continue
                if self._target is target:
                    if self.last_error is not None:
                        log.info("catalog relations caught up with the catalog")
                    self.last_error = None
                    return
        finally:
            metrics.CATALOG_RELATIONS_BEHIND.set(0)
