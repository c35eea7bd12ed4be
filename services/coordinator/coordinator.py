"""The coordinator: plans and runs SQL statements for client sessions.

- Cluster and table DDL becomes ``CatalogOp``s for ``Catalog.Transact``
  (with the session's user, for the audit log); the commit is followed like
  any other (``follower.CatalogFollower``: controller, then the
  catalog-derived relations in storage) before the client gets its answer,
  and the oracle is moved past that append, so a SELECT right after sees the
  change.
- ``INSERT``/``UPDATE``/``DELETE`` write user tables directly through
  ``loupe.persist`` at timestamps from the catalog's oracle
  (``table_store.TableStore``, ``dml``); a ticker keeps every table's upper
  and the oracle moving once a second.
- A SELECT is resolved against the builtin collections and the user tables
  and read at one timestamp: ``AS OF`` if given, else the oracle's read
  timestamp (strict serializable; ``transaction_isolation = serializable``
  reads the latest complete time instead). ``mz_now()`` becomes that
  timestamp. A SELECT reading relations runs on compute dataflows
  (``loupe.coordinator.compute``: fast-path index peeks or transient
  dataflows) on the system cluster when it reads only system relations,
  else on the session's cluster; a SELECT that reads no relation is
  evaluated here with polars (Materialize's constant strategy).
- Views, materialized views, indexes, ``SUBSCRIBE`` and ``CREATE SOURCE …
  FROM LOAD GENERATOR TPCH`` are ``loupe.coordinator.compute``'s.
- ``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN … FOR <query>`` resolves the
  query's names as a SELECT does, plans it (``loupe.coordinator.plan``) and
  returns the plan's text as one row, without reading anything.
- ``SET``/``SHOW``/``RESET`` work on the session, and so do ``PREPARE``,
  ``EXECUTE`` and ``DEALLOCATE`` (``loupe.coordinator.prepared``). A
  statement's ``$1, $2, …`` are bound as literals of their values (the
  request's parameters, or EXECUTE's arguments) before it is planned
  (``loupe.coordinator.sql.params``).

At start the coordinator learns where collections live (``ListCollections``),
reads the catalog (snapshot and audit log), reconciles storage with it, and
follows ``loupe.catalog.v1.changes`` to stay current, so DDL run by other
coordinators is visible here too. A name the in-memory catalog does not know
is looked up in the catalog before it is declared unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client as NatsConnection
from nats.aio.subscription import Subscription
from sqlglot import exp

from loupe import sqltypes
from loupe.builtins import BY_QUALIFIED_NAME, IMPLICIT_SCHEMAS
from loupe.common.errors import LoupeError, SqlState, client_error, internal_error
from loupe.common.logging import get_logger
from loupe.common.system_vars import checked_value, is_system_variable, system_value
from loupe.common.transport import NatsServiceClient, subscribe
from loupe.common.values import from_row
from loupe.coordinator import access, dml, metrics, prepared
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.catalog_relations import CatalogRelationsWriter
from loupe.coordinator.catalog_state import CatalogState, ClusterInfo
from loupe.coordinator.compute import Compute, explain_text
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.follower import CatalogFollower
from loupe.coordinator.objects import ComputeObject, is_unique_index
from loupe.coordinator.plan import TemporalError, plan_query
from loupe.coordinator.results import (
    Column,
    Complete,
    Event,
    Failure,
    Notice,
    Progress,
    RowBatch,
    StatementResult,
    Streaming,
)
from loupe.coordinator.session import Session, SessionManager
from loupe.coordinator.show import builtin_columns_sql, show_sql
from loupe.coordinator.sql.params import Parameter
from loupe.coordinator.sql.params import bind as bind_params
from loupe.coordinator.sql.parser import parse, parse_one
from loupe.coordinator.sql.resolve import (
    Relation,
    resolve_relations,
    search_path_schemas,
)
from loupe.coordinator.sql.statements import (
    AlterRole,
    AlterSystem,
    ColumnDef,
    CreateCluster,
    CreateClusterReplica,
    CreateIndex,
    CreateRole,
    CreateSource,
    CreateTable,
    CreateView,
    Deallocate,
    Delete,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    DropRole,
    DropTable,
    Execute,
    Explain,
    GrantRole,
    Insert,
    ObjectName,
    Prepare,
    Query,
    ResetVariable,
    SetVariable,
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
    ShowVariable,
    Statement,
    Subscribe,
    UniqueKey,
    Update,
)
from loupe.coordinator.statement_logging_views import inline_builtin_views
from loupe.coordinator.table_store import TableStore, TimestampOracle
from loupe.coordinator.tables import Table, check_columns, columns_of, create_table_sql
from loupe.coordinator.timestamps import as_of_timestamp
from loupe.persist import nats_upper_notifier
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2

log = get_logger(__name__)

CATALOG_SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]
CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
CATALOG_CHANGES_SUBJECT = "loupe.catalog.v1.changes"
CONTROLLER_STARTED_SUBJECT = "loupe.controller.v1.started"

SHOW_CLUSTERS_SQL = "SELECT name FROM mz_catalog.mz_clusters ORDER BY name"
# Materialize's SHOW ROLES: the roles users create (not the system ones).
SHOW_ROLES_SQL = "SELECT name FROM mz_catalog.mz_roles WHERE id LIKE 'u%' ORDER BY name"
SHOW_CLUSTER_REPLICAS_SQL = """
SELECT c.name AS "cluster", r.name AS replica, r.size AS size,
       COALESCE(s.status = 'online', FALSE) AS ready
FROM mz_catalog.mz_cluster_replicas AS r
JOIN mz_catalog.mz_clusters AS c ON c.id = r.cluster_id
LEFT JOIN mz_internal.mz_cluster_replica_statuses AS s ON s.replica_id = r.id
ORDER BY c.name, r.name
"""

# The name line of EXPLAIN for a query (Materialize prints ``Explained Query:``).
EXPLAINED_QUERY = "Explained Query"
EXPLAIN_COLUMNS = {"optimized": "Optimized Plan", "physical": "Physical Plan"}

T = TypeVar("T")


def unexpected_failure(event: str, **context: Any) -> Failure:
    """A bug, not the user's error: XX000 for the client, its traceback in the log only.

    Call from an ``except`` block; the incident id ties the two together.
    """
    incident = uuid.uuid4().hex[:12]
    log.exception(event, incident=incident, **context)
    return Failure(internal_error(incident, "coordinator"))


def canceled_error() -> LoupeError:
    return LoupeError(SqlState.QUERY_CANCELED, "canceling statement due to user request")


@dataclass
class CoordinatorConfig:
    # How long a peek may run before it is canceled.
    peek_timeout: float = 60.0
    # How long to wait for the controller and catalog at start.
    startup_timeout: float = 180.0
    # Timeout of one catalog or controller request (peeks excepted).
    request_timeout: float = 30.0
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


WRONG_OBJECT_TYPE = "42809"
OBJECT_IN_USE = "55006"
INVALID_SCHEMA_NAME = "3F000"
INVALID_CATALOG_NAME = "3D000"


class Coordinator:
    """Runs statements for sessions; the gRPC servicer is its only caller."""

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
        self.oracle = TimestampOracle(self.catalog)
        self.tables = TableStore(
            self.oracle,
            lambda: self.state.tables.values(),
            retention_ms=int(self.config.table_retention * 1000),
        )
        self.collections: dict[str, common_pb2.CollectionMetadata] = {}
        self.compute = Compute(self)
        # This coordinator's DDL runs one statement at a time.
        self._ddl_lock = asyncio.Lock()
        self._subscription: Subscription | None = None
        self._controller_started: Subscription | None = None
        self._background: set[asyncio.Task[Any]] = set()
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
            self._spawn(self._reap_idle_sessions())
        # A controller that (re)starts has no dataflows: send ours again then too.
        self._controller_started = await subscribe(
            self._nc,
            CONTROLLER_STARTED_SUBJECT,
            controller_pb2.ControllerStarted,
            self._on_controller_started,
        )
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
                await self.follower.start(self.collections, self._retry_unavailable)
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
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def refresh_collections(self, *, wait: bool = False) -> None:
        async def list_collections() -> controller_pb2.ListCollectionsResponse:
            return await self.controller.ListCollections(common_pb2.Empty())

        response = (
            await self._retry_unavailable(list_collections, "controller")
            if wait
            else await list_collections()
        )
        self.collections = {c.collection_id: c for c in response.collections}

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
        self, session: Session, sql: str, params: Sequence[Parameter] = ()
    ) -> AsyncIterator[Event]:
        """Run the statements of ``sql`` in order; a failure ends the stream.

        ``params`` are the values of its ``$1, $2, …`` (``loupe.coordinator.sql.params``);
        with them, ``sql`` is one statement, as in PostgreSQL's extended protocol.
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
            for statement in statements:
                bound, failure = await self._bound(session, statement, params)
                kind = bound.kind
                text = bound.sql
                if access.hides_password(statement):
                    text = stmtlog.redact_sql(text)
                execution = self.statement_log.begin(
                    session, text, kind, params=bound.params_text, prepared=bound.prepared
                )
                failed = False
                async for event in self._logged(session, bound.statement, execution, failure):
                    failed = isinstance(event, Failure)
                    yield event
                if failed:
                    return

    async def _bound(
        self, session: Session, statement: Statement, params: Sequence[Parameter]
    ) -> tuple[prepared.Bound, LoupeError | None]:
        """``statement`` with its parameters bound; EXECUTE becomes the statement it names.

        A statement that cannot be bound (a missing parameter, an unknown
        prepared statement) is logged as itself with how it failed.
        """
        try:
            statement = bind_params(statement, params)
            if isinstance(statement, Execute):
                return await prepared.bound_execution(session, statement, self._query), None
            return prepared.Bound.unnamed(statement, params), None
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

        The task sees ``execution`` (``statement_logging.CURRENT``), so the
        compute path can say which strategy it took.
        """
        if session.cancel_requested:
            raise canceled_error()
        context = contextvars.copy_context()
        context.run(stmtlog.CURRENT.set, execution)
        task = asyncio.create_task(self.run_statement(session, statement), context=context)
        cancelable = isinstance(
            statement,
            Query | ShowClusters | ShowClusterReplicas | ShowRoles | ShowObjects | Explain,
        )
        session.running = task if cancelable else None
        limit = session.statement_timeout if cancelable else None
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
        match statement:
            case CreateRole() | AlterRole() | DropRole() | GrantRole():
                return await self._role_ddl(session, statement)
            case CreateView() | CreateIndex() | CreateSource():
                return await self.compute.create(session, statement)
            case DropObjects():
                return await self.compute.drop(session, statement)
            case Subscribe():
                return await self.compute.subscribe(session, statement)
            case Query():
                return await self._select(session, statement)
            case Explain():
                return await self._explain(session, statement)
            case ShowClusters():
                return await self._select(session, parse_one(SHOW_CLUSTERS_SQL))
            case ShowClusterReplicas():
                return await self._select(session, parse_one(SHOW_CLUSTER_REPLICAS_SQL))
            case ShowRoles():
                return await self._select(session, parse_one(SHOW_ROLES_SQL))
            case ShowObjects():
                return await self._show_objects(session, statement)
            case SetVariable():
                return await self._set(session, statement)
            case ShowVariable():
                return self._show(session, statement)
            case ResetVariable():
                session.reset(statement.name, position=statement.name_position)
                return StatementResult(tag="RESET")
            case Prepare():
                return prepared.prepare(session, statement)
            case Deallocate():
                return prepared.deallocate(session, statement)
            case AlterSystem():
                return await self._alter_system(session, statement)
            case DropCluster():
                return await self.compute.drop_cluster(session, statement)
            case CreateCluster() | CreateClusterReplica() | DropClusterReplica():
                return await self._ddl(session, statement)
            case CreateTable():
                return await self._create_table(session, statement)
            case DropTable():
                return await self._drop_table(session, statement)
            case Insert():
                return await self._insert(session, statement)
            case Update():
                return await self._update(session, statement)
            case Delete():
                return await self._delete(session, statement)
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"{type(statement).__name__} is not supported",
            position=statement.position,
        )

    # -- session commands ---------------------------------------------------------------

    async def _show_objects(self, session: Session, statement: ShowObjects) -> StatementResult:
        """``SHOW TABLES``, ``SHOW COLUMNS FROM t``, ``SHOW CREATE VIEW v``…: a catalog query."""
        target_id = None
        if statement.target is not None:
            if statement.kind == "CREATE INDEX":
                index = await self.compute._object_named(session, statement.target)
                if index is None or index.type != "index":
                    raise LoupeError(
                        SqlState.UNDEFINED_OBJECT,
                        f"unknown catalog item '{statement.target}'",
                        position=statement.target.position,
                    )
                target_id = index.id
            else:
                relation = await self.compute.relation_named(session, statement.target)
                if statement.kind == "COLUMNS" and not isinstance(relation, Table | ComputeObject):
                    return await self._select(session, parse_one(builtin_columns_sql(relation)))
                target_id = relation.id
        schema = next(
            (
                name
                for name in search_path_schemas(session.search_path)
                if self.state.schema_named(session.database, name) is not None
            ),
            "public",
        )
        sql = show_sql(statement, database=session.database, schema=schema, target_id=target_id)
        result = await self._select(session, parse_one(sql))
        return dataclasses.replace(result, tag=f"SELECT {len(result.rows)}")

    async def _set(self, session: Session, statement: SetVariable) -> StatementResult:
        session.set(statement.name, statement.value, position=statement.name_position)
        result = StatementResult(tag="SET")
        name = statement.name.lower()
        if name == "cluster" and await self._cluster(session.cluster) is None:
            result.notices.append(Notice("WARNING", f'cluster "{session.cluster}" does not exist'))
        return result

    async def _cluster(self, name: str) -> ClusterInfo | None:
        """The cluster called ``name``, asking the catalog when this coordinator does not know it.

        Another coordinator may have created it a moment ago.
        """
        cluster = self.state.cluster(name)
        if cluster is None:
            cluster = (await self._refreshed_state()).cluster(name)
        return cluster

    async def _refreshed_state(self) -> CatalogState:
        try:
            return await self.follower.refresh()
        except LoupeError as error:
            log.warning("could not read the catalog", error=error.message)
            return self.state

    async def authenticate(self, user: str, password: str) -> bool:
        """Check ``user``'s credentials (28000 / 28P01 if refused); whether it is a superuser.

        A role this coordinator does not know yet is looked up in a fresh
        catalog snapshot: another coordinator may have created it a moment ago.
        """
        state = self.state
        if user not in state.role_objects:
            state = await self._refreshed_state()
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
        return access.is_superuser(state.role_objects, user, self.sessions.superusers)

    async def _role_ddl(
        self, session: Session, statement: CreateRole | AlterRole | DropRole | GrantRole
    ) -> StatementResult:
        """CREATE/ALTER/DROP ROLE, GRANT/REVOKE role: superusers only, except that a role
        may change its own password (PostgreSQL's rule)."""
        own_password = access.changes_only_own_password(statement, session.user)
        if not own_password:
            self._require_superuser(session, statement)
        if isinstance(statement, DropRole) and session.user in statement.names:
            raise LoupeError(
                OBJECT_IN_USE, "current user cannot be dropped", position=statement.position
            )
        ops = await access.role_ops(statement, grantor=session.user)
        _, result = await self._transact(session, statement, ops, superuser_only=not own_password)
        return result

    async def _alter_system(self, session: Session, statement: AlterSystem) -> StatementResult:
        """Store (or remove) a system variable's value in the catalog; superusers only."""
        self._require_superuser(session, statement)
        try:
            value = (
                None if statement.value is None else checked_value(statement.name, statement.value)
            )
        except LoupeError as error:
            raise LoupeError(error.code, error.message, position=statement.name_position) from None
        op = catalog_pb2.CatalogOp(
            set_system_variable=catalog_pb2.SetSystemVariable(
                name=statement.name.lower(), value=value or "", reset=value is None
            )
        )
        _, result = await self._transact(session, statement, [op], advance=False)
        return result

    def session_defaults(self) -> dict[str, str]:
        """Session variables whose default a system variable sets, as of now."""
        rate = self.system_variable("statement_logging_default_sample_rate")
        return {"statement_logging_sample_rate": rate}

    def system_variable(self, name: str) -> str:
        return system_value(self.state.snapshot.system_configuration, name)

    def _cluster_id(self, name: str) -> str | None:
        cluster = self.state.cluster(name)
        return cluster.id if cluster is not None else None

    def _show(self, session: Session, statement: ShowVariable) -> StatementResult:
        if statement.name.lower() == "all":
            return StatementResult(
                tag="SHOW",
                columns=(("name", "text"), ("setting", "text"), ("description", "text")),
                rows=list(session.show_all()),
            )
        if is_system_variable(statement.name):
            value = self.system_variable(statement.name)
        else:
            value = session.get(statement.name, position=statement.name_position)
        return StatementResult(
            tag="SHOW", columns=((statement.name.lower(), "text"),), rows=[(value,)]
        )

    # -- queries ------------------------------------------------------------------------

    async def _select(self, session: Session, query: Statement) -> StatementResult:
        assert isinstance(query, Query)
        columns, rows = await self._query(session, query)
        return StatementResult(tag=f"SELECT {len(rows)}", columns=columns, rows=rows)

    async def _query(
        self, session: Session, query: Query
    ) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
        """Resolve, choose the timestamp, run: (columns, rows)."""
        query = dataclasses.replace(query, expression=inline_builtin_views(query.expression))
        expression, relations = await self.compute.resolved(session, query.expression)
        if relations:
            # The planner names the columns as PostgreSQL does.
            columns, rows = await self.compute.select(session, query, expression, relations)
            return tuple(columns), rows
        return await self._constant(query, expression)

    async def _constant(
        self, query: Query, expression: exp.Expression
    ) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
        """A query that reads no relation, evaluated here (``evaluate_constant``).

        Its time is ``AS OF`` if given; else the oracle's, read only when
        ``now()``/``mz_now()`` need one.
        """
        timestamp = (
            None if query.as_of is None else as_of_timestamp(query.as_of, query.as_of_position)
        )
        # In a thread: a large constant query must not stall every other session.
        try:
            columns, rows = await asyncio.to_thread(
                evaluate_constant, expression, query_time=timestamp
            )
        except TemporalError:
            timestamp = await self.oracle.read_timestamp()
            columns, rows = await asyncio.to_thread(
                evaluate_constant, expression, query_time=timestamp
            )
        stmtlog.note_event(stmtlog.OPTIMIZATION_FINISHED)
        stmtlog.note_strategy(stmtlog.CONSTANT)
        return columns, rows

    async def _resolving(self, attempt: Callable[[CatalogState], T]) -> T:
        """``attempt`` with the known catalog, then once more with a fresh one on 42P01."""
        try:
            return attempt(self.state)
        except LoupeError as error:
            if error.code != SqlState.UNDEFINED_TABLE:
                raise
            # Another coordinator may have created the table a moment ago.
            return attempt(await self._refreshed_state())

    async def _explain(self, session: Session, statement: Explain) -> StatementResult:
        """The plan of the query (or stored definition) as text: one row, one column."""
        if statement.query is None:
            name, planned = await self.compute.explain_object(session, statement)
        else:
            query = statement.query

            def attempt(state: CatalogState) -> tuple[exp.Expression, dict[str, Relation]]:
                return resolve_relations(
                    query.expression,
                    search_path=search_path_schemas(session.search_path),
                    database=session.database,
                    collections={**BY_QUALIFIED_NAME, **state.relations_in(session.database)},
                )

            expression, relations = await self._resolving(attempt)
            planned = plan_query(expression, lambda name: plan_source(relations[name]))
            name = EXPLAINED_QUERY
        text = explain_text(planned, statement.stage, statement.node_ids, name)
        return StatementResult(
            tag=statement.tag,
            columns=((EXPLAIN_COLUMNS[statement.stage], "text"),),
            rows=[(text,)],
        )

    async def _peek_target_replica(self, session: Session, cluster: ClusterInfo) -> tuple[str, str]:
        """(cluster_id, replica_id): ``SET cluster_replica`` picks one replica of ``cluster``."""
        cluster_name = cluster.name
        replica_id = ""
        if session.cluster_replica:
            replica = self.state.replica(cluster.id, session.cluster_replica)
            if replica is None:
                replica = (await self._refreshed_state()).replica(
                    cluster.id, session.cluster_replica
                )
            if replica is None:
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT,
                    f"cluster replica '{cluster_name}.{session.cluster_replica}' does not exist",
                )
            replica_id = replica.id
        return cluster.id, replica_id

    async def _send_peek(
        self, request: controller_pb2.PeekRequest
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        """Send a peek to the controller: (columns, rows); canceled with the statement."""
        peek_id = request.peek.uuid
        try:
            response = await self.controller.call(
                "Peek", request, timeout=self.config.peek_timeout + 5
            )
        except asyncio.CancelledError:
            self._spawn(self._cancel_peek(peek_id))
            raise
        except LoupeError as error:
            if error.code == "DEADLINE_EXCEEDED":
                self._spawn(self._cancel_peek(peek_id))
                raise LoupeError(
                    SqlState.QUERY_CANCELED, "canceling statement due to statement timeout"
                ) from None
            raise
        kind = response.WhichOneof("result")
        if kind == "error":
            raise LoupeError.from_proto(response.error)
        if kind == "canceled":
            raise canceled_error()
        columns = tuple((c.name, c.type) for c in response.rows.desc.columns)
        return columns, [from_row(row) for row in response.rows.rows]

    async def _cancel_peek(self, peek_id: str) -> None:
        try:
            await self.controller.CancelPeek(compute_pb2.CancelPeek(uuid=peek_id), timeout=5)
        except LoupeError as error:
            log.warning("cancel peek failed", uuid=peek_id, error=error.message)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- DDL ----------------------------------------------------------------------------

    async def _ddl(self, session: Session, statement: Statement) -> StatementResult:
        op = catalog_op(statement, owner_id=self._owner_id(session))
        _, result = await self._transact(session, statement, [op])
        return result

    def _owner_id(self, session: Session) -> str:
        return self.state.role_id(session.user) or session.role_id

    @staticmethod
    def _require_superuser(session: Session, statement: Statement) -> None:
        if not session.is_superuser:
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE,
                f'permission denied to {statement.tag}: role "{session.user}" is not a superuser',
                position=statement.position,
            )

    async def _transact(
        self,
        session: Session,
        statement: Statement,
        ops: list[catalog_pb2.CatalogOp],
        *,
        advance: bool = True,
        superuser_only: bool = True,
    ) -> tuple[catalog_pb2.TransactResponse, StatementResult]:
        """Commit ``ops`` and follow the commit into the controller and storage.

        ``advance``: then move the oracle (and the tables) past the append of
        the commit's catalog relations (``_after_ddl``). ``superuser_only``: False
        for what the caller has authorised itself (a role's own password).
        """
        if superuser_only:
            self._require_superuser(session, statement)
        result = StatementResult(tag=statement.tag)
        async with self._ddl_lock:
            response = await self.catalog.Transact(
                catalog_pb2.TransactRequest(ops=ops, user=session.user)
            )
            snapshot = (
                response.snapshot
                if response.HasField("snapshot")
                else await self.catalog.Snapshot(catalog_pb2.SnapshotRequest())
            )
            try:
                await self.follower.after_commit(snapshot)
            except LoupeError as error:
                raise LoupeError(
                    error.code,
                    f"{statement.tag} committed, but mz_catalog is not updated yet: {error.message}",
                ) from None
            failure = self.follower.apply_failure
            if failure:
                result.notices.append(
                    Notice("WARNING", f"the controller has not applied the change yet: {failure}")
                )
        if advance:
            await self._after_ddl()
        return response, result

    async def _after_ddl(self) -> None:
        """Move the oracle past the storage writer's append of the catalog relations.

        The storage writer picks the time of that append itself; once the
        oracle is past it, every later read timestamp sees the DDL in mz_catalog.
        """
        try:
            await self.oracle.write_timestamp(at_least=self.writer.last_upper - 1)
        except LoupeError as error:
            log.warning("could not advance the timestamp oracle", error=error.message)

    # -- tables -------------------------------------------------------------------------

    def _target_schema(self, session: Session, name: ObjectName) -> tuple[str, catalog_pb2.Schema]:
        """(database name, schema) a new object called ``name`` goes to."""
        parts = name.parts
        database = parts[0] if len(parts) == 3 else session.database
        candidates = [parts[-2]] if len(parts) > 1 else search_path_schemas(session.search_path)
        if not any(d.name == database for d in self.state.databases.values()):
            raise LoupeError(
                INVALID_CATALOG_NAME, f"unknown database '{database}'", position=name.position
            )
        for schema_name in candidates:
            if schema_name in (*IMPLICIT_SCHEMAS, "mz_internal", "mz_introspection", "pg_catalog"):
                raise LoupeError(
                    SqlState.INSUFFICIENT_PRIVILEGE,
                    f"system schema '{schema_name}' cannot be modified",
                    position=name.position,
                )
            schema = self.state.schema_named(database, schema_name)
            if schema is not None:
                return database, schema
        if len(parts) > 1:
            raise LoupeError(
                INVALID_SCHEMA_NAME, f"unknown schema '{parts[-2]}'", position=name.position
            )
        raise LoupeError(
            INVALID_SCHEMA_NAME, "no schema has been selected to create in", position=name.position
        )

    async def _table_named(
        self, session: Session, name: ObjectName, *, missing_ok: bool = False
    ) -> Table | None:
        """The user table ``name`` refers to; 42P01 (or None) when there is none."""
        found = self._find_table(session, name, self.state)
        if found is None:
            found = self._find_table(session, name, await self._refreshed_state())
        if found is None and not missing_ok:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE, f"unknown catalog item '{name}'", position=name.position
            )
        return found

    def _find_table(self, session: Session, name: ObjectName, state: CatalogState) -> Table | None:
        parts = name.parts
        if len(parts) == 3 and parts[0] != session.database:
            return None
        schemas = (
            [parts[-2]]
            if len(parts) > 1
            else [*IMPLICIT_SCHEMAS, *search_path_schemas(session.search_path)]
        )
        tables = state.tables_in(session.database)
        for schema in schemas:
            if f"{schema}.{name.name}" in BY_QUALIFIED_NAME:
                raise LoupeError(
                    SqlState.INSUFFICIENT_PRIVILEGE,
                    f"system table '{schema}.{name.name}' cannot be modified",
                    position=name.position,
                )
            table = tables.get(f"{schema}.{name.name}")
            if table is not None:
                return table
            schema_proto = state.schema_named(session.database, schema)
            item = state.item_named(schema_proto.id, name.name) if schema_proto else None
            if item is not None:
                raise LoupeError(
                    WRONG_OBJECT_TYPE,
                    f"'{name}' is a {item.type.replace('-', ' ')}, not a table",
                    position=name.position,
                )
        return None

    async def _create_table(self, session: Session, statement: CreateTable) -> StatementResult:
        self._require_superuser(session, statement)
        database, schema = self._target_schema(session, statement.name)
        if statement.if_not_exists and self.state.item_named(schema.id, statement.name.name):
            result = StatementResult(tag=statement.tag)
            result.notices.append(
                Notice("NOTICE", f'relation "{statement.name.name}" already exists, skipping')
            )
            return result
        create_sql = create_table_sql(
            database, schema.name, statement.name.name, statement.columns, statement.keys
        )
        item = catalog_pb2.Item(
            schema_id=schema.id,
            name=statement.name.name,
            type="table",
            owner_id=self._owner_id(session),
            create_sql=create_sql,
        )
        op = catalog_pb2.CatalogOp(create_item=catalog_pb2.CreateItem(item=item))
        try:
            response, result = await self._transact(session, statement, [op], advance=False)
        except LoupeError as error:
            if error.code == SqlState.DUPLICATE_OBJECT and statement.if_not_exists:
                result = StatementResult(tag=statement.tag)
                result.notices.append(
                    Notice("NOTICE", f'relation "{statement.name.name}" already exists, skipping')
                )
                return result
            raise
        created = next(
            (c.item_created for c in response.changes if c.WhichOneof("kind") == "item_created"),
            None,
        ) or self.state.item_named(schema.id, statement.name.name)
        table = self.state.tables.get(created.id) if created is not None else None
        if table is None and created is not None:
            table = Table(
                id=created.id,
                database=database,
                schema=schema.name,
                schema_id=schema.id,
                name=created.name,
                owner_id=created.owner_id,
                columns=columns_of(create_sql),
                create_sql=create_sql,
            )
        if table is not None and self.tables.is_open:
            # The shard exists before anyone can read the table; _after_ddl makes it readable.
            await self.tables.ensure(table)
        await self._after_ddl()
        return result

    async def _drop_table(self, session: Session, statement: DropTable) -> StatementResult:
        self._require_superuser(session, statement)
        notices: list[Notice] = []
        tables: dict[str, Table] = {}
        for name in statement.names:
            table = await self._table_named(session, name, missing_ok=statement.if_exists)
            if table is None:
                notices.append(Notice("NOTICE", f'table "{name}" does not exist, skipping'))
            else:
                tables.setdefault(table.id, table)
        if not tables:
            return StatementResult(tag=statement.tag, notices=notices)
        result = await self.compute.drop_items(
            session, statement, list(tables.values()), cascade=statement.cascade
        )
        result.notices[:0] = notices
        return result

    async def _create_source(self, session: Session, statement: CreateSource) -> Streaming:
        """``CREATE SOURCE s FROM LOAD GENERATOR TPCH``: the source item and one table per TPC-H table.

        The TPC-H tables are ordinary tables (readable, indexable, writable)
        in the source's schema, committed first and then filled at one
        timestamp (``loupe.loadgen.tpch``) while the statement reports
        ``Progress`` per part written.
        """
        from loupe.loadgen import tpch

        self._require_superuser(session, statement)
        database, schema = self._target_schema(session, statement.name)
        taken = [
            n
            for n in (statement.name.name, *tpch.TPCH_TABLES)
            if self.state.item_named(schema.id, n)
        ]
        if taken:
            raise LoupeError(
                SqlState.DUPLICATE_OBJECT,
                f'"{taken[0]}" already exists',
                position=statement.position,
            )
        owner = self._owner_id(session)
        source_sql = (
            f"CREATE SOURCE {quote_name(database, schema.name, statement.name.name)} "
            f"FROM LOAD GENERATOR TPCH (SCALE FACTOR {statement.scale_factor!r})"
        )
        items = [
            catalog_pb2.Item(
                schema_id=schema.id,
                name=statement.name.name,
                type="source",
                owner_id=owner,
                create_sql=source_sql,
            )
        ]
        for name, columns in tpch.TPCH_TABLES.items():
            definitions = [ColumnDef(name=c, type=sqltypes.display_name(t)) for c, t in columns]
            items.append(
                catalog_pb2.Item(
                    schema_id=schema.id,
                    name=name,
                    type="table",
                    owner_id=owner,
                    create_sql=create_table_sql(database, schema.name, name, definitions),
                )
            )
        ops = [catalog_pb2.CatalogOp(create_item=catalog_pb2.CreateItem(item=i)) for i in items]
        _, result = await self._transact(session, statement, ops, advance=False)
        ids = {name: self.state.item_named(schema.id, name) for name in tpch.TPCH_TABLES}
        shard_ids = {name: item.id for name, item in ids.items() if item is not None}
        source = quote_name(database, schema.name, statement.name.name).replace('"', "")
        return Streaming(self._load_tpch(source, statement.scale_factor, shard_ids, result))

    async def _load_tpch(
        self, source: str, scale: float, shard_ids: dict[str, str], result: StatementResult
    ) -> AsyncIterator[Event]:
        """Generate the TPC-H tables and load them at one timestamp, reporting each part."""
        from loupe.loadgen import tpch

        loop = asyncio.get_running_loop()
        reports: asyncio.Queue[tuple[str, int, int]] = asyncio.Queue()
        loaded: dict[str, tuple[int, int]] = {}

        def progress(table: str, written: int, total: int) -> None:
            loop.call_soon_threadsafe(reports.put_nowait, (table, written, total))

        def report() -> Progress:
            done = sum(1 for written, total in loaded.values() if written == total)
            rows = sum(written for written, _ in loaded.values())
            return Progress(source, done, len(shard_ids), rows, done == len(shard_ids), "tables")

        with tempfile.TemporaryDirectory(prefix="loupe-tpch-") as workdir:
            files = await asyncio.to_thread(tpch.generate_files, scale, workdir)

            def write(shard_of: Callable[[str], Any], timestamp: int) -> None:
                shards = {name: shard_of(shard_id) for name, shard_id in shard_ids.items()}
                tpch.load_files(files, shards, timestamp, progress=progress)

            loading = asyncio.ensure_future(self.tables.load(write))
            while not loading.done() or not reports.empty():
                getter = asyncio.ensure_future(reports.get())
                await asyncio.wait({loading, getter}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                table, written, total = getter.result()
                loaded[table] = (written, total)
                yield report()
            await loading
        await self._after_ddl()
        for notice in result.notices:
            yield notice
        yield Complete(result.tag)

    async def _insert(self, session: Session, statement: Insert) -> StatementResult:
        table = await self._table_named(session, statement.table)
        assert table is not None
        columns = check_columns(table, statement.columns) if statement.columns is not None else None
        if statement.query is not None:
            query_columns, query_rows = await self._query(session, statement.query)
            rows = dml.query_rows(table, columns, query_rows, len(query_columns))
        else:
            rows = dml.values_rows(table, columns, statement.rows)
        keys = self._unique_keys(table)
        written = await self.tables.write(
            table,
            dml.insert_plan(table, rows, keys),
            read=bool(keys),
            along=self.compute.maintained_with(table),
        )
        metrics.TABLE_WRITES.labels("insert").inc()
        return StatementResult(tag=f"INSERT 0 {written.count}")

    async def _update(self, session: Session, statement: Update) -> StatementResult:
        table = await self._table_named(session, statement.table)
        assert table is not None
        targets = check_columns(table, [(name, pos) for name, pos, _ in statement.assignments])
        assignments = [
            (column, value)
            for column, (_, _, value) in zip(targets, statement.assignments, strict=True)
        ]
        plan = dml.update_plan(
            table, statement.alias, assignments, statement.where, self._unique_keys(table)
        )
        written = await self.tables.write(
            table, plan, read=True, along=self.compute.maintained_with(table)
        )
        metrics.TABLE_WRITES.labels("update").inc()
        return StatementResult(tag=f"UPDATE {written.count}")

    def _unique_keys(self, table: Table) -> list[UniqueKey]:
        """The table's PRIMARY KEY and UNIQUE constraints, and its unique indexes."""
        keys = list(table.keys)
        for index in self.state.objects.values():
            if index.on_id == table.id and is_unique_index(index):
                columns = tuple(table.columns[i].name for i in index.key)
                keys.append(UniqueKey(index.name, columns))
        return keys

    async def _delete(self, session: Session, statement: Delete) -> StatementResult:
        table = await self._table_named(session, statement.table)
        assert table is not None
        plan = dml.delete_plan(table, statement.alias, statement.where)
        written = await self.tables.write(
            table, plan, read=True, along=self.compute.maintained_with(table)
        )
        metrics.TABLE_WRITES.labels("delete").inc()
        return StatementResult(tag=f"DELETE {written.count}")


def quote_name(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def plan_source(relation: Relation) -> tuple[str, list[tuple[str, str]]]:
    """(name, [(column, type)]) of a relation as the planner sees it.

    User tables are named ``database.schema.name`` with their storage types,
    builtin collections ``schema.name`` (as Materialize's EXPLAIN names them).
    """
    if isinstance(relation, Table):
        return relation.full_name, list(relation.storage_columns)
    return relation.qualified_name, list(getattr(relation, "columns", ()))


def catalog_op(statement: Statement, *, owner_id: str) -> catalog_pb2.CatalogOp:
    """The catalog operation a DDL statement asks for."""
    match statement:
        case CreateCluster():
            cluster = catalog_pb2.Cluster(
                name=statement.name,
                owner_id=owner_id,
                managed=statement.managed,
                size=statement.size if statement.managed else "",
                replication_factor=statement.replication_factor if statement.managed else 0,
                introspection_interval_ns=statement.introspection_interval_ns,
                introspection_debugging=statement.introspection_debugging,
            )
            # The catalog names a managed cluster's replicas (r1..rk) itself and
            # refuses explicit ones; an unmanaged cluster's are listed.
            replicas = [
                catalog_pb2.ClusterReplica(name=r.name, size=r.size, owner_id=owner_id)
                for r in statement.replicas
            ]
            return catalog_pb2.CatalogOp(
                create_cluster=catalog_pb2.CreateCluster(cluster=cluster, replicas=replicas)
            )
        case CreateClusterReplica():
            return catalog_pb2.CatalogOp(
                create_cluster_replica=catalog_pb2.CreateClusterReplica(
                    replica=catalog_pb2.ClusterReplica(
                        name=statement.replica, size=statement.size, owner_id=owner_id
                    ),
                    cluster_name=statement.cluster,
                )
            )
        case DropCluster():
            return catalog_pb2.CatalogOp(
                drop_cluster=catalog_pb2.DropCluster(
                    name=statement.name, if_exists=statement.if_exists, cascade=statement.cascade
                )
            )
        case DropClusterReplica():
            return catalog_pb2.CatalogOp(
                drop_cluster_replica=catalog_pb2.DropClusterReplica(
                    cluster_name=statement.cluster,
                    replica_name=statement.replica,
                    if_exists=statement.if_exists,
                )
            )
    raise TypeError(f"not a DDL statement: {statement!r}")
