"""The one Spark session of a process.

Local mode by default (``local[2]``), any master URL at scale
(``LOUPE_SPARK_MASTER``). Spark binds 127.0.0.1 unless told otherwise, so it
never picks a foreign interface, and runs Python workers on this interpreter.

In local mode, local files are written through ``spark_local_fs``: Hadoop's
local file system without a forked ``chmod`` per file.

A long-running process (the controller) gives Spark a scratch directory of
its own (``scratch_dir``, under its data directory): Spark's local dir, the
driver JVM's ``java.io.tmpdir``, the warehouse and the checkpoint directory
all live there, never in a shared temporary folder a cleaner may empty.

A session can die under the process (its JVM killed, its scratch directory
deleted). ``spark_problem`` tells whether the current one is still usable and
``restart_spark`` replaces it: PySpark caches its gateway, context and
session in class attributes, so those are cleared before a new JVM starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loupe.common import spark_local_fs
from loupe.common.logging import get_logger

log = get_logger(__name__)

_lock = threading.Lock()
_session: Any = None
# The scratch directory of the current session (None: Spark's defaults).
_scratch: Path | None = None
# Sessions built by this process so far (1 after the first ``get_spark``).
_incarnation = 0
# id(session) -> its JVM process (a Popen; None where the JVM was not started here).
_jvms: dict[int, Any] = {}
# Scratch subdirectories: Spark's local dir, the JVM's java.io.tmpdir,
# the SQL warehouse and the checkpoint directory.
SCRATCH_DIRS = ("local", "tmp", "warehouse", "checkpoints")
# How long stopping a session may take; a dead gateway can hang on it.
STOP_TIMEOUT_S = 10.0
# How long the liveness probe (one Py4J call) may take.
PROBE_TIMEOUT_S = 10.0


def get_spark(
    master: str | None = None, app_name: str = "loupe", scratch_dir: str | Path | None = None
) -> Any:
    """The process's Spark session, built at the first call.

    ``scratch_dir`` (first call only) is where Spark keeps its temporary
    files; it is emptied and created when a session is built there.
    """
    global _session, _scratch, _incarnation
    with _lock:
        if _session is not None:
            return _session
        if scratch_dir is not None:
            _scratch = Path(scratch_dir)
        _session = _build(master, app_name, _scratch)
        _incarnation += 1
        return _session


def _build(master: str | None, app_name: str, scratch: Path | None) -> Any:
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
    if master.startswith("local") and spark_local_fs.wanted():
        # Local files (parts, scratch) without a chmod process per file created.
        jar = spark_local_fs.local_fs_jar()
        if jar is not None:
            builder = builder.config("spark.driver.extraClassPath", str(jar)).config(
                "spark.hadoop.fs.file.impl", spark_local_fs.LOCAL_FS_CLASS
            )
    if scratch is not None:
        dirs = _make_scratch(scratch)
        builder = (
            builder.config("spark.local.dir", str(dirs["local"]))
            .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={dirs['tmp']}")
            .config("spark.sql.warehouse.dir", str(dirs["warehouse"]))
        )
    session = builder.getOrCreate()
    from pyspark import SparkContext

    # PySpark keeps one gateway per process (a class attribute, replaced by the next
    # build): remember which JVM is this session's, so killing it never kills a later one.
    _jvms[id(session)] = getattr(SparkContext._gateway, "proc", None)
    session.sparkContext.setLogLevel("ERROR")
    if scratch is not None:
        session.sparkContext.setCheckpointDir(str(scratch / "checkpoints"))
    return session


def _make_scratch(scratch: Path) -> dict[str, Path]:
    """Empty (what a dead session left) and create the scratch directories."""
    dirs = {name: scratch / name for name in SCRATCH_DIRS}
    for path in dirs.values():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
    return dirs


def spark_incarnation() -> int:
    """How many sessions this process has built (each restart adds one)."""
    return _incarnation


def spark_scratch_dir() -> Path | None:
    return _scratch


def spark_pid(session: Any = None) -> int | None:
    """The pid of the session's JVM (the gateway process), if this process started it."""
    session = session if session is not None else _session
    if session is None:
        return None
    proc = _jvm_of(session)
    return proc.pid if proc is not None else None


def spark_problem(session: Any = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the session is unusable (its JVM exited, its scratch directory is gone, it does
    not answer or is stopped), or None if it looks healthy."""
    session = session if session is not None else _session
    if session is None:
        return "no Spark session"
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is not None:
        return f"the Spark JVM (pid {proc.pid}) exited with {proc.returncode}"
    context = session.sparkContext
    if getattr(context, "_jsc", None) is None:
        return "the SparkContext is stopped"
    if _scratch is not None:
        for name in SCRATCH_DIRS:
            if not (_scratch / name).is_dir():
                return f"the Spark scratch directory {_scratch / name} is gone"
    temp_dir = getattr(context, "_temp_dir", None)
    if temp_dir and not os.path.isdir(temp_dir):
        return f"PySpark's temporary directory {temp_dir} is gone"
    try:
        stopped = call_with_timeout(lambda: context._jsc.sc().isStopped(), timeout)
    except TimeoutError:
        return f"the Spark JVM did not answer within {timeout:g}s"
    except Exception as error:
        return f"the Spark JVM does not answer: {type(error).__name__}: {error}"
    if stopped:
        return "the SparkContext is stopped"
    return None


def restart_spark(master: str | None = None, app_name: str = "loupe") -> Any:
    """Replace the session (dead or not) with a new one in a new JVM, same scratch dir."""
    global _session, _incarnation
    with _lock:
        began = time.monotonic()
        if _session is not None:
            _discard(_session)
            _session = None
        discarded = time.monotonic()
        _session = _build(master, app_name, _scratch)
        _incarnation += 1
        log.warning(
            "spark_session_replaced",
            incarnation=_incarnation,
            discard_s=round(discarded - began, 1),
            build_s=round(time.monotonic() - discarded, 1),
        )
        return _session


def _jvm_of(session: Any) -> Any:
    """The JVM process (``Popen``) of ``session`` (None: the current one), if this process
    started it; None for a session already discarded (its JVM is gone)."""
    session = session if session is not None else _session
    if session is None:
        return None
    if id(session) in _jvms:
        return _jvms[id(session)]
    if session is not _session:
        return None
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def kill_spark_jvm(session: Any = None) -> None:
    """SIGKILL the JVM of ``session`` (default: the current session's; a hung one) and reap it.

    A job that hung on a session since replaced must kill that session's JVM,
    never the replacement's, which the process's gateway now points to.
    """
    proc = _jvm_of(session)
    if proc is not None and proc.poll() is None:
        proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=STOP_TIMEOUT_S)


def _discard(session: Any) -> None:
    """Stop ``session`` best-effort (bounded), kill its JVM and forget PySpark's caches."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    gateway = SparkContext._gateway

    def stop() -> None:
        with contextlib.suppress(Exception):
            session.stop()

    # A dead or hung gateway fails or hangs here: its JVM is killed below.
    stopper = threading.Thread(target=stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(STOP_TIMEOUT_S)
    kill_spark_jvm(session)
    _jvms.pop(id(session), None)
    # A stop that hung ends with its JVM; let it finish before the next session is
    # built, or its last steps (clearing PySpark's active context) would hit that one.
    stopper.join(STOP_TIMEOUT_S)
    if gateway is not None:
        with contextlib.suppress(Exception):
            call_with_timeout(gateway.shutdown, STOP_TIMEOUT_S)
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def call_with_timeout(call: Callable[[], Any], timeout: float) -> Any:
    """``call()`` in a daemon thread; TimeoutError if it has not returned in ``timeout`` s.

    A call that times out keeps running in its thread (a Py4J call cannot be
    interrupted); the caller is expected to kill what it waits on.
    """
    outcome: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="spark-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout:g}s")
    if failure:
        raise failure[0]
    return outcome[0] if outcome else None


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None


def shutdown_spark() -> None:
    """Stop this process's session for good (bounded) and make sure its JVM is gone.

    For a service that exits: the JVM would otherwise outlive the process for
    as long as its shutdown takes, or for good if the stop hangs.
    """
    global _session
    with _lock:
        if _session is not None:
            _discard(_session)
            _session = None
