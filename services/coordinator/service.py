"""The coordinator service process: NATS, the ``Sql`` gRPC server, the pgwire server, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable
from typing import TypeVar

from loupe.common.grpc_server import GrpcServer, translate_errors
from loupe.common.logging import get_logger
from loupe.common.metrics import serve_metrics
from loupe.common.service import Service, remove_ready_file, write_ready_file
from loupe.common.settings import BaseSettings
from loupe.common.transport import connect
from loupe.coordinator.coordinator import Coordinator, CoordinatorConfig
from loupe.coordinator.grpc_api import SqlServicer
from loupe.coordinator.pgwire import PgwireServer
from loupe.coordinator.session import SessionManager
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc

log = get_logger(__name__)

SQL_SERVICE_NAME = sql_pb2.DESCRIPTOR.services_by_name["Sql"].full_name

T = TypeVar("T")


@dataclasses.dataclass
class CoordinatorSettings(BaseSettings):
    """Settings of the coordinator (section ``[coordinator]``, env ``LOUPE_<FIELD>``)."""

    sql_host: str = "127.0.0.1"
    # Port of the gRPC SQL API; 0 picks a free one.
    sql_port: int = 6875
    # Port of the PostgreSQL wire protocol (psql, drivers) on sql_host; 0 picks a free one.
    pgwire_port: int = 6877
    # TLS for pgwire clients that ask for it (SSLRequest); without both, it is refused ('N').
    pgwire_tls_cert: str = ""
    pgwire_tls_key: str = ""
    # Largest pgwire message accepted (bytes); a larger one is a protocol violation (08P01).
    pgwire_max_message_size: int = 64 * 1024 * 1024
    # Comma-separated users that are superusers.
    superusers: str = "materialize,mz_system"
    # Seconds a session may go unused (running nothing) before it is closed, for
    # clients that vanish without CloseSession; 0 keeps sessions forever.
    idle_session_timeout: float = 86400.0
    # How sessions authenticate: "trust" believes the user name a client gives
    # (for a laptop); "password" checks it against the role's password.
    authenticator: str = "trust"
    # With "password": the password of the superusers above whose role has no
    # password of its own (set it from a secret: LOUPE_SUPERUSER_PASSWORD).
    superuser_password: str = ""
    # A read waits as long as it must (statement_timeout is the only limit);
    # seconds between its rounds to the controller, and before a read still
    # waiting is logged (once, with what it waits for).
    peek_round: float = 5.0
    # Seconds a peek sent straight to a cluster's online replicas waits for one
    # of them before the controller is asked instead (a replica hung, or an index
    # far behind); a replica the controller takes offline meanwhile ends the wait
    # at once. 0 sends every peek through the controller.
    peek_direct_wait: float = 5.0
    # Peeks in flight to one cluster at once; more wait their turn.
    peek_concurrency: int = 16
    # Statements that may wait in one of the coordinator's queues (peek, ddl,
    # table_write) before more are refused with 53000 (insufficient_resources).
    max_queued_statements: int = 1024
    # Seconds DDL waits (within its statement_timeout) for its commit to reach
    # mz_catalog in storage before answering with a NOTICE; mz_catalog then
    # catches up in the background.
    catalog_relations_wait: float = 30.0
    # Seconds to wait for the controller and catalog at start.
    startup_timeout: float = 180.0
    # Seconds to wait at start for the storage writer's next flush before
    # reading the catalog relations from storage.
    storage_settle_timeout: float = 3.0
    # Seconds DDL waits to see its own commit on loupe.catalog.v1.changes
    # before following the catalog's response instead.
    follow_timeout: float = 2.0
    # Seconds between ticks moving the timestamp oracle and every table's
    # upper to the current time (0 disables them; then tables move only on writes).
    table_tick_interval: float = 1.0
    # Seconds of history each table keeps for SELECT … AS OF.
    table_retention: float = 3600.0
    # Ticks between compactions of the tables' parts.
    table_compaction_ticks: int = 10
    # Seconds between moves of the indexes' and materialized views' sinces (0:
    # never), and how many seconds of history an index keeps for AS OF.
    compute_compaction_interval: float = 1.0
    compute_compaction_window: float = 1.0
    # This coordinator's name; each coordinator of a deployment needs its own
    # (the statement log finds the executions it left open by it).
    instance_name: str = "coordinator"
    # The storage writer's input subject (the controller's storage_subject):
    # the statement log is published there.
    storage_subject: str = "loupe.storage.v1.updates"


class CoordinatorService(Service):
    """Serves SQL over gRPC once storage is reconciled with the catalog."""

    name = "coordinator"

    def __init__(self, settings: CoordinatorSettings) -> None:
        super().__init__()
        self.settings = settings
        self.sql_port = 0
        self.pgwire_port = 0
        self.metrics_port = 0
        self.coordinator: Coordinator | None = None
        self.ready = asyncio.Event()

    async def serve(self) -> None:
        settings = self.settings
        async with contextlib.AsyncExitStack() as stack:
            connection = await connect(settings.nats_url, name="loupe-coordinator")
            stack.push_async_callback(connection.close)
            self.metrics_port = serve_metrics(settings.metrics_port, settings.metrics_host)
            coordinator = Coordinator(
                connection,
                SessionManager(settings.superusers),
                CoordinatorConfig(
                    peek_round=settings.peek_round,
                    peek_direct_wait=settings.peek_direct_wait,
                    peek_concurrency=settings.peek_concurrency,
                    max_queued_statements=settings.max_queued_statements,
                    catalog_relations_wait=settings.catalog_relations_wait,
                    startup_timeout=settings.startup_timeout,
                    storage_settle_timeout=settings.storage_settle_timeout,
                    follow_timeout=settings.follow_timeout,
                    table_tick_interval=settings.table_tick_interval,
                    table_retention=settings.table_retention,
                    table_compaction_ticks=settings.table_compaction_ticks,
                    compute_compaction_interval=settings.compute_compaction_interval,
                    compute_compaction_window=settings.compute_compaction_window,
                    instance_name=settings.instance_name,
                    storage_subject=settings.storage_subject,
                    idle_session_timeout=settings.idle_session_timeout,
                    authenticator=settings.authenticator,
                    superuser_password=settings.superuser_password,
                ),
            )
            self.coordinator = coordinator
            stack.push_async_callback(coordinator.stop)
            if not await self._unless_shutdown(coordinator.start()):
                return
            server = GrpcServer(settings.sql_host, settings.sql_port)
            server.add(
                sql_pb2_grpc.add_SqlServicer_to_server,
                translate_errors(SqlServicer(coordinator)),
                SQL_SERVICE_NAME,
            )
            self.sql_port = await server.start()
            stack.push_async_callback(server.stop, 5.0)
            pgwire = PgwireServer(
                coordinator,
                settings.sql_host,
                settings.pgwire_port,
                tls_cert=settings.pgwire_tls_cert,
                tls_key=settings.pgwire_tls_key,
                max_message_size=settings.pgwire_max_message_size,
            )
            self.pgwire_port = await pgwire.start()
            stack.push_async_callback(pgwire.stop)
            write_ready_file(
                settings.data_dir,
                "coordinator",
                sql_port=self.sql_port,
                sql_host=settings.sql_host,
                pgwire_port=self.pgwire_port,
                metrics_port=self.metrics_port,
            )
            stack.callback(remove_ready_file, settings.data_dir, "coordinator")
            log.info(
                "coordinator serving SQL",
                sql=f"{settings.sql_host}:{self.sql_port}",
                pgwire=f"{settings.sql_host}:{self.pgwire_port}",
                metrics_port=self.metrics_port,
            )
            self.ready.set()
            await self.wait_for_shutdown()
            log.info("coordinator stopping")

    async def _unless_shutdown(self, work: Awaitable[T]) -> bool:
        """Run ``work`` unless shutdown comes first; True when it completed."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.wait_for_shutdown())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return False
        task.result()
        return True
