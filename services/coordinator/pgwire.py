"""The PostgreSQL wire protocol (v3) server: psql and PostgreSQL drivers on the session layer.

One asyncio task per connection; everything below the wire is the coordinator's
(``Coordinator.execute``, ``cancel``, ``close_session``), as for the gRPC API, so a
session opened here is logged, cancelled, authenticated and authorised the same way.

Connection life (PostgreSQL's "Message Flow"):

1. Startup: ``SSLRequest``/``GSSENCRequest`` are answered ``S`` (TLS, when
   ``pgwire_tls_cert``/``key`` are configured) or ``N``; a ``CancelRequest`` cancels
   the statement of the connection whose pid and secret it names and closes; a
   3.0 startup packet opens the session: ``user``, ``database``,
   ``application_name`` and ``options`` (``-c name=value``) become session
   variables (an unknown one is a NOTICE, as Materialize answers it).
2. Authentication per ``Coordinator.login_plan``: trust, cleartext or SCRAM-SHA-256;
   a refusal is an ``ErrorResponse`` (28000/28P01; 53300 past ``max_connections``)
   and the connection closes. Then ``AuthenticationOk``, ``ParameterStatus`` for
   the reported variables, ``BackendKeyData`` and ``ReadyForQuery``.
3. Simple query (``Query``) and extended query (``Parse``/``Bind``/``Describe``/
   ``Execute``/``Close``/``Sync``/``Flush``); after an error in extended mode
   messages are discarded until ``Sync``. ``COPY (query) TO STDOUT`` and ``COPY
   t FROM STDIN`` (text, CSV) run here over the same session (``CopyOut``/``CopyIn``).
4. ``Terminate``, end of stream, a protocol violation (08P01: malformed or
   oversized message) or a write to a vanished client close the session
   (``Coordinator.close_session``: what it runs is cancelled, a SUBSCRIBE's
   dataflow dropped); other connections are not affected.

Transactions and cursors are the session's (``loupe.coordinator.sequencer.transaction``):
``BEGIN``/``COMMIT``/``ROLLBACK``, ``DECLARE``/``FETCH``/``CLOSE`` run through
``Coordinator.execute`` as any statement, and ``ReadyForQuery`` reports the session's
transaction status (``I``, ``T``, ``E``). A cursor is also a portal ``Describe`` can name
(psycopg's server-side cursors describe it so).
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import itertools
import random
import shlex
import ssl
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from loupe.common.errors import LoupeError, SqlState, client_error
from loupe.common.logging import get_logger
from loupe.coordinator import metrics
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.compute import SUBSCRIBE_COLUMNS
from loupe.coordinator.coordinator import Coordinator, unexpected_failure
from loupe.coordinator.describe import describe, planned_shape, query_columns, rowless
from loupe.coordinator.dml import insert_plan, query_rows
from loupe.coordinator.results import (
    Complete,
    Description,
    Event,
    Failure,
    Notice,
    Progress,
    RowBatch,
    StatementResult,
)
from loupe.coordinator.sequencer.dml import unique_keys
from loupe.coordinator.sequencer.table import table_named
from loupe.coordinator.sequencer.transaction import aborted_error, keep_rows
from loupe.coordinator.sequencer.transaction import add_ops as transaction_ops
from loupe.coordinator.session import DEFAULT_USER, VARIABLES, WRITES, Cursor, Session
from loupe.coordinator.sql.params import Parameter, highest_parameter
from loupe.coordinator.sql.parser import parse
from loupe.coordinator.sql.statements import (
    Copy,
    ObjectName,
    Query,
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
    ShowVariable,
    Statement,
    Subscribe,
)
from loupe.coordinator.statement_logging import PreparedLog
from loupe.coordinator.tables import Table, UntypedString, check_columns
from loupe.pgwire import protocol as pw
from loupe.pgwire import types as pgtypes

log = get_logger(__name__)

TOO_MANY_CONNECTIONS = "53300"
IDLE_SESSION_TIMEOUT = "57P05"
FEATURE_NOT_SUPPORTED = "0A000"
INVALID_CURSOR_NAME = "34000"
INVALID_SQL_STATEMENT_NAME = "26000"
DUPLICATE_PREPARED_STATEMENT = "42P05"
BAD_COPY_FILE_FORMAT = "22P04"
INVALID_TEXT_REPRESENTATION = "22P02"
TEXT_OID = 25
# Rows converted per step of COPY FROM (the event loop gets a turn between steps).
COPY_BATCH_ROWS = 10_000
# How much a client may send while a statement runs before the server stops reading.
MAX_PENDING_INPUT = 1024 * 1024

# The ParameterStatus a session reports at start (Materialize reports these).
REPORTED = (
    ("application_name", "application_name"),
    ("client_encoding", "client_encoding"),
    ("DateStyle", "datestyle"),
    ("integer_datetimes", "integer_datetimes"),
    ("IntervalStyle", None),
    ("is_superuser", "is_superuser"),
    ("server_encoding", None),
    ("server_version", "server_version"),
    ("server_version_num", "server_version_num"),
    ("standard_conforming_strings", "standard_conforming_strings"),
    ("TimeZone", "timezone"),
    ("mz_version", None),
)
FIXED_PARAMETERS = {
    "IntervalStyle": "postgres",
    "server_encoding": "UTF8",
    "mz_version": "v0.1.0 (loupe)",
}
SHOW_STATEMENTS = (ShowVariable, ShowClusters, ShowClusterReplicas, ShowObjects, ShowRoles)


class _Closed(Exception):
    """The connection is over (Terminate, a protocol violation, a refused login)."""


class ByteSource(Protocol):
    async def readexactly(self, n: int) -> bytes: ...


class _Input:
    """The client's bytes; while a statement runs, ``watch`` reads ahead to notice EOF."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.pending = bytearray()

    async def readexactly(self, n: int) -> bytes:
        if len(self.pending) >= n:
            chunk = bytes(self.pending[:n])
            del self.pending[:n]
            return chunk
        head = bytes(self.pending)
        self.pending.clear()
        return head + await self.reader.readexactly(n - len(head))

    async def watch(self) -> None:
        """Return when the client closed its end (bytes it sends meanwhile are kept)."""
        while len(self.pending) < MAX_PENDING_INPUT:
            chunk = await self.reader.read(65536)
            if not chunk:
                return
            self.pending += chunk
        await asyncio.Event().wait()  # enough kept: stop reading (back-pressure)


@dataclass
class PreparedStatement:
    """A Parse'd statement: its text, the parameter types the client gave and those found."""

    sql: str
    statement: Statement | None
    # The client's OIDs (0: unspecified), one per parameter the statement uses.
    client_oids: tuple[int, ...]
    # The OIDs ParameterDescription reports: the client's, else what the statement implies.
    param_oids: tuple[int, ...]
    columns: tuple[tuple[str, str], ...] | None = None
    described: bool = False
    # Result columns its portals were described with, by what planning depends on
    # (catalog snapshot, search path, database, parameter types): a client that
    # Describes every portal it binds (psycopg) plans the statement once, not twice.
    portal_columns: dict[tuple[object, ...], tuple[tuple[str, str], ...]] = field(
        default_factory=dict
    )
    # A named statement is one prepared statement in the statement log, however often
    # it runs (Materialize's semantics); the unnamed one is prepared anew each time.
    log: PreparedLog | None = None


@dataclass
class Portal:
    """A bound statement: its parameters, result formats and, once run, its events."""

    statement: PreparedStatement
    params: tuple[Parameter, ...]
    result_formats: tuple[int, ...]
    events: AsyncIterator[Event] | None = None
    buffered: list[Event] = field(default_factory=list)
    columns: tuple[tuple[str, str], ...] | None = None
    # Rows of the current RowBatch not sent yet (an Execute with max_rows).
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    sent: int = 0
    done: bool = False
    started: bool = False
    # Described by planning (Describe), not yet run: ``columns`` are the planned ones.
    described: bool = False


class PgwireServer:
    """Serves the PostgreSQL wire protocol for ``coordinator`` on ``host:port`` (0: free)."""

    def __init__(
        self,
        coordinator: Coordinator,
        host: str = "127.0.0.1",
        port: int = 6877,
        *,
        tls_cert: str = "",
        tls_key: str = "",
        max_message_size: int = pw.DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        self.coordinator = coordinator
        self.host = host
        self.port = port
        self.max_message_size = max_message_size
        self.tls: ssl.SSLContext | None = None
        if tls_cert and tls_key:
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(tls_cert, tls_key)
        self._server: asyncio.Server | None = None
        self.connections: dict[int, Connection] = {}
        self._pids = itertools.count(random.randint(1000, 1 << 20))
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen; the port listened on."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop listening and close every connection (idempotent)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection = Connection(self, reader, writer)
        try:
            await connection.run()
        finally:
            self._tasks.discard(task)

    def cancel(self, process_id: int, secret_key: int) -> None:
        """A CancelRequest: cancel what that connection's session runs (if the secret matches)."""
        connection = self.connections.get(process_id)
        if connection is None or connection.secret_key != secret_key:
            log.info("cancel request for an unknown backend", pid=process_id)
            return
        session = connection.session
        if session is not None:
            canceled = self.coordinator.cancel(session)
            log.info("cancel requested", session_id=session.id, canceled=canceled)


class Connection:
    """One client connection and its session."""

    def __init__(
        self, server: PgwireServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.coordinator = server.coordinator
        self.input = _Input(reader)
        self.writer = writer
        self.session: Session | None = None
        self.process_id = 0
        self.secret_key = random.randint(-(1 << 31), (1 << 31) - 1)
        self.statements: dict[str, PreparedStatement] = {}
        self.portals: dict[str, Portal] = {}
        self.discard_until_sync = False

    @property
    def transaction(self) -> str:
        """The session's transaction status, as ReadyForQuery reports it."""
        return self.session.transaction_status if self.session is not None else "I"

    # -- plumbing --------------------------------------------------------------------

    def send(self, *messages: bytes) -> None:
        for message in messages:
            self.writer.write(message)

    async def flush(self) -> None:
        await self.writer.drain()

    async def fatal(self, code: str, message: str) -> None:
        self.send(pw.error_response(code, message, severity="FATAL"))
        with contextlib.suppress(ConnectionError):
            await self.flush()
        raise _Closed(message)

    def error(self, error: LoupeError) -> None:
        error = client_error(error)
        self.send(
            pw.error_response(
                error.code,
                error.message,
                detail=error.detail,
                hint=error.hint,
                position=error.position,
            )
        )
        # An error of the protocol's own (a portal that does not exist) fails the
        # transaction too; the coordinator marks its statements' failures itself.
        transaction = self.session.transaction if self.session is not None else None
        if transaction is not None and transaction.explicit:
            transaction.failed = True

    async def run(self) -> None:
        try:
            if await self._startup():
                await self._loop()
        except _Closed:
            pass
        except pw.ProtocolViolation as violation:
            with contextlib.suppress(Exception):
                self.send(
                    pw.error_response(pw.PROTOCOL_VIOLATION, violation.message, severity="FATAL")
                )
                await self.flush()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client went away
        except Exception:
            # A bug: the client still hears why (XX000 with the incident id) before it closes.
            error = unexpected_failure("pgwire connection failed unexpectedly").error
            with contextlib.suppress(Exception):
                self.send(pw.error_response(error.code, error.message, severity="FATAL"))
                await self.flush()
        finally:
            with contextlib.suppress(Exception):
                for name in list(self.portals):
                    await self._close_portal(name)
            self._close()

    def _close(self) -> None:
        self.server.connections.pop(self.process_id, None)
        if self.session is not None:
            self.coordinator.close_session(self.session.id, why="pgwire connection closed")
            self.session = None
        with contextlib.suppress(Exception):
            self.writer.close()

    # -- startup ---------------------------------------------------------------------

    async def _startup(self) -> bool:
        """Open the session; False when the connection only carried a CancelRequest."""
        while True:
            message = await pw.read_startup(self.input.reader)
            match message:
                case pw.SSLRequest():
                    if self.server.tls is None:
                        self.send(b"N")
                        await self.flush()
                        continue
                    self.send(b"S")
                    await self.flush()
                    await self.writer.start_tls(self.server.tls)
                    continue
                case pw.GSSENCRequest():
                    self.send(b"N")
                    await self.flush()
                    continue
                case pw.CancelRequest(process_id, secret_key):
                    self.server.cancel(process_id, secret_key)
                    return False
                case pw.Startup(version, parameters):
                    if version >> 16 != 3:
                        await self.fatal(
                            FEATURE_NOT_SUPPORTED,
                            f"unsupported frontend protocol {version >> 16}.{version & 0xFFFF}:"
                            " server supports 3.0 to 3.0",
                        )
                    await self._open_session(parameters)
                    return True

    async def _open_session(self, parameters: dict[str, str]) -> None:
        user = parameters.get("user") or DEFAULT_USER
        superuser = await self._authenticate(user)
        coordinator = self.coordinator
        limit = int(coordinator.system_variable("max_connections"))
        current = len(coordinator.sessions)
        if current >= limit:
            metrics.SESSIONS_REFUSED.inc()
            await self.fatal(
                TOO_MANY_CONNECTIONS,
                "creating connection would violate max_connections limit"
                f" (desired: {current + 1}, limit: {limit}, current: {current})",
            )
        options, notices = startup_options(parameters)
        try:
            session = coordinator.sessions.open(
                user,
                defaults=coordinator.session_defaults(),
                is_superuser=superuser,
            )
        except LoupeError as error:
            await self.fatal(client_error(error).code, error.message)
            raise
        self.session = session
        for name, value in options.items():
            try:
                session.set(name, value)
            except LoupeError as error:
                notices.append(f"startup setting {name} not set: {error.message}")
        metrics.SESSIONS.set(len(coordinator.sessions))
        self.process_id = next(self.server._pids) & 0x7FFFFFFF
        self.server.connections[self.process_id] = self
        log.info("pgwire session opened", session_id=session.id, user=user, pid=self.process_id)
        self.send(pw.authentication_ok())
        for reported, variable in REPORTED:
            value = FIXED_PARAMETERS.get(reported, "")
            if variable is not None:
                value = session.get(variable)
            self.send(pw.parameter_status(reported, value))
        for notice in notices:
            self.send(pw.notice_response(notice, code="42704"))
        self.send(pw.backend_key_data(self.process_id, self.secret_key))
        self.send(pw.ready_for_query(self.transaction))
        await self.flush()

    async def _authenticate(self, user: str) -> bool:
        """Run the login ``login_plan`` asks for; whether ``user`` is a superuser."""
        coordinator = self.coordinator
        try:
            plan = await coordinator.login_plan(user)
            if plan.method == "trust":
                return await coordinator.authenticate(user, "")
            if plan.method == "cleartext":
                self.send(pw.authentication_cleartext_password())
                await self.flush()
                message = await self._read()
                if not isinstance(message, pw.PasswordMessage):
                    raise pw.ProtocolViolation("expected a password message")
                return await coordinator.authenticate(user, message.password)
            if plan.method == "scram":
                await self._scram(user, plan.verifier)
                return await coordinator.admit(user)
        except LoupeError as error:
            log.info("pgwire login refused", user=user, code=error.code)
            await self.fatal(client_error(error).code, error.message)
        await self.fatal(SqlState.INVALID_AUTHORIZATION, f"unknown login method for {user}")
        raise AssertionError  # fatal raises

    async def _scram(self, user: str, verifier: str | None) -> None:
        from loupe.pgwire.scram import ScramError, ScramServer

        failed = LoupeError(
            SqlState.INVALID_PASSWORD, f'password authentication failed for user "{user}"'
        )
        server = ScramServer(verifier)
        self.send(pw.authentication_sasl(["SCRAM-SHA-256"]))
        await self.flush()
        message = await self._read()
        if not isinstance(message, pw.PasswordMessage):
            raise pw.ProtocolViolation("expected a SASLInitialResponse message")
        initial = pw.parse_sasl_initial_response(message.data)
        if initial.mechanism != "SCRAM-SHA-256":
            raise LoupeError(
                SqlState.INVALID_AUTHORIZATION, "client selected an invalid SASL mechanism"
            )
        try:
            self.send(pw.authentication_sasl_continue(server.server_first(initial.data)))
            await self.flush()
            message = await self._read()
            if not isinstance(message, pw.PasswordMessage):
                raise pw.ProtocolViolation("expected a SASLResponse message")
            final = server.server_final(message.data)
        except ScramError:
            metrics.AUTHENTICATION_FAILURES.inc()
            raise failed from None
        self.send(pw.authentication_sasl_final(final))

    async def _read(self) -> pw.FrontendMessage:
        return await pw.read_message(self.input, self.server.max_message_size)  # type: ignore[arg-type]

    # -- the message loop ------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            message = await self._read()
            if self.session is not None:
                try:
                    self.coordinator.sessions.get(self.session.id)  # marks it active
                except LoupeError:
                    # Closed meanwhile: idle longer than idle_session_timeout.
                    self.session = None
                    await self.fatal(
                        IDLE_SESSION_TIMEOUT, "terminating connection due to idle-session timeout"
                    )
            if self.discard_until_sync and not isinstance(message, pw.Sync | pw.Terminate):
                continue
            match message:
                case pw.Query(sql):
                    try:
                        if _is_copy_from(sql):
                            await self._simple_query(sql)  # reads the client's CopyData itself
                        else:
                            await self._watched(self._simple_query(sql))
                    except LoupeError as error:
                        self.error(error)
                    await self._end_of_transaction()
                    self.send(pw.ready_for_query(self.transaction))
                    await self.flush()
                case pw.Parse() | pw.Bind() | pw.Describe() | pw.Execute() | pw.Close():
                    try:
                        if isinstance(message, pw.Execute):
                            await self._watched(self._extended(message))
                        else:
                            await self._extended(message)
                    except LoupeError as error:
                        self.error(error)
                        self.discard_until_sync = True
                case pw.Sync():
                    self.discard_until_sync = False
                    await self._end_of_transaction()
                    self.send(pw.ready_for_query(self.transaction))
                    await self.flush()
                case pw.Flush():
                    await self.flush()
                case pw.Terminate():
                    return
                case pw.CopyData() | pw.CopyDone() | pw.CopyFail():
                    pass  # after a failed COPY FROM: ignored, as PostgreSQL does
                case _:
                    raise pw.ProtocolViolation(f"unexpected {type(message).__name__} message")

    async def _watched(self, work: Any) -> None:
        """Run ``work``; if the client closes its end meanwhile, stop it and close."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(self.input.watch())
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            # Wait for it to stop reading: the stream allows one reader at a time.
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise _Closed("the client went away")
        task.result()

    # -- simple query ----------------------------------------------------------------

    async def _simple_query(self, sql: str) -> None:
        session = self.session
        assert session is not None
        if not sql.strip(" \t\r\n;"):
            self.send(pw.empty_query_response())
            return
        copy = parse_copy(sql)
        if copy is not None:
            if self.transaction == "E":
                self.error(aborted_error())
                return
            await self._copy(copy)
            return
        columns: tuple[tuple[str, str], ...] | None = None
        async with contextlib.aclosing(self.coordinator.execute(session, sql)) as events:
            async for event in events:
                match event:
                    case Description(described):
                        columns = described
                        self.send(pw.row_description(fields(columns, ())))
                    case RowBatch(rows):
                        assert columns is not None
                        for row in rows:
                            self.send(pw.data_row(encode_row(row, columns, ())))
                        await self.flush()
                    case Complete(tag):
                        columns = None
                        if tag == "EMPTY":
                            self.send(pw.empty_query_response())
                        else:
                            self.send(pw.command_complete(tag))
                    case Notice():
                        self.send(notice_message(event))
                    case Failure(error):
                        self.error(error)
                    case Progress():
                        pass

    # -- extended query --------------------------------------------------------------

    async def _extended(self, message: pw.FrontendMessage) -> None:
        match message:
            case pw.Parse(name, sql, oids):
                await self._parse(name, sql, oids)
            case pw.Bind():
                await self._bind(message)
            case pw.Describe("S", name):
                prepared = self._statement(name)
                if not prepared.described:
                    await self._describe_statement(prepared)
                self.send(pw.parameter_description(prepared.param_oids))
                self.send(self._row_description(prepared.columns, ()))
            case pw.Describe(_, name) if name not in self.portals and self._cursor(name):
                cursor = self._cursor(name)
                assert cursor is not None
                columns = cursor.columns
                if columns is None:
                    columns = await self._cursor_columns(cursor.statement)
                self.send(self._row_description(columns, ()))
            case pw.Describe(_, name):
                portal = self._portal(name)
                await self._describe_portal(portal)
                self.send(self._row_description(portal.columns, portal.result_formats))
            case pw.Execute(name, max_rows):
                await self._execute(self._portal(name), max_rows)
            case pw.Close("S", name):
                self.statements.pop(name, None)
                self.send(pw.close_complete())
            case pw.Close(_, name):
                await self._close_portal(name)
                self.send(pw.close_complete())

    def _cursor(self, name: str) -> Cursor | None:
        """The session's DECLAREd cursor ``name`` (a portal in PostgreSQL's terms)."""
        transaction = self.session.transaction if self.session is not None else None
        return transaction.cursors.get(name) if transaction is not None else None

    async def _cursor_columns(self, statement: Statement) -> tuple[tuple[str, str], ...] | None:
        """The columns a cursor's FETCH returns, found without running its statement."""
        session = self.session
        assert session is not None
        if isinstance(statement, Query):
            return await query_columns(self.coordinator, session, statement.expression, {})
        if isinstance(statement, Subscribe):
            query = statement.query.expression
            columns = await query_columns(self.coordinator, session, query, {})
            return (*SUBSCRIBE_COLUMNS, *columns)
        return None

    async def _close_portal(self, name: str) -> None:
        """Drop a portal; a statement it left unfinished ends (its session lock, its log)."""
        portal = self.portals.pop(name, None)
        if portal is not None and portal.events is not None and not portal.done:
            await portal.events.aclose()  # type: ignore[attr-defined]

    async def _end_of_transaction(self) -> None:
        """Outside a transaction block every portal ends at Sync (or a simple query's end)."""
        if self.transaction == "I":
            for name in list(self.portals):
                await self._close_portal(name)

    def _row_description(
        self, columns: tuple[tuple[str, str], ...] | None, formats: Sequence[int]
    ) -> bytes:
        if columns is None:
            return pw.no_data()
        return pw.row_description(fields(columns, formats))

    def _statement(self, name: str) -> PreparedStatement:
        prepared = self.statements.get(name)
        if prepared is None:
            raise LoupeError(
                INVALID_SQL_STATEMENT_NAME, f'prepared statement "{name}" does not exist'
            )
        return prepared

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise LoupeError(INVALID_CURSOR_NAME, f'portal "{name}" does not exist')
        return portal

    async def _parse(self, name: str, sql: str, oids: tuple[int, ...]) -> None:
        if name and name in self.statements:
            raise LoupeError(
                DUPLICATE_PREPARED_STATEMENT, f'prepared statement "{name}" already exists'
            )
        plain = parse_copy(sql) is None
        statements = parse(sql) if plain else []
        if len(statements) > 1:
            raise LoupeError(
                SqlState.SYNTAX_ERROR, "cannot insert multiple commands into a prepared statement"
            )
        statement = statements[0] if statements else None
        count = max(len(oids), highest_parameter(statement) if statement is not None else 0)
        client = tuple(oids) + (0,) * (count - len(oids))
        self.statements[name] = PreparedStatement(
            sql, statement, client, client, log=PreparedLog(name) if name else None
        )
        self.send(pw.parse_complete())

    async def _describe_statement(self, prepared: PreparedStatement) -> None:
        """The parameter types and result columns of a statement, found without running it."""
        session = self.session
        assert session is not None
        statement = prepared.statement
        client_types = [
            pgtypes.param_type_name(oid) if oid else None for oid in prepared.client_oids
        ]
        described = await describe(self.coordinator, session, statement, client_types)
        prepared.param_oids = tuple(
            oid or pgtypes.type_oid(kind)
            for oid, kind in zip(prepared.client_oids, described.parameter_types, strict=True)
        )
        if isinstance(statement, SHOW_STATEMENTS):
            # SHOW reads and changes nothing: run unlogged, for its columns only.
            result = await self.coordinator.run_statement(session, statement)
            if isinstance(result, StatementResult):
                prepared.columns = result.columns
        elif planned_shape(statement):
            prepared.columns = described.columns
        prepared.described = True

    async def _describe_portal(self, portal: Portal) -> None:
        """A portal's result columns, by planning: it runs (and is logged) at Execute only.

        A statement whose columns planning cannot tell (another shape, or a query
        that fails to plan) starts running, as before, so its rows are described.
        """
        if portal.started or portal.described:
            return
        session = self.session
        assert session is not None
        statement = portal.statement.statement
        if statement is None or rowless(statement):  # an empty query, BEGIN, INSERT…: NoData
            portal.described = True
            return
        if isinstance(statement, SHOW_STATEMENTS):
            result = await self.coordinator.run_statement(session, statement)
            if isinstance(result, StatementResult):
                portal.columns = result.columns
                portal.described = True
                return
        elif planned_shape(statement):
            types = [p.type if p.type != "unknown" else None for p in portal.params]
            key = (
                self.coordinator.state.key,
                session.search_path,
                session.database,
                tuple(types),
            )
            cached = portal.statement.portal_columns.get(key)
            if cached is not None:
                portal.columns = cached
                portal.described = True
                return
            described = await describe(self.coordinator, session, statement, types)
            if described.columns is not None:
                portal.columns = described.columns
                portal.described = True
                if len(portal.statement.portal_columns) >= 8:  # catalog changes: keep the newest
                    portal.statement.portal_columns.clear()
                portal.statement.portal_columns[key] = described.columns
                return
        await self._start(portal)

    async def _bind(self, message: pw.Bind) -> None:
        prepared = self._statement(message.statement)
        if len(message.params) != len(prepared.client_oids):
            raise LoupeError(
                pw.PROTOCOL_VIOLATION,
                f"bind message supplies {len(message.params)} parameters, but prepared"
                f' statement "{message.statement}" requires {len(prepared.client_oids)}',
            )
        formats = pw.format_codes(message.param_formats, len(message.params))
        params = []
        for index, (value, code) in enumerate(zip(message.params, formats, strict=True)):
            oid = prepared.client_oids[index] or (
                prepared.param_oids[index] if prepared.described else 0
            )
            params.append(decode_parameter(value, code, oid))
        if message.portal and message.portal in self.portals:
            raise LoupeError("42P03", f'portal "{message.portal}" already exists')
        await self._close_portal(message.portal)  # the unnamed one is replaced
        self.portals[message.portal] = Portal(prepared, tuple(params), message.result_formats)
        self.send(pw.bind_complete())

    async def _start(self, portal: Portal) -> None:
        """Run the portal's statement until it describes its rows (or ends)."""
        if portal.started:
            return
        portal.started = True
        session = self.session
        assert session is not None
        sql = portal.statement.sql
        if portal.statement.statement is None and parse_copy(sql) is not None:
            raise LoupeError(FEATURE_NOT_SUPPORTED, "COPY in the extended query protocol")
        portal.events = self.coordinator.execute(
            session, sql, portal.params, prepared_log=portal.statement.log
        )
        # Read to the end unless the statement streams: a suspended portal must not keep
        # the session (its lock) from the next statement of the transaction (COMMIT).
        async for event in portal.events:
            if isinstance(event, Description):
                portal.columns = event.columns
                if isinstance(portal.statement.statement, Subscribe):
                    return
                continue
            portal.buffered.append(event)
            if isinstance(event, RowBatch) and event.streaming:
                return
        # Run to its end (not closed early): a failure marks the transaction failed.
        portal.events = None

    async def _next_event(self, portal: Portal) -> Event | None:
        if portal.buffered:
            return portal.buffered.pop(0)
        if portal.events is None:
            return None
        try:
            return await anext(portal.events)
        except StopAsyncIteration:
            return None

    async def _execute(self, portal: Portal, max_rows: int) -> None:
        if portal.done:
            # A finished portal executed again: nothing more (PostgreSQL sends its tag again).
            self.send(pw.command_complete("SELECT 0"))
            return
        await self._start(portal)
        columns = portal.columns
        sent = 0
        while True:
            if portal.rows:
                assert columns is not None
                take = portal.rows if not max_rows else portal.rows[: max_rows - sent]
                for row in take:
                    self.send(pw.data_row(encode_row(row, columns, portal.result_formats)))
                sent += len(take)
                portal.sent += len(take)
                del portal.rows[: len(take)]
                if max_rows and sent >= max_rows:
                    self.send(pw.portal_suspended())
                    return
                continue
            event = await self._next_event(portal)
            match event:
                case None:
                    portal.done = True
                    return
                case RowBatch(rows):
                    portal.rows = list(rows)
                case Complete(tag):
                    portal.done = True
                    if tag == "EMPTY":
                        self.send(pw.empty_query_response())
                    else:
                        self.send(pw.command_complete(tag))
                    return
                case Notice():
                    self.send(notice_message(event))
                case Failure(error):
                    portal.done = True
                    raise error
                case Description(described):
                    portal.columns = columns = described
                case _:
                    pass

    # -- COPY ------------------------------------------------------------------------

    async def _copy(self, copy: CopyStatement) -> None:
        try:
            if copy.direction == "TO":
                await self._copy_out(copy)
            else:
                await self._logged_copy_in(copy)
        except LoupeError as error:
            self.error(error)

    async def _logged_copy_in(self, copy: CopyStatement) -> None:
        """COPY FROM STDIN, logged as the COPY statement it is (it runs here, not in
        ``Coordinator.execute``): how it ended, and its error."""
        session = self.session
        assert session is not None
        log = self.coordinator.statement_log
        execution = log.begin(session, copy.text, "copy")
        status, message = stmtlog.CANCELED, None  # the client went away mid-COPY
        try:
            await self._copy_in(copy)
            status = stmtlog.SUCCESS
        except LoupeError as error:
            canceled = error.code == SqlState.QUERY_CANCELED
            status, message = (stmtlog.CANCELED if canceled else stmtlog.ERROR), error.message
            raise
        finally:
            if execution is not None:
                log.end(execution, status, error_message=message)

    async def _copy_out(self, copy: CopyStatement) -> None:
        session = self.session
        assert session is not None
        columns: tuple[tuple[str, str], ...] | None = None
        count = 0
        async with contextlib.aclosing(self.coordinator.execute(session, copy.query)) as events:
            async for event in events:
                match event:
                    case Description(described):
                        columns = described
                        binary = int(copy.format == "binary")
                        self.send(pw.copy_out_response(len(columns), binary))
                        if binary:
                            self.send(pw.copy_data(BINARY_COPY_HEADER))
                        await self.flush()
                    case RowBatch(rows):
                        assert columns is not None
                        for row in rows:
                            self.send(pw.copy_data(copy.format_row(row, columns)))
                        count += len(rows)
                        await self.flush()
                    case Complete():
                        if columns is None:
                            raise LoupeError(
                                FEATURE_NOT_SUPPORTED,
                                "COPY TO STDOUT needs a query that returns rows",
                            )
                        if copy.format == "binary":
                            self.send(pw.copy_data(BINARY_COPY_TRAILER))
                        self.send(pw.copy_done(), pw.command_complete(f"COPY {count}"))
                    case Notice():
                        self.send(notice_message(event))
                    case Failure(error):
                        self.error(error)
                        return

    async def _copy_in(self, copy: CopyStatement) -> None:
        session = self.session
        assert session is not None
        context = self.coordinator.context
        table = await table_named(context, session, copy.table)
        assert table is not None
        columns = (
            check_columns(table, [(name, 0) for name in copy.columns]) if copy.columns else None
        )
        width = len(columns) if columns is not None else len(table.columns)
        # In a transaction block a COPY FROM is one of its writes (Materialize's rules).
        in_transaction = transaction_ops(session, WRITES)
        self.send(pw.copy_in_response(width, int(copy.format == "binary")))
        await self.flush()
        binary = copy.format == "binary"
        received: list[bytes] = []
        rows: list[tuple[Any, ...]] = []
        pending = b""
        failure: LoupeError | None = None
        line_number = 0
        while True:
            message = await self._read()
            if isinstance(message, pw.CopyData):
                if failure is not None:
                    continue
                if binary:
                    received.append(message.data)
                    continue
                pending += message.data
                *lines, pending = pending.split(b"\n")
                try:
                    line_number = await self._convert(
                        copy, table, columns, width, lines, rows, line_number
                    )
                except LoupeError as error:
                    failure = error
            elif isinstance(message, pw.CopyDone):
                break
            elif isinstance(message, pw.CopyFail):
                raise LoupeError(
                    SqlState.QUERY_CANCELED, f"COPY from stdin failed: {message.message}"
                )
            elif isinstance(message, pw.Flush | pw.Sync):
                continue
            else:
                raise pw.ProtocolViolation(
                    f"unexpected message type {type(message).__name__} during COPY from stdin"
                )
        if failure is not None:
            raise failure
        if binary:
            kinds = [c.sql_type.name for c in (columns or table.columns)]
            texts = binary_tuples(b"".join(received), kinds)
            rows.extend(query_rows(table, columns, texts, width))
        if pending:
            await self._convert(copy, table, columns, width, [pending], rows, line_number)
        if in_transaction is not None:
            # Written at COMMIT with the transaction's INSERTs.
            keep_rows(in_transaction, table, rows)
            self.send(pw.command_complete(f"COPY {len(rows)}"))
            return
        keys = unique_keys(context, table)
        written = await context.tables.write(
            table,
            insert_plan(table, rows, keys),
            read=bool(keys),
            along=context.compute.maintained_with(table),
        )
        metrics.TABLE_WRITES.labels("copy").inc()
        self.send(pw.command_complete(f"COPY {written.count}"))

    async def _convert(
        self,
        copy: CopyStatement,
        table: Table,
        columns: Any,
        width: int,
        lines: list[bytes],
        rows: list[tuple[Any, ...]],
        line_number: int,
    ) -> int:
        """Append the table rows of ``lines`` to ``rows``; the number of the last line read."""
        for start in range(0, len(lines), COPY_BATCH_ROWS):
            batch = []
            for line in lines[start : start + COPY_BATCH_ROWS]:
                line_number += 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                if (copy.format == "text" and line == b"\\.") or (copy.header and line_number == 1):
                    continue
                values = copy.parse_line(line.decode(), line_number)
                if len(values) != width:
                    raise LoupeError(
                        BAD_COPY_FILE_FORMAT,
                        f"{'missing' if len(values) < width else 'extra'} data for column"
                        f" (line {line_number})",
                    )
                batch.append(tuple(None if v is None else UntypedString(v) for v in values))
            rows.extend(query_rows(table, columns, batch, width))
            await asyncio.sleep(0)
        return line_number


# -- values ------------------------------------------------------------------------------


def fields(columns: Sequence[tuple[str, str]], formats: Sequence[int]) -> list[pw.Field]:
    codes = pw.format_codes(formats, len(columns))
    return [
        pw.Field(name, pgtypes.type_oid(kind), pgtypes.type_size(kind), format=code)
        for (name, kind), code in zip(columns, codes, strict=True)
    ]


def encode_row(
    row: Sequence[Any], columns: Sequence[tuple[str, str]], formats: Sequence[int]
) -> list[bytes | None]:
    codes = pw.format_codes(formats, len(columns))
    values: list[bytes | None] = []
    for value, (_, kind), code in zip(row, columns, codes, strict=True):
        if value is None:
            values.append(None)
        elif code == 1:
            values.append(pgtypes.encode_binary(value, kind))
        else:
            values.append(pgtypes.encode_text(value, kind))
    return values


def decode_parameter(value: bytes | None, code: int, oid: int) -> Parameter:
    """A Bind parameter as the coordinator binds it; an untyped text value stays untyped."""
    type_name = pgtypes.param_type_name(oid) if oid else None
    if value is None:
        return Parameter(None, type_name or "unknown")
    try:
        if code == 1:
            decoded = pgtypes.decode_binary(value, oid or TEXT_OID)
        elif type_name is None:
            return Parameter(value.decode(), "text")
        else:
            decoded = pgtypes.decode_text(value, oid)
    except (ValueError, UnicodeDecodeError) as error:
        code_ = pw.PROTOCOL_VIOLATION if code == 1 else INVALID_TEXT_REPRESENTATION
        raise LoupeError(code_, f"invalid parameter value: {error}") from None
    return Parameter(decoded, type_name or "text")


def notice_message(notice: Notice) -> bytes:
    return pw.notice_response(
        notice.message, severity=notice.severity or "NOTICE", code=notice.code or "00000"
    )


def startup_options(parameters: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Session variables from a startup packet (``options``: ``-c name=value``, ``--name=value``).

    Returns the variables to set and notices for what was not understood.
    """
    options: dict[str, str] = {}
    notices: list[str] = []
    for name, value in parameters.items():
        if name in ("user", "options", "replication"):
            continue
        options[name.lower()] = value
    words = shlex.split(parameters.get("options", ""))
    index = 0
    while index < len(words):
        word = words[index]
        setting = None
        if word == "-c" and index + 1 < len(words):
            setting = words[index + 1]
            index += 1
        elif word.startswith(("-c", "--")):
            setting = word[2:]
        if setting is None or "=" not in setting:
            notices.append(f"startup option {word!r} not understood")
        else:
            key, _, val = setting.partition("=")
            options[key.strip().replace("-", "_").lower()] = val
        index += 1
    for name in list(options):
        if name not in VARIABLES:
            notices.append(
                f'startup setting {name} not set: unrecognized configuration parameter "{name}"'
            )
            del options[name]
    return options, notices


# -- COPY ---------------------------------------------------------------------------------


_TEXT_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True)
class CopyStatement:
    """``COPY (query) TO STDOUT`` or ``COPY t [(columns)] FROM STDIN``, with its format."""

    direction: str  # "TO" or "FROM"
    text: str = ""  # the COPY statement as written (the statement log's)
    query: str = ""
    table: ObjectName = field(default_factory=lambda: ObjectName(parts=("",)))
    columns: tuple[str, ...] = ()
    format: str = "text"
    delimiter: str = "\t"
    null: str = "\\N"
    header: bool = False
    quote: str = '"'

    def format_row(self, row: Sequence[Any], columns: Sequence[tuple[str, str]]) -> bytes:
        if self.format == "binary":
            return binary_tuple(row, columns)
        texts = [
            None if value is None else pgtypes.encode_text(value, kind).decode()
            for value, (_, kind) in zip(row, columns, strict=True)
        ]
        if self.format == "csv":
            parts = [
                self.null if t is None else _csv_field(t, self.delimiter, self.quote, self.null)
                for t in texts
            ]
            return (self.delimiter.join(parts) + "\n").encode()
        return (
            self.delimiter.join(
                self.null if t is None else _text_escape(t, self.delimiter) for t in texts
            )
            + "\n"
        ).encode()

    def parse_line(self, line: str, number: int) -> list[str | None]:
        if self.format == "csv":
            fields_ = next(csv.reader([line], delimiter=self.delimiter, quotechar=self.quote), [])
            null = self.null
            # An unquoted empty field is NULL; csv.reader cannot tell, so look at the raw text.
            raw = _csv_raw_fields(line, self.delimiter, self.quote)
            return [
                None if value == null and not raw[i].startswith(self.quote) else value
                for i, value in enumerate(fields_)
            ]
        return [
            None if part == self.null else _text_unescape(part, number)
            for part in line.split(self.delimiter)
        ]


# PostgreSQL's binary COPY format: signature, flags (no OIDs), header extension length;
# each tuple a field count then (length, bytes) per field, -1 for NULL; a count of -1 ends it.
BINARY_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
BINARY_COPY_HEADER = BINARY_COPY_SIGNATURE + struct.pack("!ii", 0, 0)
BINARY_COPY_TRAILER = struct.pack("!h", -1)


def binary_tuple(row: Sequence[Any], columns: Sequence[tuple[str, str]]) -> bytes:
    """One row as a tuple of PostgreSQL's binary COPY format."""
    parts = [struct.pack("!h", len(row))]
    for value, (_, kind) in zip(row, columns, strict=True):
        if value is None:
            parts.append(struct.pack("!i", -1))
        else:
            data = pgtypes.encode_binary(value, kind)
            parts.append(struct.pack("!i", len(data)) + data)
    return b"".join(parts)


def binary_tuples(data: bytes, kinds: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of a binary COPY stream, each value as its text (what a text COPY reads)."""

    def bad(why: str) -> LoupeError:
        return LoupeError(BAD_COPY_FILE_FORMAT, f"invalid COPY file {why}")

    if not data.startswith(BINARY_COPY_SIGNATURE):
        raise LoupeError(BAD_COPY_FILE_FORMAT, "COPY file signature not recognized")
    offset = len(BINARY_COPY_SIGNATURE)
    try:
        flags, extension = struct.unpack_from("!ii", data, offset)
        if flags & 0x10000:
            raise bad("header (WITH OIDS is not supported)")
        offset += 8 + extension
        rows: list[tuple[Any, ...]] = []
        oids = [pgtypes.type_oid(kind) for kind in kinds]
        while True:
            (count,) = struct.unpack_from("!h", data, offset)
            offset += 2
            if count == -1:
                return rows
            if count != len(kinds):
                raise LoupeError(
                    BAD_COPY_FILE_FORMAT,
                    f"row field count is {count}, expected {len(kinds)}",
                )
            values: list[Any] = []
            for oid, kind in zip(oids, kinds, strict=True):
                (length,) = struct.unpack_from("!i", data, offset)
                offset += 4
                if length == -1:
                    values.append(None)
                    continue
                field_data = data[offset : offset + length]
                if len(field_data) != length:
                    raise bad("format: unexpected end of data")
                offset += length
                value = pgtypes.decode_binary(field_data, oid)
                values.append(UntypedString(pgtypes.encode_text(value, kind).decode()))
            rows.append(tuple(values))
    except struct.error:
        raise bad("format: unexpected end of data") from None


def _csv_field(text: str, delimiter: str, quote: str, null: str) -> str:
    if text == null or any(c in text for c in (delimiter, quote, "\n", "\r")):
        return quote + text.replace(quote, quote + quote) + quote
    return text


def _csv_raw_fields(line: str, delimiter: str, quote: str) -> list[str]:
    fields_: list[str] = []
    current: list[str] = []
    quoted = False
    for char in line:
        if char == quote:
            quoted = not quoted
        if char == delimiter and not quoted:
            fields_.append("".join(current))
            current = []
        else:
            current.append(char)
    fields_.append("".join(current))
    return fields_


def _text_escape(text: str, delimiter: str) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if delimiter not in "\t\\":
        out = out.replace(delimiter, "\\" + delimiter)
    return out


def _text_unescape(text: str, number: int) -> str:
    if "\\" not in text:
        return text
    out = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, None)
        if following is None:
            raise LoupeError(BAD_COPY_FILE_FORMAT, f"end-of-copy marker corrupt (line {number})")
        out.append(_TEXT_ESCAPES.get(following, following))
    return "".join(out)


def _is_copy_from(sql: str) -> bool:
    try:
        copy = parse_copy(sql)
    except LoupeError:
        return False
    return copy is not None and copy.direction == "FROM"


def parse_copy(sql: str) -> CopyStatement | None:
    """The COPY statement ``sql`` is (None: not a COPY), as the SQL parser reads it.

    COPY TO runs the whole statement (the coordinator answers its query's rows and
    logs the COPY); its options say how this server formats them.
    """
    if sql.lstrip()[:4].upper() != "COPY":
        return None
    statements = parse(sql)
    if len(statements) != 1 or not isinstance(statements[0], Copy):
        return None
    copy = statements[0]
    base = CopyStatement(
        copy.direction,
        text=copy.text,
        query=sql if copy.direction == "TO" else "",
        table=copy.table or ObjectName(parts=("",)),
        columns=copy.columns,
    )
    return _with_options(base, dict(copy.options))


def _with_options(copy: CopyStatement, options: dict[str, str]) -> CopyStatement:
    format_ = options.get("format", "text").lower()
    if format_ not in ("text", "csv", "binary"):
        raise LoupeError(FEATURE_NOT_SUPPORTED, f"COPY format {format_} is not supported")
    csv_mode = format_ == "csv"
    return CopyStatement(
        copy.direction,
        text=copy.text,
        query=copy.query,
        table=copy.table,
        columns=copy.columns,
        format=format_,
        delimiter=options.get("delimiter", "," if csv_mode else "\t"),
        null=options.get("null", "" if csv_mode else "\\N"),
        header=options.get("header", "false").lower() in ("true", "on", "1"),
        quote=options.get("quote", '"'),
    )
