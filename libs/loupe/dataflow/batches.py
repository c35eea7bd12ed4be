"""Kernels on update batches: consolidation, key hashing, exchange between workers.

A batch is a polars DataFrame of updates: data columns, then ``time``
(UInt64) and ``diff`` (Int64). A collection on ``workers`` workers is a list
of batches, one per worker (``Parts``). Everything here is columnar: no
per-row Python.
"""

from __future__ import annotations

import math
import time as clock
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import polars as pl

TIME = "time"
DIFF = "diff"
HASH = "_h"
ERROR = "error"

# One batch per worker.
Parts = list[pl.DataFrame]

ERROR_SCHEMA: dict[str, pl.DataType] = {ERROR: pl.Utf8(), TIME: pl.UInt64(), DIFF: pl.Int64()}

# Exchanges sending at most this many rows from a worker are counted in Python (logging).
_FEW_SENT = 64

# Frames of at most this many rows are consolidated in Python (``consolidate_rows``).
_FEW_ROWS = 256

# Batches from this size on are worth a check for a single time before grouping.
_LARGE = 10_000

_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32)


def empty_errors() -> pl.DataFrame:
    """An empty error batch: ``error`` ("code|message"), ``time``, ``diff``.

    One shared frame (nothing mutates frames in place): building one costs
    more than many a small step's kernels.
    """
    return _EMPTY_ERRORS


_EMPTY_ERRORS = pl.DataFrame(schema=ERROR_SCHEMA)


def data_columns(frame: pl.DataFrame) -> list[str]:
    """The columns of ``frame`` other than ``time`` and ``diff``."""
    return [c for c in frame.columns if c not in (TIME, DIFF)]


def consolidate(frame: pl.DataFrame, with_time: bool = True) -> pl.DataFrame:
    """Sum the diffs of equal (row, time) updates and drop those that cancel."""
    if frame.height == 0:
        return frame
    keys = data_columns(frame)
    if not keys and not with_time:
        total = frame.select(pl.col(DIFF).sum())
        return total.filter(pl.col(DIFF) != 0)
    summed = (
        sum_by(frame, keys, [DIFF]) if with_time else frame.group_by(keys).agg(pl.col(DIFF).sum())
    )
    return summed.filter(pl.col(DIFF) != 0).select(frame.columns)


def sum_by(
    frame: pl.DataFrame,
    keys: Sequence[str],
    sums: Sequence[str],
    select: Sequence[pl.Expr] | None = None,
) -> pl.DataFrame:
    """``sums`` summed per ``keys`` and time (of ``frame``, or of ``select`` over it).

    Most large batches hold one time (a snapshot, a single write): grouping
    by the keys alone then is several times faster than with the time as a
    key (polars' mixed-type keys take a slow path). Eager, not lazy: a lazy
    query's planning costs more than a small step's whole grouping.
    """
    if select is not None:
        frame = frame.select(select)
    order = [*keys, TIME, *sums]
    if keys and frame.height >= _LARGE:
        times = frame[TIME]
        low = times.min()
        if low == times.max():
            grouped = frame.group_by(keys).agg(pl.col(sums).sum())
            return grouped.select(*keys, pl.lit(low, pl.UInt64).alias(TIME), *sums)
    return frame.group_by([*keys, TIME]).agg(pl.col(sums).sum()).select(order)


def row_safe(dtype: pl.DataType, *, floats: bool = False) -> bool:
    """Whether values of ``dtype`` round-trip through Python rows unchanged, and group in a
    dict as polars groups them (float keys do not: NaN, -0.0)."""
    if dtype.is_integer() or isinstance(dtype, pl.Decimal):
        return True
    if isinstance(dtype, pl.Datetime):  # Python's datetime holds microseconds
        return dtype.time_unit != "ns"
    if floats and dtype == pl.Float64:
        return True
    return dtype in (pl.String, pl.Boolean, pl.Date)


def groups_apart(row: Sequence[Any], floats: Sequence[int]) -> bool:
    """Whether one of ``row``'s floats (at ``floats``) is one a dict groups otherwise than
    polars does: NaN (equal to nothing in a dict) or -0.0 (equal to 0.0)."""
    for i in floats:
        value = row[i]
        if value != value or (value == 0.0 and math.copysign(1.0, value) < 0):
            return True
    return False


def frame_of_rows(rows: Sequence[Sequence[Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A frame of Python ``rows`` with exactly ``schema`` (the row paths' one construction).

    ``pl.DataFrame(rows, schema=..., orient="row")`` spends most of its ~500 us in
    Python around polars' own row reader; the reader alone takes ~80 us. Where this
    polars has it, it is called directly (``test_row_path`` checks that both give
    the same frame), else the public constructor.
    """
    if _FROM_ROWS is not None:
        try:
            return pl.DataFrame._from_pydf(_FROM_ROWS(rows, schema=schema))
        except TypeError:  # another polars' signature: the public way from now on
            _disable_from_rows()
    return pl.DataFrame(rows, schema=schema, orient="row")


def _load_from_rows() -> Callable[..., Any] | None:
    try:
        from polars._plr import PyDataFrame  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(PyDataFrame, "from_rows", None)


_FROM_ROWS = _load_from_rows()


def _disable_from_rows() -> None:
    global _FROM_ROWS
    _FROM_ROWS = None


def consolidate_rows(frame: pl.DataFrame, since: int | None = None) -> pl.DataFrame | None:
    """``consolidate`` of a small frame whose ``diff`` is its last column, in Python (one
    polars call where grouping makes several); ``since``: times before it read as it
    (``advance``). None when the frame is not small or a value would not group in a
    dict as polars groups it (a float NaN or -0.0: the columnar path then decides).
    """
    if frame.height > _FEW_ROWS or frame.columns[-1] != DIFF:
        return None
    if not all(row_safe(d, floats=True) for d in frame.dtypes):
        return None
    floats = [i for i, d in enumerate(frame.dtypes[:-1]) if d == pl.Float64]
    at = frame.columns.index(TIME) if since is not None and TIME in frame.columns else -1
    decimals = sum(isinstance(d, pl.Decimal) for d in frame.dtypes)
    if decimals * frame.height > _DECIMAL_CELLS:
        return _consolidate_kept(frame, floats, at, since)
    return _summed_rows(frame.rows(), floats, at, since, dict(frame.schema))


# Up to this many updates ``read_rows_at`` reads a trace over Python rows: about 0.5 us an
# update, against about 2 ms for the columnar read of a few thousand (measured on 4 columns).
READ_ROWS = 1024


def read_rows_at(frames: Sequence[pl.DataFrame], time: int) -> pl.DataFrame | None:
    """The updates of ``frames`` at or before ``time``, all at ``time`` and consolidated:
    a read of a small trace, in one pass over Python rows.

    The columnar way (concatenate, keep what is at or before ``time``, relabel,
    consolidate what may cancel) is half a dozen polars queries, each costing
    about 100 us on a few rows; this costs tens of microseconds for a few rows,
    half a millisecond for ``READ_ROWS``. None where the rows do not suit a dict
    (as ``consolidate_rows``), are too many, or the frames' schemas differ: the
    caller reads them the columnar way.
    """
    if not frames:
        return None
    first = frames[0]
    schema = first.schema
    if (
        sum(frame.height for frame in frames) > READ_ROWS
        or first.columns[-1] != DIFF
        or TIME not in schema
        or any(frame.schema != schema for frame in frames[1:])
        or not all(row_safe(d, floats=True) for d in schema.dtypes())
    ):
        return None
    decimals = sum(isinstance(d, pl.Decimal) for d in schema.dtypes())
    if decimals * sum(frame.height for frame in frames) > _DECIMAL_CELLS:
        return None
    floats = [i for i, d in enumerate(schema.dtypes()[:-1]) if d == pl.Float64]
    at = first.columns.index(TIME)
    rows = [row for frame in frames for row in frame.rows() if row[at] <= time]
    return _summed_rows(rows, floats, at, time, dict(schema))


def _summed_rows(
    rows: list[tuple[Any, ...]],
    floats: list[int],
    at: int,
    since: int | None,
    schema: dict[str, pl.DataType],
) -> pl.DataFrame | None:
    """``rows`` grouped (``_grouped``) and their diffs summed, as a frame of ``schema``
    without the groups that cancel; None where ``_grouped`` declines."""
    groups = _grouped(rows, floats, at, since)
    if groups is None:
        return None
    kept = [(*group, diff) for group, (_, diff) in groups.items() if diff != 0]
    return frame_of_rows(kept, schema)


def _grouped(
    rows: list[tuple[Any, ...]], floats: list[int], at: int, since: int | None
) -> dict[tuple[Any, ...], list[int]] | None:
    """Per group of ``rows`` (a row but its last value, the diff; its time at ``at``, if
    ``at`` is not -1, advanced to ``since``): its first row's position and its diffs
    summed. None where a float would group otherwise in polars (``groups_apart``)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position, row in enumerate(rows):
        if floats and groups_apart(row, floats):
            return None
        group = row[:-1]
        if at >= 0 and group[at] < since:  # type: ignore[operator]
            group = (*group[:at], since, *group[at + 1 :])
        entry = groups.get(group)
        if entry is None:
            groups[group] = [position, row[-1]]
        else:
            entry[1] += row[-1]
    return groups


# Past this many decimal values ``consolidate_rows`` groups the rows by their integers and
# gathers the rows it keeps: making a Python ``Decimal`` of each value and a column of them
# again costs about 2 us a value.
_DECIMAL_CELLS = 256


def _consolidate_kept(
    frame: pl.DataFrame, floats: list[int], at: int, since: int | None
) -> pl.DataFrame | None:
    """``consolidate_rows`` of a frame with many decimals: grouped by the rows' physical
    values (a decimal's integer), then the first row of each group that does not cancel
    gathered, with its summed diff (and its time advanced to ``since``)."""
    groups = _grouped(frame.select(pl.all().to_physical()).rows(), floats, at, since)
    if groups is None:
        return None
    kept = [entry for entry in groups.values() if entry[1] != 0]
    rows = frame[pl.Series([first for first, _ in kept], dtype=pl.UInt32)]
    columns = [pl.Series(DIFF, [diff for _, diff in kept], dtype=frame.schema[DIFF])]
    if at >= 0:
        columns.append(rows[TIME].clip(lower_bound=since))
    return rows.with_columns(columns)


def cancel(frame: pl.DataFrame) -> pl.DataFrame:
    """Consolidate only the updates that may cancel: those whose (row, time) has a retraction.

    Equal rows that only add up may stay apart (every reader sums them), so
    an insert-only batch costs one scan instead of a regrouping of all its
    columns.
    """
    if frame.height == 0:
        return frame
    if not (frame[DIFF] < 0).any():
        return frame
    keys = [*data_columns(frame), TIME]
    hashes = frame.select(keys).hash_rows(seed=0)
    touched = hashes.is_in(hashes.filter(frame[DIFF] < 0).implode())
    return pl.concat(
        [frame.filter(~touched), consolidate(frame.filter(touched))], how="vertical_relaxed"
    )


def concat(frames: Sequence[pl.DataFrame], empty: pl.DataFrame) -> pl.DataFrame:
    """``frames`` stacked (``empty`` when there are none); schemas must agree."""
    present = [f for f in frames if f.height]
    if not present:
        return empty
    if len(present) == 1:
        return present[0]
    return pl.concat(present, how="vertical_relaxed")


def canonical_key_dtype(dtypes: Sequence[pl.DataType]) -> pl.DataType | None:
    """The dtype equal keys of mixed types are compared in (hashes differ across int widths)."""
    if any(d in _INTEGERS or d == pl.UInt64 for d in dtypes) and all(
        d in _INTEGERS or d == pl.UInt64 or d == pl.Float64 or d == pl.Null for d in dtypes
    ):
        if any(d == pl.Float64 for d in dtypes):
            return pl.Float64()
        return pl.UInt64() if all(d == pl.UInt64 for d in dtypes) else pl.Int64()
    return None


def key_hash(frame: pl.DataFrame, keys: Sequence[str]) -> pl.Series:
    """A UInt64 hash of each row's ``keys`` (the same on every worker and every batch)."""
    if not keys:
        return pl.Series(HASH, [0] * frame.height, dtype=pl.UInt64)
    return frame.select(keys).hash_rows(seed=0).alias(HASH)


class KeyHashes:
    """``key_hash`` of keys given as Python tuples of ``schema``'s dtypes, remembered for the
    keys seen lately (at most ``KNOWN_KEYS``): a small step whose keys changed lately
    hashes them without a polars query. Only for dtypes Python compares as polars groups
    (``row_safe`` without floats)."""

    __slots__ = ("known", "schema")

    def __init__(self, schema: dict[str, pl.DataType]) -> None:
        self.schema = schema
        self.known: dict[tuple[Any, ...], int] = {}

    def of(self, keys: Sequence[tuple[Any, ...]]) -> list[int]:
        known = self.known
        missing = list(dict.fromkeys(k for k in keys if k not in known))
        if missing:
            if self.schema:  # ``key_hash`` of a frame of the keys alone: no select first
                hashes = frame_of_rows(missing, self.schema).hash_rows(seed=0).to_list()
            else:  # no keys (a cross join): every row's hash is key_hash's 0
                hashes = [0] * len(missing)
            if len(known) + len(missing) > KNOWN_KEYS:
                known.clear()
            known.update(zip(missing, hashes, strict=True))
        return [known[k] for k in keys]


# The keys a ``KeyHashes`` remembers, at most.
KNOWN_KEYS = 4096


class Meter:
    """What one operator's runs did per worker, measured while logging is on.

    All workers run in one thread, so a worker's time is the time spent on
    its own batch: ``each`` times every worker's body (operators time their
    other per-worker work the same way). ``ns`` accumulates per worker until
    the instance reads it after the run; what is done for all workers at
    once (an exchange routes every batch in one pass) is not in it.
    ``sent`` counts, per input port, the records and batches each worker
    sent each worker (a metered ``exchange``).
    """

    __slots__ = ("ns", "sent")

    def __init__(self, workers: int) -> None:
        self.ns = [0] * workers
        # port -> (from worker, to worker) -> [records, batches]
        self.sent: dict[int, dict[tuple[int, int], list[int]]] = {}

    def each(self, parts: Parts, body: Callable[[int, pl.DataFrame], pl.DataFrame]) -> Parts:
        """``body`` on every worker's batch, each timed for its worker (an empty batch is no work
        the worker is scheduled for: not timed)."""
        out = []
        ns = self.ns
        for worker, part in enumerate(parts):
            if part.height == 0:
                out.append(body(worker, part))
                continue
            started = clock.perf_counter_ns()
            out.append(body(worker, part))
            ns[worker] += clock.perf_counter_ns() - started
        return out

    def message(self, port: int, source: int, target: int, records: int) -> None:
        counts = self.sent.setdefault(port, {}).setdefault((source, target), [0, 0])
        counts[0] += records
        counts[1] += 1

    def take_ns(self) -> list[int]:
        """The time measured per worker since the last call (and start afresh)."""
        ns = self.ns
        self.ns = [0] * len(ns)
        return ns


def exchange(
    parts: Parts, keys: Sequence[str], workers: int, meter: Meter | None = None, port: int = 0
) -> Parts:
    """Route every update to the worker that owns its key (hash of ``keys`` mod ``workers``).

    With a ``meter`` (logging on), what each worker's batch sent to each
    worker is counted from the owners the routing computed anyway.
    """
    if workers == 1:
        if meter is not None and parts[0].height:
            meter.message(port, 0, 0, parts[0].height)
        return parts
    whole = concat(parts, parts[0].clear())
    if whole.height == 0:
        return [whole] * workers
    owner = (key_hash(whole, keys) % workers).alias("_w")
    if meter is not None:
        _count_sent(meter, port, owner, [p.height for p in parts])
    routed = whole.with_columns(owner).partition_by("_w", as_dict=True, include_key=False)
    return [routed.get((w,), whole.clear()) for w in range(workers)]


def _count_sent(meter: Meter, port: int, owner: pl.Series, heights: list[int]) -> None:
    """Per sending worker (its rows are ``heights[w]`` in a row of ``owner``): how many went where."""
    offset = 0
    for source, height in enumerate(heights):
        if height == 0:
            continue
        sent = owner.slice(offset, height)
        if height <= _FEW_SENT:  # a small step: Python counts faster than a polars query
            counts: Iterable[tuple[int, int]] = Counter(sent.to_list()).items()
        else:
            counts = sent.value_counts().iter_rows()
        for target, records in counts:
            meter.message(port, source, target, records)
        offset += height


def spread(frame: pl.DataFrame, workers: int) -> Parts:
    """Distribute a batch over workers in contiguous slices (zero-copy).

    Any placement will do before a stateful operator: it exchanges by its key.
    """
    if workers == 1:
        return [frame]
    size = -(-frame.height // workers)
    return [frame.slice(w * size, size) for w in range(workers)]


def split_time(frame: pl.DataFrame, upper: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The updates before ``upper`` and those at or after it."""
    before = pl.col(TIME) < upper
    return frame.filter(before), frame.filter(~before)


def advance(frame: pl.DataFrame, since: int) -> pl.DataFrame:
    """Times before ``since`` read as ``since`` (compaction, snapshots at an as_of)."""
    return frame.with_columns(
        pl.when(pl.col(TIME) < since)
        .then(pl.lit(since, pl.UInt64))
        .otherwise(pl.col(TIME))
        .alias(TIME)
    )


def expand(frame: pl.DataFrame) -> pl.DataFrame:
    """Each row repeated by its (positive) multiplicity, without ``time``/``diff``."""
    columns = data_columns(frame)
    if columns and (frame[DIFF] == 1).all():
        return frame[columns]  # every row once (most reads): no query, only a column pick
    positive = frame.filter(pl.col(DIFF) > 0)
    if positive.height == 0 or (positive[DIFF] == 1).all():
        return positive.select(columns)
    return positive.select(pl.col(columns).repeat_by(pl.col(DIFF)).explode())
