"""``kill -9`` of the storage writer at any moment: no update lost, none applied twice.

The writer runs as a real process (``writer_process.py``) against the
session's nats-server, a blob directory and SQLite consensus; a publisher
keeps storing batches in its stream (some twice, as a retrying client
would) while the test kills the process at random moments, and at chosen
points in the middle of a flush, and starts it again. At the end one last
writer catches up, and every collection holds each published row exactly
once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import shutil
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_AUDIT_EVENTS,
    MZ_CLUSTER_REPLICAS,
    MZ_STORAGE_WRITER_STATUS,
)
from loupe.common.nats_server import die_with_parent
from loupe.controller.storage import PROGRESS_KEY, StreamConfig, encode_batch
from loupe.persist import DIFF_COLUMN, Shard
from loupe.persist.location import default_uris, open_location

SCRIPT = Path(__file__).with_name("writer_process.py")
UTC = dt.UTC


def batch_updates(index: int) -> list[tuple[str, tuple[Any, ...], int]]:
    """Batch ``index``: rows in two collections of two different write groups (two jobs)."""
    at = dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=index)
    replicas = [
        (MZ_CLUSTER_REPLICAS.id, (f"b{index}-{n}", f"r{n}", "c1", "1", "u1"), 1) for n in range(3)
    ]
    event = (MZ_AUDIT_EVENTS.id, (index, "create", "cluster-replica", "{}", "u1", at), 1)
    return [*replicas, event]


class Publisher:
    """Stores numbered batches in the stream; every fifth one is stored twice."""

    def __init__(self, nats_connection: Any, stream: StreamConfig) -> None:
        self.js = nats_connection.jetstream()
        self.stream = stream
        self.published = 0
        self.last_seq = 0

    async def run(self, batches: range, pause: float) -> None:
        for index in batches:
            await self.publish(index)
            if index % 5 == 4:
                await self.publish(index - 2)  # a retry of an earlier batch
            await asyncio.sleep(pause)

    async def publish(self, index: int) -> None:
        batch = encode_batch(f"batch-{index}", batch_updates(index))
        ack = await self.js.publish(
            self.stream.subject, batch.SerializeToString(), headers={"Nats-Msg-Id": batch.batch_id}
        )
        self.last_seq = max(self.last_seq, ack.seq)
        self.published = max(self.published, index + 1)


class WriterProcess:
    """Starts, kills and waits for the writer process (asyncio: every wait can time out)."""

    def __init__(self, data_dir: Path, nats_url: str, tag: str, store: str) -> None:
        self.args = [str(SCRIPT), str(data_dir), nats_url, tag, store, "0.05"]
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, **env: str) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **env},
            preexec_fn=die_with_parent,
        )

    async def ready(self, timeout: float) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        assert line.strip() == b"ready", f"writer process said {line!r}"

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    async def exited(self, timeout: float) -> int:
        assert self.process is not None
        return await asyncio.wait_for(self.process.wait(), timeout)


def contents(data_dir: Path, collection_id: str) -> Counter[tuple[Any, ...]]:
    blob, consensus = open_location(*default_uris(data_dir))
    snapshot = Shard(collection_id, blob, consensus).snapshot()
    diffs = snapshot.column(DIFF_COLUMN).to_pylist()
    rows = snapshot.drop_columns([DIFF_COLUMN]).to_pylist()
    return Counter({tuple(row.values()): diff for row, diff in zip(rows, diffs, strict=True)})


def least_progress(data_dir: Path) -> int:
    blob, consensus = open_location(*default_uris(data_dir))
    return min(
        Shard(c.shard_id, blob, consensus).state().progress.get(PROGRESS_KEY, 0)
        for c in BUILTIN_COLLECTIONS
    )


async def wait_caught_up(
    publisher: Publisher, data_dir: Path, nats_connection: Any, timeout: float
) -> None:
    """Wait until the running writer holds and has acknowledged everything published."""
    deadline = asyncio.get_running_loop().time() + timeout
    jetstream = nats_connection.jetstream()
    # Caught up means applied (progress in every shard) and then acknowledged:
    # the ack follows the CAS, so killing on progress alone races the ack.
    while (
        least_progress(data_dir) < publisher.last_seq
        or (await jetstream.stream_info(publisher.stream.name)).state.messages
    ):
        assert asyncio.get_running_loop().time() < deadline, "the writer did not catch up"
        await asyncio.sleep(0.1)


async def finish_and_check(
    writer: WriterProcess, publisher: Publisher, data_dir: Path, nats_connection: Any
) -> None:
    """Start a last writer, wait until it holds everything, check exactly-once."""
    await writer.start()
    await writer.ready(timeout=120)
    await wait_caught_up(publisher, data_dir, nats_connection, timeout=60)
    await writer.kill()
    await check_exactly_once(publisher, data_dir, nats_connection)


async def check_exactly_once(publisher: Publisher, data_dir: Path, nats_connection: Any) -> None:
    """Every published row is in its collection exactly once, and the stream is empty."""
    jetstream = nats_connection.jetstream()
    expected: Counter[tuple[Any, ...]] = Counter()
    events: Counter[tuple[Any, ...]] = Counter()
    for index in range(publisher.published):
        for collection_id, row, diff in batch_updates(index):
            (expected if collection_id == MZ_CLUSTER_REPLICAS.id else events)[row] += diff
    assert contents(data_dir, MZ_CLUSTER_REPLICAS.id) == expected
    assert contents(data_dir, MZ_AUDIT_EVENTS.id) == events
    info = await jetstream.stream_info(publisher.stream.name)
    assert info.state.messages == 0, "every batch acknowledged (and so gone from the work queue)"


@pytest.mark.timeout(240)
async def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    data_dir: Path, nats_url: str, nats_connection: Any
) -> None:
    """Six kills at random moments and two mid-flush crashes; each row ends up stored once."""
    tag = uuid.uuid4().hex[:12]
    stream = StreamConfig.scoped(tag)
    writer = WriterProcess(data_dir, nats_url, tag, "pyarrow")
    publisher = Publisher(nats_connection, stream)
    chance = random.Random(4)
    try:
        await writer.start()
        await writer.ready(timeout=60)  # creates the stream
        publishing = asyncio.create_task(publisher.run(range(200), pause=0.02))
        for round_ in range(6):
            if round_:
                await writer.start()
                if round_ % 2:
                    await writer.ready(timeout=60)
            await asyncio.sleep(chance.uniform(0.2, 1.2))
            await writer.kill()
        await publishing
        for crash_after, batches in ((1, range(200, 220)), (2, range(220, 240))):
            # Dies right after the first (second) part of a flush is appended.
            # (Possibly while catching up with what the killed ones left.)
            await writer.start(CRASH_AFTER_APPENDS=str(crash_after))
            await publisher.run(batches, pause=0.005)
            assert await writer.exited(timeout=60) == -signal.SIGKILL
        await finish_and_check(writer, publisher, data_dir, nats_connection)
    finally:
        await writer.kill()


@pytest.mark.spark
@pytest.mark.timeout(300)
async def test_kill_9_of_the_spark_writer_mid_flush(
    data_dir: Path, nats_url: str, nats_connection: Any
) -> None:
    """The Spark writer killed between two shards' appends of a flush: replayed exactly once."""
    tag = uuid.uuid4().hex[:12]
    stream = StreamConfig.scoped(tag)
    writer = WriterProcess(data_dir, nats_url, tag, "spark")
    publisher = Publisher(nats_connection, stream)
    try:
        await writer.start(CRASH_AFTER_APPENDS="1")
        await writer.ready(timeout=120)
        await publisher.run(range(20), pause=0.01)
        assert await writer.exited(timeout=60) == -signal.SIGKILL
        assert least_progress(data_dir) < publisher.last_seq, "it died with the flush half done"
        await finish_and_check(writer, publisher, data_dir, nats_connection)
    finally:
        await writer.kill()


def spark_jvm_pid(pid: int) -> int | None:
    """The Spark JVM among the children of process ``pid`` (None if it has none now)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"java" in cmdline and b"SparkSubmit" in cmdline:
                return int(child)
    return None


def reaped(pid: int) -> bool:
    """Whether process ``pid`` is gone altogether (not even left defunct)."""
    return not os.path.exists(f"/proc/{pid}")


async def kill_mid_write(data_dir: Path, jvm_pid: int, timeout: float) -> bool:
    """SIGKILL the JVM while a flush (or merge) job writes its output; True if one was
    caught mid-write (else it is killed when ``timeout`` runs out, mid-load anyway)."""
    blob = data_dir / "storage" / "blob"
    deadline = asyncio.get_running_loop().time() + timeout
    caught = False
    while asyncio.get_running_loop().time() < deadline:
        if any(blob.glob("_flushes/*/_temporary")):
            caught = True
            break
        await asyncio.sleep(0.002)
    os.kill(jvm_pid, signal.SIGKILL)
    return caught


def writer_status(data_dir: Path) -> list[dict[str, Any]]:
    rows = contents(data_dir, MZ_STORAGE_WRITER_STATUS.id)
    names = MZ_STORAGE_WRITER_STATUS.column_names
    return [dict(zip(names, row, strict=False)) for row, diff in rows.items() if diff > 0]


@pytest.mark.spark
@pytest.mark.timeout(300)
async def test_spark_jvm_killed_mid_flush_and_scratch_deleted_the_writer_recovers(
    data_dir: Path, nats_url: str, nats_connection: Any
) -> None:
    """Issue 11: ``kill -9`` of the Spark JVM mid-write and its scratch directory deleted,
    under a steady load: the same writer process builds a new session and goes on; every
    batch is stored exactly once, and ``mz_storage_writer_status`` shows the restart."""
    tag = uuid.uuid4().hex[:12]
    stream = StreamConfig.scoped(tag)
    writer = WriterProcess(data_dir, nats_url, tag, "spark")
    publisher = Publisher(nats_connection, stream)
    try:
        await writer.start()
        await writer.ready(timeout=120)
        assert writer.process is not None
        jvm = spark_jvm_pid(writer.process.pid)
        assert jvm is not None, "the writer runs a Spark JVM"
        assert (data_dir / "spark" / "local").is_dir(), "Spark's scratch is under the data dir"
        load = asyncio.create_task(publisher.run(range(300), pause=0.03))
        await asyncio.sleep(1.0)
        mid_write = await kill_mid_write(data_dir, jvm, timeout=10)
        shutil.rmtree(data_dir / "spark")
        killed_at = asyncio.get_running_loop().time()
        print("killed the Spark JVM at", time.strftime("%H:%M:%S", time.gmtime()), file=sys.stderr)
        progress_at_kill = least_progress(data_dir)
        # Collections advance again: progress moves past what it was at the kill.
        while least_progress(data_dir) <= progress_at_kill:
            assert asyncio.get_running_loop().time() < killed_at + 90, "the writer never recovered"
            assert writer.process.returncode is None, "the writer process died"
            await asyncio.sleep(0.1)
        recovered_s = asyncio.get_running_loop().time() - killed_at
        await load
        await wait_caught_up(publisher, data_dir, nats_connection, timeout=90)
        assert writer.process.returncode is None, "the same writer process recovered"
        new_jvm = spark_jvm_pid(writer.process.pid)
        assert new_jvm not in (None, jvm), "a new JVM runs the new session"
        assert reaped(jvm), "the killed JVM is not left defunct"
        assert (data_dir / "spark" / "local").is_dir(), "the scratch directory is made again"
        # The row is written by the writer itself: it lands once Spark works again,
        # after a "failing" row for the flush that found the JVM dead.
        deadline = asyncio.get_running_loop().time() + 60
        while not any(r["status"] == "running" and r["restarts"] for r in writer_status(data_dir)):
            assert asyncio.get_running_loop().time() < deadline, writer_status(data_dir)
            await asyncio.sleep(0.2)
        [status] = writer_status(data_dir)
        assert status["status"] == "running"
        assert status["restarts"] == 1
        assert status["spark_incarnation"] == 2
        assert status["spark_pid"] == new_jvm
        assert status["reason"], "it says why Spark was restarted"
        await writer.kill()
        await check_exactly_once(publisher, data_dir, nats_connection)
        print(
            f"killed mid-write: {mid_write}; collections advancing again {recovered_s:.1f}s after"
        )
    finally:
        await writer.kill()
