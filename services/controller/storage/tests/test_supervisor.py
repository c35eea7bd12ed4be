"""The Spark supervisor: a dead, stopped, scratch-less or hung session is found and replaced.

The scenarios break a real Spark session, so they run in a process of their
own (``supervisor_process.py``); this process's session is never touched.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loupe.controller.storage.supervisor import dead_session_error, is_disk_full

SCRIPT = Path(__file__).with_name("supervisor_process.py")


def run_scenario(scratch: Path, scenario: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(scratch), scenario],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {step["step"]: step for step in steps}


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_stopped_context_and_a_deleted_scratch_dir_are_replaced(tmp_path: Path) -> None:
    steps = run_scenario(tmp_path / "spark", "dead")
    healthy = steps["healthy"]
    assert (healthy["result"], healthy["restarts"], healthy["incarnation"]) == (3, 0, 1)
    # The job that meets the dead session fails (the writer retries it) ...
    stopped = steps["context stopped"]
    assert stopped["error"] is not None
    assert stopped["status"] == "restarting"
    assert "stopped" in stopped["reason"]
    # ... and the next one runs on a new session, in a new JVM.
    after = steps["after the stop"]
    assert (after["result"], after["status"], after["restarts"]) == (3, "running", 1)
    assert after["incarnation"] == 2
    assert after["pid"] != healthy["pid"]
    deleted = steps["scratch deleted"]
    assert deleted["error"] is not None
    assert "scratch directory" in deleted["reason"] or "temporary directory" in deleted["reason"]
    after = steps["after the deletion"]
    assert (after["result"], after["status"], after["restarts"]) == (3, "running", 2)
    assert (tmp_path / "spark" / "local").is_dir(), "the scratch directory is made again"


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_hung_job_is_cancelled_and_a_frozen_jvm_replaced(tmp_path: Path) -> None:
    steps = run_scenario(tmp_path / "spark", "hung")
    healthy = steps["healthy"]
    # A job past the deadline is cancelled; cancelling works, so the session stays.
    hung = steps["job never ends"]
    assert hung["error"] == "SparkJobTimeout"
    assert (hung["status"], hung["restarts"], hung["pid"]) == ("running", 0, healthy["pid"])
    assert steps["after the cancel"]["result"] == 3
    # A JVM that answers nothing: the job times out, cancelling fails, the JVM is killed.
    frozen = steps["jvm frozen"]
    assert frozen["error"] == "SparkJobTimeout"
    assert frozen["status"] == "restarting"
    assert "hung" in frozen["reason"]
    after = steps["after the freeze"]
    assert (after["result"], after["status"], after["restarts"]) == (3, "running", 1)
    assert after["pid"] != healthy["pid"]


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_killing_a_replaced_sessions_jvm_leaves_the_new_one_running(tmp_path: Path) -> None:
    """A job that hung on a session already replaced times out later: the supervisor kills
    that session's JVM, never the replacement's (PySpark's gateway is per process and
    points to the newest)."""
    steps = run_scenario(tmp_path / "spark", "replaced")
    pids = steps["pids"]
    assert pids["first"] != pids["second"]
    assert steps["second"]["result"] == 3
    after = steps["the first one's JVM killed"]
    assert (after["result"], after["error"], after["pid"]) == (3, None, pids["second"])


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_compaction_pass_ends_when_its_spark_session_is_lost(tmp_path: Path) -> None:
    """The merges of a pass do not go on into a new, cold JVM ahead of the flushes that
    wait for it: the pass ends at the job that found the session dead (here one job per
    shard), the next pass compacts every shard on the new one."""
    steps = run_scenario(tmp_path / "spark", "compaction")
    cut = steps["the JVM killed"]
    assert (cut["merged"], cut["failed"]) == ([], ["t900"]), cut
    assert cut["parts"] == [4, 4, 4]
    after = steps["the next pass"]
    assert after["merged"] == ["t900", "t901", "t902"], after
    assert after["failed"] == [], after
    assert all(parts < 4 for parts in after["parts"]), after
    assert after["restarts"] == 1


def chained(cause: BaseException) -> RuntimeError:
    """A flush's error raised while handling ``cause``."""
    error = RuntimeError("the flush failed")
    error.__cause__ = cause
    return error


def test_errors_that_mean_the_session_is_gone() -> None:
    """Py4J network errors and a stopped context say so; a Java exception alone, or a
    full disk, does not (a full disk is the writer's to report, not a reason to restart)."""
    from py4j.protocol import Py4JNetworkError

    assert dead_session_error(Py4JNetworkError("Answer from Java side is empty"))
    assert dead_session_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    stopped = RuntimeError(
        "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext"
    )
    assert dead_session_error(stopped)
    assert dead_session_error(chained(BrokenPipeError(errno.EPIPE, "Broken pipe"))), "a cause"
    assert dead_session_error(RuntimeError("AnalysisException: column x not found")) is None
    full = OSError(errno.ENOSPC, "No space left on device")
    assert dead_session_error(full) is None
    assert is_disk_full(full)
