"""The service lifecycle every Loupe process follows.

A service is a class with ``run()`` (returns when it has stopped), an
idempotent ``shutdown()`` that is safe before ``run()``, and ``async with``
support. ``run_service`` turns SIGTERM/SIGINT into ``shutdown()``; services
own their NATS connection and gRPC servers through an ``AsyncExitStack`` and
run background loops in an ``asyncio.TaskGroup``. Shutdown order: stop taking
work (drain subscriptions, stop servers with a grace period), wait, cancel
what is left and log it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Self

from loupe import sizes
from loupe.common.logging import configure_logging, get_logger
from loupe.common.settings import BaseSettings, SettingsError
from loupe.common.transport import NatsUnavailable

log = get_logger(__name__)


class Service(abc.ABC):
    """Base class of the catalog, controller, coordinator and compute replica."""

    name: str = "service"

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._stopped = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def shutdown(self) -> None:
        """Ask the service to stop; idempotent, safe before ``run()``."""
        self._stop.set()

    async def wait_for_shutdown(self) -> None:
        await self._stop.wait()

    async def run(self) -> None:
        try:
            await self.serve()
        finally:
            self._stopped.set()

    @abc.abstractmethod
    async def serve(self) -> None:
        """Do the work until ``shutdown()``; clean up before returning."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.shutdown()


def write_ready_file(data_dir: Path, name: str, **info: Any) -> Path:
    """Announce readiness (and ports) to ``loupe up`` through a file."""
    run_dir = Path(data_dir) / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{name}.ready.json"
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps({"pid": os.getpid(), **info}))
    scratch.replace(path)
    return path


def remove_ready_file(data_dir: Path, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (Path(data_dir) / "run" / f"{name}.ready.json").unlink()


def configure_for(settings: BaseSettings, service: str) -> None:
    json_format = {"json": True, "console": False}.get(settings.log_format)
    configure_logging(settings.log_level, json=json_format, service=service)
    configure_sizes(settings)


def configure_sizes(settings: BaseSettings) -> None:
    """Install the ``cluster_replica_sizes`` table (``loupe.sizes``) every service shares."""
    try:
        sizes.configure(settings.cluster_replica_sizes)
    except ValueError as error:
        raise SettingsError(f"cluster_replica_sizes: {error}") from error


def run_service(service: Service) -> int:
    """Run ``service`` until SIGTERM/SIGINT; returns the process exit code."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, service.shutdown)
        try:
            await service.run()
        except NatsUnavailable as error:
            print(f"{service.name}: {error}", file=sys.stderr)
            return 2
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
