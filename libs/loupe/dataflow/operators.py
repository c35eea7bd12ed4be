"""Operators: LIR nodes rendered over partitioned update batches.

A dataflow steps all its operators together over one interval of times
``[lower, upper)`` once every input is complete up to ``upper``: each
operator reads the batches its inputs produced for the interval (``ok``: one
frame per worker; ``err``: the error stream) and produces its own. So an
operator's output frontier is the dataflow's, and it only ever emits times its
inputs have passed.

Stateful operators exchange their input by key hash and keep one ``Spine``
per worker. Their state holds everything before ``lower``, so a delta only
looks up its own keys: no operator rescans its state for a small change.
"""

from __future__ import annotations

import itertools
import time as clock
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import partial
from operator import itemgetter
from typing import Any

import polars as pl

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.dataflow import expr, intervals, memory
from loupe.dataflow import rows as rows_path
from loupe.dataflow.arrangement import Spine
from loupe.dataflow.batches import (
    DIFF,
    ERROR,
    HASH,
    KNOWN_KEYS,
    TIME,
    KeyHashes,
    Meter,
    Parts,
    canonical_key_dtype,
    concat,
    consolidate,
    empty_errors,
    exchange,
    frame_of_rows,
    key_hash,
    row_safe,
    spread,
    sum_by,
)
from loupe.dataflow.expr import NUMERIC
from loupe.dataflow.types import empty_frame, polars_dtype
from loupe.interval import structs
from loupe.plan import lir, mir
from loupe.plan.scalar import Column, Scalar, columns_of, scalar_type, shift
from loupe.sqltypes import TIME_TYPES

UNIT = "_u"  # the key column of a reduce without group key


class Operator:
    """A rendered LIR node (or an import) on every worker; ``run`` computes one interval."""

    name = "Operator"

    def __init__(self, types: Sequence[str], inputs: Sequence[Operator], workers: int) -> None:
        self.types = tuple(types)
        self.inputs = list(inputs)
        self.workers = workers
        self.empty = empty_frame(self.types)
        # The empty frame's columns and dtypes (``conform`` compares a batch's with them:
        # building a frame's ``schema`` costs tens of microseconds).
        self.shape = (self.empty.columns, self.empty.dtypes)
        self.ok: Parts = [self.empty] * workers
        self.err = empty_errors()
        # Set by the renderer: instance-wide operator id (for logging).
        self.operator_id = -1
        # Set by the instance while logging is on: what each run did per worker.
        self.meter: Meter | None = None

    def run(self, lower: int, upper: int) -> None:
        """Produce ``ok`` and ``err`` for times in ``[lower, upper)`` from the inputs' outputs."""
        self.err = concat([i.err for i in self.inputs], empty_errors())
        self.ok = self.compute(lower, upper)

    def compute(self, lower: int, upper: int) -> Parts:
        raise NotImplementedError

    @property
    def eager(self) -> bool:
        """Whether it must run even when its inputs are quiet (it has output of its own due)."""
        return False

    def spines(self) -> list[list[Spine]]:
        """The operator's arrangements, per worker (for size logging)."""
        return []

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` with exactly this operator's column dtypes (literals and NULLs vary)."""
        if frame is self.empty:
            return frame
        columns, dtypes = self.shape
        if frame.columns == columns and all(
            a.is_(b) for a, b in zip(frame.dtypes, dtypes, strict=True)
        ):
            return frame
        return frame.select([pl.col(n).cast(d) for n, d in self.empty.schema.items()])

    def per_worker(self, parts: Parts, body: Callable[[int, pl.DataFrame], pl.DataFrame]) -> Parts:
        """``body`` on every worker's batch (each timed for its worker while logging is on)."""
        if self.meter is not None:
            return self.meter.each(parts, body)
        return [body(w, part) for w, part in enumerate(parts)]


class Input(Operator):
    """An import (storage collection or another dataflow's index): fed by the dataflow."""

    name = "Import"

    def __init__(self, types: Sequence[str], workers: int, label: str) -> None:
        super().__init__(types, (), workers)
        self.name = label
        self.pending: Parts = [self.empty] * workers
        self.pending_err = empty_errors()

    def run(self, lower: int, upper: int) -> None:
        self.ok = [self.conform(p) for p in self.pending]
        self.err = self.pending_err
        self.pending = [self.empty] * self.workers
        self.pending_err = empty_errors()

    def compute(self, lower: int, upper: int) -> Parts:
        raise AssertionError("inputs are fed, not computed")


class Passthrough(Operator):
    """Get of a collection rendered in this dataflow, and ArrangeBy (the readers arrange)."""

    def __init__(self, node: lir.Node, source: Operator, workers: int, name: str) -> None:
        super().__init__(node.types or source.types, (source,), workers)
        self.name = name

    def compute(self, lower: int, upper: int) -> Parts:
        return self.inputs[0].ok


class Constant(Operator):
    name = "Constant"

    def __init__(self, node: lir.Constant, workers: int, as_of: int) -> None:
        super().__init__(node.types, (), workers)
        self.rows = node.rows
        self.as_of = as_of

    def compute(self, lower: int, upper: int) -> Parts:
        if not lower <= self.as_of < upper or not self.rows:
            return [self.empty] * self.workers
        count = len(self.rows)
        columns: dict[str, pl.Series] = {}
        for i, (name, dtype) in enumerate(list(self.empty.schema.items())[: len(self.types)]):
            values = [row[i] for row in self.rows]
            if self.types[i] == "interval":
                values = structs(values)
            columns[name] = pl.Series(name, values, dtype=dtype, strict=False)
        columns[TIME] = pl.Series(TIME, [self.as_of] * count, dtype=pl.UInt64)
        columns[DIFF] = pl.Series(DIFF, [1] * count, dtype=pl.Int64)
        return [pl.DataFrame(columns)] + [self.empty] * (self.workers - 1)


class Mfp(Operator):
    name = "Mfp"

    def __init__(self, node: lir.Mfp, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        self.mfp = node.mfp
        self.input_types = source.types
        expr.mfp_output_types(self.mfp, self.input_types)  # refuse unknown functions at render

    def run(self, lower: int, upper: int) -> None:
        errors = [self.inputs[0].err]

        def body(worker: int, part: pl.DataFrame) -> pl.DataFrame:
            if part.height == 0:
                return self.empty
            # A small delta's rows are mapped and filtered in Python where the MFP compiles
            # (``expr.ROW_MFP_ROWS``); an error row leaves the batch to polars.
            ok, err = expr.apply_mfp(part, self.mfp, self.input_types)
            errors.append(err)
            return self.conform(ok)

        self.ok = self.per_worker(self.inputs[0].ok, body)
        self.err = concat(errors, empty_errors())


class Negate(Operator):
    name = "Negate"

    def compute(self, lower: int, upper: int) -> Parts:
        return [p.with_columns(-pl.col(DIFF)) for p in self.inputs[0].ok]


class Union(Operator):
    name = "Union"

    def compute(self, lower: int, upper: int) -> Parts:
        return [
            concat([self.conform(i.ok[w]) for i in self.inputs], self.empty)
            for w in range(self.workers)
        ]


def evaluate(
    frame: pl.DataFrame,
    exprs: Sequence[Scalar],
    input_types: Sequence[str],
    names: Sequence[str],
    dtypes: Sequence[pl.DataType] | None = None,
    *,
    match: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``frame`` with ``exprs`` appended as ``names``, minus rows where one fails; the error rows.

    ``dtypes``: cast the values on to these (join keys compared across types). ``match``:
    keys that match when their values are equal, an interval as its total span (so
    '1 mon' matches '30 days', as PostgreSQL's ``=`` says).
    """
    picked = _picked_columns(frame, exprs, input_types, names, dtypes, match)
    if picked is not None:
        return picked, empty_errors()
    compiled = [expr.compile_scalar(e, input_types) for e in exprs]
    values = [c.value.cast(polars_dtype(c.type)) for c in compiled]
    if dtypes is not None:
        values = [v.cast(d) for v, d in zip(values, dtypes, strict=True)]
    if match:
        values = [
            intervals.normalized(v) if c.type == "interval" else v
            for v, c in zip(values, compiled, strict=True)
        ]
    lets = [name for c in compiled for name in c.let_names]
    lazy = frame.lazy()
    for c in compiled:
        lazy = c.with_lets(lazy)
    lazy = lazy.with_columns(v.alias(n) for v, n in zip(values, names, strict=True))
    errors = [c.error for c in compiled if c.error is not None]
    if not errors or frame.height == 0:
        return lazy.drop(lets).collect(), empty_errors()
    flagged = lazy.with_columns(pl.coalesce(errors).alias(ERROR)).drop(lets).collect()
    failed = flagged.filter(pl.col(ERROR).is_not_null()).select(ERROR, TIME, DIFF)
    return flagged.filter(pl.col(ERROR).is_null()).drop(ERROR), failed


def _picked_columns(
    frame: pl.DataFrame,
    exprs: Sequence[Scalar],
    input_types: Sequence[str],
    names: Sequence[str],
    dtypes: Sequence[pl.DataType] | None,
    match: bool,
) -> pl.DataFrame | None:
    """``evaluate`` where every expression is an input column (a join's usual keys): the
    columns copied under ``names``, cast as ``evaluate`` casts them, with no query.

    A lazy query costs about 0.3 ms however few its rows, the most of any
    step of a one-row change through a join; a column pick costs microseconds.
    None where an expression is not a column, or an interval would be
    normalized for matching.
    """
    columns = []
    for position, (scalar, name) in enumerate(zip(exprs, names, strict=True)):
        if not isinstance(scalar, Column):
            return None
        kind = input_types[scalar.index]
        if match and kind == "interval":
            return None
        series = frame.get_column(f"c{scalar.index}")
        for target in (polars_dtype(kind), None if dtypes is None else dtypes[position]):
            if target is not None and series.dtype != target:
                series = series.cast(target)  # the query's two casts, strict as they are
        columns.append(series.alias(name))
    if any(name in frame.schema for name in names):
        return frame.with_columns(columns)  # replaces a column: a query
    return frame.hstack(columns)  # new columns beside the frame's: no query


def _without_null_keys(frame: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """``frame`` without the rows with a NULL in one of ``names`` (they join nothing); the
    frame itself when there are none, which its columns' null counts tell without a query
    (``drop_nulls`` is one: about 90 us on a few rows)."""
    if not names or not any(frame.get_column(name).null_count() for name in names):
        return frame
    return frame.drop_nulls(names)


def semi_join(frame: pl.DataFrame, keys_frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The rows of ``frame`` whose ``keys`` appear in ``keys_frame`` (NULL keys match NULL)."""
    if not keys:
        return frame
    return frame.join(keys_frame.select(keys), on=list(keys), how="semi", nulls_equal=True)


# -- accumulating operators: Threshold, Distinct, Accumulable reduces ----------------------


# A delta of at most this many rows takes a reduce's row path: Python over the rows and a
# few polars calls, where the columnar path makes dozens (each costs 50-200 us, however
# few the rows).
SMALL_DELTA = 64

_I64, _I128, _F64 = "i64", "i128", "f64"
_KINDS: dict[pl.DataType, str] = {pl.Int64(): _I64, pl.Int128(): _I128, pl.Float64(): _F64}
_BITS = {_I64: 64, _I128: 128}


def _wrap(kind: str, value: Any) -> Any:
    """``value`` as the columnar path's integer column holds it: wrapped around its width."""
    bits = _BITS.get(kind)
    if bits is None:
        return value
    half = 1 << (bits - 1)
    if -half <= value < half:
        return value
    return (value + half) % (1 << bits) - half


@dataclass
class RowSteps:
    """A small delta's steps planned by ``Accumulator.plan_rows``.

    ``steps``: per key and time, in time order, ``(key, time, prev sums, new sums)``;
    ``updates``: the state rows to retract and insert, ``(hash, key..., sums..., diff)``;
    ``finals``: per key, its state row's sums after the delta (None: it has none).
    """

    steps: list[tuple[tuple[Any, ...], int, tuple[Any, ...], tuple[Any, ...]]]
    updates: list[tuple[Any, ...]]
    finals: dict[tuple[Any, ...], tuple[Any, ...] | None]


class Accumulator:
    """Running sums per key, one state row per key, updated for a batch of contributions.

    ``step`` returns, per (key, time) of the batch in time order, the
    accumulators before (``prev_*``) and after (``new_*``) that time. The
    state row of a key is replaced (old row retracted, new inserted) rather
    than summed into, so a later retraction uses exactly the floats emitted
    before: float sums never leave ghost rows.
    """

    def __init__(self, keys: Sequence[str], sums: Sequence[str], alive: str) -> None:
        self.keys = list(keys) or [UNIT]
        self.sums = list(sums)
        self.alive = alive
        self.spine = Spine(self.keys)
        # Per sum, what it is kept in (set by the operator for the row path): _I64, _I128, _F64.
        self.kinds: tuple[str, ...] = ()
        # The row path's copy of the state rows of the keys it changed lately (sums; None:
        # the key has none; at most ``KNOWN_KEYS``), so a change of such a key looks nothing
        # up. Only the row path writes it; the columnar path forgets it.
        self.known: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}

    def step(self, delta: pl.DataFrame, summed: bool = False) -> pl.DataFrame:
        """``summed``: the delta holds one row per key and time already (keys, time, sums)."""
        self.known.clear()
        if self.keys == [UNIT] and UNIT not in delta.columns:
            delta = delta.with_columns(pl.lit(0, pl.Int8).alias(UNIT))
        batch = delta if summed else sum_by(delta, self.keys, self.sums)
        batch = batch.hstack([key_hash(batch, self.keys)])
        old = self._old(batch)
        if old is not None:
            # Equal keys hash equally: joining on the hash too keeps one ``_h``.
            batch = batch.join(old, on=[HASH, *self.keys], how="left", nulls_equal=True)
        else:
            batch = batch.with_columns(
                [pl.lit(None, batch.schema[s]).alias(f"old_{s}") for s in self.sums]
            )
        times = batch[TIME]
        if times.min() == times.max():  # one row per key: no running sums within the batch
            running = []
            for column in self.sums:
                base = pl.col(f"old_{column}").fill_null(0)
                running += [
                    (base + pl.col(column)).alias(f"new_{column}"),
                    base.alias(f"prev_{column}"),
                ]
            batch = batch.with_columns(running)
            self._replace(batch, old)
            return batch
        batch = self._running(batch)
        self._replace(batch.filter(pl.col("_last")).drop("_last"), old)
        return batch.drop("_last")

    def _running(self, batch: pl.DataFrame) -> pl.DataFrame:
        """Running sums per key in time order, for a batch with several times.

        Sorted by key, a key's running sum is the global running sum minus
        the global sum before the key's first row (window functions over
        many small groups are slow in polars). ``prev`` is the previous
        row's ``new`` computed the same way, so the floats match exactly.
        """
        batch = batch.sort([HASH, *self.keys, TIME], nulls_last=True)
        changed = [pl.col(HASH).ne_missing(pl.col(HASH).shift(1))]
        changed += [pl.col(k).ne_missing(pl.col(k).shift(1)) for k in self.keys]
        batch = batch.with_columns(pl.any_horizontal(changed).alias("_start"))
        running = [pl.col("_start").shift(-1, fill_value=True).alias("_last")]
        for column in self.sums:
            value, base = pl.col(column), pl.col(f"old_{column}").fill_null(0)
            total = value.cum_sum()
            before_key = pl.when(pl.col("_start")).then(total - value).forward_fill()
            previous = pl.when(pl.col("_start")).then(0).otherwise(total.shift(1) - before_key)
            running.append((base + (total - before_key)).alias(f"new_{column}"))
            running.append((base + previous).alias(f"prev_{column}"))
        return batch.with_columns(running).drop("_start")

    def _old(self, batch: pl.DataFrame) -> pl.DataFrame | None:
        found = self.spine.lookup(batch[HASH])
        if found is None:
            return None
        rows = found.group_by([HASH, *self.keys, *self.sums]).agg(pl.col(DIFF).sum())
        rows = rows.filter(pl.col(DIFF) != 0)
        return rows.select(HASH, *self.keys, *[pl.col(s).alias(f"old_{s}") for s in self.sums])

    def _replace(self, last: pl.DataFrame, old: pl.DataFrame | None) -> None:
        """Retract the keys' old state rows, insert ``last`` (one row per key: its final sums)."""
        updates = []
        if old is not None:
            retract = old.select(
                HASH,
                *self.keys,
                *[pl.col(f"old_{s}").alias(s) for s in self.sums],
                pl.lit(-1, pl.Int64).alias(DIFF),
            )
            updates.append(retract)
        insert = last.filter(pl.col(f"new_{self.alive}") != 0).select(
            HASH,
            *self.keys,
            *[pl.col(f"new_{s}").alias(s) for s in self.sums],
            pl.lit(1, pl.Int64).alias(DIFF),
        )
        updates.append(insert)
        self.spine.insert(pl.concat(updates, how="vertical_relaxed"))

    # The row path: a small delta in Python, a few polars calls instead of dozens.

    def plan_rows(self, rows: Sequence[tuple[Any, ...]], hashes: Sequence[int]) -> RowSteps | None:
        """``step`` for a small delta, without changing the state yet (``commit_rows`` does).

        ``rows`` are contributions ``(keys..., time, sums...)`` (not summed; a
        keyless state's key is ``(0,)``), ``hashes`` their keys' hashes. None when
        the state found is not one row per key (the columnar path then decides).
        """
        width, count = len(self.keys), len(self.sums)
        by_key: dict[tuple[Any, ...], dict[int, list[Any]]] = {}
        hash_of: dict[tuple[Any, ...], int] = {}
        for row, hashed in zip(rows, hashes, strict=True):
            key = row[:width]
            times = by_key.setdefault(key, {})
            values = row[width + 1 :]
            summed = times.get(row[width])
            if summed is None:
                times[row[width]] = list(values)
            else:
                for j in range(count):
                    summed[j] += values[j]
            hash_of[key] = hashed
        known = self.known
        unknown = {hashed for key, hashed in hash_of.items() if key not in known}
        state = self._state_rows(sorted(unknown)) if unknown else {}
        if state is None:
            return None
        zeros = tuple(0.0 if kind == _F64 else 0 for kind in self.kinds)
        steps: list[tuple[tuple[Any, ...], int, tuple[Any, ...], tuple[Any, ...]]] = []
        updates: list[tuple[Any, ...]] = []
        finals: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        alive = self.sums.index(self.alive)
        for key, times in by_key.items():
            old = known[key] if key in known else state.get(key)
            running = old if old is not None else zeros
            for time in sorted(times):
                contribution = times[time]
                new = tuple(
                    _wrap(kind, value + change)
                    for kind, value, change in zip(self.kinds, running, contribution, strict=True)
                )
                steps.append((key, time, running, new))
                running = new
            hashed = hash_of[key]
            if old is not None:
                updates.append((hashed, *key, *old, -1))
            if running[alive] != 0:
                updates.append((hashed, *key, *running, 1))
                finals[key] = running
            else:
                finals[key] = None
        return RowSteps(steps, updates, finals)

    def commit_rows(self, planned: RowSteps, schema: dict[str, pl.DataType]) -> None:
        """Apply what ``plan_rows`` planned: retract the keys' old rows, insert the new."""
        self.spine.append_rows(planned.updates, schema)
        if len(self.known) + len(planned.finals) > KNOWN_KEYS:
            self.known.clear()
        self.known.update(planned.finals)

    def _state_rows(self, hashes: list[int]) -> dict[tuple[Any, ...], tuple[Any, ...]] | None:
        """The state row of each key with one of ``hashes`` (None if a key has not one)."""
        found = self.spine.lookup(hashes)
        if found is None:
            return {}
        width = len(self.keys)
        net: dict[tuple[Any, ...], int] = {}
        for row in _picked_rows(found, [*self.keys, *self.sums, DIFF]):
            net[row[:-1]] = net.get(row[:-1], 0) + row[-1]
        state: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for row, diff in net.items():
            if diff == 0:
                continue
            key = row[:width]
            if diff != 1 or key in state:  # NaN sums do not cancel in a dict: columnar path
                return None
            state[key] = row[width:]
        return state


class Threshold(Operator):
    """Rows with positive multiplicity: a count per distinct row."""

    name = "Threshold"

    def __init__(self, node: lir.Threshold, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        self.columns = [f"c{i}" for i in range(len(self.types))]
        self.state = [Accumulator(self.columns, ["_n"], "_n") for _ in range(workers)]

    def compute(self, lower: int, upper: int) -> Parts:
        parts = exchange(self.inputs[0].ok, self.columns, self.workers, self.meter)

        def body(worker: int, part: pl.DataFrame) -> pl.DataFrame:
            if part.height == 0:
                return self.empty
            counts = part.select(*self.columns, TIME, pl.col(DIFF).alias("_n"))
            steps = self.state[worker].step(counts)
            change = pl.max_horizontal(pl.col("new__n"), 0) - pl.max_horizontal(
                pl.col("prev__n"), 0
            )
            out = steps.select(*self.columns, TIME, change.alias(DIFF))
            return self.conform(out.filter(pl.col(DIFF) != 0))

        return self.per_worker(parts, body)

    def spines(self) -> list[list[Spine]]:
        return [[a.spine] for a in self.state]


# -- Reduce -----------------------------------------------------------------------------


class ReEvaluating(Operator):
    """An operator that re-evaluates the groups a step touches from its arranged input
    (BASIC and HIERARCHICAL reduces, top-k), time by time, or a step's many times at once.

    ``state`` holds per worker the input's and the output's spines; a subclass says
    which columns group (``_group_columns``), which the updates carry
    (``_delta_columns``), when a step's group's old result and its updates decide its
    new one (``_old_decides``, with the old result as input rows: ``_as_prior``) and how a
    group's rows evaluate (``_evaluate``, grouped by more columns too). One time is
    ``_recompute_at``, a step's many times ``_recompute_times``.
    """

    state: list

    def _group_columns(self) -> tuple[list[str], list[str]]:
        """The grouping columns in the input and in the output."""
        raise NotImplementedError

    def _delta_columns(self) -> list[str]:
        raise NotImplementedError

    def _old_decides(self, delta: pl.DataFrame) -> bool:
        """Whether each group's old result and ``delta`` decide its new result (no lookup
        of its whole input: min/max or a top-k without offset, and only inserts)."""
        raise NotImplementedError

    def _as_prior(self, old: pl.DataFrame) -> pl.DataFrame:
        """Old results as input rows."""
        raise NotImplementedError

    def _evaluate(self, rows: pl.DataFrame, also_by: Sequence[str]) -> pl.DataFrame:
        raise NotImplementedError

    def _recompute_at(self, worker: int, at: int, delta: pl.DataFrame) -> pl.DataFrame:
        """The output's change at ``at``, the one time of ``delta``."""
        inputs, outputs = self.state[worker]
        keys, output_keys = self._group_columns()
        first = not inputs.holds
        inputs.insert(delta)
        touched = delta.select(keys).unique()
        hashes = _touched_hashes(delta, touched, keys)
        renamed = touched.rename(dict(zip(keys, output_keys, strict=True)))
        old = _current(outputs.lookup(hashes), renamed, output_keys)
        rows: pl.DataFrame | None
        if first:  # hydration: the delta is the whole input
            rows = _positive(delta.drop(TIME))
        elif self._old_decides(delta):
            # Inserts only move a min/max toward them, or push rows out of a top-k: the
            # old result and the new rows decide, not the whole group (equal rows may
            # come apart: readers sum them).
            inserted = delta.drop(TIME)
            prior = [self._as_prior(old)] if old is not None else []
            rows = concat([*prior, inserted], inserted.clear())
        else:
            rows = _current(inputs.lookup(hashes), touched, keys)
        parts = []
        if rows is not None and rows.height:
            new = self._evaluate(rows, ()).with_columns(pl.lit(at, pl.UInt64).alias(TIME))
            parts.append(new)
        if old is not None:
            parts.append(old.with_columns(-pl.col(DIFF), pl.lit(at, pl.UInt64).alias(TIME)))
        change = consolidate(
            concat([self.conform(p.select(self.empty.columns)) for p in parts], self.empty)
        )
        outputs.insert(change.with_columns(key_hash(change, output_keys)))
        return change

    def _recompute(self, worker: int, part: pl.DataFrame) -> pl.DataFrame:
        if part.height == 0:
            return self.empty
        times = part[TIME].unique().sort()
        if times.len() == 1:
            return self._recompute_at(worker, times[0], part)
        changes = []
        if not self.state[worker][0].holds:
            # Hydration: the first time's delta is the whole input, nothing to look up.
            first = times[0]
            changes.append(self._recompute_at(worker, first, part.filter(pl.col(TIME) == first)))
            part, times = part.filter(pl.col(TIME) != first), times.slice(1)
        changes.append(self._recompute_times(worker, part, times))
        return concat(changes, self.empty)

    def _recompute_times(self, worker: int, part: pl.DataFrame, times: pl.Series) -> pl.DataFrame:
        """The output's changes at each of ``part``'s ``times`` (sorted), with a fixed number
        of dataframe operations however many times there are (a catch-up after a restart
        brings hundreds): every touched group's rows at each time it was touched, the rows
        it had before plus its updates up to then, evaluated per group and time at once; at
        each such time the group's result then retracts its result at the group's previous
        time. What that expands to is bounded (``EXPANSION_LIMIT`` rows): past it the
        times are taken in consecutive runs, each run's state stored before the next
        looks it up, or one at a time where a run would hold only a time or two (a
        large group touched at every time)."""
        if times.len() == 1:
            return self._recompute_at(worker, times[0], part)
        inputs, outputs = self.state[worker]
        keys, output_keys = self._group_columns()
        touched = part.select(keys).unique()
        hashes = _touched_hashes(part, touched, keys)
        old = _current(
            outputs.lookup(hashes),
            touched.rename(dict(zip(keys, output_keys, strict=True))),
            output_keys,
        )
        base: pl.DataFrame | None
        if self._old_decides(part):
            base = self._as_prior(old) if old is not None else None
        else:
            base = _current(inputs.lookup(hashes), touched, keys)
        carried = self._delta_columns()
        delta = part.select(*carried, TIME, DIFF)
        pairs = delta.select(*keys, pl.col(TIME).alias(_AT)).unique()
        prior = None
        if base is not None:  # keys in the delta's dtypes, to join on (an old result's conform)
            prior = base.select(
                *(pl.col(c).cast(delta.schema[c]) if c in keys else pl.col(c) for c in carried),
                DIFF,
            )
        expansion = _expansion(prior, delta, pairs, keys)
        if expansion > EXPANSION_LIMIT:
            pieces = -(-expansion // EXPANSION_LIMIT)
            if 2 * pieces > times.len():  # a few times at most per piece: one at a time
                changes = [self._recompute_at(worker, at, d) for at, d in _by_time(part)]
                return concat(changes, self.empty)
            # Consecutive runs of times, each stored before the next looks its keys up.
            bounds = [times[(i * times.len()) // pieces] for i in range(pieces)] + [None]
            changes = []
            for lower, upper in itertools.pairwise(bounds):
                within = times >= lower if upper is None else (times >= lower) & (times < upper)
                run = part.filter(pl.col(TIME) >= lower)
                if upper is not None:
                    run = run.filter(pl.col(TIME) < upper)
                changes.append(self._recompute_times(worker, run, times.filter(within)))
            return concat(changes, self.empty)
        # Every touched (group, time) pair with the group's rows then.
        expanded = [_join_keys(delta, pairs, keys).filter(pl.col(TIME) <= pl.col(_AT)).drop(TIME)]
        if prior is not None and prior.height:
            expanded.append(_join_keys(prior, pairs, keys))
        rows = _positive(pl.concat(expanded, how="vertical_relaxed"))
        columns = self.empty.columns
        changes = []
        if rows.height:
            new = self._evaluate(rows, (_AT,))
            changes.append(new.with_columns(pl.col(_AT).alias(TIME)).select(columns))
            # Each pair's result is retracted at the group's next touched time.
            following = pairs.sort(_AT).with_columns(
                pl.col(_AT).shift(-1).over(keys).alias(_NEXT)
                if keys
                else pl.col(_AT).shift(-1).alias(_NEXT)
            )
            following = following.filter(pl.col(_NEXT).is_not_null()).rename(
                dict(zip(keys, output_keys, strict=True))
            )
            retracted = new.join(following, on=[*output_keys, _AT], nulls_equal=True)
            changes.append(
                retracted.with_columns(pl.col(_NEXT).alias(TIME), -pl.col(DIFF)).select(columns)
            )
        if old is not None and old.height:
            # What a group had before the part is retracted at its first touched time.
            firsts = (
                pairs.group_by(keys).agg(pl.col(_AT).min())
                if keys
                else pairs.select(pl.col(_AT).min())
            ).rename(dict(zip(keys, output_keys, strict=True)))
            before = _join_keys(old, firsts, output_keys)
            changes.append(
                before.with_columns(pl.col(_AT).alias(TIME), -pl.col(DIFF)).select(columns)
            )
        change = consolidate(concat([self.conform(c) for c in changes], self.empty))
        inputs.insert(part)
        outputs.insert(change.with_columns(key_hash(change, output_keys)))
        return change


class Reduce(ReEvaluating):
    """Group by key expressions; output the key columns then one column per aggregate."""

    def __init__(self, node: lir.Reduce, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        self.name = f"Reduce::{node.kind.value}"
        self.node = node
        self.input_types = source.types
        self.keys = [f"k{i}" for i in range(len(node.group_key))]
        self.args = [f"a{i}" for i in range(len(node.aggregates))]
        # The aggregates with an argument (count(*) has none): evaluated as ``a<i>``, their
        # further arguments and ORDER BY keys (string_agg's) as ``a<i>_<j>``.
        with_args = [
            (scalar, n if j == 0 else f"{n}_{j}")
            for a, n in zip(node.aggregates, self.args, strict=True)
            for j, scalar in enumerate(a.scalars)
        ]
        self.arg_exprs = [e for e, _ in with_args]
        self.arg_names = [n for _, n in with_args]
        self.arg_types = [
            scalar_type(a.expr, source.types) if a.expr is not None else "int8"
            for a in node.aggregates
        ]
        for e in [*node.group_key, *self.arg_exprs]:
            expr.compile_scalar(e, source.types)  # refuse what cannot be evaluated, at render
        for a in node.aggregates:
            if a.func not in mir.AGGREGATES:
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED, f"aggregate {a.func} is not supported"
                )
        self.result_types = [a.result_type(tuple(source.types)) for a in node.aggregates]
        self.accumulable = node.kind in (lir.ReduceKind.ACCUMULABLE, lir.ReduceKind.DISTINCT)
        # Exact decimal sums are sums of the decimals' 128-bit integers: integer sums
        # wrap around, so a total that fits is exact even when a partial sum does not
        # (polars' decimal sums fail then, or wrap silently when grouped). A float
        # shadow of each sum says when the total itself left numeric's range.
        self.shadowed = [
            i
            for i, a in enumerate(node.aggregates)
            if a.func in ("sum", "avg") and self.result_types[i] == "numeric" and not a.distinct
        ]
        if self.accumulable:
            self.sums = ["_n"] + [c for i in range(len(self.args)) for c in (f"s{i}", f"n{i}")]
            self.sums += [f"f{i}" for i in self.shadowed]
            self.state: list = [Accumulator(self.keys, self.sums, "_n") for _ in range(workers)]
        else:
            self.state = [(Spine(self.keys), Spine(self.keys)) for _ in range(workers)]
        self._plan_row_path(source.types)

    def _plan_row_path(self, input_types: Sequence[str]) -> None:
        """What ``_run_rows`` needs, or ``row_exprs`` None where it does not apply: keys and
        arguments Python evaluates (``rows.compile_row``) into dtypes it round-trips,
        sums whose Python arithmetic is the columnar path's (floats only of float
        arguments: a numeric's float is rounded once in Python, maybe twice in polars)."""
        self.row_exprs: list[rows_path.RowScalar] | None = None
        # ``_row_values`` per dtypes of the sums.
        self.row_values: dict[
            tuple[pl.DataType, ...], list[Callable[[tuple[Any, ...]], Any]] | None
        ] = {}
        if not self.accumulable:
            return
        key_types = [scalar_type(k, tuple(input_types)) for k in self.node.group_key]
        self.key_schema = {k: polars_dtype(t) for k, t in zip(self.keys, key_types, strict=True)}
        if not all(row_safe(d) for d in self.key_schema.values()):
            return
        self.key_hashes = KeyHashes(self.key_schema)
        # Per aggregate with an argument: the position of its value among the args.
        self.arg_positions: dict[int, int] = {}
        self.sum_kinds: dict[int, str] = {}
        exprs = list(self.node.group_key)
        self.sum_schema: dict[str, pl.DataType] = {"_n": pl.Int64()}
        for i, agg in enumerate(self.node.aggregates):
            kind = _KINDS.get(self._accumulator_dtype(i))
            if kind is None or len(agg.scalars) > 1:
                return
            self.sum_schema |= {f"s{i}": self._accumulator_dtype(i), f"n{i}": pl.Int64()}
            if agg.expr is None:
                continue
            argument = scalar_type(agg.expr, tuple(input_types))
            if kind == _F64 and argument not in ("float4", "float8"):
                return
            if kind == _I64 and agg.func != "count" and argument not in ("int2", "int4", "int8"):
                return
            if i in self.shadowed and argument not in ("int2", "int4", "int8", "numeric"):
                return
            self.arg_positions[i] = len(exprs) - len(self.keys)
            self.sum_kinds[i] = kind
            exprs.append(agg.expr)
        self.sum_schema |= {f"f{i}": pl.Float64() for i in self.shadowed}
        self.row_exprs = rows_path.compile_all(exprs, input_types)

    def run(self, lower: int, upper: int) -> None:
        total = sum(p.height for p in self.inputs[0].ok)
        if 0 < total <= SMALL_DELTA and self.row_exprs is not None and self._run_rows():
            return
        errors = [self.inputs[0].err]
        # Per worker, in worker order (an empty batch stays: the exchange counts who sent what).
        keyed = []
        meter = self.meter
        small = self.accumulable and total <= SMALL_DELTA
        for worker, part in enumerate(self.inputs[0].ok):
            if part.height == 0:
                keyed.append(part)
                continue
            started = clock.perf_counter_ns() if meter is not None else 0
            valued, err = evaluate(
                part,
                [*self.node.group_key, *self.arg_exprs],
                self.input_types,
                [*self.keys, *self.arg_names],
            )
            errors.append(err)
            if self.accumulable:
                # Combine before the exchange: a worker sends one row per key and time
                # (a small delta's rows are combined in Python, by the row path).
                keyed.append(self._contributions(valued, combine=not small))
            else:
                keyed.append(valued.select(*self.keys, *self.arg_names, TIME, DIFF))
            if meter is not None:
                meter.ns[worker] += clock.perf_counter_ns() - started
        self.err = concat(errors, empty_errors())
        present = [k for k in keyed if k.height]
        if not present:
            self.ok = [self.empty] * self.workers
            return
        if small:
            rows = self._row_path(keyed)
            if rows is not None:
                self.ok = rows
                return
            keyed = [sum_by(k, self.keys, self.sums) if k.height else k for k in keyed]
            present = [k for k in keyed if k.height]
        empty = present[0].clear()
        keyed = [k if k.height else empty for k in keyed]
        parts = exchange(keyed, self.keys, self.workers, meter)
        body = self._accumulate if self.accumulable else self._recompute
        self.ok = self.per_worker(parts, body)

    # Accumulable and Distinct: running sums per key.

    def _contributions(self, part: pl.DataFrame, *, combine: bool = True) -> pl.DataFrame:
        """Per key and time: the row count, and each aggregate's sum and non-NULL count
        (``combine=False``: per row, not yet summed per key and time)."""
        columns = [pl.col(DIFF).alias("_n")]
        diffs = part[DIFF]
        # Inserts only (a hydration): the values are their own contributions, with no
        # multiplication by the diff (costly for exact decimals).
        inserts = diffs.min() == 1 and diffs.max() == 1
        for i, (agg, name) in enumerate(zip(self.node.aggregates, self.args, strict=True)):
            if agg.expr is None:
                columns += [pl.lit(0, pl.Int64).alias(f"s{i}"), pl.col(DIFF).alias(f"n{i}")]
                continue
            present = pl.col(name).is_not_null()
            kind = self._accumulator_dtype(i)
            summand = pl.col(name).cast(kind)
            if i in self.shadowed:
                summand = pl.col(name).cast(NUMERIC).to_physical()
            if agg.func == "count":  # only the non-NULL count: the values may be any type
                value = pl.lit(0, pl.Int64)
            elif inserts:
                value = summand.fill_null(0)
            else:
                value = pl.when(present).then(summand * pl.col(DIFF)).otherwise(0)
            columns += [
                value.cast(kind).alias(f"s{i}"),
                (present.cast(pl.Int64) * pl.col(DIFF)).alias(f"n{i}"),
            ]
            if i in self.shadowed:  # from the integer, not the product that may wrap around
                shadow = summand.cast(pl.Float64)
                shadow = shadow if inserts else shadow * pl.col(DIFF)
                columns.append(shadow.fill_null(0).alias(f"f{i}"))
        selected = [pl.col(k) for k in self.keys] + [pl.col(TIME), *columns]
        if not combine:
            return part.select(selected)
        return sum_by(part, self.keys, self.sums, selected)

    def _row_path(self, keyed: list[pl.DataFrame]) -> Parts | None:
        """A small delta's changes, from its per-row contributions ``keyed`` (per worker).

        The same as the columnar path (``exchange``, ``Accumulator.step``,
        ``_accumulate``) computes, by Python over the rows; None (nothing changed)
        where values would not round-trip through Python alike or the state is
        not one row per key.
        """
        present = [k for k in keyed if k.height]
        whole = present[0] if len(present) == 1 else pl.concat(present, how="vertical_relaxed")
        schema = whole.schema
        if not all(row_safe(schema[k]) for k in self.keys):
            return None
        kinds = tuple(_KINDS.get(schema[s]) for s in self.sums)
        if None in kinds or not all(row_safe(d, floats=True) for d in self.empty.dtypes):
            return None
        owners = key_hash(whole, self.keys).to_list() if self.keys else [0] * whole.height
        if self.keys:
            hashes, rows = owners, whole.select(*self.keys, TIME, *self.sums).rows()
        else:
            hashes = [_unit_hash()] * whole.height
            rows = [(0, *row) for row in whole.select(TIME, *self.sums).rows()]
        return self._row_steps(schema, rows, hashes, owners, [k.height for k in keyed])

    def _row_steps(
        self,
        schema: dict[str, pl.DataType],
        rows: list[tuple[Any, ...]],
        hashes: list[int],
        owners: list[int],
        heights: list[int],
    ) -> Parts | None:
        """The row path from the delta's contributions ``rows`` ``(keys..., time, sums...)``
        (of dtypes ``schema``), their keys' ``hashes``, ``owners`` (whose hash routes a
        row) and how many rows each worker sent (``heights``)."""
        kinds = tuple(_KINDS.get(schema[s]) for s in self.sums)
        routed: list[list[int]] = [[] for _ in range(self.workers)]
        for position, owner in enumerate(owners):
            routed[owner % self.workers].append(position)
        if self.meter is not None:
            self._count_rows(heights, owners)
        planned: list[RowSteps | None] = []
        for worker, positions in enumerate(routed):
            accumulator = self.state[worker]
            accumulator.kinds = kinds  # type: ignore[assignment]
            if not positions:
                planned.append(None)
                continue
            started = clock.perf_counter_ns()
            plan = accumulator.plan_rows(
                [rows[p] for p in positions], [hashes[p] for p in positions]
            )
            if plan is None:
                return None
            _check_shadows(plan, [self.sums.index(f"f{i}") for i in self.shadowed])
            planned.append(plan)
            if self.meter is not None:
                self.meter.ns[worker] += clock.perf_counter_ns() - started
        state_schema = {HASH: pl.UInt64(), **{k: schema[k] for k in self.keys}}
        if not self.keys:
            state_schema[UNIT] = pl.Int8()
        state_schema |= {s: schema[s] for s in self.sums}
        state_schema[DIFF] = pl.Int64()
        out = []
        for worker, plan in enumerate(planned):
            if plan is None:
                out.append(self.empty)
                continue
            started = clock.perf_counter_ns()
            self.state[worker].commit_rows(plan, state_schema)
            out.append(self._changes(plan, schema))
            if self.meter is not None:
                self.meter.ns[worker] += clock.perf_counter_ns() - started
        return out

    def _count_rows(self, heights: list[int], owners: list[int]) -> None:
        """What each worker's rows sent each worker (an exchange's count, while logging)."""
        assert self.meter is not None
        offset = 0
        for source, height in enumerate(heights):
            sent: dict[int, int] = {}
            for owner in owners[offset : offset + height]:
                sent[owner % self.workers] = sent.get(owner % self.workers, 0) + 1
            for target, records in sent.items():
                self.meter.message(0, source, target, records)
            offset += height

    def _run_rows(self) -> bool:
        """The whole of a small delta in Python, its keys and arguments evaluated by
        ``rows.compile_row`` (no polars query for them): False if a row declines (an
        error row: the columnar path evaluates the batch) or the state is not one row
        per key."""
        compiled = self.row_exprs
        assert compiled is not None
        width = len(self.keys)
        parts = self.inputs[0].ok
        heights = [p.height for p in parts]
        try:
            contributions = [
                self._row_contribution(row, compiled, width)
                for part in parts
                if part.height
                for row in part.rows()
            ]
        except rows_path.Declined:
            return False
        if self.keys:
            owners = self.key_hashes.of([row[:width] for row in contributions])
            hashes = owners
        else:
            contributions = [(0, *row) for row in contributions]
            owners = [0] * len(contributions)
            hashes = [_unit_hash()] * len(contributions)
        schema = dict(self.key_schema) | {TIME: pl.UInt64()} | self.sum_schema
        out = self._row_steps(schema, contributions, hashes, owners, heights)
        if out is None:
            return False
        self.err = self.inputs[0].err
        self.ok = out
        return True

    def _row_contribution(
        self, row: tuple[Any, ...], compiled: list[rows_path.RowScalar], width: int
    ) -> tuple[Any, ...]:
        """``_contributions`` of one input row: its keys, its time, then each sum's part."""
        values = [c(row) for c in compiled]
        time, diff = row[-2], row[-1]
        sums: list[Any] = [diff]
        shadows = []
        for i, agg in enumerate(self.node.aggregates):
            if agg.expr is None:
                sums += [0, diff]
                continue
            value = values[width + self.arg_positions[i]]
            present = value is not None
            kind = self.sum_kinds[i]
            if agg.func == "count":
                summand: Any = 0
            elif i in self.shadowed:  # the numeric's 128-bit integer, and its float
                if not present:
                    whole = 0
                elif isinstance(value, int):
                    whole = value * 10**sqltypes.NUMERIC_SCALE
                else:
                    whole = rows_path.units(value)
                summand = _wrap(_I128, whole * diff)
                shadows.append(float(whole) * diff if present else 0.0)
            elif kind == _F64:
                summand = float(value) * diff if present else 0.0
            else:
                summand = _wrap(_I64, value * diff) if present else 0
            sums += [summand, diff if present else 0]
        return (*values[:width], time, *sums, *shadows)

    def _changes(self, plan: RowSteps, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        """The output changes of ``plan``'s steps: each changed key's old row out, new row in.

        The aggregates' values come from the accumulators in Python where
        ``_row_values`` knows the columnar path's arithmetic exactly, else by
        ``_values`` (one polars select over the steps).
        """
        values = self._row_values(schema)
        if values is None:
            return self._changes_by_polars(plan, schema)
        alive = self.sums.index("_n")
        steps = []
        for key, time, prev, new in plan.steps:
            alive_before, alive_after = prev[alive] > 0, new[alive] > 0
            try:
                before = tuple(value(prev) for value in values) if alive_before else ()
                after = tuple(value(new) for value in values) if alive_after else ()
            except _Inexact:
                return self._changes_by_polars(plan, schema)
            shown = key[: len(self.keys)]
            steps.append((shown, time, alive_before, alive_after, before, after))
        return self._emit(steps)

    def _emit(
        self, steps: Sequence[tuple[tuple[Any, ...], int, bool, bool, Sequence[Any], Sequence[Any]]]
    ) -> pl.DataFrame:
        """The output changes of ``(key, time, alive before, alive after, before, after)``
        steps: each changed key's old row out, new row in."""
        changes: list[tuple[Any, ...]] = []
        for key, time, alive_before, alive_after, before, after in steps:
            if alive_before and alive_after and before == after:
                continue  # the same row: nothing to retract and insert
            if alive_before:
                changes.append((*key, *before, time, -1))
            if alive_after:
                changes.append((*key, *after, time, 1))
        if not changes:
            return self.empty
        return frame_of_rows(changes, dict(self.empty.schema))

    def _row_values(
        self, schema: dict[str, pl.DataType]
    ) -> list[Callable[[tuple[Any, ...]], Any]] | None:
        """Per aggregate, its output value from a key's sums, as ``_values`` computes it
        in polars; None if one aggregate's arithmetic is not one of these."""
        kinds = tuple(schema[f"s{i}"] for i in range(len(self.node.aggregates)))
        if kinds not in self.row_values:
            self.row_values[kinds] = self._plan_row_values(kinds)
        return self.row_values[kinds]

    def _plan_row_values(
        self, kinds: tuple[pl.DataType, ...]
    ) -> list[Callable[[tuple[Any, ...]], Any]] | None:
        """``_row_values`` for sums of dtypes ``kinds``."""
        position = {s: i for i, s in enumerate(self.sums)}
        width = len(self.keys)
        outputs = self.shape[1][width:]
        values: list[Callable[[tuple[Any, ...]], Any]] = []
        for i, agg in enumerate(self.node.aggregates):
            total, count = position[f"s{i}"], position[f"n{i}"]
            kind, output = kinds[i], outputs[i]
            if agg.func == "count":
                values.append(itemgetter(count))
            elif i in self.shadowed and agg.func in ("sum", "avg"):
                values.append(partial(_exact_value, total, count, agg.func == "avg"))
            elif kind == output == pl.Int64 and agg.func == "sum":
                values.append(partial(_plain_value, total, count, False))
            elif kind == output == pl.Float64 and agg.func in ("sum", "avg"):
                values.append(partial(_plain_value, total, count, agg.func == "avg"))
            else:
                return None
        return values

    def _changes_by_polars(self, plan: RowSteps, schema: dict[str, pl.DataType]) -> pl.DataFrame:
        """``_changes`` with the values computed by ``_values`` in one polars select."""
        width = len(self.keys)
        columns: dict[str, list[Any]] = {k: [] for k in self.keys}
        columns[TIME] = []
        for s in self.sums:
            columns[f"prev_{s}"] = []
            columns[f"new_{s}"] = []
        for key, time, prev, new in plan.steps:
            for k, value in zip(self.keys, key, strict=False):
                columns[k].append(value)
            columns[TIME].append(time)
            for s, before, after in zip(self.sums, prev, new, strict=True):
                columns[f"prev_{s}"].append(before)
                columns[f"new_{s}"].append(after)
        step_schema = {k: schema[k] for k in self.keys} | {TIME: pl.UInt64()}
        for s in self.sums:
            step_schema[f"prev_{s}"] = step_schema[f"new_{s}"] = schema[s]
        steps = pl.DataFrame(columns, schema=step_schema)
        values = steps.select(
            *[pl.col(k) for k in self.keys],
            pl.col(TIME),
            pl.col("prev__n") > 0,
            pl.col("new__n") > 0,
            *self._values("prev_"),
            *[v.alias(f"_new{i}") for i, v in enumerate(self._values("new_"))],
        ).rows()
        aggregates = len(self.node.aggregates)
        return self._emit(
            [
                (
                    row[:width],
                    row[width],
                    row[width + 1],
                    row[width + 2],
                    row[width + 3 : width + 3 + aggregates],
                    row[width + 3 + aggregates :],
                )
                for row in values
            ]
        )

    def _accumulator_dtype(self, index: int) -> pl.DataType:
        """What a running sum is kept in: a float, a decimal's 128-bit integer, else Int64."""
        if self.node.aggregates[index].func == "count":
            return pl.Int64()
        if index in self.shadowed:
            return pl.Int128()
        result = polars_dtype(self.result_types[index])
        return result if result in (pl.Float64, NUMERIC) else pl.Int64()

    def _accumulate(self, worker: int, part: pl.DataFrame) -> pl.DataFrame:
        """Retract each changed key's old output row, insert its new one.

        A key whose row did not change emits nothing: comparing the two
        rows costs less than consolidating their retraction and insertion.
        """
        if part.height == 0:
            return self.empty
        # On one worker ``_contributions`` already summed the batch per key and time.
        steps = self.state[worker].step(part, summed=self.workers == 1)
        _check_sums(steps, [f"new_f{i}" for i in self.shadowed])
        before, after = self._values("prev_"), self._values("new_")
        alive_before, alive_after = pl.col("prev__n") > 0, pl.col("new__n") > 0
        equal = [b.eq_missing(a) for b, a in zip(before, after, strict=True)]
        same = alive_before & alive_after & pl.all_horizontal([pl.lit(True), *equal])
        changed = steps.filter(~same)
        keys = [pl.col(k).alias(f"c{i}") for i, k in enumerate(self.keys)]
        retracted = changed.filter(alive_before).select(
            *keys, *before, TIME, pl.lit(-1, pl.Int64).alias(DIFF)
        )
        inserted = changed.filter(alive_after).select(
            *keys, *after, TIME, pl.lit(1, pl.Int64).alias(DIFF)
        )
        return self.conform(pl.concat([retracted, inserted], how="vertical_relaxed"))

    def _values(self, prefix: str) -> list[pl.Expr]:
        """The aggregates' output columns from the accumulators named ``prefix*``."""
        outputs = []
        width = len(self.keys)
        for i, agg in enumerate(self.node.aggregates):
            total, count = pl.col(f"{prefix}s{i}"), pl.col(f"{prefix}n{i}")
            if i in self.shadowed:
                total = _from_integer(total)
            if agg.func == "count":
                value = count
            elif agg.func == "sum":
                value = pl.when(count > 0).then(total)
            else:
                numeric = self.result_types[i] == "numeric"
                value = pl.when(count > 0).then(_mean(total, count, numeric=numeric))
            outputs.append(value.alias(f"c{width + i}"))
        return outputs

    # Hierarchical and Basic: re-evaluate the changed keys from the arranged input
    # (``ReEvaluating``: a step of many times at once).

    def _group_columns(self) -> tuple[list[str], list[str]]:
        return self.keys, [f"c{i}" for i in range(len(self.keys))]

    def _delta_columns(self) -> list[str]:
        return [*self.keys, *self.arg_names]

    def _old_decides(self, delta: pl.DataFrame) -> bool:
        return self.node.kind == lir.ReduceKind.HIERARCHICAL and _only_inserts(delta)

    def _as_prior(self, old: pl.DataFrame) -> pl.DataFrame:
        return self._as_input(old)

    def _evaluate(self, rows: pl.DataFrame, also_by: Sequence[str]) -> pl.DataFrame:
        return self._aggregate(rows, also_by=also_by)

    def _as_input(self, old: pl.DataFrame | None) -> pl.DataFrame:
        """Current min/max rows as input rows (each aggregate's value in its argument column)."""
        if old is None:
            return pl.DataFrame()
        width = len(self.keys)
        columns = [pl.col(f"c{i}").alias(k) for i, k in enumerate(self.keys)]
        columns += [pl.col(f"c{width + i}").alias(a) for i, a in enumerate(self.args)]
        return old.select(*columns, DIFF)

    def _aggregate(self, rows: pl.DataFrame, also_by: Sequence[str] = ()) -> pl.DataFrame:
        """Each group's output row (``also_by``: more columns to group by, kept in the output)."""
        weight = pl.col(DIFF)
        positive = weight > 0
        aggs = [weight.sum().alias("_n")]
        width = len(self.keys)
        for i, (agg, name) in enumerate(zip(self.node.aggregates, self.args, strict=True)):
            if agg.func in ("string_agg", "array_agg", "list_agg"):
                extra = [pl.col(f"{name}_{j}") for j in range(1, len(agg.scalars))]
                collect = _string_agg if agg.func == "string_agg" else _collect
                joined = collect(agg, pl.col(name), extra, weight, positive)
                aggs.append(joined.alias(f"c{width + i}"))
                continue
            if self.arg_types[i] == "interval" and agg.func in ("sum", "avg", "min", "max"):
                interval = _interval_aggregate(agg, pl.col(name), weight, positive)
                aggs.append(interval.alias(f"c{width + i}"))
                continue
            if self.arg_types[i] == "interval" and agg.distinct:  # count(DISTINCT): by span
                spans = _aggregate_expr(agg, intervals.span_value(pl.col(name)), weight, positive)
                aggs.append(spans.alias(f"c{width + i}"))
                continue
            value = pl.col(name) if agg.expr is not None else None
            if i in self.shadowed:  # the integer sum, the count and the float shadow
                present = pl.col(name).is_not_null()
                integer = pl.col(name).cast(NUMERIC).to_physical()
                aggs += [
                    (integer * weight).filter(present).sum().alias(f"c{width + i}"),
                    weight.filter(present).sum().alias(f"_c{i}"),
                    (integer.cast(pl.Float64) * weight).filter(present).sum().alias(f"_f{i}"),
                ]
                continue
            if value is not None and agg.func in ("sum", "avg"):
                value = value.cast(polars_dtype(self.result_types[i]))  # sum(int8) is numeric
            aggs.append(
                _aggregate_expr(
                    agg, value, weight, positive, numeric=self.result_types[i] == "numeric"
                ).alias(f"c{width + i}")
            )
        by = [*self.keys, *also_by]
        grouped = rows.group_by(by).agg(aggs) if by else rows.select(aggs)
        _check_sums(grouped, [f"_f{i}" for i in self.shadowed])
        exact = []
        for i in self.shadowed:
            total, count = _from_integer(pl.col(f"c{width + i}")), pl.col(f"_c{i}")
            if self.node.aggregates[i].func == "avg":
                total = _mean(total, count, numeric=True)
            exact.append(pl.when(count > 0).then(total).alias(f"c{width + i}"))
        grouped = grouped.with_columns(exact).drop(
            [f"_{kind}{i}" for i in self.shadowed for kind in "cf"]
        )
        grouped = interval_averages(
            grouped,
            [
                f"c{width + i}"
                for i, agg in enumerate(self.node.aggregates)
                if agg.func == "avg" and self.arg_types[i] == "interval"
            ],
        )
        grouped = grouped.filter(pl.col("_n") > 0).drop("_n")
        renamed = grouped.rename({k: f"c{i}" for i, k in enumerate(self.keys)})
        return renamed.with_columns(pl.lit(1, pl.Int64).alias(DIFF))

    def spines(self) -> list[list[Spine]]:
        if self.accumulable:
            return [[a.spine] for a in self.state]
        return [list(pair) for pair in self.state]


def _spread(func: str, value: pl.Expr, weight: pl.Expr, kept: pl.Expr) -> pl.Expr:
    """Variance or standard deviation of the kept values, each counted ``weight`` times.

    Two passes over the group (the mean, then squared deviations from it), as
    PostgreSQL's result is exact, not a difference of large sums.
    """
    x = value.cast(pl.Float64).filter(kept)
    w = weight.cast(pl.Float64).filter(kept)
    n = w.sum()
    mean = (x * w).sum() / n
    squares = (w * (x - mean) ** 2).sum()
    population = func.endswith("_pop")
    variance = squares / (n if population else n - 1)
    result = variance.sqrt() if func.startswith("stddev") else variance
    return pl.when(n > (0 if population else 1)).then(result)


def _string_agg(
    agg: mir.Aggregate, value: pl.Expr, extra: list[pl.Expr], weight: pl.Expr, positive: pl.Expr
) -> pl.Expr:
    """The group's non-NULL values, each after its delimiter (the first without), in order.

    Without ORDER BY the values are in ascending order (Materialize's rule,
    as the input has none); each value counts as often as its multiplicity.
    """
    delimiter, keys = extra[0], extra[1:]
    kept = positive & value.is_not_null()
    fields = [value.alias("v"), delimiter.fill_null("").alias("d")]
    fields += [k.alias(f"k{j}") for j, k in enumerate(keys)]
    rows = pl.struct(fields).filter(kept)
    if agg.distinct:
        rows = rows.unique(maintain_order=True)
    else:
        rows = rows.repeat_by(weight.filter(kept)).explode()
    order = [rows.struct.field(f"k{j}") for j in range(len(keys))]
    descending = [k.desc for k in agg.order_by]
    nulls_last = [k.nulls_last for k in agg.order_by]
    order += [rows.struct.field("v"), rows.struct.field("d")]
    descending += [False, False]
    nulls_last += [True, True]
    ordered = rows.sort_by(order, descending=descending, nulls_last=nulls_last)
    values, delimiters = ordered.struct.field("v"), ordered.struct.field("d")
    rest = pl.concat_str([delimiters, values]).slice(1).str.join("")
    return pl.concat_str([values.first(), rest])


def _collect(
    agg: mir.Aggregate, value: pl.Expr, extra: list[pl.Expr], weight: pl.Expr, positive: pl.Expr
) -> pl.Expr:
    """array_agg/list_agg: the values of the group's kept rows (NULLs too), in order.

    Without ORDER BY the values are in ascending order (as string_agg's); each
    value counts as often as its multiplicity. No kept row: NULL.
    """
    condition, keys = extra[0], extra[1:]
    kept = positive & condition.fill_null(False)
    rows = pl.struct([value.alias("v"), *(k.alias(f"k{j}") for j, k in enumerate(keys))])
    rows = rows.filter(kept)
    if agg.distinct:
        rows = rows.unique(maintain_order=True)
    else:
        rows = rows.repeat_by(weight.filter(kept)).explode()
    order = [rows.struct.field(f"k{j}") for j in range(len(keys))] + [rows.struct.field("v")]
    descending = [k.desc for k in agg.order_by] + [False]
    nulls_last = [k.nulls_last for k in agg.order_by] + [True]
    ordered = rows.sort_by(order, descending=descending, nulls_last=nulls_last)
    return pl.when(kept.any()).then(ordered.struct.field("v").implode())


def _aggregate_expr(
    agg: mir.Aggregate,
    value: pl.Expr | None,
    weight: pl.Expr,
    positive: pl.Expr,
    *,
    numeric: bool = False,
) -> pl.Expr:
    """One aggregate over a group's consolidated rows (``weight`` = multiplicity)."""
    if value is None:
        return weight.sum()
    present = value.is_not_null()
    if agg.distinct:
        distinct = value.filter(positive & present).unique()
        if agg.func == "count":
            return distinct.len().cast(pl.Int64)
        if agg.func == "sum":
            return pl.when(distinct.len() > 0).then(distinct.sum())
        if agg.func == "avg":
            return pl.when(distinct.len() > 0).then(
                _mean(distinct.sum(), distinct.len(), numeric=numeric)
            )
    if agg.func == "count":
        return weight.filter(present).sum()
    if agg.func in mir.SPREAD_AGGREGATES:
        spread = _spread(agg.func, value, weight, present & positive)
        # Computed in float8; a numeric result keeps the float's 15 significant digits.
        return expr.float_result(spread, "numeric") if numeric else spread
    if agg.func == "min":
        return value.filter(positive).min()
    if agg.func == "max":
        return value.filter(positive).max()
    count = weight.filter(present).sum()
    total = (value * weight).filter(present).sum()
    if agg.func == "sum":
        return pl.when(count > 0).then(total)
    return pl.when(count > 0).then(_mean(total, count, numeric=numeric))


def _from_integer(total: pl.Expr) -> pl.Expr:
    """The numeric whose 128-bit integer is ``total`` (a sum of decimals' integers)."""
    return (total.cast(pl.Decimal(38, 0)) * _LAST_DIGIT).cast(NUMERIC)


_LAST_DIGIT = pl.lit(Decimal(1).scaleb(-sqltypes.NUMERIC_SCALE), NUMERIC)


# 10^38: numeric's range (10^22) in units of its last digit, less a margin for float error.
_SHADOW_LIMIT = float(sqltypes.NUMERIC_LIMIT.scaleb(sqltypes.NUMERIC_SCALE)) * (1 - 1e-9)


def _exact_value(total: int, count: int, average: bool, sums: tuple[Any, ...]) -> Decimal | None:
    """An exact sum (or avg) from its 128-bit integer: ``_from_integer`` (and ``_mean``,
    whose decimal division rounds half to even at numeric's scale) in Python."""
    n = sums[count]
    if n <= 0:
        return None
    units = sums[total]
    if average:
        if abs(units) >= _EXACT_DIVISION:
            raise _Inexact  # polars' quotient loses digits here: let it divide
        quotient, remainder = divmod(abs(units), n)
        if 2 * remainder > n or (2 * remainder == n and quotient % 2):
            quotient += 1
        units = quotient if units >= 0 else -quotient
    return Decimal(units).scaleb(-sqltypes.NUMERIC_SCALE, _EXACT)


class _Inexact(Exception):
    """A value the row path leaves to polars, to compute it as the columnar path does."""


# Totals (in numeric's last digits) from which polars' decimal division loses digits: it
# divides exactly, rounding half to even, below 10^28 (tested on near-ties in
# ``test_row_path``), not from 10^28 on (2 * 10^28 / 3 is off by one last digit).
_EXACT_DIVISION = 10**28

# Enough digits for any numeric: scaleb then rounds nothing.
_EXACT = Context(prec=80)


def _plain_value(total: int, count: int, average: bool, sums: tuple[Any, ...]) -> Any:
    """An integer sum, or a float sum or avg, from its accumulators (``_values``: the
    sum, or it over the count)."""
    n = sums[count]
    if n <= 0:
        return None
    return sums[total] / n if average else sums[total]


def _check_shadows(plan: RowSteps, positions: Sequence[int]) -> None:
    """``_check_sums`` for the row path's new sums (their float shadows at ``positions``)."""
    for _, _, _, new in plan.steps:
        for position in positions:
            if abs(new[position]) >= _SHADOW_LIMIT:
                raise LoupeError(expr.OUT_OF_RANGE, expr.NUMERIC_OVERFLOW)


_UNIT_HASH: list[int] = []


def _unit_hash() -> int:
    """The key hash of a keyless reduce's one state row (its ``_u`` column, 0)."""
    if not _UNIT_HASH:
        unit = pl.DataFrame({UNIT: [0]}, schema={UNIT: pl.Int8()})
        _UNIT_HASH.append(key_hash(unit, [UNIT])[0])
    return _UNIT_HASH[0]


def _check_sums(frame: pl.DataFrame, shadows: Sequence[str]) -> None:
    """22003 when an exact sum left numeric's range (its integer may have wrapped around)."""
    for shadow in shadows:
        if frame.height and (frame[shadow].abs() >= _SHADOW_LIMIT).any():
            raise LoupeError(expr.OUT_OF_RANGE, expr.NUMERIC_OVERFLOW)


def _mean(total: pl.Expr, count: pl.Expr, *, numeric: bool) -> pl.Expr:
    """``total / count``: decimal division for numeric (rounded to its scale), else float."""
    if numeric:  # a decimal division by zero raises; callers make those rows NULL
        return total / count.clip(1).cast(NUMERIC)
    return total.cast(pl.Float64) / count


def _interval_aggregate(
    agg: mir.Aggregate, value: pl.Expr, weight: pl.Expr, positive: pl.Expr
) -> pl.Expr:
    """sum/avg (field by field; avg is the sum divided by the count, as ``interval_div``)
    and min/max (by total span; of equal ones the smallest fields) of intervals."""
    kept = positive & value.is_not_null()
    if agg.distinct:
        values = value.filter(kept).unique()
        weights = pl.lit(1, pl.Int64).repeat_by(values.len()).explode()
    else:
        values, weights = value.filter(kept), weight.filter(kept)
    if agg.func in ("min", "max"):
        # Narrowed key by key (a sort_by of the struct in a group gives wrong values); of
        # equal spans ('1 mon', '30 days') the one with the smallest fields, either way.
        for key in range(5):
            part = [*intervals.sort_keys(values), *intervals.field_values(values)][key]
            largest = agg.func == "max" and key < 2
            values = values.filter(part == (part.max() if largest else part.min()))
        return values.first()
    count = weights.sum()
    # A sum beyond a field's width is PostgreSQL's 22008; a reduce has no error rows, so the
    # strict casts fail the step (XX000, its input kept) rather than give a wrong value.
    total = intervals.make(
        (intervals.months(values).cast(pl.Int64) * weights).sum().cast(pl.Int32),
        (intervals.days(values).cast(pl.Int64) * weights).sum().cast(pl.Int32),
        (intervals.micros(values).cast(pl.Int128) * weights).sum().cast(pl.Int64),
    )
    if agg.func == "avg":  # divided once grouped (``interval_averages``)
        return pl.when(count > 0).then(
            pl.struct(total.alias("sum"), count.cast(pl.Float64).alias("count"))
        )
    return pl.when(count > 0).then(total)


def interval_averages(frame: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """avg of intervals in ``columns`` (a sum and a count each, from ``_interval_aggregate``)
    as the sum divided by the count (``interval_div``)."""
    if not columns or frame.height == 0:
        return frame.with_columns(pl.lit(None, intervals.STRUCT).alias(c) for c in columns)
    return frame.with_columns(
        intervals.scale(
            pl.col(c).struct.field("sum"), pl.col(c).struct.field("count"), divide=True
        )[0].alias(c)
        for c in columns
    )


def _current(
    found: pl.DataFrame | None, touched: pl.DataFrame, keys: Sequence[str]
) -> pl.DataFrame | None:
    """The consolidated rows a spine lookup found for the ``touched`` keys (hash collisions out)."""
    if found is None:
        return None
    return semi_join(consolidate(found.drop(HASH), with_time=False), touched, keys)


def _positive(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` as a reader may take them: consolidated only if something is retracted."""
    return rows if _only_inserts(rows) else consolidate(rows, with_time=False)


def _only_inserts(delta: pl.DataFrame) -> bool:
    return bool(delta.select((pl.col(DIFF) > 0).all()).item())


def _touched_hashes(delta: pl.DataFrame, touched: pl.DataFrame, keys: Sequence[str]) -> pl.Series:
    """The key hashes a delta touches (a keyless state has one key, hash 0)."""
    return key_hash(touched if keys else delta.head(1), keys)


# A multi-time recompute expands each touched key's rows once per time it was touched;
# past this many rows it takes the times in runs (about 100 bytes a row at its peak).
EXPANSION_LIMIT = 500_000
_AT, _NEXT = "_at", "_next"


def _join_keys(left: pl.DataFrame, right: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``left`` joined to ``right`` on ``keys`` (NULL keys match NULL; no keys: every pair)."""
    if not keys:
        return left.join(right, how="cross")
    return left.join(right, on=list(keys), nulls_equal=True)


def _expansion(
    prior: pl.DataFrame | None, delta: pl.DataFrame, pairs: pl.DataFrame, keys: Sequence[str]
) -> int:
    """The rows a multi-time recompute would aggregate: per key, its rows times its times."""
    if not keys:  # one group (``select([])`` would keep no rows to count)
        return (delta.height + (prior.height if prior is not None else 0)) * pairs.height
    frames = [delta.select(keys)] + ([prior.select(keys)] if prior is not None else [])
    rows = pl.concat(frames).group_by(keys).len(name="_rows")
    times = pairs.group_by(keys).len(name="_times")
    product = rows.join(times, on=list(keys), nulls_equal=True)
    return int(product.select((pl.col("_rows") * pl.col("_times")).sum()).item() or 0)


def _by_time(frame: pl.DataFrame) -> list[tuple[int, pl.DataFrame]]:
    """``frame``'s updates split by time, in time order (usually one time per step)."""
    times = frame[TIME].unique().sort()
    if times.len() == 1:
        return [(times[0], frame)]
    return [(t, frame.filter(pl.col(TIME) == t)) for t in times]


# -- TopK ---------------------------------------------------------------------------------


class TopK(ReEvaluating):
    """Per group, the rows ``offset`` to ``offset + limit`` in ``order`` (ties by the whole row)."""

    name = "TopK"

    def __init__(self, node: lir.TopK, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        self.node = node
        self.groups = [f"c{i}" for i in node.group_key]
        self.columns = [f"c{i}" for i in range(len(self.types))]
        self.state = [(Spine(self.groups), Spine(self.groups)) for _ in range(workers)]

    def compute(self, lower: int, upper: int) -> Parts:
        parts = exchange(self.inputs[0].ok, self.groups, self.workers, self.meter)
        return self.per_worker(parts, self._recompute)

    def _group_columns(self) -> tuple[list[str], list[str]]:
        return self.groups, self.groups

    def _delta_columns(self) -> list[str]:
        return self.columns

    def _old_decides(self, delta: pl.DataFrame) -> bool:
        return self.node.offset == 0 and _only_inserts(delta)

    def _as_prior(self, old: pl.DataFrame) -> pl.DataFrame:
        return old

    def _evaluate(self, rows: pl.DataFrame, also_by: Sequence[str]) -> pl.DataFrame:
        return self._top(rows, also_by)

    def _top(self, rows: pl.DataFrame, also_by: Sequence[str] = ()) -> pl.DataFrame:
        """The rows of each group inside the offset/limit window, with their multiplicities
        (``also_by``: more columns that group, kept in the output)."""
        groups = [*self.groups, *also_by]
        rows = rows.filter(pl.col(DIFF) > 0)
        if not also_by:
            rows = self._candidates(rows)
        keys = [(g, False, True) for g in groups]
        keys += [(f"c{k.column}", k.desc, k.nulls_last) for k in self.node.order]
        by, descending, nulls_last = intervals.order_by(rows.schema, keys)
        # Ties are broken by the whole row (an interval's fields too: a stable choice).
        by += [pl.col(c) for c in self.columns]
        descending += [False] * len(self.columns)
        nulls_last += [True] * len(self.columns)
        ordered = rows.sort(by, descending=descending, nulls_last=nulls_last)
        # A group's running count: the global one minus the count before the
        # group's first row (polars windows over many groups are slow).
        first = pl.any_horizontal(
            [pl.lit(False)] + [pl.col(g).ne_missing(pl.col(g).shift(1)) for g in groups]
        ) | (pl.int_range(pl.len()) == 0)
        total = pl.col(DIFF).cum_sum()
        before_group = pl.when(first).then(total - pl.col(DIFF)).forward_fill()
        end = total - before_group
        start = end - pl.col(DIFF)
        low = self.node.offset
        high = None if self.node.limit is None else low + self.node.limit
        upper_bound = end if high is None else pl.min_horizontal(end, high)
        kept = upper_bound - pl.max_horizontal(start, low)
        return ordered.with_columns(kept.alias(DIFF)).filter(pl.col(DIFF) > 0)

    def _candidates(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Without groups, the first ``offset + limit`` rows in order, found without a full sort.

        Every row occurs at least once, so those rows hold the window; the
        keys (NULL flags first) order exactly as ``_top``'s sort does.
        """
        if self.groups or self.node.limit is None:
            return rows
        wanted = self.node.offset + self.node.limit
        if rows.height <= 4 * wanted:
            return rows
        by: list[pl.Expr] = []
        reverse: list[bool] = []
        keys = [(f"c{k.column}", k.desc, k.nulls_last) for k in self.node.order]
        keys += [(c, False, True) for c in self.columns]
        for column, desc, nulls_last in keys:
            flag = pl.col(column).is_null() if nulls_last else pl.col(column).is_not_null()
            values = (
                intervals.sort_keys(pl.col(column))
                if intervals.is_interval(rows.schema[column])
                else [pl.col(column)]
            )
            by += [flag, *values]
            reverse += [False] + [desc] * len(values)
        return rows.bottom_k(wanted, by=by, reverse=reverse)

    def spines(self) -> list[list[Spine]]:
        return [list(pair) for pair in self.state]


# -- Join ---------------------------------------------------------------------------------


@dataclass
class _RowLookup:
    """A lookup step as the row path runs it: the prefix's key columns (global positions),
    where the looked-up input's kept columns go, and the column pairs that must be equal."""

    prefix: list[int]
    placed: list[int]
    checks: list[tuple[int, int]]


@dataclass
class _Lookup:
    """One step of a delta path: look input ``input`` up by ``pairs`` (its expr, the prefix's)."""

    input: int
    pairs: list[tuple[Scalar, Scalar]]
    dtypes: list[pl.DataType]
    # Equalities checkable once this input is joined (pruning before the next step).
    filters: list[pl.Expr]
    # The row path's plan of this step (``Join._row_step``), or None if it has none.
    rows: _RowLookup | None = None

    @property
    def key(self) -> tuple[int, tuple[Scalar, ...]]:
        return self.input, tuple(local for local, _ in self.pairs)

    @property
    def names(self) -> list[str]:
        return [f"k{i}" for i in range(len(self.pairs))]


class Join(Operator):
    """An inner join of n inputs as delta queries: each input's changes look up the others.

    Input i's delta joins the inputs before it at their new state (old
    arrangement plus this interval's delta) and those after it at their old
    state, so every pair of changes is counted once; a joined row's time is
    the latest of its parts' times. Each lookup arranges the looked-up input
    by the equivalence-class expressions that tie it to what is joined so
    far; arrangements with the same input and key are shared.
    """

    name = "Join"

    def __init__(
        self,
        node: lir.Join,
        sources: Sequence[Operator],
        workers: int,
        demand: frozenset[int] | None = None,
    ) -> None:
        super().__init__(node.types, sources, workers)
        self.starts = [0]
        for source in sources:
            self.starts.append(self.starts[-1] + len(source.types))
        # Columns read above the join (and by its equivalences): the others are
        # never stored, and come out NULL.
        used = set(range(len(self.types))) if demand is None else set(demand)
        for cls in node.equivalences:
            for e in cls:
                used |= columns_of(e)
        self.kept = [
            [f"c{c - start}" for c in sorted(used) if start <= c < end]
            for start, end in zip(self.starts, self.starts[1:], strict=False)
        ]
        self.absent = {
            name: pl.lit(None, dtype).alias(name)
            for i, (name, dtype) in enumerate(self.empty.schema.items())
            if i < len(self.types) and i not in used
        }
        self.empty_deltas = [
            s.empty.select(*kept, TIME, DIFF) for s, kept in zip(sources, self.kept, strict=True)
        ]
        self.all_types = tuple(t for s in sources for t in s.types)
        self.classes = _merge_classes(node.equivalences)
        self.conditions = self._checkable(set(range(len(sources))))
        # (input, key exprs) -> (the lookup that arranges it, one spine per worker)
        self.arrangements: dict[tuple[int, tuple[Scalar, ...]], tuple[_Lookup, list[Spine]]] = {}
        # Per arrangement key: the hashes of its keys seen lately (``_key_hashes``).
        self.key_hashes: dict[tuple[int, tuple[Scalar, ...]], KeyHashes] = {}
        self.paths = [self._path_plan(i) for i in range(len(sources))]

    def _input_of(self, column: int) -> int:
        return next(i for i in range(len(self.inputs)) if column < self.starts[i + 1])

    def _path_plan(self, first: int) -> list[_Lookup]:
        """For input ``first``'s delta: the other inputs in lookup order (most key pairs first)."""
        joined = {first}
        steps = []
        while len(joined) < len(self.inputs):
            candidates = [j for j in range(len(self.inputs)) if j not in joined]
            j, pairs = max(
                ((j, self._pairs(joined, j)) for j in candidates), key=lambda c: len(c[1])
            )
            pairs = self._reuse(j, pairs)
            dtypes = []
            for local, prefix in pairs:
                local_dtype = polars_dtype(scalar_type(local, self.inputs[j].types))
                prefix_dtype = polars_dtype(scalar_type(prefix, self.all_types))
                dtypes.append(canonical_key_dtype([local_dtype, prefix_dtype]) or local_dtype)
            joined.add(j)
            step = _Lookup(j, pairs, dtypes, self._checkable(joined))
            step.rows = self._row_step(j, pairs, dtypes, joined)
            if step.key not in self.arrangements:
                spines = [Spine(step.names) for _ in range(self.workers)]
                self.arrangements[step.key] = (step, spines)
            steps.append(step)
        return steps

    def _reuse(self, j: int, pairs: list[tuple[Scalar, Scalar]]) -> list[tuple[Scalar, Scalar]]:
        """Look ``j`` up by the key of an arrangement it already has, if ``pairs`` cover it.

        Another key would be another copy of the input; the pairs left out
        are checked as filters after the step instead.
        """
        available = {local: pair for pair in pairs for local in [pair[0]]}
        for (input_index, key), _ in self.arrangements.items():
            if input_index == j and key and set(key) <= set(available):
                return [available[local] for local in key]
        return pairs

    def _row_step(
        self,
        j: int,
        pairs: list[tuple[Scalar, Scalar]],
        dtypes: list[pl.DataType],
        joined: set[int],
    ) -> _RowLookup | None:
        """The row path's plan of looking ``j`` up by ``pairs``: only where every key and
        equality is a column whose values compare in Python as polars compares them."""
        prefix = []
        for (local, theirs), dtype in zip(pairs, dtypes, strict=True):
            if not isinstance(local, Column) or not isinstance(theirs, Column):
                return None
            if not row_safe(dtype) or not self._comparable(
                theirs.index, self.starts[j] + local.index
            ):
                return None
            prefix.append(theirs.index)
        checks = self._column_checks(joined)
        if checks is None:
            return None
        start = self.starts[j]
        placed = [start + int(c[1:]) for c in self.kept[j]]
        return _RowLookup(prefix, placed, checks)

    def _comparable(self, left: int, right: int) -> bool:
        """Whether columns ``left`` and ``right`` (global) are equal in Python as in polars:
        the same dtype (or both integers), not a float (NaN, -0.0)."""
        dtypes = list(self.empty.dtypes)
        a, b = dtypes[left], dtypes[right]
        if not (row_safe(a) and row_safe(b)):
            return False
        return a == b or (a.is_integer() and b.is_integer())

    def _column_checks(self, joined: set[int]) -> list[tuple[int, int]] | None:
        """``_checkable``'s equalities as pairs of global columns (None if one is not)."""
        checks = []
        for cls in self.classes:
            members = [e for e in cls if {self._input_of(c) for c in columns_of(e)} <= joined]
            if not members:
                continue
            if not all(isinstance(e, Column) for e in members):
                return None
            first = members[0]
            assert isinstance(first, Column)
            for other in members[1:]:
                assert isinstance(other, Column)
                if not self._comparable(first.index, other.index):
                    return None
                checks.append((first.index, other.index))
        return checks

    def _checkable(self, joined: set[int]) -> list[pl.Expr]:
        """Equalities among the equivalence-class members over ``joined`` inputs only."""
        conditions = []
        for cls in self.classes:
            members = [e for e in cls if {self._input_of(c) for c in columns_of(e)} <= joined]
            compiled = [expr.compile_inline(e, self.all_types) for e in members]
            if not compiled:
                continue
            first = compiled[0]
            conditions += [
                (
                    intervals.compare("eq", first.value, other.value)
                    if first.type == "interval"
                    else first.value == other.value
                ).fill_null(False)
                for other in compiled[1:]
            ]
        return conditions

    def _pairs(self, joined: set[int], j: int) -> list[tuple[Scalar, Scalar]]:
        """Per equivalence class tying input ``j`` to the joined inputs: (j's expr, theirs)."""
        pairs = []
        for cls in self.classes:
            owners = [{self._input_of(c) for c in columns_of(e)} for e in cls]
            mine = [e for e, o in zip(cls, owners, strict=True) if o == {j}]
            theirs = [e for e, o in zip(cls, owners, strict=True) if o <= joined]
            if mine and theirs:
                pairs.append((shift(mine[0], -self.starts[j]), theirs[0]))
        return pairs

    def _keyed(
        self, frame: pl.DataFrame, exprs: Sequence[Scalar], types: Sequence[str], step: _Lookup
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """``frame`` with key columns ``k0..`` (cast to compare equal), rows with NULL keys dropped."""
        keyed, err = evaluate(frame, exprs, types, step.names, step.dtypes, match=True)
        return _without_null_keys(keyed, step.names), err

    def run(self, lower: int, upper: int) -> None:
        errors = [i.err for i in self.inputs]
        deltas = [
            whole[[*kept, TIME, DIFF]] if whole.height else empty  # a column pick, no query
            for whole, kept, empty in zip(
                [concat(i.ok, i.empty) for i in self.inputs],
                self.kept,
                self.empty_deltas,
                strict=True,
            )
        ]
        keyed: dict[tuple[int, tuple[Scalar, ...]], pl.DataFrame] = {}
        # While logging is on: per arrangement, each worker's batch keyed on its own.
        sent: dict[tuple[int, tuple[Scalar, ...]], Parts] = {}
        for key, (step, _) in self.arrangements.items():
            if not deltas[step.input].height:
                continue
            if self.meter is None:
                frame, err = self._keyed(
                    deltas[step.input], key[1], self.inputs[step.input].types, step
                )
                errors.append(err)
            else:
                frame, sent[key] = self._keyed_per_worker(step, deltas[step.input], errors)
            keyed[key] = frame
        outputs = []
        # Whether every output came by the row path, which checked every equality already.
        checked = True
        for first, delta in enumerate(deltas):
            if delta.height and not self._dead(first, keyed):
                output, by_rows = self._path(first, delta, keyed, errors)
                outputs.append(output)
                checked = checked and by_rows
        meter = self.meter
        for key, frame in keyed.items():
            step, spines = self.arrangements[key]
            sources = sent.get(key, [frame])
            for w, part in enumerate(
                exchange(sources, step.names, self.workers, meter, step.input)
            ):
                if part.height == 0:
                    continue
                started = clock.perf_counter_ns() if meter is not None else 0
                if part.height <= SMALL_DELTA and step.rows is not None:
                    self._arrange_rows(step, spines[w], part)
                else:
                    spines[w].insert(part.drop(TIME))
                if meter is not None:
                    meter.ns[w] += clock.perf_counter_ns() - started
        self.err = concat(errors, empty_errors())
        joined = concat(outputs, self.empty)
        if not checked:
            joined = self._filter(joined)
        self.ok = spread(self.conform(joined), self.workers)

    def _key_hashes(self, step: _Lookup) -> KeyHashes:
        """The hashes of ``step``'s keys seen lately (its arrangement's and lookups')."""
        hashes = self.key_hashes.get(step.key)
        if hashes is None:
            schema = dict(zip(step.names, step.dtypes, strict=True))
            hashes = self.key_hashes[step.key] = KeyHashes(schema)
        return hashes

    def _arrange_rows(self, step: _Lookup, spine: Spine, part: pl.DataFrame) -> None:
        """A small delta ``part`` into ``spine`` as pending rows (``append_rows``, without
        its times); as a batch where a value would not round-trip through Python."""
        schema = dict(part.schema)
        if not all(row_safe(d, floats=True) for d in schema.values()):
            spine.insert(part.drop(TIME))
            return
        del schema[TIME]
        columns = list(schema)
        rows = _picked_rows(part, columns)
        at = [columns.index(name) for name in step.names]
        hashes = self._key_hashes(step).of([tuple(row[i] for i in at) for row in rows])
        schema[HASH] = pl.UInt64()
        spine.append_rows([(*row, h) for row, h in zip(rows, hashes, strict=True)], schema)

    def _keyed_per_worker(
        self, step: _Lookup, delta: pl.DataFrame, errors: list[pl.DataFrame]
    ) -> tuple[pl.DataFrame, Parts]:
        """``_keyed`` of ``delta`` (every worker's batch of ``step.input``, in worker order), and
        the same per worker: what each worker sends to the arrangement (logging counts it).

        Keyed in one pass; each worker's rows are then a slice of the result,
        unless some row failed (the positions shift): then each is keyed anew.
        """
        source = self.inputs[step.input]
        exprs = [local for local, _ in step.pairs]
        keyed, err = evaluate(delta, exprs, source.types, step.names, step.dtypes, match=True)
        errors.append(err)
        parts: Parts = []
        senders = [w for w, p in enumerate(source.ok) if p.height]
        if err.height == 0 and len(senders) == 1:  # a small step: one worker's batch is all
            keyed = _without_null_keys(keyed, step.names)
            empty = keyed.clear()
            return keyed, [keyed if w == senders[0] else empty for w in range(self.workers)]
        if err.height == 0:
            offset = 0
            for part in source.ok:
                parts.append(keyed.slice(offset, part.height))
                offset += part.height
        else:
            kept = self.kept[step.input]
            parts = [
                self._keyed(p.select(*kept, TIME, DIFF), exprs, source.types, step)[0]
                if p.height
                else keyed.clear()
                for p in source.ok
            ]
        if step.names:
            keyed = _without_null_keys(keyed, step.names)
            parts = [_without_null_keys(p, step.names) if p.height else p for p in parts]
        return keyed, parts

    def _dead(self, first: int, keyed: dict[tuple[int, tuple[Scalar, ...]], pl.DataFrame]) -> bool:
        """Whether some lookup of ``first``'s path has nothing to find (an empty input: hydration)."""
        for step in self.paths[first]:
            stored = any(s.holds for s in self.arrangements[step.key][1])
            fresh = step.input < first and step.key in keyed
            if not stored and not fresh:
                return True
        return False

    def _path(
        self,
        first: int,
        delta: pl.DataFrame,
        keyed_deltas: dict[tuple[int, tuple[Scalar, ...]], pl.DataFrame],
        errors: list[pl.DataFrame],
    ) -> tuple[pl.DataFrame, bool]:
        """Input ``first``'s delta joined with every other input (see the class docstring),
        and whether the row path joined it (its last step checked every equality: no
        ``_filter`` needed)."""
        if delta.height <= SMALL_DELTA:
            rows = self._path_rows(first, delta, keyed_deltas)
            if rows is not None:
                return rows, True
        start = self.starts[first]
        prefix = delta.rename({c: f"c{start + int(c[1:])}" for c in self.kept[first]})
        for step in self.paths[first]:
            keyed, err = self._keyed(prefix, [p for _, p in step.pairs], self.all_types, step)
            errors.append(err)
            spines = self.arrangements[step.key][1]
            matched = []
            meter = self.meter
            for w, part in enumerate(exchange([keyed], step.names, self.workers)):
                stored = part.height and spines[w].holds
                if not stored:
                    continue
                started = clock.perf_counter_ns() if meter is not None else 0
                found = spines[w].lookup(key_hash(part, step.names))
                if found is not None:
                    matched.append(self._match(part, found, step, with_time=False))
                if meter is not None:
                    meter.ns[w] += clock.perf_counter_ns() - started
            if step.input < first and step.key in keyed_deltas:
                matched.append(self._match(keyed, keyed_deltas[step.key], step, with_time=True))
            present = [m for m in matched if m.height]
            if not present:
                return self.empty.clear(), False
            prefix = pl.concat(present, how="vertical_relaxed")
            if step.filters:
                prefix = prefix.filter(pl.all_horizontal(step.filters))
        return prefix.select(self.absent.get(c, c) for c in self.empty.columns), False

    def _path_rows(
        self,
        first: int,
        delta: pl.DataFrame,
        keyed_deltas: dict[tuple[int, tuple[Scalar, ...]], pl.DataFrame],
    ) -> pl.DataFrame | None:
        """``_path`` of a small delta by Python over its rows: a lookup per step hashes the
        delta's keys and gathers what the spines hold under them; the rows are matched,
        combined and checked in Python, and built into a frame once, at the end.

        None where the row path does not apply (keys that are expressions, floats
        or types Python compares otherwise) or the rows multiply past
        ``SMALL_DELTA`` * 16: the columnar path then joins.
        """
        steps = self.paths[first]
        if any(step.rows is None for step in steps):
            return None
        width = len(self.types)
        if not all(row_safe(d, floats=True) for d in self.empty.dtypes[:width]):
            return None
        start = self.starts[first]
        placed = [start + int(c[1:]) for c in self.kept[first]]
        prefix: list[tuple[list[Any], int, int]] = []
        for row in _picked_rows(delta, [*self.kept[first], TIME, DIFF]):
            values: list[Any] = [None] * width
            for position, value in zip(placed, row, strict=False):
                values[position] = value
            prefix.append((values, row[-2], row[-1]))
        for step in steps:
            plan = step.rows
            assert plan is not None
            keys: dict[tuple[Any, ...], list[tuple[list[Any], int, int]]] = {}
            for entry in prefix:
                key = tuple(entry[0][g] for g in plan.prefix)
                if None not in key:  # NULL equals nothing
                    keys.setdefault(key, []).append(entry)
            if not keys:
                return self.empty.clear()
            found = self._found_rows(step, list(keys))
            if found is None:
                return None
            if step.input < first and step.key in keyed_deltas:
                fresh = keyed_deltas[step.key].select(
                    *step.names, *self.kept[step.input], TIME, DIFF
                )
                for row in fresh.rows():
                    found.setdefault(row[: len(plan.prefix)], []).append(
                        (row[len(plan.prefix) : -2], row[-2], row[-1])
                    )
            joined: list[tuple[list[Any], int, int]] = []
            for key, entries in keys.items():
                for other, other_time, other_diff in found.get(key, ()):
                    for values, time, diff in entries:
                        combined = list(values)
                        for position, value in zip(plan.placed, other, strict=True):
                            combined[position] = value
                        if all(_equal(combined[a], combined[b]) for a, b in plan.checks):
                            joined.append((combined, max(time, other_time), diff * other_diff))
            if len(joined) > SMALL_DELTA * 16:
                return None
            if not joined:
                return self.empty.clear()
            prefix = joined
        rows = [(*values, time, diff) for values, time, diff in prefix]
        return frame_of_rows(rows, dict(self.empty.schema))

    def _found_rows(
        self, step: _Lookup, keys: list[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int, int]]] | None:
        """What the spines of ``step`` hold under ``keys``: per key, (kept values, 0, diff)
        (an arranged row is older than every delta: time 0 never wins the max)."""
        hashes = self._key_hashes(step).of(keys)
        spines = self.arrangements[step.key][1]
        owned: list[list[int]] = [[] for _ in range(self.workers)]
        for hashed in hashes:
            owned[hashed % self.workers].append(hashed)
        found: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int, int]]] = {}
        width = len(step.names)
        wanted = set(keys)
        for worker, mine in enumerate(owned):
            if not mine or not spines[worker].holds:
                continue
            rows = spines[worker].lookup(mine)
            if rows is None:
                continue
            if rows.height > SMALL_DELTA * 16:
                return None
            for row in _picked_rows(rows, [*step.names, *self.kept[step.input], DIFF]):
                key = row[:width]
                if key in wanted:  # a hash collision finds other keys too
                    found.setdefault(key, []).append((row[width:-1], 0, row[-1]))
        return found

    def _match(
        self, prefix: pl.DataFrame, found: pl.DataFrame, step: _Lookup, with_time: bool
    ) -> pl.DataFrame:
        """``prefix`` rows joined with the looked-up input's rows ``found`` on the key columns."""
        start = self.starts[step.input]
        columns = [pl.col(c).alias(f"c{start + int(c[1:])}") for c in self.kept[step.input]]
        columns += [pl.col(n) for n in step.names] + [pl.col(DIFF).alias("_d")]
        if with_time:
            columns.append(pl.col(TIME).alias("_t"))
        other = found.select(columns)
        # The one place a dataflow's output can outgrow its inputs by a product: charged first.
        memory.reserve_join(prefix, other, step.names)
        if step.names:
            joined = prefix.join(other, on=step.names, how="inner")
        else:
            joined = prefix.join(other, how="cross")
        updates = {DIFF: (pl.col(DIFF) * pl.col("_d")).alias(DIFF)}
        if with_time:
            updates[TIME] = pl.max_horizontal(TIME, "_t").alias(TIME)
        dropped = {"_d", "_t", *step.names}
        return joined.select(updates.get(c, c) for c in joined.columns if c not in dropped)

    def _filter(self, joined: pl.DataFrame) -> pl.DataFrame:
        """Rows where every equivalence class holds (NULL equals nothing)."""
        if not self.conditions or joined.height == 0:
            return joined
        return joined.filter(pl.all_horizontal(self.conditions))

    def spines(self) -> list[list[Spine]]:
        return [
            [spines[w] for _, spines in self.arrangements.values()] for w in range(self.workers)
        ]


def _picked_rows(frame: pl.DataFrame, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """``frame.select(columns).rows()`` for a frame of a few rows: every row, then the
    columns picked in Python (a select is a polars query)."""
    at = [frame.columns.index(c) for c in columns]
    return [tuple(row[i] for i in at) for row in frame.rows()]


def _equal(a: Any, b: Any) -> bool:
    """SQL equality of two non-float values: NULL equals nothing."""
    return a is not None and b is not None and a == b


def _merge_classes(equivalences: Sequence[Sequence[Scalar]]) -> list[tuple[Scalar, ...]]:
    """Equivalence classes sharing a member merged (a = b, b = c: one class a, b, c).

    Equality is transitive, so more lookups find a key to use (TPC-H Q5's
    nation ties customer and supplier only through each other otherwise).
    """
    merged: list[list[Scalar]] = []
    for cls in equivalences:
        members = list(dict.fromkeys(cls))
        overlapping = [m for m in merged if set(m) & set(members)]
        for other in overlapping:
            merged.remove(other)
            members = list(dict.fromkeys([*other, *members]))
        merged.append(members)
    return [tuple(m) for m in merged]


def _split_texts(texts: pl.Series, splitter: Callable[[str], list[str]]) -> pl.Series:
    """Each text's pieces (once per distinct text)."""
    distinct = texts.unique().drop_nulls()
    pieces = pl.Series([splitter(t) for t in distinct.to_list()], dtype=pl.List(pl.Utf8))
    table = pl.DataFrame({"key": distinct, "pieces": pieces})
    joined = texts.to_frame("key").join(table, on="key", how="left", maintain_order="left")
    return joined["pieces"]


def _series_number(value: pl.Expr, type_: str, kind: str) -> pl.Expr:
    """A generate_series argument as the number the series counts in: integers, floats
    (numeric), or microseconds (times, and their interval step)."""
    if kind in ("numeric", "float8"):
        return value.cast(pl.Float64)
    if type_ == "interval":  # days as 24 hours, as timestamp + interval adds them here
        return intervals.days(value).cast(pl.Int64) * 86_400_000_000 + intervals.micros(value)
    if type_ == "date":
        return value.cast(pl.Datetime("us")).dt.epoch("us")
    if type_ in TIME_TYPES:
        return value.dt.epoch("us")
    return value.cast(pl.Int64)


class FlatMap(Operator):
    """A table function per row (``generate_series``), then the node's MFP.

    Rows whose arguments fail to evaluate, or that ask for a step of zero,
    are error rows; a NULL argument gives no rows, as in PostgreSQL.
    """

    name = "FlatMap"

    def __init__(self, node: lir.FlatMap, source: Operator, workers: int) -> None:
        super().__init__(node.types, (source,), workers)
        if node.func not in ("generate_series", "regexp_split_to_table", "unnest"):
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED, f"table function {node.func} is not supported"
            )
        splits = node.func == "regexp_split_to_table"
        self.splitter = expr.regexp_splitter(node.exprs) if splits else None
        self.node = node
        self.input_types = source.types
        self.arity = len(source.types)
        self.compiled = [expr.compile_scalar(e, self.input_types) for e in node.exprs]
        self.series_type = mir.table_function_types(node.func, [c.type for c in self.compiled])[0]
        self.flat_types = (*self.input_types, self.series_type)
        expr.mfp_output_types(node.mfp, self.flat_types)  # refuse unknown functions at render

    def run(self, lower: int, upper: int) -> None:
        errors = [self.inputs[0].err]

        def body(worker: int, part: pl.DataFrame) -> pl.DataFrame:
            if part.height == 0:
                return self.empty
            if self.node.func == "unnest":
                flat, failed = self._unnest(part)
            elif self.splitter is None:
                flat, failed = self._series(part)
            else:
                flat, failed = self._split(part)
            ok, err = expr.apply_mfp(flat, self.node.mfp, self.flat_types)
            errors.extend([failed, err])
            return self.conform(ok)

        self.ok = self.per_worker(self.inputs[0].ok, body)
        self.err = concat(errors, empty_errors())

    def _unnest(self, part: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """unnest: a row per element of the array or list (none for NULL or empty)."""
        container = self.compiled[0]
        column = f"c{self.arity}"
        lazy = container.with_lets(part.lazy()).with_columns(
            container.value.alias(column),
            (container.error if container.error is not None else pl.lit(None, pl.Utf8)).alias(
                ERROR
            ),
        )
        frame = lazy.collect()
        errors = frame.filter(pl.col(ERROR).is_not_null()).select(ERROR, TIME, DIFF)
        flat = (
            frame.filter(pl.col(ERROR).is_null() & (pl.col(column).list.len() > 0))
            .explode(column)
            .select(*[f"c{i}" for i in range(self.arity)], column, TIME, DIFF)
        )
        return flat, errors

    def _split(self, part: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """regexp_split_to_table: a row per piece of the text (none for NULL)."""
        assert self.splitter is not None
        text = self.compiled[0]
        lazy = text.with_lets(part.lazy()).with_columns(
            text.value.alias("_text"),
            (text.error if text.error is not None else pl.lit(None, pl.Utf8)).alias(ERROR),
        )
        frame = lazy.collect()
        errors = frame.filter(pl.col(ERROR).is_not_null()).select(ERROR, TIME, DIFF)
        column = f"c{self.arity}"
        splitter = self.splitter
        pieces = pl.col("_text").map_batches(
            lambda texts: _split_texts(texts, splitter), return_dtype=pl.List(pl.Utf8)
        )
        flat = (
            frame.filter(pl.col(ERROR).is_null() & pl.col("_text").is_not_null())
            .with_columns(pieces.alias(column))
            .explode(column)
            .select(*[f"c{i}" for i in range(self.arity)], column, TIME, DIFF)
        )
        return flat, errors

    def _series(self, part: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        lazy = part.lazy()
        for compiled in self.compiled:
            lazy = compiled.with_lets(lazy)
        kind = self.series_type
        args = [
            _series_number(c.value, c.type, kind).alias(f"_arg{i}")
            for i, c in enumerate(self.compiled)
        ]
        lazy = lazy.with_columns(args)
        step = pl.col("_arg2") if len(args) == 3 else pl.lit(1, pl.Int64)
        zero_step = pl.when(step == 0).then(
            pl.lit(f"{SqlState.INVALID_PARAMETER_VALUE}|step size cannot equal zero")
        )
        monthly = [
            pl.when(intervals.months(c.value) != 0).then(
                pl.lit(
                    f"{SqlState.FEATURE_NOT_SUPPORTED}|generate_series with an interval step of "
                    "months is not supported"
                )
            )
            for c in self.compiled
            if c.type == "interval"
        ]
        failed = pl.coalesce(
            [*(c.error for c in self.compiled if c.error is not None), *monthly, zero_step]
        )
        lazy = lazy.with_columns(failed.alias(ERROR))
        frame = lazy.collect()
        errors = frame.filter(pl.col(ERROR).is_not_null()).select(ERROR, TIME, DIFF)
        alive = frame.filter(pl.col(ERROR).is_null())
        present = pl.all_horizontal([pl.col(f"_arg{i}").is_not_null() for i in range(len(args))])
        start, stop = pl.col("_arg0"), pl.col("_arg1")
        if kind in ("numeric", "float8"):
            # start + i * step for i from 0 while within stop (floats: the engine's numeric).
            count = ((stop - start) / step).floor().cast(pl.Int64) + 1
            steps = pl.int_ranges(0, pl.max_horizontal(count, pl.lit(0)), dtype=pl.Int64)
            values = steps.list.eval(pl.element().cast(pl.Float64)) * step + start
        else:
            end = pl.when(step > 0).then(stop + 1).otherwise(stop - 1)
            values = pl.int_ranges(start, end, step, dtype=pl.Int64)
        column = f"c{self.arity}"
        exploded = (
            alive.filter(present)
            .with_columns(values.alias(column))
            .filter(pl.col(column).list.len() > 0)
            .explode(column)
        )
        kept = [f"c{i}" for i in range(self.arity)]
        series = pl.col(column)
        if kind in TIME_TYPES:  # microseconds since the epoch back to the time type
            series = series.cast(pl.Datetime("us"))
            series = series.dt.replace_time_zone("UTC") if kind == "timestamptz" else series
        flat = exploded.select(
            *kept,
            series.cast(polars_dtype(self.series_type)),
            pl.col(TIME),
            pl.col(DIFF),
        )
        return flat, errors
