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
    """``relation`` with every Filter moved as far down as it may go."""
    if isinstance(relation, mir.Filter):
        return _filtered(push_predicates(relation.input), list(relation.predicates))
    return _with_children(relation, [push_predicates(c) for c in relation.children()])


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


def _filtered(relation: mir.Relation, predicates: list[Scalar]) -> mir.Relation:
    """``Filter(relation, predicates)`` with the predicates pushed into ``relation``."""
    if not predicates:
        return relation
    if isinstance(relation, mir.Filter):
        return _filtered(relation.input, [*relation.predicates, *predicates])
    if isinstance(relation, mir.Project):
        below = [remap(p, relation.outputs.__getitem__) for p in predicates]
        return mir.Project(_filtered(relation.input, below), relation.outputs, relation.names)
    if isinstance(relation, mir.Union):
        return mir.Union(tuple(_filtered(i, predicates) for i in relation.inputs))
    if isinstance(relation, mir.Negate | mir.Threshold | mir.Distinct):
        return type(relation)(_filtered(relation.input, predicates))
    if isinstance(relation, mir.FlatMap):
        arity = relation.input.arity
        below = [p for p in predicates if all(c < arity for c in columns_of(p))]
        above = [p for p in predicates if p not in below]
        flat = mir.FlatMap(
            _filtered(relation.input, below), relation.func, relation.exprs, relation.names
        )
        return _keep(flat, above)
    if isinstance(relation, mir.Map):
        arity = relation.input.arity
        below = [p for p in predicates if all(c < arity for c in columns_of(p))]
        above = [p for p in predicates if p not in below]
        mapped = mir.Map(_filtered(relation.input, below), relation.scalars, relation.names)
        return _keep(mapped, above)
    if isinstance(relation, mir.Join):
        return _into_join(relation, predicates)
    if isinstance(relation, mir.Reduce):
        return _below_reduce(relation, predicates)
    if isinstance(relation, mir.LetRec):  # the result is the body's
        return dataclasses.replace(relation, body=_filtered(relation.body, predicates))
    if isinstance(relation, mir.TopK):
        keys = set(relation.group_key)
        below = [p for p in predicates if columns_of(p) and columns_of(p) <= keys]
        above = [p for p in predicates if p not in below]
        top = mir.TopK(
            _filtered(relation.input, below),
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
        window = dataclasses.replace(relation, input=_filtered(relation.input, below))
        return _keep(window, above)
    return mir.Filter(relation, tuple(predicates))


def _keep(relation: mir.Relation, predicates: Sequence[Scalar]) -> mir.Relation:
    return mir.Filter(relation, tuple(predicates)) if predicates else relation


def _into_join(join: mir.Join, predicates: list[Scalar]) -> mir.Relation:
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
    children = tuple(_filtered(child, own) for child, own in zip(join.inputs, local, strict=True))
    return _keep(mir.Join(children, tuple(equivalences)), above)


def _below_reduce(reduce: mir.Reduce, predicates: list[Scalar]) -> mir.Relation:
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
        _filtered(reduce.input, below), reduce.group_key, reduce.aggregates, reduce.names
    )
    return _keep(narrowed, above)


def _substitute_keys(predicate: Scalar, keys: tuple[Scalar, ...]) -> Scalar:
    """``predicate`` over a Reduce's key columns, rewritten over its input."""
    return substitute(predicate, dict(enumerate(keys)))
