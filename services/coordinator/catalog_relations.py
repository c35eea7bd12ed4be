"""Keeps the catalog-derived builtin collections in storage equal to the catalog.

After every catalog commit the coordinator follows, it appends, through
``Controller.AppendUpdates``, the difference between the rows the commit
implies and the rows it last wrote. At start it reads what storage holds (a
crash may have cut a previous run short between the catalog commit and the
append) and appends whatever brings it in line.

Several coordinators follow the same commits and each appends the same
difference: a batch is named after the commit (``catalog-<epoch>-<timestamp>``)
and the controller applies a batch id once, so the commit reaches storage
once whoever gets there first.

A batch that could not be confirmed (the storage writer down, or slow) may
be in the writer's stream or not, and re-sending it is not safe: the stream
drops a repeated batch id only within its duplicate window (two minutes),
and a writer down for longer would apply both copies. So this writer's
belief is *stale* from then on, and before its next append it learns what
storage really holds: a barrier (an empty batch, which is durable only once
every batch before it in the stream is applied), then a read of storage.
The next append is the difference from that, so storage converges on the
catalog however long the writer was down, with nothing applied twice. The
coordinator retries a stale writer periodically (``resync``), so storage
converges even when no further commit comes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

from loupe.builtins import BY_ID, BuiltinCollection
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.transport import NatsServiceClient
from loupe.common.values import to_row
from loupe.coordinator import metrics
from loupe.coordinator.catalog_state import CATALOG_COLLECTIONS, Row, row_diff
from loupe.interval import python_values
from loupe.persist import Shard, expand, open_location
from loupe.proto.common.v1 import common_pb2
from loupe.proto.controller.v1 import controller_pb2
from loupe.proto.storage.v1 import storage_pb2

log = get_logger(__name__)

# Errors worth retrying: the controller is restarting or busy flushing.
TRANSIENT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def read_collection_rows(metadata: common_pb2.CollectionMetadata) -> Counter[Row]:
    """The current contents of a builtin collection, read directly from its shard."""
    builtin = BY_ID[metadata.collection_id]
    blob, consensus = open_location(metadata.blob_uri, metadata.consensus_uri)
    shard = Shard(metadata.shard_id or metadata.collection_id, blob, consensus)
    state = shard.state(missing_ok=True)
    if state is None or state.upper == 0:
        return Counter()
    table = expand(shard.snapshot())
    columns = [python_values(table.column(name)) for name in builtin.column_names]
    return Counter(zip(*columns, strict=True))


class CatalogRelationsWriter:
    """Appends catalog-derived rows to storage, one consistent batch per catalog change."""

    def __init__(
        self,
        controller: NatsServiceClient,
        *,
        call_timeout: float = 30.0,
        retry_for: float = 30.0,
        settle_timeout: float = 3.0,
    ) -> None:
        self._controller = controller
        self._call_timeout = call_timeout
        self._retry_for = retry_for
        self._settle_timeout = settle_timeout
        self._lock = asyncio.Lock()
        # What storage holds, as far as this writer knows; None until loaded.
        self.written: dict[str, Counter[Row]] | None = None
        # True while ``written`` may be wrong: an append went unconfirmed, or
        # storage was read while the storage writer did not flush (see the module doc).
        self.stale = False
        self._collections: Mapping[str, common_pb2.CollectionMetadata] = {}
        self._builtins: Sequence[BuiltinCollection] = CATALOG_COLLECTIONS
        # The upper the storage writer answered the last append with: every
        # row appended so far is visible at ``last_upper - 1``.
        self.last_upper = 0

    @property
    def loaded(self) -> bool:
        return self.written is not None

    @property
    def collection_ids(self) -> list[str]:
        """The collections this writer keeps (those ``load`` read)."""
        return [builtin.id for builtin in self._builtins]

    async def load(
        self,
        collections: Mapping[str, common_pb2.CollectionMetadata],
        builtins: Sequence[BuiltinCollection] = CATALOG_COLLECTIONS,
    ) -> None:
        """Read what storage holds now of ``builtins`` (the collections this writer keeps).

        It first waits (bounded) for the storage writer's next flush, so a
        batch an earlier run left buffered in the controller is part of what is
        read rather than applied again on top of it.
        """
        async with self._lock:
            self._collections, self._builtins = collections, tuple(builtins)
            await self._read_storage()

    async def reload(self) -> None:
        """Forget what this writer believed and read storage again (after a barrier).

        For when a commit went by unseen: storage may hold its rows (another
        coordinator appended them) or not.
        """
        async with self._lock:
            if self.written is None:
                raise RuntimeError("load() must run before reload()")
            self.stale = True
            await self._resync()

    async def _resync(self) -> None:
        """Learn what storage holds once every batch already in the writer's stream is
        applied: an empty barrier batch, then a read. Raises (and stays stale) on failure."""
        await self._append(
            controller_pb2.AppendUpdatesRequest(batch_id=f"barrier-{uuid.uuid4().hex}")
        )
        await self._read_storage(settle=False)
        self.stale = False
        metrics.CATALOG_RESYNCS.inc()
        log.info("catalog relations read from storage again after a barrier")

    async def _read_storage(self, *, settle: bool = True) -> None:
        collections = self._collections
        if settle and not await self._wait_for_next_flush(collections):
            # The writer may hold batches it has not applied: read, but check again.
            self.stale = True
        written: dict[str, Counter[Row]] = {}
        for builtin in self._builtins:
            metadata = collections.get(builtin.id)
            if metadata is None:
                raise LoupeError(
                    "FAILED_PRECONDITION",
                    f"the controller does not know collection {builtin.qualified_name} ({builtin.id})",
                )
            written[builtin.id] = await asyncio.to_thread(read_collection_rows, metadata)
        self.written = written
        log.info(
            "catalog relations read from storage",
            **{BY_ID[cid].name: sum(rows.values()) for cid, rows in written.items()},
        )

    async def _wait_for_next_flush(
        self, collections: Mapping[str, common_pb2.CollectionMetadata]
    ) -> bool:
        """Wait (bounded) for the storage writer's next flush; False if it did not come."""
        # Every builtin collection shares one upper, advanced at every flush.
        metadata = collections.get(self._builtins[0].id) if self._builtins else None
        if metadata is None or self._settle_timeout <= 0:
            return True
        blob, consensus = open_location(metadata.blob_uri, metadata.consensus_uri)
        shard = Shard(metadata.shard_id or metadata.collection_id, blob, consensus)
        state = await asyncio.to_thread(shard.state, missing_ok=True)
        if state is None or state.upper == 0:
            return True  # nothing was ever written: nothing can be pending either
        try:
            await asyncio.to_thread(shard.wait_for_upper, state.upper, self._settle_timeout)
        except TimeoutError:
            log.warning("storage upper did not advance; reading it as it is", upper=state.upper)
            return False
        return True

    async def sync(self, target: Mapping[str, Counter[Row]], batch_id: str) -> int | None:
        """Append what brings storage to ``target``; returns the new upper (None: no change).

        ``target`` maps collection ids to rows (``catalog_state.catalog_rows``);
        collections this writer does not keep are ignored. ``batch_id`` names
        the batch (after the catalog commit ``target`` comes from).
        """
        async with self._lock:
            if self.written is None:
                raise RuntimeError("load() must run before sync()")
            upper = None
            if self.stale:
                await self._resync()
                upper = self.last_upper
            kept = {cid: Counter(target.get(cid, Counter())) for cid in self.collection_ids}
            changes = row_diff(self.written, kept)
            if not changes:
                return upper
            request = controller_pb2.AppendUpdatesRequest(
                batch_id=batch_id,
                collections=[
                    storage_pb2.CollectionUpdates(
                        collection_id=collection_id,
                        updates=[
                            storage_pb2.Update(row=to_row(row), diff=diff) for row, diff in updates
                        ],
                    )
                    for collection_id, updates in changes.items()
                ],
            )
            try:
                upper = await self._append(request)
            except BaseException:
                # In the stream or not: learn which before the next append.
                self.stale = True
                raise
            self.written = kept
            metrics.CATALOG_APPENDS.inc()
            log.info(
                "catalog relations appended",
                batch_id=request.batch_id,
                updates=sum(len(u) for u in changes.values()),
                upper=upper,
            )
            return upper

    async def _append(self, request: controller_pb2.AppendUpdatesRequest) -> int:
        deadline = time.monotonic() + self._retry_for
        delay = 0.1
        while True:
            try:
                response = await self._controller.call(
                    "AppendUpdates", request, timeout=self._call_timeout
                )
                self.last_upper = max(self.last_upper, int(response.upper))
                return int(response.upper)
            except LoupeError as error:
                if error.code not in TRANSIENT or time.monotonic() + delay > deadline:
                    raise
                log.warning("append to storage failed; retrying", error=error.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
