"""``mz_statement_execution_estimates``: its query, planned and run on the real engine.

The view reads builtin collections; here its query runs over user tables of
the same shape (the ``mz_internal.`` prefix dropped), so the tiny sample below
goes through the planner and the engine exactly as the view's query would.
"""

from __future__ import annotations

import pytest

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_ESTIMATES,
    MZ_STATEMENT_EXECUTION_HISTORY,
    BuiltinCollection,
)
from loupe.coordinator.tests.conftest import TableHarness

# Executions: (id, prepared statement, sample rate, latency ms, status).
# Statement "a" (p1, p2 share sql_hash "ha"): weights 2 + 4 + 1 + 1 = 8.
EXECUTIONS = [
    ("e1", "p1", 0.5, 10, "success"),  # weight 2
    ("e2", "p1", 0.25, 30, "error"),  # weight 4
    ("e3", "p2", 1.0, 20, "success"),  # weight 1
    ("e4", "p2", 1.0, 50, "success"),  # weight 1
    ("e5", "p3", 1.0, 5, "success"),  # statement "b": weight 1
    ("e6", "p3", 0.5, None, None),  # statement "b": still running, weight 2
]
PREPARED = [("p1", "ha"), ("p2", "ha"), ("p3", "hb")]
EXECUTION_COLUMNS = (
    "id",
    "prepared_statement_id",
    "sample_rate",
    "began_at",
    "finished_at",
    "finished_status",
)
TEXTS = [("ha", "SELECT ?"), ("hb", "SELECT ? + ?")]


def _create(collection: BuiltinCollection, *names: str) -> str:
    """A table named as ``collection``, with its columns ``names`` (those the view reads)."""
    types = dict(collection.columns)
    columns = ", ".join(f"{name} {types[name]}" for name in names)
    return f"CREATE TABLE {collection.name} ({columns});"


def _setup() -> str:
    began = "'2026-01-01 00:00:00+00'"
    executions = ", ".join(
        f"('{id_}', '{prepared}', {rate}, {began}, "
        + (
            "NULL, NULL"
            if latency is None
            else f"{began}::timestamptz + INTERVAL '{latency} milliseconds', '{status}'"
        )
        + ")"
        for id_, prepared, rate, latency, status in EXECUTIONS
    )
    prepared = ", ".join(f"('{id_}', '{hash_}')" for id_, hash_ in PREPARED)
    texts = ", ".join(f"('{hash_}', '{sql}')" for hash_, sql in TEXTS)
    return (
        _create(MZ_STATEMENT_EXECUTION_HISTORY, *EXECUTION_COLUMNS)
        + _create(MZ_PREPARED_STATEMENT_HISTORY, "id", "sql_hash")
        + _create(MZ_SQL_TEXT, "sql_hash", "redacted_sql")
        + "INSERT INTO mz_statement_execution_history"
        " (id, prepared_statement_id, sample_rate, began_at, finished_at, finished_status)"
        f" VALUES {executions};"
        f"INSERT INTO mz_prepared_statement_history (id, sql_hash) VALUES {prepared};"
        # The same text on two days: the view must not count it twice.
        f"INSERT INTO mz_sql_text (sql_hash, redacted_sql) VALUES {texts}, {texts};"
    )


async def test_estimates_weight_executions_by_their_sample_rate(engine: TableHarness) -> None:
    session = await engine.session()
    setup = await engine.execute(session, _setup())
    assert not [r.error for r in setup if r.HasField("error")]
    query = MZ_STATEMENT_EXECUTION_ESTIMATES.sql.replace("mz_internal.", "")
    rows = await engine.rows(session, f"SELECT * FROM ({query}) AS v ORDER BY sql_hash")
    a, b = rows
    # "a": 8 executions estimated from 4 sampled; the error (weight 4) is half.
    # Latencies sorted with cumulative weights: 10 (2), 20 (3), 30 (7), 50 (8):
    # 50 % of 8 = 4 is first reached at 30, 90 % (7.2) and 99 % at 50.
    assert a[0:2] == ("ha", "SELECT ?")
    assert float(a[2]) == pytest.approx(8.0)
    assert float(a[3]) == pytest.approx(0.5)
    assert [float(v) for v in a[4:7]] == pytest.approx((30.0, 50.0, 50.0))
    assert a[7] == 4
    # "b": the running execution counts as executed, not in the error rate nor latencies.
    assert b[0:2] == ("hb", "SELECT ? + ?")
    assert float(b[2]) == pytest.approx(3.0)
    assert float(b[3]) == pytest.approx(0.0)
    assert [float(v) for v in b[4:7]] == pytest.approx((5.0, 5.0, 5.0))
    assert b[7] == 2


async def test_estimates_view_is_readable_by_its_name(engine: TableHarness) -> None:
    """Named as ``mz_internal.mz_statement_execution_estimates``, it plans over the builtins."""
    session = await engine.session()
    responses = await engine.execute(
        session, "SELECT * FROM mz_internal.mz_statement_execution_estimates"
    )
    assert not [r.error for r in responses if r.HasField("error")]
    [description] = [r.description for r in responses if r.HasField("description")]
    assert [column.name for column in description.columns] == [
        "sql_hash",
        "sql",
        "estimated_executions",
        "estimated_error_rate",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "sampled_executions",
    ]
