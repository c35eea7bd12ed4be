"""What the sequencers share: the coordinator's clients, stores and catalog view.

One ``SequencerContext`` per coordinator, built by it at construction; every
sequencer function takes it as its first argument (``ctx``) instead of the
coordinator, so a sequencer sees the shared state it needs and nothing of the
session layer (Materialize's sequencers are methods of its ``Coordinator``;
here the state they touch is this one object).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from nats.aio.client import Client as NatsConnection

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.transport import NatsServiceClient
from loupe.coordinator import admission
from loupe.coordinator.admission import AdmissionQueue
from loupe.coordinator.catalog_relations import CatalogRelationsWriter
from loupe.coordinator.catalog_state import CatalogState, ClusterInfo
from loupe.coordinator.compaction import ReadHolds
from loupe.coordinator.follower import CatalogFollower
from loupe.coordinator.sequencer.peek import PeekReplies, PeekRoutes
from loupe.coordinator.table_store import TableStore, TimestampOracle
from loupe.proto.common.v1 import common_pb2

if TYPE_CHECKING:
    from loupe.coordinator.compute import Compute
    from loupe.coordinator.coordinator import CoordinatorConfig

log = get_logger(__name__)

T = TypeVar("T")


class SequencerContext:
    """The coordinator's shared state, as the sequencers see it.

    ``catalog`` and ``controller`` are the NATS clients of those services;
    ``follower`` keeps the catalog snapshot (``state``) current; ``oracle`` and
    ``tables`` are the timestamp oracle and the user tables' shards;
    ``compute`` runs reads and maintains views and indexes; ``collections``
    says where each builtin collection lives (``ListCollections``).
    """

    def __init__(
        self,
        *,
        config: CoordinatorConfig,
        connection: NatsConnection,
        catalog: NatsServiceClient,
        controller: NatsServiceClient,
        writer: CatalogRelationsWriter,
        follower: CatalogFollower,
        oracle: TimestampOracle,
        tables: TableStore,
        compute: Callable[[SequencerContext], Compute],
    ) -> None:
        self.config = config
        self.connection = connection
        self.catalog = catalog
        self.controller = controller
        self.writer = writer
        self.follower = follower
        self.oracle = oracle
        self.tables = tables
        self.collections: dict[str, common_pb2.CollectionMetadata] = {}
        # This coordinator's DDL runs one statement at a time, the others wait in
        # order; peeks in flight to each cluster are bounded (``peek_queue``).
        self.ddl = AdmissionQueue(
            "ddl", capacity=1, max_waiting=config.max_queued_statements, what="DDL"
        )
        self._peek_queues: dict[str, AdmissionQueue] = {}
        # Rows replicas send straight here (started with the coordinator).
        self.peek_replies = PeekReplies(connection)
        # The replicas a peek may go to straight from here (the controller publishes them).
        self.peek_routes = PeekRoutes(connection)
        # Fire-and-forget work (canceling a peek, reaping sessions), canceled at stop.
        self.background: set[asyncio.Task[Any]] = set()
        # What compute compaction must not pass (``compaction``).
        self.read_holds = ReadHolds()
        # Brings mz_catalog up to date with DDL commits storage has not confirmed yet.
        # Compute takes this context (it sequences views, indexes and reads with it).
        self.compute = compute(self)

    @property
    def state(self) -> CatalogState:
        """The newest catalog snapshot this coordinator knows."""
        return self.follower.state

    async def refreshed_state(self) -> CatalogState:
        """A fresh catalog snapshot; the known one when the catalog cannot be read."""
        try:
            return await self.follower.refresh()
        except LoupeError as error:
            log.warning("could not read the catalog", error=error.message)
            return self.state

    async def resolving(self, attempt: Callable[[CatalogState], T]) -> T:
        """``attempt`` with the known catalog, then once more with a fresh one on 42P01."""
        try:
            return attempt(self.state)
        except LoupeError as error:
            if error.code != SqlState.UNDEFINED_TABLE:
                raise
            # Another coordinator may have created the table a moment ago.
            return attempt(await self.refreshed_state())

    async def cluster(self, name: str) -> ClusterInfo | None:
        """The cluster called ``name``, asking the catalog when this coordinator does not know it.

        Another coordinator may have created it a moment ago.
        """
        cluster = self.state.cluster(name)
        if cluster is None:
            cluster = (await self.refreshed_state()).cluster(name)
        return cluster

    def peek_queue(self, cluster_id: str) -> AdmissionQueue:
        """The queue of peeks to ``cluster_id``: one per cluster, so that reads waiting
        for a cluster whose replicas are down never hold up reads of another."""
        queue = self._peek_queues.get(cluster_id)
        if queue is None:
            queue = self._peek_queues[cluster_id] = AdmissionQueue(
                f"peek:{cluster_id}",
                capacity=self.config.peek_concurrency,
                max_waiting=self.config.max_queued_statements,
                what=f"a peek on cluster {cluster_id}",
            )
        return queue

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[Any]:
        """Run ``coroutine`` in the background; the coordinator cancels it at stop.

        It outlives the statement that started it: the statement's deadline
        (``admission.STATEMENT_DEADLINE``) does not apply to it.
        """
        context = contextvars.copy_context()
        context.run(admission.STATEMENT_DEADLINE.set, None)
        task = asyncio.get_running_loop().create_task(coroutine, context=context)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task
