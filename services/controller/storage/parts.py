"""How the storage writer turns Arrow tables into parts: with Spark, or with pyarrow.

A *part store* writes parts: each call writes, for one write group, one
directory per shard (``<path>/mz_shard=<shard id>``), each a part:

- ``write_flush``: a flush's updates, all at one timestamp;
- ``merge``: a compaction's updates of several shards, each already forwarded
  to its since and consolidated by the compactor (``merged_updates``), at
  their own timestamps.

``SparkPartStore`` is the writer's: one Spark job per call, however many
shards it writes. ``ArrowPartStore`` does the same with pyarrow in this
process; it is the baseline of ``bench/storage_writer.py`` and lets tests run
the writer without a JVM. Both fsync what they wrote: a part must survive a
crash once a shard points at it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from loupe.controller.storage.supervisor import SparkSupervisor
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN
from loupe.persist.location import fsync_tree
from loupe.storage.schema import SHARD_COLUMN, WriteGroup, ingest_type

# Flushes up to this many rows are written by one Spark task.
SINGLE_TASK_ROWS = 1_000_000
# The one data file of a part written by ``ArrowPartStore``.
ARROW_FILE = "part-00000.parquet"


class PartStore(Protocol):
    """Writes flush output and compacted parts (see the module docstring)."""

    name: str

    def write_flush(
        self, group: WriteGroup, tables: Mapping[str, pa.Table], timestamp: int, path: str
    ) -> None: ...

    def merge(self, group: WriteGroup, tables: Mapping[str, pa.Table], path: str) -> None:
        """Write each collection's table (ingest types, ``mz_timestamp``, ``mz_diff``)
        as the part ``<path>/mz_shard=<shard id>``; empty tables write nothing."""
        ...


def ingest_schema(columns: Sequence[tuple[str, str]], *, timestamp: bool = True) -> pa.Schema:
    """The Arrow schema of a shard's updates in the types Spark takes (uint64 -> int64)."""
    fields = [pa.field(name, ingest_type(kind)) for name, kind in columns]
    if timestamp:
        fields.append(pa.field(TIMESTAMP_COLUMN, pa.int64()))
    fields.append(pa.field(DIFF_COLUMN, pa.int64()))
    return pa.schema(fields)


def ingest_updates(
    columns: Sequence[tuple[str, str]], updates: pa.Table, *, timestamp: bool = True
) -> pa.Table:
    """A shard's updates (its Arrow schema) cast to ``ingest_schema``."""
    schema = ingest_schema(columns, timestamp=timestamp)
    return updates.select(schema.names).cast(schema)


def rows_in(path: str) -> int:
    """Rows in the Parquet files of a part directory (from their footers)."""
    return sum(
        pq.read_metadata(os.path.join(path, name)).num_rows
        for name in os.listdir(path)
        if name.endswith(".parquet") and not name.startswith((".", "_"))
    )


def part_size(path: str) -> int:
    """Bytes of the data files of a local part directory (0 when not local)."""
    if not os.path.isdir(path):
        return 0
    return sum(
        entry.stat().st_size
        for entry in os.scandir(path)
        if entry.is_file() and not entry.name.startswith((".", "_"))
    )


class SparkPartStore:
    """The writer's part store: every call is one Spark job, run by a ``SparkSupervisor``
    (with a deadline; a dead session is rebuilt before the next job)."""

    name = "spark"

    def __init__(self, spark: Any) -> None:
        """``spark``: a ``SparkSupervisor``, or a session to supervise."""
        self.supervisor = spark if isinstance(spark, SparkSupervisor) else SparkSupervisor(spark)

    @property
    def spark(self) -> Any:
        """The current session (built again first if the last one died)."""
        return self.supervisor.session()

    def close(self) -> None:
        """The writer is stopping: jobs still running end, no session is built again."""
        self.supervisor.close()

    def write_flush(
        self, group: WriteGroup, tables: Mapping[str, pa.Table], timestamp: int, path: str
    ) -> None:
        self._write(group, tables, timestamp, path, "flush write")

    def merge(self, group: WriteGroup, tables: Mapping[str, pa.Table], path: str) -> None:
        self._write(group, tables, None, path, "compaction merge")

    def _write(
        self,
        group: WriteGroup,
        tables: Mapping[str, pa.Table],
        timestamp: int | None,
        path: str,
        what: str,
    ) -> None:
        tables = {cid: table for cid, table in tables.items() if table.num_rows}
        if not tables:
            return
        group = group.narrowed(tables)
        table = group.wide_table(tables, timestamp)

        def job(spark: Any) -> None:
            frame = spark.createDataFrame(table, schema=group.spark_schema())
            # One task, so one file per part, and no shuffle: measured fastest up to
            # a few hundred thousand rows in local mode. Bigger writes keep their
            # input partitions (a part is then a directory of several files).
            if table.num_rows <= SINGLE_TASK_ROWS:
                frame = frame.coalesce(1)
            frame.write.partitionBy(SHARD_COLUMN).parquet(path)

        self.supervisor.run(job, what)
        # Spark does not fsync; the parts must survive a crash once appended.
        fsync_tree(path)


class ArrowPartStore:
    """The same parts written with pyarrow/polars in this process (baseline, tests)."""

    name = "pyarrow"

    def write_flush(
        self, group: WriteGroup, tables: Mapping[str, pa.Table], timestamp: int, path: str
    ) -> None:
        stamped = {
            cid: table.append_column(
                TIMESTAMP_COLUMN, pa.repeat(pa.scalar(timestamp, pa.int64()), table.num_rows)
            )
            for cid, table in tables.items()
        }
        self._write_parts(group, stamped, path)

    def merge(self, group: WriteGroup, tables: Mapping[str, pa.Table], path: str) -> None:
        self._write_parts(group, tables, path)

    def _write_parts(self, group: WriteGroup, tables: Mapping[str, pa.Table], path: str) -> None:
        wrote = False
        for collection in group.collections:
            table = tables.get(collection.id)
            if table is None or table.num_rows == 0:
                continue
            names = [*collection.column_names, TIMESTAMP_COLUMN, DIFF_COLUMN]
            self._write(table.select(names), f"{path}/{SHARD_COLUMN}={collection.shard_id}")
            wrote = True
        if wrote:
            fsync_tree(path)

    @staticmethod
    def _write(table: pa.Table, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, ARROW_FILE), "wb") as handle:
            pq.write_table(table, handle)
