"""The Window operator: window functions, recomputed for every partition a batch touches.

Like TopK, it arranges its input by the partition columns (one ``Spine`` per
worker) and keeps what it emitted per partition. For each time of a batch,
the partitions the updates touch are read back whole from the arranged
input, each row repeated by its multiplicity and sorted (partition, the
window's ORDER BY, then the whole row, so that peers come in the same order
every time); every function is computed over the sorted rows; the output
is the new rows minus those the partition emitted before. A window without
PARTITION BY is one partition: every change recomputes it.

All functions are vectorized over the touched partitions at once, with
per-row indexes into the sorted frame: the partition's first row and the
row after its last, the same for the row's peers (rows equal in ORDER BY;
the whole partition without one), and the frame's ``[start, end)``.
ROWS offsets move these by rows, GROUPS offsets by peer groups, and RANGE
offsets by the ORDER BY key's value (an as-of join finds the peer group
within the distance). Aggregates over a frame that starts at the
partition's first row are running (cumulative) aggregates, those ending at
its last row cumulate in reverse, those over the whole partition are
grouped, and only bounded frames (``ROWS BETWEEN 2 PRECEDING AND 1
FOLLOWING``) read each row's frame one row at a time.

Arguments PostgreSQL rejects at run time (``ntile``'s, read from a
partition's first row, and ``nth_value``'s, read per row, below 1) are
errors of the partition, kept and retracted with it as its rows are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import polars as pl

from loupe.dataflow import intervals
from loupe.dataflow.arrangement import Spine
from loupe.dataflow.batches import (
    DIFF,
    ERROR,
    TIME,
    concat,
    consolidate,
    empty_errors,
    exchange,
    expand,
)
from loupe.dataflow.expr import NUMERIC
from loupe.dataflow.operators import (
    Operator,
    _aggregate_expr,
    _by_time,
    _current,
    _interval_aggregate,
    _positive,
    _touched_hashes,
    interval_averages,
)
from loupe.interval import Interval
from loupe.plan import lir, mir

# SQLSTATEs of the arguments PostgreSQL rejects while computing a window.
INVALID_ARGUMENT_FOR_NTILE = "22014"
INVALID_ARGUMENT_FOR_NTH_VALUE = "22016"

# Per-row positions in the sorted frame (see the module docstring).
_ROW = "_i"
_PARTITION = "_pid"
_PARTITION_START = "_ps"
_PARTITION_END = "_pe"
_PEERS_START = "_gs"
_PEERS_END = "_ge"
_PEER_GROUP = "_g"
_ONE = "_one"  # a weight of 1 per row, for the engine's aggregate expressions
_UNSORTABLE = (pl.List, pl.Null, pl.Binary, pl.Object)


class Window(Operator):
    """``lir.Window``: the input's rows, each with one column per window function."""

    name = "Window"

    def __init__(self, node: lir.Window, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        self.node = node
        self.width = len(source.types)
        self.columns = [f"c{i}" for i in range(self.width)]
        self.groups = [f"c{i}" for i in node.partition_by]
        self.order = [f"c{k.column}" for k in node.order]
        # Per worker: the input, the rows emitted and the errors emitted, by partition.
        self.state = [
            (Spine(self.groups), Spine(self.groups), Spine(self.groups)) for _ in range(workers)
        ]
        self.errors: list[pl.DataFrame] = []
        keys = {c: self.empty.schema[c] for c in self.groups}
        self.empty_errors = pl.DataFrame(schema={**keys, ERROR: pl.Utf8(), DIFF: pl.Int64()})

    def run(self, lower: int, upper: int) -> None:
        self.errors = [self.inputs[0].err]
        parts = exchange(self.inputs[0].ok, self.groups, self.workers, self.meter)
        self.ok = self.per_worker(parts, self._recompute)
        self.err = concat(self.errors, empty_errors())

    def _recompute(self, worker: int, part: pl.DataFrame) -> pl.DataFrame:
        if part.height == 0:
            return self.empty
        inputs, outputs, failures = self.state[worker]
        changes = []
        for at, delta in _by_time(part):
            first = not inputs.holds
            inputs.insert(delta)
            touched = delta.select(self.groups).unique()
            hashes = _touched_hashes(delta, touched, self.groups)
            old = _current(outputs.lookup(hashes), touched, self.groups)
            old_errors = _current(failures.lookup(hashes), touched, self.groups)
            if first:  # hydration: the delta is the whole input
                rows: pl.DataFrame | None = _positive(delta.drop(TIME))
            else:
                rows = _current(inputs.lookup(hashes), touched, self.groups)
            parts, error_parts = [], []
            if rows is not None and rows.height:
                new, errors = self.windows(rows)
                parts.append(new)
                error_parts.append(errors)
            if old is not None:
                parts.append(old.with_columns(-pl.col(DIFF)))
            if old_errors is not None:
                error_parts.append(old_errors.with_columns(-pl.col(DIFF)))
            stamp = pl.lit(at, pl.UInt64).alias(TIME)
            stamped = [
                self.conform(p.with_columns(stamp).select(self.empty.columns)) for p in parts
            ]
            change = consolidate(concat(stamped, self.empty))
            outputs.insert(change)
            changes.append(change)
            failed = consolidate(concat(error_parts, self.empty_errors).with_columns(stamp))
            if failed.height:
                failures.insert(failed)
                self.errors.append(failed.select(ERROR, TIME, DIFF))
        return concat(changes, self.empty)

    def windows(self, rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Every row of ``rows`` (consolidated updates of whole partitions) as often as it
        occurs, with the window functions' values, each with diff 1; and the errors of the
        arguments PostgreSQL rejects, with their partitions' keys."""
        if not self.columns:  # rows of no columns (SELECT … OVER () without FROM): count them
            rows = rows.with_columns(pl.lit(0, pl.Int8).alias("_unit"))
        frame = self._sorted(expand(rows))
        if frame.height == 0:
            return self.empty.drop(TIME), self.empty_errors
        errors = self._argument_errors(frame)
        frame = self._positions(frame)
        values = [
            self._function(frame, f).alias(f"c{self.width + i}")
            for i, f in enumerate(self.node.functions)
        ]
        return frame.select(*self.columns, *values, pl.lit(1, pl.Int64).alias(DIFF)), errors

    def _argument_errors(self, frame: pl.DataFrame) -> pl.DataFrame:
        """An error per partition whose ntile argument (its first row's) is below 1, and per
        row whose nth_value argument is: the values PostgreSQL reads."""
        found = [self.empty_errors]
        for function in self.node.functions:
            if function.func == "ntile":
                code = INVALID_ARGUMENT_FOR_NTILE
                column = pl.col(f"c{function.args[0]}")
                leading = (
                    frame.unique(self.groups, keep="first", maintain_order=True)
                    if self.groups
                    else frame.head(1)
                )
                bad = leading.filter(column <= 0)
            elif function.func == "nth_value":
                code = INVALID_ARGUMENT_FOR_NTH_VALUE
                bad = frame.filter(pl.col(f"c{function.args[1]}") <= 0)
            else:
                continue
            message = f"{code}|argument of {function.func} must be greater than zero"
            # with_columns, not select: literals alone would make one row of any frame.
            flagged = bad.with_columns(
                pl.lit(message).alias(ERROR), pl.lit(1, pl.Int64).alias(DIFF)
            )
            found.append(flagged.select(*self.groups, ERROR, DIFF))
        return concat(found, self.empty_errors)

    def _sorted(self, frame: pl.DataFrame) -> pl.DataFrame:
        keys = [(c, False, True) for c in self.groups]
        keys += [(f"c{k.column}", k.desc, k.nulls_last) for k in self.node.order]
        used = {c for c, _, _ in keys}
        # Ties in ORDER BY are broken by the whole row: the same partition always
        # sorts the same way, so a recomputation changes only rows that moved.
        keys += [
            (c, False, True)
            for c in self.columns
            if c not in used and not isinstance(frame.schema[c], _UNSORTABLE)
        ]
        if not keys or frame.height <= 1:
            return frame
        by, descending, nulls_last = intervals.order_by(frame.schema, keys)
        return frame.sort(by, descending=descending, nulls_last=nulls_last)

    def _positions(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` with each row's index, its partition's and its peers' bounds."""
        index = pl.int_range(pl.len(), dtype=pl.Int64)
        last = index == pl.len() - 1

        def value(column: str) -> pl.Expr:
            # Intervals of one span ('1 mon', '30 days') are peers, as PostgreSQL's = says.
            if intervals.is_interval(frame.schema[column]):
                return intervals.span_value(pl.col(column))
            return pl.col(column)

        def changes(columns: list[str], step: int) -> pl.Expr:
            return pl.any_horizontal(
                [pl.lit(False)] + [value(c).ne_missing(value(c).shift(step)) for c in columns]
            )

        peers = [*self.groups, *self.order]
        flagged = frame.with_columns(
            index.alias(_ROW),
            ((index == 0) | changes(self.groups, 1)).alias("_pf"),
            (last | changes(self.groups, -1)).alias("_pl"),
            ((index == 0) | changes(peers, 1)).alias("_gf"),
            (last | changes(peers, -1)).alias("_gl"),
        )
        row = pl.col(_ROW)
        return flagged.with_columns(
            pl.col("_pf").cast(pl.Int64).cum_sum().alias(_PARTITION),
            pl.when("_pf").then(row).forward_fill().alias(_PARTITION_START),
            pl.when("_pl").then(row + 1).backward_fill().alias(_PARTITION_END),
            pl.when("_gf").then(row).forward_fill().alias(_PEERS_START),
            pl.when("_gl").then(row + 1).backward_fill().alias(_PEERS_END),
            pl.col("_gf").cast(pl.Int64).cum_sum().alias(_PEER_GROUP),
            pl.lit(1, pl.Int64).alias(_ONE),
        )

    def _function(self, frame: pl.DataFrame, function: mir.WindowFunction) -> pl.Expr:
        row, start, end = pl.col(_ROW), pl.col(_PARTITION_START), pl.col(_PARTITION_END)
        size = end - start
        rank = pl.col(_PEERS_START) - start + 1
        func = function.func
        if func == "row_number":
            return row - start + 1
        if func == "rank":
            return rank
        if func == "dense_rank":
            return pl.col(_PEER_GROUP) - pl.col(_PEER_GROUP).gather(start) + 1
        if func == "percent_rank":
            fraction = (rank - 1).cast(pl.Float64) / (size - 1).cast(pl.Float64)
            return pl.when(size > 1).then(fraction).otherwise(pl.lit(0.0))
        if func == "cume_dist":
            return (pl.col(_PEERS_END) - start).cast(pl.Float64) / size.cast(pl.Float64)
        if func == "ntile":
            return _ntile(pl.col(f"c{function.args[0]}").gather(start).cast(pl.Int64))
        if func in ("lag", "lead"):
            return self._shifted(frame, function)
        frame_start, frame_end = _frame(function.frame, bool(self.order))
        if function.frame.start.distance is not None or function.frame.end.distance is not None:
            frame_start, frame_end = self._range_offsets(
                frame, function.frame, frame_start, frame_end
            )
        if function.frame.mode == "groups":
            frame_start, frame_end = _group_offsets(frame, function.frame, frame_start, frame_end)
        if func in mir.VALUE_FUNCTIONS:
            return _value_at(frame, function, frame_start, frame_end)
        return _aggregate(frame, function, frame_start, frame_end, bool(self.order))

    def _shifted(self, frame: pl.DataFrame, function: mir.WindowFunction) -> pl.Expr:
        """lag or lead: the value ``offset`` rows before or after, or the default."""
        value = pl.col(f"c{function.args[0]}")
        offset = pl.col(f"c{function.args[1]}").cast(pl.Int64) if len(function.args) > 1 else 1
        default = pl.col(f"c{function.args[2]}") if len(function.args) > 2 else pl.lit(None)
        row = pl.col(_ROW)
        target = row - offset if function.func == "lag" else row + offset
        inside = (target >= pl.col(_PARTITION_START)) & (target < pl.col(_PARTITION_END))
        found = value.gather(target.clip(0, frame.height - 1))
        return pl.when(inside).then(found).when(target.is_not_null()).then(default)

    def _range_offsets(
        self, frame: pl.DataFrame, window_frame: mir.WindowFrame, start: pl.Expr, end: pl.Expr
    ) -> tuple[pl.Expr, pl.Expr]:
        """A RANGE frame's bounds that are offsets (``1 PRECEDING``): the first row whose
        key is within the distance, and the row after the last one.

        The key is the window's one ORDER BY column, in order within each partition;
        each bound is found by an as-of join against the first (or last) row of every
        peer group. NULL keys are beyond every value, as PostgreSQL orders them.
        """
        key = self.node.order[0]
        name = f"c{key.column}"
        bounds = []
        for bound, is_start in ((window_frame.start, True), (window_frame.end, False)):
            if bound.distance is None:
                bounds.append(start if is_start else end)
                continue
            bounds.append(pl.lit(self._range_bound(frame, name, key.desc, bound, is_start)))
        return bounds[0], bounds[1]

    def _range_bound(
        self, frame: pl.DataFrame, name: str, desc: bool, bound: mir.FrameBound, is_start: bool
    ) -> pl.Series:
        assert bound.distance is not None
        dtype = frame.schema[name]
        key = pl.col(name)
        value = bound.distance.value
        distance = pl.lit(None) if isinstance(value, Interval) else pl.lit(value)
        if dtype == pl.Date:  # a date and an interval make a timestamp
            key = key.cast(pl.Datetime("us"))
        elif dtype.is_integer():
            key, distance = key.cast(pl.Int64), distance.cast(pl.Int64)
        elif dtype.is_numeric():
            distance = distance.cast(dtype)
        # Toward lower keys: PRECEDING in ascending order, FOLLOWING in descending.
        lower = (bound.kind == "offset_preceding") != desc
        if isinstance(value, Interval):  # months first, as time + interval
            offset = intervals.literal(value)
            target = intervals.add_to_time(key, offset, -1 if lower else 1)[0]
        else:
            target = key - distance if lower else key + distance
        # Ascending keys: a start is the first row of the first peer group at or above the
        # target, an end the row after the last group at or below it; descending, the
        # other way round.
        edge, position = ("_gf", pl.col(_ROW)) if is_start else ("_gl", pl.col(_ROW) + 1)
        strategy: Literal["forward", "backward"] = "forward" if is_start != desc else "backward"
        present = frame.filter(pl.col(name).is_not_null())
        wanted = present.select(pl.col(_ROW), pl.col(_PARTITION), target.alias("_k")).sort("_k")
        peers = (
            present.filter(pl.col(edge))
            .select(pl.col(_PARTITION), key.alias("_k"), position.alias("_at"))
            .sort("_k")
        )
        found = wanted.join_asof(
            peers, on="_k", by=_PARTITION, strategy=strategy, check_sortedness=False
        )
        # No non-NULL key within the distance: NULLs sort beyond every value, at the end
        # they sort to, so a start falls after the last non-NULL key and an end before
        # the first (the frame may hold the NULLs). A NULL key's own bounds: its peers.
        nulls_last = self.node.order[0].nulls_last
        keyed = pl.col(name).is_not_null().cast(pl.Int64).sum().over(_PARTITION)
        if is_start:
            empty = pl.col(_PARTITION_START) + keyed if nulls_last else pl.col(_PARTITION_END)
        else:
            empty = pl.col(_PARTITION_START) if nulls_last else pl.col(_PARTITION_END) - keyed
        peers_bound = pl.col(_PEERS_START) if is_start else pl.col(_PEERS_END)
        placed = frame.select(
            pl.col(_ROW),
            pl.col(name).is_null().alias("_null"),
            empty.alias("_empty"),
            peers_bound.alias("_peers"),
        )
        merged = placed.join(found.select(_ROW, "_at"), on=_ROW, how="left").sort(_ROW)
        return merged.select(
            pl.when("_null")
            .then("_peers")
            .when(pl.col("_at").is_null())
            .then("_empty")
            .otherwise("_at")
        ).to_series()

    def spines(self) -> list[list[Spine]]:
        return [list(spines) for spines in self.state]


def _ntile(buckets: pl.Expr) -> pl.Expr:
    """The bucket of each row: the first ``size % buckets`` buckets hold one row more."""
    position = pl.col(_ROW) - pl.col(_PARTITION_START)
    size = pl.col(_PARTITION_END) - pl.col(_PARTITION_START)
    per = size // pl.max_horizontal(buckets, 1)
    larger = size % pl.max_horizontal(buckets, 1)
    in_larger = larger * (per + 1)
    bucket = (
        pl.when(position < in_larger)
        .then(position // (per + 1) + 1)
        .otherwise(larger + (position - in_larger) // pl.max_horizontal(per, 1) + 1)
    )
    return pl.when(buckets > 0).then(bucket)


def _frame(frame: mir.WindowFrame, ordered: bool) -> tuple[pl.Expr, pl.Expr]:
    """A row's frame as ``[start, end)`` positions in the sorted rows (start >= end: empty)."""
    row = pl.col(_ROW)
    first, after = pl.col(_PARTITION_START), pl.col(_PARTITION_END)
    if frame.mode == "rows":
        current_start, current_end = row, row + 1
    else:  # range, groups: the current row's peers (the partition without ORDER BY)
        current_start, current_end = pl.col(_PEERS_START), pl.col(_PEERS_END)
        if not ordered:
            current_start, current_end = first, after
    starts = {
        "unbounded_preceding": first,
        "offset_preceding": pl.max_horizontal(row - frame.start.offset, first),
        "current_row": current_start,
        "offset_following": pl.min_horizontal(row + frame.start.offset, after),
    }
    ends = {
        "offset_preceding": pl.max_horizontal(row - frame.end.offset + 1, first),
        "current_row": current_end,
        "offset_following": pl.min_horizontal(row + frame.end.offset + 1, after),
        "unbounded_following": after,
    }
    return starts[frame.start.kind], ends[frame.end.kind]


def _group_offsets(
    frame: pl.DataFrame, window_frame: mir.WindowFrame, start: pl.Expr, end: pl.Expr
) -> tuple[pl.Expr, pl.Expr]:
    """A GROUPS frame's offset bounds: ``n`` peer groups before or after the current row's,
    within its partition (a start past the last group or an end before the first: empty)."""
    # Peer group g (numbered from 1 over the sorted rows) starts at firsts[g - 1] and
    # ends before ends[g - 1].
    firsts = frame.filter(pl.col("_gf"))[_ROW]
    ends = frame.filter(pl.col("_gl"))[_ROW] + 1
    group = pl.col(_PEER_GROUP)
    groups = frame.select(
        group.alias("_g"),
        group.gather(pl.col(_PARTITION_START)).alias("_first"),
        group.gather(pl.col(_PARTITION_END) - 1).alias("_last"),
        pl.col(_PARTITION_START).alias("_ps"),
        pl.col(_PARTITION_END).alias("_pe"),
    )
    bounds = []
    for bound, is_start, current in (
        (window_frame.start, True, start),
        (window_frame.end, False, end),
    ):
        if bound.kind not in ("offset_preceding", "offset_following"):
            bounds.append(current)
            continue
        step = -bound.offset if bound.kind == "offset_preceding" else bound.offset
        target = groups["_g"] + step
        inside = target.clip(groups["_first"], groups["_last"]) - 1
        if is_start:
            found = firsts.gather(inside).zip_with(target <= groups["_last"], groups["_pe"])
        else:
            found = ends.gather(inside).zip_with(target >= groups["_first"], groups["_ps"])
        bounds.append(pl.lit(found))
    return bounds[0], bounds[1]


def _value_at(
    frame: pl.DataFrame, function: mir.WindowFunction, start: pl.Expr, end: pl.Expr
) -> pl.Expr:
    """first_value, last_value or nth_value: one row of the frame, NULL when it has none."""
    value = pl.col(f"c{function.args[0]}")
    if function.func == "first_value":
        position = start
    elif function.func == "last_value":
        position = end - 1
    else:
        position = start + pl.col(f"c{function.args[1]}").cast(pl.Int64) - 1
    inside = (position >= start) & (position < end)
    return pl.when(inside).then(value.gather(position.clip(0, frame.height - 1)))


def _is_whole(frame: mir.WindowFrame, ordered: bool) -> bool:
    """Whether every row's frame is its whole partition."""
    if frame.start.kind != "unbounded_preceding":
        return False
    whole_peers = frame.mode == "range" and not ordered
    return frame.end.kind == "unbounded_following" or (
        frame.end.kind == "current_row" and whole_peers
    )


def _aggregate(
    frame: pl.DataFrame,
    function: mir.WindowFunction,
    start: pl.Expr,
    end: pl.Expr,
    ordered: bool,
) -> pl.Expr:
    """An aggregate over each row's frame ``[start, end)`` (NULL or 0 when it is empty)."""
    func = function.func
    if func == "count" and not function.args:
        return pl.max_horizontal(end - start, 0)
    name = f"c{function.args[0]}"
    value = pl.col(name)
    dtype = frame.schema[name]
    # avg of integers and numerics is an exact numeric, as PostgreSQL's; their stddev and
    # variance are numeric too, computed in float8 (kept to its 15 significant digits).
    exact = dtype.is_integer() or dtype.is_decimal()
    numeric = exact and (func == "avg" or func in mir.SPREAD_AGGREGATES)
    if func == "avg" and exact:
        value = value.cast(NUMERIC)
    elif dtype.is_integer():
        value = value.cast(pl.Int64)  # sums of int4 are int8, as PostgreSQL's
    aggregate = mir.Aggregate(func, mir.Column(0))
    if intervals.is_interval(frame.schema[name]) and func in ("sum", "avg", "min", "max"):
        # Intervals aggregate field by field (min/max by span): each frame's rows are read.
        return pl.lit(_row_by_row(frame, value, aggregate, start, end, over=_interval_aggregate))
    if _is_whole(function.frame, ordered):
        one = pl.col(_ONE)
        return _aggregate_expr(aggregate, value, one, one > 0, numeric=numeric).over(_PARTITION)
    if func == "count":  # prefix counts: exact, whatever the frame
        present = value.is_not_null()
        return pl.max_horizontal(_prefix(present, end) - _prefix(present, start), 0)
    if func in ("sum", "avg", "min", "max") and frame[name].null_count() < frame.height:
        if function.frame.start.kind == "unbounded_preceding":
            return _running(frame, name, value, func, end - 1, end <= start, reverse=False)
        if function.frame.end.kind == "unbounded_following":
            return _running(frame, name, value, func, start, end <= start, reverse=True)
    return pl.lit(_row_by_row(frame, value, aggregate, start, end, numeric=numeric))


def _prefix(present: pl.Expr, position: pl.Expr) -> pl.Expr:
    """How many of the rows before ``position`` are ``present``."""
    running = present.cast(pl.Int64).cum_sum()
    return pl.when(position > 0).then(running.gather((position - 1).clip(0))).otherwise(0)


def _running(
    frame: pl.DataFrame,
    name: str,
    value: pl.Expr,
    func: str,
    at: pl.Expr,
    empty: pl.Expr,
    *,
    reverse: bool,
) -> pl.Expr:
    """A cumulative aggregate within each partition (from its end when ``reverse``), read at ``at``.

    Forward, each row's value is PostgreSQL's: it also adds a running frame's
    rows in order.
    """
    at = at.clip(0, frame.height - 1)
    count = value.is_not_null().cast(pl.Int64).cum_sum(reverse=reverse).over(_PARTITION)
    present = (count.gather(at) > 0) & ~empty
    if func in ("sum", "avg"):
        decimal = func == "avg" and _is_decimal(frame, value)
        summed = value if func == "sum" or decimal else value.cast(pl.Float64)
        total = summed.fill_null(0).cum_sum(reverse=reverse).over(_PARTITION).gather(at)
        divisor = count.gather(at)
        if decimal:  # a decimal division by zero raises: those rows are NULL anyway
            divisor = divisor.clip(1).cast(NUMERIC)
        result = total if func == "sum" else total / divisor
        return pl.when(present).then(result)
    # min and max: the running best of each value's rank among all values (any type ranks).
    ranked = value.cast(pl.Int8) if frame.schema[name] == pl.Boolean else value
    codes = frame.select(ranked.rank("dense").cast(pl.Int64).alias("_r"), pl.col(_PARTITION))
    if func == "max":
        best = pl.col("_r").fill_null(0).cum_max(reverse=reverse)
    else:
        best = pl.col("_r").fill_null(2**40).cum_min(reverse=reverse)
    ranks = codes.select(best.over(_PARTITION).alias("_b"))["_b"]
    distinct = frame.select(value.drop_nulls().unique().sort().alias("_v"))["_v"]
    where = frame.select(at.alias("_at"), present.alias("_p"))
    found = distinct.gather((ranks.gather(where["_at"]) - 1).clip(0, distinct.len() - 1))
    return pl.when(pl.lit(where["_p"])).then(pl.lit(found))


def _is_decimal(frame: pl.DataFrame, value: pl.Expr) -> bool:
    """Whether ``value`` over ``frame`` is a decimal (an exact numeric), from the schema only."""
    return frame.lazy().select(value.alias("_v")).collect_schema()["_v"].is_decimal()


def _row_by_row(
    frame: pl.DataFrame,
    value: pl.Expr,
    aggregate: mir.Aggregate,
    start: pl.Expr,
    end: pl.Expr,
    *,
    numeric: bool = False,
    over: Callable[..., pl.Expr] | None = None,
) -> pl.Series:
    """The aggregate over each row's frame, reading the frame's rows one by one (bounded frames)."""
    bounds = frame.select(pl.col(_ROW), start.alias("_s"), end.alias("_e"), value.alias("_v"))
    members = (
        bounds.select(pl.col(_ROW), pl.int_ranges("_s", pl.max_horizontal("_s", "_e")).alias("_j"))
        .explode("_j")
        .drop_nulls("_j")
    )
    members = members.with_columns(
        bounds["_v"].gather(members["_j"]).alias("_v"), pl.lit(1, pl.Int64).alias(_ONE)
    )
    one = pl.col(_ONE)
    function = over or _aggregate_expr
    grouped = members.group_by(_ROW).agg(
        function(aggregate, pl.col("_v"), one, one > 0).alias("_a")
        if over is not None
        else _aggregate_expr(aggregate, pl.col("_v"), one, one > 0, numeric=numeric).alias("_a")
    )
    if over is _interval_aggregate and aggregate.func == "avg":
        grouped = interval_averages(grouped, ["_a"])
    return bounds.select(_ROW).join(grouped, on=_ROW, how="left").sort(_ROW)["_a"]
