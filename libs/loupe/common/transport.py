"""The NATS transport for Loupe's protobuf services.

A gRPC ``service`` declared under ``protos/`` is served on NATS by mapping each
unary method to a request/reply subject::

    loupe.proto.catalog.v1.Catalog/Transact  ->  loupe.catalog.v1.Catalog.Transact

The handler is the same servicer object a gRPC server would use: methods are
``async def Method(self, request, context)``, and ``context.abort(code, msg)``
or a raised ``LoupeError`` becomes an error reply. Error replies carry the
headers ``Loupe-Status`` (a gRPC status name) and ``Loupe-Message`` and an
empty body; the client raises them as ``LoupeError``.

Bytes that do not decode are logged, counted in
``loupe_bus_malformed_messages_total`` and answered with INVALID_ARGUMENT; the
service keeps serving. Only this module and the services' edges touch
``*_pb2`` objects on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats
import nats.errors
from google.protobuf import message as protobuf_message
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.metrics import MALFORMED_MESSAGES, REQUESTS

log = get_logger(__name__)

STATUS_HEADER = "Loupe-Status"
MESSAGE_HEADER = "Loupe-Message"

M = TypeVar("M", bound=protobuf_message.Message)


class NatsUnavailable(ConnectionError):
    """NATS could not be reached at start."""


async def connect(
    url: str, *, name: str, connect_timeout: float = 2.0, give_up_after: float = 5.0
) -> NatsConnection:
    """Connect to NATS, or raise ``NatsUnavailable`` with one clear line.

    Once connected the client reconnects forever; the first connection is
    given up after ``give_up_after`` seconds (nats-py would retry it forever
    too, given unlimited reconnect attempts).
    """

    async def quiet(_error: Exception) -> None:
        return None

    try:
        return await asyncio.wait_for(
            nats.connect(
                url,
                name=name,
                connect_timeout=connect_timeout,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                allow_reconnect=True,
                error_cb=quiet,
            ),
            timeout=give_up_after,
        )
    except TimeoutError:
        raise NatsUnavailable(
            f"cannot reach NATS at {url}: no connection within {give_up_after:g}s"
        ) from None
    except Exception as error:  # nats raises several unrelated types here
        raise NatsUnavailable(
            f"cannot reach NATS at {url}: {error or type(error).__name__}"
        ) from None


def subject_for(service: ServiceDescriptor, method: str, *, target: str = "") -> str:
    """The request subject of ``method``: the service's full name without ``proto``."""
    parts = service.full_name.split(".")
    if parts[:2] == ["loupe", "proto"]:
        parts = ["loupe", *parts[2:]]
    if target:
        parts.append(target)
    return ".".join([*parts, method])


def message_class(descriptor: Any) -> type[protobuf_message.Message]:
    return message_factory.GetMessageClass(descriptor)


def decode(cls: type[M], data: bytes, *, subject: str) -> M | None:
    """Decode ``data`` or log and count it as malformed and return None."""
    try:
        return cls.FromString(data)
    except protobuf_message.DecodeError as error:
        MALFORMED_MESSAGES.labels(subject=subject).inc()
        log.warning(
            "malformed message dropped",
            subject=subject,
            expected=cls.DESCRIPTOR.full_name,
            size=len(data),
            error=str(error),
        )
        return None


class NatsCallContext:
    """The subset of ``grpc.aio.ServicerContext`` servicers use."""

    def __init__(self, subject: str, headers: dict[str, str] | None) -> None:
        self.subject = subject
        self._metadata = tuple((headers or {}).items())

    async def abort(self, code: Any, details: str = "") -> None:
        raise LoupeError(getattr(code, "name", str(code)), details)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return "nats"


class NatsServiceEndpoint:
    """Serves the unary methods of ``servicer`` for ``service`` on NATS.

    ``queue`` makes several instances share the load; ``target`` puts the
    endpoint under a per-target subject (e.g. a replica id).
    """

    def __init__(
        self,
        connection: NatsConnection,
        service: ServiceDescriptor,
        servicer: Any,
        *,
        queue: str = "",
        target: str = "",
    ) -> None:
        self._nc = connection
        self._service = service
        self._servicer = servicer
        self._queue = queue
        self._target = target
        self._subscriptions: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for method in self._service.methods:
            if method.client_streaming or method.server_streaming:
                continue  # streaming methods are served over gRPC only
            handler = getattr(self._servicer, method.name, None)
            if handler is None:
                continue
            subject = subject_for(self._service, method.name, target=self._target)
            callback = functools.partial(self._on_request, method, handler, subject)
            subscription = await self._nc.subscribe(subject, queue=self._queue, cb=callback)
            self._subscriptions.append(subscription)
        await self._nc.flush()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop taking requests, let running ones finish for ``grace`` seconds."""
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        self._subscriptions.clear()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=grace)
            for task in pending:
                log.warning("request cancelled at shutdown", task=task.get_name())
                task.cancel()

    async def _on_request(
        self,
        method: MethodDescriptor,
        handler: Callable[..., Awaitable[Any]],
        subject: str,
        msg: Msg,
    ) -> None:
        # Requests run concurrently: a slow one (a peek) must not hold up the rest.
        task = asyncio.create_task(self._handle(method, handler, subject, msg), name=subject)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(
        self,
        method: MethodDescriptor,
        handler: Callable[..., Awaitable[Any]],
        subject: str,
        msg: Msg,
    ) -> None:
        request = decode(message_class(method.input_type), msg.data, subject=subject)
        if request is None:
            REQUESTS.labels(method=method.full_name, outcome="malformed").inc()
            await self._reply_error(msg, "INVALID_ARGUMENT", "malformed request")
            return
        try:
            response = await handler(request, NatsCallContext(subject, msg.headers))
        except LoupeError as error:
            REQUESTS.labels(method=method.full_name, outcome="error").inc()
            await self._reply_error(msg, error.code, error.message)
            return
        except Exception as error:
            REQUESTS.labels(method=method.full_name, outcome="internal").inc()
            log.exception("request handler failed", method=method.full_name)
            await self._reply_error(msg, "INTERNAL", f"{type(error).__name__}: {error}")
            return
        REQUESTS.labels(method=method.full_name, outcome="ok").inc()
        if msg.reply:
            with contextlib.suppress(nats.errors.ConnectionClosedError):
                await msg.respond(response.SerializeToString())

    @staticmethod
    async def _reply_error(msg: Msg, code: str, message: str) -> None:
        if not msg.reply:
            return
        headers = {STATUS_HEADER: code, MESSAGE_HEADER: message.replace("\n", " ")[:4000]}
        with contextlib.suppress(nats.errors.ConnectionClosedError):
            await msg._client.publish(msg.reply, b"", headers=headers)


class NatsServiceClient:
    """Calls a service's unary methods over NATS: ``await client.Transact(request)``."""

    def __init__(
        self,
        connection: NatsConnection,
        service: ServiceDescriptor,
        *,
        timeout: float = 10.0,
        target: str = "",
    ) -> None:
        self._nc = connection
        self._service = service
        self._timeout = timeout
        self._target = target
        self._methods = {m.name: m for m in service.methods}

    async def call(
        self, method_name: str, request: protobuf_message.Message, *, timeout: float | None = None
    ) -> Any:
        method = self._methods[method_name]
        subject = subject_for(self._service, method_name, target=self._target)
        try:
            reply = await self._nc.request(
                subject, request.SerializeToString(), timeout=timeout or self._timeout
            )
        except nats.errors.NoRespondersError:
            raise LoupeError("UNAVAILABLE", f"nothing is serving {subject}") from None
        except nats.errors.TimeoutError:
            raise LoupeError(
                "DEADLINE_EXCEEDED", f"no answer on {subject} within {timeout or self._timeout}s"
            ) from None
        headers = reply.headers or {}
        if STATUS_HEADER in headers:
            raise LoupeError(headers[STATUS_HEADER], headers.get(MESSAGE_HEADER, ""))
        response = decode(message_class(method.output_type), reply.data, subject=subject)
        if response is None:
            raise LoupeError("INTERNAL", f"malformed reply on {subject}")
        return response

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(name)
        return functools.partial(self.call, name)


async def publish(
    connection: NatsConnection, subject: str, message: protobuf_message.Message
) -> None:
    await connection.publish(subject, message.SerializeToString())


async def subscribe(
    connection: NatsConnection,
    subject: str,
    cls: type[M],
    handler: Callable[[M, Msg], Awaitable[None]],
    *,
    queue: str = "",
) -> Subscription:
    """Subscribe to protobuf messages of ``cls``; malformed ones are counted and dropped.

    A handler's exception is logged and the subscription keeps going.
    """

    async def callback(msg: Msg) -> None:
        decoded = decode(cls, msg.data, subject=msg.subject)
        if decoded is None:
            return
        try:
            await handler(decoded, msg)
        except Exception:
            log.exception("message handler failed", subject=msg.subject)

    return await connection.subscribe(subject, queue=queue, cb=callback)


async def ensure_stream(
    connection: NatsConnection, name: str, subjects: list[str], **config: Any
) -> None:
    """Create (or update) a JetStream stream."""
    js = connection.jetstream()
    try:
        await js.add_stream(name=name, subjects=subjects, **config)
    except nats.js.errors.BadRequestError:
        await js.update_stream(name=name, subjects=subjects, **config)


async def publish_durable(
    connection: NatsConnection, subject: str, message: protobuf_message.Message, *, message_id: str
) -> None:
    """Publish through JetStream, de-duplicated by ``message_id``; returns once stored."""
    await connection.jetstream().publish(
        subject, message.SerializeToString(), headers={"Nats-Msg-Id": message_id}
    )
