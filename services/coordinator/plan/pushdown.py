"""Predicate pushdown: filters move towards the collections they filter.

A Filter above a Project, Union, Negate, Threshold or Distinct filters the
same rows below it; above a Window or a grouped TopK, only predicates over the
partition (group) keys move below it; above a Join, a predicate over one input filters that
input and an equality across two inputs joins them; above a Reduce, a
predicate over group keys filters whole groups, so it filters the input.
Filtering early keeps arrangements small and lets joins use equalities
that a view's WHERE adds to a subquery's or another view's join.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import loupe.plan.mir as mir
from loupe.coordinator.plan.joins import equijoin_sides, owners
from loupe.coordinator.plan.relational import substitute, unify
from loupe.plan.scalar import Scalar, columns_of, remap, shift


def push_predicates(relation: mir.Relation) -> mir.Relation:
    """``relation`` with every Filter moved as far down as it may go.

    A plan is a DAG (an outer join reads its left input three times): each
    node is rewritten once per call, and once per set of predicates pushed
    into it, so a shared input stays one node and the work stays linear
    rather than growing with the number of paths.
    """
    return _Pushdown().pushed(relation)


class _Pushdown:
    """One ``push_predicates`` call: its results by node identity (and predicates)."""

    def __init__(self) -> None:
        # Values hold the key's node, so its id is not reused while the call runs.
        self._pushed: dict[int, tuple[mir.Relation, mir.Relation]] = {}
        # Predicates by their text: literals may hold unhashable values (jsonb).
        self._filtered: dict[tuple[int, str], tuple[mir.Relation, mir.Relation]] = {}

    def pushed(self, relation: mir.Relation) -> mir.Relation:
        known = self._pushed.get(id(relation))
        if known is not None:
            return known[1]
        if isinstance(relation, mir.Filter):
            result = self.filtered(self.pushed(relation.input), list(relation.predicates))
        else:
            result = _with_children(relation, [self.pushed(c) for c in relation.children()])
        self._pushed[id(relation)] = (relation, result)
        return result

    def filtered(self, relation: mir.Relation, predicates: list[Scalar]) -> mir.Relation:
        """``Filter(relation, predicates)`` with the predicates pushed into ``relation``."""
        if not predicates:
            return relation
        key = (id(relation), repr(predicates))
        known = self._filtered.get(key)
        if known is not None:
            return known[1]
        result = _filtered(self, relation, predicates)
        self._filtered[key] = (relation, result)
        return result


def _with_children(relation: mir.Relation, children: list[mir.Relation]) -> mir.Relation:
    if isinstance(relation, mir.Join):
        return mir.Join(tuple(children), relation.equivalences)
    if isinstance(relation, mir.Union):
        return mir.Union(tuple(children))
    if isinstance(relation, mir.LetRec):
        return dataclasses.replace(relation, bindings=tuple(children[:-1]), body=children[-1])
    if not children:
        return relation
    (child,) = children
    return dataclasses.replace(relation, input=child)  # type: ignore[type-var]


def _filtered(push: _Pushdown, relation: mir.Relation, predicates: list[Scalar]) -> mir.Relation:
    """``Filter(relation, predicates)`` with the predicates pushed into ``relation``."""
    if isinstance(relation, mir.Filter):
        return push.filtered(relation.input, [*relation.predicates, *predicates])
    if isinstance(relation, mir.Project):
        below = [remap(p, relation.outputs.__getitem__) for p in predicates]
        return mir.Project(push.filtered(relation.input, below), relation.outputs, relation.names)
    if isinstance(relation, mir.Union):
        return mir.Union(tuple(push.filtered(i, predicates) for i in relation.inputs))
    if isinstance(relation, mir.Negate | mir.Threshold | mir.Distinct):
        return type(relation)(push.filtered(relation.input, predicates))
    if isinstance(relation, mir.FlatMap):
        arity = relation.input.arity
        below = [p for p in predicates if all(c < arity for c in columns_of(p))]
        above = [p for p in predicates if p not in below]
        flat = mir.FlatMap(
            push.filtered(relation.input, below), relation.func, relation.exprs, relation.names
        )
        return _keep(flat, above)
    if isinstance(relation, mir.Map):
        arity = relation.input.arity
        below = [p for p in predicates if all(c < arity for c in columns_of(p))]
        above = [p for p in predicates if p not in below]
        mapped = mir.Map(push.filtered(relation.input, below), relation.scalars, relation.names)
        return _keep(mapped, above)
    if isinstance(relation, mir.Join):
        return _into_join(push, relation, predicates)
    if isinstance(relation, mir.Reduce):
        return _below_reduce(push, relation, predicates)
    if isinstance(relation, mir.LetRec):  # the result is the body's
        return dataclasses.replace(relation, body=push.filtered(relation.body, predicates))
    if isinstance(relation, mir.TopK):
        keys = set(relation.group_key)
        below = [p for p in predicates if columns_of(p) and columns_of(p) <= keys]
        above = [p for p in predicates if p not in below]
        top = mir.TopK(
            push.filtered(relation.input, below),
            relation.order,
            relation.limit,
            relation.offset,
            relation.group_key,
        )
        return _keep(top, above)
    if isinstance(relation, mir.Window):
        # Only predicates over partition keys: they drop whole partitions, leaving the
        # others' rows, and so their window values, as they were.
        keys = set(relation.partition_by)
        below = [p for p in predicates if columns_of(p) and columns_of(p) <= keys]
        above = [p for p in predicates if p not in below]
        window = dataclasses.replace(relation, input=push.filtered(relation.input, below))
        return _keep(window, above)
    return mir.Filter(relation, tuple(predicates))


def _keep(relation: mir.Relation, predicates: Sequence[Scalar]) -> mir.Relation:
    return mir.Filter(relation, tuple(predicates)) if predicates else relation


def _into_join(push: _Pushdown, join: mir.Join, predicates: list[Scalar]) -> mir.Relation:
    """Predicates over one input filter it; equalities across two inputs join them."""
    starts = [0]
    for child in join.inputs:
        starts.append(starts[-1] + child.arity)
    types = join.types
    local: list[list[Scalar]] = [[] for _ in join.inputs]
    equivalences = list(join.equivalences)
    above = []
    for predicate in predicates:
        sides = equijoin_sides(predicate, starts)
        inputs = owners(predicate, starts)
        if sides is not None:
            equivalences.append(unify(*sides, types))
        elif len(inputs) == 1:
            (owner,) = inputs
            local[owner].append(shift(predicate, -starts[owner]))
        else:
            above.append(predicate)
    children = tuple(
        push.filtered(child, own) for child, own in zip(join.inputs, local, strict=True)
    )
    return _keep(mir.Join(children, tuple(equivalences)), above)


def _below_reduce(push: _Pushdown, reduce: mir.Reduce, predicates: list[Scalar]) -> mir.Relation:
    """Predicates over group keys only, rewritten over the keys' expressions, filter the input.

    A Reduce without keys always has its one row (or none), so nothing
    moves below it.
    """
    width = len(reduce.group_key)
    below, above = [], []
    for predicate in predicates:
        columns = columns_of(predicate)
        if width and columns and all(c < width for c in columns):
            below.append(_substitute_keys(predicate, reduce.group_key))
        else:
            above.append(predicate)
    narrowed = mir.Reduce(
        push.filtered(reduce.input, below), reduce.group_key, reduce.aggregates, reduce.names
    )
    return _keep(narrowed, above)


def _substitute_keys(predicate: Scalar, keys: tuple[Scalar, ...]) -> Scalar:
    """``predicate`` over a Reduce's key columns, rewritten over its input."""
    return substitute(predicate, dict(enumerate(keys)))
