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

import time as clock
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import polars as pl

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.dataflow import expr, intervals, memory
from loupe.dataflow.arrangement import Spine
from loupe.dataflow.batches import (
    DIFF,
    ERROR,
    HASH,
    TIME,
    Meter,
    Parts,
    canonical_key_dtype,
    concat,
    consolidate,
    empty_errors,
    exchange,
    key_hash,
    spread,
    sum_by,
)
from loupe.dataflow.expr import NUMERIC
from loupe.dataflow.types import empty_frame, polars_dtype
from loupe.interval import structs
from loupe.plan import lir, mir
from loupe.plan.scalar import Scalar, columns_of, scalar_type, shift
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
        if frame.schema == self.empty.schema:
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


def semi_join(frame: pl.DataFrame, keys_frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The rows of ``frame`` whose ``keys`` appear in ``keys_frame`` (NULL keys match NULL)."""
    if not keys:
        return frame
    return frame.join(keys_frame.select(keys), on=list(keys), how="semi", nulls_equal=True)


# -- accumulating operators: Threshold, Distinct, Accumulable reduces ----------------------


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

    def step(self, delta: pl.DataFrame, summed: bool = False) -> pl.DataFrame:
        """``summed``: the delta holds one row per key and time already (keys, time, sums)."""
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


class Reduce(Operator):
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

    def run(self, lower: int, upper: int) -> None:
        errors = [self.inputs[0].err]
        # Per worker, in worker order (an empty batch stays: the exchange counts who sent what).
        keyed = []
        meter = self.meter
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
                # Combine before the exchange: a worker sends one row per key and time.
                keyed.append(self._contributions(valued))
            else:
                keyed.append(valued.select(*self.keys, *self.arg_names, TIME, DIFF))
            if meter is not None:
                meter.ns[worker] += clock.perf_counter_ns() - started
        self.err = concat(errors, empty_errors())
        present = [k for k in keyed if k.height]
        if not present:
            self.ok = [self.empty] * self.workers
            return
        empty = present[0].clear()
        keyed = [k if k.height else empty for k in keyed]
        parts = exchange(keyed, self.keys, self.workers, meter)
        body = self._accumulate if self.accumulable else self._recompute
        self.ok = self.per_worker(parts, body)

    # Accumulable and Distinct: running sums per key.

    def _contributions(self, part: pl.DataFrame) -> pl.DataFrame:
        """Per key and time: the row count, and each aggregate's sum and non-NULL count."""
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
        return sum_by(part, self.keys, self.sums, selected)

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

    # Hierarchical and Basic: re-evaluate the changed keys from the arranged input.

    def _recompute(self, worker: int, part: pl.DataFrame) -> pl.DataFrame:
        if part.height == 0:
            return self.empty
        inputs, outputs = self.state[worker]
        output_keys = [f"c{i}" for i in range(len(self.keys))]
        changes = []
        for at, delta in _by_time(part):
            first = not inputs.batches
            inputs.insert(delta)
            touched = delta.select(self.keys).unique()
            hashes = _touched_hashes(delta, touched, self.keys)
            renamed = touched.rename(dict(zip(self.keys, output_keys, strict=True)))
            old = _current(outputs.lookup(hashes), renamed, output_keys)
            rows: pl.DataFrame | None
            if first:  # hydration: the delta is the whole input
                rows = _positive(delta.drop(TIME))
            elif self.node.kind == lir.ReduceKind.HIERARCHICAL and _only_inserts(delta):
                # min/max only move toward the inserted values: the old result
                # and the new rows decide, not the whole group.
                rows = concat([self._as_input(old), delta.drop(TIME)], delta.drop(TIME).clear())
            else:
                found = inputs.lookup(hashes)
                rows = _current(found, touched, self.keys)
            parts = []
            if rows is not None and rows.height:
                new = self._aggregate(rows).with_columns(pl.lit(at, pl.UInt64).alias(TIME))
                parts.append(self.conform(new.select(self.empty.columns)))
            if old is not None:
                old = old.with_columns(-pl.col(DIFF), pl.lit(at, pl.UInt64).alias(TIME))
                parts.append(self.conform(old.select(self.empty.columns)))
            change = consolidate(concat(parts, self.empty))
            outputs.insert(change.with_columns(key_hash(change, output_keys)))
            changes.append(change)
        return concat(changes, self.empty)

    def _as_input(self, old: pl.DataFrame | None) -> pl.DataFrame:
        """Current min/max rows as input rows (each aggregate's value in its argument column)."""
        if old is None:
            return pl.DataFrame()
        width = len(self.keys)
        columns = [pl.col(f"c{i}").alias(k) for i, k in enumerate(self.keys)]
        columns += [pl.col(f"c{width + i}").alias(a) for i, a in enumerate(self.args)]
        return old.select(*columns, DIFF)

    def _aggregate(self, rows: pl.DataFrame) -> pl.DataFrame:
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
        grouped = rows.group_by(self.keys).agg(aggs) if self.keys else rows.select(aggs)
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


def _by_time(frame: pl.DataFrame) -> list[tuple[int, pl.DataFrame]]:
    """``frame``'s updates split by time, in time order (usually one time per step)."""
    times = frame[TIME].unique().sort()
    if times.len() == 1:
        return [(times[0], frame)]
    return [(t, frame.filter(pl.col(TIME) == t)) for t in times]


# -- TopK ---------------------------------------------------------------------------------


class TopK(Operator):
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

    def _recompute(self, worker: int, part: pl.DataFrame) -> pl.DataFrame:
        if part.height == 0:
            return self.empty
        inputs, outputs = self.state[worker]
        changes = []
        for at, delta in _by_time(part):
            first = not inputs.batches
            inputs.insert(delta)
            touched = delta.select(self.groups).unique()
            hashes = _touched_hashes(delta, touched, self.groups)
            old = _current(outputs.lookup(hashes), touched, self.groups)
            rows: pl.DataFrame | None
            if first:  # hydration: the delta is the whole input
                rows = _positive(delta.drop(TIME))
            elif self.node.offset == 0 and _only_inserts(delta):
                # Inserted rows can only push others out of the top: the old
                # top and the new rows decide, not the whole group (equal rows
                # may come apart: the window sums them).
                inserted = delta.drop(TIME)
                rows = concat([old, inserted] if old is not None else [inserted], inserted)
            else:
                rows = _current(inputs.lookup(hashes), touched, self.groups)
            parts = []
            if rows is not None:
                parts.append(self._top(rows).with_columns(pl.lit(at, pl.UInt64).alias(TIME)))
            if old is not None:
                parts.append(old.with_columns(-pl.col(DIFF), pl.lit(at, pl.UInt64).alias(TIME)))
            change = consolidate(
                concat([self.conform(p.select(self.empty.columns)) for p in parts], self.empty)
            )
            outputs.insert(change)
            changes.append(change)
        return concat(changes, self.empty)

    def _top(self, rows: pl.DataFrame) -> pl.DataFrame:
        """The rows of each group inside the offset/limit window, with their multiplicities."""
        rows = self._candidates(rows.filter(pl.col(DIFF) > 0))
        keys = [(g, False, True) for g in self.groups]
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
            [pl.lit(False)] + [pl.col(g).ne_missing(pl.col(g).shift(1)) for g in self.groups]
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
class _Lookup:
    """One step of a delta path: look input ``input`` up by ``pairs`` (its expr, the prefix's)."""

    input: int
    pairs: list[tuple[Scalar, Scalar]]
    dtypes: list[pl.DataType]
    # Equalities checkable once this input is joined (pruning before the next step).
    filters: list[pl.Expr]

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
        return (keyed.drop_nulls(step.names) if step.names else keyed), err

    def run(self, lower: int, upper: int) -> None:
        errors = [i.err for i in self.inputs]
        deltas = [
            whole.select(*kept, TIME, DIFF) if whole.height else empty
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
        outputs = [
            self._path(first, deltas[first], keyed, errors)
            for first, delta in enumerate(deltas)
            if delta.height and not self._dead(first, keyed)
        ]
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
                spines[w].insert(part.drop(TIME))
                if meter is not None:
                    meter.ns[w] += clock.perf_counter_ns() - started
        self.err = concat(errors, empty_errors())
        joined = self._filter(concat(outputs, self.empty))
        self.ok = spread(self.conform(joined), self.workers)

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
            keyed = keyed.drop_nulls(step.names) if step.names else keyed
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
            keyed = keyed.drop_nulls(step.names)
            parts = [p.drop_nulls(step.names) if p.height else p for p in parts]
        return keyed, parts

    def _dead(self, first: int, keyed: dict[tuple[int, tuple[Scalar, ...]], pl.DataFrame]) -> bool:
        """Whether some lookup of ``first``'s path has nothing to find (an empty input: hydration)."""
        for step in self.paths[first]:
            stored = any(s.batches for s in self.arrangements[step.key][1])
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
    ) -> pl.DataFrame:
        """Input ``first``'s delta joined with every other input (see the class docstring)."""
        start = self.starts[first]
        prefix = delta.rename({c: f"c{start + int(c[1:])}" for c in self.kept[first]})
        for step in self.paths[first]:
            keyed, err = self._keyed(prefix, [p for _, p in step.pairs], self.all_types, step)
            errors.append(err)
            spines = self.arrangements[step.key][1]
            matched = []
            meter = self.meter
            for w, part in enumerate(exchange([keyed], step.names, self.workers)):
                stored = part.height and spines[w].batches
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
                return self.empty.clear()
            prefix = pl.concat(present, how="vertical_relaxed")
            if step.filters:
                prefix = prefix.filter(pl.all_horizontal(step.filters))
        return prefix.select(self.absent.get(c, c) for c in self.empty.columns)

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
