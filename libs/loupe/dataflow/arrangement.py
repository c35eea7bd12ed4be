"""Arrangements: indexed, consolidated state that stateful operators and peeks read.

Two kinds, both kept as a *spine*: a short list of consolidated batches whose
sizes shrink geometrically, so an insert costs amortised O(log n) merge work
per record instead of rewriting the whole state:

- ``Spine``: an operator's current state (everything before its input
  frontier), keyed by a hash of the key columns. Each batch has its hashes
  sorted, so looking up the keys of a small delta is a binary search per
  batch (``search_sorted``) and a gather — no scan of the state. Operators only
  ever read their state "as of now" (all of it is older than the updates
  they are processing), so it carries no times. Merges consolidate only
  where a retraction may cancel something (readers sum equal rows anyway).
- ``Trace``: an exported collection (an index), kept with times so peeks
  can read it at any time since its ``since``; compaction advances older
  times to the since as batches merge.
- ``Log``: a storage collection's pushed updates, for dataflows created later.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from loupe.dataflow.batches import (
    DIFF,
    HASH,
    TIME,
    advance,
    cancel,
    consolidate,
    consolidate_rows,
    frame_of_rows,
    groups_apart,
    key_hash,
    read_rows_at,
)
from loupe.dataflow.types import PERSIST_DIFF, PERSIST_TIME


def wanted_hashes(hashes: pl.Series | Sequence[int]) -> pl.Series | list[int]:
    """``hashes`` sorted and distinct (what ``matching`` searches for): a list where they
    come as one, or are few."""
    if isinstance(hashes, pl.Series):
        if hashes.len() <= _BISECT:
            return sorted(set(hashes.to_list()))
        return hashes.unique().sort()
    return sorted(set(hashes))


# A batch's hash index (``sorted_index``).
SortedIndex = tuple[pl.Series, pl.Series, pl.Series | memoryview]


def sorted_index(hashes: pl.Series) -> SortedIndex:
    """A batch's hash index: its ``hashes`` sorted, the row of each, and the sorted hashes
    as a sequence Python's ``bisect`` reads at C speed (a view of a big batch's buffer)."""
    order = hashes.arg_sort()
    stored = hashes.gather(order)
    return stored, order, _view(stored)


def _view(stored: pl.Series) -> pl.Series | memoryview:
    """``stored`` (UInt64, no NULLs) as a memoryview of its values, without a copy; the
    series itself where it is small or not one plain buffer."""
    if stored.len() < _VIEW_ROWS:
        return stored
    array = stored.rechunk().to_arrow()
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks != 1:
            return stored
        array = array.chunk(0)
    if array.null_count or not pa.types.is_uint64(array.type):
        return stored
    values = array.buffers()[1]
    if values is None:
        return stored
    view = memoryview(values).cast("Q")  # type: ignore[arg-type]
    return view[array.offset : array.offset + len(array)]


def matching(index: SortedIndex, wanted: pl.Series | list[int]) -> pl.Series | list[int]:
    """The rows of a batch (by its ``sorted_index``) whose hash is one of sorted, distinct
    ``wanted``.

    A small delta's lookup finds a few rows: listing them in Python costs less
    than one polars query does (``take`` gathers them).
    """
    stored, order, view = index
    if len(wanted) <= _BISECT:
        # A point lookup (a peek by key, a one-row change): Python's bisect over the
        # hashes costs microseconds where a polars search or gather costs tens.
        values = wanted if isinstance(wanted, list) else wanted.to_list()
        ranges = [(bisect.bisect_left(view, v), bisect.bisect_right(view, v)) for v in values]
        if sum(b - a for a, b in ranges) <= _FEW:
            return [order[i] for a, b in ranges for i in range(a, b)]
    if isinstance(wanted, list):
        wanted = pl.Series(HASH, wanted, dtype=pl.UInt64)
    low = stored.search_sorted(wanted, side="left")
    high = stored.search_sorted(wanted, side="right")
    if wanted.len() <= _FEW:
        ranges = [(a, b) for a, b in zip(low.to_list(), high.to_list(), strict=True) if b > a]
        if sum(b - a for a, b in ranges) <= _FEW:
            return [order[i] for a, b in ranges for i in range(a, b)]
    present = high > low
    positions = pl.select(pl.int_ranges(low.filter(present), high.filter(present)).explode())
    return order.gather(positions.to_series())


# A trace's batches of fewer rows than this (a small step's) wait, up to ``TAIL_BATCHES``
# of them, to be merged at once (``Trace.insert``).
TAIL_ROWS = 64
TAIL_BATCHES = 8
# Rows a spine keeps pending (``Spine.append_rows``) before they make a batch.
PENDING_ROWS = 256
# A trace of at most this many updates keeps its last full read (``Trace.at``) for the next.
SNAPSHOT_ROWS = 65_536


def take(batch: pl.DataFrame, positions: pl.Series | list[int]) -> pl.DataFrame:
    """The rows of ``batch`` at ``positions`` (``matching``'s): one row is a slice, which
    costs a microsecond where a gather costs tens."""
    if not isinstance(positions, list):
        return batch[positions]
    if len(positions) == 1:
        return batch.slice(positions[0], 1)
    return batch[pl.Series(positions, dtype=pl.UInt32)]


# Lookups finding at most this many rows are listed without a polars query.
_FEW = 256
# Lookups of at most this many keys search with bisect (2 x log2(n) element reads each).
_BISECT = 8
# Batches of at least this many rows get a view of their sorted hashes for ``bisect``:
# building it costs about as much as bisecting a small batch's series directly.
_VIEW_ROWS = 4096


class Spine:
    """An operator's keyed state: batches indexed by ``_h`` (the hash of ``keys``).

    A batch gets its index (its hashes sorted, and the row of each) the first
    time it is looked up, not when it arrives: a hydrating dataflow inserts
    whole collections it does not look up yet, and a merge would make a new
    batch anyway. Only the rows found are gathered.

    A small step's updates may come as Python rows (``append_rows``): they wait
    in ``pending`` until ``PENDING_ROWS`` of them make one batch, so a one-row
    change costs a list append, not a frame and a merge. Readers see them as
    one more batch (``holds`` says whether there is anything at all).
    """

    def __init__(self, keys: Sequence[str], sum_columns: Sequence[str] = (DIFF,)) -> None:
        self.keys = list(keys)
        self.sum_columns = list(sum_columns)
        self.batches: list[pl.DataFrame] = []
        # Per batch: its ``sorted_index``, once looked up.
        self.indexes: list[SortedIndex | None] = []
        # Per batch: its ``estimated_size``, once asked (logging asks after every change).
        self.sizes: list[int | None] = []
        # Rows not yet in a batch, their frame's schema and where in a row its ``_h`` is.
        self.pending: list[tuple[Any, ...]] = []
        self.pending_schema: dict[str, pl.DataType] = {}
        self.pending_hash = 0

    def append_rows(self, rows: Sequence[tuple[Any, ...]], schema: dict[str, pl.DataType]) -> None:
        """Add updates as rows of ``schema`` (with ``_h``, no ``time``): kept as they are
        until enough make a batch worth its polars calls."""
        if not rows:
            return
        if self.pending and schema != self.pending_schema:
            self.flush()
        self.pending_schema = schema
        self.pending_hash = list(schema).index(HASH)
        self.pending.extend(rows)
        if len(self.pending) >= PENDING_ROWS:
            self.flush()

    def flush(self) -> None:
        """The pending rows as a batch of their own, what cancels among them cancelled (a
        key's state row replaced step after step leaves its first retraction and its last
        insertion)."""
        if self.pending:
            rows, self.pending = _cancelled(self.pending, self.pending_schema), []
            if rows:
                self.insert(frame_of_rows(rows, self.pending_schema))

    @property
    def holds(self) -> bool:
        """Whether anything is stored (a batch or a pending row)."""
        return bool(self.batches or self.pending)

    @property
    def batch_count(self) -> int:
        """The batches, the pending rows counting as one."""
        return len(self.batches) + (1 if self.pending else 0)

    def insert(self, frame: pl.DataFrame) -> None:
        """Add updates (with or without ``_h``; ``time`` is ignored)."""
        if frame.height == 0:
            return
        if TIME in frame.columns:
            frame = frame.drop(TIME)
        if HASH not in frame.columns:
            frame = frame.with_columns(key_hash(frame, self.keys))
        self.batches.append(frame)
        self.indexes.append(None)
        self.sizes.append(None)
        while len(self.batches) >= 2 and self.batches[-2].height <= 2 * self.batches[-1].height:
            merged = self._cancel(pl.concat(self.batches[-2:], how="vertical_relaxed"))
            self.batches[-2:] = [merged] if merged.height else []
            self.indexes[-2:] = [None] if merged.height else []
            self.sizes[-2:] = [None] if merged.height else []

    def _cancel(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Consolidate where something may cancel: the keys with a negative update.

        Equal rows that only add up may stay apart (readers sum them), so an
        insert-only state (a hydration) is never regrouped.
        """
        if self.sum_columns == [DIFF]:
            small = consolidate_rows(frame)
            if small is not None:  # a small step's merge: every equal row summed, in Python
                return small
        negative = pl.any_horizontal([pl.col(c) < 0 for c in self.sum_columns])
        hashes = frame.filter(negative)[HASH].unique()
        if hashes.len() == 0:
            return frame
        touched = pl.col(HASH).is_in(hashes.implode())
        return pl.concat(
            [frame.filter(~touched), self._consolidate(frame.filter(touched))],
            how="vertical_relaxed",
        )

    def _consolidate(self, frame: pl.DataFrame) -> pl.DataFrame:
        group = [c for c in frame.columns if c not in self.sum_columns]
        summed = frame.group_by(group).agg(pl.col(self.sum_columns).sum())
        nonzero = pl.any_horizontal([pl.col(c) != 0 for c in self.sum_columns])
        return summed.filter(nonzero).select(frame.columns)

    def lookup(self, hashes: pl.Series | Sequence[int]) -> pl.DataFrame | None:
        """Every stored row whose key hash is in ``hashes`` (not consolidated across batches)."""
        if not self.holds:  # hydrating: nothing to find
            return None
        wanted = wanted_hashes(hashes)
        found = []
        if self.pending:
            values = set(wanted if isinstance(wanted, list) else wanted.to_list())
            at = self.pending_hash
            rows = [row for row in self.pending if row[at] in values]
            if rows:
                found.append(frame_of_rows(rows, self.pending_schema))
        for position, batch in enumerate(self.batches):
            index = self.indexes[position]
            if index is None:
                index = self.indexes[position] = sorted_index(batch[HASH])
            positions = matching(index, wanted)
            if len(positions):
                found.append(take(batch, positions))
        if not found:
            return None
        return found[0] if len(found) == 1 else pl.concat(found, how="vertical_relaxed")

    @property
    def records(self) -> int:
        return sum(b.height for b in self.batches) + len(self.pending)

    @property
    def size(self) -> int:
        """The bytes the batches' frames hold (``estimated_size``, each measured once); the
        pending rows at the batches' bytes per row (a column's 8 bytes when there are none)."""
        held = _measured(self.batches, self.sizes)
        if not self.pending:
            return held
        stored = sum(b.height for b in self.batches)
        per_row = held / stored if stored else 8 * len(self.pending_schema)
        return held + int(per_row * len(self.pending))


class Trace:
    """An exported collection with its history since ``since``: what peeks read.

    ``keys`` (the index's key columns) serve point lookups: a batch gets a
    sorted hash index the first time one reads it.
    """

    def __init__(self, empty: pl.DataFrame, since: int, keys: Sequence[str] = ()) -> None:
        self.empty = empty
        self.since = since
        self.keys = list(keys)
        self.batches: list[pl.DataFrame] = []
        # Per batch: its ``estimated_size``, once asked (logging asks after every step).
        self.sizes: list[int | None] = []
        # Per batch that a merge made (nothing in it cancels): its earliest and latest time.
        self.spans: list[tuple[int, int] | None] = []
        # id(batch) -> (batch, its key hashes' ``sorted_index``)
        self._indexes: dict[int, tuple[pl.DataFrame, SortedIndex]] = {}
        # The last full read (``at``): the batches it read, their latest time, its rows.
        self._snapshot: tuple[tuple[pl.DataFrame, ...], int, pl.DataFrame] | None = None

    def insert(self, frame: pl.DataFrame) -> None:
        """Add updates (any times at or after the since).

        A new batch is kept as it comes: what cancels in it cancels when it
        merges. A small step's batch (fewer than ``TAIL_ROWS`` rows) waits
        with others like it, up to ``TAIL_BATCHES`` of them, so one merge
        consolidates many steps instead of one merge per step.
        """
        if frame.height == 0:
            return
        self.batches.append(frame)
        self.sizes.append(None)
        self.spans.append(None)
        if frame.height < TAIL_ROWS:
            tail = 0
            for batch in reversed(self.batches):
                if batch.height >= TAIL_ROWS:
                    break
                tail += 1
            if tail <= TAIL_BATCHES:
                return
            self._merge(len(self.batches) - tail)
        while len(self.batches) >= 2 and self.batches[-2].height <= 2 * self.batches[-1].height:
            self._merge(len(self.batches) - 2)

    def _merge(self, start: int) -> None:
        """Merge the batches from ``start`` on into one in which nothing cancels.

        Batches that merges made, of times at or after the since and apart
        from each other's, cannot cancel one another: they are only stacked
        (until compaction advances the since past their times, every merge of
        a trace that only grows is such a one).
        """
        batches, spans = self.batches[start:], self.spans[start:]
        made = len(spans)
        while made and spans[made - 1] is None:
            made -= 1
        if 0 < made < len(spans):
            # The batches after the last one a merge made (a tail of small steps'), on their own
            # first: they may then stack on the others.
            tail = self._consolidated(pl.concat(batches[made:], how="vertical_relaxed"))
            batches, spans = [*batches[:made], tail], [*spans[:made], _span(tail)]
        merged = pl.concat(batches, how="vertical_relaxed")
        if _apart(spans, self.since):
            first, last = spans[0], spans[-1]
            assert first is not None
            assert last is not None
            span: tuple[int, int] | None = (first[0], last[1])
        else:
            merged = self._consolidated(merged)
            span = _span(merged)
        self.batches[start:] = [merged]
        self.sizes[start:] = [None]
        self.spans[start:] = [span]
        if merged.height == 0:
            self.batches.pop()
            self.sizes.pop()
            self.spans.pop()

    def _consolidated(self, merged: pl.DataFrame) -> pl.DataFrame:
        """``merged`` with what cancels in it cancelled, its times before the since at it.

        Updates that are all at or after the since and all of distinct rows or
        times are that already (a tail of small steps' batches in a trace that
        is not compacted): found by hashing them, which costs a fraction of
        consolidating them (decimals especially, read out as Python values).
        """
        if _nothing_cancels(merged, self.since):
            return merged
        small = consolidate_rows(merged, self.since)
        return small if small is not None else cancel(advance(merged, self.since))

    def compact(self, since: int) -> None:
        """Forget the distinction between times before ``since`` (applied as batches merge)."""
        self.since = max(self.since, since)

    def updates(self) -> pl.DataFrame:
        """All updates (times before the since read as the since), what cancels cancelled."""
        if not self.batches:
            return self.empty
        span = self.spans[0]
        if len(self.batches) > 1 or span is None or span[0] < self.since:
            self._merge(0)
        if not self.batches:  # everything cancelled
            return self.empty
        return advance(self.batches[0], self.since)

    def lookup_at(self, probe: pl.DataFrame, time: int) -> pl.DataFrame:
        """Like ``at``, but only rows whose key hashes like ``probe``'s (key columns) rows."""
        wanted = wanted_hashes(key_hash(probe, self.keys))
        found = []
        for batch in self.batches:
            positions = matching(self._index(batch), wanted)
            if len(positions):
                found.append(take(batch, positions))
        return self._as_of(found, time)

    def _index(self, batch: pl.DataFrame) -> SortedIndex:
        entry = self._indexes.get(id(batch))
        if entry is None or entry[0] is not batch:
            live = {id(b) for b in self.batches}
            self._indexes = {k: v for k, v in self._indexes.items() if k in live}
            entry = self._indexes[id(batch)] = (batch, sorted_index(key_hash(batch, self.keys)))
        return entry[1]

    def at(self, time: int) -> pl.DataFrame:
        """The collection's contents at ``time``: rows and their counts, at time ``time``.

        A row may come in several updates that add up (readers sum them);
        none that cancel.
        """
        read = self.contents_at(time)
        if read.height and read[TIME][0] != time:
            return read.with_columns(pl.lit(time, pl.UInt64).alias(TIME))
        return read

    def contents_at(self, time: int) -> pl.DataFrame:
        """Like ``at``, but the rows' ``time`` may be an earlier one at which the contents
        were already these: for readers of the rows and counts only (a peek).

        A read at or after every batch's time is kept (up to ``SNAPSHOT_ROWS``
        updates): the next such read of the same batches, the usual peek of an
        index that did not change meanwhile, is that read again instead of a
        concatenation and consolidation of the batches.
        """
        batches = self.batches
        kept = self._snapshot
        if (
            kept is not None
            and time >= kept[1]
            and len(kept[0]) == len(batches)
            and all(map(operator.is_, kept[0], batches))
        ):
            return kept[2]
        self._snapshot = None
        latests = [latest_time(b) for b in batches]
        read = self._as_of(batches, time, latests)
        latest = max(latests, default=0)
        if self.records <= SNAPSHOT_ROWS and latest <= time:
            self._snapshot = (tuple(batches), latest, read)
        return read

    def _as_of(
        self, batches: Sequence[pl.DataFrame], time: int, latests: Sequence[int] | None = None
    ) -> pl.DataFrame:
        """``batches`` at ``time`` (``latests``: each one's ``latest_time``, if known)."""
        small = read_rows_at([b for b in batches if b.height], time)
        if small is not None:
            return small
        if latests is None:
            latests = [latest_time(b) for b in batches]
        # A batch wholly at or before ``time`` (most of them, for a read at a fresh
        # time) is taken as it is: its maximum is a cheap scan, a filter is a query.
        frames = [
            b if latest <= time else b.filter(pl.col(TIME) <= time)
            for b, latest in zip(batches, latests, strict=True)
            if b.height
        ]
        present = [f for f in frames if f.height]
        if not present:
            return self.empty
        whole = pl.concat(present, how="vertical_relaxed")
        return cancel(whole.with_columns(pl.lit(time, pl.UInt64).alias(TIME)))

    @property
    def records(self) -> int:
        return sum(b.height for b in self.batches)

    @property
    def size(self) -> int:
        return _measured(self.batches, self.sizes)


class Log:
    """A storage collection's updates as pushed (persist format), for dataflows created later.

    Kept as the Arrow tables the replica pushed: appending costs nothing, and
    a later reader converts only the columns it reads. The log is
    consolidated (times before ``since`` advanced) only when its size doubles
    or a new reader asks for it, so its cost is amortised and its size stays
    near the collection's. Its bytes are counted as tables come and go: a
    table pushed per small write leaves one table per write until then, which
    the memory budget used to sum at every step.
    """

    def __init__(self) -> None:
        self.since = 0
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.consolidated_rows = 0
        # The bytes of the tables' buffers, kept as they change (the memory budget asks every
        # step; ``pa.Table.nbytes`` costs ~40 us a table, this ~1).
        self.nbytes = 0

    def append(self, table: pa.Table, *, settle: bool = True) -> None:
        """Log ``table``; ``settle=False`` leaves consolidating to a later ``settle`` (a
        snapshot pushed in pieces is consolidated once, after its last piece)."""
        if table.num_rows == 0:
            return
        self.tables.append(table)
        self.rows += table.num_rows
        self.nbytes += table.get_total_buffer_size()
        if settle:
            self.settle()

    def settle(self) -> None:
        """Consolidate if the log has doubled since it last was (amortised)."""
        if self.rows > 2 * self.consolidated_rows + 100_000:
            self._consolidate()

    def _consolidate(self) -> None:
        if not self.tables or (len(self.tables) == 1 and self.since == 0):
            self.consolidated_rows = self.rows
            return
        frame = pl.from_arrow(pa.concat_tables(self.tables, promote_options="permissive"))
        assert isinstance(frame, pl.DataFrame)
        renamed = frame.rename({PERSIST_TIME: TIME, PERSIST_DIFF: DIFF})
        merged = consolidate(advance(renamed, self.since))
        table = merged.rename({TIME: PERSIST_TIME, DIFF: PERSIST_DIFF}).to_arrow()
        self.tables = [table.cast(self.tables[0].schema)] if table.num_rows else []
        self.rows = self.consolidated_rows = table.num_rows
        self.nbytes = sum(t.get_total_buffer_size() for t in self.tables)

    def updates(self) -> pa.Table | None:
        """Everything pushed so far (times before the since read as the since), if anything."""
        self._consolidate()
        return self.tables[0] if self.tables else None


def _measured(batches: Sequence[pl.DataFrame], sizes: list[int | None]) -> int:
    """The bytes ``batches`` hold, each batch's ``estimated_size`` measured once (kept in
    ``sizes``, None where not measured yet)."""
    for position, known in enumerate(sizes):
        if known is None:
            sizes[position] = int(batches[position].estimated_size())
    return sum(size or 0 for size in sizes)


def _cancelled(
    rows: list[tuple[Any, ...]], schema: dict[str, pl.DataType]
) -> list[tuple[Any, ...]]:
    """``rows`` (of ``schema``, one column ``diff``) with equal rows' diffs summed, those
    summing to zero left out; as they are where a float would group otherwise in polars
    than in a dict (NaN, -0.0)."""
    floats = [i for i, dtype in enumerate(schema.values()) if dtype == pl.Float64]
    at = list(schema).index(DIFF)
    summed: dict[tuple[Any, ...], int] = {}
    for row in rows:
        if floats and groups_apart(row, floats):
            return rows
        group = row[:at] + row[at + 1 :]
        summed[group] = summed.get(group, 0) + row[at]
    return [(*group[:at], diff, *group[at:]) for group, diff in summed.items() if diff]


def _apart(spans: Sequence[tuple[int, int] | None], since: int) -> bool:
    """Whether batches of these spans (None: not merged yet) cannot cancel each other: each
    made by a merge, at or after ``since`` and each wholly before the next."""
    previous = since - 1
    for span in spans:
        if span is None or span[0] <= previous:
            return False
        previous = span[1]
    return True


def _span(batch: pl.DataFrame) -> tuple[int, int] | None:
    """A batch's earliest and latest time (None when it is empty)."""
    times = batch[TIME]
    low, high = times.min(), times.max()
    if low is None or high is None:
        return None
    return int(low), int(high)  # type: ignore[arg-type]


def _nothing_cancels(frame: pl.DataFrame, since: int) -> bool:
    """Whether consolidating ``frame`` at ``since`` would change nothing: every update at or
    after ``since``, none of diff 0, and no two of the same row at the same time (their
    hashes apart). Frames with float columns are not asked: hashing and grouping may
    disagree on -0.0 and NaN (``groups_apart``), nor frames of nested values."""
    if frame.height == 0 or not all(_plainly_hashed(dtype) for dtype in frame.dtypes):
        return False
    earliest = frame[TIME].min()
    if earliest is None or int(earliest) < since:  # type: ignore[arg-type]
        return False
    if (frame[DIFF] == 0).any():
        return False
    # A frame of the other columns as they are: ``drop`` would be a query.
    hashes = pl.DataFrame([c for c in frame.get_columns() if c.name != DIFF]).hash_rows()
    return hashes.n_unique() == frame.height


def _plainly_hashed(dtype: pl.DataType) -> bool:
    """Whether equal values of ``dtype`` hash alike and unequal ones are told apart by it."""
    return (
        dtype.is_integer()
        or dtype.is_decimal()
        or dtype.is_temporal()
        or dtype in (pl.String, pl.Boolean, pl.Binary)
    )


def latest_time(batch: pl.DataFrame) -> int:
    """The latest time of ``batch``'s updates (0 for none)."""
    latest = batch[TIME].max()
    return 0 if latest is None else int(latest)  # type: ignore[arg-type]
