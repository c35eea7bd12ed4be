"""Per LIR node hydration and progress of one dataflow (seed 002), tracked per step, never per row.

A dataflow hydrates in the step that crosses its ``as_of`` (its first): the
step runs every operator once, in topological order, over all of the
inputs' snapshots. A node is hydrated on a worker once its operator has run
for that step (its output frontier then passed the as_of on every worker:
one run computes every worker's batch, so a node's workers flip together).
A node several parents read (the plan is a DAG) is one operator, one node.

Progress per node and worker: ``done`` is what the node's operator consumed
while hydrating (its inputs' rows on that worker, as ``rows_processed``
counts them: the rows each worker's input batch held, before any exchange;
a node without inputs, a ``Constant``, counts its output). ``estimated`` is
what it will consume: the inputs' snapshot sizes (rows queued for a source
import at or below the as_of, an imported index's records; exact per worker
once the step took them) propagated through the plan, each operator's
output estimated from what it consumes (``_output``), and replaced by the
operator's actual output as soon as it has run, so a node's estimate is
exact once its inputs are hydrated.

Most of a hydration is reading the source imports' snapshots (the replica
pushes them piece by piece, ``ComputeInstance.expect_snapshot`` first): a
source import's Get node counts the rows queued so far (at or below the
as_of) as its ``done`` while they arrive (reading is its work; the step
does not count them again, per worker it keeps the larger count), and its
estimate, like every estimate downstream, starts from the expected snapshot
size (``max(expected, queued)``).

The engine thread updates the tracker; ``snapshot`` is replaced whole (an
immutable tuple) after every change, so another thread reading it (the
replica's event loop, mid-step) sees one consistent state without locks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from loupe.dataflow import operators as ops
from loupe.dataflow.recursion import LetRec
from loupe.dataflow.window import Window

PerWorker = tuple[int, ...]

# How an operator's output is estimated from what it consumes (``_output``).
_PIPELINE = 0  # as many rows as it consumes, on the same workers (Mfp, Get, ArrangeBy, …)
_CONSTANT = 1  # its rows, exactly, on worker 0
_JOIN = 2  # as many as its largest input (a key-foreign key join), spread over the workers
_SPREAD = 3  # as many as it consumes, spread over the workers by key (Reduce, Threshold, …)
_BOUNDED = 4  # at most a bound: one row (a Reduce without group key), ``limit`` (a TopK's)


@dataclass(frozen=True)
class Snapshot:
    """The tracker's state at one moment: per node, hydrated and per worker done/estimated."""

    hydrated: tuple[bool, ...]
    done: tuple[PerWorker, ...]
    estimated: tuple[PerWorker, ...]


def spread_sizes(rows: int, workers: int) -> PerWorker:
    """How many of ``rows`` each worker gets from ``batches.spread`` (contiguous slices)."""
    size = -(-rows // workers)
    return tuple(max(0, min(size, rows - w * size)) for w in range(workers))


def _shape(operator: ops.Operator) -> tuple[int, int]:
    """The operator's estimation rule (``_PIPELINE`` …) and its bound (``_CONSTANT``'s rows,
    ``_BOUNDED``'s bound)."""
    if isinstance(operator, ops.Constant):
        return _CONSTANT, len(operator.rows)
    if isinstance(operator, ops.Join):
        return _JOIN, 0
    if isinstance(operator, ops.Reduce):
        return (_SPREAD, 0) if operator.node.group_key else (_BOUNDED, 1)
    if isinstance(operator, ops.TopK):
        node = operator.node
        if not node.group_key and node.limit is not None:
            return _BOUNDED, node.limit
        return _SPREAD, 0
    if isinstance(operator, ops.Threshold | Window | LetRec):
        return _SPREAD, 0
    return _PIPELINE, 0


class HydrationTracker:
    """Per LIR node (``regions`` order) and worker: hydrated, records done and estimated."""

    def __init__(
        self,
        operators: Sequence[ops.Operator],
        node_operator_ids: Sequence[int],
        imports: Mapping[str, ops.Operator],
        workers: int,
        source_imports: Collection[str] = (),
    ) -> None:
        self.workers = workers
        self.zero: PerWorker = (0,) * workers
        position = {id(o): i for i, o in enumerate(operators)}
        by_operator_id = {o.operator_id: i for i, o in enumerate(operators)}
        # The graph as positions in ``operators``: the tracker holds no operator (a dataflow
        # released for memory replaces them), only integers.
        self.sources: list[tuple[int, ...]] = [
            tuple(position[id(s)] for s in o.inputs if id(s) in position) for o in operators
        ]
        self.shapes = [_shape(o) for o in operators]
        self.node_of = [-1] * len(operators)
        for node, operator_id in enumerate(node_operator_ids):
            self.node_of[by_operator_id[operator_id]] = node
        self.imports = {name: position[id(o)] for name, o in imports.items()}
        # The Get nodes reading a source import, by the import's position: reading its
        # snapshot is their work, counted as done while it arrives (an index import's is not).
        reading = {self.imports[name] for name in source_imports if name in self.imports}
        self.readers: dict[int, list[int]] = {p: [] for p in reading}
        for i, inputs in enumerate(self.sources):
            if self.node_of[i] >= 0 and len(inputs) == 1 and inputs[0] in reading:
                self.readers[inputs[0]].append(i)
        self.counted_reading = {i for nodes in self.readers.values() for i in nodes}
        nodes = len(node_operator_ids)
        # Per operator: rows queued for it (an import, before the step), and its output:
        # estimated, replaced by the actual one once it ran in the hydrating step.
        self.queued = [0] * len(operators)
        # Per import: the rows its snapshot is expected to hold (``expect``), an upper bound.
        self.expected = [0] * len(operators)
        self.ran_already = [False] * len(operators)
        self.output: list[PerWorker] = [self.zero] * len(operators)
        # Per node: hydrated, consumed while hydrating, and what ``snapshot`` says it will
        # consume (its estimate, never below done; done once hydrated).
        self.hydrated = [False] * nodes
        self.done: list[PerWorker] = [self.zero] * nodes
        self.estimated: list[PerWorker] = [self.zero] * nodes
        self.started = False
        self.snapshot = Snapshot((), (), ())
        self._estimate(0, None)
        self._publish()

    def queue(self, name: str, rows: int) -> None:
        """``rows`` more updates at or below the as_of wait for import ``name`` (before the step).

        For a source import they were read: its Get nodes count them as done.
        """
        position = self.imports[name]
        self.queued[position] += rows
        read = spread_sizes(self.queued[position], self.workers)
        for reader in self.readers.get(position, ()):
            node = self.node_of[reader]
            self.done[node] = tuple(map(max, self.done[node], read))
        self._imported(position)

    def expect(self, name: str, rows: int) -> None:
        """Import ``name``'s snapshot will hold about ``rows`` updates (at most: before
        consolidation); estimates downstream start from it until the step ran."""
        position = self.imports[name]
        self.expected[position] = rows
        self._imported(position)

    def _imported(self, position: int) -> None:
        self.output[position] = spread_sizes(
            max(self.expected[position], self.queued[position]), self.workers
        )
        self._estimate(position + 1, {position})
        self._publish()

    def start(self) -> None:
        """The hydrating step begins: imports' sizes are now known exactly as they run."""
        self.started = True

    def ran(self, position: int, operator: ops.Operator) -> int:
        """The operator at ``position`` ran (or was idle) in the hydrating step: the node it is
        hydrated, with what it consumed; estimates downstream use its actual output. The
        node's index (in ``regions`` order), -1 for an import.

        Per step, never per row: the work is the operators downstream whose input
        estimate changed, and a snapshot of the nodes (tuples of per-worker counts).
        """
        actual = tuple(part.height for part in operator.ok)
        self.ran_already[position] = True
        changed = actual != self.output[position]
        self.output[position] = actual
        node = self.node_of[position]
        if node >= 0:
            processed = rows_processed(operator)
            if position in self.counted_reading:
                # Its snapshot was counted as it was read: not again (per worker, never less).
                done = tuple(map(max, self.done[node], processed))
            else:
                done = tuple(d + r for d, r in zip(self.done[node], processed, strict=True))
            self.done[node] = self.estimated[node] = done
            self.hydrated[node] = True
        if changed:
            self._estimate(position + 1, {position})
        if node >= 0 or changed:
            self._publish()
        return node

    def fail(self) -> list[int]:
        """The hydrating step failed: its nodes are not hydrated after all (those reverted)."""
        reverted = [node for node, hydrated in enumerate(self.hydrated) if hydrated]
        for node in reverted:
            self.hydrated[node] = False
        self._publish()
        return reverted

    def _estimate(self, start: int, changed: set[int] | None) -> None:
        """Estimates of the operators from ``start`` on that read a ``changed`` output (None:
        all of them), from their inputs' outputs: a forward pass in topological order."""
        for i in range(start, len(self.sources)):
            if self.ran_already[i]:
                continue
            sources = self.sources[i]
            if changed is not None and not any(s in changed for s in sources):
                continue
            if len(sources) == 1:
                consumed = self.output[sources[0]]
            elif sources:
                consumed = tuple(map(sum, zip(*(self.output[s] for s in sources), strict=True)))
            else:
                consumed = self._own(i)
            node = self.node_of[i]
            if node >= 0 and not self.hydrated[node]:
                done = self.done[node]  # what was read (a source's Get), or a failed step counted
                self.estimated[node] = tuple(map(max, consumed, done))
            output = self._output(i, consumed)
            if output != self.output[i]:
                self.output[i] = output
                if changed is not None:
                    changed.add(i)

    def _own(self, i: int) -> PerWorker:
        """What an operator without inputs produces: an import's queued rows, a constant's."""
        rule, bound = self.shapes[i]
        if rule == _CONSTANT:
            return (bound, *self.zero[1:])
        return spread_sizes(max(self.expected[i], self.queued[i]), self.workers)

    def _output(self, i: int, consumed: PerWorker) -> PerWorker:
        rule, bound = self.shapes[i]
        if rule in (_PIPELINE, _CONSTANT):
            return consumed
        total = sum(consumed)
        if rule == _JOIN:
            total = max((sum(self.output[s]) for s in self.sources[i]), default=0)
        elif rule == _BOUNDED:
            total = min(total, bound)
        return spread_sizes(total, self.workers)

    def _publish(self) -> None:
        """Replace ``snapshot`` whole (another thread may be reading the previous one)."""
        self.snapshot = Snapshot(tuple(self.hydrated), tuple(self.done), tuple(self.estimated))


def rows_processed(operator: ops.Operator) -> list[int]:
    """Per worker, the rows a run processed: its inputs' (an operator without inputs: its output)."""
    if not operator.inputs:
        return [part.height for part in operator.ok]
    rows = [0] * len(operator.ok)
    for source in operator.inputs:
        for worker, part in enumerate(source.ok):
            rows[worker] += part.height
    return rows
