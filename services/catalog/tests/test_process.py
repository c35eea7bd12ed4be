"""``loupe catalog-server`` as real processes: a second server fences the first."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from loupe.catalog.service import EXIT_FENCED
from loupe.common.nats_server import die_with_parent


def start_server(data_dir: Path, nats_url: str, log: Path) -> subprocess.Popen[bytes]:
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
