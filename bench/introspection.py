"""What replica introspection costs, on one ``loupe up`` (issue 12's speed targets).

Two clusters of one replica each (SIZE '1'), alike but for their introspection
interval: ``logon`` (1 s, the default) and ``logoff`` (0: no logging work at all).

- hydration: TPC-H (load generator, ``--scale``) Q1-, Q3- and Q5-shaped views,
  each indexed in both clusters, alternately, ``--rounds`` times: the time from
  CREATE INDEX to the first answer. Ratio on/off; target <= 1.03.
- one-row updates: an INSERT into ``lineitem`` until the Q1-shaped index of
  each cluster shows it; p50 per cluster, ratio on/off; target <= 1.03.
- idle: CPU of each cluster's replica process over ``--idle`` seconds with its
  indexes hydrated and nothing written; target < 1 % of a core with logging on.
- change to visible: an index created on ``logon`` until
  ``mz_internal.mz_compute_exports`` shows it for that replica; p50 against
  2 x (interval + storage flush interval) = 4 s.
- at 10 replicas: a cluster ``ten`` with REPLICATION FACTOR 10; rows the
  controller writes to the introspection collections per second (its
  ``loupe_storage_rows_written`` counter for them) and the controller's CPU,
  against the same with the ten replicas' logging off.

Run: ``.venv/bin/python bench/introspection.py [--scale 0.01] [--rounds 3] [--idle 30]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loupe.testing.system import LoupeUp, replica_pid

TICKS = os.sysconf("SC_CLK_TCK")
QUERIES = {
    "q1": """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty,
                    sum(l_extendedprice) AS sum_base_price,
                    sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
                    avg(l_quantity) AS avg_qty, count(*) AS count_order
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
CLUSTERS = ("logon", "logoff")


def wait_for(check: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("benchmark condition not reached")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def replica_of(system: LoupeUp, cluster: str) -> str:
    ((replica_id,),) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c "
        f"ON c.id = r.cluster_id WHERE c.name = '{cluster}'"
    )
    return replica_id


def on(system: LoupeUp, cluster: str, statement: str, timeout: float = 600) -> list[tuple]:
    return system.sql(f"SET cluster = '{cluster}'; {statement}", timeout=timeout)


def hydration(system: LoupeUp, rounds: int) -> dict[str, list[float]]:
    """Seconds from CREATE INDEX to its first answer, per cluster (clusters alternate)."""
    samples: dict[str, list[float]] = {c: [] for c in CLUSTERS}
    for round_ in range(rounds):
        order = CLUSTERS if round_ % 2 == 0 else CLUSTERS[::-1]
        for name, query in QUERIES.items():
            for cluster in order:
                view = f"{name}_{cluster}_{round_}"
                system.sql(f"CREATE VIEW {view} AS {query}")
                began = time.monotonic()
                on(system, cluster, f"CREATE DEFAULT INDEX IN CLUSTER {cluster} ON {view}")
                on(system, cluster, f"SELECT count(*) FROM {view}")
                samples[cluster].append(time.monotonic() - began)
                system.sql(f"DROP VIEW {view} CASCADE")
    return samples


def updates(system: LoupeUp, rounds: int) -> dict[str, list[float]]:
    """Seconds from a one-row INSERT into lineitem until each cluster's Q1 index shows it."""
    for cluster in CLUSTERS:
        system.sql(f"CREATE VIEW upd_{cluster} AS SELECT count(*) AS n FROM lineitem")
        on(system, cluster, f"CREATE DEFAULT INDEX IN CLUSTER {cluster} ON upd_{cluster}")
    samples: dict[str, list[float]] = {c: [] for c in CLUSTERS}
    key = 10_000_000
    for round_ in range(rounds):
        order = CLUSTERS if round_ % 2 == 0 else CLUSTERS[::-1]
        for cluster in order:
            ((before,),) = on(system, cluster, f"SELECT n FROM upd_{cluster}")
            key += 1
            began = time.monotonic()
            system.sql(
                "INSERT INTO lineitem (l_orderkey, l_linenumber, l_quantity, l_extendedprice,"
                " l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate)"
                f" VALUES ({key}, 1, 1, 1, 0, 0, 'N', 'O', DATE '1998-01-01')"
            )
            wait_for(
                lambda c=cluster, b=before: on(system, c, f"SELECT n FROM upd_{c}")[0][0] > b,
                60,
                interval=0.01,
            )
            samples[cluster].append(time.monotonic() - began)
    return samples


def idle_cpu(system: LoupeUp, seconds: float) -> dict[str, float]:
    """Share of a core each cluster's replica used while nothing changed."""
    pids = {c: replica_pid(system.data_dir, replica_of(system, c)) for c in CLUSTERS}
    before = {c: cpu_seconds(pid) for c, pid in pids.items() if pid}
    time.sleep(seconds)
    return {c: (cpu_seconds(pids[c]) - before[c]) / seconds for c in before if pids[c]}


def change_to_visible(system: LoupeUp, rounds: int) -> list[float]:
    replica_id = replica_of(system, "logon")
    samples = []
    for round_ in range(rounds):
        system.sql(f"CREATE VIEW vis_{round_} AS SELECT count(*) AS n FROM nation")
        began = time.monotonic()
        on(
            system,
            "logon",
            f"CREATE INDEX vis_{round_}_idx IN CLUSTER logon ON vis_{round_} (n)",
        )
        ((index_id,),) = system.sql(
            f"SELECT id FROM mz_catalog.mz_indexes WHERE name = 'vis_{round_}_idx'"
        )
        wait_for(
            lambda i=index_id: system.sql(
                "SELECT count(*) FROM mz_internal.mz_compute_exports"
                f" WHERE replica_id = '{replica_id}' AND export_id = '{i}'"
            )[0][0],
            60,
        )
        samples.append(time.monotonic() - began)
    return samples


def controller_metrics(data_dir: Path) -> tuple[int, str]:
    (ready,) = data_dir.rglob("controller.ready.json")
    info = json.loads(ready.read_text())
    with urllib.request.urlopen(
        f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=10
    ) as response:
        return info["pid"], response.read().decode()


def introspection_rows(text: str) -> float:
    """``loupe_storage_rows_written`` summed over the introspection collections (s5NN)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("loupe_storage_rows_written_total{") and 'collection="s5' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def ten_replicas(system: LoupeUp, seconds: float) -> dict[str, tuple[float, float]]:
    """Per interval setting: (introspection rows written per s, controller CPU share)."""
    results = {}
    # Off first, then on: turning it off retracts every row, which would count as writes.
    system.sql("CREATE CLUSTER ten (SIZE '1', REPLICATION FACTOR 10, INTROSPECTION INTERVAL = 0)")
    system.sql("CREATE VIEW ten_v AS SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1")
    on(system, "ten", "CREATE DEFAULT INDEX IN CLUSTER ten ON ten_v")
    on(system, "ten", "SELECT * FROM ten_v", timeout=600)
    for setting in ("0", "'1s'"):
        system.sql(f"ALTER CLUSTER ten SET (INTROSPECTION INTERVAL = {setting})")
        time.sleep(10)  # past the first snapshots
        pid, text = controller_metrics(system.data_dir)
        rows, cpu = introspection_rows(text), cpu_seconds(pid)
        time.sleep(seconds)
        _, text = controller_metrics(system.data_dir)
        results[setting] = (
            (introspection_rows(text) - rows) / seconds,
            (cpu_seconds(pid) - cpu) / seconds,
        )
    system.sql("DROP CLUSTER ten CASCADE")
    return results


def ratio(on_value: float, off_value: float) -> str:
    return f"{on_value / off_value:.3f}x" if off_value else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle measurement")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        try:
            system.start()
            system.sql("CREATE CLUSTER logon (SIZE '1', INTROSPECTION INTERVAL = '1s')")
            system.sql("CREATE CLUSTER logoff (SIZE '1', INTROSPECTION INTERVAL = 0)")
            system.sql(
                f"CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR {options.scale})",
                timeout=600,
            )
            for cluster in CLUSTERS:
                on(system, cluster, "SELECT 1")
            hydrated = hydration(system, options.rounds)
            medians = {c: statistics.median(s) for c, s in hydrated.items()}
            print(
                f"hydration  Q1/Q3/Q5 index, p50 on {medians['logon']:.3f} s"
                f" off {medians['logoff']:.3f} s  ratio {ratio(medians['logon'], medians['logoff'])}"
                " (target <= 1.03x)"
            )
            updated = updates(system, max(options.rounds * 10, 20))
            medians = {c: statistics.median(s) for c, s in updated.items()}
            print(
                f"updates    one-row INSERT to visible, p50 on {medians['logon'] * 1000:.1f} ms"
                f" off {medians['logoff'] * 1000:.1f} ms"
                f"  ratio {ratio(medians['logon'], medians['logoff'])} (target <= 1.03x)"
            )
            idle = idle_cpu(system, options.idle)
            print(
                f"idle       replica CPU on {idle.get('logon', 0) * 100:.2f} % of a core,"
                f" off {idle.get('logoff', 0) * 100:.2f} % (target on < 1 %)"
            )
            visible = change_to_visible(system, max(options.rounds, 5))
            p50 = statistics.median(visible)
            print(
                f"visible    new index -> mz_internal.mz_compute_exports p50 {p50:.2f} s"
                f" max {max(visible):.2f} s  ({p50 / 4.0:.2f}x of 2 x (interval + flush) = 4 s)"
            )
            for setting, (rows, cpu) in ten_replicas(system, options.idle).items():
                print(
                    f"10 replicas interval {setting:5}: {rows:8.0f} introspection rows/s written,"
                    f" controller CPU {cpu * 100:.1f} % of a core"
                )
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
