"""The ``Sql`` gRPC service: the client edge of the coordinator.

Only this module turns coordinator results into ``sql_pb2`` messages. SQL
errors travel inside the ``Execute`` stream (``ExecuteResponse.error``, which
ends it); ``OpenSession`` refuses bad options with INVALID_ARGUMENT and the
SQLSTATE in the ``loupe-sqlstate`` trailer. ``ExecuteRequest.params`` are the
values of the statement's ``$1, $2, …``, typed by their ``Value`` kind.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.values import from_value, to_row
from loupe.coordinator import metrics
from loupe.coordinator.coordinator import Coordinator, unexpected_failure
from loupe.coordinator.results import (
    Complete,
    Description,
    Event,
    Failure,
    Notice,
    Progress,
    RowBatch,
)
from loupe.coordinator.session import DEFAULT_USER
from loupe.coordinator.sql.params import Parameter, inline_type
from loupe.proto.common.v1 import common_pb2
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc

log = get_logger(__name__)

SQLSTATE_TRAILER = "loupe-sqlstate"
TOO_MANY_CONNECTIONS = "53300"


def event_to_proto(event: Event) -> sql_pb2.ExecuteResponse:
    match event:
        case Description(columns):
            return sql_pb2.ExecuteResponse(
                description=common_pb2.RelationDesc(
                    columns=[common_pb2.Column(name=n, type=t, nullable=True) for n, t in columns]
                )
            )
        case RowBatch(rows, streaming):
            return sql_pb2.ExecuteResponse(
                rows=sql_pb2.RowBatch(rows=[to_row(r) for r in rows], streaming=streaming)
            )
        case Complete(tag):
            return sql_pb2.ExecuteResponse(complete=sql_pb2.CommandComplete(tag=tag))
        case Notice(severity, message):
            return sql_pb2.ExecuteResponse(
                notice=sql_pb2.Notice(severity=severity, message=message)
            )
        case Failure(error):
            return sql_pb2.ExecuteResponse(error=error.to_proto())
        case Progress():
            return sql_pb2.ExecuteResponse(
                progress=sql_pb2.Progress(
                    object=event.object,
                    nodes_hydrated=event.nodes_hydrated,
                    nodes_total=event.nodes_total,
                    records_read=event.records_read,
                    hydrated=event.hydrated,
                    unit=event.unit,
                    records_done=event.records_done,
                    records_estimated=event.records_estimated,
                    eta_ms=event.eta_ms,
                )
            )
    raise TypeError(f"not an event: {event!r}")


def parameter_from_proto(value: common_pb2.Value) -> Parameter:
    """A ``$n`` value as the client sent it, typed by its kind (an int as an inline literal is)."""
    if value.WhichOneof("kind") == "jsonb_value":
        return Parameter(json.loads(value.jsonb_value), "jsonb")
    python = from_value(value)
    return Parameter(python, inline_type(python))


class SqlServicer(sql_pb2_grpc.SqlServicer):
    """Sessions and statements over gRPC."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.sessions = coordinator.sessions

    async def OpenSession(
        self, request: sql_pb2.OpenSessionRequest, context: Any
    ) -> sql_pb2.OpenSessionResponse:
        user = request.user or DEFAULT_USER
        try:
            superuser = await self.coordinator.authenticate(user, request.password)
        except LoupeError as error:
            log.info("session refused", user=user, code=error.code)
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                error.message,
                trailing_metadata=((SQLSTATE_TRAILER, error.code),),
            )
            raise  # abort raises; this keeps type checkers honest
        await self._admit_session(context)
        try:
            session = self.sessions.open(
                user,
                application_name=request.application_name,
                options=dict(request.options),
                defaults=self.coordinator.session_defaults(),
                is_superuser=superuser,
            )
        except LoupeError as error:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                error.message,
                trailing_metadata=((SQLSTATE_TRAILER, error.code),),
            )
            raise  # abort raises; this keeps type checkers honest
        metrics.SESSIONS.set(len(self.sessions))
        log.info("session opened", session_id=session.id, user=session.user)
        return sql_pb2.OpenSessionResponse(session_id=session.id, parameters=session.parameters())

    async def _admit_session(self, context: Any) -> None:
        """53300 when ``max_connections`` sessions are open (RESOURCE_EXHAUSTED on the wire)."""
        limit = int(self.coordinator.system_variable("max_connections"))
        current = len(self.sessions)
        if current < limit:
            return
        metrics.SESSIONS_REFUSED.inc()
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "creating connection would violate max_connections limit"
            f" (desired: {current + 1}, limit: {limit}, current: {current})",
            trailing_metadata=((SQLSTATE_TRAILER, TOO_MANY_CONNECTIONS),),
        )

    async def Execute(
        self, request: sql_pb2.ExecuteRequest, context: Any
    ) -> AsyncIterator[sql_pb2.ExecuteResponse]:
        try:
            session = self.sessions.get(request.session_id)
        except LoupeError as error:
            yield sql_pb2.ExecuteResponse(error=error.to_proto())
            return
        try:
            params = [parameter_from_proto(value) for value in request.params]
        except (ValueError, TypeError) as error:
            bad = LoupeError(SqlState.INVALID_PARAMETER_VALUE, f"invalid parameter: {error}")
            yield sql_pb2.ExecuteResponse(error=bad.to_proto())
            return
        try:
            async for event in self.coordinator.execute(session, request.sql, params):
                yield event_to_proto(event)
        except Exception:
            # A bug: the client still gets a SQLSTATE (XX000), not a gRPC UNKNOWN.
            yield event_to_proto(unexpected_failure("execute failed unexpectedly"))
        finally:
            session.touch()  # idle from when its last statement ended

    async def Cancel(self, request: sql_pb2.CancelRequest, context: Any) -> sql_pb2.CancelResponse:
        try:
            session = self.sessions.get(request.session_id)
        except LoupeError:
            return sql_pb2.CancelResponse(canceled=False)
        canceled = self.coordinator.cancel(session)
        log.info("cancel requested", session_id=session.id, canceled=canceled)
        return sql_pb2.CancelResponse(canceled=canceled)

    async def CloseSession(
        self, request: sql_pb2.CloseSessionRequest, context: Any
    ) -> common_pb2.Empty:
        self.coordinator.close_session(request.session_id)
        return common_pb2.Empty()
