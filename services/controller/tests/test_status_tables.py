"""``ReplicaStatusTables``' metrics rows over real shards: how often they are written."""

from __future__ import annotations

from typing import Any

from loupe.builtins import MZ_CLUSTER_REPLICA_METRICS, MZ_CLUSTER_REPLICA_METRICS_HISTORY
from loupe.controller.status import ReplicaMetrics, ReplicaStatusTables


class Seconds:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def current(writer: Any) -> list[tuple[Any, ...]]:
    found = writer.consolidated(MZ_CLUSTER_REPLICA_METRICS.id)
    assert all(count == 1 for _, count in found), found
    return sorted(tuple(row) for row, _ in found)


async def test_the_current_metrics_row_changes_at_most_once_an_interval(arrow_writer: Any) -> None:
    """A heartbeat a second must not make a storage write a second: the first heartbeat's
    metrics show at once, later ones at most every ``metrics_interval``."""
    seconds = Seconds()
    tables = ReplicaStatusTables(
        arrow_writer, metrics_interval=5.0, metrics_history_interval=10.0, monotonic=seconds
    )
    tables.set_metrics("r1", ReplicaMetrics(1, 100, 0))
    await arrow_writer.flush()
    assert current(arrow_writer) == [("r1", 0, 1, 100, 0)]
    for second in range(1, 5):  # four heartbeats within the interval, each different
        seconds.now = 100.0 + second
        tables.set_metrics("r1", ReplicaMetrics(1, 100 + second, 0))
    await arrow_writer.flush()
    assert current(arrow_writer) == [("r1", 0, 1, 100, 0)]
    seconds.now = 105.0
    tables.set_metrics("r1", ReplicaMetrics(2, 200, 0))  # due: the latest metrics go in
    tables.set_metrics("r2", ReplicaMetrics(3, 300, 0))  # another replica's first: at once
    await arrow_writer.flush()
    assert current(arrow_writer) == [("r1", 0, 2, 200, 0), ("r2", 0, 3, 300, 0)]
    seconds.now = 111.0
    tables.set_metrics("r1", ReplicaMetrics(2, 200, 0))  # due, but unchanged: nothing
    tables.remove("r2")
    await arrow_writer.flush()
    assert current(arrow_writer) == [("r1", 0, 2, 200, 0)]
    history = arrow_writer.consolidated(MZ_CLUSTER_REPLICA_METRICS_HISTORY.id)
    assert sorted((row[0], row[3]) for row, _ in history) == [("r1", 100), ("r1", 200), ("r2", 300)]
