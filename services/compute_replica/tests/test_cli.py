"""``loupe compute-replica`` as a real process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from loupe.cli.main import main
from loupe.common.nats_server import die_with_parent, free_port


def spawn(arguments, log_path):
    log_file = open(log_path, "wb")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(
        [sys.executable, "-m", "loupe.cli.main", "compute-replica", *arguments],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


async def test_compute_replica_process_says_hello_and_heartbeats(
    nats_url, controller, storage, replica_id, tmp_path
):
    """The replica process says hello as its own pid, heartbeats, stops cleanly on SIGTERM."""
    log_path = tmp_path / "replica.log"
    process = spawn(
        [
            "--replica-id",
            replica_id,
            "--incarnation",
            "3",
            "--workers",
            "2",
            "--nats-url",
            nats_url,
            "--log-format",
            "json",
        ],
        log_path,
    )
    try:
        hello = (await controller.wait_for("hello", timeout=30))[0]
        assert hello.pid == process.pid
        await controller.create_instance(storage, workers=2)
        heartbeat = (await controller.wait_for("heartbeat"))[0]
        assert heartbeat.workers == 2
        assert controller.responses[-1].incarnation == 3
    finally:
        returncode = stop(process)
    assert returncode == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    created = [line for line in lines if line.get("event") == "instance created"]
    assert created, log_path.read_text()
    assert created[0]["replica_id"] == replica_id
    assert created[0]["incarnation"] == 3


def test_missing_replica_id_is_one_clear_line(capsys):
    """Without --replica-id the command refuses to start with exit code 2."""
    assert main(["compute-replica", "--nats-url", "nats://127.0.0.1:1"]) == 2
    assert "replica id" in capsys.readouterr().err


def test_unreachable_nats_exits_nonzero_with_one_line(tmp_path):
    """NATS unreachable at start: one clear line on stderr and exit code 2."""
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "loupe.cli.main",
            "compute-replica",
            "--replica-id",
            "u1",
            "--nats-url",
            f"nats://127.0.0.1:{free_port()}",
            "--log-level",
            "error",
        ],
        capture_output=True,
        timeout=60,
        preexec_fn=die_with_parent,
        check=False,
    )
    assert process.returncode == 2
    assert "cannot reach NATS" in process.stderr.decode()
