"""Cheap MIR optimisations: predicate pushdown, then reading only the columns a plan uses.

SQL reads whole tables and a planned query carries every column of every
join input up to its SELECT list; arrangements (joins, reduces) then store
columns nothing reads. ``prune`` walks the plan top-down with the set of
columns each node's parents need (all of them, for a node several
read: plans are DAGs) and narrows every node to those, as
Materialize's projection pushdown does: a TPC-H join keeps the four
lineitem columns it uses, not sixteen.

Nodes whose meaning depends on whole rows (Distinct, Threshold, Reduce
keys and aggregates) still read all of their inputs' columns they use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import loupe.plan.mir as mir
from loupe.coordinator.plan.pushdown import push_predicates
from loupe.plan.scalar import Scalar, columns_of, remap


def optimize(relation: mir.Relation) -> mir.Relation:
    """``relation`` with its filters pushed down (``pushdown``) and narrowed to the columns it
    uses; the same output columns, names included."""
    pruned = prune(push_predicates(relation), range(relation.arity))
    if pruned.columns == relation.columns:
        return pruned
    names = tuple(name for name, _ in relation.columns)
    if isinstance(pruned, mir.Project):
        return mir.Project(pruned.input, pruned.outputs, names)
    return mir.Project(pruned, tuple(range(pruned.arity)), names)


def prune(relation: mir.Relation, demand: Sequence[int] | set[int] | range) -> mir.Relation:
    """A relation whose columns are exactly ``relation``'s columns ``sorted(demand)``."""
    wanted = set(demand)
    return _Prune(_demands(relation, wanted)).exact(relation, wanted)


class _Prune:
    """One ``prune`` call: each node narrowed once, to what all its parents read.

    A plan is a DAG (an outer join reads its left input three times). A
    node several parents read keeps the union of their demands (``totals``),
    so it stays one node they share and the work stays linear; narrowed per
    parent, a chain of outer joins over different keys doubled per join.
    """

    def __init__(self, totals: dict[int, set[int]]) -> None:
        self.totals = totals
        # Values hold the key's node, so its id is not reused while the call runs.
        self._narrowed: dict[int, tuple[mir.Relation, tuple[mir.Relation, list[int]]]] = {}
        self._exact: dict[tuple[int, tuple[int, ...]], tuple[mir.Relation, mir.Relation]] = {}

    def exact(
        self, relation: mir.Relation, demand: Sequence[int] | set[int] | range
    ) -> mir.Relation:
        """``relation``'s columns ``sorted(demand)``, exactly."""
        wanted = sorted(set(demand))
        key = (id(relation), tuple(wanted))
        known = self._exact.get(key)
        if known is None:
            narrowed, kept = self.narrowed(relation, set(wanted))
            known = (relation, _select(narrowed, kept, wanted))
            self._exact[key] = known
        return known[1]

    def narrowed(self, relation: mir.Relation, demand: set[int]) -> tuple[mir.Relation, list[int]]:
        """``(narrowed, kept)``: the narrowed relation holds the original columns ``kept`` ⊇
        demand (⊇ every parent's demand)."""
        known = self._narrowed.get(id(relation))
        if known is None:
            total = self.totals.get(id(relation), demand)
            known = (relation, _prune(self, relation, total))
            self._narrowed[id(relation)] = known
        return known[1]


class _Demands(_Prune):
    """Records what each node's parents read of it, the nodes left as they are."""

    def __init__(self) -> None:
        super().__init__({})

    def exact(
        self, relation: mir.Relation, demand: Sequence[int] | set[int] | range
    ) -> mir.Relation:
        wanted = sorted(set(demand))
        self.totals.setdefault(id(relation), set()).update(wanted)
        return _select(relation, list(everything_of(relation)), wanted)

    def narrowed(self, relation: mir.Relation, demand: set[int]) -> tuple[mir.Relation, list[int]]:
        self.totals.setdefault(id(relation), set()).update(demand)
        return relation, list(everything_of(relation))


def _demands(root: mir.Relation, demand: set[int]) -> dict[int, set[int]]:
    """Per node (by ``id()``), the union of the columns its parents read.

    Nodes are visited parents first, so a node's total is complete before
    it passes demands on; ``_prune`` over a recorder gives each node's
    demands of its children (the node it builds is dropped).
    """
    recorder = _Demands()
    recorder.totals[id(root)] = set(demand)
    for node in _parents_first(root):
        _prune(recorder, node, recorder.totals[id(node)])
    return recorder.totals


def _parents_first(root: mir.Relation) -> list[mir.Relation]:
    """Every node below ``root`` once, each after all nodes that read it."""
    order: list[mir.Relation] = []  # inputs before their readers
    seen: set[int] = set()
    stack: list[tuple[mir.Relation, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in node.children())
    return order[::-1]


def everything_of(relation: mir.Relation) -> range:
    return range(relation.arity)


def _select(relation: mir.Relation, kept: list[int], wanted: list[int]) -> mir.Relation:
    """``relation`` (holding the original columns ``kept``) projected onto ``wanted``."""
    if kept == wanted:
        return relation
    position = {column: index for index, column in enumerate(kept)}
    return _project(relation, tuple(position[c] for c in wanted))


def _project(
    relation: mir.Relation, outputs: tuple[int, ...], names: tuple[str, ...] | None = None
) -> mir.Relation:
    """``Project(relation, outputs)``, fused with a Project below, dropped when it is the identity.

    Names matter only at the root (``optimize`` keeps those), so inner
    renames go.
    """
    while isinstance(relation, mir.Project):
        outputs = tuple(relation.outputs[i] for i in outputs)
        relation = relation.input
    if outputs == tuple(range(relation.arity)):
        return relation
    return mir.Project(relation, outputs, names)


def _remapped(exprs: Sequence[Scalar], kept: list[int]) -> tuple[Scalar, ...]:
    position = {column: index for index, column in enumerate(kept)}
    return tuple(remap(e, position.__getitem__) for e in exprs)


def _columns(exprs: Sequence[Scalar]) -> set[int]:
    return set().union(*(columns_of(e) for e in exprs)) if exprs else set()


def _prune(
    pruning: _Prune, relation: mir.Relation, demand: set[int]
) -> tuple[mir.Relation, list[int]]:
    """``(narrowed, kept)``: the narrowed relation holds the original columns ``kept`` ⊇ demand."""
    everything = list(range(relation.arity))
    if isinstance(relation, mir.Get | mir.Constant | mir.LocalGet):
        return relation, everything
    if isinstance(relation, mir.LetRec):
        # A binding's columns are read by LocalGets anywhere: each keeps all of them.
        bindings = tuple(pruning.exact(b, everything_of(b)) for b in relation.bindings)
        body, kept = pruning.narrowed(relation.body, demand)
        return replace(relation, bindings=bindings, body=body), kept
    if isinstance(relation, mir.Project):
        wanted = sorted(demand)
        inner = pruning.exact(relation.input, {relation.outputs[i] for i in wanted})
        below = sorted({relation.outputs[i] for i in wanted})
        position = {column: index for index, column in enumerate(below)}
        picked = tuple(position[relation.outputs[i]] for i in wanted)
        return _project(inner, picked), wanted
    if isinstance(relation, mir.Map):
        return _prune_map(pruning, relation, demand)
    if isinstance(relation, mir.Filter):
        need = demand | _columns(relation.predicates)
        inner, kept = pruning.narrowed(relation.input, need)
        return mir.Filter(inner, _remapped(relation.predicates, kept)), kept
    if isinstance(relation, mir.Join):
        return _prune_join(pruning, relation, demand)
    if isinstance(relation, mir.Reduce):
        need = _columns(relation.group_key) | _columns(
            [s for a in relation.aggregates for s in a.scalars]
        )
        inner = pruning.exact(relation.input, need)
        kept = sorted(need)
        aggregates = tuple(
            a.map_scalars(lambda s: _remapped([s], kept)[0]) for a in relation.aggregates
        )
        group_key = _remapped(relation.group_key, kept)
        return mir.Reduce(inner, group_key, aggregates, relation.names), everything
    if isinstance(relation, mir.TopK):
        need = demand | {k.column for k in relation.order} | set(relation.group_key)
        inner, kept = pruning.narrowed(relation.input, need)
        position = {column: index for index, column in enumerate(kept)}
        order = tuple(
            mir.OrderKey(position[k.column], k.desc, k.nulls_last) for k in relation.order
        )
        top_group = tuple(position[c] for c in relation.group_key)
        return mir.TopK(inner, order, relation.limit, relation.offset, top_group), kept
    if isinstance(relation, mir.Window):
        return _prune_window(pruning, relation, demand)
    if isinstance(relation, mir.Negate):
        inner, kept = pruning.narrowed(relation.input, demand)
        return mir.Negate(inner), kept
    if isinstance(relation, mir.FlatMap):
        width = relation.input.arity
        need = {c for c in demand if c < width} | _columns(relation.exprs)
        inner, kept = pruning.narrowed(relation.input, need)
        flat = mir.FlatMap(inner, relation.func, _remapped(relation.exprs, kept), relation.names)
        outputs = len(relation.names)
        return flat, [*kept, *range(width, width + outputs)]
    if isinstance(relation, mir.Union):
        wanted = sorted(demand)
        return mir.Union(tuple(pruning.exact(i, wanted) for i in relation.inputs)), wanted
    if isinstance(relation, mir.Distinct | mir.Threshold):  # whole rows matter
        inner = pruning.exact(relation.input, everything)
        return type(relation)(inner), everything
    raise TypeError(f"unknown MIR node {type(relation).__name__}")


def _prune_map(
    pruning: _Prune, relation: mir.Map, demand: set[int]
) -> tuple[mir.Relation, list[int]]:
    """Drop unused map expressions (keeping those later ones read) and unused input columns."""
    arity = relation.input.arity
    needed = {c - arity for c in demand if c >= arity}
    for index in sorted(needed, reverse=True):  # an expression may read earlier ones
        needed |= {c - arity for c in columns_of(relation.scalars[index]) if c >= arity}
    kept_scalars = sorted(needed)
    need = {c for c in demand if c < arity}
    need |= {c for j in kept_scalars for c in columns_of(relation.scalars[j]) if c < arity}
    inner, kept = pruning.narrowed(relation.input, need)
    layout = kept + [arity + j for j in kept_scalars]
    position = {column: index for index, column in enumerate(layout)}
    scalars = tuple(remap(relation.scalars[j], position.__getitem__) for j in kept_scalars)
    names = tuple(relation.names[j] for j in kept_scalars)
    if not scalars:
        return inner, kept
    return mir.Map(inner, scalars, names), layout


def _prune_window(
    pruning: _Prune, relation: mir.Window, demand: set[int]
) -> tuple[mir.Relation, list[int]]:
    """Only the functions read above; none read: the input's rows, which the Window keeps one
    for one."""
    width = relation.input.arity
    used = [(i, f) for i, f in enumerate(relation.functions) if width + i in demand]
    need = {c for c in demand if c < width}
    if not used:
        return pruning.narrowed(relation.input, need)
    need |= set(relation.partition_by) | {k.column for k in relation.order}
    need |= {a for _, f in used for a in f.args}
    inner, kept = pruning.narrowed(relation.input, need)
    position = {column: index for index, column in enumerate(kept)}
    window = mir.Window(
        inner,
        tuple(position[c] for c in relation.partition_by),
        tuple(mir.OrderKey(position[k.column], k.desc, k.nulls_last) for k in relation.order),
        tuple(replace(f, args=tuple(position[a] for a in f.args)) for _, f in used),
        tuple(relation.names[i] for i, _ in used),
    )
    return window, [*kept, *(width + i for i, _ in used)]


def _prune_join(
    pruning: _Prune, relation: mir.Join, demand: set[int]
) -> tuple[mir.Relation, list[int]]:
    """Each input narrowed to what the parent and the equivalences read."""
    need = demand | _columns([e for cls in relation.equivalences for e in cls])
    inputs: list[mir.Relation] = []
    kept: list[int] = []
    start = 0
    for child in relation.inputs:
        local = {c - start for c in need if start <= c < start + child.arity}
        inputs.append(pruning.exact(child, local))
        kept.extend(start + c for c in sorted(local))
        start += child.arity
    equivalences = tuple(_remapped(cls, kept) for cls in relation.equivalences)
    return mir.Join(tuple(inputs), equivalences), kept
