"""``loupe up``'s supervisor restarts a service that died, after its back-off."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from loupe.cli import up
from loupe.common import nats_server


def test_a_killed_child_is_restarted_after_the_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(up, "RESTART_BACKOFF", 0.3)
    supervisor = up.Supervisor(argparse.Namespace(data_dir=str(tmp_path)))
    child = up.Child(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log"
    )
    child.start(dict(os.environ))
    supervisor.children["sleeper"] = child
    supervisor.env = dict(os.environ)
    first = child.process
    assert first is not None
    runner = threading.Thread(target=supervisor.supervise, daemon=True)
    runner.start()
    try:
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while child.process is first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.process is not first, "the supervisor never restarted the killed child"
        assert child.restarts == 1
        assert child.alive()
    finally:
        supervisor.stopping = True
        runner.join(5)
        child.stop(2)


def test_the_backoff_doubles_in_a_crash_loop_and_resets_after_a_stable_run(
    tmp_path: Path,
) -> None:
    """Killed once an hour, a service must not wait the 30x backoff of a crash loop."""
    child = up.Child("svc", ["true"], tmp_path / "s.log")
    child.started_at, child.restarts = 100.0, 3
    assert child.backoff(101.0) == up.RESTART_BACKOFF * 8  # died 1 s after starting
    child.restarts = 12
    assert child.backoff(102.0) == up.RESTART_BACKOFF * 30  # capped
    assert child.backoff(100.0 + up.STABLE_AFTER) == up.RESTART_BACKOFF  # ran a minute
    assert child.restarts == 0


class _Kernel:
    """A ``socket`` module whose ``bind(("127.0.0.1", 0))`` hands out scripted ports."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.create_connection = socket.create_connection

    def socket(self) -> _Kernel._Socket:
        return self._Socket(self.ports.pop(0))

    class _Socket:
        def __init__(self, port: int) -> None:
            self.port = port

        def __enter__(self) -> _Kernel._Socket:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def bind(self, address: tuple[str, int]) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)


def test_nats_never_gets_a_port_loupe_up_was_told_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may hand a just-released port out again (a CI run lost its catalog so)."""
    with socket.socket() as catalog:
        catalog.bind(("127.0.0.1", 0))
        catalog.listen()
        taken = catalog.getsockname()[1]
        (spare,) = nats_server.free_ports(1)
        monkeypatch.setattr(nats_server, "socket", _Kernel([taken, taken, spare]))
        args = argparse.Namespace(
            data_dir=str(tmp_path),
            nats_port=0,
            sql_port=0,
            pgwire_port=0,
            catalog_grpc_port=taken,
            console_port=0,
        )
        supervisor = up.Supervisor(args)
        supervisor.logs.mkdir(parents=True)
        try:
            url = supervisor._start_nats()
        finally:
            if supervisor.nats:
                supervisor.nats.stop()
    assert url == f"nats://127.0.0.1:{spare}"


def test_free_ports_are_distinct() -> None:
    ports = nats_server.free_ports(8)
    assert len(set(ports)) == 8
