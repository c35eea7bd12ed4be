"""The catalog service over a real NATS server and a real gRPC port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY

from loupe.builtins import BUILTIN_COLLECTIONS
from loupe.catalog import create_backend
from loupe.catalog.backends.sqlite import SqliteCatalogBackend
from loupe.catalog.service import (
    CHANGES_SUBJECT,
    EXIT_FENCED,
    CatalogService,
    CatalogSettings,
)
from loupe.catalog.servicer import SERVICE, SERVICE_NAME
from loupe.cli.main import main
from loupe.common.errors import LoupeError
from loupe.common.transport import STATUS_HEADER, NatsServiceClient, subject_for
from loupe.proto.catalog.v1 import catalog_pb2, catalog_pb2_grpc
from loupe.proto.common.v1 import common_pb2
from loupe.testing import assert_eventually


@contextlib.asynccontextmanager
async def running(
    data_dir: Path, nats_url: str, leadership_check_interval: float = 0.1, **settings_fields: Any
) -> AsyncIterator[CatalogService]:
    """A catalog service in this process, serving until the block ends."""
    settings = CatalogSettings(
        data_dir=data_dir,
        nats_url=nats_url,
        grpc_port=0,
        metrics_port=0,
        leadership_check_interval=leadership_check_interval,
        **settings_fields,
    )
    service = CatalogService(settings)
    task = asyncio.create_task(service.run())

    def ready() -> None:
        assert not task.done(), "the catalog service stopped during start-up"
        assert (data_dir / "run" / "catalog.ready.json").exists()

    await assert_eventually(ready, timeout=15)
    try:
        yield service
    finally:
        service.shutdown()
        await asyncio.wait_for(task, timeout=15)


@pytest.fixture
async def service(data_dir: Path, nats_url: str) -> AsyncIterator[CatalogService]:
    async with running(data_dir, nats_url) as service:
        yield service


@pytest.fixture
def client(nats_connection: Any) -> NatsServiceClient:
    return NatsServiceClient(nats_connection, SERVICE, timeout=5.0)


def create_cluster(name: str, **fields: Any) -> catalog_pb2.CatalogOp:
    return catalog_pb2.CatalogOp(
        create_cluster=catalog_pb2.CreateCluster(cluster=catalog_pb2.Cluster(name=name, **fields))
    )


async def test_transact_and_snapshot_over_nats(
    service: CatalogService, client: NatsServiceClient
) -> None:
    """A managed cluster created over NATS appears in the reply and in later snapshots."""
    response = await client.Transact(
        catalog_pb2.TransactRequest(ops=[create_cluster("c", size="2", replication_factor=2)])
    )
    assert response.timestamp > 0
    kinds = [(change.WhichOneof("kind")) for change in response.changes]
    assert kinds == ["cluster_created", "replica_created", "replica_created"]
    assert response.changes[0].cluster_created.id == "u2"
    snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
    assert snapshot.timestamp == response.timestamp
    assert snapshot.epoch == 1
    assert [c.name for c in snapshot.clusters] == ["mz_catalog_server", "quickstart", "c"]
    assert sorted(
        (r.cluster_id, r.name, r.size) for r in snapshot.replicas if r.cluster_id == "u2"
    ) == [
        ("u2", "r1", "2"),
        ("u2", "r2", "2"),
    ]
    # The commit's snapshot also carries its audit events; a Snapshot answer never does.
    assert len(response.snapshot.new_audit_events) == 3
    committed = catalog_pb2.CatalogSnapshot()
    committed.CopyFrom(response.snapshot)
    committed.ClearField("new_audit_events")
    assert committed == snapshot
    timestamp = await client.ReadTimestamp(common_pb2.Empty())
    assert timestamp.timestamp == response.timestamp
    epoch = await client.Epoch(common_pb2.Empty())
    assert (epoch.epoch, epoch.deploy_generation) == (1, 0)


async def test_catalog_errors_carry_their_sqlstate(
    service: CatalogService, client: NatsServiceClient
) -> None:
    """A duplicate cluster is refused with 42710, and nothing of the transaction stays."""
    request = catalog_pb2.TransactRequest(
        ops=[create_cluster("fresh"), create_cluster("quickstart")]
    )
    with pytest.raises(LoupeError) as caught:
        await client.Transact(request)
    assert (caught.value.code, caught.value.message) == (
        "42710",
        'cluster "quickstart" already exists',
    )
    snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
    assert "fresh" not in [c.name for c in snapshot.clusters]


async def test_garbage_bytes_get_an_error_reply_and_the_service_keeps_serving(
    service: CatalogService, client: NatsServiceClient, nats_connection: Any
) -> None:
    """Undecodable bytes on the Transact subject are answered, counted, and survived."""
    subject = subject_for(SERVICE, "Transact")
    labels = {"subject": subject}
    before = REGISTRY.get_sample_value("loupe_bus_malformed_messages_total", labels) or 0
    reply = await nats_connection.request(subject, b"\x0a\xff garbage", timeout=5)
    assert reply.headers[STATUS_HEADER] == "INVALID_ARGUMENT"
    assert REGISTRY.get_sample_value("loupe_bus_malformed_messages_total", labels) == before + 1
    response = await client.Transact(catalog_pb2.TransactRequest(ops=[create_cluster("after")]))
    assert response.changes[0].cluster_created.name == "after"


async def test_every_commit_is_published_on_the_changes_subject(
    service: CatalogService, client: NatsServiceClient, nats_connection: Any
) -> None:
    """Followers receive the new snapshot after each commit."""
    received: list[catalog_pb2.CatalogSnapshot] = []

    async def on_message(msg: Any) -> None:
        received.append(catalog_pb2.CatalogSnapshot.FromString(msg.data))

    subscription = await nats_connection.subscribe(CHANGES_SUBJECT, cb=on_message)
    try:
        response = await client.Transact(
            catalog_pb2.TransactRequest(ops=[create_cluster("followed", size="1")])
        )

        def published() -> None:
            assert any(s.timestamp == response.timestamp for s in received)

        await assert_eventually(published, timeout=5)
        latest = next(s for s in received if s.timestamp == response.timestamp)
        assert "followed" in [c.name for c in latest.clusters]
    finally:
        await subscription.unsubscribe()


async def test_grpc_admin_port_reports_serving_and_serves_the_catalog(
    service: CatalogService,
) -> None:
    """Health checks answer SERVING; Snapshot works over gRPC too."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        snapshot = await catalog_pb2_grpc.CatalogStub(channel).Snapshot(
            catalog_pb2.SnapshotRequest(), timeout=5
        )
        assert {c.name for c in snapshot.clusters} == {"mz_catalog_server", "quickstart"}


async def test_builtin_objects_are_recorded_at_start(service: CatalogService) -> None:
    """The service stores the builtin collections' ids as system object mappings."""
    assert service.catalog is not None
    mappings = {m.object_name: m.id for m in service.catalog.get_system_object_mappings()}
    assert mappings == {c.name: c.id for c in BUILTIN_COLLECTIONS}


async def test_ready_file_names_the_ports(service: CatalogService, data_dir: Path) -> None:
    """``loupe up`` learns the gRPC and metrics ports from the ready file."""
    ready = json.loads((data_dir / "run" / "catalog.ready.json").read_text())
    assert ready["grpc_port"] == service.grpc_port
    assert ready["metrics_port"] == service.metrics_port


async def test_service_halts_when_another_writer_opens_the_catalog(
    data_dir: Path, nats_url: str, client: NatsServiceClient
) -> None:
    """Opening the store elsewhere fences the running service, which exits non-zero."""
    async with running(data_dir, nats_url) as service:
        other = SqliteCatalogBackend(data_dir)
        other.open()
        try:
            await assert_eventually(lambda: _assert_stopped(service), timeout=10)
            assert service.exit_code == EXIT_FENCED
            assert service.fenced is not None
            assert (service.fenced.ours.epoch, service.fenced.current.epoch) == (1, 2)
        finally:
            other.close()


def _assert_stopped(service: CatalogService) -> None:
    assert service.fenced is not None
    assert service.stopping


async def test_fenced_commit_is_refused_and_halts_the_service(
    data_dir: Path, nats_url: str, client: NatsServiceClient
) -> None:
    """A commit that finds a newer epoch is answered UNAVAILABLE naming both tokens."""
    async with running(data_dir, nats_url, leadership_check_interval=3600) as service:
        other = SqliteCatalogBackend(data_dir)
        other.open()
        try:
            with pytest.raises(LoupeError) as caught:
                await client.Transact(catalog_pb2.TransactRequest(ops=[create_cluster("late")]))
            assert caught.value.code == "UNAVAILABLE"
            assert "(deploy_generation=0, epoch=1)" in caught.value.message
            assert "(deploy_generation=0, epoch=2)" in caught.value.message
            await assert_eventually(lambda: _assert_stopped(service), timeout=10)
            assert service.exit_code == EXIT_FENCED
        finally:
            other.close()
    reader = SqliteCatalogBackend(data_dir)
    reader.open_read_only()
    assert "late" not in [c.name for c in reader.get_clusters()]
    reader.close()


async def test_snapshot_carries_databases_schemas_and_roles(
    service: CatalogService, client: NatsServiceClient
) -> None:
    """Followers learn the databases, schemas and roles from every snapshot."""
    snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
    assert [(d.id, d.name, d.owner_id) for d in snapshot.databases] == [("u1", "materialize", "u1")]
    assert ("u1", "public", "u1") in [(s.id, s.name, s.database_id) for s in snapshot.schemas]
    assert ("s2", "mz_internal", "") in [(s.id, s.name, s.database_id) for s in snapshot.schemas]
    assert [(r.id, r.name) for r in snapshot.roles] == [
        ("s1", "mz_system"),
        ("s2", "mz_monitor"),
        ("s3", "mz_monitor_redacted"),
        ("u1", "materialize"),
    ]
    assert list(snapshot.new_audit_events) == []


async def test_commits_publish_their_audit_events_and_the_log_can_be_listed(
    service: CatalogService, client: NatsServiceClient, nats_connection: Any
) -> None:
    """The published snapshot carries the commit's events; ListAuditEvents pages by id."""
    received: list[catalog_pb2.CatalogSnapshot] = []

    async def on_message(msg: Any) -> None:
        received.append(catalog_pb2.CatalogSnapshot.FromString(msg.data))

    subscription = await nats_connection.subscribe(CHANGES_SUBJECT, cb=on_message)
    try:
        response = await client.Transact(
            catalog_pb2.TransactRequest(
                ops=[create_cluster("audited", size="2", replication_factor=1)], user="alice"
            )
        )
        events = list(response.snapshot.new_audit_events)
        assert [(e.event_type, e.object_type, e.user) for e in events] == [
            ("create", "cluster", "alice"),
            ("create", "cluster-replica", "alice"),
        ]
        assert {e.occurred_at for e in events} == {response.timestamp}
        replica = json.loads(events[1].details_json)
        assert replica == {
            "cluster_id": "u2",
            "cluster_name": "audited",
            "replica_id": "u2",
            "replica_name": "r1",
            "logical_size": "2",
        }

        def published() -> None:
            assert any(s.timestamp == response.timestamp for s in received)

        await assert_eventually(published, timeout=5)
        latest = next(s for s in received if s.timestamp == response.timestamp)
        assert list(latest.new_audit_events) == events
    finally:
        await subscription.unsubscribe()
    listed = await client.ListAuditEvents(catalog_pb2.ListAuditEventsRequest(after_id=0))
    assert [e.id for e in listed.events] == [1, 2, 3, 4, 5, 6]
    assert list(listed.events)[4:] == events
    later = await client.ListAuditEvents(catalog_pb2.ListAuditEventsRequest(after_id=5))
    assert [e.id for e in later.events] == [6]


async def test_edit_object_edits_through_the_running_service(
    service: CatalogService, client: NatsServiceClient, nats_connection: Any
) -> None:
    """EditObject stores the validated object, answers the old value, publishes a snapshot."""
    received: list[catalog_pb2.CatalogSnapshot] = []

    async def on_message(msg: Any) -> None:
        received.append(catalog_pb2.CatalogSnapshot.FromString(msg.data))

    subscription = await nats_connection.subscribe(CHANGES_SUBJECT, cb=on_message)
    try:
        value = json.dumps({"name": "materialize", "owner_id": "s1"})
        response = await client.EditObject(
            catalog_pb2.EditObjectRequest(kind="database", key_json='{"id":"u1"}', value_json=value)
        )
        assert json.loads(response.old_value_json) == {"name": "materialize", "owner_id": "u1"}

        def published() -> None:
            assert any(d.owner_id == "s1" for s in received for d in s.databases)

        await assert_eventually(published, timeout=5)
    finally:
        await subscription.unsubscribe()
    snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
    assert [(d.name, d.owner_id) for d in snapshot.databases] == [("materialize", "s1")]
    assert service.fenced is None


async def test_edit_object_refuses_bad_values_and_missing_objects(
    service: CatalogService, client: NatsServiceClient
) -> None:
    """A value that does not decode is INVALID_ARGUMENT; deleting nothing is NOT_FOUND."""
    before = await client.ReadTimestamp(common_pb2.Empty())
    with pytest.raises(LoupeError) as caught:
        await client.EditObject(
            catalog_pb2.EditObjectRequest(
                kind="database", key_json='{"id":"u1"}', value_json='{"name": 5}'
            )
        )
    assert caught.value.code == "INVALID_ARGUMENT"
    assert "Database is missing owner_id" in caught.value.message
    with pytest.raises(LoupeError) as caught:
        await client.EditObject(catalog_pb2.EditObjectRequest(kind="role", key_json='{"id":"u9"}'))
    assert caught.value.code == "NOT_FOUND"
    after = await client.ReadTimestamp(common_pb2.Empty())
    assert after.timestamp == before.timestamp


async def test_cooperative_debug_tool_edit_keeps_the_service_running(
    service: CatalogService, client: NatsServiceClient, nats_url: str, data_dir: Path
) -> None:
    """loupe catalog edit --cooperative goes through EditObject: no fencing, old value printed."""
    args = [
        "catalog",
        "--data-dir",
        str(data_dir),
        "edit",
        "system_configuration",
        '{"name": "max_clusters"}',
        '{"value": "12"}',
        "--cooperative",
        "--nats-url",
        nats_url,
    ]
    assert await asyncio.to_thread(main, args) == 0
    assert await asyncio.to_thread(main, args) == 0
    assert service.catalog is not None
    assert [(v.name, v.value) for v in service.catalog.get_system_configurations()] == [
        ("max_clusters", "12")
    ]
    assert service.fenced is None
    epoch = await client.Epoch(common_pb2.Empty())
    assert epoch.epoch == 1


async def test_debug_tool_edit_without_cooperation_fences_the_service(
    data_dir: Path, nats_url: str
) -> None:
    """A plain loupe catalog edit opens the catalog for writing: the service halts."""
    async with running(data_dir, nats_url) as service:
        args = [
            "catalog",
            "--data-dir",
            str(data_dir),
            "edit",
            "setting",
            '{"name": "note"}',
            '{"value": "hello"}',
        ]
        assert await asyncio.to_thread(main, args) == 0
        await assert_eventually(lambda: _assert_stopped(service), timeout=10)
        assert service.exit_code == EXIT_FENCED
        assert service.fenced is not None
        assert service.fenced.current.epoch == 2


async def test_newer_deploy_generation_makes_the_service_step_down_cleanly(
    data_dir: Path, nats_url: str
) -> None:
    """A writer of a newer deploy generation takes over; the service exits 0."""
    async with running(data_dir, nats_url) as service:
        newer = SqliteCatalogBackend(data_dir, deploy_generation=1)
        newer.open()
        try:
            await assert_eventually(lambda: _assert_stopped(service), timeout=10)
            assert service.exit_code == 0
            assert service.fenced is not None
            assert service.fenced.by_newer_deploy
        finally:
            newer.close()


async def test_service_runs_on_the_postgres_backend_chosen_by_settings(
    data_dir: Path, nats_url: str, postgres_url: str, client: NatsServiceClient
) -> None:
    """catalog_backend + postgres_url settings put the service's catalog in PostgreSQL."""
    schema = f"loupe_service_{uuid.uuid4().hex[:8]}"
    async with running(
        data_dir,
        nats_url,
        catalog_backend="stash-postgres",
        postgres_url=postgres_url,
        postgres_schema=schema,
    ):
        await client.Transact(catalog_pb2.TransactRequest(ops=[create_cluster("in_pg", size="1")]))
    # Nothing went to SQLite; the cluster is in the PostgreSQL schema.
    assert not (data_dir / "catalog" / "catalog.sqlite").exists()
    stored = create_backend(
        "stash-postgres", data_dir, postgres_url=postgres_url, postgres_schema=schema
    )
    stored.open_read_only()
    try:
        assert "in_pg" in {c.name for c in stored.get_clusters()}
    finally:
        stored.close()


def create_table_op(name: str, schema_id: str = "u1") -> catalog_pb2.CatalogOp:
    return catalog_pb2.CatalogOp(
        create_item=catalog_pb2.CreateItem(
            item=catalog_pb2.Item(
                schema_id=schema_id,
                name=name,
                type="table",
                create_sql=f'CREATE TABLE "materialize"."public"."{name}" ("a" integer)',
            )
        )
    )


async def test_items_are_created_and_dropped_over_nats(
    service: CatalogService, client: NatsServiceClient
) -> None:
    """CreateItem gets its id from the catalog; items show in snapshots, changes and the audit log."""
    created = await client.Transact(
        catalog_pb2.TransactRequest(ops=[create_table_op("t")], user="alice")
    )
    (change,) = created.changes
    assert change.WhichOneof("kind") == "item_created"
    item = change.item_created
    assert (item.id, item.name, item.type, item.owner_id) == ("u1", "t", "table", "u1")
    assert list(created.snapshot.items) == [item]
    (event,) = created.snapshot.new_audit_events
    assert (event.event_type, event.object_type, event.user) == ("create", "table", "alice")
    assert json.loads(event.details_json) == {
        "id": "u1",
        "name": {"database": "materialize", "schema": "public", "item": "t"},
    }
    snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
    assert [(i.id, i.name) for i in snapshot.items] == [("u1", "t")]

    with pytest.raises(LoupeError) as duplicate:
        await client.Transact(catalog_pb2.TransactRequest(ops=[create_table_op("t")]))
    assert duplicate.value.code == "42710"
    with pytest.raises(LoupeError) as unknown_schema:
        await client.Transact(catalog_pb2.TransactRequest(ops=[create_table_op("x", "u9")]))
    assert unknown_schema.value.code == "42704"

    drop = catalog_pb2.CatalogOp(drop_item=catalog_pb2.DropItem(id="u1"))
    dropped = await client.Transact(catalog_pb2.TransactRequest(ops=[drop], user="bob"))
    assert [c.WhichOneof("kind") for c in dropped.changes] == ["item_dropped"]
    assert dropped.changes[0].item_dropped == item
    assert list(dropped.snapshot.items) == []
    assert [(e.event_type, e.object_type, e.user) for e in dropped.snapshot.new_audit_events] == [
        ("drop", "table", "bob")
    ]
    with pytest.raises(LoupeError) as gone:
        await client.Transact(catalog_pb2.TransactRequest(ops=[drop]))
    assert gone.value.code == "42704"
    # Ids are never reused.
    again = await client.Transact(catalog_pb2.TransactRequest(ops=[create_table_op("t")]))
    assert again.changes[0].item_created.id == "u2"


async def test_write_timestamps_advance_reads_survive_restarts_and_publish_nothing(
    data_dir: Path, nats_url: str, client: NatsServiceClient, nats_connection: Any
) -> None:
    """WriteTimestamp is durable, strictly increasing and moves ReadTimestamp; no change is published."""
    received: list[bytes] = []

    async def on_message(msg: Any) -> None:
        received.append(msg.data)

    async with running(data_dir, nats_url):
        subscription = await nats_connection.subscribe(CHANGES_SUBJECT, cb=on_message)
        try:
            stamps = [(await client.WriteTimestamp(common_pb2.Empty())).timestamp for _ in range(5)]
            read = await client.ReadTimestamp(common_pb2.Empty())
            await nats_connection.flush()
        finally:
            await subscription.unsubscribe()
        assert stamps == sorted(set(stamps))
        assert read.timestamp == stamps[-1]
        assert received == []
        snapshot = await client.Snapshot(catalog_pb2.SnapshotRequest())
        assert snapshot.timestamp == stamps[-1]
        committed = await client.Transact(catalog_pb2.TransactRequest(ops=[create_table_op("t")]))
        assert committed.timestamp > stamps[-1]
    # The first run's ready file would make `running` return before the second one serves.
    (data_dir / "run" / "catalog.ready.json").unlink(missing_ok=True)
    async with running(data_dir, nats_url):
        after_restart = await client.WriteTimestamp(common_pb2.Empty())
        assert after_restart.timestamp > committed.timestamp
