"""``WITH MUTUALLY RECURSIVE``: the LetRec operator.

A LetRec node holds plans of its own: its bindings and its body, which read
each other's bindings by name. The operator keeps the contents of every
collection they read from outside (its inputs) and, at each time its inputs
change (and once at the dataflow's ``as_of``), evaluates the fixpoint afresh
with the engine's own operators and emits the difference between the body's
new result and its previous one. Work is proportional to the fixpoint's, not
to the change: Materialize iterates incrementally inside differential
dataflow; this operator is correct, simple, and the place to do that later.

Iteration follows Materialize: every binding starts empty; an iteration
evaluates the bindings in order, each reading the newest value of every
binding (this iteration's for those before it); the fixpoint is reached when
an iteration changes no binding. ``limit`` bounds the iterations: at it, the
query fails (``ERROR AT RECURSION LIMIT``) or returns the bindings as they are
(``RETURN AT RECURSION LIMIT``). Without a limit, ``MAX_ITERATIONS`` stands in
for one, so a query that never converges fails rather than hanging a replica.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import polars as pl

from loupe.common.errors import SqlState
from loupe.dataflow.batches import DIFF, ERROR, TIME, concat, consolidate, empty_errors
from loupe.dataflow.operators import Operator
from loupe.dataflow.types import empty_frame
from loupe.plan import lir

# Iterations a WITH MUTUALLY RECURSIVE without a limit may take before it fails.
MAX_ITERATIONS = 10_000

# Evaluates a plan once over the given collections (types, contents at time 0):
# its updates at time 0 and its errors.
Evaluate = Callable[
    [lir.Node, Mapping[str, tuple[tuple[str, ...], pl.DataFrame]]],
    tuple[pl.DataFrame, pl.DataFrame],
]


class LetRec(Operator):
    name = "LetRec"

    def __init__(
        self,
        node: lir.LetRec,
        inputs: Sequence[Operator],
        workers: int,
        as_of: int,
        evaluate: Evaluate,
    ) -> None:
        super().__init__(node.types, inputs, workers)
        self.node = node
        self.as_of = as_of
        self.evaluate = evaluate
        self.started = False
        # The contents of every external collection, consolidated, at time 0.
        self.contents = [i.empty for i in inputs]
        self.emitted = self.empty
        self.emitted_err = empty_errors()

    @property
    def eager(self) -> bool:
        """Runs at the ``as_of`` even when its inputs are empty (its bindings may be constants)."""
        return not self.started

    def run(self, lower: int, upper: int) -> None:
        input_errors = concat([i.err for i in self.inputs], empty_errors())
        deltas = [concat(list(i.ok), i.empty) for i in self.inputs]
        times = set()
        for delta in deltas:
            if delta.height:
                times.update(delta[TIME].unique().to_list())
        if not self.started and lower <= self.as_of < upper:
            times.add(self.as_of)
            self.started = True
        changes, errors = [], [input_errors]
        for at in sorted(times):
            for index, delta in enumerate(deltas):
                now = delta.filter(pl.col(TIME) == at) if delta.height else delta
                if now.height:
                    merged = concat([self.contents[index], now.with_columns(_zero())], now)
                    self.contents[index] = consolidate(merged)
            ok, err = self._fixpoint()
            ok = consolidate(self.conform(ok.with_columns(_zero())))
            err = consolidate(err.with_columns(_zero()))
            changes.append(_difference(ok, self.emitted, at))
            errors.append(_difference(err, self.emitted_err, at))
            self.emitted, self.emitted_err = ok, err
        self.ok = [concat(changes, self.empty)] + [self.empty] * (self.workers - 1)
        self.err = concat(errors, empty_errors())

    def _fixpoint(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The body's rows (or the first errors met) over the fixpoint of the bindings."""
        node = self.node
        collections: dict[str, tuple[tuple[str, ...], pl.DataFrame]] = {
            external.name: (external.types, contents)
            for external, contents in zip(node.externals, self.contents, strict=True)
        }
        for name, binding in zip(node.names, node.bindings, strict=True):
            collections[name] = (binding.types, empty_frame(binding.types))
        limit = node.limit if node.limit is not None else MAX_ITERATIONS
        iteration = 0
        while True:
            iteration += 1
            changed = False
            for name, binding in zip(node.names, node.bindings, strict=True):
                ok, err = self.evaluate(binding, collections)
                if err.height and err.filter(pl.col(DIFF) != 0).height:
                    return self.empty, err
                value = consolidate(ok.with_columns(_zero()))
                if not _same(value, collections[name][1]):
                    changed = True
                collections[name] = (binding.types, value)
            if not changed:
                break
            if iteration >= limit:
                if node.return_at_limit:
                    break
                return self.empty, _limit_error(limit, node.limit is None)
        return self.evaluate(node.body, collections)


def _zero() -> pl.Expr:
    return pl.lit(0, pl.UInt64).alias(TIME)


def _same(left: pl.DataFrame, right: pl.DataFrame) -> bool:
    """Whether two consolidated collections hold the same updates."""
    if left.height != right.height:
        return False
    if left.height == 0:
        return True
    columns = left.columns
    right = right.select(columns).cast(dict(left.schema))  # type: ignore[arg-type]
    return left.sort(columns, nulls_last=True).equals(right.sort(columns, nulls_last=True))


def _difference(new: pl.DataFrame, old: pl.DataFrame, at: int) -> pl.DataFrame:
    """The updates at ``at`` that turn ``old`` into ``new`` (both consolidated at time 0)."""
    if new.height == 0 and old.height == 0:
        return new
    retracted = old.with_columns(-pl.col(DIFF))
    change = consolidate(concat([new, retracted], new))
    return change.with_columns(pl.lit(at, pl.UInt64).alias(TIME))


def _limit_error(limit: int, implicit: bool) -> pl.DataFrame:
    if implicit:
        message = (
            f"Recursive query exceeded the recursion limit {limit} without converging. "
            "(Use RETURN AT RECURSION LIMIT or ERROR AT RECURSION LIMIT to set a limit.)"
        )
    else:
        message = (
            f"Evaluation error: Recursive query exceeded the recursion limit {limit}. "
            "(Use RETURN AT RECURSION LIMIT to not error, but return the current state as "
            "the final result when reaching the limit.)"
        )
    return pl.DataFrame(
        {ERROR: [f"{SqlState.PROGRAM_LIMIT_EXCEEDED}|{message}"], TIME: [0], DIFF: [1]},
        schema={ERROR: pl.Utf8(), TIME: pl.UInt64(), DIFF: pl.Int64()},
    )
