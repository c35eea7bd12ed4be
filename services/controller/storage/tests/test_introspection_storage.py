"""Replica introspection through the Spark storage writer: batches, huge counts, retention."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from loupe.builtins import BY_ID, MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS
from loupe.introspection.logs import BY_NAME
from loupe.persist import DIFF_COLUMN
from loupe.proto.storage.v1 import storage_pb2
from loupe.sqltypes import sql_type

pytestmark = [pytest.mark.spark]

ELAPSED = BY_NAME["mz_scheduling_elapsed_raw"]
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]
COLLECTIONS = [BY_ID[ELAPSED.collection_id], BY_ID[OPERATORS.collection_id]]
# A day of one operator's scheduling in nanoseconds: far beyond what could be expanded.
HUGE = 86_400 * 10**9


def updates(collection_id: str, rows: list[tuple[Any, ...]], diffs: list[int]) -> Any:
    collection = BY_ID[collection_id]
    fields = [pa.field(n, sql_type(t).arrow) for n, t in collection.columns]
    arrays = [pa.array([row[i] for row in rows], f.type) for i, f in enumerate(fields)]
    table = pa.Table.from_arrays(
        [*arrays, pa.array(diffs, pa.int64())],
        schema=pa.schema([*fields, pa.field(DIFF_COLUMN, pa.int64())]),
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return storage_pb2.CollectionUpdates(
        collection_id=collection_id, arrow_ipc=sink.getvalue().to_pybytes()
    )


async def test_submitted_batches_are_written_whole_and_counts_stay_consolidated(
    make_writer: Any,
) -> None:
    writer = await make_writer(collections=COLLECTIONS)
    first = [
        updates(ELAPSED.collection_id, [("r1", 1, 7, 0)], [HUGE]),
        updates(OPERATORS.collection_id, [("r1", 1, 7, 0, "Get(t)")], [1]),
    ]
    await writer.submit_collections("intro-1", first)
    await writer.flush()
    assert writer.consolidated(ELAPSED.collection_id) == [(("r1", 1, 7, 0), HUGE)]

    # A snapshot of the next incarnation: retractions and new rows, one batch, one time.
    began = time.monotonic()
    second = [
        updates(ELAPSED.collection_id, [("r1", 1, 7, 0), ("r1", 2, 7, 0)], [-HUGE, HUGE + 5]),
        updates(
            OPERATORS.collection_id,
            [("r1", 1, 7, 0, "Get(t)"), ("r1", 2, 7, 0, "Get(t)")],
            [-1, 1],
        ),
    ]
    await writer.submit_collections("intro-2", second)
    await writer.flush()
    seconds = time.monotonic() - began
    assert writer.consolidated(ELAPSED.collection_id) == [(("r1", 2, 7, 0), HUGE + 5)]
    assert writer.consolidated(OPERATORS.collection_id) == [(("r1", 2, 7, 0, "Get(t)"), 1)]
    shard = writer._shards[ELAPSED.collection_id]
    times = set(shard.read_updates().column("mz_timestamp").to_pylist())
    assert len(times) == 2, times  # each batch at one time
    assert seconds < 60


async def test_introspection_retention_reaches_the_collections(make_writer: Any) -> None:
    from loupe.controller.service import CatalogFollower
    from loupe.proto.catalog.v1 import catalog_pb2

    writer = await make_writer(collections=[*COLLECTIONS, MZ_CLUSTER_REPLICA_INTROSPECTION_STATUS])
    await writer.submit_collections(
        "intro-r", [updates(OPERATORS.collection_id, [("r1", 1, 7, 0, "Get(t)")], [1])]
    )
    await writer.flush()

    class NoReplicas:
        async def apply(self, _clusters: Any, _replicas: Any) -> tuple[list[str], list[str]]:
            return [], []

    follower = CatalogFollower(NoReplicas(), writer)  # type: ignore[arg-type]
    snapshot = catalog_pb2.CatalogSnapshot(epoch=1, timestamp=1)
    snapshot.system_configuration["introspection_retention"] = "60.0s"
    await follower.apply(snapshot)
    results = await writer.compact()
    shard = writer._shards[OPERATORS.collection_id]
    (result,) = [r for r in results if r.shard_id == shard.shard_id]
    assert result.since >= shard.upper - 60_000 - 5_000, (result.since, shard.upper)
