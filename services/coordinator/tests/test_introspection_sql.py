"""Replica introspection in SQL (issue 12): resolution, routing, per-replica views.

The replica side (feeding log ids from its in-memory logs) belongs to the
replica; here a ``StorageController`` stands in for it: a dataflow importing a
log id (empty shard id) is fed what the test put in ``logs[log_id]``, as the
targeted replica feeds its logs. Persisted ``mz_internal`` collections are real
shards (``StorageController``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from loupe.coordinator.builtin_views import inline_builtin_views
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.tests.conftest import StorageController, TableHarness, table_system
from loupe.interval import structs
from loupe.introspection.logs import BY_NAME
from loupe.persist import Shard, open_location
from loupe.persist.shard import arrow_schema

ELAPSED = BY_NAME["mz_scheduling_elapsed_raw"]
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]


class LogController(StorageController):
    """A controller whose replica feeds ``logs[log_id]`` (row -> count) to log imports."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.logs: dict[str, Counter] = {}

    def snapshot(self, collection_id: str, timestamp: int) -> pa.Table:
        variant = next((v for v in BY_NAME.values() if v.log_id == collection_id), None)
        if variant is None and collection_id.startswith("u"):
            # A user table: its shard, as a replica reads it.
            blob, consensus = open_location(self.blob_uri, self.consensus_uri)
            contents = Shard(collection_id, blob, consensus).snapshot(timestamp)
            return contents.append_column(
                "mz_timestamp", pa.array([timestamp] * contents.num_rows, pa.uint64())
            )
        if variant is None:
            return super().snapshot(collection_id, timestamp)
        names = [*variant.column_names, "mz_timestamp", "mz_diff"]
        return pa.Table.from_pylist(
            [
                dict(zip(names, [*structs(list(row)), timestamp, count], strict=True))
                for row, count in self.logs.get(collection_id, Counter()).items()
            ],
            schema=arrow_schema(list(variant.columns)),
        )

    def log_imports(self) -> list[Any]:
        """The source imports of the last dataflow created."""
        from loupe.plan.codec import dataflow_from_proto

        return list(dataflow_from_proto(self.created[-1].dataflow).source_imports)


@pytest.fixture
async def logs(nats_url: str, data_dir: Path) -> AsyncIterator[TableHarness]:
    async with table_system(nats_url, data_dir, controller_class=LogController) as harness:
        controller = harness.controller
        assert isinstance(controller, LogController)
        controller.logs[ELAPSED.log_id] = Counter({(7, 0): 100, (7, 1): 50, (8, 0): 5})
        controller.logs[OPERATORS.log_id] = Counter(
            {(7, 0, "Join"): 1, (7, 1, "Join"): 1, (8, 0, "Map"): 1}
        )
        yield harness


def _sql(sql: str, **options: Any) -> str:
    return inline_builtin_views(parse_one(sql).expression, **options).sql()  # type: ignore[attr-defined]


def test_introspection_views_inline_recursively_for_their_schema() -> None:
    mz = _sql("SELECT * FROM mz_introspection.mz_scheduling_elapsed")
    assert "mz_introspection.mz_scheduling_elapsed_raw" in mz
    assert "mz_scheduling_elapsed_per_worker" not in mz.replace("AS mz_scheduling", "")
    assert "replica_id" not in mz
    internal = _sql("SELECT * FROM mz_internal.mz_scheduling_elapsed")
    assert "mz_internal.mz_scheduling_elapsed_raw" in internal
    assert "replica_id, incarnation" in internal


def test_unqualified_introspection_views_need_the_search_path() -> None:
    assert "mz_scheduling_elapsed_raw" not in _sql("SELECT * FROM mz_scheduling_elapsed")
    found = _sql("SELECT * FROM mz_scheduling_elapsed", search_path=["mz_introspection"])
    assert "mz_introspection.mz_scheduling_elapsed_raw" in found
    shadowed = _sql(
        "SELECT * FROM mz_scheduling_elapsed",
        search_path=["public", "mz_introspection"],
        is_relation=lambda name: name == "public.mz_scheduling_elapsed",
    )
    assert "mz_scheduling_elapsed_raw" not in shadowed


async def test_introspection_reads_the_only_replica_of_the_session_cluster(
    logs: TableHarness,
) -> None:
    session = await logs.session()
    rows = await logs.rows(
        session, "SELECT id, elapsed_ns FROM mz_introspection.mz_scheduling_elapsed ORDER BY id"
    )
    assert [(i, int(e)) for i, e in rows] == [(7, 150), (8, 5)]
    controller = logs.controller
    assert isinstance(controller, LogController)
    [source] = controller.log_imports()
    assert (source.id, source.shard_id) == (ELAPSED.log_id, "")
    quickstart = logs.service.coordinator.state.cluster("quickstart")  # type: ignore[attr-defined]
    [replica] = logs.service.coordinator.state.replicas_of(quickstart.id)  # type: ignore[attr-defined]
    peek = controller.peeks[-1]
    assert (peek.cluster_id, peek.replica_id) == (quickstart.id, replica.id)


async def test_raw_logs_join_catalog_and_user_relations(logs: TableHarness) -> None:
    session = await logs.session()
    await logs.tag(session, "CREATE TABLE names (id uint8, label text)")
    await logs.tag(session, "INSERT INTO names VALUES (7, 'seven')")
    rows = await logs.rows(
        session,
        "SELECT DISTINCT n.label, o.name, c.name FROM mz_introspection.mz_dataflow_operators o "
        "JOIN names n ON n.id = o.id JOIN mz_catalog.mz_clusters c ON c.name = 'quickstart'",
    )
    assert rows == [("seven", "Join", "quickstart")]
    await logs.tag(session, "SET search_path = mz_introspection, public")
    rows = await logs.rows(session, "SELECT count(*) FROM mz_dataflow_operators_per_worker")
    assert rows == [(3,)]
