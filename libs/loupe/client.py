"""A small synchronous client of the coordinator's ``Sql`` gRPC API.

    with SqlClient("127.0.0.1", 6875) as client:
        rows = client.query("SELECT name FROM mz_catalog.mz_clusters")
        rows = client.query("SELECT $1::int + 1", params=[41])

``stream()`` yields each statement's ``StatementResult`` (and ``ServerNotice``s)
as it completes and raises ``LoupeError`` for the failing statement; a
Ctrl-C while it waits asks the server to cancel the running statement. Rows
of a statement that streams until canceled (SUBSCRIBE) come as
``StreamedRows`` as they arrive, and a dataflow's hydration (CREATE INDEX,
CREATE MATERIALIZED VIEW) as ``HydrationProgress``.
``ConnectionFailed`` means the server could not be reached.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from loupe.common.errors import LoupeError
from loupe.common.values import from_row, to_value
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6875
SQLSTATE_TRAILER = "loupe-sqlstate"


class ConnectionFailed(Exception):
    """The coordinator could not be reached."""


@dataclass
class StatementResult:
    """One statement's outcome: ``columns`` is None for statements that return no rows."""

    tag: str
    columns: list[tuple[str, str]] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns or []]


@dataclass(frozen=True)
class ServerNotice:
    severity: str
    message: str


@dataclass(frozen=True)
class StreamedRows:
    """Rows of a streaming statement (SUBSCRIBE), as they arrive."""

    columns: list[tuple[str, str]]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class HydrationProgress:
    """How far the dataflow of ``object`` has hydrated (``unit`` "nodes"), or a load
    generator has filled its tables (``unit`` "tables", ``records_read`` rows written)."""

    object: str
    nodes_hydrated: int
    nodes_total: int
    records_read: int
    hydrated: bool
    unit: str = "nodes"
    # Hydration: updates the dataflow's nodes processed, the estimate of what they
    # process to hydrate (0, 0: no estimate) and the time left in ms (None: unknown).
    records_done: int = 0
    records_estimated: int = 0
    eta_ms: int | None = None


class SqlClient:
    """One session on a coordinator."""

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        user: str = "",
        password: str = "",
        application_name: str = "loupe-sql",
        options: dict[str, str] | None = None,
        connect_timeout: float = 5.0,
        statement_timeout: float | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.user = user
        self._password = password
        self.application_name = application_name
        self.options = dict(options or {})
        self.connect_timeout = connect_timeout
        # A deadline for each Execute call (None: wait as long as the statement runs).
        self.statement_timeout = statement_timeout
        self.session_id = ""
        self.parameters: dict[str, str] = {}
        self._channel: grpc.Channel | None = None
        self._stub: sql_pb2_grpc.SqlStub | None = None

    def __enter__(self) -> SqlClient:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> dict[str, str]:
        """Open the session; returns the server's parameters."""
        self._channel = grpc.insecure_channel(self.address)
        self._stub = sql_pb2_grpc.SqlStub(self._channel)
        try:
            # ``connect_timeout`` bounds reaching the server, not its answer: a busy
            # coordinator opens the session late rather than not at all.
            grpc.channel_ready_future(self._channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            self._close_channel()
            raise ConnectionFailed(
                f"cannot connect to the coordinator at {self.address}:"
                f" no connection within {self.connect_timeout:g}s"
            ) from None
        try:
            response = self._stub.OpenSession(
                sql_pb2.OpenSessionRequest(
                    user=self.user,
                    password=self._password,
                    application_name=self.application_name,
                    options=self.options,
                ),
                wait_for_ready=False,
            )
        except grpc.RpcError as error:
            self._close_channel()
            raise _rpc_error(error, self.address) from None
        self.session_id = response.session_id
        self.parameters = dict(response.parameters)
        return self.parameters

    def close(self) -> None:
        if self._stub is not None and self.session_id:
            # If the server is gone, so is the session.
            with contextlib.suppress(grpc.RpcError):
                self._stub.CloseSession(
                    sql_pb2.CloseSessionRequest(session_id=self.session_id), timeout=2
                )
        self.session_id = ""
        self._close_channel()

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def cancel(self) -> bool:
        """Ask the server to cancel the statement this session runs."""
        if self._stub is None:
            return False
        try:
            response = self._stub.Cancel(
                sql_pb2.CancelRequest(session_id=self.session_id), timeout=5
            )
        except grpc.RpcError:
            return False
        return bool(response.canceled)

    def stream(
        self,
        sql: str,
        *,
        params: Sequence[Any] | None = None,
        cancel_on_interrupt: bool = True,
    ) -> Iterator[StatementResult | ServerNotice | StreamedRows | HydrationProgress]:
        """Run ``sql``; yields per statement, raises ``LoupeError`` for the one that fails.

        ``params``: the values of ``$1, $2, …`` (None is NULL; ``sql`` must then
        be one statement).
        """
        if self._stub is None:
            self.open()
        assert self._stub is not None
        request = sql_pb2.ExecuteRequest(
            session_id=self.session_id, sql=sql, params=[to_value(p) for p in params or ()]
        )
        responses = self._stub.Execute(request, timeout=self.statement_timeout)
        current: StatementResult | None = None
        interrupted = False
        while True:
            try:
                response = next(responses)
            except StopIteration:
                return
            except KeyboardInterrupt:
                # First Ctrl-C: cancel on the server and wait for its answer;
                # a second one gives up on the statement.
                if not cancel_on_interrupt or interrupted:
                    responses.cancel()
                    raise
                interrupted = True
                self.cancel()
                continue
            except grpc.RpcError as error:
                raise _rpc_error(error, self.address) from None
            kind = response.WhichOneof("kind")
            if kind == "description":
                current = StatementResult(
                    tag="", columns=[(c.name, c.type) for c in response.description.columns]
                )
            elif kind == "rows":
                if current is None:
                    current = StatementResult(tag="", columns=[])
                rows = [from_row(row) for row in response.rows.rows]
                if response.rows.streaming:
                    yield StreamedRows(list(current.columns or []), rows)
                else:
                    current.rows.extend(rows)
            elif kind == "complete":
                result = current or StatementResult(tag="")
                result.tag = response.complete.tag
                current = None
                yield result
            elif kind == "notice":
                yield ServerNotice(response.notice.severity, response.notice.message)
            elif kind == "progress":
                progress = response.progress
                yield HydrationProgress(
                    progress.object,
                    progress.nodes_hydrated,
                    progress.nodes_total,
                    progress.records_read,
                    progress.hydrated,
                    progress.unit or "nodes",
                    progress.records_done,
                    progress.records_estimated,
                    progress.eta_ms if progress.HasField("eta_ms") else None,
                )
            elif kind == "error":
                raise LoupeError.from_proto(response.error)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> list[StatementResult]:
        """Run ``sql`` and return every statement's result (notices are dropped)."""
        items = self.stream(sql, params=params)
        return [item for item in items if isinstance(item, StatementResult)]

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """The rows of the last statement of ``sql``."""
        results = self.execute(sql, params)
        return results[-1].rows if results else []


def _rpc_error(error: grpc.RpcError, address: str) -> Exception:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ConnectionFailed(f"cannot connect to the coordinator at {address}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        # The channel was up: the call's deadline (statement_timeout) passed unanswered.
        return ConnectionFailed(
            f"the coordinator at {address} did not answer within the deadline: {details}"
        )
    trailers = dict(error.trailing_metadata() or ()) if hasattr(error, "trailing_metadata") else {}
    sqlstate = trailers.get(SQLSTATE_TRAILER)
    return LoupeError(sqlstate or (code.name if code else "UNKNOWN"), details or str(error))
