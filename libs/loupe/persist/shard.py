"""A shard: an ordered list of immutable Parquet parts of updates.

Every part holds rows ``(data columns…, mz_timestamp uint64, mz_diff int64)``.
The shard's state (parts, since, upper, seqno) lives in Consensus and changes
only by compare-and-set, so concurrent writers can never interleave: of two
``compare_and_append`` calls with the same expected upper exactly one wins.

``compact`` replaces parts with one consolidated part (another CAS, on the
seqno), forwarding updates before ``since`` to ``since``; ``parts_to_merge``
picks which parts so that their number stays bounded while each update is
rewritten only a few times. Readers that find a part gone (compacted away
after they read the state) re-read the state and try again.

Parts are read through the blob's ``pyarrow.fs`` filesystem
(``Blob.filesystem_path``), so any blob plugin serves reads. ``listen``
hands out new updates as the upper advances (``loupe.persist.listen``); the
optional ``notify`` hook tells listeners elsewhere that it did.
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from loupe.common.logging import get_logger
from loupe.persist.location import Blob, Consensus
from loupe.proto.common.v1 import common_pb2
from loupe.proto.storage.v1 import storage_pb2
from loupe.sqltypes import arrow_type

if TYPE_CHECKING:
    from loupe.persist.listen import Listener

log = get_logger(__name__)

TIMESTAMP_COLUMN = "mz_timestamp"
DIFF_COLUMN = "mz_diff"


class UpperMismatch(Exception):
    """The shard's upper was not the expected one: another writer got there first."""

    def __init__(self, shard_id: str, expected: int, current: int) -> None:
        super().__init__(f"shard {shard_id}: expected upper {expected}, found {current}")
        self.expected = expected
        self.current = current


class SinceError(Exception):
    """A read before the shard's since: that history is compacted away."""


def _read_file(filesystem: pafs.FileSystem, path: str, columns: list[str]) -> pa.Table | None:
    """The part at ``path`` when it is one local file (a table's write), read as that file:
    a dataset's discovery (``pq.read_table``) costs about 0.25 ms more per part, which a
    replica pays for every small write it reads. None for anything else (a directory, as
    Spark writes a part, or a remote store), which ``pq.read_table`` reads."""
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return None
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        return None
    with filesystem.open_input_file(path) as file:
        return pq.ParquetFile(file).read(columns=columns)


@dataclass(frozen=True)
class Part:
    key: str
    lower: int
    upper: int
    rows: int
    bytes: int = 0


@dataclass
class ShardState:
    shard_id: str
    seqno: int
    since: int
    upper: int
    parts: list[Part] = field(default_factory=list)
    columns: list[tuple[str, str]] = field(default_factory=list)
    # Writer name -> how far its input is applied (see compare_and_append).
    progress: dict[str, int] = field(default_factory=dict)

    def to_proto(self) -> storage_pb2.ShardState:
        return storage_pb2.ShardState(
            shard_id=self.shard_id,
            seqno=self.seqno,
            since=self.since,
            upper=self.upper,
            parts=[
                storage_pb2.Part(
                    key=p.key, lower=p.lower, upper=p.upper, rows=p.rows, bytes=p.bytes
                )
                for p in self.parts
            ],
            relation_desc=common_pb2.RelationDesc(
                columns=[common_pb2.Column(name=n, type=t, nullable=True) for n, t in self.columns]
            ),
            progress=self.progress,
        )

    @classmethod
    def from_proto(cls, message: storage_pb2.ShardState, seqno: int) -> ShardState:
        return cls(
            shard_id=message.shard_id,
            seqno=seqno,
            since=message.since,
            upper=message.upper,
            parts=[Part(p.key, p.lower, p.upper, p.rows, p.bytes) for p in message.parts],
            columns=[(c.name, c.type) for c in message.relation_desc.columns],
            progress=dict(message.progress),
        )


def arrow_schema(columns: Sequence[tuple[str, str]], *, updates: bool = True) -> pa.Schema:
    fields = [pa.field(name, arrow_type(kind)) for name, kind in columns]
    if updates:
        fields += [pa.field(TIMESTAMP_COLUMN, pa.uint64()), pa.field(DIFF_COLUMN, pa.int64())]
    return pa.schema(fields)


def consolidate(updates: pa.Table, data_columns: Sequence[str]) -> pa.Table:
    """Sum diffs per distinct row and drop rows whose diff sums to zero.

    Rows come out in the order of their first occurrence. When every row
    occurs once (a shard just compacted, an insert-only collection) the sums
    are the diffs themselves, and hashing the rows (to prove it) is several
    times cheaper than grouping them.
    """
    if updates.num_rows == 0:
        return updates.select([*data_columns, DIFF_COLUMN])
    frame = pl.from_arrow(updates.select([*data_columns, DIFF_COLUMN]))
    assert isinstance(frame, pl.DataFrame)
    if not data_columns:
        summed = frame.select(pl.col(DIFF_COLUMN).sum())
    elif _all_distinct(frame, data_columns):
        summed = frame
    else:
        summed = frame.group_by(list(data_columns), maintain_order=True).agg(
            pl.col(DIFF_COLUMN).sum()
        )
    return summed.filter(pl.col(DIFF_COLUMN) != 0).to_arrow()


def _all_distinct(frame: pl.DataFrame, columns: Sequence[str]) -> bool:
    """Whether no two rows are equal in ``columns``; False when in doubt.

    Equal rows hash equally, so as many distinct hashes as rows proves the
    rows distinct; a hash collision merely sends us to the exact group_by.
    """
    try:
        hashes = frame.select(list(columns)).hash_rows()
    except pl.exceptions.PolarsError:  # a type polars cannot hash: group instead
        return False
    return hashes.n_unique() == frame.height


def parts_to_merge(
    parts: Sequence[Part], max_parts: int, *, down_to: int | None = None
) -> list[Part]:
    """The parts to ``compact`` once there are more than ``max_parts``; [] until then.

    Size-tiered, like persist's spine: the newest part, plus each older part no
    bigger than all the newer ones chosen so far together, plus as many more as
    it takes to leave at most ``down_to`` parts (default half of
    ``max_parts``, so that compactions come in batches, not at every append).
    Recent small parts merge often, a big old part only once the newer ones
    add up to its size, so an update is rewritten about log(size) times.
    """
    keep = max(1, max_parts // 2) if down_to is None else down_to
    if not 1 <= keep <= max_parts:
        raise ValueError(f"need 1 <= down_to ({keep}) <= max_parts ({max_parts})")
    if len(parts) <= max_parts:
        return []
    start = len(parts) - 1
    total = parts[start].rows
    while start > 0 and (parts[start - 1].rows <= total or start > keep - 1):
        start -= 1
        total += parts[start].rows
    return list(parts[start:])


def expand(consolidated: pa.Table) -> pa.Table:
    """Rows repeated by their (positive) multiplicity, without the diff column."""
    diffs = consolidated.column(DIFF_COLUMN).to_pylist()
    data = consolidated.drop_columns([DIFF_COLUMN])
    if any(d < 0 for d in diffs):
        raise ValueError("negative multiplicity in a snapshot: the collection is not consistent")
    if all(d == 1 for d in diffs):
        return data
    indices = [i for i, d in enumerate(diffs) for _ in range(d)]
    return data.take(pa.array(indices, type=pa.int64()))


def overlaps(part: Part, lower: int, upper: int | None = None) -> bool:
    """Whether ``part`` may hold updates at times in ``[lower, upper)``.

    A part whose bounds are unknown (``upper <= lower``, e.g. written by hand
    without them) may hold anything.
    """
    if part.upper <= part.lower:
        return True
    return part.upper > lower and (upper is None or part.lower < upper)


# Called with (shard_id, new upper) after every successful compare_and_append.
UpperNotify = Callable[[str, int], None]


class Shard:
    """Handle to one shard; cheap to create, safe to use from several processes.

    ``notify`` (optional) is called with ``(shard_id, new_upper)`` after each
    successful ``compare_and_append``, e.g. ``listen.nats_upper_notifier(nc)``
    to wake listeners in other processes; its failures are logged, never raised
    (the append is durable by then, and listeners also poll).
    """

    def __init__(
        self,
        shard_id: str,
        blob: Blob,
        consensus: Consensus,
        *,
        notify: UpperNotify | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.blob = blob
        self.consensus = consensus
        self.notify = notify

    # -- state ------------------------------------------------------------------

    def ensure(self, columns: Sequence[tuple[str, str]]) -> ShardState:
        """Create the shard (upper 0, since 0) if it does not exist yet."""
        state = self.state(missing_ok=True)
        if state is not None:
            return state
        fresh = ShardState(self.shard_id, 0, 0, 0, [], list(columns))
        self.consensus.compare_and_set(self.shard_id, None, fresh.to_proto().SerializeToString())
        return self.state()

    def state(self, *, missing_ok: bool = False) -> ShardState:
        head = self.consensus.head(self.shard_id)
        if head is None:
            if missing_ok:
                return None  # type: ignore[return-value]
            raise KeyError(f"shard {self.shard_id} does not exist")
        seqno, raw = head
        return ShardState.from_proto(storage_pb2.ShardState.FromString(raw), seqno)

    @property
    def upper(self) -> int:
        return self.state().upper

    @property
    def since(self) -> int:
        return self.state().since

    def _cas(self, state: ShardState, new: ShardState) -> bool:
        return self.consensus.compare_and_set(
            self.shard_id, state.seqno, new.to_proto().SerializeToString()
        )

    # -- writes -----------------------------------------------------------------

    def write_part(self, updates: pa.Table) -> Part:
        """Write ``updates`` as a new Parquet part in Blob (not yet in the shard)."""
        timestamps = updates.column(TIMESTAMP_COLUMN)
        buffer = io.BytesIO()
        pq.write_table(updates, buffer)
        key = self.blob.new_key(self.shard_id)
        self.blob.put(key, buffer.getvalue())
        lower = int(pa.compute.min(timestamps).as_py()) if updates.num_rows else 0
        upper = int(pa.compute.max(timestamps).as_py()) + 1 if updates.num_rows else 0
        return Part(key, lower, upper, updates.num_rows, buffer.tell())

    def compare_and_append(
        self,
        updates: pa.Table | Sequence[Part] | None,
        expected_upper: int,
        new_upper: int,
        *,
        progress: dict[str, int] | None = None,
        state: ShardState | None = None,
    ) -> ShardState:
        """Append updates (a table, or parts already in Blob) iff the upper is expected.

        Every update must have ``expected_upper <= mz_timestamp < new_upper``.
        Raises ``UpperMismatch`` when another writer moved the upper first.
        ``progress`` (writer name -> position in its input) is recorded in the
        same CAS, so the data and the claim that it was applied are one step.
        ``state``: the shard's state as the caller just read it, at
        ``expected_upper``: the first CAS is made on it instead of reading it
        again (a stale one only fails that CAS). Returns the state written.
        """
        if new_upper < expected_upper:
            raise ValueError(f"new upper {new_upper} is before expected upper {expected_upper}")
        parts: list[Part]
        written = False
        if isinstance(updates, pa.Table):
            if updates.num_rows:
                low = int(pa.compute.min(updates.column(TIMESTAMP_COLUMN)).as_py())
                high = int(pa.compute.max(updates.column(TIMESTAMP_COLUMN)).as_py())
                if low < expected_upper or high >= new_upper:
                    raise ValueError(
                        f"update timestamps [{low}, {high}] outside [{expected_upper}, {new_upper})"
                    )
                parts = [self.write_part(updates)]
                written = True
            else:
                parts = []
        else:
            parts = [p for p in (updates or []) if p.rows]
        known = state if state is not None and state.upper == expected_upper else None
        while True:
            state, known = known or self.state(), None
            if state.upper != expected_upper:
                if written:
                    # Never referenced by any state: nobody can be reading it.
                    self.blob.delete(parts[0].key)
                raise UpperMismatch(self.shard_id, expected_upper, state.upper)
            new = self._appended(state, parts, new_upper, progress)
            if self._cas(state, new):
                self._notify_upper(new_upper)
                # What the CAS wrote, at the seqno consensus gives it: not read back.
                return dataclasses.replace(new, seqno=state.seqno + 1)
            # Lost a race with a since downgrade or compaction: re-read and retry.

    def _appended(
        self,
        state: ShardState,
        parts: Sequence[Part],
        new_upper: int,
        progress: dict[str, int] | None,
    ) -> ShardState:
        """``state`` with ``parts`` appended and the upper moved (what a CAS writes)."""
        return dataclasses.replace(
            state,
            upper=new_upper,
            parts=[*state.parts, *(p for p in parts if p.rows)],
            progress={**state.progress, **(progress or {})},
        )

    def _notify_upper(self, upper: int) -> None:
        if self.notify is None:
            return
        try:
            self.notify(self.shard_id, upper)
        except Exception:
            log.warning("persist_upper_notify_failed", shard=self.shard_id, exc_info=True)

    def downgrade_since(self, since: int) -> ShardState:
        while True:
            state = self.state()
            if since <= state.since:
                return state
            new = dataclasses.replace(state, since=since)
            if self._cas(state, new):
                return self.state()

    def compact(
        self,
        since: int | None = None,
        parts: Sequence[Part] | None = None,
        *,
        delete_replaced: bool = True,
    ) -> ShardState:
        """Replace ``parts`` (default: all) with one consolidated part; returns the new state.

        Also downgrades the since to ``since`` if given, in the same CAS. Updates
        at times before the since are forwarded to it (no read at or after the
        since can tell), then updates of the same row at the same time are
        summed and zero sums dropped, so history from the since on stays
        readable. The new state is put in by CAS on the seqno: appends that
        land meanwhile are kept (the CAS is retried against the new state); if
        a concurrent compaction already replaced one of ``parts``, only the
        since moves. The replaced parts are then deleted from Blob unless
        ``delete_replaced`` is false (readers of this class retry when a part
        of the state they read is gone).
        """
        state = self.state()
        since = state.since if since is None else max(since, state.since)
        chosen = list(state.parts if parts is None else parts)
        replaced = {p.key for p in chosen}
        if not chosen or not replaced <= {p.key for p in state.parts}:
            return self.downgrade_since(since)
        try:
            merged = self._merge(state, chosen, since)
        except FileNotFoundError:
            if self.state().seqno == state.seqno:
                raise
            # A concurrent compaction replaced (and deleted) some of them first.
            return self.downgrade_since(since)
        while True:
            if not replaced <= {p.key for p in state.parts}:
                if merged is not None:
                    self.blob.delete(merged.key)
                return self.downgrade_since(since)
            new_parts: list[Part] = []
            for part in state.parts:
                if part.key not in replaced:
                    new_parts.append(part)
                elif merged is not None and merged not in new_parts:
                    # At the place of the oldest replaced part: parts stay in time order.
                    new_parts.append(merged)
            new = dataclasses.replace(state, since=max(since, state.since), parts=new_parts)
            if self._cas(state, new):
                break
            state = self.state()
        if delete_replaced:
            for key in replaced:
                self.blob.delete(key)
        return self.state()

    def replace_parts(
        self, replaced: Sequence[Part], merged: Part | None, since: int | None = None
    ) -> ShardState | None:
        """Put ``merged``, a part already in Blob, in place of ``replaced``; the new state.

        For compactions computed elsewhere (the controller's Spark job):
        ``merged`` must hold the updates of ``replaced`` forwarded to at most
        ``since`` and consolidated, or be None if they all cancel out. Like
        ``compact``: the since moves to ``since`` (if later) in the same CAS,
        on the seqno, retried while appends land; the merged part takes the
        place of the oldest replaced one. Returns None and changes nothing if
        some part of ``replaced`` is no longer in the shard (a concurrent
        compaction won): then ``merged`` is the caller's to delete. The
        replaced parts are left in Blob for the caller to delete.
        """
        keys = {p.key for p in replaced}
        while True:
            state = self.state()
            if not keys or not keys <= {p.key for p in state.parts}:
                return None
            new_parts: list[Part] = []
            for part in state.parts:
                if part.key not in keys:
                    new_parts.append(part)
                elif merged is not None and merged not in new_parts:
                    new_parts.append(merged)
            new_since = state.since if since is None else max(since, state.since)
            if self._cas(state, dataclasses.replace(state, since=new_since, parts=new_parts)):
                return self.state()

    def _merge(self, state: ShardState, parts: Sequence[Part], since: int) -> Part | None:
        """``parts`` forwarded to ``since`` and consolidated, as a new part in Blob."""
        updates = self.read_updates(dataclasses.replace(state, parts=list(parts)))
        times = updates.column(TIMESTAMP_COLUMN)
        forwarded = pa.compute.max_element_wise(times, pa.scalar(since, pa.uint64()))
        updates = updates.set_column(
            updates.schema.get_field_index(TIMESTAMP_COLUMN), TIMESTAMP_COLUMN, forwarded
        )
        data = [name for name, _ in state.columns]
        summed = consolidate(updates, [*data, TIMESTAMP_COLUMN])
        if summed.num_rows == 0:
            return None
        return self.write_part(summed.select(updates.schema.names).cast(updates.schema))

    # -- reads ------------------------------------------------------------------

    def read(self) -> tuple[ShardState, pa.Table]:
        """The current state and all its updates, read consistently.

        A compaction may delete parts of the state we read before we read
        them; then the state has moved on, and we read the new one.
        """
        while True:
            state = self.state()
            updates = self._read_unless_compacted(state)
            if updates is not None:
                return state, updates

    def _read_unless_compacted(self, state: ShardState) -> pa.Table | None:
        """``read_updates(state)``, or None if a compaction has replaced its parts since."""
        try:
            return self.read_updates(state)
        except FileNotFoundError:
            if self.state().seqno == state.seqno:
                raise
            return None

    def read_updates(self, state: ShardState | None = None) -> pa.Table:
        """All updates of ``state``'s parts (default: the current state's), in part order."""
        state = state or self.state()
        schema = arrow_schema(state.columns)
        tables = [self._read_part(part, schema) for part in state.parts]
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables)

    def _read_part(self, part: Part, schema: pa.Schema) -> pa.Table:
        """One part through the blob's filesystem (a file, or a directory as Spark writes)."""
        filesystem, path = self.blob.filesystem_path(part.key)
        try:
            table = _read_file(filesystem, path, schema.names)
            if table is None or table.num_columns != len(schema.names):
                table = pq.read_table(path, filesystem=filesystem, columns=schema.names)
        except FileNotFoundError:
            raise
        except OSError as error:
            # Object stores do not all say "not found" the same way.
            if not self.blob.exists(part.key):
                raise FileNotFoundError(f"part {part.key} is gone") from error
            raise
        # Parts may come from writers with a narrower type system (Spark has no
        # unsigned integers), so read each as written and cast to the shard's schema.
        return table.select(schema.names).cast(schema)

    def snapshot(self, as_of: int | None = None) -> pa.Table:
        """The consolidated contents at ``as_of`` (default: the latest complete time).

        Returns the data columns and ``mz_diff`` (the multiplicity).
        """
        return self.snapshot_with_state(as_of)[0]

    def snapshot_with_state(self, as_of: int | None = None) -> tuple[pa.Table, ShardState]:
        """``snapshot(as_of)`` and the state it was read from (its upper, since, parts)."""
        while True:
            state, needed = self.snapshot_parts(as_of)
            updates = self.read_snapshot_parts(state, needed, as_of)
            if updates is not None:
                return updates, state

    def snapshot_parts(self, as_of: int | None = None) -> tuple[ShardState, list[Part]]:
        """The current state and those of its parts ``snapshot(as_of)`` reads.

        Their ``rows`` sum to an upper bound of the snapshot's size (updates
        before consolidation, some perhaps after ``as_of``). Read them, all
        at once or a few at a time, with ``read_snapshot_parts``.
        """
        state = self.state()
        read_at = self._check_as_of(state, as_of)
        # Parts entirely after read_at cannot contribute: not read at all.
        return state, [part for part in state.parts if overlaps(part, 0, read_at + 1)]

    def read_snapshot_parts(
        self, state: ShardState, parts: Sequence[Part], as_of: int | None = None
    ) -> pa.Table | None:
        """The updates of ``parts`` (of ``state``) at or before ``as_of``, consolidated (data
        columns and ``mz_diff``); None if a compaction has replaced them since.

        Consolidated per call: an update and its retraction in parts read by
        different calls both come out (their sum is still the snapshot).
        """
        read_at = self._check_as_of(state, as_of)
        updates = self._read_unless_compacted(dataclasses.replace(state, parts=list(parts)))
        if updates is None:
            return None
        times = updates.column(TIMESTAMP_COLUMN)
        if updates.num_rows and pa.compute.max(times).as_py() > read_at:
            updates = updates.filter(pa.compute.less_equal(times, read_at))
        return consolidate(updates, [name for name, _ in state.columns])

    def listen(
        self, as_of: int, *, nats: Any = None, poll_interval: float | None = None
    ) -> Listener:
        """The updates after ``as_of``, batch by batch as the upper advances.

        Iterate it (blocking) or ``async for`` over it: each batch is
        ``(updates, new_upper)`` with every update at ``prev_upper <= t <
        new_upper`` (the first batch starts after ``as_of``; a batch may be
        empty when only the upper moved). ``snapshot(as_of)`` plus every
        batch is the collection's history from ``as_of`` on. Polls consensus
        every ``poll_interval`` seconds and, iterated with ``async for`` and
        given a NATS connection (nats-py, on the running loop), wakes as soon
        as a writer publishes the new upper (see ``loupe.persist.listen``).
        Raises ``SinceError`` if ``as_of`` (or later, how far it has read) is
        before the since.
        """
        from loupe.persist.listen import Listener

        return Listener(self, as_of, nats=nats, poll_interval=poll_interval)

    def _check_as_of(self, state: ShardState, as_of: int | None) -> int:
        if as_of is None:
            as_of = state.upper - 1
        if as_of < state.since:
            raise SinceError(
                f"shard {self.shard_id}: cannot read at {as_of}, history is compacted up to {state.since}"
            )
        if as_of >= state.upper:
            raise ValueError(
                f"shard {self.shard_id}: {as_of} is not complete yet (upper {state.upper})"
            )
        return as_of

    def wait_for_upper(
        self, beyond: int, timeout: float = 10.0, interval: float = 0.02
    ) -> ShardState:
        """Block until the upper is past ``beyond``; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if state.upper > beyond:
                return state
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"shard {self.shard_id}: upper {state.upper} did not pass {beyond} in {timeout}s"
                )
            time.sleep(interval)


def read_states(shards: Sequence[Shard]) -> dict[str, ShardState]:
    """``state()`` of every shard in ``shards``, read with one ``heads`` per consensus."""
    states: dict[str, ShardState] = {}
    for consensus, positions in _by_consensus(shards):
        group = [shards[i] for i in positions]
        heads = consensus.heads([shard.shard_id for shard in group])
        for shard in group:
            head = heads.get(shard.shard_id)
            if head is None:
                raise KeyError(f"shard {shard.shard_id} does not exist")
            seqno, raw = head
            states[shard.shard_id] = ShardState.from_proto(
                storage_pb2.ShardState.FromString(raw), seqno
            )
    return states


@dataclass(frozen=True)
class Append:
    """One shard's ``compare_and_append`` of parts already in Blob, for ``append_all``."""

    shard: Shard
    # The state the caller read: its upper is the expected upper.
    state: ShardState
    parts: Sequence[Part]
    new_upper: int
    progress: dict[str, int] | None = None


def append_all(appends: Sequence[Append]) -> list[ShardState | Exception]:
    """``compare_and_append`` of each (one per shard); per append its new state, or the
    exception it raised (``UpperMismatch``: another writer moved the upper first).

    The appends whose shard is still at the state read go in with one
    ``compare_and_set_many`` per consensus: with SQLite one transaction and
    one sync for all of them, where one each cost a sync per shard (the
    storage writer moves every builtin collection's upper several times a
    second). An append whose shard changed since (a compaction, a since
    downgrade) is retried alone, as ``compare_and_append`` does. An
    exception of the batched write itself leaves every outcome unknown and
    is raised.
    """
    for append in appends:
        if append.new_upper < append.state.upper:
            raise ValueError(
                f"new upper {append.new_upper} is before expected upper {append.state.upper}"
            )
    news = [a.shard._appended(a.state, a.parts, a.new_upper, a.progress) for a in appends]
    outcomes: list[ShardState | Exception | None] = [None] * len(appends)
    for consensus, positions in _by_consensus([a.shard for a in appends]):
        written = consensus.compare_and_set_many(
            [
                (
                    appends[i].shard.shard_id,
                    appends[i].state.seqno,
                    news[i].to_proto().SerializeToString(),
                )
                for i in positions
            ]
        )
        for i, won in zip(positions, written, strict=True):
            if won:
                outcomes[i] = dataclasses.replace(news[i], seqno=appends[i].state.seqno + 1)
    results: list[ShardState | Exception] = []
    for append, outcome in zip(appends, outcomes, strict=True):
        if outcome is None:
            try:
                outcome = append.shard.compare_and_append(
                    append.parts,
                    expected_upper=append.state.upper,
                    new_upper=append.new_upper,
                    progress=append.progress,
                )
            except Exception as error:
                outcome = error
        else:
            append.shard._notify_upper(append.new_upper)
        results.append(outcome)
    return results


def _by_consensus(shards: Sequence[Shard]) -> list[tuple[Consensus, list[int]]]:
    """The positions in ``shards``, grouped by the consensus (the object) holding their state."""
    groups: dict[int, tuple[Consensus, list[int]]] = {}
    for position, shard in enumerate(shards):
        groups.setdefault(id(shard.consensus), (shard.consensus, []))[1].append(position)
    return list(groups.values())
