"""The controller's storage writer: every builtin collection, written with Spark."""

from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.controller.storage.schema import WriteGroup, plan_write_groups, spark_type
from loupe.controller.storage.writer import StorageWriter

__all__ = [
    "METRICS",
    "StorageWriter",
    "StorageWriterMetrics",
    "WriteGroup",
    "plan_write_groups",
    "spark_type",
]
