"""Prometheus metrics of the storage writer (process-wide, like the registry)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram


@dataclass(frozen=True)
class StorageWriterMetrics:
    flushes: Counter
    rows_written: Counter
    flush_duration: Histogram
    spark_jobs: Counter
    replayed_batches: Counter
    failures: Counter
    disk_full: Counter
    disk_full_now: Gauge
    bad_batches: Counter
    received_batches: Counter
    unacked_batches: Gauge
    compactions: Counter
    compaction_duration: Histogram
    compaction_jobs: Counter
    retracted_rows: Counter
    spark_healthy: Gauge
    spark_restarts: Counter
    spark_restart_failures: Counter
    spark_job_timeouts: Counter


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
        "Time of one flush: Spark write of the parts plus the compare-and-appends, by"
        " kind (data: it wrote rows; upper: it only moved the uppers).",
        ["kind"],
        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    ),
    spark_jobs=Counter(
        "loupe_storage_spark_writes",
        "Spark write jobs run by the storage writer (one per data flush: every builtin"
        " collection is in one write group).",
    ),
    replayed_batches=Counter(
        "loupe_storage_replayed_batches",
        "Append batches JetStream had already stored (same batch id): not applied again.",
    ),
    failures=Counter(
        "loupe_storage_flush_failures",
        "Failed steps of a flush, by kind (spark_write, upper_mismatch, append, state).",
        ["kind"],
    ),
    disk_full=Counter(
        "loupe_storage_disk_full",
        "Flush steps that failed because the blob or consensus store is out of space.",
    ),
    disk_full_now=Gauge(
        "loupe_storage_disk_full_now",
        "1 while the last flush failed for lack of space (updates wait unacknowledged), else 0.",
    ),
    bad_batches=Counter(
        "loupe_storage_bad_batches",
        "Batches in the writer's stream that cannot be applied (logged and skipped).",
    ),
    received_batches=Counter(
        "loupe_storage_received_batches",
        "Update batches the writer received from its JetStream consumer.",
    ),
    unacked_batches=Gauge(
        "loupe_storage_unacked_batches",
        "Batches received and not yet durable in every shard (unacknowledged in JetStream).",
    ),
    compactions=Counter(
        "loupe_storage_compactions",
        "Compaction merges of one shard each, by outcome (ok, lost, failed).",
        ["outcome"],
    ),
    compaction_duration=Histogram(
        "loupe_storage_compaction_duration_seconds",
        "Time of one compaction job: read and consolidate its shards' parts, write them "
        "with Spark, compare-and-set each shard.",
        buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
    ),
    compaction_jobs=Counter(
        "loupe_storage_compaction_jobs",
        "Part store (Spark) jobs run by compaction: one per pass step and write group"
        " (and million rows read), however many collections it merges.",
    ),
    retracted_rows=Counter(
        "loupe_storage_retention_retractions",
        "Rows retracted by retention: history older than its collection's retention, and"
        " statement log sessions, prepared statements and SQL text nothing refers to any more.",
        ["collection"],
    ),
    spark_healthy=Gauge(
        "loupe_storage_spark_healthy",
        "1 while the storage writer's Spark session is usable, 0 from when it is found dead"
        " (JVM exited, scratch directory gone, Py4J errors, a hung job) until it is rebuilt.",
    ),
    spark_restarts=Counter(
        "loupe_storage_spark_restarts",
        "Spark sessions the storage writer built to replace a dead or unusable one.",
    ),
    spark_restart_failures=Counter(
        "loupe_storage_spark_restart_failures",
        "Attempts to build a new Spark session that failed (retried with backoff).",
    ),
    spark_job_timeouts=Counter(
        "loupe_storage_spark_job_timeouts",
        "Spark jobs of the storage writer that ran past storage_spark_job_timeout.",
    ),
)
