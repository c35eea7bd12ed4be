"""The whole system as real processes: ``loupe up`` in a temporary data dir.

Used by the end-to-end tests and the benchmarks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loupe.cli.probe import query_once
from loupe.common.nats_server import free_ports

# Starts of ``loupe up`` on fresh ports before a port lost to another process is an error.
PORT_ATTEMPTS = 3
_PORT_LOST = ("failed to bind to address", "address already in use")


def _lost_a_port(output: str) -> bool:
    """Whether a start failed because a port was taken (gRPC's words, or the OS's)."""
    lowered = output.lower()
    return any(sign in lowered for sign in _PORT_LOST)


class LoupeUp:
    """``loupe up`` as a child process; ``sql()`` runs statements through the gRPC API."""

    def __init__(
        self,
        data_dir: Path,
        *,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        # More environment for every process (settings: LOUPE_<FIELD>).
        self.env = env or {}
        self._choose_ports()
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.ready_seconds: float | None = None
        self._ready = threading.Event()

    def start(self, timeout: float = 180.0) -> float:
        """Start and wait until ready; returns the seconds it took.

        The ports were free when chosen, but any process may bind one before the
        service that is to listen on it does (a Spark JVM, another test's server):
        a start that fails only for that is made again on new ports.
        """
        for attempt in range(PORT_ATTEMPTS):
            try:
                return self._start_once(timeout)
            except RuntimeError as error:
                if attempt + 1 == PORT_ATTEMPTS or not _lost_a_port(str(error)):
                    raise
                print(f"loupe up lost a port to another process; again on new ports:\n{error}")
                self._choose_ports()
                self.output = []
        raise AssertionError("unreachable")

    def _choose_ports(self) -> None:
        """The ports ``loupe up`` is told to use: four distinct ones, free when chosen."""
        self.sql_port, self.pgwire_port, self.catalog_port, self.console_port = free_ports(4)

    def _start_once(self, timeout: float) -> float:
        env = dict(
            os.environ,
            NO_COLOR="1",
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            **self.env,
        )
        began = time.monotonic()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loupe.cli.main",
                "up",
                "--data-dir",
                str(self.data_dir),
                "--sql-port",
                str(self.sql_port),
                "--pgwire-port",
                str(self.pgwire_port),
                "--catalog-grpc-port",
                str(self.catalog_port),
                "--console-port",
                str(self.console_port),
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read_output, daemon=True).start()
        deadline = began + timeout
        while not self._ready.wait(0.1):
            if self.process.poll() is not None:
                raise RuntimeError("loupe up exited during start-up:\n" + "".join(self.output))
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("loupe up not ready in time:\n" + "".join(self.output))
        self.ready_seconds = time.monotonic() - began
        return self.ready_seconds

    def _read_output(self) -> None:
        assert self.process
        assert self.process.stdout
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("Loupe is ready"):
                self._ready.set()

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}/"

    def sql(self, statement: str, timeout: float = 60.0) -> list[tuple[Any, ...]]:
        """Run ``statement`` in a fresh session; the rows of its last result.

        The default deadline is longer than the coordinator's own longest bounded
        wait, a DDL's ``catalog_relations_wait`` (30 s) for storage to show its
        commit: on a loaded machine, where a Spark flush takes seconds, that DDL
        then answers with its WARNING instead of the client giving up first.
        """
        password = self.env.get("LOUPE_SUPERUSER_PASSWORD", "")
        return query_once("127.0.0.1", self.sql_port, statement, password=password, timeout=timeout)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loupe.cli.main", "sql", "--port", str(self.sql_port), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
            env=dict(os.environ, NO_COLOR="1"),
        )

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C: SIGINT to ``loupe up`` only; returns its exit code."""
        assert self.process
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            try:
                self.interrupt(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def log_tails(self, lines: int = 30) -> str:
        """The last ``lines`` of each process's log (what a failed test attaches)."""
        parts = []
        for path in sorted((self.data_dir / "logs").glob("*.log")):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)

    def processes(self) -> list[tuple[int, str]]:
        """Live processes whose command line names this data directory."""
        return processes_mentioning(str(self.data_dir))


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append((int(entry.name), cmdline.strip()))
    return found


def replica_pid(data_dir: Path, replica_id: str) -> int | None:
    pattern = re.compile(rf"compute-replica .*--replica-id {re.escape(replica_id)}(\s|$)")
    for pid, cmdline in processes_mentioning(str(data_dir)):
        if pattern.search(cmdline):
            return pid
    return None
