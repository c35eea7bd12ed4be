"""gRPC servers with the standard health service and reflection.

``LoupeError`` raised by a unary handler becomes a gRPC status with the same
name, so one servicer can serve NATS and gRPC unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from loupe.common.errors import LoupeError


def translate_errors(servicer: Any) -> Any:
    """Wrap a servicer's coroutine methods so ``LoupeError`` aborts the call."""

    class Wrapped(type(servicer)):  # type: ignore[misc]
        pass

    wrapped = Wrapped.__new__(Wrapped)
    wrapped.__dict__.update(servicer.__dict__)
    for name, member in inspect.getmembers(type(servicer)):
        if name.startswith("_") or not inspect.iscoroutinefunction(member):
            continue
        bound = getattr(servicer, name)

        @functools.wraps(bound)
        async def call(request: Any, context: Any, _bound: Any = bound) -> Any:
            try:
                return await _bound(request, context)
            except LoupeError as error:
                code = getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)
                await context.abort(code, error.message)

        setattr(wrapped, name, call)
    return wrapped


class GrpcServer:
    """A ``grpc.aio`` server with health and reflection for the given services."""

    def __init__(self, host: str, port: int) -> None:
        self.server = grpc.aio.server()
        self.health = (
            health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        )
        self._address = f"{host}:{port}"
        self._service_names: list[str] = []
        self.port = 0

    def add(self, add_to_server: Any, servicer: Any, service_name: str) -> None:
        add_to_server(servicer, self.server)
        self._service_names.append(service_name)

    async def start(self) -> int:
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        names: Iterable[str] = [
            *self._service_names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ]
        reflection.enable_server_reflection(tuple(names), self.server)
        self.port = self.server.add_insecure_port(self._address)
        if self.port == 0:
            raise OSError(f"cannot listen on {self._address}")
        await self.server.start()
        for name in [*self._service_names, ""]:
            await _set(self.health, name, health_pb2.HealthCheckResponse.SERVING)
        return self.port

    async def stop(self, grace: float = 5.0) -> None:
        for name in [*self._service_names, ""]:
            await _set(self.health, name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)


async def _set(servicer: Any, name: str, status: Any) -> None:
    result = servicer.set(name, status)
    if inspect.isawaitable(result):
        await result
