"""Whole-system compute benchmarks: fast-path peeks and inserts to visible changes, via gRPC.

With one ``loupe up`` (its default cluster ``quickstart``, one replica) and
one ``SqlClient`` session:

- fast-path peek: a table ``t (k int, v text)`` of ``--rows`` rows with a
  default index, then ``--peeks`` times ``SELECT * FROM t WHERE k = <n>``;
  p50 and p99. Each must be a fast-path peek of the index: the benchmark
  listens on NATS to the replicas' compute commands and fails unless every
  SELECT sent exactly one ``Peek`` of the index and no ``CreateDataflow``
  (a transient dataflow means the slow path). Baseline: ``SELECT 1`` through
  the same session (the fixed cost of gRPC and the coordinator). Target p50
  < 5 ms. Each round also replays the SELECT's hops over NATS: the oracle's
  ``ReadTimestamp``, ``Controller.Peek`` (coordinator -> controller ->
  replica and back: the way a peek goes when the coordinator has no route to
  a replica), and the same ``Peek`` sent to the replica's command subject
  directly (the way the coordinator sends it when the controller's
  ``PeekRoutes`` name the replica: ``Peek.direct``). It prints how many of
  the SELECTs went directly, and "the rest" of a SELECT beyond ``SELECT 1``
  and the hops it took.
- insert to visible: ``--inserts`` times, a one-row INSERT into a table
  with an indexed view ``SELECT k % 10, count(*) … GROUP BY 1``, then
  SELECTs on the view until the new count shows; p50 and p99. Baseline:
  the same INSERT and a count on a plain table (no view, no index).

Run: ``.venv/bin/python bench/compute_system.py [--rows 10000] [--peeks 200] [--inserts 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg

from loupe.client import SqlClient
from loupe.common.nats_server import free_port
from loupe.common.transport import NatsServiceClient
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.testing.system import LoupeUp

CATALOG_SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
PEEK_P50_TARGET_S = 0.005
# Rows per INSERT statement while loading the table.
LOAD_BATCH = 1000
COMMAND_SUBJECTS = "loupe.compute.v1.*.command"
RESPONSE_SUBJECTS = "loupe.compute.v1.*.response"
# How long a SELECT may keep not seeing an INSERT before the round fails.
VISIBLE_TIMEOUT_S = 30.0


class CommandTap:
    """Counts the compute commands the controller sends to replicas, from a NATS subscription.

    This is how the benchmark knows the coordinator took the fast path: a
    fast-path SELECT is one ``Peek`` of the index and nothing else.
    """

    def __init__(self, nats_url: str) -> None:
        self.nats_url = nats_url
        self.kinds: Counter[str] = Counter()
        self.peek_targets: Counter[str] = Counter()
        # The latest Peek of each target, and where it went: (subject, incarnation).
        self.last_peeks: dict[str, compute_pb2.Peek] = {}
        self.last_replicas: dict[str, tuple[str, int]] = {}
        # Peeks the tap sent a replica itself, by uuid: their responses resolve them.
        self._answers: dict[str, asyncio.Future[compute_pb2.PeekResponse]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._connection: Any = None

    def __enter__(self) -> CommandTap:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError(f"could not subscribe to {COMMAND_SUBJECTS} at {self.nats_url}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._connection is not None:
            asyncio.run_coroutine_threadsafe(self._connection.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._subscribe())
        self._loop.run_forever()

    async def _subscribe(self) -> None:
        self._connection = await nats.connect(self.nats_url, name="bench-compute-system")
        await self._connection.subscribe(COMMAND_SUBJECTS, cb=self._received)
        await self._connection.subscribe(RESPONSE_SUBJECTS, cb=self._responded)
        await self._connection.flush()
        self._ready.set()

    async def _received(self, message: Msg) -> None:
        command = compute_pb2.ComputeCommand.FromString(message.data)
        kind = command.WhichOneof("kind") or "?"
        with self._lock:
            self.kinds[kind] += 1
            if kind == "peek":
                if command.peek.direct:
                    self.kinds["direct peek"] += 1  # sent by the coordinator itself
                self.peek_targets[command.peek.target_id] += 1
                self.last_peeks[command.peek.target_id] = command.peek
                self.last_replicas[command.peek.target_id] = (message.subject, command.incarnation)

    async def _responded(self, message: Msg) -> None:
        if not self._answers:
            return
        response = compute_pb2.ComputeResponse.FromString(message.data)
        if response.WhichOneof("kind") != "peek_response":
            return
        answer = self._answers.pop(response.peek_response.uuid, None)
        if answer is not None and not answer.done():
            answer.set_result(response.peek_response)

    async def peek_replica(
        self, replica: tuple[str, int], peek: compute_pb2.Peek
    ) -> compute_pb2.PeekResponse:
        """Send ``peek`` to a replica's incarnation, on its command subject, itself; its
        ``PeekResponse``.

        The controller sees the response too and drops it (no peek of its has
        that uuid): this is the hop a coordinator addressing replicas directly
        would make, without the controller's two.
        """
        answer = self._answers[peek.uuid] = self._loop.create_future()
        subject, incarnation = replica
        command = compute_pb2.ComputeCommand(incarnation=incarnation, peek=peek)
        await self._connection.publish(subject, command.SerializeToString())
        return await asyncio.wait_for(answer, 10)

    def call(self, work: Callable[[Any], Any]) -> Any:
        """Run ``work(connection)`` (a coroutine function) on the tap's loop; its result."""
        return asyncio.run_coroutine_threadsafe(work(self._connection), self._loop).result(60)

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        with self._lock:
            return Counter(self.kinds), Counter(self.peek_targets)


def timed(client: SqlClient, sql: str) -> tuple[float, list[tuple]]:
    began = time.perf_counter()
    rows = client.query(sql)
    return time.perf_counter() - began, rows


def load_table(client: SqlClient, name: str, rows: int) -> None:
    client.query(f"CREATE TABLE {name} (k int, v text)")
    for start in range(0, rows, LOAD_BATCH):
        values = ", ".join(f"({k}, 'v{k}')" for k in range(start, min(start + LOAD_BATCH, rows)))
        client.query(f"INSERT INTO {name} VALUES {values}")


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in seconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


@dataclass
class PeekSamples:
    """Per round, interleaved so the machine's load hits all alike: the SELECT through
    gRPC, ``SELECT 1`` (the baseline), and the SELECT's two hops replayed over NATS."""

    select: list[float] = field(default_factory=list)
    constant: list[float] = field(default_factory=list)
    oracle: list[float] = field(default_factory=list)
    controller: list[float] = field(default_factory=list)
    replica: list[float] = field(default_factory=list)
    # How many SELECTs the coordinator peeked the replica for itself (Peek.direct).
    direct: int = 0


def fast_path_peeks(client: SqlClient, tap: CommandTap, rows: int, peeks: int) -> PeekSamples:
    load_table(client, "t", rows)
    client.query("CREATE DEFAULT INDEX ON t")
    index_id = client.query(
        "SELECT i.id FROM mz_catalog.mz_indexes i JOIN mz_catalog.mz_tables t "
        "ON t.id = i.on_id WHERE t.name = 't'"
    )[0][0]
    cluster_id = client.query("SELECT id FROM mz_catalog.mz_clusters WHERE name = 'quickstart'")
    client.query("SELECT * FROM t WHERE k = 0")  # warm: waits for hydration
    time.sleep(0.5)  # its Peek still in flight to the tap
    template, replica = tap.last_peeks[index_id], tap.last_replicas[index_id]
    kinds_before, targets_before = tap.snapshot()
    samples = PeekSamples()
    for round_ in range(peeks):
        key = (round_ * 7919) % rows
        elapsed, result = timed(client, f"SELECT * FROM t WHERE k = {key}")
        if result != [(key, f"v{key}")]:
            raise AssertionError(f"SELECT k = {key} returned {result}")
        samples.select.append(elapsed)
        samples.constant.append(timed(client, "SELECT 1")[0])
        oracle, controller, direct = tap.call(
            lambda c: replay_peek(c, tap, cluster_id[0][0], template, replica)
        )
        samples.oracle.append(oracle)
        samples.controller.append(controller)
        samples.replica.append(direct)
    # Each round: the SELECT's Peek and the two replayed ones.
    samples.direct = check_fast_path(tap, kinds_before, targets_before, index_id, 3 * peeks)
    return samples


async def replay_peek(
    connection: Any,
    tap: CommandTap,
    cluster_id: str,
    template: compute_pb2.Peek,
    replica: tuple[str, int],
) -> tuple[float, float, float]:
    """(oracle read timestamp, Controller.Peek, replica Peek) seconds: a fast-path
    SELECT's two hops, and the one that could replace the second.

    The coordinator's ``Peek`` of the index is sent again (new uuid, a fresh
    read timestamp) straight to ``Controller.Peek`` over NATS, as the
    coordinator sends it: the rest of a SELECT's time is gRPC and the
    coordinator's own work. Then once more to the replica's command subject
    itself, as a coordinator addressing replicas directly would send it.
    """
    catalog = NatsServiceClient(connection, CATALOG_SERVICE)
    controller = NatsServiceClient(connection, CONTROLLER_SERVICE)
    began = time.perf_counter()
    timestamp = (await catalog.call("ReadTimestamp", common_pb2.Empty())).timestamp
    oracle = time.perf_counter() - began
    peek = compute_pb2.Peek()
    peek.CopyFrom(template)
    peek.uuid, peek.timestamp = str(uuid.uuid4()), timestamp
    # The coordinator's own peek went to the replica directly: replayed as routed ones.
    peek.direct, peek.reply_subject = False, ""
    request = controller_pb2.PeekRequest(cluster_id=cluster_id, peek=peek, timeout_ms=10_000)
    began = time.perf_counter()
    response = await controller.call("Peek", request)
    elapsed = time.perf_counter() - began
    if response.WhichOneof("result") != "rows" or len(response.rows.rows) != 1:
        raise AssertionError(f"the replayed peek answered {response}")
    peek.uuid = str(uuid.uuid4())
    began = time.perf_counter()
    direct = await tap.peek_replica(replica, peek)
    straight = time.perf_counter() - began
    if direct.WhichOneof("result") != "rows" or len(direct.rows.rows) != 1:
        raise AssertionError(f"the peek sent to the replica answered {direct}")
    return oracle, elapsed, straight


def check_fast_path(
    tap: CommandTap,
    kinds_before: Counter[str],
    targets_before: Counter[str],
    index_id: str,
    peeks: int,
) -> int:
    """Every SELECT was a Peek of the index (``peeks`` at least), and no dataflow was built;
    how many of the Peeks the coordinator sent to the replica itself (``Peek.direct``)."""
    time.sleep(0.5)  # commands still in flight to the tap
    kinds, targets = tap.snapshot()
    kinds.subtract(kinds_before)
    targets.subtract(targets_before)
    if kinds["create_dataflow"] or kinds["peek"] < peeks or targets[index_id] != kinds["peek"]:
        raise AssertionError(
            f"not the fast path: {peeks} SELECTs sent commands {dict(+kinds)}, "
            f"peeks by target {dict(+targets)} (index {index_id})"
        )
    print(
        f"          fast path checked: {kinds['peek']} peeks, all of index {index_id}, "
        f"no dataflows built; {kinds['direct peek']} sent to the replica by the coordinator"
    )
    return kinds["direct peek"]


def insert_to_visible(
    client: SqlClient, table: str, count_sql: Callable[[int], str], inserts: int
) -> tuple[list[float], int]:
    """(samples, extra SELECTs needed): INSERT one row, SELECT until its count shows."""
    samples, retries = [], 0
    for round_ in range(inserts):
        residue = round_ % 10
        before = count_of(client.query(count_sql(residue)))
        began = time.perf_counter()
        client.query(f"INSERT INTO {table} VALUES ({1_000_000 + round_ * 10 + residue})")
        while count_of(client.query(count_sql(residue))) != before + 1:
            retries += 1
            if time.perf_counter() - began > VISIBLE_TIMEOUT_S:
                raise TimeoutError(f"the insert into {table} never became visible")
        samples.append(time.perf_counter() - began)
    return samples, retries


def count_of(rows: list[tuple]) -> int:
    return rows[0][0] if rows else 0


def insert_benchmarks(client: SqlClient, tap: CommandTap, inserts: int) -> None:
    client.query("CREATE TABLE iv (k int)")
    client.query("CREATE VIEW iv_counts AS SELECT k % 10 AS r, count(*) AS n FROM iv GROUP BY 1")
    client.query("CREATE DEFAULT INDEX ON iv_counts")
    client.query("CREATE TABLE plain (k int)")
    index_id = client.query(
        "SELECT i.id FROM mz_catalog.mz_indexes i JOIN mz_catalog.mz_views v "
        "ON v.id = i.on_id WHERE v.name = 'iv_counts'"
    )[0][0]
    kinds_before, targets_before = tap.snapshot()
    viewed, view_retries = insert_to_visible(
        client, "iv", lambda r: f"SELECT n FROM iv_counts WHERE r = {r}", inserts
    )
    # Each round SELECTs the view before its INSERT and after it, retries aside.
    check_fast_path(tap, kinds_before, targets_before, index_id, 2 * inserts + view_retries)
    plain, plain_retries = insert_to_visible(
        client, "plain", lambda r: f"SELECT count(*) FROM plain WHERE k % 10 = {r}", inserts
    )
    report("insert    one row -> visible in view", viewed, plain, "insert + count on a table")
    print(
        f"          SELECTs that did not see the INSERT yet: view {view_retries}, "
        f"plain {plain_retries} (strict serializable: 0 expected)"
    )


def report(label: str, samples: list[float], baseline: list[float], baseline_name: str) -> None:
    p50, p99 = percentiles(samples)
    b50, b99 = percentiles(baseline)
    print(
        f"{label:<38} p50 {p50 * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms"
        f"   ({p50 / b50:.2f}x {baseline_name}: p50 {b50 * 1000:.2f} ms, p99 {b99 * 1000:.2f} ms)"
    )


def run(system: LoupeUp, nats_url: str, options: argparse.Namespace) -> None:
    with CommandTap(nats_url) as tap, SqlClient("127.0.0.1", system.sql_port) as client:
        samples = fast_path_peeks(client, tap, options.rows, options.peeks)
        baseline = samples.constant
        report("peek      fast path through gRPC", samples.select, baseline, "SELECT 1")
        report("          oracle ReadTimestamp (NATS)", samples.oracle, baseline, "SELECT 1")
        report("          Controller.Peek (NATS)", samples.controller, baseline, "SELECT 1")
        report("          replica Peek (NATS, direct)", samples.replica, baseline, "SELECT 1")
        p50 = percentiles(samples.select)[0]
        # The SELECTs' own path: straight to the replica when most of them went there.
        direct = samples.direct * 2 > options.peeks
        hops = (baseline, samples.oracle, samples.replica if direct else samples.controller)
        rest = p50 - sum(percentiles(s)[0] for s in hops)
        print(
            f"          the rest (coordinator work and waits beyond SELECT 1) {rest * 1000:.2f} ms"
        )
        verdict = "met" if p50 < PEEK_P50_TARGET_S else "NOT met"
        print(f"          target p50 < {PEEK_P50_TARGET_S * 1000:.0f} ms: {verdict}")
        insert_benchmarks(client, tap, options.inserts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows of the peeked table")
    parser.add_argument("--peeks", type=int, default=200, help="fast-path SELECTs timed")
    parser.add_argument("--inserts", type=int, default=30, help="one-row inserts timed")
    options = parser.parse_args()
    nats_port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data", extra_args=["--nats-port", str(nats_port)])
        try:
            system.start()
            run(system, f"nats://127.0.0.1:{nats_port}", options)
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
