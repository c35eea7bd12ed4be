"""gRPC servers answer health and reflection; /metrics serves Prometheus text;
JetStream publishes are durable and de-duplicated by message id."""

from __future__ import annotations

import urllib.request
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from loupe.common.errors import LoupeError
from loupe.common.grpc_server import GrpcServer, translate_errors
from loupe.common.metrics import MALFORMED_MESSAGES, serve_metrics
from loupe.common.transport import ensure_stream, publish_durable
from loupe.proto.catalog.v1 import catalog_pb2_grpc
from loupe.proto.common.v1 import common_pb2


class FailingCatalog(catalog_pb2_grpc.CatalogServicer):
    async def Epoch(self, request, context):
        raise LoupeError("FAILED_PRECONDITION", "catalog is not open")


async def test_grpc_server_serves_health_reflection_and_translates_errors():
    """Every gRPC server answers the standard health and reflection services."""
    server = GrpcServer("127.0.0.1", 0)
    server.add(
        catalog_pb2_grpc.add_CatalogServicer_to_server,
        translate_errors(FailingCatalog()),
        "loupe.proto.catalog.v1.Catalog",
    )
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service="loupe.proto.catalog.v1.Catalog")
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
            names = {s.name for s in responses[0].list_services_response.service}
            assert "loupe.proto.catalog.v1.Catalog" in names
            assert "grpc.health.v1.Health" in names

            catalog = catalog_pb2_grpc.CatalogStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await catalog.Epoch(common_pb2.Empty())
            assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert raised.value.details() == "catalog is not open"
    finally:
        await server.stop(grace=0.1)


def test_metrics_endpoint_serves_loupe_counters():
    """Each service's /metrics shows its counters in Prometheus text format."""
    MALFORMED_MESSAGES.labels(subject="test.metrics").inc()
    port = serve_metrics(0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    assert 'loupe_bus_malformed_messages_total{subject="test.metrics"}' in body


async def test_jetstream_publish_is_deduplicated_by_message_id(nats_connection):
    """A replayed publish with the same id is stored once."""
    stream = f"TEST_{uuid.uuid4().hex[:8]}"
    subject = f"loupe.test.{stream}"
    await ensure_stream(nats_connection, stream, [subject])
    await ensure_stream(nats_connection, stream, [subject])  # idempotent
    message = common_pb2.Error(code="x", message="hello")
    for _ in range(3):
        await publish_durable(nats_connection, subject, message, message_id="batch-1")
    await publish_durable(nats_connection, subject, message, message_id="batch-2")
    info = await nats_connection.jetstream().stream_info(stream)
    assert info.state.messages == 2
