"""Strict serializability, checked on a history of concurrent sessions (real processes).

Writers append to a table while readers read it through a transient
dataflow, an indexed view and a materialized view; every read must fit one
serial order of the acknowledged writes that respects real time
(``loupe.testing.consistency``). ``make chaos`` runs the same longer.
"""

from __future__ import annotations

import pytest

from loupe.testing.consistency import History, Read, Write, check, run_history
from loupe.testing.system import LoupeUp

pytestmark = pytest.mark.e2e


def test_the_checker_finds_stale_reads_and_time_travel() -> None:
    """The checker itself: a read missing an acknowledged write, and one going backwards."""
    history = History(
        writes=[Write(0, 1, sent=0.0, acked=1.0), Write(0, 2, sent=2.0, acked=3.0)],
        reads=[
            Read("table", sent=1.5, done=1.6, seen={}),  # stale: seq 1 was acknowledged
            Read("indexed view", sent=3.5, done=3.6, seen={0: (2, 2)}),
            Read("materialized view", sent=4.0, done=4.1, seen={0: (1, 1)}),  # went back
            Read("table", sent=4.2, done=4.3, seen={0: (1, 2)}),  # not a prefix
        ],
    )
    violations = check(history)
    assert any(v.startswith("stale table read") for v in violations)
    assert any("went back in time" in v for v in violations)
    assert any("saw 1 writes of writer 0 up to seq 2" in v for v in violations)


def test_concurrent_reads_and_writes_are_strict_serializable(tmp_path) -> None:
    """Three writers and three readers over a table, an indexed view and an MV."""
    system = LoupeUp(tmp_path / "data")
    system.start()
    try:
        violations, history = run_history(system.sql_port, writers=3, readers=3, writes_each=25)
    finally:
        system.stop()
    assert len(history.writes) == 75
    assert {r.path for r in history.reads} == {"table", "indexed view", "materialized view"}
    assert not violations, "\n".join(violations[:20])
