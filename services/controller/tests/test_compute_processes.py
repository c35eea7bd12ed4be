"""The compute controller with replicas as real processes (``loupe compute-replica``).

Uses the real compute replica when ``loupe.compute_replica`` is installed,
else the test-side replica script; both speak the protocol over real NATS.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from typing import Any

from loupe.builtins import MZ_CLUSTER_REPLICA_STATUSES
from loupe.controller.compute import ClusterInfo, ComputeController
from loupe.controller.orchestrators import ReplicaSpec
from loupe.controller.orchestrators.process import DEFAULT_PROGRAM, ProcessOrchestrator
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.compute.v1 import compute_pb2, plan_pb2
from loupe.testing import assert_eventually

REAL_REPLICA = importlib.util.find_spec("loupe.compute_replica.cli") is not None


async def become(
    compute: ComputeController, replica_id: str, expected: tuple[str, str | None, int]
) -> None:
    def check() -> None:
        status = compute.replica_status(replica_id)
        assert status is not None
        assert (status.status, status.reason, status.incarnation) == expected

    await assert_eventually(check, timeout=30)


async def test_replica_process_online_killed_back_and_its_zombie_fenced(
    make_compute, arrow_writer, data_dir, nats_url, nats_connection, kit, unique
):
    """Online on heartbeat; SIGKILL -> offline (killed) -> new incarnation online; zombie ignored."""
    program = DEFAULT_PROGRAM if REAL_REPLICA else kit.FAKE_REPLICA_PROGRAM
    orchestrator = ProcessOrchestrator(
        data_dir, nats_url, program=program, restart_backoff=0.1, terminate_grace=3.0
    )
    compute, _ = await make_compute(
        orchestrator=orchestrator, heartbeat_timeout=3.0, startup_timeout=30.0
    )
    info = ClusterInfo(f"c{unique}", "quickstart")
    replica_id = f"u{unique}"
    commands: list[compute_pb2.ComputeCommand] = []

    async def record(msg: Any) -> None:
        commands.append(compute_pb2.ComputeCommand.FromString(msg.data))

    await nats_connection.subscribe(f"loupe.compute.v1.{replica_id}.command", cb=record)
    await compute.apply([info], [ReplicaSpec(replica_id, info.id)])
    await become(compute, replica_id, ("online", None, 1))

    if REAL_REPLICA:
        # A dataflow over the statuses the controller writes, replayed after the crash.
        await arrow_writer.flush()
        await compute.create_dataflow(info.id, statuses_dataflow(arrow_writer.upper - 1))

    first = orchestrator.pid(replica_id)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await become(compute, replica_id, ("offline", "killed", 1))
    await become(compute, replica_id, ("online", None, 2))
    assert orchestrator.pid(replica_id) not in (None, first)

    # The killed incarnation's ghost speaks: nothing changes.
    stale_before = compute.stale_responses
    subject = f"loupe.compute.v1.{replica_id}.response"
    for response in (
        compute_pb2.ComputeResponse(
            replica_id=replica_id, incarnation=1, hello=compute_pb2.Hello()
        ),
        compute_pb2.ComputeResponse(
            replica_id=replica_id, incarnation=1, heartbeat=compute_pb2.Heartbeat()
        ),
    ):
        await nats_connection.publish(subject, response.SerializeToString())

    def counted() -> None:
        assert compute.stale_responses >= stale_before + 2

    await assert_eventually(counted)
    created = [c.incarnation for c in commands if c.HasField("create_instance")]
    assert created == [1, 2]
    status = compute.replica_status(replica_id)
    assert status is not None
    assert (status.status, status.incarnation) == ("online", 2)

    if REAL_REPLICA:
        # The new incarnation rebuilt the dataflow from the replayed history and
        # reads the statuses collection the controller writes.
        await arrow_writer.flush()

        async def indexed_online() -> None:
            answer = await compute.peek(info.id, compute_pb2.Peek(target_id="statuses_idx"))
            assert answer.WhichOneof("result") == "rows", answer
            found = {tuple(v.text_value for v in row.values) for row in answer.rows.rows}
            assert (replica_id, "online") in found

        await assert_eventually(indexed_online, timeout=20)


def statuses_dataflow(as_of: int) -> plan_pb2.DataflowDescription:
    """(replica_id, status) of the statuses collection, indexed as ``statuses_idx``."""
    statuses = MZ_CLUSTER_REPLICA_STATUSES
    types = tuple(t for _, t in statuses.columns)
    plan = lir.Mfp(
        1,
        lir.Get(0, statuses.id, types=types),
        lir.MapFilterProject(6, projection=(0, 2)),
        types=("text", "text"),
    )
    return dataflow_to_proto(
        DataflowDescription(
            id="statuses_view",
            source_imports=(SourceImport(statuses.id, statuses.shard_id, statuses.columns),),
            objects_to_build=(
                BuildDesc("statuses_view", plan, (("replica_id", "text"), ("status", "text"))),
            ),
            index_exports=(IndexExport("statuses_idx", "statuses_view", (0,)),),
            as_of=as_of,
        )
    )
