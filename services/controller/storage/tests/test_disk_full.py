"""Disk full: a clear error and a metric, nothing acknowledged, and writing resumes with space.

The blob directory is a real 4 MiB tmpfs filled up with a ballast file
(needs root, as in the project's containers). Without root the test falls
back to a part store that fails with ENOSPC, which exercises the same
writer path but not Spark's own error.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from loupe.builtins import MZ_CLUSTER_REPLICA_STATUSES, MZ_CLUSTERS
from loupe.controller.storage import SparkPartStore, StreamConfig, is_disk_full
from loupe.interval import Interval
from loupe.persist import LocalBlob, Shard
from loupe.testing import assert_eventually

pytestmark = [pytest.mark.spark]

CLUSTER = ("u1", "quickstart", "u1", True, "1", 1, Interval(micros=1_000_000), False)


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def mount_tmpfs(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``path``; False where we may not (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return mounted.returncode == 0


@contextlib.contextmanager
def full(directory: Path) -> Iterator[None]:
    """Fill the file system of ``directory`` to the last byte, then free it again."""
    ballast = directory / "ballast"
    with open(ballast, "wb") as handle:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                handle.write(chunk)
                handle.flush()
    with contextlib.suppress(OSError), open(directory / "ballast-tail", "wb") as tail:
        while True:
            tail.write(b"\0")
            tail.flush()
    try:
        yield
    finally:
        ballast.unlink()
        (directory / "ballast-tail").unlink(missing_ok=True)


class FullDisk:
    """A Spark part store whose disk is full while ``full`` is set (non-root fallback)."""

    def __init__(self, inner: SparkPartStore) -> None:
        self.inner = inner
        self.name = inner.name
        self.full = False

    def write_flush(self, *args: Any) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.inner.write_flush(*args)

    def merge(self, *args: Any) -> int:
        return self.inner.merge(*args)


@pytest.fixture
def blob_mount(data_dir: Path) -> Iterator[tuple[Path, bool]]:
    mountpoint = data_dir / "tmpfs-blob"
    mounted = mount_tmpfs(mountpoint, "4m")
    yield mountpoint, mounted
    if mounted:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


async def test_disk_full_is_reported_and_writing_resumes_with_space(
    blob_mount: tuple[Path, bool],
    make_writer: Any,
    spark: Any,
    consensus: Any,
    nats_connection: Any,
    stream: StreamConfig,
) -> None:
    """No space: error logged, metric set, rows unacked and upper held; space back: rows land once."""
    mountpoint, mounted = blob_mount
    blob = LocalBlob(mountpoint)
    store = SparkPartStore(spark) if mounted else FullDisk(SparkPartStore(spark))
    writer = await make_writer(blob=blob, part_store=store, flush_interval=0.2)
    try:
        writer.stage(MZ_CLUSTER_REPLICA_STATUSES.id, ("u1", 0, "online", None, _now(), 1), 1)
        await writer.flush()
        shard = Shard(MZ_CLUSTERS.id, blob, consensus)
        errors = metric("loupe_storage_disk_full_total")

        with (
            full(mountpoint) if mounted else _armed(store),
            structlog.testing.capture_logs() as logs,
        ):
            writer.stage(MZ_CLUSTERS.id, CLUSTER, 1)
            await writer.flush()
            assert metric("loupe_storage_disk_full_total") > errors
            assert metric("loupe_storage_disk_full_now") == 1
            held = shard.upper
            await asyncio.sleep(0.6)  # the flush loop keeps trying (and failing)
            assert shard.upper == held, "no upper past the rows that are not written"
            assert Shard(MZ_CLUSTER_REPLICA_STATUSES.id, blob, consensus).upper > held
            info = await nats_connection.jetstream().consumer_info(stream.name, stream.consumer)
            assert info.num_ack_pending >= 1, "the batch stays unacknowledged"
        (event,) = {e["event"] for e in logs if e["log_level"] == "error"}
        assert event == "storage_disk_full"
        assert any("no space left on device" in e.get("message", "") for e in logs)

        def landed() -> None:
            assert writer.snapshot(MZ_CLUSTERS.id) == [CLUSTER]

        await assert_eventually(landed, timeout=20)

        def cleared() -> None:
            # The gauge is reset when the flush that landed the rows returns,
            # a moment after the rows become readable.
            assert metric("loupe_storage_disk_full_now") == 0

        await assert_eventually(cleared, timeout=5)
    finally:
        await writer.stop()


def test_disk_full_is_recognised_through_java_and_sqlite_errors() -> None:
    """ENOSPC as an OSError, in a wrapped Java error text, or from SQLite counts as disk full."""
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    wrapped = RuntimeError("Spark job failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "nope")
    assert is_disk_full(wrapped)
    assert is_disk_full(Exception("java.io.IOException: No space left on device"))
    assert is_disk_full(Exception("database or disk is full"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


@contextlib.contextmanager
def _armed(store: FullDisk) -> Iterator[None]:
    store.full = True
    try:
        yield
    finally:
        store.full = False


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
