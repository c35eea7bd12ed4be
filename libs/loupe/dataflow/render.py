"""Rendering: a ``DataflowDescription``'s LIR plans (DAGs: a shared node is one operator)
as operators, in dependency order."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import polars as pl

from loupe.common.errors import LoupeError, SqlState
from loupe.dataflow import operators as ops
from loupe.dataflow.batches import TIME, concat, consolidate
from loupe.dataflow.recursion import LetRec
from loupe.dataflow.window import Window
from loupe.plan import lir
from loupe.plan.dataflow import BuildDesc, DataflowDescription, SourceImport
from loupe.plan.scalar import columns_of

# The columns of a node's output its readers use; None: all of them.
Demand = frozenset[int] | None


@dataclass(frozen=True)
class LirRegion:
    """The operators rendered for one LIR node: ids ``[start, end)`` (mz_lir_mapping)."""

    object_id: str
    lir_id: int
    operator: str
    parent_lir_id: int | None
    nesting: int
    start: int
    end: int


class Renderer:
    """Builds a dataflow's operators; ``new_id`` hands out instance-wide operator ids."""

    def __init__(self, desc: DataflowDescription, workers: int, new_id: Callable[[], int]) -> None:
        self.desc = desc
        self.workers = workers
        self.new_id = new_id
        self.operators: list[ops.Operator] = []
        self.hydration_ids: list[int] = []
        self.regions: list[LirRegion] = []
        self.imports: dict[str, ops.Input] = {}
        self.collections: dict[str, ops.Operator] = {}
        # Per source import: the columns some reader uses (None: all).
        self.source_demand: dict[str, Demand] = {s.id: frozenset() for s in desc.source_imports}
        # The object being built's operators, by LIR node (``id()``).
        self.rendered: dict[int, ops.Operator] = {}

    def render(self) -> None:
        for source in self.desc.source_imports:
            types = tuple(t for _, t in source.columns)
            self._import(source.id, ops.Input(types, self.workers, f"Source({source.id})"))
        for index in self.desc.index_imports:
            types = tuple(t for _, t in index.columns)
            self._import(index.on_id, ops.Input(types, self.workers, f"Index({index.index_id})"))
        for build in self.desc.objects_to_build:
            self.demand = demands(build.plan)
            self.rendered = {}
            self.collections[build.id] = self._node(build.id, build.plan, None, 0)
        # An index or sink exported straight from a source import (an index
        # on a table or a materialized view) reads every column of it, through
        # the plan's one node, `Get::PassArrangements` (node 0, as EXPLAIN shows
        # it), whose hydration is reported like any other node's.
        exported = [(e.index_id, e.on_id) for e in self.desc.index_exports]
        exported += [(s.sink_id, s.from_id) for s in self.desc.sink_exports]
        for export_id, collection_id in exported:
            if collection_id in self.source_demand:
                self.source_demand[collection_id] = None
                if not self.desc.objects_to_build and not self.regions:
                    get = lir.Get(0, collection_id, types=self.collections[collection_id].types)
                    self.demand = {}
                    self.rendered = {}
                    self.collections[collection_id] = self._node(export_id, get, None, 0)

    def _import(self, name: str, operator: ops.Input) -> None:
        self._add(operator)
        self.imports[name] = operator
        self.collections[name] = operator

    def _add(self, operator: ops.Operator) -> ops.Operator:
        operator.operator_id = self.new_id()
        self.operators.append(operator)
        return operator

    def _node(
        self, object_id: str, node: lir.Node, parent: int | None, nesting: int
    ) -> ops.Operator:
        """The operator of ``node``, rendered once: a node several parents read (the plan is a
        DAG) is one operator feeding them all, its region under the first parent."""
        known = self.rendered.get(id(node))
        if known is not None:
            return known
        inputs = [self._node(object_id, i, node.id, nesting + 1) for i in node.inputs()]
        operator = self._add(self._operator(node, inputs))
        self.rendered[id(node)] = operator
        # Every LIR node's operators end in a hydration logging operator (seed 002).
        hydration = self.new_id()
        self.hydration_ids.append(hydration)
        self.regions.append(
            LirRegion(
                object_id,
                node.id,
                operator.name,
                parent,
                nesting,
                operator.operator_id,
                hydration + 1,
            )
        )
        return operator

    def _operator(self, node: lir.Node, inputs: list[ops.Operator]) -> ops.Operator:
        workers = self.workers
        if isinstance(node, lir.Get):
            if node.name not in self.collections:
                raise LoupeError(
                    SqlState.INTERNAL_ERROR,
                    f"dataflow {self.desc.id} reads {node.name}, which it neither imports nor builds",
                )
            if node.name in self.source_demand:
                self.source_demand[node.name] = _union(
                    self.source_demand[node.name], self.demand.get(id(node))
                )
            return ops.Passthrough(node, self.collections[node.name], workers, f"Get({node.name})")
        if isinstance(node, lir.Constant):
            return ops.Constant(node, workers, self.desc.as_of)
        if isinstance(node, lir.Mfp):
            return ops.Mfp(node, inputs[0], workers)
        if isinstance(node, lir.FlatMap):
            return ops.FlatMap(node, inputs[0], workers)
        if isinstance(node, lir.ArrangeBy):
            return ops.Passthrough(node, inputs[0], workers, "ArrangeBy")
        if isinstance(node, lir.Join):
            return ops.Join(node, inputs, workers, self.demand.get(id(node)))
        if isinstance(node, lir.Reduce):
            return ops.Reduce(node, inputs[0], workers)
        if isinstance(node, lir.TopK):
            return ops.TopK(node, inputs[0], workers)
        if isinstance(node, lir.Window):
            return Window(node, inputs[0], workers)
        if isinstance(node, lir.Negate):
            return ops.Negate(node.types, inputs, workers)
        if isinstance(node, lir.Threshold):
            return ops.Threshold(node, inputs[0], workers)
        if isinstance(node, lir.Union):
            return ops.Union(node.types, inputs, workers)
        if isinstance(node, lir.LetRec):
            return LetRec(node, inputs, workers, self.desc.as_of, evaluate_once)
        raise LoupeError(
            SqlState.FEATURE_NOT_SUPPORTED,
            f"the compute engine cannot render {type(node).__name__} yet",
        )


_ONCE = "once"


def evaluate_once(
    plan: lir.Node, collections: Mapping[str, tuple[tuple[str, ...], pl.DataFrame]]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``plan``'s updates and errors over ``collections`` (types, updates at time 0), computed
    by rendering it on one worker and running every operator once over ``[0, 1)``."""
    read = {node.name for node in lir.walk(plan) if isinstance(node, lir.Get)}
    imports = tuple(
        SourceImport(name, name, tuple((f"c{i}", t) for i, t in enumerate(collections[name][0])))
        for name in sorted(read)
    )
    columns = tuple((f"c{i}", t) for i, t in enumerate(plan.types))
    desc = DataflowDescription(
        id=_ONCE,
        source_imports=imports,
        objects_to_build=(BuildDesc(_ONCE, plan, columns),),
        as_of=0,
    )
    renderer = Renderer(desc, 1, itertools.count().__next__)
    renderer.render()
    for name, imported in renderer.imports.items():
        imported.pending = [collections[name][1]]
    for operator in renderer.operators:
        operator.run(0, 1)
    root = renderer.collections[_ONCE]
    ok = consolidate(concat(list(root.ok), root.empty))
    return ok.filter(ok[TIME] == 0) if ok.height else ok, root.err


def _union(left: Demand, right: Demand) -> Demand:
    return None if left is None or right is None else left | right


def demands(root: lir.Node) -> dict[int, Demand]:
    """Per node (by ``id()``), the output columns its readers use: joins drop the others early.

    The planner keeps whole rows up to the last projection; a join that
    arranges only the columns read above it stores and moves far less (a
    TPC-H join reads 4 of lineitem's 16 columns). The root is read whole.
    A node several parents read (the plan is a DAG) gets the union of their
    demands: nodes are visited readers first (``lir.walk``), each once.
    """
    found: dict[int, Demand] = {id(root): None}
    for node in lir.walk(root):
        demand = found.get(id(node), frozenset())
        for child, child_demand in zip(node.inputs(), _input_demands(node, demand), strict=True):
            found[id(child)] = _union(found.get(id(child), frozenset()), child_demand)
    return found


def _input_demands(node: lir.Node, demand: Demand) -> list[Demand]:
    """What ``node`` reads of each input to produce ``demand`` of its output."""
    if isinstance(node, lir.Mfp):
        mfp = node.mfp
        wanted = range(len(mfp.projection)) if demand is None else demand
        used = {mfp.projection[i] for i in wanted}
        for scalar in (*mfp.expressions, *mfp.predicates):
            used |= columns_of(scalar)
        return [frozenset(c for c in used if c < mfp.input_arity)]
    if isinstance(node, lir.Join):
        used = set(range(len(node.types))) if demand is None else set(demand)
        for cls in node.equivalences:
            for scalar in cls:
                used |= columns_of(scalar)
        demands: list[Demand] = []
        start = 0
        for child in node.join_inputs:
            end = start + len(child.types)
            demands.append(frozenset(c - start for c in used if start <= c < end))
            start = end
        return demands
    if isinstance(node, lir.Reduce) and node.kind != lir.ReduceKind.DISTINCT:
        used = set()
        for scalar in node.group_key:
            used |= columns_of(scalar)
        for aggregate in node.aggregates:
            for scalar in aggregate.scalars:
                used |= columns_of(scalar)
        return [frozenset(used)]
    if isinstance(node, lir.ArrangeBy | lir.Negate | lir.Union):
        return [demand] * len(node.inputs())
    # Row identity matters (Threshold, Distinct, TopK's ties), or the node is a leaf.
    return [None] * len(node.inputs())
