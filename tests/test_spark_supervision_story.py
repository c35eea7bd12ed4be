"""Issue 11, item 1: the controller's Spark JVM killed and its scratch directory deleted.

Every service a real process (``loupe up``). The storage writer finds its
session dead, builds a new one, and goes on: DDL made meanwhile reaches the
catalog relations exactly (a dropped table is not listed, a created one is,
once), and ``mz_internal.mz_storage_writer_status`` shows the restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from loupe.common.errors import LoupeError
from loupe.testing import eventually
from loupe.testing.system import LoupeUp, processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def system(tmp_path_factory: Any) -> Any:
    loupe = LoupeUp(tmp_path_factory.mktemp("spark") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


def spark_jvm(data_dir: Path) -> int | None:
    """The controller's Spark JVM: its java.io.tmpdir is under the data directory."""
    for pid, cmdline in processes_mentioning(str(data_dir / "spark")):
        if "SparkSubmit" in cmdline:
            return pid
    return None


# The machine may be loaded (a JVM starting takes a minute then): generous per statement.
SQL_TIMEOUT_S = 90.0


def wait_until(check: Any, timeout: float) -> Any:
    return eventually.wait_until(check, timeout, retry_on=(AssertionError, LoupeError))


def ddl(system: LoupeUp, statement: str) -> None:
    """DDL while storage may be down: committed either way (the catalog relations follow)."""
    try:
        system.sql(statement, timeout=SQL_TIMEOUT_S)
    except LoupeError as error:
        if "committed" not in error.message:
            raise


def test_spark_killed_and_scratch_deleted_the_writer_recovers(system: LoupeUp) -> None:
    data_dir = system.data_dir
    system.sql("CREATE TABLE before_kill (a int)", timeout=SQL_TIMEOUT_S)
    system.sql("CREATE TABLE dropped_while_down (a int)", timeout=SQL_TIMEOUT_S)
    jvm = spark_jvm(data_dir)
    assert jvm is not None, "the controller's Spark scratch is under the data dir"
    [(status, restarts)] = system.sql(
        "SELECT status, restarts FROM mz_internal.mz_storage_writer_status", timeout=SQL_TIMEOUT_S
    )
    assert (status, restarts) == ("running", 0)

    os.kill(jvm, signal.SIGKILL)
    shutil.rmtree(data_dir / "spark")
    killed = time.monotonic()
    ddl(system, "CREATE TABLE created_while_down (a int)")
    ddl(system, "DROP TABLE dropped_while_down")

    def restarted() -> tuple[Any, ...]:
        rows = system.sql(
            "SELECT status, restarts, spark_incarnation, reason"
            " FROM mz_internal.mz_storage_writer_status",
            timeout=SQL_TIMEOUT_S,
        )
        assert len(rows) == 1, rows
        assert rows[0][:3] == ("running", 1, 2), rows
        return rows[0]

    row = wait_until(restarted, timeout=240)
    assert row[3], "the row says why Spark was restarted"
    recovered_s = time.monotonic() - killed

    def tables_match_catalog() -> None:
        names = system.sql(
            "SELECT name FROM mz_catalog.mz_objects WHERE type = 'table' AND id LIKE 'u%'",
            timeout=SQL_TIMEOUT_S,
        )
        assert sorted(names) == [("before_kill",), ("created_while_down",)], names

    wait_until(tables_match_catalog, timeout=60)
    new_jvm = spark_jvm(data_dir)
    assert new_jvm not in (None, jvm), "a new JVM"
    assert not os.path.exists(f"/proc/{jvm}"), "the killed JVM is reaped, not left defunct"
    system.sql("INSERT INTO before_kill VALUES (1)", timeout=SQL_TIMEOUT_S)
    assert system.sql("SELECT a FROM before_kill", timeout=SQL_TIMEOUT_S) == [(1,)]
    print(f"storage writer status back to running {recovered_s:.1f}s after the kill")
