"""A finished statement is visible in the activity log as soon as its flush has landed.

The storage writer stamps a flush with the wall clock, ahead of the timestamp
oracle (which the coordinator's table ticks move once a second; here once in
a minute, so nothing else moves it). A strict serializable read of builtin
collections that the writer has written past the oracle's timestamp reads at
their latest complete time and moves the oracle there.
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loupe.builtins import MZ_STATEMENT_EXECUTION_HISTORY
from loupe.client import SqlClient
from loupe.persist import Shard
from loupe.persist.location import default_uris, open_location
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    before = os.environ.get("LOUPE_TABLE_TICK_INTERVAL")
    os.environ["LOUPE_TABLE_TICK_INTERVAL"] = "60"
    loupe = LoupeUp(tmp_path_factory.mktemp("statement-log-visible") / "data")
    try:
        loupe.start()
    finally:
        if before is None:
            del os.environ["LOUPE_TABLE_TICK_INTERVAL"]
        else:
            os.environ["LOUPE_TABLE_TICK_INTERVAL"] = before
    loupe.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
    yield loupe
    loupe.stop()


def test_a_read_right_after_the_flush_sees_the_statement(system: LoupeUp) -> None:
    """One strict serializable read after the flush landed shows the finished execution."""
    shard = Shard(
        MZ_STATEMENT_EXECUTION_HISTORY.shard_id, *open_location(*default_uris(system.data_dir))
    )
    sql = f"SELECT 'marker-{uuid.uuid4()}'"
    poll = (
        "SELECT finished_status FROM mz_internal.mz_recent_activity_log "
        "WHERE sql = '" + sql.replace("'", "''") + "'"
    )
    with (
        SqlClient("127.0.0.1", system.sql_port) as marked,
        SqlClient("127.0.0.1", system.sql_port) as reader,
    ):
        reader.query("SET statement_logging_sample_rate = 0.0")
        marked.query("SET statement_logging_sample_rate = 1.0")
        began = dt.datetime.now(dt.UTC)
        marked.query(sql)
        deadline = time.monotonic() + 60
        # Wait until the flush carrying the execution's end has landed (its beginning may
        # have come in an earlier one), then read once.
        while not _finished_since(shard, began):
            assert time.monotonic() < deadline, "no flush of the finished execution"
            time.sleep(0.02)
        assert reader.query(poll) == [("success",)]


def _finished_since(shard: Shard, began: dt.datetime) -> bool:
    """Whether the shard holds an execution that began at ``began`` or later and succeeded."""
    if shard.state().upper == 0:
        return False
    rows = shard.snapshot()
    mask = pc.and_(
        pc.equal(rows.column("finished_status"), "success"),
        pc.greater_equal(rows.column("began_at"), pa.scalar(began, rows.column("began_at").type)),
    )
    return bool(pc.any(pc.fill_null(mask, False)).as_py())
