"""The compute replica process: one per replica, speaking the compute protocol.

See ``protocol.py`` for the stages and promises this implements. The replica
owns one NATS connection for commands and responses, and its heartbeat
thread another (``heartbeats.py``); commands arrive on one subscription and are handled
one at a time in order, except peeks, which run as their own tasks (their
waiting and reading must not hold up the commands behind them). Dataflows run
in the compute engine through ``dataflows.DataflowRunner``, made on the first
``CreateDataflow`` (or peek of an index) of the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
from typing import Any

from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from prometheus_client import Counter

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import bind_context, get_logger
from loupe.common.metrics import serve_metrics
from loupe.common.service import Service
from loupe.common.transport import connect, publish, subscribe
from loupe.compute_replica.dataflows import DataflowRunner
from loupe.compute_replica.debug import busy_step
from loupe.compute_replica.heartbeats import HeartbeatThread, LoopWatch
from loupe.compute_replica.introspection import Introspection
from loupe.compute_replica.process_metrics import ProcessMetrics
from loupe.compute_replica.protocol import (
    HeartbeatReport,
    InstanceConfig,
    PeekRequest,
    PendingPeeks,
    Responses,
    command_subject,
    response_subject,
)
from loupe.compute_replica.settings import ComputeReplicaSettings
from loupe.dataflow import ComputeInstance
from loupe.persist.cache import ShardCache
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

IGNORED_COMMANDS = Counter(
    "loupe_compute_replica_commands_ignored",
    "Commands a replica ignored: meant for another incarnation, replays, or out of stage",
    ["replica_id", "reason"],
)
PEEKS = Counter(
    "loupe_compute_replica_peeks",
    "Peeks a replica finished, by outcome",
    ["replica_id", "outcome"],
)

# The skeleton engine that evaluated SQL over shard snapshots is gone: every
# peek reads an index export of a dataflow.
NO_TARGET = LoupeError(
    SqlState.FEATURE_NOT_SUPPORTED,
    "peeks name an index: Peek.target_id is required (Peek.sql and Peek.sources are no"
    " longer evaluated)",
)


class ComputeReplica(Service):
    """One compute replica: hello, instance creation, heartbeats and peeks."""

    name = "compute-replica"

    def __init__(self, settings: ComputeReplicaSettings) -> None:
        super().__init__()
        settings.validate()
        self.settings = settings
        self.replica_id = settings.replica_id
        self.incarnation = settings.incarnation
        self._responses = Responses(self.replica_id, self.incarnation)
        self._subject = response_subject(self.replica_id)
        self._shards = ShardCache()
        self._dataflows: DataflowRunner | None = None
        self._pending = PendingPeeks()
        # Running direct peeks (``Peek.direct``): uuid -> the subject their answer goes to.
        self._direct: dict[str, str] = {}
        self._process = ProcessMetrics()
        self._loop_watch = LoopWatch(min(0.5, settings.heartbeat_interval))
        self._heartbeats: HeartbeatThread | None = None
        self._config: InstanceConfig | None = None
        self._created = asyncio.Event()
        self._initialized = False
        self._parameters: dict[str, str] = {}
        self._nc: NatsConnection | None = None
        self._introspection: Introspection | None = None
        # Strong references: a task only weakly held by the loop may be collected.
        self._peek_tasks: set[asyncio.Task[None]] = set()
        self._debug_tasks: set[asyncio.Task[Any]] = set()

    # -- state, for the curious (tests, logs) ---------------------------------------

    @property
    def instance_config(self) -> InstanceConfig | None:
        """The accepted ``CreateInstance``, or None before it."""
        return self._config

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def heartbeats(self) -> HeartbeatThread | None:
        """The heartbeat sender, once serving."""
        return self._heartbeats

    @property
    def introspection(self) -> Introspection | None:
        """The replica's logging (``introspection.py``), once serving."""
        return self._introspection

    @property
    def dataflows(self) -> DataflowRunner | None:
        """The instance's dataflows, or None before its first ``CreateDataflow``."""
        return self._dataflows

    # -- lifecycle -------------------------------------------------------------------

    async def serve(self) -> None:
        bind_context(replica_id=self.replica_id, incarnation=self.incarnation)
        log.info("compute replica starting", settings=self.settings.describe())
        if self.settings.metrics_port >= 0:
            port = serve_metrics(self.settings.metrics_port, self.settings.metrics_host)
            log.info("serving metrics", port=port)
        async with contextlib.AsyncExitStack() as stack:
            self._nc = await connect(
                self.settings.nats_url,
                name=f"compute-replica-{self.replica_id}-{self.incarnation}",
            )
            stack.push_async_callback(self._close_connection)
            self._introspection = Introspection(
                self._responses,
                self._send_raw,
                max_payload=self._nc.max_payload,
                max_message_bytes=self.settings.introspection_max_message_bytes,
            )
            self._heartbeats = self._start_heartbeats()
            stack.push_async_callback(asyncio.to_thread, self._heartbeats.stop)
            subscription = await subscribe(
                self._nc,
                command_subject(self.replica_id),
                compute_pb2.ComputeCommand,
                self._on_command,
            )
            await self._nc.flush()
            log.info("listening for commands", subject=command_subject(self.replica_id))
            async with asyncio.TaskGroup() as loops:
                loops.create_task(self._say_hello(), name="hello")
                watch = loops.create_task(self._loop_watch.run(), name="loop-watch")
                await self.wait_for_shutdown()
                log.info("compute replica stopping")
                watch.cancel()
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
                await self._abandon_peeks()
                await self._introspection.stop()
                if self._dataflows is not None:
                    await self._dataflows.close()
        log.info("compute replica stopped")

    async def _abandon_peeks(self, grace: float = 2.0) -> None:
        # Peeks in flight are not answered: the controller sees this incarnation
        # go away and re-issues them on another replica or incarnation.
        tasks = self._pending.cancel_all()
        self._direct.clear()
        if tasks:
            log.info("abandoning peeks at shutdown", count=len(tasks))
            await asyncio.wait(tasks, timeout=grace)

    async def _close_connection(self) -> None:
        if self._nc is None or self._nc.is_closed:
            return
        try:
            await asyncio.wait_for(self._nc.drain(), timeout=2.0)
        except Exception:
            await self._nc.close()

    async def _wait_any(self, timeout: float | None, *events: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _send_raw(self, subject: str, payload: bytes) -> None:
        assert self._nc is not None
        await self._nc.publish(subject, payload)

    async def _publish(self, response: compute_pb2.ComputeResponse) -> None:
        assert self._nc is not None
        try:
            await publish(self._nc, self._subject, response)
        except Exception as error:  # a closed or reconnecting connection: say so, go on
            log.warning("response not sent", kind=response.WhichOneof("kind"), error=repr(error))

    # -- stage 0 and 1: hello, then heartbeats ------------------------------------------

    async def _say_hello(self) -> None:
        hello = self._responses.hello(os.getpid(), socket.gethostname())
        while not (self._created.is_set() or self.stopping):
            await self._publish(hello)
            await self._wait_any(self.settings.hello_interval, self._created, self._stop)

    def _start_heartbeats(self) -> HeartbeatThread:
        """The heartbeat sender: its own thread and connection (see ``heartbeats.py``)."""
        sender = HeartbeatThread(
            self.settings.nats_url,
            self._subject,
            lambda: self._responses.heartbeat(self.heartbeat_report()),
            interval=self.settings.heartbeat_interval,
            name=f"compute-replica-{self.replica_id}-{self.incarnation}-heartbeats",
        )
        sender.start()
        return sender

    def heartbeat_report(self) -> HeartbeatReport:
        """What the next heartbeat says about this process (built on the heartbeat thread)."""
        workers = (self._config.workers if self._config else 0) or self.settings.workers
        activity = self._dataflows.activity if self._dataflows is not None else None
        return HeartbeatReport(
            cpu_nano_cores=self._process.cpu_nano_cores(),
            memory_bytes=self._process.memory_bytes(),
            # The replica keeps nothing on disk yet: dataflows hold their state in memory.
            disk_bytes=0,
            workers=workers,
            initialized=self._initialized,
            sent_at_ms=time.time_ns() // 1_000_000,
            engine_calls=activity.calls if activity else 0,
            engine_busy_ms=round(activity.busy_seconds() * 1000) if activity else 0,
            loop_lag_ms=round(self._loop_watch.lag_seconds() * 1000),
        )

    # -- commands -------------------------------------------------------------------------

    async def _on_command(self, command: compute_pb2.ComputeCommand, _msg: Msg) -> None:
        kind = command.WhichOneof("kind")
        if command.incarnation != self.incarnation:
            self._ignore("other incarnation", kind=kind, incarnation=command.incarnation)
            if kind == "peek" and command.peek.direct and command.peek.reply_subject:
                # The coordinator's routes are behind: it asks the controller at once.
                error = LoupeError(
                    "UNAVAILABLE",
                    f"replica {self.replica_id} is incarnation {self.incarnation},"
                    f" not {command.incarnation}",
                )
                refused = self._responses.peek_error(command.peek.uuid, error)
                await self._reply_directly(command.peek.reply_subject, refused.peek_response)
            return
        if kind == "create_instance":
            if self._create_instance(command.create_instance):
                await self._configure_logging(command.create_instance.logging)
        elif kind == "initialization_complete":
            self._complete_initialization()
        elif kind == "peek":
            await self._start_peek(PeekRequest.from_proto(command.peek))
        elif kind == "cancel_peek":
            await self._cancel_peek(command.cancel_peek.uuid)
        elif kind == "update_configuration":
            await self._update_logging(command.update_configuration)
            self._parameters.update(command.update_configuration.parameters)
            log.info("configuration updated", parameters=dict(self._parameters))
            if self.settings.debug_commands:
                self._run_debug_commands(command.update_configuration.parameters)
        elif kind == "create_dataflow":
            if self._config is None:
                self._ignore("create dataflow before create instance")
            else:
                await self._running_dataflows().create_dataflow(command.create_dataflow)
        elif kind == "allow_compaction":
            if self._dataflows is not None:
                await self._dataflows.allow_compaction(command.allow_compaction)
        elif kind == "schedule":
            # Dataflows run from creation on; Schedule changes nothing yet.
            log.debug("schedule", dataflow_id=command.schedule.id)
        else:
            self._ignore("no command kind")

    def _ignore(self, reason: str, **context: Any) -> None:
        IGNORED_COMMANDS.labels(replica_id=self.replica_id, reason=reason).inc()
        log.info("command ignored", reason=reason, **context)

    def _create_instance(self, message: compute_pb2.CreateInstance) -> bool:
        """Accept ``message`` (True) or ignore it, meant for another replica or incarnation."""
        if message.replica_id and message.replica_id != self.replica_id:
            self._ignore("create instance for another replica", target=message.replica_id)
            return False
        if message.incarnation and message.incarnation != self.incarnation:
            self._ignore("create instance for another incarnation", target=message.incarnation)
            return False
        config = InstanceConfig.from_proto(message)
        config = dataclasses.replace(
            config,
            replica_id=self.replica_id,
            incarnation=self.incarnation,
            cluster_id=config.cluster_id or self.settings.cluster_id,
            workers=config.workers or self.settings.workers,
            memory_limit_bytes=config.memory_limit_bytes or self.settings.memory_limit_bytes,
        )
        repeated = self._config is not None
        self._config = config
        if not repeated:
            self._process.cpu_nano_cores()  # the first heartbeat's CPU interval starts now
        self._created.set()
        if self._heartbeats is not None:
            self._heartbeats.begin()
        log.info(
            "instance re-created (reconciliation)" if repeated else "instance created",
            cluster_id=config.cluster_id,
            workers=config.workers,
            memory_limit_bytes=config.memory_limit_bytes,
            blob_uri=config.storage.blob_uri,
            consensus_uri=config.storage.consensus_uri,
            logging_enabled=config.logging.enable_logging,
        )
        return True

    async def _configure_logging(self, logging: compute_pb2.LoggingConfig) -> None:
        """Start, re-time or stop introspection (``introspection.py``) as ``logging`` says."""
        if self._introspection is None or self._config is None:
            return
        self._config = dataclasses.replace(self._config, logging=logging)
        await self._introspection.configure(logging, self._running_dataflows)

    async def _update_logging(self, update: compute_pb2.UpdateConfiguration) -> None:
        if update.HasField("logging"):
            await self._configure_logging(update.logging)
        if update.introspection_snapshot and self._introspection is not None:
            self._introspection.request_snapshot()

    def _running_dataflows(self) -> DataflowRunner:
        """The instance's dataflows, started on first use: a replica without any has no engine."""
        assert self._config is not None
        if self._dataflows is None:
            self._dataflows = DataflowRunner(
                # Without hooks: introspection installs its collector when logging is on.
                ComputeInstance(
                    workers=self._config.workers,
                    memory_limit_bytes=self._config.memory_limit_bytes,
                ),
                responses=self._responses,
                publish=self._publish,
                storage=self._config.storage,
                nats=self._nc,
                shards=self._shards,
                slow_peek_log=self.settings.slow_peek_log,
                report_interval=self.settings.report_interval,
                poll_interval=self.settings.source_poll_interval,
                snapshot_piece_rows=self.settings.snapshot_piece_rows,
            )
            self._dataflows.start()
        return self._dataflows

    def _run_debug_commands(self, parameters: Any) -> None:
        """Test-only parameters (``debug_commands``): ``debug_busy_step=<kind>:<seconds>``.

        Occupies the engine thread with a CPU-bound step of that kind
        (``debug.busy_step``) as a task, so commands go on being handled:
        how liveness tests make a replica busy without a slow dataflow.
        """
        spec = parameters.get("debug_busy_step")
        if not spec or self._config is None:
            return
        kind, _, seconds = spec.partition(":")
        runner = self._running_dataflows()
        log.info("debug busy step", kind=kind, seconds=float(seconds))
        task = asyncio.create_task(runner.run_on_engine(busy_step, kind, float(seconds)))
        self._debug_tasks.add(task)
        task.add_done_callback(self._debug_tasks.discard)

    def _complete_initialization(self) -> None:
        if self._config is None:
            self._ignore("initialization complete before create instance")
            return
        if not self._initialized:
            log.info("initialization complete")
        self._initialized = True

    # -- peeks ------------------------------------------------------------------------------

    async def _start_peek(self, peek: PeekRequest) -> None:
        if peek.uuid in self._pending:
            self._ignore("peek already running", uuid=peek.uuid)
            return
        if self._config is None:
            await self._answer_peek(
                peek,
                self._responses.peek_error(
                    peek.uuid,
                    LoupeError(
                        SqlState.INTERNAL_ERROR,
                        f"replica {self.replica_id} incarnation {self.incarnation} has no"
                        " instance yet: CreateInstance must come before Peek",
                    ),
                ),
            )
            return
        if not peek.target_id:
            PEEKS.labels(replica_id=self.replica_id, outcome="error").inc()
            await self._answer_peek(peek, self._responses.peek_error(peek.uuid, NO_TARGET))
            return
        task = asyncio.create_task(self._run_peek(peek), name=peek.uuid)
        self._pending.add(peek.uuid, task)
        if peek.direct:
            self._direct[peek.uuid] = peek.reply_subject
        self._peek_tasks.add(task)
        task.add_done_callback(self._peek_tasks.discard)

    async def _run_peek(self, peek: PeekRequest) -> None:
        started = time.monotonic()
        try:
            result = await self._running_dataflows().peek(peek)
            response = self._responses.peek_rows(peek.uuid, result)
            outcome, rows = "rows", len(result.rows)
        except asyncio.CancelledError:
            return  # canceled (already answered) or shutting down (never answered)
        except LoupeError as error:
            response, outcome, rows = self._responses.peek_error(peek.uuid, error), "error", 0
        except Exception as error:  # e.g. a value the wire cannot carry
            log.warning("peek failed", uuid=peek.uuid, error=repr(error))
            failure = LoupeError(SqlState.INTERNAL_ERROR, f"{type(error).__name__}: {error}")
            response, outcome, rows = self._responses.peek_error(peek.uuid, failure), "error", 0
        if not self._pending.finish(peek.uuid):
            return
        self._direct.pop(peek.uuid, None)
        await self._answer_peek(peek, response)
        PEEKS.labels(replica_id=self.replica_id, outcome=outcome).inc()
        # Debug, and after the answer: rendering a line took as long as a point peek.
        log.debug(
            "peek answered",
            uuid=peek.uuid,
            outcome=outcome,
            rows=rows,
            error=response.peek_response.error.message or None,
            elapsed_ms=round((time.monotonic() - started) * 1000, 1),
        )

    async def _answer_peek(self, peek: PeekRequest, response: compute_pb2.ComputeResponse) -> None:
        """A direct peek's answer goes to its coordinator only; any other to the
        controller, and its rows to the coordinator that asked too (``reply_subject``)."""
        answer = response.peek_response
        if peek.direct:
            await self._reply_directly(peek.reply_subject, answer)
            return
        if peek.reply_subject and answer.WhichOneof("result") == "rows":
            await self._reply_directly(peek.reply_subject, answer)
        await self._publish(response)

    async def _reply_directly(self, subject: str, response: compute_pb2.PeekResponse) -> None:
        """A peek's answer straight to the coordinator that asked: it skips a hop and the
        controller's event loop. Best effort: a lost copy of a routed peek is answered by
        the controller's; a direct peek unanswered is asked of the controller in time."""
        assert self._nc is not None
        try:
            await publish(self._nc, subject, response)
        except Exception as error:
            log.debug("direct peek reply not sent", uuid=response.uuid, error=repr(error))

    async def _cancel_peek(self, uuid: str) -> None:
        if self._pending.cancel(uuid):
            PEEKS.labels(replica_id=self.replica_id, outcome="canceled").inc()
            log.info("peek canceled", uuid=uuid)
            canceled = self._responses.peek_canceled(uuid)
            direct = self._direct.pop(uuid, None)
            if direct is not None:
                await self._reply_directly(direct, canceled.peek_response)
            else:
                await self._publish(canceled)
        else:
            # Answered already (a cancel sent as the answer was on its way, or one that
            # arrived after it: a replica resumed from a pause may read them in either order).
            log.info("cancel of a peek that is not running", uuid=uuid)
