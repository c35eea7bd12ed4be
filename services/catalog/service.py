"""The catalog service: the durable catalog behind NATS and a gRPC admin port.

Start-up: connect to NATS, open the catalog (bumping the epoch, which fences
any earlier catalog server on the same store, and upgrading an older catalog
in the same write), record the builtin objects' ids (system object
mappings), serve ``Catalog`` on NATS (queue group ``catalog``) and gRPC, serve
``/metrics``, announce readiness. After every commit (a ``Transact``, or an
``EditObject`` from ``loupe catalog … --cooperative``), and once at start, the
new ``CatalogSnapshot`` is published on ``loupe.catalog.v1.changes`` for
services that follow the catalog; after a commit it carries that commit's
audit events.

Fencing: a commit that finds a newer fence token, or the periodic leadership
check, halts the service — with an error and a non-zero exit when a writer of
the same deploy generation took over (two servers on one store), and cleanly
when a newer deploy generation did.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from nats.aio.client import Client as NatsConnection
from prometheus_client import Counter, Gauge

from loupe.catalog.bootstrap import builtin_object_mappings
from loupe.catalog.durable import DEFAULT_BACKEND, DurableCatalogState, create_backend
from loupe.catalog.errors import CatalogError, FencedError
from loupe.catalog.objects import CatalogSnapshot
from loupe.catalog.servicer import SERVICE, SERVICE_NAME, CatalogServicer
from loupe.common.grpc_server import GrpcServer, translate_errors
from loupe.common.logging import get_logger
from loupe.common.metrics import serve_metrics
from loupe.common.service import Service, write_ready_file
from loupe.common.settings import BaseSettings
from loupe.common.transport import NatsServiceEndpoint, connect, publish
from loupe.proto.catalog.v1 import catalog_pb2_grpc

log = get_logger(__name__)

CHANGES_SUBJECT = "loupe.catalog.v1.changes"
QUEUE_GROUP = "catalog"

# Exit codes of a catalog server that stopped on its own.
EXIT_CANNOT_OPEN = 1
EXIT_FENCED = 3

COMMITS = Counter("loupe_catalog_commits", "Catalog transactions committed")
EPOCH = Gauge("loupe_catalog_epoch", "The epoch this catalog server holds")
FENCED = Counter("loupe_catalog_fenced", "Times this catalog server found itself fenced")


@dataclass
class CatalogSettings(BaseSettings):
    """Settings of ``loupe catalog-server``."""

    grpc_host: str = "127.0.0.1"
    # Port of the gRPC admin API; 0 picks a free one.
    grpc_port: int = 6877
    # The ``loupe.catalog_backends`` plugin that stores the catalog.
    catalog_backend: str = DEFAULT_BACKEND
    # Raised by each new deployment; an older one then steps down cleanly.
    deploy_generation: int = 0
    # Seconds between checks that no newer catalog server has opened the store.
    leadership_check_interval: float = 1.0
    # stash-postgres (and shadow over it): the server and schema to use.
    postgres_url: str = ""
    postgres_schema: str = ""

    def backend_options(self) -> dict[str, str]:
        """The options of ``catalog_backend`` that are set (unset ones keep their defaults)."""
        options = {"postgres_url": self.postgres_url, "postgres_schema": self.postgres_schema}
        return {name: value for name, value in options.items() if value}


class CatalogService(Service):
    """Serves the durable catalog until shut down or fenced."""

    name = "catalog"

    def __init__(self, settings: CatalogSettings) -> None:
        super().__init__()
        self.settings = settings
        self.exit_code = 0
        self.catalog: DurableCatalogState | None = None
        self.grpc_port = 0
        self.metrics_port = 0
        self.fenced: FencedError | None = None

    async def serve(self) -> None:
        settings = self.settings
        async with contextlib.AsyncExitStack() as stack:
            # Exit callbacks run in reverse: NATS endpoint, gRPC server, catalog, connection.
            connection = await connect(settings.nats_url, name="loupe-catalog")
            stack.push_async_callback(connection.close)
            catalog = create_backend(
                settings.catalog_backend,
                settings.data_dir,
                deploy_generation=settings.deploy_generation,
                **settings.backend_options(),
            )
            stack.callback(catalog.close)
            try:
                await asyncio.to_thread(catalog.open)
            except FencedError as error:
                self._on_fenced(error)
                return
            except CatalogError as error:
                log.error("cannot open the catalog", error=str(error))
                self.exit_code = EXIT_CANNOT_OPEN
                return
            self.catalog = catalog
            try:
                await asyncio.to_thread(
                    catalog.set_system_object_mappings, builtin_object_mappings()
                )
            except FencedError as error:
                self._on_fenced(error)
                return
            EPOCH.set(catalog.epoch or 0)
            log.info(
                "catalog opened",
                backend=settings.catalog_backend,
                epoch=catalog.epoch,
                deploy_generation=catalog.fence.deploy_generation,
            )

            async def on_commit(snapshot: CatalogSnapshot) -> None:
                COMMITS.inc()
                await self._publish(connection, snapshot)

            servicer = CatalogServicer(catalog, on_commit=on_commit, on_fenced=self._on_fenced)
            grpc_server = GrpcServer(settings.grpc_host, settings.grpc_port)
            grpc_server.add(
                catalog_pb2_grpc.add_CatalogServicer_to_server,
                translate_errors(servicer),
                SERVICE_NAME,
            )
            self.grpc_port = await grpc_server.start()
            stack.push_async_callback(grpc_server.stop)
            endpoint = NatsServiceEndpoint(connection, SERVICE, servicer, queue=QUEUE_GROUP)
            await endpoint.start()
            stack.push_async_callback(endpoint.stop)
            self.metrics_port = serve_metrics(settings.metrics_port, settings.metrics_host)

            await self._publish(connection, catalog.snapshot())
            write_ready_file(
                settings.data_dir,
                "catalog",
                grpc_port=self.grpc_port,
                metrics_port=self.metrics_port,
                epoch=catalog.epoch,
            )
            log.info("catalog serving", grpc_port=self.grpc_port, metrics_port=self.metrics_port)
            watcher = asyncio.create_task(self._watch_leadership(catalog))
            try:
                await self.wait_for_shutdown()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            log.info("catalog stopping")

    def _on_fenced(self, error: FencedError) -> None:
        """Stop serving: another catalog server owns the store now."""
        if self.fenced is not None:
            return
        self.fenced = error
        FENCED.inc()
        if error.by_newer_deploy:
            # An orderly hand-over, not a failure: exit 0.
            log.info(
                f"replaced by a newer deploy (deploy generation "
                f"{error.current.deploy_generation} > ours, {error.ours.deploy_generation}); "
                "stepping down and exiting cleanly",
                ours=str(error.ours),
                current=str(error.current),
            )
        else:
            log.error(
                f"{error}; another catalog server opened the catalog, halting",
                ours=str(error.ours),
                current=str(error.current),
            )
            self.exit_code = EXIT_FENCED
        self.shutdown()

    async def _watch_leadership(self, catalog: DurableCatalogState) -> None:
        """Notice being fenced even when no commit comes along to find out."""
        while not self.stopping:
            await asyncio.sleep(self.settings.leadership_check_interval)
            try:
                await asyncio.to_thread(catalog.confirm_leadership)
            except FencedError as error:
                self._on_fenced(error)
                return
            except Exception as error:  # a busy or briefly unreadable store: check again
                log.warning("leadership check failed", error=str(error))

    @staticmethod
    async def _publish(connection: NatsConnection, snapshot: CatalogSnapshot) -> None:
        # The commit is durable already; a lost notification only delays followers.
        try:
            await publish(connection, CHANGES_SUBJECT, snapshot.to_proto())
        except Exception as error:
            log.warning("could not publish catalog changes", error=str(error))
