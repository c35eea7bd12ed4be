"""Hydration you can watch, through the whole system (issue 13's speed targets).

One ``loupe up`` with a TPC-H source (load generator, ``--scale``) and a
cluster of one replica (SIZE '2'):

- node hydrated -> visible: an index on a small view, ``--rounds`` times: from
  the moment the replica hydrated it (``installed_at`` + hydration time, the
  replica's clock: ``mz_object_hydration_history.finished_at``) until
  ``mz_internal.mz_compute_operator_hydration_statuses`` shows every node of it
  hydrated, polled every 20 ms from another cluster. Target p50 < 2 x
  (the replica's report interval + the storage writer's flush interval).
- progress on TPC-H Q1/Q3/Q5-shaped materialized views: polled while each
  hydrates, ``records_done`` of ``mz_compute_hydration_progress`` must never
  decrease; the first and the last estimate seen before it was hydrated,
  against the truth (the records done once hydrated). Target: the last
  estimate within 10 % of the truth.

The engine's cost of tracking per-node hydration (on vs off) is
``bench/hydration_logging.py``.

Run: ``.venv/bin/python bench/hydration.py [--scale 0.1] [--rounds 20]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from loupe.testing.system import LoupeUp

sys.path.insert(0, str(Path(__file__).parent))
from introspection import QUERIES, on, wait_for

REPORT_INTERVAL_S = 0.05  # compute_replica.settings.ReplicaSettings.report_interval
FLUSH_INTERVAL_S = 1.0  # controller storage_flush_interval


def object_named(system: LoupeUp, relation: str, name: str) -> str:
    ((oid,),) = system.sql(f"SELECT id FROM mz_catalog.{relation} WHERE name = '{name}'")
    return oid


def visible(system: LoupeUp, rounds: int) -> list[float]:
    """Seconds from an index's hydration on the replica until SQL shows all its nodes hydrated."""
    samples = []
    for round_ in range(rounds):
        system.sql(
            f"CREATE VIEW vis_{round_} AS SELECT n_regionkey, count(*) AS n FROM nation"
            " GROUP BY n_regionkey"
        )
        on(
            system,
            "watch",
            f"CREATE INDEX vis_{round_}_idx IN CLUSTER watch ON vis_{round_} (n_regionkey)",
        )
        oid = object_named(system, "mz_indexes", f"vis_{round_}_idx")

        def all_nodes(oid: str = oid) -> bool:
            rows = system.sql(
                "SELECT bool_and(hydrated), count(*)"
                " FROM mz_internal.mz_compute_operator_hydration_statuses"
                f" WHERE object_id = '{oid}'"
            )
            return bool(rows and rows[0][1] and rows[0][0])

        wait_for(all_nodes, 60, interval=0.02)
        seen = time.time()
        ((finished,),) = wait_for(
            lambda oid=oid: system.sql(
                "SELECT EXTRACT(EPOCH FROM finished_at)"
                f" FROM mz_internal.mz_object_hydration_history WHERE object_id = '{oid}'"
                " AND status = 'hydrated'"
            ),
            60,
            interval=0.02,
        )
        samples.append(seen - float(finished))
        system.sql(f"DROP VIEW vis_{round_} CASCADE")
    return samples


def progress(system: LoupeUp, name: str, query: str) -> dict[str, Any]:
    """Poll one materialized view's progress while it hydrates."""

    def create() -> None:
        on(system, "watch", f"CREATE MATERIALIZED VIEW {name} AS {query}")

    thread = threading.Thread(target=create, daemon=True)
    known = {
        o for (o,) in system.sql("SELECT object_id FROM mz_internal.mz_compute_hydration_times")
    }
    began = time.monotonic()
    thread.start()
    # Polled from the first report on (the view's id is not waited for: the catalog
    # relations may show it later than the replica reports it).
    seen: list[tuple[bool, int, int]] = []
    while True:
        rows = [
            row
            for row in system.sql(
                "SELECT object_id, hydrated, records_done, records_estimated"
                " FROM mz_internal.mz_compute_hydration_progress"
            )
            if row[0] not in known and row[2] is not None
        ]
        if rows:
            _, hydrated, done, estimated = rows[0]
            seen.append((bool(hydrated), int(done), int(estimated)))
            if hydrated:
                break
        if time.monotonic() - began > 600:
            raise TimeoutError(f"{name} did not hydrate")
        time.sleep(0.02)
    thread.join(600)
    truth = seen[-1][1]
    before = [s for s in seen if not s[0] and s[2]]
    dones = [d for _, d, _ in seen]
    return {
        "monotonic": all(a <= b for a, b in itertools.pairwise(dones)),
        "samples": len(seen),
        "hydrating_samples": len(before),
        "first": before[0][2] / truth if before else None,
        "last": before[-1][2] / truth if before else None,
        "truth": truth,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--rounds", type=int, default=20, help="indexes for node -> visible")
    options = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        try:
            system.start()
            system.sql(
                f"CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR {options.scale})",
                timeout=900,
            )
            system.sql("CREATE CLUSTER watch REPLICAS (r1 (SIZE '2'))")
            wait_for(
                lambda: on(system, "watch", "SELECT count(*) FROM nation", timeout=60), 120, 0.5
            )

            samples = visible(system, options.rounds)
            target = 2 * (REPORT_INTERVAL_S + FLUSH_INTERVAL_S)
            p50 = statistics.median(samples)
            ok = p50 < target
            print(
                f"visible   node hydrated -> in SQL  p50 {p50:6.2f} s  max {max(samples):6.2f} s"
                f"   ({p50 / target:.2f}x of 2 x (report + flush) = {target:.2f} s;"
                f" {'ok' if ok else 'OVER TARGET'})   n={len(samples)}"
            )
            for name, query in QUERIES.items():
                result = progress(system, f"{name}_watch", query)
                # Progress going backwards is a bug; an estimate off target is a number.
                failures += not result["monotonic"]
                if result["last"] is None:
                    verdict = "not seen hydrating: hydration outran the polls"
                else:
                    verdict = "ok" if abs(result["last"] - 1) <= 0.10 else "OVER TARGET"
                first = "-" if result["first"] is None else f"{result['first']:.2f}x"
                last = "-" if result["last"] is None else f"{result['last']:.2f}x"
                print(
                    f"progress  {name}  records done monotonic: {result['monotonic']}"
                    f"   estimate/truth first {first}  last {last}"
                    f"   truth {result['truth']:,}   polls {result['samples']}"
                    f" ({result['hydrating_samples']} while hydrating)"
                    f"   (target last within 10 %: {verdict})"
                )
        finally:
            system.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
