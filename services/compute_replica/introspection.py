"""A replica's introspection: its logs collected, ticked and published (DESIGN §6).

With ``LoggingConfig.enable_logging`` and a positive ``interval_ns`` the
replica's ``ComputeInstance`` gets a ``LogCollector`` as its hooks, and a
ticker closes an interval every ``interval_ns``: on the engine thread it
takes the interval's changes at ``t`` = wall-clock ms (``tick``), hands them
to the dataflows that read a log (``DataflowRunner.feed_logs``, in the same
engine call, so a reader never misses or repeats a tick), and then, off the
engine thread, encodes and publishes them as ``IntrospectionUpdates`` on
``loupe.compute.v1.<replica_id>.introspection``, a subject of its own.

Messages
    ``seq`` counts the messages sent by this incarnation from 0; ``upper`` is
    ``t + 1``. The first message, and the first after
    ``UpdateConfiguration.introspection_snapshot`` or a dropped message, is a
    snapshot: every variant's whole state. A tick without changes sends
    nothing: the controller's storage writer assigns the time of what it
    writes, so it needs no ``upper`` progress, and a gap in ``seq`` is what
    tells it something was lost.

Bounded work
    A tick's messages are cut to fit NATS's ``max_payload`` (a snapshot's
    first message says ``snapshot``, the rest follow as changes). A tick
    larger than ``max_message_bytes`` in all, or one that finds
    ``MAX_QUEUED`` ticks' worth of bytes still waiting to be published, is
    dropped: its updates are counted in
    ``dropped_updates``, ``incomplete_since_ms`` is set, and the next message
    is a snapshot, which makes the data complete again. Encoding and
    publishing run on the event loop's side, never on the engine thread,
    and heartbeats have their own thread and connection anyway.

Interval 0 means no collector, no ticker and no hooks: the engine does no
logging work at all. ``configure`` applies a new ``LoggingConfig`` live.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa
from prometheus_client import Counter

from loupe.common.logging import get_logger
from loupe.compute_replica.protocol import SUBJECT_PREFIX, Responses
from loupe.introspection.collector import LogCollector
from loupe.introspection.logs import BY_NAME
from loupe.proto.compute.v1 import compute_pb2

log = get_logger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 8 * 2**20
# Ticks' worth of bytes (at the bound) waiting for the connection; more is dropped.
MAX_QUEUED = 4

DROPPED_UPDATES = Counter(
    "loupe_compute_replica_introspection_dropped_updates",
    "Introspection updates a replica dropped (message too large or publishing behind)",
    ["replica_id"],
)


def introspection_subject(replica_id: str) -> str:
    """Where ``replica_id`` publishes its ``IntrospectionUpdates``."""
    return f"{SUBJECT_PREFIX}.{replica_id}.introspection"


def encode_table(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


class LoggingTarget(Protocol):
    """What the introspection needs of the dataflow runner (``DataflowRunner``)."""

    @property
    def workers(self) -> int: ...
    async def install_logging(
        self, collector: LogCollector | None, logs: Mapping[str, str]
    ) -> None: ...
    async def run_on_engine(self, function: Callable[..., Any], *args: Any) -> Any: ...
    def feed_logs(self, changes: Mapping[str, pa.Table], time: int) -> None: ...


class Introspection:
    """The replica's logging: collector, ticker, snapshot requests and the bounded publisher."""

    def __init__(
        self,
        responses: Responses,
        send: Callable[[str, bytes], Awaitable[None]],
        *,
        max_payload: int,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._responses = responses
        self._send = send
        self.subject = introspection_subject(responses.replica_id)
        self.max_message_bytes = max_message_bytes
        self.max_payload = max_payload
        self.interval_ns = 0
        self.collector: LogCollector | None = None
        self._target: LoggingTarget | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._publisher: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._queued_bytes = 0
        self._last_time = 0
        self._want_snapshot = True
        self.seq = 0
        self.dropped_updates = 0
        self.incomplete_since_ms = 0
        # For tests and the report: messages and bytes sent.
        self.sent_messages = 0
        self.sent_bytes = 0

    @property
    def running(self) -> bool:
        return self._ticker is not None

    async def configure(
        self, config: compute_pb2.LoggingConfig, target: Callable[[], LoggingTarget]
    ) -> None:
        """Apply ``config``: start, stop or re-time the logging without a restart."""
        interval = config.interval_ns if config.enable_logging else 0
        if interval <= 0:
            await self.stop()
            return
        self.interval_ns = interval
        if self.running:
            if self.collector is None or self.collector.log_logging == config.log_logging:
                return
            # INTROSPECTION DEBUGGING changed: logging starts over with a new collector
            # (its first message a snapshot, which replaces the rows the controller holds).
            await self.stop()
        runner = target()
        logs = dict(config.index_logs) or {name: v.log_id for name, v in BY_NAME.items()}
        collector = LogCollector(runner.workers, logs, log_logging=config.log_logging)
        await runner.install_logging(collector, logs)
        self._target, self.collector = runner, collector
        self._want_snapshot = True
        self._ticker = asyncio.create_task(self._tick_loop(), name="introspection-ticks")
        self._publisher = asyncio.create_task(self._publish_loop(), name="introspection-publish")
        log.info("introspection started", interval_ms=interval / 1e6, logs=len(logs))

    def request_snapshot(self) -> None:
        """The next message is a snapshot (the controller lost track)."""
        self._want_snapshot = True

    async def stop(self) -> None:
        """No collector, no ticker, no hooks (interval 0, or the replica stopping)."""
        tasks = [t for t in (self._ticker, self._publisher) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        was_running = self._ticker is not None
        self._queue, self._queued_bytes = asyncio.Queue(), 0
        if self._target is not None:
            with contextlib.suppress(Exception):
                await self._target.install_logging(None, {})
        self._target, self.collector, self.interval_ns = None, None, 0
        # Not running only once the hooks are off (a test saw the two apart).
        self._ticker = self._publisher = None
        if was_running:
            log.info("introspection stopped")

    # -- ticking -----------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ns / 1e9)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("introspection tick failed")

    async def tick(self) -> None:
        """Close one interval: changes to the readers and (maybe) messages to the controller."""
        target, collector = self._target, self.collector
        if target is None or collector is None:
            return
        now = max(time.time_ns() // 1_000_000, self._last_time + 1)
        self._last_time = now
        snapshot = self._want_snapshot
        tables: dict[str, pa.Table] = await target.run_on_engine(
            _tick_on_engine, target, collector, now, snapshot
        )
        if not snapshot and not tables:
            return
        parts = await asyncio.to_thread(_split, tables, self._part_bytes())
        size = sum(_size(part) for part in parts)
        updates = sum(t.num_rows for t in tables.values())
        behind = self._queued_bytes + size > MAX_QUEUED * self.max_message_bytes
        if size > self.max_message_bytes or behind:
            self._drop(updates, now, size=size)
            return
        messages = [self._message(part, now, snapshot and i == 0) for i, part in enumerate(parts)]
        if snapshot:
            self._want_snapshot = False
            self.incomplete_since_ms = 0
        for message in messages:
            self._queued_bytes += len(message)
            self._queue.put_nowait(message)

    def _part_bytes(self) -> int:
        """What one message may carry: NATS's max_payload, less room for the envelope."""
        return max(self.max_payload - 16 * 1024, self.max_payload // 2)

    def _message(self, logs: list[compute_pb2.LogUpdates], now: int, snapshot: bool) -> bytes:
        """The next message: ``seq`` taken, ``logs`` in it (the first part of a split
        snapshot says so; its other parts are changes that follow it)."""
        updates = compute_pb2.IntrospectionUpdates(
            seq=self.seq,
            upper=now + 1,
            snapshot=snapshot,
            logs=logs,
            dropped_updates=self.dropped_updates,
            incomplete_since_ms=0 if snapshot else self.incomplete_since_ms,
        )
        self.seq += 1
        response = compute_pb2.ComputeResponse(
            replica_id=self._responses.replica_id,
            incarnation=self._responses.incarnation,
            introspection_updates=updates,
        )
        return response.SerializeToString()

    def _drop(self, updates: int, now: int, *, size: int) -> None:
        self.dropped_updates += updates
        DROPPED_UPDATES.labels(replica_id=self._responses.replica_id).inc(updates)
        if not self.incomplete_since_ms:
            self.incomplete_since_ms = now
        self._want_snapshot = True
        log.warning(
            "introspection message dropped",
            updates=updates,
            bytes=size,
            limit=self.max_message_bytes,
            queued_bytes=self._queued_bytes,
        )

    async def _publish_loop(self) -> None:
        while True:
            message = await self._queue.get()
            self._queued_bytes -= len(message)
            try:
                await self._send(self.subject, message)
                self.sent_messages += 1
                self.sent_bytes += len(message)
            except Exception as error:  # reconnecting: the controller sees the seq gap
                log.warning("introspection message not sent", error=repr(error))


def _tick_on_engine(
    target: LoggingTarget, collector: LogCollector, now: int, snapshot: bool
) -> dict[str, pa.Table]:
    """On the engine thread: the interval's changes to the log readers; what to send."""
    changes = collector.tick(now)
    target.feed_logs(changes, now)
    return collector.snapshot(now) if snapshot else changes


def _size(logs: list[compute_pb2.LogUpdates]) -> int:
    return sum(len(entry.arrow_ipc) + len(entry.log) for entry in logs)


def _split(tables: Mapping[str, pa.Table], budget: int) -> list[list[compute_pb2.LogUpdates]]:
    """The tables encoded, packed into messages of at most ``budget`` bytes (a table too
    large for one is cut into row ranges); always at least one message."""
    entries: list[compute_pb2.LogUpdates] = []
    for name, table in sorted(tables.items()):
        entries.extend(_pieces(name, table, budget))
    messages: list[list[compute_pb2.LogUpdates]] = [[]]
    used = 0  # bytes of the last message so far
    for entry in entries:
        size = _size([entry])
        if messages[-1] and used + size > budget:
            messages.append([])
            used = 0
        messages[-1].append(entry)
        used += size
    return messages


def _pieces(name: str, table: pa.Table, budget: int) -> list[compute_pb2.LogUpdates]:
    data = encode_table(table)
    if len(data) <= budget or table.num_rows < 2:
        return [compute_pb2.LogUpdates(log=name, arrow_ipc=data)]
    half = table.num_rows // 2
    return [
        *_pieces(name, table.slice(0, half), budget),
        *_pieces(name, table.slice(half), budget),
    ]
