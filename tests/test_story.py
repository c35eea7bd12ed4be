"""The foundation's story, end to end, with every service a real process.

`loupe up` on a fresh data dir; a cluster with two replicas shows both online;
`kill -9` of one shows it offline with a reason and back online as a new
incarnation; a second `loupe up` on the same dir is refused; Ctrl-C stops
everything and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from loupe.testing import assert_eventually
from loupe.testing.system import LoupeUp, replica_pid

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

STATUS_QUERY = (
    "SELECT r.name, s.status, s.reason, s.incarnation "
    "FROM mz_internal.mz_cluster_replica_statuses s "
    "JOIN mz_catalog.mz_cluster_replicas r ON r.id = s.replica_id "
    "JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id WHERE c.name = 'c'"
)


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("story") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


async def test_bootstrap_clusters_are_online(system):
    """`loupe up` brings up mz_catalog_server and quickstart with one online replica each."""
    rows = system.sql(
        "SELECT c.name, count(*) FROM mz_catalog.mz_clusters c "
        "JOIN mz_catalog.mz_cluster_replicas r ON r.cluster_id = c.id GROUP BY c.name ORDER BY c.name"
    )
    assert rows == [("mz_catalog_server", 1), ("quickstart", 1)]

    def online():
        statuses = system.sql(
            "SELECT replica_id, status FROM mz_internal.mz_cluster_replica_statuses"
        )
        assert sorted(statuses) == [("s1", "online"), ("u1", "online")]

    await assert_eventually(online, timeout=30)


async def test_new_replicas_come_online_and_survive_kill(system):
    """Both new replicas go online; a killed one goes offline with a reason and returns."""
    created = system.cli("-c", "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE '2'))")
    assert "CREATE CLUSTER" in created.stdout

    def both_online():
        rows = system.sql(STATUS_QUERY)
        assert sorted((name, status) for name, status, _, _ in rows) == [
            ("r1", "online"),
            ("r2", "online"),
        ]
        return {name: incarnation for name, _, _, incarnation in rows}

    incarnations = await assert_eventually(both_online, timeout=30)

    (replica_id,) = system.sql(
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r JOIN mz_catalog.mz_clusters c "
        "ON c.id = r.cluster_id WHERE c.name = 'c' AND r.name = 'r2'"
    )[0]
    pid = replica_pid(system.data_dir, replica_id)
    assert pid is not None, f"no process for replica {replica_id}"
    os.kill(pid, signal.SIGKILL)

    def offline_recorded():
        rows = system.sql(
            "SELECT status, reason, incarnation FROM mz_internal.mz_cluster_replica_status_history "
            f"WHERE replica_id = '{replica_id}' AND status = 'offline'"
        )
        assert rows, "no offline status recorded yet"
        return rows

    offline = await assert_eventually(offline_recorded, timeout=10)
    assert any("killed" in reason for _, reason, _ in offline)

    def back_online():
        rows = {
            name: (status, incarnation) for name, status, _, incarnation in system.sql(STATUS_QUERY)
        }
        assert rows["r2"][0] == "online"
        assert rows["r2"][1] > incarnations["r2"]

    await assert_eventually(back_online, timeout=30)
    assert replica_pid(system.data_dir, replica_id) not in (None, pid)


async def test_ddl_is_audited_and_replica_history_kept(system):
    """The story's DDL shows in mz_audit_events and mz_cluster_replica_history, by its user."""
    system.cli("-c", "CREATE CLUSTER REPLICA c.r3 SIZE '1'")
    system.cli("-c", "DROP CLUSTER REPLICA c.r3")

    def audited():
        events = system.sql(
            'SELECT event_type, object_type, "user" FROM mz_catalog.mz_audit_events '
            'WHERE details::text LIKE \'%"cluster_name": "c"%\' ORDER BY id'
        )
        assert events[-2:] == [
            ("create", "cluster-replica", "materialize"),
            ("drop", "cluster-replica", "materialize"),
        ]

    await assert_eventually(audited, timeout=10)
    history = system.sql(
        "SELECT replica_name, size, dropped_at IS NOT NULL FROM mz_internal.mz_cluster_replica_history "
        "WHERE cluster_name = 'c' ORDER BY replica_name"
    )
    assert history == [("r1", "1", False), ("r2", "2", False), ("r3", "1", True)]
    # The debug tool reads the fence token of the live catalog without fencing it.
    epoch = subprocess.run(
        [
            sys.executable,
            "-m",
            "loupe.cli.main",
            "catalog",
            "--data-dir",
            str(system.data_dir),
            "epoch",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(epoch.stdout)["epoch"] >= 1
    assert system.sql("SELECT count(*) FROM mz_catalog.mz_clusters WHERE name = 'c'") == [(1,)]


async def test_cli_formats_and_errors(system):
    """`loupe sql` prints tables, JSON and CSV, and SQL errors with a code and position."""
    table = system.cli("-c", "SHOW CLUSTERS")
    assert "quickstart" in table.stdout
    assert "mz_catalog_server" in table.stdout
    as_json = json.loads(system.cli("--format", "json", "-c", "SHOW CLUSTERS").stdout)
    assert {"name": "quickstart"} in as_json
    as_csv = system.cli("--format", "csv", "-c", "SHOW CLUSTERS").stdout.splitlines()
    assert as_csv[0] == "name"
    assert "quickstart" in as_csv
    failed = system.cli("-c", "SELEC 1", check=False)
    assert failed.returncode != 0
    assert "ERROR" in failed.stderr
    assert "42601" in failed.stderr
    unknown = system.cli("-c", "SELECT * FROM mz_catalog.nope", check=False)
    assert unknown.returncode != 0
    assert "42P01" in unknown.stderr


async def test_tables_are_written_and_read_through_loupe_sql(system):
    """CREATE TABLE, INSERT and SELECT through `loupe sql`; the table joins with mz_tables."""
    created = system.cli("-c", "CREATE TABLE story (id int NOT NULL, note text)")
    assert "CREATE TABLE" in created.stdout
    inserted = system.cli("-c", "INSERT INTO story VALUES (1, 'first'), (2, NULL)")
    assert "INSERT 0 2" in inserted.stdout
    selected = system.cli(
        "--format",
        "json",
        "-c",
        "SELECT s.id, s.note, t.name, t.id LIKE 'u%' AS user_id FROM story s "
        "JOIN mz_catalog.mz_tables t ON t.name = 'story' ORDER BY s.id",
    )
    assert json.loads(selected.stdout) == [
        {"id": 1, "note": "first", "name": "story", "user_id": True},
        {"id": 2, "note": None, "name": "story", "user_id": True},
    ]
    refused = system.cli("-c", "INSERT INTO story VALUES (NULL, 'x')", check=False)
    assert refused.returncode != 0
    assert "23502" in refused.stderr


def test_second_up_on_same_data_dir_is_refused(system):
    """Two `loupe up` on one data dir would corrupt it: the second one refuses."""
    second = subprocess.run(
        [sys.executable, "-m", "loupe.cli.main", "up", "--data-dir", str(system.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode != 0
    assert "in use by another `loupe up`" in second.stderr


def test_unreachable_nats_is_one_clear_line(tmp_path):
    """A configured NATS that is not there: one line, non-zero exit."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loupe.cli.main",
            "up",
            "--data-dir",
            str(tmp_path / "d"),
            "--nats-url",
            "nats://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1
    assert "cannot reach NATS at nats://127.0.0.1:9" in errors[0]


def test_ctrl_c_leaves_no_process_behind(system):
    """Runs last in this module: Ctrl-C stops every service and replica."""
    assert system.processes(), "the system should be running before Ctrl-C"
    assert system.interrupt() == 0
    assert system.processes() == []
