"""The storage writer's input: a JetStream stream read by one durable pull consumer.

Publishers put ``UpdateBatch`` messages in the stream (work-queue retention,
file storage, de-duplicated by ``Nats-Msg-Id`` within the duplicate window).
The ``Inbox`` fetches them, decodes each into Arrow tables and keeps them,
in stream order, until the writer has made them durable in every shard;
then it acknowledges them, and JetStream deletes them.

Which messages are durable is recorded in the shards themselves (the
writer's ``progress``), not in the consumer: at start the writer (re)creates
the consumer, which delivers every message still in the work queue at once
(a writer killed with messages in flight does not wait out their ack
timeout), and acknowledges without applying those every shard holds.
Messages delivered twice (redeliveries after a long stall) are recognised by
their stream sequence and kept once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
import pyarrow as pa
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg
from nats.js import api

from loupe.builtins import BuiltinCollection
from loupe.common.logging import get_logger
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.wire import BadBatch, StreamConfig, decode_batch

log = get_logger(__name__)

# Messages per fetch request.
FETCH_BATCH = 256
# Messages bigger than this are decoded in a worker thread, not on the event loop.
DECODE_INLINE_BYTES = 64 * 1024
# Until acknowledged, a delivered message is redelivered after this long.
ACK_WAIT_S = 300.0
# Delivered but unacknowledged messages the server allows the consumer.
MAX_ACK_PENDING = 20_000


@dataclass
class Received:
    """One batch received from the stream and not yet acknowledged."""

    seq: int
    batch_id: str
    # Per collection id, the batch's updates (columns in ingest types + mz_diff);
    # empty for a batch that could not be decoded.
    tables: dict[str, pa.Table]
    rows: int
    msg: Msg | None = field(default=None, repr=False)


class Inbox:
    """The stream, its durable consumer and the batches received but not yet acknowledged."""

    def __init__(
        self,
        nc: NatsConnection,
        stream: StreamConfig,
        collections: Mapping[str, BuiltinCollection],
        *,
        max_buffered_rows: int = 2_000_000,
        metrics: StorageWriterMetrics = METRICS,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.stream = stream
        self._collections = collections
        self._max_buffered_rows = max_buffered_rows
        self._metrics = metrics
        # Guarded by _lock: the flush thread reads it while the loop appends.
        self._lock = threading.Lock()
        self._pending: dict[int, Received] = {}
        self._buffered_rows = 0
        self.received_through = 0
        # Everything at or below this is durable (and acknowledged, or being).
        self.acked_through = 0
        self.epoch = 0
        self._subscription: Any = None
        self._received = asyncio.Condition()
        self._space = asyncio.Event()
        self._space.set()
        self._closing = False

    # -- set-up ------------------------------------------------------------------

    async def ensure_stream(self) -> int:
        """Create the stream if it does not exist; its epoch (creation time, ms)."""
        config = api.StreamConfig(
            name=self.stream.name,
            subjects=[self.stream.subject],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            duplicate_window=self.stream.duplicate_window,
        )
        try:
            info = await self._js.add_stream(config)
        except nats.js.errors.BadRequestError:
            # Exists already (with another config, e.g. an older duplicate window).
            info = await self._js.stream_info(self.stream.name)
        created = info.created
        self.epoch = int(created.timestamp() * 1000) if isinstance(created, dt.datetime) else 0
        return self.epoch

    async def open(self, applied_through: int) -> None:
        """(Re)create the durable consumer; messages up to ``applied_through`` are skipped.

        Re-created rather than reused, so messages a killed writer had received
        come again at once, not after their ack wait.
        """
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._js.delete_consumer(self.stream.name, self.stream.consumer)
        await self._js.add_consumer(
            self.stream.name,
            api.ConsumerConfig(
                durable_name=self.stream.consumer,
                # A work queue holds only what is not acknowledged yet: deliver all
                # of it (what some shard already holds is skipped on receipt).
                deliver_policy=api.DeliverPolicy.ALL,
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=ACK_WAIT_S,
                max_ack_pending=MAX_ACK_PENDING,
                filter_subject=self.stream.subject,
            ),
        )
        self._subscription = await self._js.pull_subscribe_bind(
            durable=self.stream.consumer, stream=self.stream.name
        )
        self.received_through = applied_through
        self.acked_through = applied_through

    async def last_seq(self) -> int:
        """The stream's last sequence (0 when empty)."""
        info = await self._js.stream_info(self.stream.name)
        return int(info.state.last_seq)

    async def undelivered(self) -> int:
        """Messages the consumer has not delivered yet."""
        info = await self._subscription.consumer_info()
        return int(info.num_pending or 0)

    async def publish(self, batch: storage_pb2.UpdateBatch, *, timeout: float = 5.0) -> api.PubAck:
        """Store ``batch`` in the stream (once per batch id in the window); its PubAck."""
        return await self._js.publish(
            self.stream.subject,
            batch.SerializeToString(),
            timeout=timeout,
            headers={"Nats-Msg-Id": batch.batch_id},
        )

    # -- receiving -----------------------------------------------------------------

    async def run(self) -> None:
        """Fetch, decode and keep messages until ``close``; survives NATS outages."""
        while not self._closing:
            if self._buffered_rows >= self._max_buffered_rows:
                # Hold the rest in the stream until a flush makes room.
                self._space.clear()
                await self._space.wait()
                continue
            try:
                messages = await self._subscription.fetch(FETCH_BATCH, timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except Exception as error:
                if self._closing:
                    return
                log.warning("storage_inbox_fetch_failed", error=str(error) or type(error).__name__)
                await asyncio.sleep(0.5)
                continue
            for message in messages:
                await self._receive(message)

    async def _receive(self, message: Msg) -> None:
        seq = message.metadata.sequence.stream
        if seq <= self.acked_through:
            # Redelivered after we made it durable: just acknowledge it again.
            await _ack(message)
            return
        if seq <= self.received_through:
            with self._lock:
                known = self._pending.get(seq)
                if known is not None:
                    known.msg = message  # acknowledge the newest delivery
            return
        data = message.data
        try:
            if len(data) > DECODE_INLINE_BYTES:
                batch_id, tables = await asyncio.to_thread(decode_batch, data, self._collections)
            else:
                batch_id, tables = decode_batch(data, self._collections)
        except BadBatch as error:
            self._metrics.bad_batches.inc()
            log.error(
                "storage_batch_refused",
                seq=seq,
                batch_id=(message.headers or {}).get("Nats-Msg-Id", ""),
                error=str(error),
            )
            batch_id, tables = "", {}
        rows = sum(table.num_rows for table in tables.values())
        with self._lock:
            self._pending[seq] = Received(seq, batch_id, tables, rows, message)
            self._buffered_rows += rows
            self.received_through = seq
        self._metrics.received_batches.inc()
        self._metrics.unacked_batches.set(len(self._pending))
        async with self._received:
            self._received.notify_all()

    async def wait_received(self, seq: int, timeout: float) -> bool:
        """Wait until every message up to ``seq`` is received; False on timeout."""
        if self.received_through >= seq:
            return True
        async with self._received:
            try:
                await asyncio.wait_for(
                    self._received.wait_for(lambda: self.received_through >= seq), timeout
                )
            except TimeoutError:
                return False
        return True

    def pending(self) -> list[Received]:
        """The batches received and not yet acknowledged, in stream order (any thread)."""
        with self._lock:
            return list(self._pending.values())

    @property
    def buffered_rows(self) -> int:
        return self._buffered_rows

    async def acknowledge(self, through: int) -> int:
        """Acknowledge (and forget) every batch up to ``through``; how many."""
        with self._lock:
            if through <= self.acked_through:
                return 0
            self.acked_through = through
            done = [seq for seq in self._pending if seq <= through]
            messages = []
            for seq in done:
                received = self._pending.pop(seq)
                self._buffered_rows -= received.rows
                messages.append(received.msg)
        for message in messages:
            if message is not None:
                await _ack(message)
        self._metrics.unacked_batches.set(len(self._pending))
        self._space.set()
        return len(messages)

    async def close(self) -> None:
        self._closing = True
        self._space.set()
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()


async def _ack(message: Msg) -> None:
    """Acknowledge; a lost ack only means the message comes back and is acknowledged then."""
    try:
        await message.ack()
    except Exception as error:
        log.warning("storage_ack_failed", error=str(error) or type(error).__name__)
