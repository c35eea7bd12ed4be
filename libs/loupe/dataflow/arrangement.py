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
from collections.abc import Sequence

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
    key_hash,
)
from loupe.dataflow.types import PERSIST_DIFF, PERSIST_TIME


def wanted_hashes(hashes: pl.Series | Sequence[int]) -> pl.Series:
    """``hashes`` sorted and distinct (what ``matching`` searches for)."""
    if isinstance(hashes, pl.Series):
        return hashes.unique().sort()
    return pl.Series(HASH, sorted(set(hashes)), dtype=pl.UInt64)


def matching(stored: pl.Series, order: pl.Series, wanted: pl.Series) -> pl.Series:
    """The rows (by ``order``, the row of each sorted hash) whose hash in sorted ``stored``
    is one of sorted, distinct ``wanted``.

    A small delta's lookup finds a few rows: listing them in Python costs less
    than one polars query does.
    """
    if wanted.len() <= _BISECT:
        # A point lookup (a peek by key, a one-row change): Python's bisect over the
        # series costs a few microseconds where a polars search costs tens.
        values = wanted.to_list()
        ranges = [(bisect.bisect_left(stored, v), bisect.bisect_right(stored, v)) for v in values]
        if sum(b - a for a, b in ranges) <= _FEW:
            return order.gather([i for a, b in ranges for i in range(a, b)])
    low = stored.search_sorted(wanted, side="left")
    high = stored.search_sorted(wanted, side="right")
    if wanted.len() <= _FEW:
        ranges = [(a, b) for a, b in zip(low.to_list(), high.to_list(), strict=True) if b > a]
        if sum(b - a for a, b in ranges) <= _FEW:
            return order.gather([i for a, b in ranges for i in range(a, b)])
    present = high > low
    positions = pl.select(pl.int_ranges(low.filter(present), high.filter(present)).explode())
    return order.gather(positions.to_series())


# Lookups finding at most this many rows are listed without a polars query.
_FEW = 256
# Lookups of at most this many keys search with bisect (2 x log2(n) element reads each).
_BISECT = 8


class Spine:
    """An operator's keyed state: batches indexed by ``_h`` (the hash of ``keys``).

    A batch gets its index (its hashes sorted, and the row of each) the first
    time it is looked up, not when it arrives: a hydrating dataflow inserts
    whole collections it does not look up yet, and a merge would make a new
    batch anyway. Only the rows found are gathered.
    """

    def __init__(self, keys: Sequence[str], sum_columns: Sequence[str] = (DIFF,)) -> None:
        self.keys = list(keys)
        self.sum_columns = list(sum_columns)
        self.batches: list[pl.DataFrame] = []
        # Per batch: (its hashes sorted, the row of each), once looked up.
        self.indexes: list[tuple[pl.Series, pl.Series] | None] = []
        # Per batch: its ``estimated_size``, once asked (logging asks after every change).
        self.sizes: list[int | None] = []

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
        if not self.batches:  # hydrating: sorting the delta's hashes would find nothing
            return None
        wanted = wanted_hashes(hashes)
        found = []
        for position, batch in enumerate(self.batches):
            index = self.indexes[position]
            if index is None:
                order = batch[HASH].arg_sort()
                index = self.indexes[position] = (batch[HASH].gather(order), order)
            stored, rows = index
            positions = matching(stored, rows, wanted)
            if positions.len():
                found.append(batch[positions])
        if not found:
            return None
        return found[0] if len(found) == 1 else pl.concat(found, how="vertical_relaxed")

    @property
    def records(self) -> int:
        return sum(b.height for b in self.batches)

    @property
    def size(self) -> int:
        """The bytes the batches' frames hold (``estimated_size``, each measured once)."""
        sizes = self.sizes
        for position, known in enumerate(sizes):
            if known is None:
                sizes[position] = int(self.batches[position].estimated_size())
        return sum(size or 0 for size in sizes)


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
        # id(batch) -> (batch, its key hashes sorted, the row of each sorted hash)
        self._indexes: dict[int, tuple[pl.DataFrame, pl.Series, pl.Series]] = {}

    def insert(self, frame: pl.DataFrame) -> None:
        """Add updates (any times at or after the since).

        A new batch is kept as it comes: what cancels in it cancels when it
        merges, which for a small step's batch is soon (one consolidation
        per merge, not one per step).
        """
        if frame.height == 0:
            return
        self.batches.append(frame)
        while len(self.batches) >= 2 and self.batches[-2].height <= 2 * self.batches[-1].height:
            self._merge(len(self.batches) - 2)

    def _merge(self, start: int) -> None:
        merged = pl.concat(self.batches[start:], how="vertical_relaxed")
        small = consolidate_rows(merged, self.since)
        self.batches[start:] = [small if small is not None else cancel(advance(merged, self.since))]
        if self.batches[-1].height == 0:
            self.batches.pop()

    def compact(self, since: int) -> None:
        """Forget the distinction between times before ``since`` (applied as batches merge)."""
        self.since = max(self.since, since)

    def updates(self) -> pl.DataFrame:
        """All updates (times before the since read as the since)."""
        if not self.batches:
            return self.empty
        if len(self.batches) > 1:
            self._merge(0)
        return advance(self.batches[0], self.since)

    def lookup_at(self, probe: pl.DataFrame, time: int) -> pl.DataFrame:
        """Like ``at``, but only rows whose key hashes like ``probe``'s (key columns) rows."""
        wanted = wanted_hashes(key_hash(probe, self.keys))
        found = []
        for batch in self.batches:
            hashes, rows = self._index(batch)
            positions = matching(hashes, rows, wanted)
            if positions.len():
                found.append(batch[positions])
        return self._as_of(found, time)

    def _index(self, batch: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
        entry = self._indexes.get(id(batch))
        if entry is None or entry[0] is not batch:
            live = {id(b) for b in self.batches}
            self._indexes = {k: v for k, v in self._indexes.items() if k in live}
            hashes = key_hash(batch, self.keys)
            order = hashes.arg_sort()
            entry = self._indexes[id(batch)] = (batch, hashes.gather(order), order)
        return entry[1], entry[2]

    def at(self, time: int) -> pl.DataFrame:
        """The collection's contents at ``time``: rows and their counts, at time ``time``.

        A row may come in several updates that add up (readers sum them);
        none that cancel.
        """
        return self._as_of(self.batches, time)

    def _as_of(self, batches: Sequence[pl.DataFrame], time: int) -> pl.DataFrame:
        # A batch wholly at or before ``time`` (most of them, for a read at a fresh
        # time) is taken as it is: its maximum is a cheap scan, a filter is a query.
        frames = [
            b if _at_or_before(b, time) else b.filter(pl.col(TIME) <= time)
            for b in batches
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
        return sum(int(b.estimated_size()) for b in self.batches)


class Log:
    """A storage collection's updates as pushed (persist format), for dataflows created later.

    Kept as the Arrow tables the replica pushed: appending costs nothing, and
    a later reader converts only the columns it reads. The log is
    consolidated (times before ``since`` advanced) only when its size doubles
    or a new reader asks for it, so its cost is amortised and its size stays
    near the collection's.
    """

    def __init__(self) -> None:
        self.since = 0
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.consolidated_rows = 0

    def append(self, table: pa.Table, *, settle: bool = True) -> None:
        """Log ``table``; ``settle=False`` leaves consolidating to a later ``settle`` (a
        snapshot pushed in pieces is consolidated once, after its last piece)."""
        if table.num_rows == 0:
            return
        self.tables.append(table)
        self.rows += table.num_rows
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

    def updates(self) -> pa.Table | None:
        """Everything pushed so far (times before the since read as the since), if anything."""
        self._consolidate()
        return self.tables[0] if self.tables else None


def _at_or_before(batch: pl.DataFrame, time: int) -> bool:
    """Whether every update of ``batch`` is at or before ``time``."""
    latest = batch[TIME].max()
    return latest is not None and int(latest) <= time  # type: ignore[arg-type]
