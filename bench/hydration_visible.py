"""Hydration to visible, on one ``loupe up`` (issue 13's speed target).

A cluster ``heavy`` of two replicas (SIZE '2' and '1', introspection every
1 s) over TPC-H (load generator, ``--scale``). Each round indexes a Q1-, Q3-
or Q5-shaped view there, and measures, for each replica, the time from the
moment its dataflow hydrated (the replica's own clock: installation plus the
hydration time, ``mz_object_hydration_history.finished_at``) until SQL on
another cluster shows every node of the index hydrated on that replica in
``mz_internal.mz_compute_operator_hydration_statuses``. That is a node's
hydration (the last node's) to visible: report interval, the controller's
write interval, the storage writer's flush. Target: p50 < 2 x (logging
interval + flush interval) = 4 s.

Run: ``.venv/bin/python bench/hydration_visible.py [--scale 0.01] [--rounds 6]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loupe.testing.system import LoupeUp

QUERIES = {
    "q1": """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, count(*) AS n
             FROM lineitem WHERE l_shipdate <= DATE '1998-09-02'
             GROUP BY l_returnflag, l_linestatus""",
    "q3": """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue,
                    o_orderdate, o_shippriority
             FROM customer, orders, lineitem
             WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey
               AND l_orderkey = o_orderkey AND o_orderdate < DATE '1995-03-15'
               AND l_shipdate > DATE '1995-03-15'
             GROUP BY l_orderkey, o_orderdate, o_shippriority""",
    "q5": """SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
             FROM customer, orders, lineitem, supplier, nation, region
             WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey
               AND l_suppkey = s_suppkey AND c_nationkey = s_nationkey
               AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
               AND r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01'
               AND o_orderdate < DATE '1995-01-01'
             GROUP BY n_name""",
}
TARGET_S = 2 * (1.0 + 1.0)


def wait_for(check: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("benchmark condition not reached")


def all_hydrated(system: LoupeUp, object_id: str, replica_id: str) -> bool:
    ((nodes, hydrated),) = system.sql(
        "SELECT count(*), count(*) FILTER (WHERE hydrated)"
        " FROM mz_internal.mz_compute_operator_hydration_statuses"
        f" WHERE object_id = '{object_id}' AND replica_id = '{replica_id}'"
    )
    return bool(nodes) and nodes == hydrated


def round_samples(system: LoupeUp, name: str, query: str, replicas: list[str]) -> list[float]:
    system.sql(f"CREATE VIEW {name} AS {query}")
    system.sql(f"CREATE DEFAULT INDEX IN CLUSTER heavy ON {name}", timeout=600)
    ((object_id,),) = system.sql(
        "SELECT i.id FROM mz_catalog.mz_indexes i JOIN mz_catalog.mz_views v ON v.id = i.on_id"
        f" WHERE v.name = '{name}'"
    )
    seen: dict[str, float] = {}
    pending = set(replicas)

    def visible() -> bool:
        for replica_id in list(pending):
            if all_hydrated(system, object_id, replica_id):
                seen[replica_id] = time.time()
                pending.discard(replica_id)
        return not pending

    wait_for(visible, 120)
    samples = []
    for replica_id, at in seen.items():
        ((finished,),) = wait_for(
            lambda r=replica_id: system.sql(
                "SELECT finished_at FROM mz_internal.mz_object_hydration_history"
                f" WHERE object_id = '{object_id}' AND replica_id = '{r}'"
                " AND status = 'hydrated'"
            ),
            30,
        )
        finished_at = finished if isinstance(finished, dt.datetime) else _parse(finished)
        samples.append(at - finished_at.timestamp())
    system.sql(f"DROP VIEW {name} CASCADE")
    return samples


def _parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace(" ", "T"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        try:
            system.start()
            system.sql("CREATE CLUSTER heavy REPLICAS (r1 (SIZE '2'), r2 (SIZE '1'))")
            system.sql(
                f"CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR {options.scale})",
                timeout=600,
            )
            replicas = [
                r
                for (r,) in system.sql(
                    "SELECT r.id FROM mz_catalog.mz_cluster_replicas r"
                    " JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id"
                    " WHERE c.name = 'heavy' ORDER BY r.name"
                )
            ]
            samples: list[float] = []
            names = list(QUERIES)
            for round_ in range(options.rounds):
                name = names[round_ % len(names)]
                samples += round_samples(system, f"{name}_{round_}", QUERIES[name], replicas)
            p50 = statistics.median(samples)
            print(
                f"hydration->visible  node hydrated -> mz_compute_operator_hydration_statuses"
                f" p50 {p50:.2f} s max {max(samples):.2f} s over {len(samples)}"
                f"  ({p50 / TARGET_S:.2f}x of 2 x (interval + flush) = {TARGET_S:.0f} s)"
            )
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
