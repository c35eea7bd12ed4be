"""The controller service: compute controller + storage writer, served on NATS.

Start-up: NATS, Spark and the storage writer, the orchestrator and the compute
controller (which reads the status rows a previous run left), the
``Controller`` API on NATS and the catalog's change feed, then the catalog
snapshot (retried while the catalog starts) whose replicas it starts; then it
is ready. Both the change feed (``loupe.catalog.v1.changes``) and
``Controller.ApplyCatalog`` converge the set of replicas on a catalog
snapshot; snapshots older than the last one applied are skipped.

Shutdown, in order: stop serving, stop the replicas (their statuses go
``offline``), flush the writer one last time, close NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg

from loupe import sizes
from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    INTROSPECTION_COLLECTIONS,
    MZ_OBJECT_HYDRATION_HISTORY,
    MZ_REPLICA_HYDRATION_HISTORY,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STATEMENT_LIFECYCLE_HISTORY,
    BuiltinCollection,
)
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.metrics import serve_metrics
from loupe.common.service import Service, remove_ready_file, write_ready_file
from loupe.common.settings import BaseSettings
from loupe.common.spark import shutdown_spark
from loupe.common.system_vars import system_value
from loupe.common.transport import (
    NatsServiceClient,
    NatsServiceEndpoint,
    connect,
    publish,
    subscribe,
)
from loupe.controller.compute import ClusterInfo, ComputeController
from loupe.controller.orchestrators.base import Orchestrator, ReplicaSpec, load_orchestrator
from loupe.persist.location import Blob, Consensus, default_uris, open_location
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2

log = get_logger(__name__)

# The statement log collections ``statement_logging_retention`` applies to.
STATEMENT_LOG_RETAINED = (MZ_STATEMENT_EXECUTION_HISTORY.id, MZ_STATEMENT_LIFECYCLE_HISTORY.id)
# System variable -> the collections whose retention it sets.
RETENTION_VARIABLES: dict[str, tuple[str, ...]] = {
    "statement_logging_retention": STATEMENT_LOG_RETAINED,
    "introspection_retention": tuple(c.id for c in INTROSPECTION_COLLECTIONS),
    # Object episodes expire by finished_at in the writer, replica episodes in the
    # controller (``hydration.py`` says why).
    "hydration_history_retention": (
        MZ_REPLICA_HYDRATION_HISTORY.id,
        MZ_OBJECT_HYDRATION_HISTORY.id,
    ),
}

CONTROLLER_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["Controller"]
CATALOG_SERVICE = catalog_pb2.DESCRIPTOR.services_by_name["Catalog"]
CATALOG_CHANGES_SUBJECT = "loupe.catalog.v1.changes"
CONTROLLER_STARTED_SUBJECT = "loupe.controller.v1.started"
CATALOG_RETRY_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


@dataclasses.dataclass
class ControllerSettings(BaseSettings):
    """Settings of the controller (TOML section ``controller``)."""

    # The orchestrator plugin (entry point group ``loupe.orchestrators``).
    orchestrator: str = "process"
    storage_flush_interval: float = 1.0
    # An idle storage writer moves uppers this often without writing data, so
    # reads of system relations wait at most this long; 0 disables.
    storage_upper_interval: float = 0.25
    # The writer's input stream (JetStream) and its subject.
    storage_stream: str = "LOUPE_STORAGE"
    storage_subject: str = "loupe.storage.v1.updates"
    # Seconds between compactions (since downgrades, merges, history retention).
    storage_compaction_interval: float = 60.0
    # A Spark job of the storage writer running longer is cancelled (and its
    # JVM killed and the session rebuilt if cancelling does not end it).
    storage_spark_job_timeout: float = 120.0
    # A replica without a heartbeat for this long is offline and restarted.
    heartbeat_timeout: float = 5.0
    # Time a new incarnation has to send its first heartbeat.
    replica_startup_timeout: float = 30.0
    # mz_cluster_replica_metrics changes at most this often per replica (every
    # heartbeat carries metrics; each change is a storage write).
    replica_metrics_interval: float = 5.0
    # A silent replica whose process is busy (using CPU) is left this long
    # before a restart; so is one whose command loop stopped (liveness.py).
    replica_busy_timeout: float = 60.0
    # SIGTERM to SIGKILL, when stopping a replica.
    replica_terminate_grace: float = 5.0
    # How long start-up waits for the catalog service.
    catalog_wait: float = 30.0
    # Empty: under the data dir (``loupe.persist.location.default_uris``).
    blob_uri: str = ""
    consensus_uri: str = ""

    def storage_uris(self) -> tuple[str, str]:
        default_blob, default_consensus = default_uris(self.data_dir)
        return self.blob_uri or default_blob, self.consensus_uri or default_consensus


# Builds the storage writer from (blob, consensus, flush_interval); the default
# starts Spark and uses ``loupe.controller.storage.StorageWriter``.
WriterFactory = Callable[[Blob, Consensus, float], Any]


class ControllerService(Service):
    """The controller process."""

    name = "controller"

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        writer_factory: WriterFactory | None = None,
        orchestrator: Orchestrator | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self._writer_factory = writer_factory
        self._orchestrator = orchestrator
        self.compute: ComputeController | None = None
        self.writer: Any = None
        self.metrics_port: int | None = None

    async def serve(self) -> None:
        settings = self.settings
        blob_uri, consensus_uri = settings.storage_uris()
        log.info("controller starting", settings=settings.describe())
        async with contextlib.AsyncExitStack() as stack:
            nc = await connect(settings.nats_url, name="loupe-controller")
            stack.push_async_callback(_close, nc)
            self.metrics_port = serve_metrics(settings.metrics_port, settings.metrics_host)

            blob, consensus = open_location(blob_uri, consensus_uri)
            if self._writer_factory is None:
                # After the writer's last flush (the stack unwinds in reverse): no JVM
                # outlives the controller.
                stack.push_async_callback(asyncio.to_thread, shutdown_spark)
            self.writer = await self._open_writer(blob, consensus, nc)
            await self.writer.start()
            stack.push_async_callback(self.writer.stop)
            if self.stopping:
                return

            orchestrator = self._orchestrator or load_orchestrator(settings.orchestrator, settings)
            # Fresh at every start: in ControllerStarted and in the peek routes.
            boot_id = uuid.uuid4().hex
            self.compute = ComputeController(
                nc,
                orchestrator,
                self.writer,
                blob_uri=blob_uri,
                consensus_uri=consensus_uri,
                heartbeat_timeout=settings.heartbeat_timeout,
                startup_timeout=settings.replica_startup_timeout,
                busy_timeout=settings.replica_busy_timeout,
                metrics_interval=settings.replica_metrics_interval,
                boot_id=boot_id,
            )
            await self.compute.start()
            stack.push_async_callback(self.compute.stop)

            follower = CatalogFollower(self.compute, self.writer)
            servicer = ControllerServicer(
                self.compute, follower, self.writer, blob_uri, consensus_uri
            )
            endpoint = NatsServiceEndpoint(nc, CONTROLLER_SERVICE, servicer)
            await endpoint.start()
            stack.push_async_callback(endpoint.stop)
            # Before the endpoint drains: waiting peeks answer at once, and their
            # callers ask the next controller instead of waiting out the grace.
            stack.callback(
                self.compute.peeks.fail_all,
                LoupeError("UNAVAILABLE", "the controller is shutting down"),
            )
            changes = await subscribe(
                nc, CATALOG_CHANGES_SUBJECT, catalog_pb2.CatalogSnapshot, follower.on_change
            )
            stack.push_async_callback(_unsubscribe, changes)

            snapshot = await self._fetch_catalog(nc)
            if snapshot is None:
                return
            await follower.apply(snapshot)

            write_ready_file(settings.data_dir, "controller", metrics_port=self.metrics_port)
            stack.callback(remove_ready_file, settings.data_dir, "controller")
            # Coordinators send their dataflows again: this process has none yet.
            await publish(
                nc,
                CONTROLLER_STARTED_SUBJECT,
                controller_pb2.ControllerStarted(
                    boot_id=boot_id, started_at=time.time_ns() // 1_000_000
                ),
            )
            log.info(
                "controller ready",
                replicas=self.compute.replica_ids(),
                metrics_port=self.metrics_port,
            )
            await self.wait_for_shutdown()
            log.info("controller stopping")
        log.info("controller stopped")

    async def _open_writer(self, blob: Blob, consensus: Consensus, nc: NatsConnection) -> Any:
        settings = self.settings
        interval = settings.storage_flush_interval
        if self._writer_factory is not None:
            return self._writer_factory(blob, consensus, interval)
        from loupe.common.spark import get_spark
        from loupe.controller.storage import (
            SparkPartStore,
            SparkSupervisor,
            StorageWriter,
            StreamConfig,
        )
        from loupe.persist.listen import nats_upper_notifier

        began = time.monotonic()
        # Spark's scratch space is the controller's, not a shared /tmp a cleaner may empty.
        scratch = settings.data_dir / "spark"
        spark = await asyncio.to_thread(get_spark, scratch_dir=scratch)
        log.info("spark started", seconds=round(time.monotonic() - began, 1), scratch=str(scratch))
        supervisor = SparkSupervisor(spark, job_timeout=settings.storage_spark_job_timeout)
        return StorageWriter(
            spark,
            blob,
            consensus,
            nc,
            stream=StreamConfig(name=settings.storage_stream, subject=settings.storage_subject),
            flush_interval=interval,
            upper_interval=settings.storage_upper_interval,
            compaction_interval=settings.storage_compaction_interval,
            notify=nats_upper_notifier(nc),
            part_store=SparkPartStore(supervisor),
        )

    async def _fetch_catalog(self, nc: NatsConnection) -> catalog_pb2.CatalogSnapshot | None:
        """The catalog snapshot, retried while the catalog service starts; None on shutdown."""
        client = NatsServiceClient(nc, CATALOG_SERVICE, timeout=5.0)
        deadline = time.monotonic() + self.settings.catalog_wait
        delay = 0.1
        while True:
            try:
                return await client.Snapshot(catalog_pb2.SnapshotRequest())  # type: ignore[no-any-return]
            except LoupeError as error:
                if error.code not in CATALOG_RETRY_CODES or time.monotonic() >= deadline:
                    raise LoupeError(
                        error.code, f"cannot read the catalog: {error.message}"
                    ) from None
                log.info("waiting for the catalog service", error=error.message)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_for_shutdown(), delay)
            if self.stopping:
                return None
            delay = min(delay * 2, 1.0)


class CatalogFollower:
    """Applies catalog snapshots to the compute controller, newest first-come only.

    Also hands the system variables the storage writer obeys to ``writer``:
    ``statement_logging_retention`` becomes the retention of the statement
    log's execution and lifecycle collections, ``introspection_retention``
    that of the persisted replica introspection collections, ``hydration_history_retention``
    that of the two hydration histories (``RETENTION_VARIABLES``).
    """

    def __init__(self, compute: ComputeController, writer: Any = None) -> None:
        self._compute = compute
        self._writer = writer
        self._retention_ms: dict[str, int] = {}
        self._applied: tuple[int, int] | None = None
        self._lock = asyncio.Lock()

    async def apply(self, snapshot: catalog_pb2.CatalogSnapshot) -> tuple[list[str], list[str]]:
        """Converge on ``snapshot`` (skipped if older than one applied); (started, stopped)."""
        version = (snapshot.epoch, snapshot.timestamp)
        async with self._lock:
            if self._applied is not None and version < self._applied:
                log.debug("older catalog snapshot skipped", version=version, applied=self._applied)
                return [], []
            clusters, replicas = desired_state(snapshot)
            started, stopped = await self._compute.apply(clusters, replicas)
            self._apply_retention(snapshot)
            self._applied = version
        if started or stopped:
            log.info("catalog applied", version=version, started=started, stopped=stopped)
        return started, stopped

    def _apply_retention(self, snapshot: catalog_pb2.CatalogSnapshot) -> None:
        if self._writer is None or not hasattr(self._writer, "set_retention"):
            return
        for variable, collection_ids in RETENTION_VARIABLES.items():
            value = system_value(snapshot.system_configuration, variable)
            # Stored values are checked durations in seconds ("2592000.0s").
            retention_ms = int(float(value.rstrip("s")) * 1000)
            if retention_ms != self._retention_ms.get(variable):
                self._writer.set_retention(collection_ids, retention_ms)
                if variable == "hydration_history_retention":
                    # Replica episodes are expired by the controller (``hydration.py``).
                    hydration = getattr(self._compute, "hydration", None)
                    if hydration is not None:
                        hydration.retention_ms = retention_ms
                self._retention_ms[variable] = retention_ms
                log.info("retention applied", variable=variable, retention_ms=retention_ms)

    async def on_change(self, snapshot: catalog_pb2.CatalogSnapshot, _msg: Msg) -> None:
        await self.apply(snapshot)


class ControllerServicer:
    """The ``Controller`` API (proto ``controller.v1``) over the compute controller and writer."""

    def __init__(
        self,
        compute: ComputeController,
        follower: CatalogFollower,
        writer: Any,
        blob_uri: str,
        consensus_uri: str,
    ) -> None:
        self._compute = compute
        self._follower = follower
        self._writer = writer
        self._collections = [
            collection_metadata(c, blob_uri, consensus_uri) for c in BUILTIN_COLLECTIONS
        ]

    async def ApplyCatalog(
        self, request: controller_pb2.ApplyCatalogRequest, context: Any
    ) -> controller_pb2.ApplyCatalogResponse:
        if not request.HasField("snapshot"):
            # An empty catalog would mean "drop every replica": never by accident.
            raise LoupeError("INVALID_ARGUMENT", "ApplyCatalog needs a catalog snapshot")
        started, stopped = await self._follower.apply(request.snapshot)
        return controller_pb2.ApplyCatalogResponse(
            replicas_started=started, replicas_stopped=stopped
        )

    async def Peek(
        self, request: controller_pb2.PeekRequest, context: Any
    ) -> compute_pb2.PeekResponse:
        # One round of the caller's wait (``peeks.py``): the peek itself has no deadline.
        wait = request.timeout_ms / 1000 if request.timeout_ms else None
        return await self._compute.peek(
            request.cluster_id, request.peek, replica_id=request.replica_id, wait=wait
        )

    async def CancelPeek(self, request: compute_pb2.CancelPeek, context: Any) -> common_pb2.Empty:
        await self._compute.cancel_peek(request.uuid)
        return common_pb2.Empty()

    async def AppendUpdates(
        self, request: controller_pb2.AppendUpdatesRequest, context: Any
    ) -> controller_pb2.AppendUpdatesResponse:
        # Published to the writer's stream as they came (rows or columnar), once checked.
        upper = await self._writer.append_collections(request.batch_id, request.collections)
        return controller_pb2.AppendUpdatesResponse(upper=upper)

    async def ListCollections(
        self, request: common_pb2.Empty, context: Any
    ) -> controller_pb2.ListCollectionsResponse:
        return controller_pb2.ListCollectionsResponse(collections=self._collections)

    async def CreateDataflow(
        self, request: controller_pb2.CreateDataflowRequest, context: Any
    ) -> common_pb2.Empty:
        _need_cluster(request.cluster_id)
        await self._compute.create_dataflow(request.cluster_id, request.dataflow)
        return common_pb2.Empty()

    async def AllowCompaction(
        self, request: controller_pb2.AllowCompactionRequest, context: Any
    ) -> common_pb2.Empty:
        _need_cluster(request.cluster_id)
        await self._compute.allow_compaction(
            request.cluster_id, request.collection_ids, request.since, request.empty
        )
        return common_pb2.Empty()

    async def ListFrontiers(
        self, request: controller_pb2.ListFrontiersRequest, context: Any
    ) -> controller_pb2.ListFrontiersResponse:
        _need_cluster(request.cluster_id)
        found = self._compute.list_frontiers(request.cluster_id, request.collection_ids)
        return controller_pb2.ListFrontiersResponse(
            collections=[
                controller_pb2.CollectionFrontiers(
                    collection_id=c.collection_id,
                    write_frontier=c.write_frontier,
                    since=c.since,
                    replicas=[
                        controller_pb2.ReplicaFrontier(replica_id=r, write_frontier=f)
                        for r, f in c.replicas.items()
                    ],
                )
                for c in found
            ]
        )

    async def CollectionStatus(
        self, request: controller_pb2.ListFrontiersRequest, context: Any
    ) -> controller_pb2.CollectionStatusResponse:
        _need_cluster(request.cluster_id)
        statuses = []
        for collection_id, error, hydration in self._compute.collection_status(
            request.cluster_id, request.collection_ids
        ):
            status = controller_pb2.CollectionStatus(
                collection_id=collection_id, hydration=hydration
            )
            if error is not None:
                status.error.CopyFrom(error)
            statuses.append(status)
        return controller_pb2.CollectionStatusResponse(collections=statuses)


def _need_cluster(cluster_id: str) -> None:
    if not cluster_id:
        raise LoupeError("INVALID_ARGUMENT", "the request names no cluster")


# -- the wire edge -------------------------------------------------------------------


def desired_state(
    snapshot: catalog_pb2.CatalogSnapshot,
) -> tuple[list[ClusterInfo], list[ReplicaSpec]]:
    """The clusters and replica specs a catalog snapshot asks for."""
    clusters = [
        ClusterInfo(
            id=c.id,
            name=c.name,
            introspection_interval_ns=c.introspection_interval_ns,
            introspection_debugging=c.introspection_debugging,
        )
        for c in snapshot.clusters
    ]
    replicas = [replica_spec(r.id, r.cluster_id, r.size) for r in snapshot.replicas]
    return clusters, replicas


def replica_spec(replica_id: str, cluster_id: str, size: str) -> ReplicaSpec:
    """What a replica of ``size`` runs with: the size table's workers and memory budget.

    A size the table no longer lists (the table was changed under an existing
    catalog) keeps its replica running, with one worker and no budget, and is logged.
    """
    try:
        row = sizes.lookup(size)
    except LoupeError:
        log.warning("replica of an unknown size", replica_id=replica_id, size=size)
        return ReplicaSpec(replica_id, cluster_id)
    return ReplicaSpec(
        replica_id, cluster_id, workers=row.workers, memory_limit_bytes=row.memory_bytes
    )


def collection_metadata(
    collection: BuiltinCollection, blob_uri: str, consensus_uri: str
) -> common_pb2.CollectionMetadata:
    return common_pb2.CollectionMetadata(
        collection_id=collection.id,
        shard_id=collection.shard_id,
        blob_uri=blob_uri,
        consensus_uri=consensus_uri,
        relation_desc=common_pb2.RelationDesc(
            columns=[
                common_pb2.Column(name=name, type=kind, nullable=True)
                for name, kind in collection.columns
            ]
        ),
    )


async def _close(nc: NatsConnection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.drain(), 2.0)
    if not nc.is_closed:
        await nc.close()


async def _unsubscribe(subscription: Any) -> None:
    with contextlib.suppress(Exception):
        await subscription.unsubscribe()
