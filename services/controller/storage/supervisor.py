"""Keeps the storage writer's Spark session usable: detects a dead one and builds a new one.

A long-running controller meets Spark failures a flush retry cannot fix: the
JVM killed (OOM killer, an operator), its scratch directory deleted by a
temp cleaner, a Py4J connection gone, a job that never ends. Without help
every later flush fails the same way and builtin collections stop advancing.

Every Spark job of the writer (flush writes, compaction merges) runs through
``SparkSupervisor.run``, in a thread of the supervisor, with a deadline:

- a job that fails is diagnosed: an error that says the session is gone (Py4J
  network errors, a stopped SparkContext) or a probe that finds the JVM
  exited, the scratch directory gone or the JVM not answering marks the
  session broken; so do ``FAILURES_BEFORE_RESTART`` consecutive failures of
  any other kind (a session that fails every job is unusable whatever the
  reason). A full disk is never the session's fault: it is left to the writer;
- a job past ``job_timeout`` is cancelled (``cancelAllJobs``); if it still
  has not ended after ``cancel_grace`` the JVM is killed and the session
  marked broken.

The job fails either way (the writer retries the flush: its batches stay
unacknowledged in JetStream, and shard progress says what is applied, so
nothing is lost or doubled). The next job builds a new session first (a new
JVM, scratch emptied), after a backoff if building failed last time.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from loupe.common import spark as spark_session
from loupe.common.logging import get_logger
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics

log = get_logger(__name__)

T = TypeVar("T")

# Consecutive failed jobs (of any kind but a full disk) after which the session is rebuilt.
FAILURES_BEFORE_RESTART = 5
# Backoff between attempts to build a session, when building fails.
RESTART_BACKOFF_S = (1.0, 30.0)
# Jobs at once: a flush write and a compaction merge may overlap.
JOB_THREADS = 2

# Errors (class names or message fragments) that mean the session itself is gone.
_DEAD_SESSION_MARKERS = (
    "Py4JNetworkError",
    "Answer from Java side is empty",
    "Error while sending or receiving",
    "JAVA_GATEWAY_EXITED",
    "SparkContext was shut down",
    "Cannot call methods on a stopped SparkContext",
    "SparkContext has been shutdown",
    "stopped SparkContext",
)
_DEAD_SESSION_ERRORS = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError)


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it, Java included) is "no space left on device"."""
    return any(
        (isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT))
        or "No space left on device" in str(current)
        or "database or disk is full" in str(current)
        for current in _causes(error)
    )


def dead_session_error(error: BaseException) -> str | None:
    """What in ``error`` (or its causes) says the Spark session is gone, or None."""
    for current in _causes(error):
        if isinstance(current, _DEAD_SESSION_ERRORS):
            return f"{type(current).__name__}: {current}"
        text = f"{type(current).__name__}: {current}"
        if any(marker in text for marker in _DEAD_SESSION_MARKERS):
            return text.splitlines()[0][:500]
    return None


def _causes(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not known for known in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


class SparkUnavailable(RuntimeError):
    """No usable Spark session right now (being rebuilt, or building it failed)."""


class SparkJobTimeout(TimeoutError):
    """A Spark job ran past the supervisor's deadline (and was cancelled or killed)."""


@dataclass(frozen=True)
class SparkHealth:
    """What the supervisor knows of its session, for the status relation and logs."""

    status: str  # "running" | "restarting"
    incarnation: int
    pid: int | None
    restarts: int
    reason: str | None


class SparkSupervisor:
    """Owns the writer's Spark session: runs its jobs with a deadline, rebuilds it when dead.

    ``spark`` is the session to start with (None: build one at the first job);
    sessions are the process's (``loupe.common.spark``), so a rebuild
    replaces the session for everyone in the process.
    """

    def __init__(
        self,
        spark: Any = None,
        *,
        job_timeout: float = 120.0,
        cancel_grace: float = 10.0,
        metrics: StorageWriterMetrics = METRICS,
    ) -> None:
        self.job_timeout = job_timeout
        self.cancel_grace = cancel_grace
        self.metrics = metrics
        self._lock = threading.Lock()
        self._session = spark
        self._broken: str | None = None
        self._restarts = 0
        self._reason: str | None = None
        self._consecutive_failures = 0
        self._next_attempt = 0.0
        self._backoff = RESTART_BACKOFF_S[0]
        self._executor = ThreadPoolExecutor(JOB_THREADS, thread_name_prefix="spark-job")
        self._closed = False
        self.metrics.spark_healthy.set(1)

    # -- state ------------------------------------------------------------------------

    def health(self) -> SparkHealth:
        return SparkHealth(
            status="restarting" if self._broken else "running",
            incarnation=spark_session.spark_incarnation(),
            pid=spark_session.spark_pid(self._session) if self._session is not None else None,
            restarts=self._restarts,
            reason=self._broken or self._reason,
        )

    @property
    def restarts(self) -> int:
        return self._restarts

    def session(self) -> Any:
        """The usable session: built (again) first if there is none or it is broken."""
        with self._lock:
            if self._closed:
                # Stopping: a job still running (a compaction) must not build a JVM
                # that would outlive the process.
                raise SparkUnavailable("the storage writer is stopping")
            if self._session is not None and self._broken is None:
                return self._session
            if time.monotonic() < self._next_attempt:
                raise SparkUnavailable(
                    f"the Spark session is being rebuilt ({self._broken or 'not started'})"
                )
            return self._rebuild()

    # -- running jobs -----------------------------------------------------------------

    def run(self, job: Callable[[Any], T], what: str, *, timeout: float | None = None) -> T:
        """Run ``job(spark)`` with a deadline (``timeout``, default ``job_timeout``);
        diagnose its failure (see the module docstring)."""
        timeout = self.job_timeout if timeout is None else timeout
        spark = self.session()
        future = self._executor.submit(job, spark)
        try:
            result = future.result(timeout=timeout)
        except FutureTimeout:
            self._timed_out(spark, future, what, timeout)
            raise SparkJobTimeout(
                f"the Spark job {what} ran past {timeout:g}s and was cancelled"
            ) from None
        except Exception as error:
            self._job_failed(spark, error, what)
            raise
        self._consecutive_failures = 0
        return result

    def _job_failed(self, spark: Any, error: BaseException, what: str) -> None:
        if is_disk_full(error):
            return  # not the session's fault: the writer reports it
        problem = dead_session_error(error) or spark_session.spark_problem(spark)
        self._consecutive_failures += 1
        if problem is None and self._consecutive_failures >= FAILURES_BEFORE_RESTART:
            problem = (
                f"{self._consecutive_failures} Spark jobs failed in a row,"
                f" the last with {type(error).__name__}: {str(error).splitlines()[0][:300]}"
                if str(error)
                else f"{self._consecutive_failures} Spark jobs failed in a row"
            )
        if problem is not None:
            self._mark_broken(spark, problem, cause=what)

    def _timed_out(self, spark: Any, future: Future[Any], what: str, timeout: float) -> None:
        """Cancel a job past its deadline; kill the JVM if cancelling does not end it."""
        log.warning("storage_spark_job_timed_out", job=what, timeout_s=timeout)
        self.metrics.spark_job_timeouts.inc()
        # If the JVM does not answer this, the job is not ending either (checked next).
        with contextlib.suppress(Exception):
            spark_session.call_with_timeout(spark.sparkContext.cancelAllJobs, self.cancel_grace)
        try:
            future.result(timeout=self.cancel_grace)
            return  # it finished after all
        except FutureTimeout:
            pass
        except Exception:
            return  # cancelled: the session is fine
        problem = f"a Spark job ({what}) hung past {timeout:g}s and did not cancel"
        self._mark_broken(spark, problem, cause=what)
        # The hung call ends when its JVM does; the next job gets a new session.
        spark_session.kill_spark_jvm(spark)

    def _mark_broken(self, spark: Any, problem: str, *, cause: str) -> None:
        with self._lock:
            if spark is not self._session or self._broken is not None:
                return  # another job saw it first (or it was rebuilt meanwhile)
            self._broken = problem
            self._reason = problem
        self.metrics.spark_healthy.set(0)
        log.error("storage_spark_unhealthy", reason=problem, job=cause, restarts=self._restarts)

    # -- rebuilding ------------------------------------------------------------------

    def _rebuild(self) -> Any:
        """Build a new session (under the lock); raise SparkUnavailable if that fails."""
        reason = self._broken or "first session"
        began = time.monotonic()
        old_executor = self._executor
        self._executor = ThreadPoolExecutor(JOB_THREADS, thread_name_prefix="spark-job")
        old_executor.shutdown(wait=False, cancel_futures=True)
        try:
            if self._session is None and self._broken is None:
                session = spark_session.get_spark()
            else:
                session = spark_session.restart_spark()
        except Exception as error:
            self._next_attempt = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, RESTART_BACKOFF_S[1])
            self._broken = self._broken or "no Spark session"
            self.metrics.spark_restart_failures.inc()
            log.exception("storage_spark_restart_failed", reason=reason, retry_in_s=self._backoff)
            raise SparkUnavailable(f"cannot build a Spark session: {error}") from error
        restarted = self._session is not None
        self._session = session
        self._broken = None
        self._consecutive_failures = 0
        self._backoff = RESTART_BACKOFF_S[0]
        self._next_attempt = 0.0
        self.metrics.spark_healthy.set(1)
        if restarted:
            self._restarts += 1
            self.metrics.spark_restarts.inc()
            log.warning(
                "storage_spark_restarted",
                reason=reason,
                incarnation=spark_session.spark_incarnation(),
                pid=spark_session.spark_pid(session),
                restarts=self._restarts,
                seconds=round(time.monotonic() - began, 1),
            )
        return session

    def close(self) -> None:
        """No more jobs, and no more sessions built (the process is stopping)."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
