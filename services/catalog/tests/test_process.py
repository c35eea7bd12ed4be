"""``loupe catalog-server`` as real processes: a second server fences the first.

With the same deploy generation that is a split brain averted (the first
halts with an error); with a newer one it is a deployment (the first steps
down and exits 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from loupe.catalog.service import EXIT_FENCED
from loupe.common.nats_server import die_with_parent


def start_server(data_dir: Path, nats_url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loupe.cli.main",
            "catalog-server",
            "--data-dir",
            str(data_dir),
            "--nats-url",
            nats_url,
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--log-format",
            "json",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        preexec_fn=die_with_parent,
    )


def wait_ready(data_dir: Path, process: subprocess.Popen[bytes], timeout: float = 30) -> dict:
    """Wait until ``process`` has written the catalog ready file."""
    path = data_dir / "run" / "catalog.ready.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"catalog-server exited with {process.returncode}"
        if path.exists():
            ready = json.loads(path.read_text())
            if ready["pid"] == process.pid:
                return ready
        time.sleep(0.05)
    raise AssertionError(f"catalog-server {process.pid} not ready within {timeout}s")


def test_second_catalog_server_fences_and_halts_the_first(
    data_dir: Path, nats_url: str, tmp_path: Path
) -> None:
    """The first server exits non-zero, logging both fence tokens; the second serves on."""
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_server(data_dir, nats_url, first_log)
    second = None
    try:
        assert wait_ready(data_dir, first)["epoch"] == 1
        second = start_server(data_dir, nats_url, second_log)
        assert wait_ready(data_dir, second)["epoch"] == 2
        assert first.wait(timeout=15) == EXIT_FENCED
        log = first_log.read_text()
        assert "catalog fenced" in log
        assert "(deploy_generation=0, epoch=1)" in log
        assert "(deploy_generation=0, epoch=2)" in log
        assert second.poll() is None
        second.terminate()
        assert second.wait(timeout=15) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_newer_deploy_generation_replaces_the_running_server_which_exits_cleanly(
    data_dir: Path, nats_url: str, tmp_path: Path
) -> None:
    """Generation 2 takes over from generation 1, which logs why and exits 0."""
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    old = start_server(data_dir, nats_url, old_log, "--deploy-generation", "1")
    new = None
    try:
        assert wait_ready(data_dir, old)["epoch"] == 1
        new = start_server(data_dir, nats_url, new_log, "--deploy-generation", "2")
        assert wait_ready(data_dir, new)["epoch"] == 2
        assert old.wait(timeout=15) == 0
        log = old_log.read_text()
        assert "replaced by a newer deploy" in log
        assert "(deploy_generation=2, epoch=2)" in log
        # The old generation cannot come back: it steps down at start, cleanly too.
        again = start_server(data_dir, nats_url, tmp_path / "again.log", "--deploy-generation", "1")
        assert again.wait(timeout=30) == 0
        assert "replaced by a newer deploy" in (tmp_path / "again.log").read_text()
        assert new.poll() is None
        new.terminate()
        assert new.wait(timeout=15) == 0
    finally:
        for process in (old, new):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
