"""What replicas report about compute collections, and the subscribe relay.

``ReplicaReports`` keeps, per collection and replica, the last ``Frontiers``,
``CollectionError`` and (per dataflow) ``Hydration`` of the replica's current
incarnation; the compute controller feeds it only responses that passed
zombie fencing and forgets a replica's reports when a new incarnation
starts (it rebuilds from nothing). A collection's write frontier is the
largest over the replicas: a peek at a time below it can be answered by some
replica now.

``SubscribeRelay`` republishes every replica's ``SubscribeBatch`` for a sink
on ``loupe.controller.v1.subscribe.<sink_id>`` so that subscribers see each
time exactly once: the first batch to cover a time wins, later ones are
dropped, and a batch that overlaps what was published is cut to its new
times.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import Counter

from loupe.common.logging import get_logger
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

SUBSCRIBE_SUBJECT_PREFIX = "loupe.controller.v1.subscribe"
SUBSCRIBE_BATCHES = Counter(
    "loupe_controller_subscribe_batches",
    "Subscribe batches from replicas, by what the relay did with them",
    ["outcome"],
)


def subscribe_subject(sink_id: str) -> str:
    """Where the controller republishes a subscribe's batches."""
    return f"{SUBSCRIBE_SUBJECT_PREFIX}.{sink_id}"


@dataclass
class ReplicaReports:
    """The latest reports of every replica's current incarnation, per collection."""

    # collection id -> replica id -> write frontier
    frontiers: dict[str, dict[str, int]] = field(default_factory=dict)
    # collection id -> replica id -> error
    errors: dict[str, dict[str, common_pb2.Error]] = field(default_factory=dict)
    # dataflow id -> replica id -> hydration
    hydration: dict[str, dict[str, compute_pb2.Hydration]] = field(default_factory=dict)

    def on_frontiers(self, replica_id: str, message: compute_pb2.Frontiers) -> None:
        per_replica = self.frontiers.setdefault(message.collection_id, {})
        if message.empty:
            per_replica.pop(replica_id, None)
            return
        # Within an incarnation frontiers only advance; a reordered message is stale.
        current = per_replica.get(replica_id, 0)
        per_replica[replica_id] = max(current, message.write_frontier)

    def on_error(self, replica_id: str, message: compute_pb2.CollectionError) -> None:
        per_replica = self.errors.setdefault(message.collection_id, {})
        if message.cleared:
            per_replica.pop(replica_id, None)
        else:
            per_replica[replica_id] = message.error

    def on_hydration(self, replica_id: str, message: compute_pb2.Hydration) -> None:
        self.hydration.setdefault(message.dataflow_id, {})[replica_id] = message

    def forget_replica(self, replica_id: str) -> None:
        """A new incarnation (or none) of ``replica_id``: its old reports say nothing now."""
        for reports in (self.frontiers, self.errors, self.hydration):
            for per_replica in reports.values():
                per_replica.pop(replica_id, None)

    def forget_collection(self, collection_id: str, dataflow_id: str | None) -> None:
        self.frontiers.pop(collection_id, None)
        self.errors.pop(collection_id, None)
        if dataflow_id is not None:
            self.hydration.pop(dataflow_id, None)

    def write_frontier(self, collection_id: str) -> int:
        return max(self.frontiers.get(collection_id, {}).values(), default=0)

    def replica_frontiers(self, collection_id: str) -> dict[str, int]:
        return dict(sorted(self.frontiers.get(collection_id, {}).items()))

    def error(self, collection_id: str) -> common_pb2.Error | None:
        """The error some replica reports for the collection (the first by replica id)."""
        per_replica = self.errors.get(collection_id, {})
        return per_replica[min(per_replica)] if per_replica else None

    def hydration_of(self, dataflow_id: str) -> list[compute_pb2.Hydration]:
        """The dataflow's hydration on each replica, by replica id."""
        per_replica = self.hydration.get(dataflow_id, {})
        return [per_replica[r] for r in sorted(per_replica)]


Publish = Callable[[str, compute_pb2.SubscribeBatch], Awaitable[None]]


class SubscribeRelay:
    """Republishes subscribe batches, each time once, whichever replica sent it first."""

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        # sink id -> upper published so far (None: nothing yet)
        self._published: dict[str, int | None] = {}
        self._failed: set[str] = set()

    def open(self, sink_id: str) -> None:
        self._published.setdefault(sink_id, None)

    def close(self, sink_id: str) -> None:
        self._published.pop(sink_id, None)
        self._failed.discard(sink_id)

    async def on_batch(self, batch: compute_pb2.SubscribeBatch) -> None:
        if batch.sink_id not in self._published or batch.sink_id in self._failed:
            SUBSCRIBE_BATCHES.labels(outcome="dropped").inc()
            return
        if batch.HasField("error"):
            self._failed.add(batch.sink_id)
            await self._send(batch, "error")
            return
        published = self._published[batch.sink_id]
        if published is not None and batch.upper <= published:
            SUBSCRIBE_BATCHES.labels(outcome="duplicate").inc()
            return
        if published is not None and batch.lower < published:
            batch = _from(batch, published)
            outcome = "cut"
        else:
            outcome = "published"
        self._published[batch.sink_id] = batch.upper
        await self._send(batch, outcome)

    async def _send(self, batch: compute_pb2.SubscribeBatch, outcome: str) -> None:
        SUBSCRIBE_BATCHES.labels(outcome=outcome).inc()
        await self._publish(subscribe_subject(batch.sink_id), batch)


def _from(batch: compute_pb2.SubscribeBatch, lower: int) -> compute_pb2.SubscribeBatch:
    """``batch`` without its updates before ``lower``."""
    return compute_pb2.SubscribeBatch(
        sink_id=batch.sink_id,
        lower=lower,
        upper=batch.upper,
        updates=[u for u in batch.updates if u.time >= lower],
    )
