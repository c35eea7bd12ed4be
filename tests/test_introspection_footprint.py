"""Issue 12 item 8, end to end: persisted introspection stays bounded while dataflows churn.

A few minutes of a system whose dataflows come and go (an index created,
written to and dropped every couple of seconds), with a short
``introspection_retention`` and frequent compaction: the introspection
collections' history is cut at the retention (their ``since`` follows the
upper), and what their shards hold stops growing once the first retention
window has passed, although rows keep being written.
"""

from __future__ import annotations

import time

import pytest

from loupe.builtins import INTROSPECTION_COLLECTIONS
from loupe.persist import Shard, open_location
from loupe.persist.location import default_uris
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

RETENTION_S = 15
COMPACTION_S = 5
CHURN_S = 80


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(
        tmp_path_factory.mktemp("introspection-footprint") / "data",
        env={"LOUPE_STORAGE_COMPACTION_INTERVAL": str(COMPACTION_S)},
    )
    loupe.start()
    yield loupe
    loupe.stop()


def footprint(system: LoupeUp) -> tuple[int, int, int, int]:
    """(bytes, rows, parts, least since - newest upper in ms) of the introspection shards."""
    blob, consensus = open_location(*default_uris(system.data_dir))
    total_bytes = total_rows = parts = 0
    lag = 0
    for collection in INTROSPECTION_COLLECTIONS:
        state = Shard(collection.shard_id, blob, consensus).state(missing_ok=True)
        total_bytes += sum(p.bytes for p in state.parts)
        total_rows += sum(p.rows for p in state.parts)
        parts += len(state.parts)
        if state.upper:
            lag = max(lag, state.upper - state.since)
    return total_bytes, total_rows, parts, lag


def test_introspection_history_is_cut_at_its_retention(system):
    system.sql(f"ALTER SYSTEM SET introspection_retention = '{RETENTION_S}s'")
    system.sql("CREATE TABLE churn (k int, v int)")
    began = time.monotonic()
    samples: list[tuple[float, tuple[int, int, int, int]]] = []
    round_ = 0
    # At least CHURN_S, and at least a dozen rounds however slow a loaded machine is.
    while time.monotonic() - began < CHURN_S or round_ < 12:
        round_ += 1
        system.sql(
            f"CREATE VIEW c{round_} AS SELECT k, sum(v) FROM churn GROUP BY k;"
            f" CREATE DEFAULT INDEX ON c{round_};"
            f" INSERT INTO churn VALUES ({round_ % 7}, {round_})",
            timeout=60,
        )
        system.sql(f"SELECT count(*) FROM c{round_}", timeout=60)
        system.sql(f"DROP VIEW c{round_} CASCADE")
        samples.append((time.monotonic() - began, footprint(system)))
    assert round_ > 10
    # The history kept is about the retention (plus a compaction interval and a flush).
    *_, lag = samples[-1][1]
    assert lag <= (RETENTION_S + 3 * COMPACTION_S) * 1000, lag
    # Past the first window, the shards stop growing while the churn goes on.
    settled = [bytes_ for at, (bytes_, *_) in samples if at > RETENTION_S + 3 * COMPACTION_S]
    half = len(settled) // 2
    early, late = max(settled[:half]), max(settled[half:])
    assert late <= 1.5 * early, (early, late, samples)
