"""``hydration_history_retention`` through the Spark storage writer.

Ended object episodes older than the retention expire in the writer's
compaction (``expire_by``), ended replica episodes in the controller
(``HydrationTables.expire``); open ones stay, however old, and ending one
later writes no negative count.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from loupe.builtins import MZ_OBJECT_HYDRATION_HISTORY, MZ_REPLICA_HYDRATION_HISTORY
from loupe.controller.hydration import DataflowInfo, HydrationTables
from loupe.controller.service import CatalogFollower
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.compute.v1 import compute_pb2

pytestmark = [pytest.mark.spark]

HISTORIES = [MZ_REPLICA_HYDRATION_HISTORY, MZ_OBJECT_HYDRATION_HISTORY]


class NoReplicas:
    hydration: Any = None

    async def apply(self, _clusters: Any, _replicas: Any) -> tuple[list[str], list[str]]:
        return [], []


async def test_ended_episodes_expire_open_ones_stay(make_writer: Any) -> None:
    writer = await make_writer(collections=HISTORIES)
    now = dt.datetime.now(dt.UTC)
    at = [now - dt.timedelta(hours=3)]
    tables = HydrationTables(
        writer,
        dataflows_of=lambda _cluster: {"d": DataflowInfo(("o",))},
        clock=lambda: at[0],
    )
    # Incarnation 1 hydrated the object and ended three hours ago; incarnation 2
    # started then and has been hydrating since.
    tables.incarnation_started("r1", "c1", 1)
    installed_ms = int(at[0].timestamp() * 1000)
    report = compute_pb2.Hydration(
        dataflow_id="d",
        hydrated=True,
        export_ids=["o"],
        installed_at_ms=installed_ms,
        hydration_time_ns=5_000_000,
        records_done=7,
    )
    tables.on_hydration("r1", "c1", 1, report)
    tables.incarnation_started("r1", "c1", 2)
    tables.on_hydration(
        "r1", "c1", 2, compute_pb2.Hydration(dataflow_id="d", installed_at_ms=installed_ms)
    )
    tables.write()
    await writer.flush()
    replica_rows = writer.consolidated(MZ_REPLICA_HYDRATION_HISTORY.id)
    assert sorted((r[7], r[6]) for r, _ in replica_rows) == [(1, "hydrated"), (2, "hydrating")]

    snapshot = catalog_pb2.CatalogSnapshot(epoch=1, timestamp=1)
    snapshot.system_configuration["hydration_history_retention"] = "3600s"
    compute = NoReplicas()
    compute.hydration = tables
    await CatalogFollower(compute, writer).apply(snapshot)  # type: ignore[arg-type]
    assert tables.retention_ms == 3_600_000
    # Object episodes expire in the writer's compaction, replica episodes in the controller.
    at[0] = now
    assert await tables.expire() == 1
    tables.write()
    await writer.flush()
    await writer.compact()

    def kept(collection: Any) -> list[tuple[Any, ...]]:
        rows = writer.consolidated(collection.id)
        assert all(count == 1 for _, count in rows), rows
        return [row for row, _ in rows]

    assert [(r[7], r[6]) for r in kept(MZ_REPLICA_HYDRATION_HISTORY)] == [(2, "hydrating")]
    assert [(r[7], r[6]) for r in kept(MZ_OBJECT_HYDRATION_HISTORY)] == [(2, "hydrating")]

    # The open episode ends now: its open row is retracted, the ended one stays.
    at[0] = now
    tables.incarnation_ended("r1")
    tables.write()
    await writer.flush()
    (replica,) = kept(MZ_REPLICA_HYDRATION_HISTORY)
    assert (replica[7], replica[6], replica[3]) == (2, "interrupted", now)
    (obj,) = kept(MZ_OBJECT_HYDRATION_HISTORY)
    assert (obj[7], obj[6], obj[5]) == (2, "interrupted", now)
    await writer.compact()
    assert len(kept(MZ_REPLICA_HYDRATION_HISTORY)) == 1
