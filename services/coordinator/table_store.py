"""Table storage: writes at timestamps from the catalog's oracle, and uppers that keep up.

The coordinator is the only writer of user tables (Materialize's model). Every
write takes a fresh timestamp ``ts`` from the catalog's timestamp oracle
(``WriteTimestamp``, durable) and commits one small part by
``compare_and_append(part, expected_upper, ts + 1)``. A write costs its own
tables, not every table: the uppers of other tables move when something needs
them to.

- A read at ``ts`` first moves the uppers of the tables it depends on past
  ``ts`` (``advance_to``: empty appends, only where behind), so it never waits
  on an idle table. A write in flight at an earlier timestamp then lands at
  the new upper instead, and the oracle is moved past that before the write
  is acknowledged: it was not acknowledged when the read chose ``ts``, so the
  read not seeing it is a valid serial order, and every later read sees it.
- A write also moves the tables maintained together with its table (the other
  inputs of indexes and materialized views that read it), so they advance at
  once rather than at the next tick.
- A background ticker moves every table once a second with a fresh timestamp
  (Materialize's group commit), so the oracle's read timestamp, ``mz_now()``
  and every table's upper follow the wall clock.

UPDATE and DELETE read the table at ``upper - 1`` and append their
retractions and insertions with that upper as the expected one. If the upper
moved meanwhile with no rows (a tick, a read), the plan still holds and lands
at the new upper; if another writer appended rows, the statement is planned
again on the new contents, at a new timestamp. Without this, a busy table's
writes livelocked: each planning outlasted the next tick or read, which moved
the upper and sent it back to plan again.

A transaction writing several tables appends them one by one (persist has no
append across shards), all at one timestamp: it holds the tables' upper locks
from the check of their uppers to the last append, and a tick or a read moving
one of them (``_advance``) waits on its lock meanwhile.

Writes go one at a time through the ``table_write`` admission queue
(``loupe.coordinator.admission``): under load they wait their turn. A write
that loses a race to rows is planned again after a growing pause, with no limit on
how often: only its ``statement_timeout`` (57014, before it commits) ends it.

History: every tick moves each table's ``since`` to ``ts - retention`` and
compacts its parts (``parts_to_merge``), so a table keeps ``retention`` of
history for ``AS OF`` and a bounded number of parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.transport import NatsServiceClient
from loupe.coordinator import metrics
from loupe.coordinator.admission import (
    RETRY_PAUSE,
    AdmissionQueue,
    backoff,
    pause,
    until_answered,
)
from loupe.coordinator.tables import Table, updates_table
from loupe.persist import Shard, UpperMismatch, open_location, parts_to_merge
from loupe.persist.location import Blob, Consensus
from loupe.persist.shard import ShardState, UpperNotify, arrow_schema
from loupe.proto.common.v1 import common_pb2

log = get_logger(__name__)

# The longest pause before a write that lost a race is planned again.
WRITE_RETRY_PAUSE_CAP = 0.25
# A table is compacted once it has more parts than this.
MAX_PARTS = 8

Update = tuple[tuple[Any, ...], int]
# Plans a write from the table's current contents (None when not needed):
# returns the updates and the statement's row count.
Plan = Callable[[pa.Table | None], tuple[list[Update], int]]


class TimestampOracle:
    """The catalog's timestamp oracle, as the coordinator uses it."""

    def __init__(self, catalog: NatsServiceClient, *, call_timeout: float = 5.0) -> None:
        self._catalog = catalog
        # One oracle call's limit. The oracle answers in milliseconds; a call with
        # no answer this long went to a catalog that died holding it, and is asked
        # again (``until_answered``) of the one that took its place. Before, such
        # a call waited the 30 s request timeout, and every table write queued
        # behind it (30 s to write again after the catalog restarted in 1).
        self.call_timeout = call_timeout

    async def read_timestamp(self) -> int:
        """A timestamp at which every completed write is visible (strict serializable)."""
        response = await self._catalog.call(
            "ReadTimestamp", common_pb2.Empty(), timeout=self.call_timeout
        )
        return int(response.timestamp)

    async def write_timestamp(self, at_least: int = 0, *, patience: float = 5.0) -> int:
        """A new write timestamp, durably later than every earlier one and >= ``at_least``.

        ``at_least`` is for writes whose time someone else chose (the storage
        writer's flushes): the oracle follows the wall clock, so waiting for the
        clock to pass ``at_least`` is enough.
        """
        deadline = time.monotonic() + patience
        while True:
            response = await self._catalog.call(
                "WriteTimestamp", common_pb2.Empty(), timeout=self.call_timeout
            )
            timestamp = int(response.timestamp)
            if timestamp >= at_least or time.monotonic() >= deadline:
                return timestamp
            await asyncio.sleep(min((at_least - timestamp) / 1000, 0.5))


def _rows_since(state: ShardState, upper: int) -> bool:
    """Whether any rows were appended to the shard at or after ``upper``."""
    return any(part.rows and part.upper > upper for part in state.parts)


@dataclass(frozen=True)
class WriteResult:
    timestamp: int
    count: int


class TableStore:
    """The shards of user tables, written by this coordinator.

    ``tables`` returns the tables that exist now (the coordinator's catalog);
    ``open`` must be called with the storage location before any write.
    """

    def __init__(
        self,
        oracle: TimestampOracle,
        tables: Callable[[], Iterable[Table]],
        *,
        retention_ms: int = 3_600_000,
        max_parts: int = MAX_PARTS,
        max_waiting: int = 1024,
    ) -> None:
        self.oracle = oracle
        self._tables = tables
        self.retention_ms = retention_ms
        self.max_parts = max_parts
        self.blob_uri = ""
        self.consensus_uri = ""
        self._location: tuple[Blob, Consensus] | None = None
        # Called with (shard_id, upper) after every write: replicas listening
        # to a table wake at once instead of at their next poll.
        self.notify: UpperNotify | None = None
        # Writes one at a time, the others wait in order: each builds on the
        # uppers the last one left.
        self.writes = AdmissionQueue(
            "table_write", capacity=1, max_waiting=max_waiting, what="a table write"
        )
        self._loading = 0
        # One lock per table, held while its upper is read and moved: a tick or a
        # read (``_advance``) never moves a table between a transaction's check of
        # its upper and its append, which would split the transaction over two
        # timestamps. Threads, not tasks: the appends run in ``to_thread``.
        self._upper_locks: dict[str, threading.Lock] = {}
        self._upper_locks_guard = threading.Lock()
        # A lower bound of each table's upper: the last one this coordinator set or
        # read. Uppers only grow, so a read at a time below it needs no advance (no
        # consensus read, no thread) whatever other processes did meanwhile.
        self._known_uppers: dict[str, int] = {}

    @property
    def is_open(self) -> bool:
        return self._location is not None

    def open(self, blob_uri: str, consensus_uri: str) -> None:
        """Use the storage location of the builtin collections for tables too."""
        if self._location is not None and (blob_uri, consensus_uri) == (
            self.blob_uri,
            self.consensus_uri,
        ):
            return
        self._location = open_location(blob_uri, consensus_uri)
        self.blob_uri, self.consensus_uri = blob_uri, consensus_uri

    def metadata(self, table: Table) -> common_pb2.CollectionMetadata:
        return table.metadata(self.blob_uri, self.consensus_uri)

    def shard(self, table_id: str) -> Shard:
        if self._location is None:
            raise LoupeError("FAILED_PRECONDITION", "table storage is not open yet")
        return Shard(table_id, *self._location, notify=self.notify)

    # -- writes --------------------------------------------------------------------------

    async def ensure(self, table: Table) -> None:
        """Create the table's shard (empty, upper 0) if it does not exist yet."""
        await asyncio.to_thread(self.shard(table.id).ensure, table.storage_columns)

    async def write(
        self, table: Table, plan: Plan, *, read: bool = False, along: Iterable[Table] = ()
    ) -> WriteResult:
        """Plan and append one write to ``table`` at a fresh oracle timestamp.

        ``read``: ``plan`` gets the table's contents at the time of the write
        (UPDATE, DELETE, keyed INSERT); otherwise None. ``along``: tables whose
        uppers move past the write too (read together with ``table``).

        A tick or a read that moves the upper past the timestamp meanwhile adds
        no rows: the write then lands at the new upper instead (the oracle is
        moved past it before the write is acknowledged), planned once. Only rows
        another writer appended in between make a reading write plan again.
        """
        along = [t for t in along if t.id != table.id]
        async with self.writes.admitted():
            delay = RETRY_PAUSE
            while True:
                timestamp = await until_answered("WriteTimestamp", self.oracle.write_timestamp)
                try:
                    landed, count = await asyncio.to_thread(
                        self._write_at, table, plan, read, timestamp, along
                    )
                except UpperMismatch as error:
                    # Rows landed between our read and our append: planned again,
                    # after a pause that grows, until it wins or its statement_timeout ends it.
                    metrics.TABLE_WRITE_RETRIES.inc()
                    log.info("table write lost a race; planning it again", error=str(error))
                    await pause(delay)
                    delay = backoff(delay, WRITE_RETRY_PAUSE_CAP)
                    continue
                await self._oracle_past(landed, timestamp)
                return WriteResult(landed, count)

    async def _oracle_past(self, landed: int, timestamp: int) -> None:
        """Make every later read timestamp see a write that landed after its oracle ``timestamp``."""
        if landed > timestamp:
            await until_answered(
                "WriteTimestamp", lambda: self.oracle.write_timestamp(at_least=landed)
            )

    async def write_all(
        self, writes: Sequence[tuple[Table, Plan, bool]], *, along: Iterable[Table] = ()
    ) -> int:
        """Plan and append the writes of one transaction, every table at one timestamp.

        Each ``(table, plan, read)`` as ``write`` takes it. Every plan runs before
        anything is appended (a unique violation writes nothing). Persist has no
        append across shards: this coordinator's ticks and reads wait on the
        tables' upper locks meanwhile, but should another process move a
        table's upper between the check and its append, that table's rows are
        written at a later timestamp (logged) rather than lost.
        """
        ids = {table.id for table, _, _ in writes}
        along = [t for t in along if t.id not in ids]
        async with self.writes.admitted():
            delay = RETRY_PAUSE
            # Ticks skip the tables meanwhile; one already under way waits on the
            # upper locks of the transaction's tables while they are checked and appended.
            self._loading += 1
            try:
                while True:
                    timestamp = await until_answered("WriteTimestamp", self.oracle.write_timestamp)
                    try:
                        landed, total = await asyncio.to_thread(
                            self._write_all_at, writes, timestamp, along
                        )
                    except UpperMismatch as error:
                        metrics.TABLE_WRITE_RETRIES.inc()
                        log.info(
                            "transaction write lost a race; planning it again", error=str(error)
                        )
                        await pause(delay)
                        delay = backoff(delay, WRITE_RETRY_PAUSE_CAP)
                        continue
                    await self._oracle_past(landed, timestamp)
                    return total
            finally:
                self._loading -= 1

    def _note_upper(self, table_id: str, upper: int) -> None:
        if upper > self._known_uppers.get(table_id, 0):
            self._known_uppers[table_id] = upper

    def _upper_lock(self, table_id: str) -> threading.Lock:
        with self._upper_locks_guard:
            return self._upper_locks.setdefault(table_id, threading.Lock())

    @contextlib.contextmanager
    def _uppers_held(self, tables: Iterable[Table]) -> Iterator[None]:
        """Hold the upper locks of ``tables``, taken in id order (no two holders deadlock)."""
        with contextlib.ExitStack() as stack:
            for table_id in sorted({table.id for table in tables}):
                stack.enter_context(self._upper_lock(table_id))
            yield

    def _write_all_at(
        self, writes: Sequence[tuple[Table, Plan, bool]], timestamp: int, along: list[Table]
    ) -> tuple[int, int]:
        """Returns the latest timestamp a table's rows landed at, and the row count."""
        with self._uppers_held(table for table, _, _ in writes):
            landed, total = self._append_all_at(writes, timestamp)
        self._advance(landed, along)
        return landed, total

    def _append_all_at(
        self, writes: Sequence[tuple[Table, Plan, bool]], timestamp: int
    ) -> tuple[int, int]:
        states = []
        for table, _, _ in writes:
            shard = self.shard(table.id)
            states.append((shard, shard.ensure(table.storage_columns)))
        # Past every upper a tick or a read moved beyond the oracle's timestamp.
        timestamp = max([timestamp, *(state.upper for _, state in states)])
        planned = []
        for (table, plan, read), (shard, state) in zip(writes, states, strict=True):
            contents = self._contents(shard, table, state.upper) if read else None
            updates, count = plan(contents)
            planned.append((table, shard, state.upper, updates, count))
        total = 0
        landed = timestamp
        for index, (table, shard, upper, updates, count) in enumerate(planned):
            part = updates_table(table, updates, timestamp) if updates else None
            try:
                shard.compare_and_append(part, upper, timestamp + 1)
                self._note_upper(table.id, timestamp + 1)
            except UpperMismatch:
                if index == 0:
                    raise  # nothing appended yet: the whole transaction is planned again
                log.warning(
                    "a transaction's table moved on during its commit; writing it later",
                    table=table.id,
                )
                later = self._write_later(table, updates, timestamp)
                log.info("transaction rows written later", table=table.id, timestamp=later)
                landed = max(landed, later)
            total += count
        return landed, total

    def _write_later(self, table: Table, updates: Any, timestamp: int) -> int:
        """Append ``updates`` to ``table`` at ``timestamp`` or past its current upper (a race
        lost to another process: this one's ticks and reads wait on the upper locks)."""
        shard = self.shard(table.id)
        state = shard.ensure(table.storage_columns)
        return self._land(table, shard, updates, state, timestamp, read=False)

    def _write_at(
        self, table: Table, plan: Plan, read: bool, timestamp: int, along: list[Table]
    ) -> tuple[int, int]:
        """Returns the timestamp the write landed at (>= ``timestamp``) and its row count."""
        shard = self.shard(table.id)
        state = shard.ensure(table.storage_columns)
        contents = self._contents(shard, table, state.upper) if read else None
        updates, count = plan(contents)
        landed = self._land(table, shard, updates, state, timestamp, read=read)
        self._advance(landed, along)
        return landed, count

    def _land(
        self,
        table: Table,
        shard: Shard,
        updates: Any,
        state: ShardState,
        timestamp: int,
        *,
        read: bool,
    ) -> int:
        """Append ``updates`` at ``timestamp``, or at the upper where a tick or a read moved it
        past that; returns the timestamp they landed at. ``read``: they were planned on the
        contents at ``state.upper``, so rows appended since then raise ``UpperMismatch``
        (plan again); an upper that only moved does not change the plan."""
        planned_at = state.upper
        while True:
            landed = max(timestamp, state.upper)
            part = updates_table(table, updates, landed) if updates else None
            try:
                shard.compare_and_append(part, state.upper, landed + 1, state=state)
                self._note_upper(table.id, landed + 1)
                return landed
            except UpperMismatch:
                state = shard.ensure(table.storage_columns)
                if read and _rows_since(state, planned_at):
                    raise

    async def contents(self, table: Table) -> pa.Table:
        """The table's consolidated contents at its latest complete time (``mz_diff`` counts)."""
        shard = self.shard(table.id)
        state = await asyncio.to_thread(shard.ensure, table.storage_columns)
        return await asyncio.to_thread(self._contents, shard, table, state.upper)

    @staticmethod
    def _contents(shard: Shard, table: Table, upper: int) -> pa.Table:
        if upper == 0:
            return arrow_schema(table.storage_columns, updates=False).empty_table()
        # Consolidated, one row per distinct row with its count in mz_diff.
        return shard.snapshot(upper - 1)

    async def load(self, write: Callable[[Callable[[str], Shard], int], None]) -> int:
        """Run ``write(shard_of, ts)`` at a fresh write timestamp, then move every upper past it.

        For bulk loads (a load generator's tables): under the write lock, so
        no tick moves an upper past ``ts`` meanwhile. Returns ``ts``.
        """
        async with self.writes.admitted():
            self._loading += 1
            try:
                timestamp = await self.oracle.write_timestamp()
                await asyncio.to_thread(write, self.shard, timestamp)
                await asyncio.to_thread(self._advance, timestamp, list(self._tables()))
            finally:
                self._loading -= 1
            return timestamp

    async def advance_all(self, at_least: int = 0) -> int:
        """Move every table's upper to a fresh timestamp (>= ``at_least``) + 1; returns it.

        Without the write lock, so a tick over many tables never holds writes
        up (a write it races with is planned again); not while a bulk load
        writes at a timestamp of its own.
        """
        timestamp = await self.oracle.write_timestamp(at_least)
        if self._location is not None and not self._loading:
            await asyncio.to_thread(self._advance, timestamp, list(self._tables()))
        return timestamp

    async def advance_to(self, tables: Iterable[Table], timestamp: int) -> None:
        """Make ``tables`` complete through ``timestamp`` (uppers past it) before a read at it.

        Without the write lock: a write racing at an earlier timestamp lands at
        the new upper instead (see the module docstring). A table whose upper
        this coordinator already saw past ``timestamp`` is left alone: no
        consensus read, no thread (a read between two ticks, most reads).
        """
        behind = [t for t in tables if self._known_uppers.get(t.id, 0) <= timestamp]
        if behind and self._location is not None:
            await asyncio.to_thread(self._advance, timestamp, behind)

    def _advance(self, timestamp: int, tables: Iterable[Table]) -> None:
        for table in tables:
            shard = self.shard(table.id)
            try:
                with self._upper_lock(table.id):
                    state = shard.ensure(table.storage_columns)
                    self._note_upper(table.id, state.upper)
                    if state.upper <= timestamp:
                        shard.compare_and_append(None, state.upper, timestamp + 1, state=state)
                        self._note_upper(table.id, timestamp + 1)
            except UpperMismatch:
                pass  # another coordinator advanced it meanwhile: it is moving, as wanted
            except Exception as error:
                log.warning("could not advance a table's upper", table=table.id, error=str(error))

    # -- the ticker ----------------------------------------------------------------------

    async def tick(self, *, compact: bool = False) -> int:
        """One group commit without writes: a fresh timestamp for the oracle and every table."""
        timestamp = await self.advance_all()
        if compact and self._location is not None:
            await asyncio.to_thread(self._compact, timestamp - self.retention_ms)
        return timestamp

    def _compact(self, since: int) -> None:
        for table in list(self._tables()):
            shard = self.shard(table.id)
            try:
                state = shard.state(missing_ok=True)
                if state is None or state.upper == 0:
                    continue
                # Never past the latest complete time: it must stay readable.
                target = min(since, state.upper - 1)
                parts = parts_to_merge(state.parts, self.max_parts)
                if parts:
                    shard.compact(target, parts)
                elif target > state.since:
                    shard.downgrade_since(target)
            except Exception as error:
                log.warning("could not compact a table", table=table.id, error=str(error))
