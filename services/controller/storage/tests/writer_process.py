"""The storage writer as a process of its own, for the crash tests (``kill -9``).

    python writer_process.py DATA_DIR NATS_URL STREAM_TAG {spark|pyarrow} FLUSH_INTERVAL

Prints ``ready`` once started (after catching up with the stream), then
writes until killed. With ``CRASH_AFTER_APPENDS=n`` in the environment it
kills itself (SIGKILL) right after its n-th append of a non-empty part (its
own status row's aside), i.e. in the middle of a flush, between two shards.
Compaction runs every ``COMPACTION_INTERVAL`` seconds (default 0.5), so
kills also land in compactions. Spark's scratch directory is
``DATA_DIR/spark`` (as the controller's), and its jobs run under a
``SparkSupervisor`` with ``SPARK_JOB_TIMEOUT`` seconds (default 120).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loupe.builtins import MZ_STORAGE_WRITER_STATUS
from loupe.common.logging import configure_logging
from loupe.common.transport import connect
from loupe.controller.storage import (
    ArrowPartStore,
    CompactionPolicy,
    SparkPartStore,
    SparkSupervisor,
    StorageWriter,
    StreamConfig,
)
from loupe.controller.storage import writer as writer_module
from loupe.persist import Append
from loupe.persist.location import default_uris, open_location


def crash_after_appends(count: int) -> None:
    """Make the process kill itself after ``count`` appends of a part.

    The writer appends a flush's shards with one ``append_all``, which SQLite
    commits in one transaction; a consensus without one (PostgreSQL's, NATS
    KV's) makes the writes one by one, so a crash can fall between two
    shards. Here they go one at a time, each its own ``append_all``, so the
    kill lands there.
    """
    original = writer_module.append_all
    done = 0

    def append_all(appends: Sequence[Append]) -> list[Any]:
        nonlocal done
        outcomes = []
        for append in appends:
            outcomes += original([append])
            # The writer's own status row (written at start) is not the test's data.
            appended = not isinstance(outcomes[-1], Exception)
            if (
                appended
                and append.parts
                and append.shard.shard_id != MZ_STORAGE_WRITER_STATUS.shard_id
            ):
                done += 1
                if done >= count:
                    os.kill(os.getpid(), signal.SIGKILL)
        return outcomes

    writer_module.append_all = append_all  # type: ignore[assignment]


async def main(data_dir: str, nats_url: str, tag: str, store: str, interval: str) -> None:
    if "CRASH_AFTER_APPENDS" in os.environ:
        crash_after_appends(int(os.environ["CRASH_AFTER_APPENDS"]))
    nc = await connect(nats_url, name="writer-process")
    blob, consensus = open_location(*default_uris(Path(data_dir)))
    spark = None
    if store == "spark":
        from loupe.common.spark import get_spark

        spark = SparkSupervisor(
            get_spark(scratch_dir=Path(data_dir) / "spark"),
            job_timeout=float(os.environ.get("SPARK_JOB_TIMEOUT", "120")),
        )
    writer = StorageWriter(
        spark,
        blob,
        consensus,
        nc,
        stream=StreamConfig.scoped(tag),
        flush_interval=float(interval),
        compaction_interval=float(os.environ.get("COMPACTION_INTERVAL", "0.5")),
        compaction=CompactionPolicy(max_parts=3),
        part_store=SparkPartStore(spark) if spark else ArrowPartStore(),
    )
    await writer.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    configure_logging(os.environ.get("LOG_LEVEL", "warning"), json=True)
    asyncio.run(main(*sys.argv[1:6]))
