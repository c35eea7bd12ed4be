"""Statement logging through the whole system: what it costs, and how soon it shows.

With one ``loupe up`` (real NATS, Spark, gRPC), ``ALTER SYSTEM SET
statement_logging_max_sample_rate = 1`` and the throttle's budget raised so
the bucket drops nothing (its drops are reported):

- message: in this process, the CPU to build one statement log message of
  1 to 125 logged SELECTs in columns and as rows (the baseline), and which
  form the coordinator sends at that size (``encode_message``).
- overhead: ``--sessions`` concurrent sessions (a thread and a gRPC channel
  each, on the generated stub so the client stays light) run constant
  SELECTs (``SELECT 1``, ``SELECT 'x' || 2``) for ``--seconds`` a round.
  Rounds alternate the sessions' ``statement_logging_sample_rate`` between
  1.0 and 0.0, ``--rounds`` of each in ABBA order (1,0,0,1,…), so the
  machine's load, and its drift, hits both alike; the median statements/s of
  each and the overhead ``1 - rate1 / rate0``. Target: overhead <= 3 %. Also
  the CPU each statement cost the coordinator and all of Loupe's processes
  (from /proc, the controller's Spark JVM included), a steadier measure on a
  shared machine. Fails if the rounds at 1.0 logged nothing (the executions in
  ``mz_statement_execution_history`` did not grow).
- visibility: ``--samples`` times, ``SELECT 'marker-<uuid>'`` in a session
  at rate 1, then, from a session at rate 0, polls of
  ``mz_internal.mz_recent_activity_log`` until its row with
  ``finished_status = 'success'`` shows; p50 and p99 from the statement's
  return at the client. Target: p50 < 2 x the storage writer's flush
  interval. Baseline: one poll alone (its p50 bounds how finely the delay is
  measured).

A missed target is reported, not an error. Run:
``.venv/bin/python bench/statement_logging.py [--sessions 4] [--seconds 5] [--rounds 5] [--samples 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import astuple, dataclass, field
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from loupe.client import SqlClient
from loupe.common.errors import LoupeError
from loupe.controller.service import ControllerSettings
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.session import SessionManager
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc
from loupe.storage.wire import encode_batch_arrow, encode_batch_bytes
from loupe.testing.system import LoupeUp

OVERHEAD_TARGET = 0.03
VISIBLE_TARGET_FLUSHES = 2.0
STATEMENTS = ("SELECT 1", "SELECT 'x' || 2")
# Enough that the token bucket never runs dry during the benchmark.
DATA_RATE = 10**9
DATA_CREDIT = 10**10
VISIBLE_TIMEOUT_S = 30.0
LOGGED_TIMEOUT_S = 60.0
THROTTLED_METRIC = "loupe_statement_logging_throttled_executions_total"
FLUSH_METRIC = "loupe_storage_flush_duration_seconds"
SPARK_JOBS_METRIC = "loupe_storage_spark_writes_total"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Session:
    """One session on the generated stub: no result conversion, so the client stays cheap."""

    def __init__(self, port: int, name: str) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = sql_pb2_grpc.SqlStub(self.channel)
        opened = self.stub.OpenSession(
            sql_pb2.OpenSessionRequest(application_name=name), timeout=10
        )
        self.session_id = opened.session_id

    def run(self, sql: str) -> None:
        request = sql_pb2.ExecuteRequest(session_id=self.session_id, sql=sql)
        for response in self.stub.Execute(request):
            if response.WhichOneof("kind") == "error":
                raise LoupeError.from_proto(response.error)

    def close(self) -> None:
        self.stub.CloseSession(sql_pb2.CloseSessionRequest(session_id=self.session_id), timeout=5)
        self.channel.close()


@dataclass
class Round:
    rate: float
    statements: int
    seconds: float
    coordinator_cpu: float
    loupe_cpu: float

    @property
    def throughput(self) -> float:
        return self.statements / self.seconds


@dataclass
class Overhead:
    rounds: list[Round] = field(default_factory=list)
    logged: int = 0
    throttled: int = 0

    def at(self, rate: float) -> list[Round]:
        return [r for r in self.rounds if r.rate == rate]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (those that are gone count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def session_pids(root: int) -> list[int]:
    """Every process under ``loupe up``: its services, replicas, nats-server, and the
    controller's Spark JVM (a grandchild), read from /proc now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    pids, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
    return pids


def ready_info(system: LoupeUp, service: str) -> dict:
    return json.loads((system.data_dir / "run" / f"{service}.ready.json").read_text())


def metric(metrics_port: int, sample: str, **labels: str) -> float:
    """The sum of a Prometheus sample's series (``loupe_…_total``, ``…_sum``) at a service,
    of those with ``labels`` (all series if none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    if not values and not labels:  # a labelled series exists once observed
        raise AssertionError(f"the service at :{metrics_port} exports no {sample}")
    return sum(values)


def throttled_executions(metrics_port: int) -> int:
    return int(metric(metrics_port, THROTTLED_METRIC))


@dataclass
class Flushes:
    """The storage writer's flushes so far (the controller's metrics): those that wrote
    rows (data) apart from those that only moved the uppers, and its Spark jobs."""

    data_count: float
    data_seconds: float
    upper_count: float
    upper_seconds: float
    spark_jobs: float

    @classmethod
    def read(cls, system: LoupeUp) -> Flushes:
        port = ready_info(system, "controller")["metrics_port"]

        def flushes(kind: str) -> tuple[float, float]:
            count = metric(port, f"{FLUSH_METRIC}_count", kind=kind)
            return count, metric(port, f"{FLUSH_METRIC}_sum", kind=kind)

        return cls(*flushes("data"), *flushes("upper"), metric(port, SPARK_JOBS_METRIC))

    def since(self, earlier: Flushes) -> Flushes:
        return Flushes(
            *(now - then for now, then in zip(astuple(self), astuple(earlier), strict=True))
        )


def load_round(sessions: list[Session], rate: float, seconds: float, pids: list[int]) -> Round:
    """Every session runs constant SELECTs for ``seconds``, at sample rate ``rate``."""
    for session in sessions:
        session.run(f"SET statement_logging_sample_rate = {rate:.1f}")
    counts = [0] * len(sessions)
    errors: list[BaseException] = []
    start = threading.Barrier(len(sessions) + 1)
    deadline = 0.0

    def work(index: int, session: Session) -> None:
        start.wait()
        done = 0
        try:
            while time.perf_counter() < deadline:
                session.run(STATEMENTS[done % len(STATEMENTS)])
                done += 1
        except BaseException as error:
            errors.append(error)
        counts[index] = done

    threads = [
        threading.Thread(target=work, args=(i, s), daemon=True) for i, s in enumerate(sessions)
    ]
    for thread in threads:
        thread.start()
    coordinator_before, loupe_before = cpu_seconds(pids[:1]), cpu_seconds(pids)
    began = time.perf_counter()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return Round(
        rate,
        sum(counts),
        elapsed,
        cpu_seconds(pids[:1]) - coordinator_before,
        cpu_seconds(pids) - loupe_before,
    )


def executions_logged(monitor: SqlClient) -> int:
    """The logged executions of the load's statements."""
    texts = ", ".join("'" + sql.replace("'", "''") + "'" for sql in STATEMENTS)
    rows = monitor.query(
        "SELECT count(*) FROM mz_internal.mz_statement_execution_history AS e "
        "JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id "
        "JOIN mz_internal.mz_sql_text AS t ON t.sql_hash = p.sql_hash "
        f"WHERE t.sql IN ({texts})"
    )
    return int(rows[0][0])


def measure_overhead(
    system: LoupeUp, monitor: SqlClient, options: argparse.Namespace, flush: float
) -> Overhead:
    assert system.process is not None
    coordinator = ready_info(system, "coordinator")
    # The coordinator first: its CPU is reported on its own too.
    others = [p for p in session_pids(system.process.pid) if p != coordinator["pid"]]
    pids = [coordinator["pid"], *others]
    sessions = [Session(system.sql_port, f"bench-{i}") for i in range(options.sessions)]
    try:
        load_round(sessions, 0.0, 1.0, pids)  # warm up: first plans, connections
        logged_before = executions_logged(monitor)
        throttled_before = throttled_executions(coordinator["metrics_port"])
        result = Overhead()
        for index in range(options.rounds):
            # ABBA: a drift of the machine's speed over the run (its other tenants, the
            # JVM's compiler settling) weighs on both rates alike, not on the later one.
            for rate in (1.0, 0.0) if index % 2 == 0 else (0.0, 1.0):
                result.rounds.append(load_round(sessions, rate, options.seconds, pids))
                # The writer's backlog is flushed before the next round starts.
                time.sleep(flush)
    finally:
        for session in sessions:
            session.close()
    result.throttled = throttled_executions(coordinator["metrics_port"]) - throttled_before
    expected = sum(r.statements for r in result.at(1.0)) - result.throttled
    deadline = time.monotonic() + LOGGED_TIMEOUT_S
    while True:
        result.logged = executions_logged(monitor) - logged_before
        if result.logged >= expected or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def report_overhead(result: Overhead) -> bool:
    """Prints the overhead; False if logging at rate 1 logged nothing."""
    logging, baseline = result.at(1.0), result.at(0.0)
    on = statistics.median(r.throughput for r in logging)
    off = statistics.median(r.throughput for r in baseline)
    overhead = 1 - on / off
    verdict = "PASS" if overhead <= OVERHEAD_TARGET else "MISS"
    print(
        f"overhead  constant SELECTs at rate 1.0   {on:8.0f} stmts/s   "
        f"({on / off:.3f}x rate 0.0: {off:.0f} stmts/s; overhead {overhead * 100:+.1f} %; "
        f"target <= {OVERHEAD_TARGET * 100:.0f} %: {verdict})"
    )
    print(
        "          per round stmts/s at 1.0: "
        + " ".join(f"{r.throughput:.0f}" for r in logging)
        + "; at 0.0: "
        + " ".join(f"{r.throughput:.0f}" for r in baseline)
    )
    for label, pick in (("coordinator", "coordinator_cpu"), ("all of Loupe", "loupe_cpu")):
        cost_on = statistics.median(getattr(r, pick) / r.statements for r in logging)
        cost_off = statistics.median(getattr(r, pick) / r.statements for r in baseline)
        print(
            f"          CPU per statement, {label:<12} {cost_on * 1000:6.3f} ms at 1.0, "
            f"{cost_off * 1000:6.3f} ms at 0.0 ({cost_on / cost_off:.2f}x)"
        )
    run_at_one = sum(r.statements for r in logging)
    print(
        f"          logged {result.logged} executions for {run_at_one} statements run at 1.0; "
        f"throttled {result.throttled}, lost {run_at_one - result.throttled - result.logged}"
    )
    if result.logged <= 0:
        print("          FAILED: logging at rate 1.0 logged nothing")
        return False
    return True


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99)."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def measure_visibility(
    system: LoupeUp, monitor: SqlClient, samples: int
) -> tuple[list[float], list[float]]:
    """(finished -> visible in the activity log, one poll) seconds, per sample."""
    visible, polls = [], []
    with SqlClient("127.0.0.1", system.sql_port, application_name="bench-marker") as marked:
        marked.query("SET statement_logging_sample_rate = 1.0")
        for _ in range(samples):
            sql = f"SELECT 'marker-{uuid.uuid4()}'"
            literal = sql.replace("'", "''")
            poll = (
                "SELECT finished_status FROM mz_internal.mz_recent_activity_log "
                f"WHERE sql = '{literal}'"
            )
            marked.query(sql)
            finished = time.perf_counter()
            while True:
                began = time.perf_counter()
                rows = monitor.query(poll)
                now = time.perf_counter()
                polls.append(now - began)
                if ("success",) in rows:
                    visible.append(now - finished)
                    break
                if now - finished > VISIBLE_TIMEOUT_S:
                    raise TimeoutError(f"{sql} never showed in mz_recent_activity_log")
    return visible, polls


def report_visibility(
    visible: list[float], polls: list[float], flush: float, flushes: Flushes
) -> None:
    p50, p99 = percentiles(visible)
    poll50, poll99 = percentiles(polls)
    bound = VISIBLE_TARGET_FLUSHES * flush
    verdict = "PASS" if p50 < bound else "MISS"
    print(
        f"visible   finished -> in activity log p50 {p50 * 1000:7.0f} ms   p99 {p99 * 1000:7.0f} ms"
        f"   ({p50 / bound:.2f}x {VISIBLE_TARGET_FLUSHES:g} x flush interval {flush:g} s; "
        f"target < 1: {verdict})"
    )
    print(
        f"          baseline: one poll of mz_recent_activity_log p50 {poll50 * 1000:.0f} ms, "
        f"p99 {poll99 * 1000:.0f} ms ({len(polls)} polls for {len(visible)} samples)"
    )
    if flushes.data_count:
        print(
            f"          the storage writer meanwhile: {flushes.data_count:.0f} data flushes, "
            f"{flushes.data_seconds / flushes.data_count * 1000:.0f} ms each on average, "
            f"{flushes.spark_jobs:.0f} Spark jobs"
        )
    if flushes.upper_count:
        print(
            f"          and {flushes.upper_count:.0f} upper-only flushes, "
            f"{flushes.upper_seconds / flushes.upper_count * 1000:.0f} ms each on average"
        )


def message_updates(statements: int) -> list[stmtlog.Update]:
    """The updates of one statement log message of ``statements`` logged SELECTs,
    made by the coordinator's own logger (not started: nothing is published)."""
    config = {"statement_logging_max_sample_rate": "1", "statement_logging_max_data_credit": "1e12"}
    logger = stmtlog.StatementLogger(None, lambda: config, cluster_id=lambda _: "u1")
    session = SessionManager().open(
        application_name="bench", defaults={"statement_logging_sample_rate": "1"}
    )
    for number in range(statements):
        execution = logger.begin(session, f"SELECT {number % 2}", "select")
        assert execution is not None
        execution.strategy = "constant"
        logger.end(execution, stmtlog.SUCCESS)
    return stmtlog.message_updates(logger._queue)


def measure_encoding(sizes: tuple[int, ...] = (1, 25, 50, 125)) -> None:
    """CPU to build one message the coordinator publishes, in columns
    (``encode_batch_arrow``) and as rows (``encode_batch_bytes``), per message size,
    and which of the two it sends (``encode_message``)."""
    for statements in sizes:
        updates = message_updates(statements)
        timings = {}
        for name, encode in (("arrow", encode_batch_arrow), ("rows", encode_batch_bytes)):
            best = float("inf")
            for _ in range(5):
                began = time.thread_time()
                for _ in range(50):
                    encode("b", updates)
                best = min(best, (time.thread_time() - began) / 50)
            timings[name] = best
        sent = "arrow" if stmtlog.in_columns(updates) else "rows"
        print(
            f"message   {statements:3d} statements ({len(updates):3d} updates): columnar"
            f" {timings['arrow'] * 1e6:6.0f} us, rows {timings['rows'] * 1e6:6.0f} us"
            f" (columnar / rows {timings['arrow'] / timings['rows']:.2f}x); sent as {sent}:"
            f" {timings[sent] / statements * 1e6:5.1f} us a statement"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of one round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds at each rate")
    parser.add_argument("--samples", type=int, default=20, help="statements timed to visible")
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=ControllerSettings.storage_flush_interval,
        help="the storage writer's flush interval (default: the controller's)",
    )
    options = parser.parse_args()
    flush = options.flush_interval
    measure_encoding()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(
            Path(scratch) / "data", extra_args=["--storage-flush-interval", str(flush)]
        )
        try:
            system.start()
            system.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
            system.sql(f"ALTER SYSTEM SET statement_logging_target_data_rate = {DATA_RATE}")
            system.sql(f"ALTER SYSTEM SET statement_logging_max_data_credit = {DATA_CREDIT}")
            with SqlClient("127.0.0.1", system.sql_port, application_name="bench") as monitor:
                # The benchmark's own queries stay out of the log.
                monitor.query("SET statement_logging_sample_rate = 0.0")
                overhead = measure_overhead(system, monitor, options, flush)
                ok = report_overhead(overhead)
                flushes = Flushes.read(system)
                visible, polls = measure_visibility(system, monitor, options.samples)
                flushes = Flushes.read(system).since(flushes)
                report_visibility(visible, polls, flush, flushes)
        finally:
            system.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
