"""Helpers for tests that drive the engine: persist-format updates, one-index dataflows, reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import polars as pl
import pyarrow as pa

from loupe.dataflow import types
from loupe.dataflow.instance import ComputeInstance
from loupe.plan import lir
from loupe.plan.dataflow import (
    BuildDesc,
    ColumnDesc,
    DataflowDescription,
    IndexExport,
    IndexImport,
    Sink,
    SourceImport,
)

Update = tuple[tuple[object, ...], int, int]  # (row, time, diff)


def persist_updates(columns: Sequence[ColumnDesc], updates: Iterable[Update]) -> pa.Table:
    """``updates`` as a persist-format table (the shard's column names, mz_timestamp, mz_diff)."""
    engine_types = [t for _, t in columns]
    schema = types.empty_frame(engine_types).schema
    rows = [[*row, time, diff] for row, time, diff in updates]
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    return types.to_persist(frame, columns)


def index_dataflow(
    dataflow_id: str,
    plan: lir.Node,
    sources: dict[str, Sequence[ColumnDesc]],
    as_of: int,
    index_imports: Sequence[IndexImport] = (),
    sinks: Sequence[Sink] = (),
) -> DataflowDescription:
    """A dataflow building ``plan`` as object ``<id>_view`` with index ``<id>_index`` on it."""
    view = f"{dataflow_id}_view"
    columns = tuple((f"col{i}", t) for i, t in enumerate(plan.types))
    return DataflowDescription(
        dataflow_id,
        source_imports=tuple(
            SourceImport(name, f"shard-{name}", tuple(cols)) for name, cols in sources.items()
        ),
        index_imports=tuple(index_imports),
        objects_to_build=(BuildDesc(view, plan, columns),),
        index_exports=(IndexExport(f"{dataflow_id}_index", view, ()),),
        sink_exports=tuple(sinks),
        as_of=as_of,
    )


def read(instance: ComputeInstance, index_id: str, time: int) -> Counter[tuple[object, ...]]:
    """The rows of an index at ``time`` as a multiset."""
    return Counter(instance.peek(index_id, time).rows())
