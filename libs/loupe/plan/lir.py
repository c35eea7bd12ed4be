"""LIR: the physical plan a replica renders, and the lowering from MIR.

Every LIR node has an ``id`` unique within its dataflow: increasing integers
handed out by the lowering context as each node is created (seed 002). Inputs
are lowered before the node that reads them, so a node's id is greater than
its inputs'. A MIR node several parents read (an outer join reads its left
input three times) lowers to one LIR node they all read: a plan is a DAG.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from loupe.plan import mir
from loupe.plan.scalar import Column, Scalar, columns_of, remap, scalar_type, shift


@dataclass(frozen=True)
class MapFilterProject:
    """Append ``expressions`` to the input's columns, keep rows passing ``predicates``, emit ``projection``.

    Expression ``i`` and the predicates may read the input columns and the
    expressions before it (column ``input_arity + j`` is expression ``j``).
    """

    input_arity: int
    expressions: tuple[Scalar, ...] = ()
    predicates: tuple[Scalar, ...] = ()
    projection: tuple[int, ...] = ()

    @classmethod
    def identity(cls, arity: int) -> MapFilterProject:
        return cls(arity, projection=tuple(range(arity)))

    @property
    def is_identity(self) -> bool:
        return (
            not self.expressions
            and not self.predicates
            and self.projection == tuple(range(self.input_arity))
        )

    def map(self, scalars: tuple[Scalar, ...]) -> MapFilterProject:
        """Then append ``scalars`` (over this MFP's output columns)."""
        expressions = list(self.expressions)
        projection = list(self.projection)
        for scalar in scalars:
            expressions.append(remap(scalar, projection.__getitem__))
            projection.append(self.input_arity + len(expressions) - 1)
        return MapFilterProject(
            self.input_arity, tuple(expressions), self.predicates, tuple(projection)
        )

    def filter(self, predicates: tuple[Scalar, ...]) -> MapFilterProject:
        """Then keep only rows where ``predicates`` (over this MFP's output columns) hold."""
        added = tuple(remap(p, self.projection.__getitem__) for p in predicates)
        return MapFilterProject(
            self.input_arity, self.expressions, self.predicates + added, self.projection
        )

    def project(self, outputs: tuple[int, ...]) -> MapFilterProject:
        """Then emit only ``outputs`` (positions in this MFP's output)."""
        projection = tuple(self.projection[i] for i in outputs)
        return MapFilterProject(self.input_arity, self.expressions, self.predicates, projection)


class JoinKind(enum.Enum):
    LINEAR = "Linear"
    DELTA = "Delta"


class ReduceKind(enum.Enum):
    DISTINCT = "Distinct"
    ACCUMULABLE = "Accumulable"
    HIERARCHICAL = "Hierarchical"
    BASIC = "Basic"


@dataclass(frozen=True)
class Node:
    """Base of LIR nodes; ``id`` is unique within the dataflow."""

    id: int
    # PostgreSQL types of the output columns (filled in by lowering).
    types: tuple[str, ...] = field(default=(), kw_only=True, compare=False)

    @property
    def arity(self) -> int:
        return len(self.types)

    def inputs(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True)
class Constant(Node):
    rows: tuple[tuple[object, ...], ...]


@dataclass(frozen=True)
class Get(Node):
    """Read a collection (storage, or another dataflow's index) by name."""

    name: str


@dataclass(frozen=True)
class Mfp(Node):
    input: Node
    mfp: MapFilterProject

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class FlatMap(Node):
    """A table function applied to each row: the row's columns, then the function's, through ``mfp``."""

    input: Node
    func: str
    exprs: tuple[Scalar, ...]
    mfp: MapFilterProject

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class ArrangeBy(Node):
    """Arrange the input by each of ``keys`` (lists of expressions) for a stateful reader."""

    input: Node
    keys: tuple[tuple[Scalar, ...], ...]

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Join(Node):
    join_inputs: tuple[Node, ...]
    equivalences: tuple[tuple[Scalar, ...], ...]
    kind: JoinKind

    def inputs(self) -> tuple[Node, ...]:
        return self.join_inputs


@dataclass(frozen=True)
class Reduce(Node):
    input: Node
    group_key: tuple[Scalar, ...]
    aggregates: tuple[mir.Aggregate, ...]
    kind: ReduceKind

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class TopK(Node):
    input: Node
    order: tuple[mir.OrderKey, ...]
    limit: int | None
    offset: int
    group_key: tuple[int, ...] = ()

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Window(Node):
    """Window functions per partition (``mir.Window``), recomputed for each changed partition."""

    input: Node
    partition_by: tuple[int, ...]
    order: tuple[mir.OrderKey, ...]
    functions: tuple[mir.WindowFunction, ...]

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Negate(Node):
    input: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Threshold(Node):
    input: Node

    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Union(Node):
    union_inputs: tuple[Node, ...]

    def inputs(self) -> tuple[Node, ...]:
        return self.union_inputs


@dataclass(frozen=True)
class LetRec(Node):
    """``WITH MUTUALLY RECURSIVE`` (``mir.LetRec``): ``body`` over the fixpoint of ``bindings``.

    ``bindings`` and ``body`` are plans of their own, evaluated together by
    one operator; they read each binding by ``Get`` of its name. The node's
    inputs are ``externals``: a ``Get`` of every other collection they read.
    """

    names: tuple[str, ...]
    bindings: tuple[Node, ...]
    body: Node
    externals: tuple[Get, ...]
    limit: int | None = None
    return_at_limit: bool = False

    def inputs(self) -> tuple[Node, ...]:
        return self.externals


def lower_to_lir(relation: mir.Relation) -> Node:
    """The LIR of ``relation`` as one dataflow, ids numbered from 0."""
    return LoweringContext().lower(relation)


def walk(node: Node) -> list[Node]:
    """``node`` and all nodes below it, each once, parents before their inputs.

    A plan is a DAG (a shared node is read by several parents): a node
    comes after every node that reads it, so the list is a topological
    order, read from its end it is the order nodes are rendered in.
    """
    order: list[Node] = []  # inputs before their readers
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            order.append(current)
        elif id(current) not in seen:
            seen.add(id(current))
            stack.append((current, True))
            stack.extend((child, False) for child in reversed(current.inputs()))
    return order[::-1]


@dataclass
class LoweringContext:
    """MIR to LIR for one dataflow; hands out the LIR node ids."""

    next_id: int = 0
    _assigned: set[int] = field(default_factory=set)
    # By MIR node identity: a node several parents read (an outer join reads its left
    # input three times) lowers to one LIR node they share. Values hold the key's node, so
    # its id is not reused while lowering runs.
    _lowered: dict[int, tuple[mir.Relation, Node]] = field(default_factory=dict)

    def new_id(self) -> int:
        """A fresh id, unique within this dataflow."""
        node_id = self.next_id
        self.next_id += 1
        assert node_id not in self._assigned
        self._assigned.add(node_id)
        return node_id

    def lower(self, relation: mir.Relation) -> Node:
        known = self._lowered.get(id(relation))
        if known is not None:
            return known[1]
        node = self._lower(relation)
        if not node.types:
            node = dataclasses.replace(node, types=relation.types)
        self._lowered[id(relation)] = (relation, node)
        return node

    def _lower(self, relation: mir.Relation) -> Node:
        if isinstance(relation, mir.Map | mir.Filter | mir.Project):
            return self._mfp(relation)
        if isinstance(relation, mir.Get | mir.LocalGet):
            return Get(self.new_id(), relation.name)
        if isinstance(relation, mir.LetRec):
            return self._let_rec(relation)
        if isinstance(relation, mir.Constant):
            return Constant(self.new_id(), relation.rows)
        if isinstance(relation, mir.Join):
            return self._join(relation)
        if isinstance(relation, mir.Reduce | mir.Distinct):
            return self._reduce(relation)
        if isinstance(relation, mir.TopK):
            top_input = self.lower(relation.input)
            return TopK(
                self.new_id(),
                top_input,
                relation.order,
                relation.limit,
                relation.offset,
                relation.group_key,
            )
        if isinstance(relation, mir.Window):
            window_input = self.lower(relation.input)
            return Window(
                self.new_id(),
                window_input,
                relation.partition_by,
                relation.order,
                relation.functions,
            )
        if isinstance(relation, mir.Union):
            inputs = tuple(self.lower(i) for i in relation.inputs)
            return Union(self.new_id(), inputs)
        if isinstance(relation, mir.FlatMap):
            flat_input = self.lower(relation.input)
            return FlatMap(
                self.new_id(),
                flat_input,
                relation.func,
                relation.exprs,
                MapFilterProject.identity(relation.arity),
            )
        if isinstance(relation, mir.Negate):
            negated = self.lower(relation.input)
            return Negate(self.new_id(), negated)
        if isinstance(relation, mir.Threshold):
            thresholded = self.lower(relation.input)
            return Threshold(self.new_id(), thresholded)
        raise TypeError(f"unknown MIR node {type(relation).__name__}")

    def _let_rec(self, relation: mir.LetRec) -> Node:
        bindings = tuple(self.lower(b) for b in relation.bindings)
        body = self.lower(relation.body)
        local = set(relation.names)
        read: dict[str, tuple[str, ...]] = {}
        for plan in (*bindings, body):
            for node in walk(plan):
                if isinstance(node, Get) and node.name not in local:
                    read.setdefault(node.name, node.types)
        externals = tuple(Get(self.new_id(), name, types=types) for name, types in read.items())
        return LetRec(
            self.new_id(),
            relation.names,
            bindings,
            body,
            externals,
            relation.limit,
            relation.return_at_limit,
        )

    def _mfp(self, relation: mir.Relation) -> Node:
        """Fuse a chain of Map, Filter and Project into one Mfp node."""
        chain: list[mir.Relation] = []
        while isinstance(relation, mir.Map | mir.Filter | mir.Project):
            chain.append(relation)
            relation = relation.input
        mfp = MapFilterProject.identity(relation.arity)
        for step in reversed(chain):
            if isinstance(step, mir.Map):
                mfp = mfp.map(step.scalars)
            elif isinstance(step, mir.Filter):
                mfp = mfp.filter(step.predicates)
            elif isinstance(step, mir.Project):
                mfp = mfp.project(step.outputs)
        lowered = self.lower(relation)
        return lowered if mfp.is_identity else Mfp(self.new_id(), lowered, mfp)

    def _join(self, join: mir.Join) -> Node:
        """Arrange each input by its expressions in the equivalences, then join."""
        starts = [0]
        for relation in join.inputs:
            starts.append(starts[-1] + relation.arity)
        inputs = []
        for i, relation in enumerate(join.inputs):
            lowered = self.lower(relation)
            start, end = starts[i], starts[i + 1]
            local = tuple(
                dict.fromkeys(
                    shift(expr, -start)
                    for cls in join.equivalences
                    for expr in cls
                    if columns_of(expr) and all(start <= c < end for c in columns_of(expr))
                )
            )
            inputs.append(ArrangeBy(self.new_id(), lowered, (local,), types=lowered.types))
        kind = JoinKind.LINEAR if len(inputs) <= 2 else JoinKind.DELTA
        return Join(self.new_id(), tuple(inputs), join.equivalences, kind)

    def _reduce(self, relation: mir.Reduce | mir.Distinct) -> Node:
        lowered = self.lower(relation.input)
        if isinstance(relation, mir.Distinct):
            key = tuple(Column(i) for i in range(relation.arity))
            return Reduce(self.new_id(), lowered, key, (), ReduceKind.DISTINCT)
        return Reduce(
            self.new_id(),
            lowered,
            relation.group_key,
            relation.aggregates,
            reduce_kind(relation.aggregates, lowered.types),
        )


def reduce_kind(
    aggregates: tuple[mir.Aggregate, ...], input_types: tuple[str, ...] = ()
) -> ReduceKind:
    """Accumulable for count/sum/avg, Hierarchical for min/max, Basic otherwise (DISTINCT, mixed,
    sums of intervals: three fields, recomputed per group)."""
    if not aggregates:
        return ReduceKind.DISTINCT
    intervals = any(
        a.func in ("sum", "avg")
        and a.expr is not None
        and input_types
        and scalar_type(a.expr, input_types) == "interval"
        for a in aggregates
    )
    if not intervals and all(
        a.func in ("count", "sum", "avg") and not a.distinct for a in aggregates
    ):
        return ReduceKind.ACCUMULABLE
    if all(a.func in ("min", "max") for a in aggregates):
        return ReduceKind.HIERARCHICAL
    return ReduceKind.BASIC
