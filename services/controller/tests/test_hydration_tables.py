"""``HydrationTables`` on its own, over real shards: the rules replicas cannot easily show."""

from __future__ import annotations

import datetime as dt
from typing import Any

from loupe.controller.hydration import (
    DEPENDENCIES,
    OBJECT_HISTORY,
    PROGRESS,
    REPLICA_HISTORY,
    STATUSES,
    TIMES,
    DataflowInfo,
    HydrationTables,
)
from loupe.proto.compute.v1 import compute_pb2, plan_pb2

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def report(
    dataflow_id: str,
    exports: list[str],
    *,
    hydrated: bool = False,
    done: int = 0,
    nodes: int = 2,
    workers: int = 2,
) -> compute_pb2.Hydration:
    message = compute_pb2.Hydration(
        dataflow_id=dataflow_id,
        hydrated=hydrated,
        export_ids=exports,
        installed_at_ms=int(T0.timestamp() * 1000),
        nodes=[
            compute_pb2.NodeHydration(
                lir_id=n, worker_id=w, hydrated=hydrated, records_done=done, records_estimated=9
            )
            for n in range(nodes)
            for w in range(workers)
        ],
        records_done=done * nodes * workers,
    )
    if hydrated:
        message.hydration_time_ns = 3_000_000
    return message


def rows(writer: Any, cid: str) -> list[tuple[Any, ...]]:
    found = writer.consolidated(cid)
    assert all(count == 1 for _, count in found), found
    return sorted((tuple(row) for row, _ in found), key=repr)


async def test_two_exports_one_report_and_a_late_object(arrow_writer: Any) -> None:
    dataflows: dict[str, DataflowInfo] = {"d": DataflowInfo(("i1", "i2"))}
    clock = Clock()
    tables = HydrationTables(arrow_writer, dataflows_of=lambda _c: dataflows, clock=clock)
    tables.incarnation_started("r", "c", 1)
    tables.on_heartbeat("r", 1, 100)
    tables.write()
    await arrow_writer.flush()
    assert [(e[6], e[4], e[5]) for e in rows(arrow_writer, REPLICA_HISTORY)] == [
        ("hydrating", 2, 100)
    ]

    tables.on_hydration("r", "c", 1, report("d", ["i1", "i2"]))
    tables.on_heartbeat("r", 1, 300)
    tables.on_heartbeat("r", 1, 200)
    clock.now = T0 + dt.timedelta(seconds=1)
    tables.on_hydration("r", "c", 1, report("d", ["i1", "i2"], hydrated=True, done=9))
    tables.write()
    await arrow_writer.flush()
    # Both exports carry the dataflow's nodes; one episode per export.
    assert {(r[1], r[2], r[3]) for r in rows(arrow_writer, STATUSES)} == {
        (o, n, True) for o in ("i1", "i2") for n in range(2)
    }
    assert len(rows(arrow_writer, PROGRESS)) == 2 * 2 * 2
    assert rows(arrow_writer, TIMES) == [("r", "i1", 3_000_000), ("r", "i2", 3_000_000)]
    ((_, _, started, finished, count, peak, status, incarnation),) = rows(
        arrow_writer, REPLICA_HISTORY
    )
    assert (started, count, peak, status, incarnation) == (T0, 2, 300, "hydrated", 1)
    assert finished == T0 + dt.timedelta(milliseconds=3)
    objects = rows(arrow_writer, OBJECT_HISTORY)
    assert [(o[0], o[6], o[8]) for o in objects] == [("i1", "hydrated", 36), ("i2", "hydrated", 36)]

    # A new object: the live incarnation's episode hydrates again, then is hydrated.
    clock.now = T0 + dt.timedelta(seconds=5)
    dataflows["late"] = DataflowInfo(("l",))
    tables.on_heartbeat("r", 1, 250)
    tables.write()
    await arrow_writer.flush()
    ((_, _, _, finished, count, peak, status, _),) = rows(arrow_writer, REPLICA_HISTORY)
    assert (finished, count, peak, status) == (None, 3, 300, "hydrating")
    tables.on_heartbeat("r", 1, 400)
    tables.on_hydration("r", "c", 1, report("late", ["l"], hydrated=True, done=1))
    tables.write()
    await arrow_writer.flush()
    ((_, _, _, finished, count, peak, status, _),) = rows(arrow_writer, REPLICA_HISTORY)
    assert (count, peak, status) == (3, 400, "hydrated")
    assert finished == clock.now  # it cannot have finished before the object came
    assert [o[0] for o in rows(arrow_writer, OBJECT_HISTORY)] == ["i1", "i2", "l"]
    # The incarnation ends hydrated: its episode stays hydrated.
    tables.incarnation_ended("r", 1)
    tables.write()
    await arrow_writer.flush()
    assert [e[6] for e in rows(arrow_writer, REPLICA_HISTORY)] == ["hydrated"]


async def test_replica_episodes_expire_in_the_controller_never_a_live_one(
    arrow_writer: Any,
) -> None:
    dataflows = {"d": DataflowInfo(("i",))}
    clock = Clock()
    tables = HydrationTables(arrow_writer, dataflows_of=lambda _c: dataflows, clock=clock)
    tables.retention_ms = 3_600_000
    # r1: an incarnation that hydrated (T0) and ended; r2: one hydrated at T0, still live.
    for replica_id in ("r1", "r2"):
        tables.incarnation_started(replica_id, "c", 1)
        tables.on_hydration(replica_id, "c", 1, report("d", ["i"], hydrated=True))
    tables.incarnation_ended("r1", 1)
    tables.write()
    await arrow_writer.flush()
    assert [(e[0], e[6]) for e in rows(arrow_writer, REPLICA_HISTORY)] == [
        ("r1", "hydrated"),
        ("r2", "hydrated"),
    ]
    clock.now = T0 + dt.timedelta(hours=2)
    assert await tables.expire() == 1
    assert await tables.expire() == 0  # retracted already: never twice
    tables.write()
    await arrow_writer.flush()
    assert [e[0] for e in rows(arrow_writer, REPLICA_HISTORY)] == ["r2"]
    # The live one, two hours after it hydrated, gets a new object: changed, not lost.
    dataflows["late"] = DataflowInfo(("l",))
    tables.on_heartbeat("r2", 1, 10)
    assert await tables.expire() == 0
    tables.write()
    await arrow_writer.flush()
    assert [(e[0], e[6]) for e in rows(arrow_writer, REPLICA_HISTORY)] == [("r2", "hydrating")]


async def test_changes_within_one_write_interval_are_staged_once(arrow_writer: Any) -> None:
    dataflows = {"d": DataflowInfo(("i",))}
    tables = HydrationTables(arrow_writer, dataflows_of=lambda _c: dataflows)
    tables.incarnation_started("r", "c", 1)
    tables.on_hydration("r", "c", 1, report("d", ["i"], done=1))
    tables.write()
    for done in range(2, 30):
        tables.on_hydration("r", "c", 1, report("d", ["i"], done=done))
    # 28 reports, one write: each progress row (2 nodes x 2 workers) and the open
    # episode's row (its records) are retracted and written once.
    assert tables.write() == 2 * (2 * 2) + 2
    # The same report again: nothing.
    tables.on_hydration("r", "c", 1, report("d", ["i"], done=29))
    assert tables.write() == 0
    await arrow_writer.flush()
    assert {r[4] for r in rows(arrow_writer, PROGRESS)} == {29}


async def test_one_shot_peeks_write_nothing(arrow_writer: Any) -> None:
    """A one-shot SELECT's dataflow (every read of these relations is one) is not reported:
    no dependencies, no statuses, no progress, no times, no episodes."""
    dataflows = {"t1": DataflowInfo(("t1_idx",), transient=True)}
    tables = HydrationTables(arrow_writer, dataflows_of=lambda _c: dataflows)
    tables.incarnation_started("r", "c", 1)
    description = plan_pb2.DataflowDescription(
        id="t1",
        debug_name="transient t1",
        source_imports=[plan_pb2.SourceImport(id="u1")],
        index_exports=[plan_pb2.IndexExport(index_id="t1_idx")],
    )
    tables.dataflow_created(description)
    tables.on_hydration("r", "c", 1, report("t1", ["t1_idx"]))
    tables.write()
    await arrow_writer.flush()
    for cid in (DEPENDENCIES, STATUSES, PROGRESS, TIMES, OBJECT_HISTORY):
        assert rows(arrow_writer, cid) == []
    tables.on_hydration("r", "c", 1, report("t1", ["t1_idx"], hydrated=True))
    tables.object_dropped("t1_idx")
    tables.write()
    await arrow_writer.flush()
    for cid in (DEPENDENCIES, STATUSES, PROGRESS, TIMES, OBJECT_HISTORY):
        assert rows(arrow_writer, cid) == []
