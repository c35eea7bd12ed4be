"""Compaction and retention of the builtin collections, written by Spark jobs.

Every ``compaction_interval`` the writer compacts each builtin collection:

1. its ``since`` moves up to ``upper - retention_ms`` (the collection's
   ``BuiltinCollection.retention_ms``): ``AS OF`` reads reach that far back;
2. once at least ``min_parts_below_since`` parts lie wholly below the since,
   they are merged into ONE part: timestamps below the since move up to it,
   diffs are summed per row and time, zeros dropped (``merged_updates``, in
   this process, as a flush's reads are). This is what keeps a collection's
   size bounded by what it holds, not by how often it changed;
3. if the shard still has more than ``max_parts`` parts, the newest ones are
   merged the same way, size-tiered (``persist.parts_to_merge``), so the part
   count stays bounded however many flushes there were, while history from
   the since on stays exact.

The merged parts of every collection of a step are written together, as a
flush's are: one part store job (``PartStore.merge``, a Spark job) per step,
write group and ``CompactionPolicy.merge_batch_rows`` rows, one ``mz_shard=<id>`` directory
per collection under ``_compactions/<uuid>``.

Each merge is put in by compare-and-set on the shard's seqno
(``Shard.replace_parts``): flushes that append meanwhile are kept, and a part
is deleted only once no state refers to it.

Retention of rows: a collection with ``expire_by`` (the ``*_history``
relations) loses rows whose ``expire_by`` time is older than its retention.
``expired_rows`` finds them; the writer appends their retraction in its next
flush (same CAS as the rest of the flush, so never twice), and a later merge
consolidates the pair away once both are below the since.

Garbage of the statement log (seed 000: "prepared statements, SQL text and
sessions no longer referenced are collected"), in the same retention pass and
the same flush, so one pass converges (``unreferenced_statement_log_rows``):

- a prepared statement goes once no execution left references it and its
  session is not live;
- a session goes once no prepared statement left references it and it is not
  live;
- an SQL text ``(prepared_day, sql_hash)`` goes once no prepared statement left
  has that hash and was prepared that day, and the day is before yesterday
  (UTC): the coordinator dedupes text within the current day only, so a
  reference to a day that is over comes with a text row of its own.

"Left" means after this flush: the shard's contents, the updates the flush
brings and the expired rows it retracts. Live sessions are the keys
``<coordinator>.<session id>`` of the JetStream KV bucket
``LIVE_SESSIONS_BUCKET``, which the coordinator puts when it first logs a
session and purges when the session closes (or when it starts again: a dead
coordinator's sessions are dead); ``live_statement_log_sessions`` lists them
on the server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats.js.errors
import pyarrow as pa
import pyarrow.compute as pc

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SESSION_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
    BuiltinCollection,
)
from loupe.common.logging import get_logger
from loupe.controller.storage.metrics import METRICS, StorageWriterMetrics
from loupe.controller.storage.parts import PartStore, ingest_schema, ingest_updates, part_size
from loupe.persist import (
    DIFF_COLUMN,
    TIMESTAMP_COLUMN,
    Blob,
    Part,
    Shard,
    ShardState,
    consolidate,
    parts_to_merge,
)
from loupe.storage.names import LIVE_SESSIONS_BUCKET, LIVE_SESSIONS_STREAM
from loupe.storage.schema import SHARD_COLUMN, plan_write_groups

log = get_logger(__name__)

COMPACTION_PREFIX = "_compactions"

# The statement log collections whose rows go once nothing references them, and
# the one whose rows reference them first.
STATEMENT_LOG_COLLECTED = (MZ_SESSION_HISTORY, MZ_PREPARED_STATEMENT_HISTORY, MZ_SQL_TEXT)
STATEMENT_LOG_REFERENCES = (*STATEMENT_LOG_COLLECTED, MZ_STATEMENT_EXECUTION_HISTORY)


@dataclass(frozen=True)
class CompactionPolicy:
    """When the compactor merges parts."""

    # More parts than this: merge the newest, size-tiered, down to half.
    max_parts: int = 16
    # Merge the parts wholly below the since once there are this many.
    min_parts_below_since: int = 2
    # Rows one merge job reads at most (one shard's merge may be bigger): its
    # input is in the controller's memory at once.
    merge_batch_rows: int = 1_000_000


@dataclass
class CompactionResult:
    """What one compaction of one shard did."""

    shard_id: str
    since: int = 0
    parts_before: int = 0
    parts_after: int = 0
    merges: int = 0
    rows_read: int = 0
    rows_written: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass
class _Merge:
    """One planned merge: ``parts`` of ``shard`` into one part, forwarded to ``since``."""

    shard: Shard
    collection: BuiltinCollection
    state: ShardState
    parts: list[Part]
    since: int
    result: CompactionResult

    @property
    def rows(self) -> int:
        return sum(part.rows for part in self.parts)


class Compactor:
    """Downgrades sinces and merges parts of shards, many shards per part store job."""

    def __init__(
        self,
        store: PartStore,
        blob: Blob,
        policy: CompactionPolicy | None = None,
        metrics: StorageWriterMetrics = METRICS,
    ) -> None:
        self.store = store
        self.blob = blob
        self.policy = policy or CompactionPolicy()
        self.metrics = metrics

    def compact_all(
        self,
        shards: Sequence[tuple[Shard, BuiltinCollection]],
        *,
        interval: float,
        stopping: Callable[[], bool] = lambda: False,
    ) -> list[CompactionResult]:
        """One pass over ``shards`` (the module docstring's steps); never raises.

        Every shard's since moves first. Then the merges of parts below the
        sinces of all shards are planned and run together, then the size-tiered
        merges: each step is one part store job per ``policy.merge_batch_rows`` rows
        (and write group), however many shards it merges. A Spark job costs
        about a second on a busy machine even for a few rows, and one job per
        shard made a pass over the thirty-odd builtin collections take longer
        than the retention it keeps (33 s in CI, with a 15 s retention).

        The sinces move again whenever merges took ``interval`` (``advance_since``),
        so retention holds however long a pass is. The pass ends early when
        ``stopping()`` says so, or when the part store's Spark session was lost
        during it: the new JVM starts cold, and the flushes waiting for it come
        first (the next pass, an interval later, compacts what is left). Before,
        the pass went on into the new JVM and the first flush after a restart
        queued behind its merges (46 s to answer mz_catalog again in the chaos
        test instead of the restart's 17).
        """
        began = time.monotonic()
        restarts = self._spark_restarts()
        advanced = self._advance_sinces(shards)
        results = {shard.shard_id: CompactionResult(shard.shard_id) for shard, _ in shards}
        sinces: dict[str, int] = {}
        for planner in (self._plan_below_since, self._plan_tiered):
            plans = []
            for shard, collection in shards:
                result = results[shard.shard_id]
                if result.errors:
                    continue
                try:
                    plan = planner(shard, collection, result, sinces)
                except Exception as error:
                    self._failed([result], error, shard.shard_id)
                    continue
                if plan is not None:
                    plans.append(plan)
            for batch in _batches(plans, self.policy.merge_batch_rows):
                if stopping():
                    return self._finish(shards, results, sinces, began)
                self._merge_batch(batch)
                if self._spark_restarts() != restarts:
                    log.warning(
                        "storage_compaction_pass_cut",
                        reason="the Spark session was lost; flushes come first",
                        failed=[merge.shard.shard_id for merge in batch],
                    )
                    return self._finish(shards, results, sinces, began)
                if time.monotonic() - advanced >= interval:
                    advanced = self._advance_sinces(shards)
        return self._finish(shards, results, sinces, began)

    def compact(self, shard: Shard, collection: BuiltinCollection) -> CompactionResult:
        """Compact one shard (``compact_all`` of just it); never raises."""
        (result,) = self.compact_all([(shard, collection)], interval=float("inf"))
        return result

    def _spark_restarts(self) -> int | None:
        """Restarts of the store's Spark session so far, counting one that is due;
        None for a store without Spark."""
        supervisor = getattr(self.store, "supervisor", None)
        if supervisor is None:
            return None
        health = supervisor.health()
        return health.restarts + (health.status == "restarting")

    def _advance_sinces(self, shards: Sequence[tuple[Shard, BuiltinCollection]]) -> float:
        for shard, collection in shards:
            self.advance_since(shard, collection)
        return time.monotonic()

    def advance_since(self, shard: Shard, collection: BuiltinCollection) -> None:
        """Only step 1: the since to ``upper - retention_ms`` (one CAS, no job; never raises).

        The writer does this for every collection before, and between, the merges of
        a pass: merges are Spark jobs, and a pass can take longer than the
        compaction interval, which would otherwise keep collections' history that
        much past their retention.
        """
        try:
            state = shard.state()
            if state.upper == 0:
                return
            since = target_since(state, collection.retention_ms)
            if state.since < since:
                shard.downgrade_since(since)
        except Exception:
            log.exception("storage_since_advance_failed", shard=shard.shard_id)

    def _plan_below_since(
        self,
        shard: Shard,
        collection: BuiltinCollection,
        result: CompactionResult,
        sinces: dict[str, int],
    ) -> _Merge | None:
        """Step 2's merge of ``shard``: its oldest parts wholly below its since, if enough."""
        state = shard.state()
        result.parts_before = result.parts_after = len(state.parts)
        if state.upper == 0:
            return None
        since = sinces[shard.shard_id] = result.since = target_since(state, collection.retention_ms)
        below = _leading_parts_below(state.parts, since)
        if len(below) < max(2, self.policy.min_parts_below_since):
            return None
        run = _size_tiered(below)
        if len(run) < 2:
            return None
        return _Merge(shard, collection, state, run, since, result)

    def _plan_tiered(
        self,
        shard: Shard,
        collection: BuiltinCollection,
        result: CompactionResult,
        sinces: dict[str, int],
    ) -> _Merge | None:
        """Step 3's merge of ``shard``: its newest parts, size-tiered, if it has too many."""
        if shard.shard_id not in sinces:
            return None
        state = shard.state()
        tiered = parts_to_merge(state.parts, self.policy.max_parts)
        if not tiered:
            return None
        return _Merge(shard, collection, state, tiered, sinces[shard.shard_id], result)

    def _merge_batch(self, batch: Sequence[_Merge]) -> None:
        """Read, forward and consolidate each merge's parts, write them all with one
        part store job per write group, and put each in its shard (one CAS each)."""
        began = time.monotonic()
        tables: dict[str, pa.Table] = {}
        read: list[_Merge] = []
        for merge in batch:
            try:
                updates = merge.shard.read_updates(
                    dataclasses.replace(merge.state, parts=list(merge.parts))
                )
                tables[merge.collection.id] = merged_updates(
                    merge.state.columns, updates, merge.since
                )
            except FileNotFoundError:
                self.metrics.compactions.labels("lost").inc()
                continue  # another compaction replaced some of them first
            except Exception as error:
                self._failed([merge.result], error, merge.shard.shard_id)
                continue
            merge.result.rows_read += updates.num_rows
            read.append(merge)
        by_id = {merge.collection.id: merge for merge in read}
        try:
            # Each shard as its stored columns say (the reader casts every part to them).
            groups = plan_write_groups(
                [
                    dataclasses.replace(
                        m.collection, columns=tuple((n, k) for n, k in m.state.columns)
                    )
                    for m in read
                ]
            )
        except Exception as error:  # a stored column no job can write
            self._failed([m.result for m in read], error, *by_id)
            return
        for group in groups:
            merges = [by_id[collection.id] for collection in group.collections]
            key = f"{COMPACTION_PREFIX}/{_unique()}"
            written = time.monotonic()
            self.metrics.compaction_jobs.inc()
            try:
                self.store.merge(
                    group,
                    {m.collection.id: tables[m.collection.id] for m in merges},
                    self.blob.path(key),
                )
            except Exception as error:
                with contextlib.suppress(Exception):
                    self.blob.delete(key)
                self._failed([m.result for m in merges], error, *(m.shard.shard_id for m in merges))
                continue
            seconds = round(time.monotonic() - written, 3)
            for merge in merges:
                self._put(merge, f"{key}/{SHARD_COLUMN}={merge.shard.shard_id}", tables, seconds)
        if read:
            self.metrics.compaction_duration.observe(time.monotonic() - began)

    def _put(
        self, merge: _Merge, key: str, tables: Mapping[str, pa.Table], job_seconds: float
    ) -> None:
        """Put one merge's written part in place of its parts (or none, if all cancelled).

        ``job_seconds``: how long the part store's job that wrote it (and others) took.
        """
        rows = tables[merge.collection.id].num_rows
        merged = _merged_part(key, merge.parts, merge.since, rows, self.blob.path(key))
        try:
            new_state = merge.shard.replace_parts(
                merge.parts, merged if rows else None, merge.since
            )
        except Exception as error:
            delete_part(self.blob, key)
            self._failed([merge.result], error, merge.shard.shard_id)
            return
        if new_state is None:
            if rows:
                delete_part(self.blob, key)
            self.metrics.compactions.labels("lost").inc()
            return
        for part in merge.parts:
            delete_part(self.blob, part.key)
        merge.result.merges += 1
        merge.result.rows_written += rows
        self.metrics.compactions.labels("ok").inc()
        log.info(
            "storage_compacted",
            shard=merge.shard.shard_id,
            parts=len(merge.parts),
            rows_in=merge.rows,
            rows_out=rows,
            since=merge.since,
            store=self.store.name,
            job_seconds=job_seconds,
        )

    def _failed(self, results: Sequence[CompactionResult], error: Exception, *shards: str) -> None:
        log.error("storage_compaction_failed", shards=list(shards), exc_info=error)
        for result in results:
            result.errors.append(f"{type(error).__name__}: {error}")
            self.metrics.compactions.labels("failed").inc()

    def _finish(
        self,
        shards: Sequence[tuple[Shard, BuiltinCollection]],
        results: Mapping[str, CompactionResult],
        sinces: Mapping[str, int],
        began: float,
    ) -> list[CompactionResult]:
        """Each shard's since where its plan put it, and the results' part counts."""
        seconds = time.monotonic() - began
        for shard, _ in shards:
            result = results[shard.shard_id]
            result.seconds = seconds
            if shard.shard_id not in sinces:
                continue
            try:
                state = shard.state()
                if state.since < sinces[shard.shard_id]:
                    state = shard.downgrade_since(sinces[shard.shard_id])
            except Exception as error:
                self._failed([result], error, shard.shard_id)
                continue
            result.since = state.since
            result.parts_after = len(state.parts)
        return [results[shard.shard_id] for shard, _ in shards]


def merged_updates(columns: Sequence[Any], updates: pa.Table, since: int) -> pa.Table:
    """A merge's output: ``updates`` (a shard's, with ``mz_timestamp``) in ingest types,
    their times forwarded to ``since``, diffs summed per row and time, zeros dropped."""
    columns = [(name, kind) for name, kind in columns]
    updates = ingest_updates(columns, updates)
    forwarded = pc.max_element_wise(updates.column(TIMESTAMP_COLUMN), pa.scalar(since, pa.int64()))
    updates = updates.set_column(
        updates.schema.get_field_index(TIMESTAMP_COLUMN), TIMESTAMP_COLUMN, forwarded
    )
    keys = [name for name, _ in columns] + [TIMESTAMP_COLUMN]
    return consolidate(updates, keys).select(updates.schema.names).cast(updates.schema)


def _batches(plans: Sequence[_Merge], rows: int) -> list[list[_Merge]]:
    """``plans`` cut into runs of at most ``rows`` rows read (a bigger plan alone)."""
    batches: list[list[_Merge]] = []
    total = 0
    for plan in plans:
        if batches and total + plan.rows <= rows:
            batches[-1].append(plan)
            total += plan.rows
        else:
            batches.append([plan])
            total = plan.rows
    return batches


def target_since(state: ShardState, retention_ms: int) -> int:
    """The since a shard may have: ``retention_ms`` behind its upper, never past its
    latest complete time, never back."""
    return max(state.since, min(state.upper - 1, state.upper - retention_ms))


def expired_rows(
    shard: Shard, collection: BuiltinCollection, now_ms: int, snapshot: pa.Table | None = None
) -> pa.Table | None:
    """Retractions of the rows of ``collection`` older than its retention, or None.

    The rows are the shard's current contents (``snapshot``, if already read)
    whose ``expire_by`` time is before ``now - retention_ms``; the table has
    the collection's columns in ingest types and ``mz_diff`` = minus their
    multiplicity.
    """
    if collection.expire_by is None:
        return None
    if snapshot is None:
        if shard.state().upper == 0:
            return None
        snapshot = shard.snapshot()
    cutoff = dt.datetime.fromtimestamp((now_ms - collection.retention_ms) / 1000, dt.UTC)
    times = snapshot.column(collection.expire_by)
    old = pc.and_(
        pc.less(times, pa.scalar(cutoff, times.type)), pc.greater(snapshot.column(DIFF_COLUMN), 0)
    )
    expired = snapshot.filter(pc.fill_null(old, False))
    if expired.num_rows == 0:
        return None
    retractions = expired.set_column(
        expired.schema.get_field_index(DIFF_COLUMN),
        DIFF_COLUMN,
        pc.negate(expired.column(DIFF_COLUMN)),
    )
    return ingest_updates(collection.columns, retractions, timestamp=False)


async def live_statement_log_sessions(nc: Any) -> set[str]:
    """Ids of the sessions a coordinator has logged and not closed, as the server lists them.

    The KV stream's subject list is read on the server (``KeyValue.keys()``
    is racy: its watcher may report an empty bucket while messages are still
    on their way). No bucket yet: no coordinator has logged a session.
    """
    prefix = f"$KV.{LIVE_SESSIONS_BUCKET}."
    try:
        info = await nc.jetstream().stream_info(LIVE_SESSIONS_STREAM, subjects_filter=f"{prefix}>")
    except nats.js.errors.NotFoundError:
        return set()
    # Session ids are uuid hex; the coordinator's name before them may hold dots.
    return {subject.rsplit(".", 1)[1] for subject in info.state.subjects or {}}


def statement_log_contents(
    shard: Shard,
    collection: BuiltinCollection,
    pending: pa.Table | None,
    snapshot: pa.Table | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """What ``collection`` holds once ``pending`` (updates with ``mz_diff``) is applied.

    Consolidated, in ingest types, only rows with a positive multiplicity;
    ``columns`` narrows it to those (their multiplicities summed).
    """
    kinds = dict(collection.columns)
    names = list(columns) if columns is not None else collection.column_names
    typed = [(name, kinds[name]) for name in names]
    schema = ingest_schema(typed, timestamp=False)
    parts = []
    if snapshot is None and shard.state().upper != 0:
        snapshot = shard.snapshot()
    if snapshot is not None:
        parts.append(ingest_updates(typed, snapshot, timestamp=False))
    if pending is not None and pending.num_rows:
        parts.append(ingest_updates(typed, pending, timestamp=False))
    if not parts:
        return schema.empty_table()
    # Consolidated by polars, whose text comes back as large_string: cast back.
    contents = consolidate(pa.concat_tables(parts), names).cast(schema)
    return contents.filter(pc.greater(contents.column(DIFF_COLUMN), 0))


def unreferenced_statement_log_rows(
    contents: Mapping[str, pa.Table],
    referenced_prepared_statements: pa.Array | pa.ChunkedArray,
    live_sessions: Collection[str] | None,
    now_ms: int,
) -> dict[str, pa.Table]:
    """Retractions of the statement log rows nothing references any more (module docstring).

    ``contents`` holds, by collection id, what ``statement_log_contents`` says
    the session, prepared statement and SQL text collections hold after this
    flush; ``referenced_prepared_statements`` the prepared statement ids the
    executions left after it reference. With ``live_sessions`` None (they could
    not be listed) no prepared statement or session is collected, only SQL text
    no prepared statement refers to. Empty retractions are left out.
    """
    prepared = contents[MZ_PREPARED_STATEMENT_HISTORY.id]
    garbage: dict[str, pa.Table] = {}
    if live_sessions is not None:
        live = pa.array(sorted(live_sessions), pa.string())
        unused = pc.and_(
            pc.invert(_in(prepared.column("id"), referenced_prepared_statements)),
            pc.invert(_in(prepared.column("session_id"), live)),
        )
        garbage[MZ_PREPARED_STATEMENT_HISTORY.id] = prepared.filter(unused)
        prepared = prepared.filter(pc.invert(unused))
        sessions = contents[MZ_SESSION_HISTORY.id]
        unused = pc.and_(
            pc.invert(_in(sessions.column("session_id"), prepared.column("session_id"))),
            pc.invert(_in(sessions.column("session_id"), live)),
        )
        garbage[MZ_SESSION_HISTORY.id] = sessions.filter(unused)
    texts = contents[MZ_SQL_TEXT.id]
    day_type = texts.schema.field("prepared_day").type
    prepared_days = pc.floor_temporal(prepared.column("prepared_at"), unit="day").cast(day_type)
    used = _text_key(prepared_days, prepared.column("sql_hash"))
    today = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    over = pc.less(texts.column("prepared_day"), pa.scalar(today - dt.timedelta(days=1), day_type))
    unused = pc.and_(
        pc.fill_null(over, False),
        pc.invert(_in(_text_key(texts.column("prepared_day"), texts.column("sql_hash")), used)),
    )
    garbage[MZ_SQL_TEXT.id] = texts.filter(unused)
    return {
        cid: rows.set_column(
            rows.schema.get_field_index(DIFF_COLUMN),
            DIFF_COLUMN,
            pc.negate(rows.column(DIFF_COLUMN)),
        )
        for cid, rows in garbage.items()
        if rows.num_rows
    }


def _in(values: pa.ChunkedArray | pa.Array, among: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Whether each of ``values`` is one of ``among``; a null is in nothing."""
    if isinstance(among, pa.ChunkedArray):
        among = among.combine_chunks()
    return pc.fill_null(pc.is_in(values, value_set=among, skip_nulls=True), False)


def _text_key(
    days: pa.ChunkedArray | pa.Array, hashes: pa.ChunkedArray | pa.Array
) -> pa.ChunkedArray | pa.Array:
    """``(prepared_day, sql_hash)`` as one text value, to look pairs up with ``is_in``."""
    return pc.binary_join_element_wise(pc.cast(pc.cast(days, pa.int64()), pa.string()), hashes, "/")


def delete_part(blob: Blob, key: str) -> None:
    """Delete a replaced part, and the flush directory it was in once that is empty."""
    try:
        blob.delete(key)
    except Exception:
        log.warning("storage_part_not_deleted", key=key)
        return
    parent = os.path.dirname(blob.path(key))
    if os.path.isdir(parent):
        # Only succeeds when no other shard's part is left in it.
        with contextlib.suppress(OSError):
            os.rmdir(parent)


def _leading_parts_below(parts: Sequence[Part], since: int) -> list[Part]:
    """The oldest parts, in order, whose updates all lie before ``since``."""
    below = []
    for part in parts:
        if part.lower < part.upper <= since:
            below.append(part)
        else:
            break
    return below


def _size_tiered(parts: Sequence[Part], ratio: int = 4) -> list[Part]:
    """The newest of ``parts`` plus each older one at most ``ratio`` times the newer ones chosen.

    A big old part is rewritten only once the newer ones add up to a fair
    share of its size, so an update is rewritten about log(size) times, not
    at every compaction, and what is left unmerged is at most about
    1/``ratio`` of what is merged.
    """
    chosen = [parts[-1]]
    total = parts[-1].rows
    for part in reversed(parts[:-1]):
        if part.rows > ratio * total:
            break
        chosen.insert(0, part)
        total += part.rows
    return chosen


def _merged_part(key: str, parts: Sequence[Part], since: int, rows: int, path: str) -> Part:
    """The Part of a merge output: its times are the inputs' forwarded to ``since``."""
    if any(p.upper <= p.lower for p in parts):
        lower = upper = 0  # some input's bounds are unknown: so are the output's
    else:
        lower = min(max(p.lower, since) for p in parts)
        upper = max(max(p.upper, since + 1) for p in parts)
    return Part(key, lower, upper, rows, part_size(path))


def _unique() -> str:
    return uuid.uuid4().hex
