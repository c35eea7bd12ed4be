"""The controller's storage writer: every builtin collection, written with Spark.

Input through JetStream (``wire``, ``inbox``), flushes and their
compare-and-appends (``writer``), parts written by Spark or pyarrow
(``parts``), compaction and retention (``compaction``).
"""

from loupe.controller.storage.compaction import CompactionPolicy, CompactionResult, Compactor
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.controller.storage.parts import ArrowPartStore, PartStore, SparkPartStore
from loupe.controller.storage.supervisor import (
    SparkJobTimeout,
    SparkSupervisor,
    SparkUnavailable,
    is_disk_full,
)
from loupe.controller.storage.writer import StorageWriter
from loupe.storage.schema import WriteGroup, plan_write_groups, spark_type
from loupe.storage.wire import (
    PROGRESS_KEY,
    STREAM_EPOCH_KEY,
    BadBatch,
    StreamConfig,
    UnknownCollection,
    decode_batch,
    decode_collections,
    encode_arrow,
    encode_batch,
)

__all__ = [
    "METRICS",
    "PROGRESS_KEY",
    "STREAM_EPOCH_KEY",
    "ArrowPartStore",
    "BadBatch",
    "CompactionPolicy",
    "CompactionResult",
    "Compactor",
    "PartStore",
    "SparkJobTimeout",
    "SparkPartStore",
    "SparkSupervisor",
    "SparkUnavailable",
    "StorageWriter",
    "StorageWriterMetrics",
    "StreamConfig",
    "UnknownCollection",
    "WriteGroup",
    "decode_batch",
    "decode_collections",
    "encode_arrow",
    "encode_batch",
    "is_disk_full",
    "plan_write_groups",
    "spark_type",
]
