"""The NATS transport: request/reply of protobuf services, errors, malformed input."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from loupe.common.errors import LoupeError
from loupe.common.transport import NatsServiceClient, NatsServiceEndpoint, subject_for
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2

SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]


class EchoCatalog:
    """A servicer answering Epoch and failing ReadTimestamp, as gRPC servicers do."""

    async def Epoch(self, request, context):
        return catalog_pb2.EpochResponse(epoch=7, deploy_generation=1)

    async def ReadTimestamp(self, request, context):
        await context.abort(type("Code", (), {"name": "FAILED_PRECONDITION"})(), "no oracle")


def malformed_count(subject: str) -> float:
    return (
        REGISTRY.get_sample_value("loupe_bus_malformed_messages_total", {"subject": subject}) or 0.0
    )


def test_subject_drops_the_proto_segment():
    """Subjects are versioned per service and method."""
    assert subject_for(SERVICE, "Transact") == "loupe.catalog.v1.Catalog.Transact"
    assert subject_for(SERVICE, "Transact", target="x") == "loupe.catalog.v1.Catalog.x.Transact"


async def test_request_reply_round_trip(nats_connection):
    """A servicer reached over NATS answers like it would over gRPC."""
    endpoint = NatsServiceEndpoint(nats_connection, SERVICE, EchoCatalog())
    await endpoint.start()
    try:
        client = NatsServiceClient(nats_connection, SERVICE, timeout=2)
        reply = await client.Epoch(common_pb2.Empty())
        assert (reply.epoch, reply.deploy_generation) == (7, 1)
        with pytest.raises(LoupeError) as raised:
            await client.ReadTimestamp(common_pb2.Empty())
        assert raised.value.code == "FAILED_PRECONDITION"
        assert "no oracle" in raised.value.message
    finally:
        await endpoint.stop()


async def test_garbage_is_counted_and_service_keeps_serving(nats_connection):
    """Bytes that are not a protobuf get an error reply, a metric, and no crash."""
    endpoint = NatsServiceEndpoint(nats_connection, SERVICE, EchoCatalog())
    await endpoint.start()
    subject = subject_for(SERVICE, "Epoch")
    try:
        before = malformed_count(subject)
        reply = await nats_connection.request(subject, b"\xff\xff\xff\xff garbage", timeout=2)
        assert reply.headers["Loupe-Status"] == "INVALID_ARGUMENT"
        assert malformed_count(subject) == before + 1
        client = NatsServiceClient(nats_connection, SERVICE, timeout=2)
        assert (await client.Epoch(common_pb2.Empty())).epoch == 7
    finally:
        await endpoint.stop()


async def test_nothing_listening_is_a_clear_error(nats_connection):
    """A call with no service behind it fails fast with UNAVAILABLE."""
    client = NatsServiceClient(nats_connection, SERVICE, timeout=2, target="nobody")
    with pytest.raises(LoupeError) as raised:
        await client.Epoch(common_pb2.Empty())
    assert raised.value.code == "UNAVAILABLE"
