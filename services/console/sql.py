"""The console's SQL: queries it runs through the coordinator's pgwire port as the
logged-in user, and the text it shows for them ("Show SQL").

A ``Query`` is SQL with psycopg's ``%s`` placeholders (write ``%%`` for a literal
``%``) and its parameters; ``Query.pasteable()`` is the same statement with the
parameters written in as SQL literals, ready to paste into ``loupe sql`` or psql.

A ``SqlSession`` holds one user's credentials and a few connections (at most
``max_connections``, opened when a query needs one and closed once unused for
``idle_close`` seconds), so a console nobody looks at holds no connection and runs
nothing. ``subscribe()`` runs a ``SUBSCRIBE`` on a connection of its own, through a
cursor (``DECLARE … CURSOR FOR SUBSCRIBE``, ``FETCH … WITH (timeout)``), until the
caller stops iterating.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from loupe.common.logging import get_logger

log = get_logger(__name__)

APPLICATION_NAME = "loupe-console"
IDLE = TransactionStatus.IDLE
# SQLSTATEs of a refused login (invalid_authorization_specification, invalid_password).
LOGIN_REFUSED = frozenset({"28000", "28P01"})


class SqlError(Exception):
    """A statement failed (``sqlstate``) or the coordinator could not be reached (08006)."""

    def __init__(self, message: str, sqlstate: str = "", query: Query | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        # The query that failed, so its panel can still show its SQL.
        self.query = query


class LoginRefused(SqlError):
    """The coordinator refused the user's credentials."""


def literal(value: Any) -> str:
    """``value`` as a SQL literal, as PostgreSQL reads it back."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | decimal.Decimal):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return "'" + value.isoformat() + "'"
    if isinstance(value, list | tuple):
        return "ARRAY[" + ", ".join(literal(item) for item in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class Query:
    """The SQL behind one panel of a page."""

    sql: str
    params: tuple[Any, ...] = ()

    def pasteable(self) -> str:
        """The statement with its parameters written in (what "Show SQL" shows)."""
        pieces = self.sql.split("%%")
        values = iter(self.params)
        out = []
        for piece in pieces:
            parts = piece.split("%s")
            written = parts[0]
            for rest in parts[1:]:
                written += literal(next(values)) + rest
            out.append(written)
        return "%".join(out).strip()


@dataclass
class Result:
    """A query's answer: column names, rows (tuples of Python values), how long it took."""

    query: Query
    columns: list[str]
    rows: list[tuple[Any, ...]]
    elapsed_ms: float = 0.0

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class Change:
    """One row of a ``SUBSCRIBE``: its timestamp, diff (+1/-1) and the row."""

    timestamp: int
    diff: int
    row: tuple[Any, ...]


@dataclass
class SqlSession:
    """One user's way to the coordinator: credentials and a small connection pool."""

    host: str
    port: int
    user: str
    password: str | None = None
    database: str = "materialize"
    max_connections: int = 4
    idle_close: float = 30.0
    connect_timeout: float = 10.0
    statement_timeout: str = "30s"
    # The console's reads see every write acknowledged before them (strict
    # serializable); "serializable" reads the inputs' latest complete time instead.
    transaction_isolation: str = "strict serializable"
    _idle: list[tuple[psycopg.AsyncConnection[Any], float]] = field(default_factory=list)
    _open: int = 0
    _slots: asyncio.Semaphore | None = None

    def _conninfo(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "dbname": self.database,
            "application_name": APPLICATION_NAME,
            "connect_timeout": max(1, int(self.connect_timeout)),
            "options": (
                f"-c statement_timeout={self.statement_timeout}"
                f" -c transaction_isolation={self.transaction_isolation.replace(' ', '_')}"
            ),
        }
        if self.password is not None:
            info["password"] = self.password
        return info

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection of this user (autocommit); ``LoginRefused`` when refused."""
        try:
            return await psycopg.AsyncConnection.connect(autocommit=True, **self._conninfo())
        except psycopg.OperationalError as error:
            message = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
            sqlstate = getattr(getattr(error, "diag", None), "sqlstate", None) or ""
            if sqlstate in LOGIN_REFUSED or "password" in message or "authentication" in message:
                raise LoginRefused(message, sqlstate or "28P01") from None
            raise SqlError(f"cannot reach the coordinator: {message}", "08006") from None

    async def check(self) -> None:
        """Log in once (``LoginRefused`` when the credentials are wrong) and keep the connection."""
        connection = await self.connect()
        self._open += 1
        self._release(connection)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection for the duration of the block."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        async with self._slots:
            connection = None
            while self._idle and connection is None:
                candidate, _ = self._idle.pop()
                if candidate.closed:
                    self._open -= 1
                else:
                    connection = candidate
            if connection is None:
                connection = await self.connect()
                self._open += 1
            try:
                yield connection
            except BaseException:
                # A failed statement leaves the connection idle and usable; one
                # interrupted mid-statement (cancelled, broken) is closed.
                if connection.closed or connection.info.transaction_status != IDLE:
                    await self._discard(connection)
                else:
                    self._release(connection)
                raise
            self._release(connection)

    def _release(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if connection.closed:
            self._open -= 1
        else:
            self._idle.append((connection, time.monotonic()))

    async def _discard(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._open -= 1
        with contextlib.suppress(Exception):
            await connection.close()

    async def query(self, query: Query) -> Result:
        """Run ``query``; ``SqlError`` with its SQLSTATE when it fails."""
        began = time.perf_counter()
        try:
            async with self.connection() as connection, connection.cursor() as cursor:
                await cursor.execute(query.sql, query.params or None)
                columns = [column.name for column in cursor.description or []]
                rows = await cursor.fetchall() if cursor.description else []
        except psycopg.Error as error:
            failure = _sql_error(error)
            failure.query = query
            raise failure from None
        except SqlError as error:
            error.query = query
            raise
        return Result(query, columns, list(rows), (time.perf_counter() - began) * 1000)

    async def query_all(self, *queries: Query) -> list[Result | SqlError]:
        """Run ``queries`` at once over the pool; a failed one is its ``SqlError``."""
        answers = await asyncio.gather(*(self.query(q) for q in queries), return_exceptions=True)
        out: list[Result | SqlError] = []
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, SqlError):
                raise answer
            out.append(answer)
        return out

    async def subscribe(
        self, query: Query, *, poll: float = 1.0, progress: bool = False
    ) -> AsyncIterator[list[Change]]:
        """``SUBSCRIBE`` to ``query`` on a connection of its own: yields each batch of
        changes (the snapshot first); stop iterating to end it. With ``progress``, an
        empty batch is yielded after each FETCH that brought nothing (a heartbeat)."""
        connection = await self.connect()
        try:
            async with connection.cursor() as cursor:
                await cursor.execute("BEGIN")
                await cursor.execute(
                    "DECLARE console_subscribe CURSOR FOR SUBSCRIBE (" + query.pasteable() + ")"
                )
                while True:
                    await cursor.execute(
                        f"FETCH ALL console_subscribe WITH (timeout = '{poll:g}s')"
                    )
                    rows = await cursor.fetchall()
                    if rows or progress:
                        yield [Change(int(row[0]), int(row[1]), tuple(row[2:])) for row in rows]
        except psycopg.Error as error:
            raise _sql_error(error) from None
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    async def close_idle(self, older_than: float | None = None) -> int:
        """Close pooled connections unused for ``older_than`` seconds (default ``idle_close``)."""
        limit = self.idle_close if older_than is None else older_than
        now = time.monotonic()
        keep: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        closing: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        for connection, since in self._idle:
            (closing if now - since >= limit else keep).append((connection, since))
        self._idle = keep
        for connection, _ in closing:
            await self._discard(connection)
        return len(closing)

    async def close(self) -> None:
        await self.close_idle(0.0)

    @property
    def open_connections(self) -> int:
        return self._open


def _sql_error(error: psycopg.Error) -> SqlError:
    diag = getattr(error, "diag", None)
    sqlstate = getattr(error, "sqlstate", None) or getattr(diag, "sqlstate", None) or ""
    message = getattr(diag, "message_primary", None) or str(error).strip() or repr(error)
    if isinstance(error, psycopg.OperationalError) and not sqlstate:
        return SqlError(f"lost the coordinator: {message}", "08006")
    return SqlError(message, sqlstate)


def rows_by(result: Result, key: str) -> dict[Any, list[dict[str, Any]]]:
    """``result``'s rows as dicts grouped by column ``key``."""
    grouped: dict[Any, list[dict[str, Any]]] = {}
    for row in result.dicts():
        grouped.setdefault(row[key], []).append(row)
    return grouped
