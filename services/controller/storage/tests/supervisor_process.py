"""A ``SparkSupervisor`` in a process of its own, whose Spark session a test may break.

    python supervisor_process.py SCRATCH_DIR {dead|hung|replaced|compaction}

Runs one scenario against a real Spark session and prints one JSON object per
step (what happened, the session's pid and incarnation, restarts), so the
test's own session is never touched. ``dead``: the SparkContext stopped
under the supervisor, then its scratch directory deleted. ``hung``: a job
that never ends (cancelled at the deadline), then a JVM frozen with SIGSTOP
(killed at the deadline). ``replaced``: a session replaced by a new one, then
the old one's JVM killed (as a job hung on it is, at its deadline) while the
new one runs jobs. ``compaction``: the JVM killed before a compaction pass over
three shards (the pass ends at the first, flushes come first), then a pass
on the new session.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from loupe.builtins import BuiltinCollection
from loupe.common.logging import configure_logging
from loupe.common.spark import (
    get_spark,
    kill_spark_jvm,
    restart_spark,
    spark_incarnation,
    spark_pid,
)
from loupe.controller.storage import CompactionPolicy, Compactor, SparkPartStore, SparkSupervisor
from loupe.persist import LocalBlob, Shard, SqliteConsensus
from loupe.persist.shard import arrow_schema


def count_rows(spark: Any) -> int:
    """A job that goes through the scratch directory (an Arrow table shipped to the JVM)."""
    return int(spark.createDataFrame(pa.table({"x": [1, 2, 3]})).count())


def sleep_forever(spark: Any) -> None:
    spark.sparkContext.parallelize([1], 1).map(lambda _: time.sleep(600)).collect()


def step(name: str, supervisor: SparkSupervisor, job: Any, timeout: float | None = None) -> None:
    began = time.monotonic()
    try:
        outcome: Any = supervisor.run(job, name, timeout=timeout)
        error = None
    except Exception as failure:
        outcome, error = None, type(failure).__name__
    health = supervisor.health()
    report = {
        "step": name,
        "result": outcome,
        "error": error,
        "seconds": round(time.monotonic() - began, 1),
        "status": health.status,
        "reason": health.reason,
        "restarts": health.restarts,
        "incarnation": spark_incarnation(),
        "pid": spark_pid(),
    }
    print(json.dumps(report), flush=True)


def dead(scratch: Path) -> None:
    supervisor = SparkSupervisor(get_spark(scratch_dir=scratch), job_timeout=120)
    step("healthy", supervisor, count_rows)
    supervisor.session().sparkContext.stop()
    step("context stopped", supervisor, count_rows)
    step("after the stop", supervisor, count_rows)
    shutil.rmtree(scratch)
    step("scratch deleted", supervisor, count_rows)
    step("after the deletion", supervisor, count_rows)


def hung(scratch: Path) -> None:
    # Ordinary jobs get the default (generous: a loaded machine is slow), the
    # broken ones a short deadline.
    supervisor = SparkSupervisor(get_spark(scratch_dir=scratch), job_timeout=120, cancel_grace=5)
    step("healthy", supervisor, count_rows)
    step("job never ends", supervisor, sleep_forever, timeout=5)
    step("after the cancel", supervisor, count_rows)
    pid = spark_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    step("jvm frozen", supervisor, count_rows, timeout=5)
    step("after the freeze", supervisor, count_rows)


def replaced(scratch: Path) -> None:
    first = get_spark(scratch_dir=scratch)
    supervisor = SparkSupervisor(first, job_timeout=120)
    step("first", supervisor, count_rows)
    first_pid = spark_pid(first)
    second = restart_spark()
    supervisor = SparkSupervisor(second, job_timeout=120)
    step("second", supervisor, count_rows)
    kill_spark_jvm(first)  # a job that hung on the first session reached its deadline
    step("the first one's JVM killed", supervisor, count_rows)
    print(json.dumps({"step": "pids", "first": first_pid, "second": spark_pid(second)}))


def compaction(scratch: Path) -> None:
    supervisor = SparkSupervisor(get_spark(scratch_dir=scratch), job_timeout=120)
    blob = LocalBlob(scratch.parent / "blob")
    consensus = SqliteConsensus(scratch.parent / "consensus.sqlite")
    columns = (("id", "text"), ("value", "int8"))
    shards = []
    for index in range(3):
        # No history kept: every part but the last lies below the since, to be merged.
        collection = BuiltinCollection(
            f"t90{index}", "test", f"churn{index}", columns, "controller", retention_ms=0
        )
        shard = Shard(collection.shard_id, blob, consensus)
        shard.ensure(list(columns))
        for ts in range(4):
            rows = {"id": [f"r{ts}"], "value": [ts], "mz_timestamp": [ts], "mz_diff": [1]}
            shard.compare_and_append(pa.table(rows, schema=arrow_schema(list(columns))), ts, ts + 1)
        shards.append((shard, collection))
    # A job per shard, to see the pass end at the first.
    policy = CompactionPolicy(max_parts=2, merge_batch_rows=1)
    compactor = Compactor(SparkPartStore(supervisor), blob, policy)
    kill_spark_jvm(supervisor.session())
    for name in ("the JVM killed", "the next pass"):
        results = compactor.compact_all(shards, interval=3600)
        parts = [len(shard.state().parts) for shard, _ in shards]
        health = supervisor.health()
        print(
            json.dumps(
                {
                    "step": name,
                    "merged": [r.shard_id for r in results if r.merges],
                    "failed": [r.shard_id for r in results if r.errors],
                    "parts": parts,
                    "restarts": health.restarts,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    configure_logging("warning", json=True)
    scenarios = {"dead": dead, "hung": hung, "replaced": replaced, "compaction": compaction}
    scenarios[sys.argv[2]](Path(sys.argv[1]))
