"""Where "statement finished -> visible in mz_recent_activity_log" spends its time.

With one ``loupe up`` (as ``bench/statement_logging.py``), ``--samples`` times:
``SELECT 'marker-<uuid>'`` in a session logging every statement, then polls
of ``mz_internal.mz_recent_activity_log`` (strict serializable, from a
session that logs nothing) until its finished row shows. Meanwhile two
threads watch, every few milliseconds, what the reader depends on:

- the shard of ``mz_statement_execution_history`` (read straight from the
  consensus store): when the storage writer's flush carrying the execution
  lands, its timestamp (the part's lower: the wall clock when the flush
  started) and when its compare-and-append was seen;
- the catalog's timestamp oracle (``ReadTimestamp``): when the read
  timestamp a strict serializable query takes first reaches the flush's.

Per sample, in ms from the statement's return at the client:
``flush_ts`` (the flush started: the writer's scheduling), ``landed`` (the
flush was durable: + Spark), ``oracle`` (a strict serializable read could
see it), ``visible`` (the poll saw it: + the read path, dataflow and peek; the
poll selects ``mz_now()`` too, so ``--verbose`` shows each poll's read
timestamp).
Medians and p90 of each, and of the steps between them.

Run: ``SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/statement_logging_breakdown.py
[--samples 20] [--flush-interval 1.0]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc

from loupe.builtins import MZ_STATEMENT_EXECUTION_HISTORY
from loupe.client import SqlClient
from loupe.controller.service import ControllerSettings
from loupe.persist import Shard
from loupe.persist.location import default_uris, open_location
from loupe.proto.catalog.v1 import catalog_pb2_grpc
from loupe.proto.common.v1 import common_pb2
from loupe.testing.system import LoupeUp

WATCH_EVERY_S = 0.005
VISIBLE_TIMEOUT_S = 30.0


def now_ms() -> float:
    return time.time() * 1000


@dataclass
class Landing:
    """A part that appeared in the watched shard."""

    lower: int  # the flush's timestamp
    seen_ms: float  # wall clock when the watcher first saw it


class Watcher:
    """Polls the execution history shard and the oracle in threads of their own."""

    def __init__(self, system: LoupeUp) -> None:
        blob, consensus = open_location(*default_uris(system.data_dir))
        self._shard = Shard(MZ_STATEMENT_EXECUTION_HISTORY.shard_id, blob, consensus)
        self._channel = grpc.insecure_channel(f"127.0.0.1:{system.catalog_port}")
        self._catalog = catalog_pb2_grpc.CatalogStub(self._channel)
        self.landings: list[Landing] = []
        # (wall clock ms, the oracle's read timestamp), whenever the latter moved.
        self.oracle: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch_shard, daemon=True),
            threading.Thread(target=self._watch_oracle, daemon=True),
        ]

    def __enter__(self) -> Watcher:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._channel.close()

    def _watch_shard(self) -> None:
        known: set[str] = set()
        while not self._stop.is_set():
            try:
                state = self._shard.state(missing_ok=True)
            except Exception:
                state = None
            seen = now_ms()
            for part in state.parts if state is not None else ():
                if part.key not in known:
                    known.add(part.key)
                    self.landings.append(Landing(part.lower, seen))
            time.sleep(WATCH_EVERY_S)

    def _watch_oracle(self) -> None:
        last = -1
        while not self._stop.is_set():
            timestamp = self._catalog.ReadTimestamp(common_pb2.Empty(), timeout=5).timestamp
            if timestamp != last:
                self.oracle.append((now_ms(), timestamp))
                last = timestamp
            time.sleep(WATCH_EVERY_S)

    def landing_after(self, finished_ms: float) -> Landing | None:
        """The first flush started after the statement returned (it carries its finish)."""
        later = [x for x in self.landings if x.lower >= finished_ms - 5]
        return min(later, key=lambda x: x.lower) if later else None

    def oracle_reached(self, timestamp: int) -> float | None:
        """When the oracle's read timestamp first reached ``timestamp``."""
        return next((at for at, ts in self.oracle if ts >= timestamp), None)


@dataclass
class Sample:
    flush_ts: float
    landed: float
    oracle: float
    visible: float


def measure(system: LoupeUp, samples: int, *, verbose: bool = False) -> list[Sample]:
    results = []
    with (
        SqlClient("127.0.0.1", system.sql_port, application_name="bench-reader") as reader,
        SqlClient("127.0.0.1", system.sql_port, application_name="bench-marker") as marked,
        Watcher(system) as watcher,
    ):
        reader.query("SET statement_logging_sample_rate = 0.0")
        marked.query("SET statement_logging_sample_rate = 1.0")
        pending = []
        for _ in range(samples):
            sql = f"SELECT 'marker-{uuid.uuid4()}'"
            literal = sql.replace("'", "''")
            poll = (
                "SELECT finished_status, mz_now() FROM mz_internal.mz_recent_activity_log "
                f"WHERE sql = '{literal}'"
            )
            marked.query(sql)
            finished = now_ms()
            polls = []
            while True:
                began = now_ms()
                rows = reader.query(poll)
                polls.append((began - finished, now_ms() - finished, rows))
                if any(row[0] == "success" for row in rows):
                    break
                if now_ms() - finished > VISIBLE_TIMEOUT_S * 1000:
                    raise TimeoutError(f"{sql} never showed in mz_recent_activity_log")
            if verbose:  # each poll: (began, ended) ms after the return, rows
                print(f"{finished:.0f}", [(round(b), round(e), r) for b, e, r in polls])
            pending.append((finished, now_ms()))
            time.sleep(0.3)  # let the watchers see the later oracle ticks too
        time.sleep(1.5)
        for finished, visible in pending:
            landing = watcher.landing_after(finished)
            if landing is None:
                print(f"no flush seen after {finished:.0f}", file=sys.stderr)
                continue
            reached = watcher.oracle_reached(landing.lower)
            results.append(
                Sample(
                    landing.lower - finished,
                    landing.seen_ms - finished,
                    (reached if reached is not None else visible) - finished,
                    visible - finished,
                )
            )
    return results


def report(samples: list[Sample]) -> None:
    def line(label: str, values: list[float]) -> None:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        print(f"  {label:<44} p50 {statistics.median(ordered):6.0f} ms   p90 {p90:6.0f} ms")

    print(f"finished -> ... ({len(samples)} samples)")
    line("flush started (JetStream + scheduling)", [s.flush_ts for s in samples])
    line("flush durable (+ Spark, CAS)", [s.landed for s in samples])
    line("oracle read ts >= flush ts", [s.oracle for s in samples])
    line("visible to the poll", [s.visible for s in samples])
    print("steps")
    line("flush started -> durable", [s.landed - s.flush_ts for s in samples])
    line("durable -> oracle reached (>= 0: waits)", [s.oracle - s.landed for s in samples])
    line(
        "max(durable, oracle) -> visible (read path)",
        [s.visible - max(s.landed, s.oracle) for s in samples],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument(
        "--flush-interval", type=float, default=ControllerSettings.storage_flush_interval
    )
    parser.add_argument("--verbose", action="store_true", help="print every sample's polls")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(
            Path(scratch) / "data",
            extra_args=["--storage-flush-interval", str(options.flush_interval)],
        )
        try:
            system.start()
            system.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
            report(measure(system, options.samples, verbose=options.verbose))
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
