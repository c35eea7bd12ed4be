"""Hydration into mz_internal: real replicas, real NATS, real shards, TPC-H Q3.

The dataflow is TPC-H Q3 over generated tables, built as of a time its
inputs have not reached yet: it hydrates only once the test moves their
uppers past it, so every intermediate state (hydrating, a replica killed
meanwhile, a controller restarted meanwhile) is observed deterministically,
however loaded the machine. Introspection logging is off: hydration is
reported through ``Hydration`` responses regardless.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import signal
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from prometheus_client import REGISTRY

from loupe.builtins import BY_ID, MZ_OBJECT_HYDRATION_HISTORY, MZ_REPLICA_HYDRATION_HISTORY
from loupe.common.transport import NatsServiceEndpoint
from loupe.controller.compute import ClusterInfo
from loupe.controller.hydration import (
    DEPENDENCIES,
    OBJECT_HISTORY,
    PROGRESS,
    REPLICA_HISTORY,
    STATUSES,
    TIMES,
)
from loupe.controller.orchestrators.base import ReplicaSpec
from loupe.controller.orchestrators.process import DEFAULT_PROGRAM, ProcessOrchestrator
from loupe.controller.service import CATALOG_SERVICE, ControllerService, ControllerSettings
from loupe.controller.storage import SparkPartStore, SparkSupervisor, StorageWriter, StreamConfig
from loupe.controller.storage.writer import consolidated_rows
from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.dataflow import ComputeInstance
from loupe.loadgen import tpch
from loupe.persist import Shard
from loupe.persist.listen import nats_upper_notifier
from loupe.persist.shard import arrow_schema
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

pytestmark = [pytest.mark.timeout(240)]

SCALE = 0.01
LOAD_TS = 1
# The dataflows' as_of: past the loaded data, not readable until ``release``.
AS_OF = 5
TABLES = ("customer", "orders", "lineitem")
Q3 = """SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue,
    o_orderdate, o_shippriority
FROM customer, orders, lineitem
WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
    AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
GROUP BY l_orderkey, o_orderdate, o_shippriority"""
WORKERS = 2


@pytest.fixture(scope="module")
def tpch_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    return tpch.generate(SCALE, tmp_path_factory.mktemp("tpch"), TABLES)


def source_id(name: str) -> str:
    return f"s_{name}"


def q3(name: str, unique: str) -> DataflowDescription:
    """Q3 as a view with an index, exported as ``<name>_idx``, reading the test's shards."""

    def resolve(table: str) -> tuple[str, Any] | None:
        columns = tpch.TPCH_TABLES.get(table)
        return None if columns is None else (source_id(table), columns)

    relation = plan_query(sqlglot.parse_one(Q3, read="postgres"), resolve)
    plan = lower_to_lir(relation)
    sources = sorted({node.name for node in lir.walk(plan) if isinstance(node, lir.Get)})
    table_of = {source_id(t): t for t in TABLES}
    return DataflowDescription(
        id=name,
        debug_name=name,
        source_imports=tuple(
            SourceImport(s, f"tpch_{table_of[s]}_{unique}", tpch.TPCH_TABLES[table_of[s]])
            for s in sources
        ),
        objects_to_build=(BuildDesc(name, plan, relation.columns, name),),
        index_exports=(IndexExport(f"{name}_idx", name, (0, 2, 3)),),
        as_of=AS_OF,
    )


class Tpch:
    """The test's TPC-H shards: loaded at ``LOAD_TS``, readable past ``AS_OF`` on ``release``."""

    def __init__(self, tables: dict[str, pa.Table], storage: Any, unique: str) -> None:
        self.shards = {name: Shard(f"tpch_{name}_{unique}", *storage) for name in TABLES}
        tpch.load({name: tables[name] for name in TABLES}, self.shards, LOAD_TS)

    def release(self) -> None:
        for name, shard in self.shards.items():
            empty = arrow_schema(tpch.TPCH_TABLES[name]).empty_table()
            shard.compare_and_append(empty, shard.upper, AS_OF + 2)


def held(writer: Any, cid: str) -> list[tuple[Any, ...]]:
    """The collection's rows; each exactly once (a duplicate or a negative count fails)."""
    found = writer.consolidated(cid)
    assert all(count == 1 for _, count in found), [f for f in found if f[1] != 1]
    return [tuple(row) for row, _ in found]


def of(writer: Any, cid: str, replica_id: str, object_id: str | None = None) -> list[Any]:
    column = {REPLICA_HISTORY: 0, OBJECT_HISTORY: 2}.get(cid, 0)
    rows = [r for r in held(writer, cid) if r[column] == replica_id]
    if object_id is not None:
        at = 0 if cid == OBJECT_HISTORY else 1
        rows = [r for r in rows if r[at] == object_id]
    return sorted(rows, key=repr)


def the_one(writer: Any, cid: str, replica_id: str, object_id: str | None = None) -> Any:
    """The one row ``of`` finds; an AssertionError (retried by ``assert_eventually``) while
    it is not there yet, not the ValueError of unpacking an empty list."""
    rows = of(writer, cid, replica_id, object_id)
    assert len(rows) == 1, (cid, replica_id, object_id, rows)
    return rows[0]


def lir_ids(orchestrator: Any, replica_id: str, dataflow_id: str) -> set[int]:
    """The LIR ids of the dataflow as the replica's engine rendered it."""
    replica = orchestrator.replicas.get(replica_id)
    assert replica is not None, "restarting"
    assert replica.service.dataflows is not None, "no instance yet"
    dataflow = replica.service.dataflows._engine.dataflows.get(dataflow_id)
    assert dataflow is not None, f"{dataflow_id} not built yet on {replica_id}"
    return {region.lir_id for region in dataflow.regions}


def rendered_lir_ids(desc: DataflowDescription) -> set[int]:
    """The LIR ids of ``desc`` as the engine renders it (for replicas in other processes)."""
    engine = ComputeInstance(workers=WORKERS)
    engine.create_dataflow(desc)
    return {region.lir_id for region in engine.dataflows[desc.id].regions}


def staged() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "loupe_controller_hydration_updates"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def check_hydrating(
    writer: Any, orchestrator: Any, replica_id: str, dataflow_id: str, nodes: Any = None
) -> None:
    object_id = f"{dataflow_id}_idx"
    nodes = nodes or lir_ids(orchestrator, replica_id, dataflow_id)
    statuses = of(writer, STATUSES, replica_id, object_id)
    assert {r[2] for r in statuses} == nodes
    assert not any(r[3] for r in statuses), statuses
    progress = of(writer, PROGRESS, replica_id, object_id)
    assert {(r[2], r[3]) for r in progress} == {(n, w) for n in nodes for w in range(WORKERS)}
    assert of(writer, TIMES, replica_id, object_id) == [(replica_id, object_id, None)]


def check_hydrated(
    writer: Any, orchestrator: Any, replica_id: str, dataflow_id: str, nodes: Any = None
) -> None:
    object_id = f"{dataflow_id}_idx"
    nodes = nodes or lir_ids(orchestrator, replica_id, dataflow_id)
    statuses = of(writer, STATUSES, replica_id, object_id)
    assert statuses == sorted(((replica_id, object_id, n, True) for n in nodes), key=repr)
    progress = of(writer, PROGRESS, replica_id, object_id)
    assert {(r[2], r[3]) for r in progress} == {(n, w) for n in nodes for w in range(WORKERS)}
    (_, _, time_ns) = the_one(writer, TIMES, replica_id, object_id)
    assert time_ns is not None
    assert time_ns > 0


def check_replaced(
    writer: Any, orchestrator: Any, replica_id: str, killed_at: dt.datetime, nodes: Any = None
) -> None:
    """Incarnation 2 of killed ``replica_id`` reported q3: its statuses start over (hydrating,
    progress received after the kill) and incarnation 1's episode ended interrupted."""
    check_hydrating(writer, orchestrator, replica_id, "q3", nodes)
    progress = of(writer, PROGRESS, replica_id, "q3_idx")
    assert all(r[6] > killed_at for r in progress), progress
    episodes = of(writer, REPLICA_HISTORY, replica_id)
    assert sorted((e[7], e[6]) for e in episodes) == [(1, "interrupted"), (2, "hydrating")]


def check_history_hydrating(writer: Any, replica_id: str) -> None:
    episode = the_one(writer, REPLICA_HISTORY, replica_id)
    assert (episode[6], episode[3]) == ("hydrating", None), episode
    obj = the_one(writer, OBJECT_HISTORY, replica_id, "q3_idx")
    assert (obj[6], obj[5]) == ("hydrating", None), obj
    assert obj[3] is not None, obj


@pytest.fixture
async def cluster(make_compute, nats_url, kit, unique, storage, tpch_tables):
    orchestrator = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=5.0)
    # Introspection off: hydration comes through the compute protocol anyway.
    info = ClusterInfo(f"c{unique}", "heavy", introspection_interval_ns=0)
    replicas = [f"a{unique}", f"b{unique}"]
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=WORKERS) for r in replicas])

    def online() -> None:
        assert compute.online_replicas(info.id) == replicas

    await assert_eventually(online, timeout=30)
    data = Tpch(tpch_tables, storage, unique)
    return compute, orchestrator, info, replicas, data


async def test_statuses_progress_times_dependencies_and_histories(cluster, arrow_writer, unique):
    compute, orchestrator, info, (first, second), data = cluster
    desc = q3("q3", unique)
    await compute.create_dataflow(info.id, dataflow_to_proto(desc))

    # Hydrating: every node on every worker, nothing hydrated, no time yet.
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrating(arrow_writer, orchestrator, r, "q3"), timeout=30
        )
        # The histories are staged apart from the statuses: they may land a flush later.
        await assert_eventually(
            lambda r=replica_id: check_history_hydrating(arrow_writer, r), timeout=30
        )
    assert set(held(arrow_writer, DEPENDENCIES)) >= {("q3_idx", source_id(t)) for t in TABLES}
    assert {r for r in held(arrow_writer, DEPENDENCIES) if r[0] == "q3_idx"} == {
        ("q3_idx", source_id(t)) for t in TABLES
    }

    data.release()
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrated(arrow_writer, orchestrator, r, "q3"), timeout=60
        )

    def histories() -> None:
        for replica_id in (first, second):
            episode = the_one(arrow_writer, REPLICA_HISTORY, replica_id)
            _, cluster_id, started, finished, count, peak, status, incarnation = episode
            assert (cluster_id, count, status, incarnation) == (info.id, 1, "hydrated", 1)
            assert finished is not None
            assert finished >= started
            assert peak > 0
            obj = the_one(arrow_writer, OBJECT_HISTORY, replica_id, "q3_idx")
            assert (obj[6], obj[7]) == ("hydrated", 1)
            installed, finished_at = obj[3], obj[5]
            (_, _, time_ns) = the_one(arrow_writer, TIMES, replica_id, "q3_idx")
            assert finished_at - installed == dt.timedelta(microseconds=time_ns // 1000)

    await assert_eventually(histories, timeout=10)

    # Hydrated and steady: reports and heartbeats go on, nothing is staged again.
    await asyncio.sleep(1.0)
    before = staged()
    await asyncio.sleep(2.0)
    assert staged() == before


async def test_replicas_report_every_node_on_every_worker_with_times(
    cluster, arrow_writer, nats_connection, unique
):
    """What a replica sends: whole states, each a change, progress monotonic per node."""
    compute, orchestrator, info, (first, _), data = cluster
    messages: list[compute_pb2.Hydration] = []

    async def record(msg: Any) -> None:
        response = compute_pb2.ComputeResponse.FromString(msg.data)
        if response.WhichOneof("kind") == "hydration" and response.hydration.dataflow_id == "q3":
            messages.append(response.hydration)

    subscription = await nats_connection.subscribe(f"loupe.compute.v1.{first}.response", cb=record)
    began_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    await compute.create_dataflow(info.id, dataflow_to_proto(q3("q3", unique)))
    await assert_eventually(
        lambda: check_hydrating(arrow_writer, orchestrator, first, "q3"), timeout=30
    )
    data.release()
    await assert_eventually(lambda: _true(bool(messages) and messages[-1].hydrated), timeout=60)
    await asyncio.sleep(1.0)  # nothing changes any more: nothing more is sent
    await subscription.unsubscribe()
    nodes = lir_ids(orchestrator, first, "q3")
    ended_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)

    done: dict[tuple[int, int], int] = {}
    for message in messages:
        assert list(message.export_ids) == ["q3_idx"]
        assert {(n.lir_id, n.worker_id) for n in message.nodes} == {
            (n, w) for n in nodes for w in range(WORKERS)
        }
        assert message.records_done == sum(n.records_done for n in message.nodes)
        assert began_ms <= message.installed_at_ms <= ended_ms
        for node in message.nodes:
            assert node.records_done >= done.get((node.lir_id, node.worker_id), 0)
            done[(node.lir_id, node.worker_id)] = node.records_done
    final = messages[-1]
    assert [m.hydrated for m in messages].count(True) == 1, "hydrated is reported once"
    assert all(n.hydrated for n in final.nodes)
    assert all(n.records_done == n.records_estimated for n in final.nodes)
    assert final.records_done > 0
    assert final.HasField("hydration_time_ns")
    assert final.installed_at_ms <= final.started_at_ms <= ended_ms
    assert final.nodes_hydrated == final.nodes_total == len(nodes)
    # The controller's rows say the same.
    await arrow_writer.flush()
    progress = of(arrow_writer, PROGRESS, first, "q3_idx")
    assert {(r[2], r[3]): (r[4], r[5]) for r in progress} == {
        (n.lir_id, n.worker_id): (n.records_done, n.records_estimated) for n in final.nodes
    }
    obj = the_one(arrow_writer, OBJECT_HISTORY, first, "q3_idx")
    assert obj[8] == final.records_done
    assert obj[4] == dt.datetime.fromtimestamp(final.started_at_ms / 1000, dt.UTC)


async def test_a_replica_killed_mid_hydration_keeps_its_rows_until_its_next_incarnation(
    cluster, arrow_writer, unique
):
    compute, orchestrator, info, (first, second), data = cluster
    await compute.create_dataflow(info.id, dataflow_to_proto(q3("q3", unique)))
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrating(arrow_writer, orchestrator, r, "q3"), timeout=30
        )
    await asyncio.sleep(0.5)
    others = {cid: of(arrow_writer, cid, second) for cid in (STATUSES, PROGRESS, TIMES)}
    last = {cid: of(arrow_writer, cid, first) for cid in (STATUSES, PROGRESS, TIMES)}
    # Pause the restart: the crashed incarnation's rows are what there is meanwhile.
    orchestrator.restart_backoff = 2.0
    killed_at = dt.datetime.now(dt.UTC)
    await orchestrator.kill(first)

    def interrupted() -> None:
        episodes = of(arrow_writer, REPLICA_HISTORY, first)
        assert [(e[6], e[7]) for e in episodes] == [("interrupted", 1)], episodes
        assert episodes[0][3] >= killed_at
        objects = of(arrow_writer, OBJECT_HISTORY, first, "q3_idx")
        assert [(o[6], o[7]) for o in objects] == [("interrupted", 1)], objects

    await assert_eventually(interrupted, timeout=10)
    assert orchestrator.replicas.get(first) is None, "restarted too soon to observe"
    for cid, rows in last.items():
        assert of(arrow_writer, cid, first) == rows, cid

    # The next incarnation's first report replaces them: statuses start over.
    await assert_eventually(
        lambda: check_replaced(arrow_writer, orchestrator, first, killed_at), timeout=30
    )
    for cid, rows in others.items():
        assert of(arrow_writer, cid, second) == rows, cid

    data.release()
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrated(arrow_writer, orchestrator, r, "q3"), timeout=60
        )

    def ended() -> None:
        episodes = of(arrow_writer, REPLICA_HISTORY, first)
        assert sorted((e[7], e[6]) for e in episodes) == [(1, "interrupted"), (2, "hydrated")]
        objects = of(arrow_writer, OBJECT_HISTORY, first, "q3_idx")
        assert sorted((o[7], o[6]) for o in objects) == [(1, "interrupted"), (2, "hydrated")]
        assert [e[6] for e in of(arrow_writer, REPLICA_HISTORY, second)] == ["hydrated"]

    await assert_eventually(ended, timeout=10)


async def test_drops_retract_rows_and_end_open_episodes(cluster, arrow_writer, unique):
    compute, orchestrator, info, (first, second), data = cluster
    await compute.create_dataflow(info.id, dataflow_to_proto(q3("q3", unique)))
    data.release()
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrated(arrow_writer, orchestrator, r, "q3"), timeout=60
        )
    # A second object, held back by an as_of its inputs will not reach here.
    later = q3("late", unique)
    later = dataclasses.replace(later, as_of=1_000)
    await compute.create_dataflow(info.id, dataflow_to_proto(later))
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrating(arrow_writer, orchestrator, r, "late"), timeout=30
        )

    # Drop one replica: its rows go, the other's stay; its open episodes end dropped.
    await compute.apply([info], [ReplicaSpec(first, info.id, workers=WORKERS)])

    def replica_gone() -> None:
        for cid in (STATUSES, PROGRESS, TIMES):
            assert of(arrow_writer, cid, second) == []
            assert of(arrow_writer, cid, first)
        objects = {o[0]: o[6] for o in of(arrow_writer, OBJECT_HISTORY, second)}
        assert objects == {"q3_idx": "hydrated", "late_idx": "dropped"}

    await assert_eventually(replica_gone, timeout=10)

    # Drop the held object: its rows and dependencies go; its episode ends dropped.
    await compute.allow_compaction(info.id, ["late_idx"], 0, empty=True)

    def object_gone() -> None:
        assert of(arrow_writer, STATUSES, first, "late_idx") == []
        assert of(arrow_writer, PROGRESS, first, "late_idx") == []
        assert of(arrow_writer, TIMES, first, "late_idx") == []
        assert [r for r in held(arrow_writer, DEPENDENCIES) if r[0] == "late_idx"] == []
        assert [o[6] for o in of(arrow_writer, OBJECT_HISTORY, first, "late_idx")] == ["dropped"]
        check_hydrated(arrow_writer, orchestrator, first, "q3")
        assert {r for r in held(arrow_writer, DEPENDENCIES) if r[0] == "q3_idx"} == {
            ("q3_idx", source_id(t)) for t in TABLES
        }

    await assert_eventually(object_gone, timeout=10)


async def test_a_restarted_controller_replaces_rows_and_ends_open_episodes(
    cluster, make_compute, nats_url, kit, arrow_writer, unique
):
    compute, orchestrator, info, replicas, data = cluster
    desc = dataflow_to_proto(q3("q3", unique))
    await compute.create_dataflow(info.id, desc)
    # Dropped while no controller runs: the next one is never sent it again.
    await compute.create_dataflow(info.id, dataflow_to_proto(q3("gone", unique)))
    for replica_id in replicas:
        for name in ("q3", "gone"):
            await assert_eventually(
                lambda r=replica_id, n=name: check_hydrating(arrow_writer, orchestrator, r, n),
                timeout=30,
            )
    # As a controller killed -9 would: its episodes are left open in the shards.
    compute.hydration.incarnation_ended = lambda *_a, **_k: None  # type: ignore[method-assign]
    await compute.stop()
    await arrow_writer.flush()
    for replica_id in replicas:
        assert [e[6] for e in of(arrow_writer, REPLICA_HISTORY, replica_id)] == ["hydrating"]

    again = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    again.incarnations = dict(orchestrator.incarnations)  # the process orchestrator's counter
    compute, _ = await make_compute(orchestrator=again, heartbeat_timeout=5.0)
    compute.hydration.orphan_grace = 1.0
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=WORKERS) for r in replicas])
    # Coordinators send their dataflows again to a new controller.
    await compute.create_dataflow(info.id, desc)
    data.release()

    def replaced() -> None:
        for replica_id in replicas:
            check_hydrated(arrow_writer, again, replica_id, "q3")
            episodes = of(arrow_writer, REPLICA_HISTORY, replica_id)
            assert sorted((e[7], e[6]) for e in episodes) == [(1, "interrupted"), (2, "hydrated")]
            objects = of(arrow_writer, OBJECT_HISTORY, replica_id, "q3_idx")
            assert sorted((o[7], o[6]) for o in objects) == [(1, "interrupted"), (2, "hydrated")]
            assert of(arrow_writer, STATUSES, replica_id, "gone_idx") == []
            assert of(arrow_writer, PROGRESS, replica_id, "gone_idx") == []
            objects = of(arrow_writer, OBJECT_HISTORY, replica_id, "gone_idx")
            assert [(o[7], o[6]) for o in objects] == [(1, "interrupted")]
        deps = [r for r in held(arrow_writer, DEPENDENCIES) if r[0] in ("q3_idx", "gone_idx")]
        assert sorted(deps) == sorted(("q3_idx", source_id(t)) for t in TABLES)

    await assert_eventually(replaced, timeout=60)


async def test_a_replica_process_killed_with_sigkill_mid_hydration(
    make_compute, arrow_writer, data_dir, nats_url, unique, storage, tpch_tables
):
    """Replicas as processes: SIGKILL one mid-hydration; its rows stay, its episode is
    interrupted, its next incarnation starts over and hydrates; the other is untouched."""
    orchestrator = ProcessOrchestrator(
        data_dir, nats_url, program=DEFAULT_PROGRAM, restart_backoff=3.0, terminate_grace=3.0
    )
    compute, _ = await make_compute(orchestrator=orchestrator, heartbeat_timeout=5.0)
    info = ClusterInfo(f"c{unique}", "heavy", introspection_interval_ns=0)
    first, second = f"a{unique}", f"b{unique}"
    await compute.apply([info], [ReplicaSpec(r, info.id, workers=WORKERS) for r in (first, second)])
    data = Tpch(tpch_tables, storage, unique)
    desc = q3("q3", unique)
    nodes = rendered_lir_ids(desc)
    await compute.create_dataflow(info.id, dataflow_to_proto(desc))
    for replica_id in (first, second):
        await assert_eventually(
            lambda r=replica_id: check_hydrating(arrow_writer, None, r, "q3", nodes), timeout=60
        )
    await asyncio.sleep(0.5)
    others = {cid: of(arrow_writer, cid, second) for cid in (STATUSES, PROGRESS, TIMES)}
    last = {cid: of(arrow_writer, cid, first) for cid in (STATUSES, PROGRESS, TIMES)}
    pid = orchestrator.pid(first)
    assert pid is not None
    killed_at = dt.datetime.now(dt.UTC)
    os.kill(pid, signal.SIGKILL)

    def interrupted() -> None:
        episodes = of(arrow_writer, REPLICA_HISTORY, first)
        assert [(e[6], e[7]) for e in episodes][:1] == [("interrupted", 1)], episodes
        objects = of(arrow_writer, OBJECT_HISTORY, first, "q3_idx")
        assert [(o[6], o[7]) for o in objects][:1] == [("interrupted", 1)], objects
        # Until the next incarnation reports, the killed one's rows are what there is.
        for cid, rows in last.items():
            assert of(arrow_writer, cid, first) == rows, cid

    await assert_eventually(interrupted, timeout=30)

    await assert_eventually(
        lambda: check_replaced(arrow_writer, None, first, killed_at, nodes), timeout=60
    )
    for cid, rows in others.items():
        assert of(arrow_writer, cid, second) == rows, cid

    data.release()

    def hydrated() -> None:
        for replica_id in (first, second):
            check_hydrated(arrow_writer, None, replica_id, "q3", nodes)
        episodes = of(arrow_writer, REPLICA_HISTORY, first)
        assert sorted((e[7], e[6]) for e in episodes) == [(1, "interrupted"), (2, "hydrated")]
        assert [(e[7], e[6]) for e in of(arrow_writer, REPLICA_HISTORY, second)] == [
            (1, "hydrated")
        ]

    await assert_eventually(hydrated, timeout=90)


class StaticCatalog:
    def __init__(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        self.snapshot = snapshot

    async def Snapshot(self, request: Any, context: Any) -> catalog_pb2.CatalogSnapshot:
        return self.snapshot


class ShardReader:
    """``consolidated`` over the shards themselves: what the Spark writer wrote."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage

    def consolidated(self, cid: str) -> list[tuple[tuple[Any, ...], int]]:
        shard = Shard(cid, *self._storage)
        if shard.upper == 0:
            return []
        return consolidated_rows(shard.snapshot(), BY_ID[cid].column_names)


@pytest.mark.spark
async def test_hydration_reaches_the_collections_through_the_spark_writer(
    spark, data_dir, nats_url, nats_connection, kit, unique, storage, tpch_tables
):
    """The controller service with its real storage writer: statuses, times, dependencies
    and histories are written with Spark and read back from the shards; the retention
    variable reaches the histories."""
    cluster_id, replicas = f"c{unique}", [f"a{unique}", f"b{unique}"]
    snapshot = catalog_pb2.CatalogSnapshot(
        epoch=1,
        timestamp=1,
        clusters=[catalog_pb2.Cluster(id=cluster_id, name="heavy")],
        replicas=[
            catalog_pb2.ClusterReplica(id=r, name=f"r{i}", cluster_id=cluster_id, size="2")
            for i, r in enumerate(replicas, start=1)
        ],
    )
    # Stored as the catalog stores checked values (ALTER SYSTEM SET ... = '7d').
    snapshot.system_configuration["hydration_history_retention"] = "604800s"
    endpoint = NatsServiceEndpoint(nats_connection, CATALOG_SERVICE, StaticCatalog(snapshot))
    await endpoint.start()
    orchestrator = kit.InProcessOrchestrator(nats_url, replica_class=kit.RealReplica)
    stream = StreamConfig.scoped(unique)
    settings = ControllerSettings(data_dir=data_dir, nats_url=nats_url, storage_flush_interval=0.3)

    def spark_writer(blob: Any, consensus: Any, interval: float) -> StorageWriter:
        # The service's own writer, on the test session's Spark (which it must not stop).
        return StorageWriter(
            spark,
            blob,
            consensus,
            nats_connection,
            stream=stream,
            flush_interval=interval,
            notify=nats_upper_notifier(nats_connection),
            part_store=SparkPartStore(SparkSupervisor(spark, job_timeout=120.0)),
        )

    service = ControllerService(settings, orchestrator=orchestrator, writer_factory=spark_writer)
    running = asyncio.create_task(service.run())
    reader = ShardReader(storage)
    try:
        await assert_eventually(
            lambda: _true((data_dir / "run" / "controller.ready.json").exists()), timeout=120
        )
        data = Tpch(tpch_tables, storage, unique)
        compute = service.compute
        assert compute is not None
        await compute.create_dataflow(cluster_id, dataflow_to_proto(q3("q3", unique)))
        for replica_id in replicas:
            await assert_eventually(
                lambda r=replica_id: check_hydrating(reader, orchestrator, r, "q3"), timeout=60
            )
        data.release()
        for replica_id in replicas:
            await assert_eventually(
                lambda r=replica_id: check_hydrated(reader, orchestrator, r, "q3"), timeout=60
            )

        def histories() -> None:
            for replica_id in replicas:
                assert [e[6] for e in of(reader, REPLICA_HISTORY, replica_id)] == ["hydrated"]
                assert [o[6] for o in of(reader, OBJECT_HISTORY, replica_id)] == ["hydrated"]
            deps = {r for r in held(reader, DEPENDENCIES) if r[0] == "q3_idx"}
            assert deps == {("q3_idx", source_id(t)) for t in TABLES}

        await assert_eventually(histories, timeout=30)
        week = 7 * 86_400_000
        for collection in (MZ_REPLICA_HYDRATION_HISTORY, MZ_OBJECT_HYDRATION_HISTORY):
            assert service.writer._collections[collection.id].retention_ms == week
        assert compute.hydration.retention_ms == week  # replica episodes expire there
    finally:
        service.shutdown()
        await asyncio.wait_for(running, 60)
        await endpoint.stop()


def _true(condition: bool) -> None:
    assert condition
