"""The coordinator: sessions, and the statements they run, handed to the sequencers.

``Coordinator`` is the session and dispatch layer of the SQL service (the gRPC
servicer is its only caller): it authenticates and closes sessions, parses a
request's SQL, binds its ``$1, $2, …`` (``loupe.coordinator.sql.params``; an
``EXECUTE`` becomes the statement it names, ``loupe.coordinator.prepared``),
logs each execution (``loupe.coordinator.statement_logging``), runs it (a
query as a task ``Cancel`` and ``statement_timeout`` can stop; DDL is never
stopped halfway) and streams its events. Under overload statements wait in
bounded queues (``loupe.coordinator.admission``), limited only by their
``statement_timeout``.
``run_statement`` hands each statement to the module that sequences its
family (``loupe.coordinator.sequencer``: ``select``, ``dml``, ``table``,
``cluster``, ``roles``, ``variables``, …; views, indexes, ``SUBSCRIBE`` and
``DROP CLUSTER`` to ``loupe.coordinator.compute``), with a
``SequencerContext`` of the state they share.

At start the coordinator learns where collections live (``ListCollections``),
reads the catalog (snapshot and audit log), reconciles storage with it, and
follows ``loupe.catalog.v1.changes`` to stay current, so DDL run by other
coordinators is visible here too; it installs the catalog's dataflows again
whenever a controller (re)starts, and a ticker keeps every table's upper and
the oracle moving once a second. A name the in-memory catalog does not know
is looked up in the catalog before it is declared unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client as NatsConnection
from nats.aio.subscription import Subscription

from loupe.common.aio import cancel_all
from loupe.common.errors import LoupeError, SqlState, client_error, internal_error
from loupe.common.logging import get_logger
from loupe.common.transport import NatsServiceClient, subscribe
from loupe.coordinator import access, admission, metrics, prepared
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.catalog_relations import CatalogRelationsWriter
from loupe.coordinator.catalog_state import CatalogState
from loupe.coordinator.compute import Compute
from loupe.coordinator.follower import CatalogFollower
from loupe.coordinator.results import (
    Complete,
    Event,
    Failure,
    RowBatch,
    StatementResult,
    Streaming,
)
from loupe.coordinator.sequencer import (
    cluster,
    dml,
    explain,
    roles,
    select,
    show,
    source,
    table,
    transaction,
    variables,
)
from loupe.coordinator.sequencer.context import SequencerContext
from loupe.coordinator.sequencer.peek import canceled_error
from loupe.coordinator.session import Session, SessionManager, Transaction
from loupe.coordinator.sql.params import Parameter
from loupe.coordinator.sql.params import bind as bind_params
from loupe.coordinator.sql.parser import parse
from loupe.coordinator.sql.statements import (
    AlterCluster,
    AlterRole,
    AlterSystem,
    Close,
    Commit,
    Copy,
    CreateCluster,
    CreateClusterReplica,
    CreateIndex,
    CreateRole,
    CreateSource,
    CreateTable,
    CreateView,
    Deallocate,
    Declare,
    Delete,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    DropRole,
    DropTable,
    Execute,
    Explain,
    ExplainAnalyze,
    Fetch,
    GrantRole,
    Insert,
    Prepare,
    Query,
    ResetVariable,
    Rollback,
    SetVariable,
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
    ShowVariable,
    StartTransaction,
    Statement,
    Subscribe,
    Update,
)
from loupe.coordinator.table_store import TableStore, TimestampOracle
from loupe.persist import nats_upper_notifier
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.controller.v1 import controller_pb2

log = get_logger(__name__)

CATALOG_SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]
# How often a coordinator whose catalog relations append went unconfirmed tries again.
CATALOG_RESYNC_INTERVAL_S = 5.0
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
CATALOG_CHANGES_SUBJECT = "loupe.catalog.v1.changes"
CONTROLLER_STARTED_SUBJECT = "loupe.controller.v1.started"

T = TypeVar("T")


def unexpected_failure(event: str, **context: Any) -> Failure:
    """A bug, not the user's error: XX000 for the client, its traceback in the log only.

    Call from an ``except`` block; the incident id ties the two together.
    """
    incident = uuid.uuid4().hex[:12]
    log.exception(event, incident=incident, **context)
    return Failure(internal_error(incident, "coordinator"))


@dataclass
class CoordinatorConfig:
    # A read waits as long as it must (the session's statement_timeout is its
    # only limit); it asks the controller in rounds of this many seconds, and a
    # read still waiting after the first round is logged once with what it
    # waits for.
    peek_round: float = 5.0
    # A peek goes to the cluster's online replicas straight from here (the
    # controller publishes which: ``PeekRoutes``) and is asked of the controller
    # when they go offline, or when none answers within this many seconds (an
    # index far behind, a replica hung); 0: always through the controller.
    peek_direct_wait: float = 5.0
    # Peeks in flight to one cluster at once; more wait their turn (admission).
    peek_concurrency: int = 16
    # Statements that may wait in one admission queue (peek, ddl, table_write)
    # before more are refused with 53000.
    max_queued_statements: int = 1024
    # How long DDL waits for its commit to reach mz_catalog (within its
    # statement_timeout) before answering with a NOTICE that it is not there yet.
    catalog_relations_wait: float = 30.0
    # How long to wait for the controller and catalog at start.
    startup_timeout: float = 180.0
    # Timeout of one catalog or controller request (peeks excepted).
    request_timeout: float = 30.0
    # Timeout of one call to the catalog's timestamp oracle (asked again after it).
    oracle_timeout: float = 5.0
    # How long to wait at start for the storage writer's next flush.
    storage_settle_timeout: float = 3.0
    # How long DDL waits for its own commit on the changes stream before
    # following the catalog's response instead.
    follow_timeout: float = 2.0
    # Seconds between ticks that move the oracle and every table's upper to
    # the current time (0 disables the ticker).
    table_tick_interval: float = 1.0
    # Seconds of history every table keeps for AS OF.
    table_retention: float = 3600.0
    # Ticks between compactions of the tables.
    table_compaction_ticks: int = 10
    # Seconds between moves of the indexes' and materialized views' sinces
    # (0 keeps them where their dataflows started), and how far behind the
    # present they stay: what AS OF may read of an index (``compaction``).
    compute_compaction_interval: float = 1.0
    compute_compaction_window: float = 1.0
    # How long CREATE INDEX / MATERIALIZED VIEW wait for their dataflow to hydrate.
    hydration_wait: float = 60.0
    hydration_poll_interval: float = 0.2
    # This coordinator's name among the coordinators of a deployment (each
    # needs its own): executions it leaves open when it dies are found by it.
    instance_name: str = "coordinator"
    # The storage writer's input subject (the controller's storage_subject).
    storage_subject: str = stmtlog.DEFAULT_SUBJECT
    # Seconds a session may go unnamed by any request (and run nothing) before it
    # is closed; 0 keeps sessions until CloseSession.
    idle_session_timeout: float = 86400.0
    # How sessions authenticate: "trust" or "password" (loupe.coordinator.access).
    authenticator: str = "trust"
    # In "password" mode, the password of the configured superusers whose role
    # has none of its own.
    superuser_password: str = dataclasses.field(default="", repr=False)


class Coordinator:
    """Runs statements for sessions; the gRPC servicer is its only caller.

    Owns the clients, stores and background loops; ``context`` is what of
    them the sequencers get.
    """

    def __init__(
        self,
        connection: NatsConnection,
        sessions: SessionManager,
        config: CoordinatorConfig | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        if self.config.authenticator not in access.AUTHENTICATORS:
            raise ValueError(
                f"authenticator must be one of {', '.join(access.AUTHENTICATORS)}, "
                f"not {self.config.authenticator!r}"
            )
        self.sessions = sessions
        self._nc = connection
        self.catalog = NatsServiceClient(
            connection, CATALOG_SERVICE, timeout=self.config.request_timeout
        )
        self.controller = NatsServiceClient(
            connection, CONTROLLER_SERVICE, timeout=self.config.request_timeout
        )
        self.writer = CatalogRelationsWriter(
            self.controller,
            call_timeout=self.config.request_timeout,
            settle_timeout=self.config.storage_settle_timeout,
        )
        self.follower = CatalogFollower(
            self.catalog,
            self.controller,
            self.writer,
            follow_timeout=self.config.follow_timeout,
        )
        self.oracle = TimestampOracle(self.catalog, call_timeout=self.config.oracle_timeout)
        self.tables = TableStore(
            self.oracle,
            lambda: self.state.tables.values(),
            retention_ms=int(self.config.table_retention * 1000),
            max_waiting=self.config.max_queued_statements,
        )
        # What the sequencers share; they get it, not the coordinator.
        self.context = SequencerContext(
            config=self.config,
            connection=connection,
            catalog=self.catalog,
            controller=self.controller,
            writer=self.writer,
            follower=self.follower,
            oracle=self.oracle,
            tables=self.tables,
            compute=Compute,
        )
        self.compute = self.context.compute
        self._subscription: Subscription | None = None
        self._controller_started: Subscription | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.statement_log = stmtlog.StatementLogger(
            connection,
            lambda: self.state.snapshot.system_configuration,
            owner=self.config.instance_name,
            subject=self.config.storage_subject,
            cluster_id=self._cluster_id,
        )

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def state(self) -> CatalogState:
        """The newest catalog snapshot this coordinator knows."""
        return self.follower.state

    @property
    def collections(self) -> dict[str, common_pb2.CollectionMetadata]:
        """Where each builtin collection lives (``ListCollections``)."""
        return self.context.collections

    async def start(self) -> None:
        """Learn the collections and the catalog, and make storage match the catalog."""
        # Subscribe first so no change committed during start-up is missed.
        self._subscription = await subscribe(
            self._nc, CATALOG_CHANGES_SUBJECT, catalog_pb2.CatalogSnapshot, self.follower.on_change
        )
        await self.refresh_collections(wait=True)
        await self._start_following()
        self._open_table_store()
        self.tables.notify = nats_upper_notifier(self._nc)
        try:
            # Shards of tables created while no coordinator ran, and fresh uppers.
            await self.tables.advance_all()
        except LoupeError as error:
            log.warning("could not advance the tables at start", error=error.message)
        if self.config.table_tick_interval > 0:
            self._ticker = asyncio.create_task(self._tick_tables())
        if self.config.idle_session_timeout > 0:
            self.context.spawn(self._reap_idle_sessions())
        if self.config.compute_compaction_interval > 0:
            self.context.spawn(self._compact_compute())
        # After a storage writer outage the catalog relations catch up without new DDL.
        self.context.spawn(self.follower.keep_storage_in_sync(CATALOG_RESYNC_INTERVAL_S))
        # A controller that (re)starts has no dataflows: send ours again then too.
        self._controller_started = await subscribe(
            self._nc,
            CONTROLLER_STARTED_SUBJECT,
            controller_pb2.ControllerStarted,
            self._on_controller_started,
        )
        await self.context.peek_replies.start()
        await self.context.peek_routes.start()
        await self._install_dataflows()
        await self.statement_log.start()

    async def _install_dataflows(self) -> None:
        try:
            await self.compute.install_all()
        except LoupeError as error:
            log.warning("could not install the catalog's dataflows", error=error.message)

    async def _on_controller_started(
        self, started: controller_pb2.ControllerStarted, _msg: Any
    ) -> None:
        log.info(
            "a controller started: installing the catalog's dataflows", boot_id=started.boot_id
        )
        if self.follower.storage_behind:
            self.follower.resync_soon()  # its storage writer is back: catch up now
        await self._install_dataflows()

    async def _start_following(self) -> None:
        """Reconcile with the catalog; a timed-out storage append is tried again.

        A controller still starting (Spark warming up on a busy machine) may
        answer its first appends late; they are idempotent (batch ids), so
        trying again until ``startup_timeout`` is safe.
        """
        deadline = time.monotonic() + self.config.startup_timeout
        while True:
            try:
                await self.follower.start(
                    self.collections,
                    self._retry_unavailable,
                    append_wait=self.config.catalog_relations_wait,
                )
                return
            except LoupeError as error:
                if error.code != "DEADLINE_EXCEEDED" or time.monotonic() >= deadline:
                    raise
                log.info("storage is slow to answer; reconciling again", error=error.message)

    def _open_table_store(self) -> None:
        """Tables live where the builtin collections live."""
        for metadata in self.collections.values():
            if metadata.blob_uri and metadata.consensus_uri:
                self.tables.open(metadata.blob_uri, metadata.consensus_uri)
                return
        log.warning("the controller names no storage location: tables cannot be written")

    async def _tick_tables(self) -> None:
        """Group commit without writes, every ``table_tick_interval`` (Materialize's ticks)."""
        ticks = 0
        failing = False
        while True:
            await asyncio.sleep(self.config.table_tick_interval)
            ticks += 1
            try:
                await self.tables.tick(compact=ticks % self.config.table_compaction_ticks == 0)
                metrics.TABLE_TICKS.labels("ok").inc()
                failing = False
            except Exception as error:
                metrics.TABLE_TICKS.labels("failed").inc()
                # Once at warning, then quietly until it works again.
                (log.debug if failing else log.warning)("table tick failed", error=str(error))
                failing = True

    async def _compact_compute(self) -> None:
        """Move the compute collections' sinces on (``compaction``), forever."""
        failing = False
        while True:
            await asyncio.sleep(self.config.compute_compaction_interval)
            try:
                await self.compute.compact(self._pinned_timestamps())
                failing = False
            except Exception as error:
                (log.debug if failing else log.warning)(
                    "compute compaction failed", error=str(error)
                )
                failing = True

    def _pinned_timestamps(self) -> list[int]:
        """The timestamps open explicit transactions read at: compaction holds them."""
        return [
            s.transaction.timestamp
            for s in self.sessions
            if s.transaction is not None
            and s.transaction.explicit
            and s.transaction.timestamp is not None
        ]

    async def stop(self) -> None:
        await self.statement_log.stop()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for subscription in (self._subscription, self._controller_started):
            if subscription is not None:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
        self._subscription = self._controller_started = None
        await self.context.peek_routes.stop()
        await self.context.peek_replies.stop()
        await cancel_all(list(self.context.background))

    async def refresh_collections(self, *, wait: bool = False) -> None:
        async def list_collections() -> controller_pb2.ListCollectionsResponse:
            return await self.controller.ListCollections(common_pb2.Empty())

        response = (
            await self._retry_unavailable(list_collections, "controller")
            if wait
            else await list_collections()
        )
        self.context.collections = {c.collection_id: c for c in response.collections}

    async def _retry_unavailable(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        deadline = time.monotonic() + self.config.startup_timeout
        attempts = 0
        while True:
            try:
                return await call()
            except LoupeError as error:
                if error.code != "UNAVAILABLE" or time.monotonic() >= deadline:
                    raise
                # Once at info, then quietly: the other services are starting too.
                report = log.info if attempts == 0 else log.debug
                report(f"waiting for the {what}", error=error.message)
                attempts += 1
            await asyncio.sleep(0.25)

    # -- execution ----------------------------------------------------------------------

    async def execute(
        self,
        session: Session,
        sql: str,
        params: Sequence[Parameter] = (),
        *,
        prepared_log: stmtlog.PreparedLog | None = None,
    ) -> AsyncIterator[Event]:
        """Run the statements of ``sql`` in order; a failure ends the stream.

        ``params`` are the values of its ``$1, $2, …`` (``loupe.coordinator.sql.params``);
        with them, ``sql`` is one statement, as in PostgreSQL's extended protocol.
        ``prepared_log``: the named prepared statement (pgwire's ``Parse``) this executes,
        logged once for all its executions; None: an unnamed one, prepared anew.
        """
        async with session.lock:
            session.cancel_requested = False
            try:
                statements = parse(sql)
            except LoupeError as error:
                metrics.STATEMENTS.labels("parse", "error").inc()
                yield Failure(client_error(error))
                return
            except Exception:
                metrics.STATEMENTS.labels("parse", "error").inc()
                yield unexpected_failure("parsing failed unexpectedly")
                return
            if not statements:
                yield Complete("EMPTY")
                return
            if params and len(statements) > 1:
                yield Failure(
                    LoupeError(
                        SqlState.SYNTAX_ERROR,
                        "cannot insert multiple commands into a prepared statement",
                    )
                )
                return
            try:
                for statement in statements:
                    current = session.transaction
                    if current is not None and current.failed:
                        if not isinstance(statement, Commit | Rollback):
                            # Refused unlogged, as Materialize's pgwire refuses it.
                            yield Failure(transaction.aborted_error())
                            return
                    elif current is None and len(statements) > 1:
                        # PostgreSQL's implicit transaction of a multi-statement request.
                        session.transaction = Transaction(explicit=False)
                    failed = False
                    async for event in self._statement(session, statement, params, prepared_log):
                        failed = isinstance(event, Failure)
                        yield event
                    if failed:
                        if session.transaction is not None and session.transaction.explicit:
                            session.transaction.failed = True
                        return
            finally:
                if session.transaction is not None and not session.transaction.explicit:
                    await asyncio.shield(transaction.end(session))

    async def _statement(
        self,
        session: Session,
        statement: Statement,
        params: Sequence[Parameter],
        prepared_log: stmtlog.PreparedLog | None,
    ) -> AsyncIterator[Event]:
        """One statement of a request, bound and logged."""
        bound, failure = await self._bound(session, statement, params, prepared_log)
        kind = bound.kind
        text = bound.sql
        if access.hides_password(statement):
            text = stmtlog.redact_sql(text)
        execution = self.statement_log.begin(
            session, text, kind, params=bound.params_text, prepared=bound.prepared
        )
        async for event in self._logged(session, bound.statement, execution, failure):
            yield event

    async def _bound(
        self,
        session: Session,
        statement: Statement,
        params: Sequence[Parameter],
        prepared_log: stmtlog.PreparedLog | None = None,
    ) -> tuple[prepared.Bound, LoupeError | None]:
        """``statement`` with its parameters bound; EXECUTE becomes the statement it names.

        A statement that cannot be bound (a missing parameter, an unknown
        prepared statement) is logged as itself with how it failed.
        """
        try:
            statement = bind_params(statement, params)
            if isinstance(statement, Execute):
                evaluate = functools.partial(select.run_query, self.context)
                return await prepared.bound_execution(session, statement, evaluate), None
            bound = prepared.Bound.unnamed(statement, params)
            if prepared_log is not None:
                bound = dataclasses.replace(bound, prepared=prepared_log)
            return bound, None
        except LoupeError as error:
            return prepared.Bound.unnamed(statement, params), error

    async def _logged(
        self,
        session: Session,
        statement: Statement,
        execution: stmtlog.Execution | None,
        failure: LoupeError | None = None,
    ) -> AsyncIterator[Event]:
        """The events of one statement; a sampled execution is logged with how it ended.

        A stream closed before its end (the client went away) is logged canceled.
        ``failure``: the statement failed before it could run.
        """
        status, message = stmtlog.CANCELED, None
        try:
            async for event in self._execute_one(session, statement, execution, failure):
                if isinstance(event, Failure):
                    canceled = event.error.code == SqlState.QUERY_CANCELED
                    status = stmtlog.CANCELED if canceled else stmtlog.ERROR
                    message = event.error.message
                elif isinstance(event, RowBatch) and execution is not None:
                    rows, size = stmtlog.result_size(event.rows)
                    execution.rows_returned += rows
                    execution.result_size += size
                yield event
                if isinstance(event, Failure):
                    return
            status = stmtlog.SUCCESS
        finally:
            if execution is not None:
                self.statement_log.end(execution, status, error_message=message)

    async def _execute_one(
        self,
        session: Session,
        statement: Statement,
        execution: stmtlog.Execution | None,
        failure: LoupeError | None = None,
    ) -> AsyncIterator[Event]:
        kind = type(statement).__name__
        started = time.monotonic()
        try:
            if failure is not None:
                raise failure
            result = await self._run_cancelable(session, statement, execution)
        except LoupeError as error:
            outcome = "canceled" if error.code == SqlState.QUERY_CANCELED else "error"
            metrics.STATEMENTS.labels(kind, outcome).inc()
            yield Failure(client_error(error))
            return
        except Exception:
            metrics.STATEMENTS.labels(kind, "error").inc()
            yield unexpected_failure("statement failed unexpectedly", statement=kind)
            return
        if isinstance(result, Streaming):
            failed = False
            async for event in self._stream(session, result):
                failed = isinstance(event, Failure)
                yield event
            metrics.STATEMENTS.labels(kind, "error" if failed else "ok").inc()
            return
        metrics.STATEMENTS.labels(kind, "ok").inc()
        metrics.STATEMENT_SECONDS.labels(kind).observe(time.monotonic() - started)
        for event in result.events():
            yield event

    async def _stream(self, session: Session, result: Streaming) -> AsyncIterator[Event]:
        """The events of a streaming statement; ``cancel()`` ends it with 57014.

        Each step runs as the session's cancelable task; the stream is closed
        (running its clean-up: a SUBSCRIBE drops its dataflow) however it ends.
        """
        stream = result.stream
        try:
            while True:
                if session.cancel_requested:
                    yield Failure(canceled_error())
                    return
                step = asyncio.ensure_future(anext(stream))
                session.running = step
                try:
                    event = await step
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
                    yield Failure(canceled_error())
                    return
                except LoupeError as error:
                    yield Failure(client_error(error))
                    return
                except Exception:
                    yield unexpected_failure("statement failed unexpectedly")
                    return
                finally:
                    session.running = None
                yield event
                if isinstance(event, Failure):
                    return
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]

    async def _run_cancelable(
        self,
        session: Session,
        statement: Statement,
        execution: stmtlog.Execution | None = None,
    ) -> StatementResult | Streaming:
        """Run ``statement`` as a task ``cancel()`` can stop (DDL is never stopped halfway).

        A query's ``statement_timeout`` cancels its task; a write or DDL is not
        canceled but stops waiting (for a queue, a service, a lost race) at its
        deadline (``admission.STATEMENT_DEADLINE``), before it commits: 57014.

        The task sees ``execution`` (``statement_logging.CURRENT``), so the
        compute path can say which strategy it took.
        """
        if session.cancel_requested:
            raise canceled_error()
        timeout = session.statement_timeout
        context = contextvars.copy_context()
        context.run(stmtlog.CURRENT.set, execution)
        if timeout is not None:
            # What waits inside the statement (a queue, a service) stops at it.
            context.run(admission.STATEMENT_DEADLINE.set, time.monotonic() + timeout)
        task = asyncio.create_task(self.run_statement(session, statement), context=context)
        cancelable = isinstance(
            statement,
            Query
            | Fetch
            | ShowClusters
            | ShowClusterReplicas
            | ShowRoles
            | ShowObjects
            | Explain
            | ExplainAnalyze,
        )
        session.running = task if cancelable else None
        limit = timeout if cancelable else None
        try:
            if limit is None:
                return await task
            done, _ = await asyncio.wait({task}, timeout=limit)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, LoupeError):
                    await task
                raise LoupeError(
                    SqlState.QUERY_CANCELED, "canceling statement due to statement timeout"
                )
            return task.result()
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                task.cancel()
                raise  # the client went away: the peek was canceled with us
            raise canceled_error() from None
        finally:
            session.running = None

    def close_session(self, session_id: str, *, why: str = "closed by the client") -> bool:
        """Close a session: what it runs is canceled, its prepared statements end."""
        session = self.sessions.close(session_id)
        if session is not None:
            self.cancel(session)
            if session.transaction is not None:
                # Its cursors' SUBSCRIBE dataflows are dropped; its INSERTs are forgotten.
                self.context.spawn(transaction.end(session))
            self.statement_log.session_closed(session.id)
            log.info("session closed", session_id=session.id, why=why)
        metrics.SESSIONS.set(len(self.sessions))
        return session is not None

    async def _reap_idle_sessions(self) -> None:
        """Close sessions idle longer than ``idle_session_timeout`` (a client that went away
        without CloseSession: the gRPC API has no connection to notice it by)."""
        timeout = self.config.idle_session_timeout
        while True:
            await asyncio.sleep(min(60.0, timeout / 4))
            for session in self.sessions.idle(timeout):
                if self.close_session(session.id, why=f"idle for more than {timeout:g}s"):
                    metrics.SESSIONS_REAPED.inc()

    def cancel(self, session: Session) -> bool:
        """Cancel what ``session`` runs; True if a statement was canceled."""
        task = session.running
        if task is None or task.done():
            return False
        session.cancel_requested = True
        task.cancel()
        return True

    async def _copy(self, session: Session, copy: Copy) -> StatementResult | Streaming:
        """COPY … TO STDOUT answers its query's rows (the PostgreSQL wire protocol formats
        them); COPY FROM STDIN reads data only that protocol carries."""
        if copy.direction == "FROM" or copy.query is None:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "COPY FROM STDIN needs the PostgreSQL wire protocol",
            )
        result = await self.run_statement(session, copy.query)
        if isinstance(result, StatementResult):
            return dataclasses.replace(result, tag=f"COPY {len(result.rows)}")
        return result

    async def run_statement(
        self, session: Session, statement: Statement
    ) -> StatementResult | Streaming:
        """Plan and run one statement."""
        access.check_statement_log_access(
            statement,
            user=session.user,
            superuser=session.is_superuser,
            search_path=session.search_path,
            roles=self.state.role_objects,
        )
        ctx = self.context
        if transaction.check_allowed(session, statement):
            return transaction.defer(session, statement)
        match statement:
            case StartTransaction():
                return transaction.begin(session, statement)
            case Commit():
                run = functools.partial(self.run_statement, session)
                return await transaction.commit(ctx, session, statement, run)
            case Rollback():
                return await transaction.rollback(session, statement)
            case Declare():
                return transaction.declare(session, statement)
            case Fetch():
                run = functools.partial(self.run_statement, session)
                return await transaction.fetch(session, statement, run)
            case Close():
                return await transaction.close(session, statement)
            case Insert() if transaction.explicit(session) is not None:
                return await transaction.insert(ctx, session, statement)
            case Query():
                return await select.select(ctx, session, statement)
            case Explain():
                return await explain.explain(ctx, session, statement)
            case ExplainAnalyze():
                return await explain.explain_analyze(ctx, session, statement)
            case ShowClusters() | ShowClusterReplicas() | ShowRoles() | ShowObjects():
                return await show.show(ctx, session, statement)
            case Subscribe():
                return await self.compute.subscribe(session, statement)
            case Copy():
                return await self._copy(session, statement)
            case Insert():
                return await dml.insert(ctx, session, statement)
            case Update():
                return await dml.update(ctx, session, statement)
            case Delete():
                return await dml.delete(ctx, session, statement)
            case CreateTable():
                return await table.create_table(ctx, session, statement)
            case DropTable():
                return await table.drop_table(ctx, session, statement)
            case CreateView() | CreateIndex():
                return await self.compute.create(session, statement)
            case DropObjects():
                return await self.compute.drop(session, statement)
            case CreateSource():
                return await source.create_source(ctx, session, statement)
            case DropClusterReplica():
                return await self.compute.drop_cluster_replica(session, statement)
            case CreateCluster() | CreateClusterReplica() | AlterCluster():
                return await cluster.cluster_ddl(ctx, session, statement)
            case DropCluster():
                return await self.compute.drop_cluster(session, statement)
            case CreateRole() | AlterRole() | DropRole() | GrantRole():
                return await roles.role_ddl(ctx, session, statement)
            case SetVariable():
                return await variables.set_variable(ctx, session, statement)
            case ShowVariable():
                return variables.show_variable(ctx, session, statement)
            case ResetVariable():
                return variables.reset_variable(session, statement)
            case AlterSystem():
                return await variables.alter_system(ctx, session, statement)
            case Prepare():
                return prepared.prepare(session, statement)
            case Deallocate():
                return prepared.deallocate(session, statement)
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"{type(statement).__name__} is not supported",
            position=statement.position,
        )

    # -- sessions -----------------------------------------------------------------------

    async def authenticate(self, user: str, password: str) -> bool:
        """Check ``user``'s credentials (28000 / 28P01 if refused); whether it is a superuser.

        A role this coordinator does not know yet is looked up in a fresh
        catalog snapshot: another coordinator may have created it a moment ago.
        """
        state = self.state
        if user not in state.role_objects:
            state = await self.context.refreshed_state()
        try:
            await access.authenticate(
                state.role_objects,
                user,
                password,
                authenticator=self.config.authenticator,
                superusers=self.sessions.superusers,
                superuser_password=self.config.superuser_password,
            )
        except LoupeError:
            metrics.AUTHENTICATION_FAILURES.inc()
            raise
        if self.config.authenticator == "password" and access.needs_upgrade(
            state.role_objects, user
        ):
            # The password just matched a legacy scrypt hash: store it as a SCRAM verifier
            # (in the background: the login does not wait for a catalog commit).
            self.context.spawn(roles.upgrade_password_hash(self.context, user, password))
        return access.is_superuser(state.role_objects, user, self.sessions.superusers)

    async def login_plan(self, user: str) -> access.LoginPlan:
        """How a PostgreSQL-wire client proves it is ``user`` (``trust``, ``cleartext`` or
        ``scram`` with the role's verifier); the gRPC API sends the password itself."""
        state = self.state
        if user not in state.role_objects:
            state = await self.context.refreshed_state()
        return access.login_plan(
            state.role_objects,
            user,
            authenticator=self.config.authenticator,
            superusers=self.sessions.superusers,
            superuser_password=self.config.superuser_password,
        )

    async def admit(self, user: str) -> bool:
        """After a SCRAM exchange proved the password: 28000 if ``user`` may not log in;
        whether it is a superuser."""
        state = self.state
        access.check_login(state.role_objects, user)
        return access.is_superuser(state.role_objects, user, self.sessions.superusers)

    def session_defaults(self) -> dict[str, str]:
        """Session variables whose default a system variable sets, as of now."""
        return variables.session_defaults(self.context)

    def system_variable(self, name: str) -> str:
        return variables.system_variable(self.context, name)

    def _cluster_id(self, name: str) -> str | None:
        cluster = self.state.cluster(name)
        return cluster.id if cluster is not None else None
