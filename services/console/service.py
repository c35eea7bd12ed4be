"""The console service process: the HTTP server, its settings and its ready file."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from loupe.common.logging import get_logger
from loupe.common.service import Service, remove_ready_file, write_ready_file
from loupe.console.app import create_app
from loupe.console.settings import ConsoleSettings

log = get_logger(__name__)


class ConsoleService(Service):
    """Serves the console over HTTP until shutdown."""

    name = "console"

    def __init__(self, settings: ConsoleSettings) -> None:
        super().__init__()
        self.settings = settings
        self.http_port = 0
        self.ready = asyncio.Event()

    async def serve(self) -> None:
        settings = self.settings
        app = create_app(settings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(runner.cleanup)
            site = web.TCPSite(runner, settings.http_host, settings.http_port)
            await site.start()
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            self.http_port = sockets[0].getsockname()[1] if sockets else settings.http_port
            write_ready_file(
                settings.data_dir,
                "console",
                http_host=settings.http_host,
                http_port=self.http_port,
                url=self.url,
            )
            stack.callback(remove_ready_file, settings.data_dir, "console")
            log.info(
                "console serving",
                url=self.url,
                coordinator=f"{settings.coordinator_host}:{settings.coordinator_pgwire_port}",
            )
            self.ready.set()
            await self.wait_for_shutdown()
            log.info("console stopping")

    @property
    def url(self) -> str:
        return f"http://{self.settings.http_host}:{self.http_port}/"
