"""A materialized view equals its query over the table after the replica or controller dies.

The chaos run (seed 1394130116) once read a materialized view as empty after
the faults while its query over the table had three rows; the view's shard
held the right rows: a replica's feeder of the shard, cancelled when a read
of the view finished, kept running (its cancel swallowed by Python 3.11's
``asyncio.wait_for``) and fed the next read's dataflow the shard's uppers
before its snapshot. Here a writer inserts and deletes under a view like the
chaos workload's ``chaos_writers``, read often, while the replica is killed,
then the controller; the view must equal the same query computed afresh.
Without the fix this read the view as empty within a minute of the faults.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time

import pytest

from loupe.testing.system import LoupeUp, processes_mentioning, replica_pid

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

QUERY = (
    "SELECT writer, count(DISTINCT grp) AS grps, min(id) AS first, max(id) AS last"
    " FROM events WHERE amount % 2 = 0 GROUP BY writer"
)


class Writer:
    """Inserts rows (and deletes the oldest) until stopped; errors during faults are retried."""

    def __init__(self, system: LoupeUp) -> None:
        self.system = system
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.next_id = 1
        self.live: list[int] = []

    def _run(self) -> None:
        rng = random.Random(7)
        while not self.stop.is_set():
            ids = list(range(self.next_id, self.next_id + 3))
            values = ", ".join(
                f"({i}, {rng.randrange(3)}, {rng.randrange(8)}, {rng.randrange(100)})" for i in ids
            )
            try:
                self.system.sql(f"INSERT INTO events VALUES {values}", timeout=20)
                self.next_id += 3
                self.live += ids
                if len(self.live) > 30 and rng.random() < 0.3:
                    gone, self.live = self.live[:2], self.live[2:]
                    self.system.sql(
                        f"DELETE FROM events WHERE id IN ({', '.join(map(str, gone))})", timeout=20
                    )
            except Exception:
                time.sleep(0.5)
            time.sleep(0.05)


# Both sides at one timestamp (one query), so the writer going on cannot tell them apart.
DIFFERENCE = (
    "(SELECT * FROM writers_mv EXCEPT ALL SELECT * FROM writers_direct) UNION ALL"
    " (SELECT * FROM writers_direct EXCEPT ALL SELECT * FROM writers_mv)"
)


def assert_view_right(system: LoupeUp, when: str) -> None:
    """The view equals its query, read after read (a wrong read is not retried away)."""
    for _ in range(5):
        difference = system.sql(DIFFERENCE, timeout=60)
        assert difference == [], f"{when}: the view and its query differ in {sorted(difference)}"
        assert len(system.sql("SELECT * FROM writers_mv", timeout=60)) == 3, when
        time.sleep(0.5)


def wait_answering(system: LoupeUp) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            system.sql("SELECT count(*) FROM writers_mv", timeout=10)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def controller_pid(system: LoupeUp) -> int | None:
    pattern = re.compile(r"loupe\.cli\.main controller\b")
    for pid, cmdline in processes_mentioning(str(system.data_dir)):
        if pattern.search(cmdline):
            return pid
    return None


def test_materialized_view_right_after_replica_and_controller_faults(tmp_path) -> None:
    system = LoupeUp(tmp_path / "data")
    system.start()
    writer = Writer(system)
    try:
        system.sql(
            "CREATE TABLE events (id bigint NOT NULL, writer int NOT NULL, grp int NOT NULL,"
            " amount int NOT NULL)"
        )
        system.sql(f"CREATE MATERIALIZED VIEW writers_mv AS {QUERY}")
        system.sql(f"CREATE VIEW writers_direct AS {QUERY}")
        (replica_id,) = system.sql(
            "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c"
            " ON c.id = r.cluster_id WHERE c.name = 'quickstart'"
        )[0]
        writer.thread.start()
        time.sleep(5)
        assert_view_right(system, "before faults")

        pid = replica_pid(system.data_dir, replica_id)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(3)
        wait_answering(system)
        time.sleep(5)
        assert_view_right(system, "after the replica kill")

        pid = controller_pid(system)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(3)
        wait_answering(system)
        assert_view_right(system, "after the controller kill")
        time.sleep(20)
        assert_view_right(system, "writing after the controller kill")
        writer.stop.set()
        writer.thread.join(30)
        for _ in range(5):
            assert_view_right(system, "writes stopped")
            time.sleep(2)
    finally:
        writer.stop.set()
        system.stop()
