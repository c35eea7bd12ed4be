"""The hydration views (issue 13) over rows staged in the hydration collections.

A coordinator on the real catalog service and the real engine (``engine``):
the index and materialized view are real catalog objects (the in-process
replica hydrates them), while the rows of the controller's hydration
collections (s270 to s275) are written by the test into their real shards, as
the controller writes them, so the views' answers can be computed here.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from loupe.builtins import (
    MZ_COMPUTE_HYDRATION_TIMES,
    MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER,
    MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES,
    MZ_OBJECT_HYDRATION_HISTORY,
    BuiltinCollection,
)
from loupe.coordinator.tests.conftest import TableHarness
from loupe.interval import Interval

T0 = dt.datetime(2026, 11, 26, 10, 0, 0, tzinfo=dt.UTC)


def _seconds(value: object) -> float:
    """An interval's length in seconds (the client decodes intervals as ``Interval``)."""
    assert isinstance(value, Interval), value
    return value.months * 30 * 86400 + value.days * 86400 + value.micros / 1e6


async def _stage(harness: TableHarness, collection: BuiltinCollection, rows: list[tuple]) -> None:
    updates = [(row, 1) for row in rows]
    for row, diff in updates:
        harness.controller.contents[collection.id][row] += diff
    await harness.controller._flush({collection.id: updates})


async def _objects(harness: TableHarness, session: str) -> tuple[str, str]:
    for statement in (
        "CREATE TABLE t (a int)",
        "CREATE INDEX t_idx ON t (a)",
        "CREATE MATERIALIZED VIEW mv AS SELECT count(*) FROM t",
    ):
        await harness.tag(session, statement)
    [(index_id,)] = await harness.rows(
        session, "SELECT id FROM mz_catalog.mz_indexes WHERE name = 't_idx'"
    )
    [(mv_id,)] = await harness.rows(
        session, "SELECT id FROM mz_catalog.mz_materialized_views WHERE name = 'mv'"
    )
    return index_id, mv_id


async def test_hydration_statuses_follow_hydration_times(engine: TableHarness) -> None:
    """mz_compute_hydration_statuses: hydrated once a time is reported, the time as an
    interval; mz_hydration_statuses: every index and MV, not hydrated without a report."""
    session = await engine.session()
    index_id, mv_id = await _objects(engine, session)
    await _stage(
        engine,
        MZ_COMPUTE_HYDRATION_TIMES,
        [("u1", index_id, 2_500_000), ("u9", index_id, None)],
    )
    rows = await engine.rows(
        session,
        "SELECT object_id, replica_id, hydrated, hydration_time"
        " FROM mz_internal.mz_compute_hydration_statuses ORDER BY replica_id",
    )
    assert [r[:3] for r in rows] == [(index_id, "u1", True), (index_id, "u9", False)]
    assert _seconds(rows[0][3]) == pytest.approx(2_500_000 / 1e9)
    assert rows[1][3] is None
    columns = await engine.execute(
        session, "SELECT * FROM mz_internal.mz_compute_hydration_statuses"
    )
    [description] = [r.description for r in columns if r.HasField("description")]
    assert [(c.name, c.type) for c in description.columns] == [
        ("object_id", "text"),
        ("replica_id", "text"),
        ("hydrated", "bool"),
        ("hydration_time", "interval"),
    ]

    rows = await engine.rows(
        session,
        "SELECT object_id, replica_id, hydrated FROM mz_internal.mz_hydration_statuses"
        " ORDER BY object_id, replica_id",
    )
    expected = sorted(
        [(index_id, "u1", True), (index_id, "u9", False), (mv_id, None, False)],
        key=lambda r: (r[0], r[1] or ""),
    )
    assert sorted(rows, key=lambda r: (r[0], r[1] or "")) == expected


async def test_operator_progress_sums_workers_and_object_progress_has_an_eta(
    engine: TableHarness,
) -> None:
    session = await engine.session()
    index_id, mv_id = await _objects(engine, session)
    # Replica u9 hydrates the index: two nodes, node 0 on two workers.
    per_worker = [
        ("u9", index_id, 0, 0, 100, 200, T0 + dt.timedelta(seconds=10)),
        ("u9", index_id, 0, 1, 50, 200, T0 + dt.timedelta(seconds=8)),
        ("u9", index_id, 1, 0, 10, 40, T0 + dt.timedelta(seconds=9)),
        # u1 is done with the MV.
        ("u1", mv_id, 0, 0, 30, 30, T0 + dt.timedelta(seconds=3)),
    ]
    await _stage(engine, MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER, per_worker)
    await _stage(
        engine,
        MZ_COMPUTE_OPERATOR_HYDRATION_STATUSES,
        [("u9", index_id, 0, False), ("u9", index_id, 1, True), ("u1", mv_id, 0, True)],
    )
    await _stage(
        engine,
        MZ_COMPUTE_HYDRATION_TIMES,
        [("u9", index_id, None), ("u1", mv_id, 3_000_000_000), ("u1", index_id, None)],
    )
    # u9's first incarnation was interrupted; its second started at T0.
    history = [
        (index_id, "u2", "u9", T0 - dt.timedelta(seconds=120), T0 - dt.timedelta(seconds=100),
         None, "interrupted", 1, 5),
        (index_id, "u2", "u9", T0 - dt.timedelta(seconds=1), T0, None, "hydrating", 2, 0),
        (mv_id, "u2", "u1", T0 - dt.timedelta(seconds=1), T0, T0 + dt.timedelta(seconds=3),
         "hydrated", 1, 30),
    ]  # fmt: skip
    await _stage(engine, MZ_OBJECT_HYDRATION_HISTORY, history)

    rows = await engine.rows(
        session,
        "SELECT replica_id, object_id, physical_plan_node_id, records_done, records_estimated,"
        " updated_at FROM mz_internal.mz_compute_operator_hydration_progress"
        " ORDER BY replica_id, physical_plan_node_id",
    )
    expected: dict[tuple, tuple] = {}
    for replica, obj, node, _, done, estimated, at in per_worker:
        old = expected.get((replica, obj, node), (0, 0, at))
        expected[(replica, obj, node)] = (old[0] + done, old[1] + estimated, max(old[2], at))
    assert [(r[0], r[1], r[2], int(r[3]), int(r[4]), r[5]) for r in rows] == [
        (*key, *value) for key, value in sorted(expected.items())
    ]

    rows = await engine.rows(
        session,
        "SELECT replica_id, object_id, hydrated, records_done, records_estimated, started_at,"
        " updated_at, rate, eta FROM mz_internal.mz_compute_hydration_progress"
        " ORDER BY replica_id, object_id",
    )
    by_key = {(r[0], r[1]): r for r in rows}
    assert set(by_key) == {("u1", mv_id), ("u1", index_id), ("u9", index_id)}
    # u9: 160 of 440 records in the 10 s since its episode started.
    done = sum(r[4] for r in per_worker if r[0] == "u9")
    estimated = sum(r[5] for r in per_worker if r[0] == "u9")
    updated = max(r[6] for r in per_worker if r[0] == "u9")
    elapsed = (updated - T0).total_seconds()
    u9 = by_key[("u9", index_id)]
    assert u9[2:7] == (False, Decimal(done), Decimal(estimated), T0, updated)
    assert float(u9[7]) == pytest.approx(done / elapsed)
    assert _seconds(u9[8]) == pytest.approx((estimated - done) / (done / elapsed), rel=1e-6)
    # Hydrated: an ETA of 0.
    mv = by_key[("u1", mv_id)]
    assert mv[2] is True
    assert _seconds(mv[8]) == 0
    # Installed, nothing reported yet: no rate, no ETA.
    waiting = by_key[("u1", index_id)]
    assert waiting[2] is False
    assert waiting[3:] == (None, None, None, None, None, None)


async def test_the_rate_runs_from_the_installation_when_the_start_is_unknown(
    engine: TableHarness,
) -> None:
    session = await engine.session()
    index_id, _ = await _objects(engine, session)
    installed, updated = T0 - dt.timedelta(seconds=2), T0 + dt.timedelta(seconds=8)
    await _stage(engine, MZ_COMPUTE_HYDRATION_TIMES, [("u1", index_id, None)])
    await _stage(
        engine,
        MZ_COMPUTE_OPERATOR_HYDRATION_PROGRESS_PER_WORKER,
        [("u1", index_id, 0, 0, 500, 2_000, updated)],
    )
    await _stage(
        engine,
        MZ_OBJECT_HYDRATION_HISTORY,
        [(index_id, "u2", "u1", installed, None, None, "hydrating", 1, 0)],
    )
    [(started, rate, eta)] = await engine.rows(
        session,
        "SELECT started_at, rate, eta FROM mz_internal.mz_compute_hydration_progress"
        f" WHERE object_id = '{index_id}'",
    )
    elapsed = (updated - installed).total_seconds()
    assert started == installed
    assert float(rate) == pytest.approx(500 / elapsed)
    assert _seconds(eta) == pytest.approx(1_500 / (500 / elapsed), rel=1e-6)


async def _columns(harness: TableHarness, session: str, relation: str) -> list[tuple[str, str]]:
    responses = await harness.execute(session, f"SELECT * FROM {relation}")
    assert not [r.error for r in responses if r.HasField("error")]
    [description] = [r.description for r in responses if r.HasField("description")]
    return [(c.name, c.type) for c in description.columns]


async def test_progress_views_have_their_documented_columns(engine: TableHarness) -> None:
    session = await engine.session()
    assert await _columns(engine, session, "mz_internal.mz_hydration_statuses") == [
        ("object_id", "text"),
        ("replica_id", "text"),
        ("hydrated", "bool"),
    ]
    assert await _columns(
        engine, session, "mz_internal.mz_compute_operator_hydration_progress"
    ) == [
        ("replica_id", "text"),
        ("object_id", "text"),
        ("physical_plan_node_id", "uint8"),
        ("records_done", "numeric"),
        ("records_estimated", "numeric"),
        ("updated_at", "timestamptz"),
    ]
    assert await _columns(engine, session, "mz_internal.mz_compute_hydration_progress") == [
        ("object_id", "text"),
        ("replica_id", "text"),
        ("hydrated", "bool"),
        ("records_done", "numeric"),
        ("records_estimated", "numeric"),
        ("started_at", "timestamptz"),
        ("updated_at", "timestamptz"),
        ("rate", "numeric"),
        ("eta", "interval"),
    ]
