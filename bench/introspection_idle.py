"""What introspection costs an idle replica, and what it sends.

A real replica process (``loupe compute-replica``) against a real nats-server
gets ``CreateInstance`` with ``--interval-ms`` of introspection (and once with
0, the baseline), then ``--indexes`` index dataflows over a small table, and
is left idle. After a warm-up, the process's CPU time (``/proc/<pid>/stat``,
user + system) over ``--seconds`` gives its share of one core; the messages
and bytes it published on its introspection subject are counted. Target:
under 1 % of a core with introspection on (issue 12).

With ``--write-every S`` a row is written to the table every S seconds
instead: the replica's logs then change every interval (the message sizes
and updates of a working replica).

Run: ``.venv/bin/python bench/introspection_idle.py [--seconds 30] [--write-every 0.1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from loupe.common.nats_server import NatsServerProcess
from loupe.common.transport import connect, publish
from loupe.introspection.logs import index_logs
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN, Shard, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema
from loupe.plan import lir
from loupe.plan.codec import dataflow_to_proto
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport
from loupe.proto.compute.v1 import compute_pb2

COLUMNS = (("id", "int4"), ("name", "text"))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def index(name: str, shard: Shard) -> compute_pb2.ComputeCommand:
    desc = DataflowDescription(
        id=name,
        debug_name=name,
        source_imports=(SourceImport("t", shard.shard_id, COLUMNS),),
        objects_to_build=(BuildDesc(name, lir.Get(0, "t", types=("int4", "text")), COLUMNS),),
        index_exports=(IndexExport(f"{name}_i", name, (0,)),),
        as_of=5,
    )
    return compute_pb2.ComputeCommand(
        incarnation=1, create_dataflow=compute_pb2.CreateDataflow(dataflow=dataflow_to_proto(desc))
    )


async def measure(nats_url: str, data_dir: Path, interval_ms: int, args: Any) -> dict[str, float]:
    replica_id = f"bench{interval_ms}x{int(time.time())}"
    blob_uri, consensus_uri = default_uris(data_dir)
    shard = Shard("t-shard", *open_location(blob_uri, consensus_uri))
    shard.ensure(COLUMNS)
    if shard.upper == 0:
        rows = [{"id": i, "name": f"n{i}", TIMESTAMP_COLUMN: 5, DIFF_COLUMN: 1} for i in range(100)]
        shard.compare_and_append(pa.Table.from_pylist(rows, schema=arrow_schema(COLUMNS)), 0, 6)
    nc = await connect(nats_url, name="bench")
    hello = asyncio.Event()
    sent = {"messages": 0, "bytes": 0, "updates": 0}

    async def on_response(msg: Any) -> None:
        if compute_pb2.ComputeResponse.FromString(msg.data).WhichOneof("kind") == "hello":
            hello.set()

    async def on_introspection(msg: Any) -> None:
        sent["messages"] += 1
        sent["bytes"] += len(msg.data)
        logs = compute_pb2.ComputeResponse.FromString(msg.data).introspection_updates.logs
        sent["updates"] += sum(pa.ipc.open_stream(u.arrow_ipc).read_all().num_rows for u in logs)

    await nc.subscribe(f"loupe.compute.v1.{replica_id}.response", cb=on_response)
    await nc.subscribe(f"loupe.compute.v1.{replica_id}.introspection", cb=on_introspection)
    process = await asyncio.create_subprocess_exec(
        *[
            sys.executable,
            "-m",
            "loupe.cli.main",
            "compute-replica",
            "--replica-id",
            replica_id,
            "--incarnation",
            "1",
            "--workers",
            "1",
            "--nats-url",
            nats_url,
            "--data-dir",
            str(data_dir / replica_id),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(hello.wait(), 60)
        logging = compute_pb2.LoggingConfig(
            interval_ns=interval_ms * 1_000_000,
            enable_logging=interval_ms > 0,
            index_logs=index_logs() if interval_ms else {},
        )
        create = compute_pb2.CreateInstance(
            replica_id=replica_id,
            incarnation=1,
            workers=1,
            logging=logging,
            blob_uri=blob_uri,
            consensus_uri=consensus_uri,
        )
        subject = f"loupe.compute.v1.{replica_id}.command"
        await publish(
            nc, subject, compute_pb2.ComputeCommand(incarnation=1, create_instance=create)
        )
        for n in range(args.indexes):
            await publish(nc, subject, index(f"v{n}", shard))
        done = compute_pb2.InitializationComplete()
        await publish(
            nc, subject, compute_pb2.ComputeCommand(incarnation=1, initialization_complete=done)
        )
        await asyncio.sleep(args.warmup)
        before, began = cpu_seconds(process.pid), time.monotonic()
        messages, size, updates = sent["messages"], sent["bytes"], sent["updates"]
        writes = 0
        while time.monotonic() - began < args.seconds:
            if args.write_every:
                upper = shard.upper
                row = [{"id": upper, "name": "w", TIMESTAMP_COLUMN: upper, DIFF_COLUMN: 1}]
                table = pa.Table.from_pylist(row, schema=arrow_schema(COLUMNS))
                await asyncio.to_thread(shard.compare_and_append, table, upper, upper + 1)
                writes += 1
            await asyncio.sleep(args.write_every or args.seconds)
        used, elapsed = cpu_seconds(process.pid) - before, time.monotonic() - began
        return {
            "interval_ms": interval_ms,
            "cpu_percent": round(100 * used / elapsed, 2),
            "messages": sent["messages"] - messages,
            "bytes": sent["bytes"] - size,
            "updates": sent["updates"] - updates,
            "table_writes": writes,
            "warmup_messages": messages,
            "warmup_bytes": size,
        }
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
        await nc.close()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServerProcess(Path(tmp) / "nats")
        server.start()
        try:
            for interval_ms in (args.interval_ms, 0):
                print(await measure(server.url, Path(tmp), interval_ms, args), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--indexes", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=1000)
    # Seconds between one-row writes to the indexed table (0: idle).
    parser.add_argument("--write-every", type=float, default=0.0)
    asyncio.run(main(parser.parse_args()))
