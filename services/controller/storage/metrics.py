"""Prometheus metrics of the storage writer (process-wide, like the registry)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Histogram


@dataclass(frozen=True)
class StorageWriterMetrics:
    flushes: Counter
    rows_written: Counter
    flush_duration: Histogram
    spark_jobs: Counter
    replayed_batches: Counter
    failures: Counter


METRICS = StorageWriterMetrics(
    flushes=Counter(
        "loupe_storage_flushes",
        "Flushes of the storage writer, by outcome (ok, partial, failed).",
        ["outcome"],
    ),
    rows_written=Counter(
        "loupe_storage_rows_written",
        "Updates made durable in builtin collections, by collection id.",
        ["collection"],
    ),
    flush_duration=Histogram(
        "loupe_storage_flush_duration_seconds",
        "Time of one flush: Spark write of the parts plus the compare-and-appends.",
        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    ),
    spark_jobs=Counter(
        "loupe_storage_spark_writes",
        "Spark write jobs run by the storage writer (one per write group with updates).",
    ),
    replayed_batches=Counter(
        "loupe_storage_replayed_batches",
        "Append batches seen before and therefore not applied again.",
    ),
    failures=Counter(
        "loupe_storage_flush_failures",
        "Failed steps of a flush, by kind (spark_write, upper_mismatch, append, state).",
        ["kind"],
    ),
)
