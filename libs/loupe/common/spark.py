"""The one Spark session of a process.

Local mode by default (``local[2]``), any master URL at scale
(``LOUPE_SPARK_MASTER``). Spark binds 127.0.0.1 unless told otherwise, so it
never picks a foreign interface, and runs Python workers on this interpreter.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_lock = threading.Lock()
_session: Any = None


def get_spark(master: str | None = None, app_name: str = "loupe") -> Any:
    global _session
    with _lock:
        if _session is not None:
            return _session
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        master = master or os.environ.get("LOUPE_SPARK_MASTER", "local[2]")
        builder = (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
            .config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
            .config(
                "spark.sql.sources.commitProtocolClass",
                "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol",
            )
            .config("spark.driver.memory", os.environ.get("LOUPE_SPARK_DRIVER_MEMORY", "1g"))
        )
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("ERROR")
        return _session


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
