"""A replica's introspection over real NATS: messages, live configuration, log reads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow as pa

from loupe.builtins import MZ_CLUSTER_REPLICAS
from loupe.common import values
from loupe.compute_replica.introspection import introspection_subject
from loupe.introspection.logs import BY_NAME, LOG_VARIANTS, index_logs
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually

FAST = 100_000_000  # 100 ms
OPERATORS = BY_NAME["mz_dataflow_operators_per_worker"]


def logging(interval_ns: int = FAST) -> compute_pb2.LoggingConfig:
    return compute_pb2.LoggingConfig(
        interval_ns=interval_ns, enable_logging=interval_ns > 0, index_logs=index_logs()
    )


class Listener:
    """Records every IntrospectionUpdates published on a replica's subject."""

    def __init__(self) -> None:
        self.messages: list[compute_pb2.ComputeResponse] = []
        self.sizes: list[int] = []

    async def start(self, nc: Any, replica_id: str) -> None:
        async def record(msg: Any) -> None:
            self.sizes.append(len(msg.data))
            self.messages.append(compute_pb2.ComputeResponse.FromString(msg.data))

        await nc.subscribe(introspection_subject(replica_id), cb=record)
        await nc.flush()

    @property
    def updates(self) -> list[compute_pb2.IntrospectionUpdates]:
        return [m.introspection_updates for m in self.messages]

    async def wait(self, count: int, timeout: float = 10.0) -> list[Any]:
        def enough() -> list[Any]:
            assert len(self.updates) >= count, f"{len(self.updates)} messages, want {count}"
            return self.updates

        return await assert_eventually(enough, timeout=timeout)


def table(log: compute_pb2.LogUpdates) -> pa.Table:
    return pa.ipc.open_stream(log.arrow_ipc).read_all()


def logs_of(message: compute_pb2.IntrospectionUpdates) -> dict[str, pa.Table]:
    return {log.log: table(log) for log in message.logs}


async def start(start_replica, controller, storage, config, **settings):
    replica = await start_replica(workers=2, **settings)
    listener = Listener()
    await listener.start(controller.nc, controller.replica_id)
    await controller.wait_for("hello")
    await controller.create_instance(storage, workers=2, logging=config)
    await controller.send(initialization_complete=compute_pb2.InitializationComplete())
    await assert_eventually(lambda: _true(replica.initialized))
    return replica, listener


def _true(condition: bool) -> None:
    assert condition


async def test_first_message_is_a_snapshot_then_changes_in_sequence(
    start_replica, controller, storage
):
    _replica, listener = await start(start_replica, controller, storage, logging())
    first = (await listener.wait(1))[0]
    assert first.snapshot
    assert first.seq == 0
    assert {log.log for log in first.logs} == {v.name for v in LOG_VARIANTS}
    assert listener.messages[0].incarnation == 3

    await controller.create_index(MZ_CLUSTER_REPLICAS)

    def operators_logged() -> None:
        found = [logs_of(u).get(OPERATORS.name) for u in listener.updates[1:]]
        rows = [t for t in found if t is not None and t.num_rows]
        assert rows, "no operator rows yet"

    await assert_eventually(operators_logged)
    seqs = [u.seq for u in listener.updates]
    assert seqs == list(range(len(seqs)))
    assert not any(u.snapshot for u in listener.updates[1:])
    uppers = [u.upper for u in listener.updates]
    assert uppers == sorted(uppers)
    assert len(set(uppers)) == len(uppers)
    operators = logs_of(listener.updates[-1]).get(OPERATORS.name)
    if operators is not None:
        assert operators.column_names == [*OPERATORS.column_names, "mz_timestamp", "mz_diff"]

    # The controller lost track: the next message is a whole snapshot again.
    await controller.send(
        update_configuration=compute_pb2.UpdateConfiguration(introspection_snapshot=True)
    )
    count = len(listener.updates)
    await controller.create_index(MZ_CLUSTER_REPLICAS, index="j")
    after = (await listener.wait(count + 1))[count]
    assert after.snapshot
    assert after.seq == count
    state = logs_of(after)[OPERATORS.name]
    assert state.num_rows > 0
    assert set(state.column("mz_diff").to_pylist()) == {1}


async def test_interval_zero_means_no_collector_no_messages(start_replica, controller, storage):
    replica, listener = await start(start_replica, controller, storage, logging(0))
    await controller.create_index(MZ_CLUSTER_REPLICAS)
    await assert_eventually(lambda: _true(replica.dataflows is not None))
    await asyncio.sleep(0.5)
    assert listener.messages == []
    assert replica.introspection.collector is None
    assert not replica.introspection.running
    assert replica.dataflows._engine.hooks is None


async def test_update_configuration_changes_the_interval_live(start_replica, controller, storage):
    replica, listener = await start(start_replica, controller, storage, logging(0))
    await controller.create_index(MZ_CLUSTER_REPLICAS)
    await asyncio.sleep(0.3)
    assert listener.messages == []

    await controller.send(update_configuration=compute_pb2.UpdateConfiguration(logging=logging()))
    first = (await listener.wait(1))[0]
    assert first.snapshot
    assert first.seq == 0
    assert replica.dataflows._engine.hooks is replica.introspection.collector

    slow = 1_000_000_000
    await controller.send(
        update_configuration=compute_pb2.UpdateConfiguration(logging=logging(slow))
    )
    await assert_eventually(lambda: _true(replica.introspection.interval_ns == slow))

    await controller.send(update_configuration=compute_pb2.UpdateConfiguration(logging=logging(0)))
    await assert_eventually(lambda: _true(not replica.introspection.running))
    assert replica.dataflows._engine.hooks is None
    count = len(listener.messages)
    await controller.create_index(MZ_CLUSTER_REPLICAS, index="k")
    await asyncio.sleep(0.5)
    assert len(listener.messages) == count

    # Back on: a fresh collector, and its first message is a snapshot.
    await controller.send(update_configuration=compute_pb2.UpdateConfiguration(logging=logging()))
    again = (await listener.wait(count + 1))[count]
    assert again.snapshot


async def test_a_message_over_the_bound_is_dropped_counted_and_a_snapshot_follows(
    start_replica, controller, storage
):
    replica, listener = await start(
        start_replica, controller, storage, logging(), introspection_max_message_bytes=3_000
    )
    await controller.create_index(MZ_CLUSTER_REPLICAS)
    # Snapshots of a replica with a dataflow exceed 3 kB: everything is dropped and counted.
    await assert_eventually(lambda: _true(replica.introspection.dropped_updates > 0))
    assert replica.introspection.incomplete_since_ms > 0
    replica.introspection.max_message_bytes = 8 * 2**20
    message = (await listener.wait(1))[-1]
    assert message.snapshot
    assert message.dropped_updates > 0
    assert message.incomplete_since_ms == 0


def log_index(log_id: str, columns: tuple[tuple[str, str], ...], index: str) -> Any:
    types = tuple(t for _, t in columns)
    desc = DataflowDescription(
        id=f"{index}_view",
        debug_name=f"{index}_view",
        source_imports=(SourceImport(log_id, "", columns),),
        objects_to_build=(
            BuildDesc(
                f"{index}_view",
                lir.Get(0, log_id, types=types),
                tuple((f"c{i}", t) for i, t in enumerate(types)),
                f"{index}_view",
            ),
        ),
        index_exports=(IndexExport(index, f"{index}_view", (0,)),),
        as_of=time.time_ns() // 1_000_000,
    )
    return compute_pb2.CreateDataflow(dataflow=dataflow_to_proto(desc))


async def test_a_dataflow_reads_a_log_at_an_oracle_timestamp(start_replica, controller, storage):
    _replica, _listener = await start(start_replica, controller, storage, logging())
    await controller.create_index(MZ_CLUSTER_REPLICAS)
    await asyncio.sleep(0.3)  # a tick later: the index's operators are in the log's state
    await controller.send(create_dataflow=log_index(OPERATORS.log_id, OPERATORS.columns, "ops"))
    began = time.monotonic()
    peek = await controller.peek("ops", timestamp=time.time_ns() // 1_000_000)
    response = await controller.peek_response(peek)
    assert response.WhichOneof("result") == "rows", response
    rows = [values.from_row(r) for r in response.rows.rows]
    assert rows, "the log's state at the oracle timestamp holds the index's operators"

    # Later changes arrive tick by tick: a new index's operators, read at a later time.
    await controller.create_index(MZ_CLUSTER_REPLICAS, index="j")
    await asyncio.sleep(0.3)
    later = await controller.peek("ops", timestamp=time.time_ns() // 1_000_000)
    more = [values.from_row(r) for r in (await controller.peek_response(later)).rows.rows]
    assert len(more) > len(rows)
    assert {tuple(r) for r in rows} <= {tuple(r) for r in more}
    assert {row[1] for row in rows} == {0, 1}  # both workers
    assert time.monotonic() - began < 5


async def test_a_log_read_with_logging_off_is_refused(start_replica, controller, storage):
    _replica, _listener = await start(start_replica, controller, storage, logging(0))
    await controller.send(create_dataflow=log_index(OPERATORS.log_id, OPERATORS.columns, "ops"))
    errors = await controller.wait_for("collection_error")
    assert "introspection" in errors[0].error.message
    peek = await controller.peek("ops")
    response = await controller.peek_response(peek)
    assert response.WhichOneof("result") == "error"


async def test_a_snapshot_larger_than_a_nats_message_goes_in_parts(
    start_replica, controller, storage
):
    replica, listener = await start(start_replica, controller, storage, logging())
    await controller.create_index(MZ_CLUSTER_REPLICAS)
    await listener.wait(1)
    replica.introspection.max_payload = 16_000  # parts of at most 8 kB
    count = len(listener.updates)
    await controller.send(
        update_configuration=compute_pb2.UpdateConfiguration(introspection_snapshot=True)
    )

    def split_snapshot() -> list[int]:
        found = [i for i, u in enumerate(listener.updates) if i >= count and u.snapshot]
        assert found
        first = found[0]
        parts = [
            i for i, u in enumerate(listener.updates) if u.upper == listener.updates[first].upper
        ]
        assert len(parts) > 1
        return parts

    parts = await assert_eventually(split_snapshot, timeout=10)
    messages = [listener.updates[i] for i in parts]
    assert messages[0].snapshot
    assert not any(m.snapshot for m in messages[1:])
    assert [m.seq for m in messages] == list(range(messages[0].seq, messages[0].seq + len(parts)))
    assert all(listener.sizes[i] <= 16_000 for i in parts)
    assert {log.log for m in messages for log in m.logs} == {v.name for v in LOG_VARIANTS}
    assert replica.introspection.dropped_updates == 0
