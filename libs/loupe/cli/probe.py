"""One query through the SQL API, for readiness checks and scripts."""

from __future__ import annotations

from typing import Any

import grpc

from loupe.common.errors import LoupeError
from loupe.common.values import from_row
from loupe.proto.sql.v1 import sql_pb2, sql_pb2_grpc


def query_once(
    host: str,
    port: int,
    sql: str,
    *,
    user: str = "materialize",
    password: str = "",
    timeout: float = 10.0,
) -> list[tuple[Any, ...]]:
    """Run ``sql`` in a fresh session and return the rows of its last result."""
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = sql_pb2_grpc.SqlStub(channel)
        session = stub.OpenSession(
            sql_pb2.OpenSessionRequest(user=user, password=password), timeout=timeout
        )
        rows: list[tuple[Any, ...]] = []
        try:
            for response in stub.Execute(
                sql_pb2.ExecuteRequest(session_id=session.session_id, sql=sql), timeout=timeout
            ):
                kind = response.WhichOneof("kind")
                if kind == "description":
                    rows = []
                elif kind == "rows":
                    rows.extend(from_row(row) for row in response.rows.rows)
                elif kind == "error":
                    raise LoupeError.from_proto(response.error)
        finally:
            stub.CloseSession(
                sql_pb2.CloseSessionRequest(session_id=session.session_id), timeout=timeout
            )
        return rows
