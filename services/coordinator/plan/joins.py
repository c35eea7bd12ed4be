"""Joins as MIR: inner-join runs with equivalences, outer joins, JOIN … USING scopes.

The engine's joins are inner joins whose equivalence classes must hold;
everything else a SQL join does is built here from them (``relational``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlglot import exp

import loupe.plan.mir as mir
from loupe.coordinator.plan import relational
from loupe.coordinator.plan.scalars import unsupported
from loupe.coordinator.plan.scope import Scope
from loupe.plan.scalar import Call, Cast, Column, Scalar, columns_of, shift


def is_comma(join: exp.Join) -> bool:
    """Whether ``join`` is a comma in FROM (``FROM a, b``), not a JOIN keyword."""
    keywords = ("side", "kind", "on", "using", "method")
    return not any(join.args.get(k) for k in keywords)


def join_scopes(select: exp.Select, scopes: list[Scope]) -> list[Scope]:
    """The scope after each FROM item: the items so far, with JOIN … USING's merged columns.

    A comma binds looser than JOIN: USING names columns of the items after the last comma.
    """
    result = [scopes[0]]
    start = 0  # the first column of the current comma-separated group
    for join, right in zip(select.args.get("joins") or [], scopes[1:], strict=True):
        left = result[-1]
        if is_comma(join):
            start = len(left.columns)
        joined = left + right
        group = Scope(left.columns[start:])
        names = _using_names(join, group, right)
        if names:
            side = (join.side or "").upper()
            if side == "FULL":
                raise unsupported("FULL JOIN … USING")
            left_positions = [start + group.lookup(None, n) for n in names]
            right_positions = [len(left.columns) + right.lookup(None, n) for n in names]
            merged, shadowed = (
                (right_positions, left_positions)
                if side == "RIGHT"
                else (left_positions, right_positions)
            )
            joined = joined.using(merged, shadowed, start)
        result.append(joined)
    return result


def _using_names(join: exp.Join, left: Scope, right: Scope) -> list[str]:
    """The columns JOIN … USING (or NATURAL JOIN) equates."""
    if str(join.args.get("method") or "").upper() == "NATURAL":
        left_names = {left.columns[i].name for i in left.visible()}
        return [
            right.columns[i].name for i in right.visible() if right.columns[i].name in left_names
        ]
    if join.args.get("method"):
        raise unsupported(f"{join.args['method']} JOIN")
    return [identifier.name for identifier in join.args.get("using") or []]


def using_equalities(join: exp.Join, left: Scope, joined: Scope, start: int = 0) -> list[Scalar]:
    """``left.k = right.k`` for each column of JOIN … USING (k) (``joined`` is after the join;
    the left side's group starts at column ``start``, after the last comma)."""
    right = Scope(joined.columns[len(left.columns) :])
    right = Scope(tuple(replace(c, qualified_only=False) for c in right.columns))
    group = Scope(left.columns[start:])
    equalities: list[Scalar] = []
    for name in _using_names(join, group, right):
        left_position = start + group.lookup(None, name)
        right_position = len(left.columns) + right.lookup(None, name)
        equalities.append(Call("eq", (Column(left_position), Column(right_position))))
    return equalities


def factor_or(predicate: Scalar) -> list[Scalar]:
    """``(a AND b) OR (a AND c)`` as ``[a, b OR c]``: conjuncts every branch shares come out,
    so a join condition repeated in each branch of an OR still joins (TPC-H Q19)."""
    if not (isinstance(predicate, Call) and predicate.func == "or"):
        return [predicate]
    branches = [_and_terms(arg) for arg in predicate.args]
    shared = [term for term in branches[0] if all(term in b for b in branches[1:])]
    if not shared:
        return [predicate]
    rests = [[t for t in b if t not in shared] for b in branches]
    if any(not rest for rest in rests):  # one branch is just the shared part: OR is true
        return shared
    alternatives = tuple(r[0] if len(r) == 1 else Call("and", tuple(r)) for r in rests)
    return [*shared, Call("or", alternatives)]


def _and_terms(predicate: Scalar) -> list[Scalar]:
    if isinstance(predicate, Call) and predicate.func == "and":
        return [t for arg in predicate.args for t in _and_terms(arg)]
    return [predicate]


def inner_join(inputs: list[mir.Relation], predicates: list[Scalar]) -> mir.Relation:
    """The inputs joined: equalities across two inputs become equivalences, predicates over
    one input filter that input before the join, the rest filter the join's output."""
    if len(inputs) == 1:
        return mir.Filter(inputs[0], tuple(predicates)) if predicates else inputs[0]
    starts = [0]
    for relation in inputs:
        starts.append(starts[-1] + relation.arity)
    types = tuple(t for r in inputs for t in r.types)
    equivalences, rest = [], []
    local: list[list[Scalar]] = [[] for _ in inputs]
    for predicate in predicates:
        sides = equijoin_sides(predicate, starts)
        owned = owners(predicate, starts)
        if sides is not None:
            equivalences.append(relational.unify(*sides, types))
        elif len(owned) == 1:
            (owner,) = owned
            local[owner].append(shift(predicate, -starts[owner]))
        else:
            rest.append(predicate)
    filtered = tuple(
        mir.Filter(relation, tuple(own)) if own else relation
        for relation, own in zip(inputs, local, strict=True)
    )
    joined = mir.Join(filtered, tuple(equivalences))
    return mir.Filter(joined, tuple(rest)) if rest else joined


def owners(expr: Scalar, starts: Sequence[int]) -> set[int]:
    """The join inputs whose columns ``expr`` reads."""
    return {next(i for i in range(len(starts) - 1) if c < starts[i + 1]) for c in columns_of(expr)}


def equijoin_sides(predicate: Scalar, starts: Sequence[int]) -> tuple[Scalar, Scalar] | None:
    """``(a, b)`` when ``predicate`` is ``a = b`` with a and b over two different inputs."""
    if not (isinstance(predicate, Call) and predicate.func == "eq"):
        return None
    sides = []
    for arg in predicate.args:
        inputs = owners(arg, starts)
        if len(inputs) != 1:
            return None
        sides.append(inputs.pop())
    if sides[0] == sides[1]:
        return None
    left, right = predicate.args
    return left, right


def outer_join(
    left: mir.Relation, right: mir.Relation, on: list[Scalar], side: str
) -> mir.Relation:
    """``left`` LEFT/RIGHT/FULL JOIN ``right`` ON the conjuncts ``on`` (over both, concatenated)."""
    arity = left.arity
    equalities, left_only, right_only, mixed = [], [], [], []
    for predicate in on:
        sides = equijoin_sides(predicate, (0, arity, arity + right.arity))
        columns = columns_of(predicate)
        if sides is not None:
            first, second = sides
            if min(columns_of(first)) >= arity:
                first, second = second, first
            equalities.append((first, shift(second, -arity)))
        elif all(c < arity for c in columns):
            left_only.append(predicate)
        elif all(c >= arity for c in columns):
            right_only.append(shift(predicate, -arity))
        else:
            mixed.append(predicate)
    return relational.outer_join(
        left,
        right,
        equalities,
        left_only,
        right_only,
        mixed,
        preserve_left=side in ("LEFT", "FULL"),
        preserve_right=side in ("RIGHT", "FULL"),
    )


# Functions that are NULL when any argument is: a predicate over them rejects NULLs.
_STRICT = {"add", "sub", "mul", "div", "mod", "neg", "concat", "upper", "lower", "length"}
_NULL_REJECTING = {"eq", "neq", "lt", "lte", "gt", "gte", "like", "ilike", "between"}


def simplified_side(
    side: str, where: Sequence[Scalar], left_arity: int, arity: int, left_start: int = 0
) -> str:
    """The join ``side`` after WHERE: an outer join whose padded rows WHERE always rejects
    is no outer join (``t LEFT JOIN u … WHERE u.y > 0`` is an inner join).

    Padding only adds NULLs, so a conjunct that is not true when the padded
    side's columns are all NULL removes every padded row, here and after
    later joins. The left side is the columns from ``left_start`` (items
    before a comma in FROM are not part of it).
    """
    right = range(left_arity, arity)
    left = range(left_start, left_arity)
    keep_left = side in ("LEFT", "FULL") and not any(_rejects_nulls(p, right) for p in where)
    keep_right = side in ("RIGHT", "FULL") and not any(_rejects_nulls(p, left) for p in where)
    if keep_left and keep_right:
        return "FULL"
    if keep_left:
        return "LEFT"
    return "RIGHT" if keep_right else ""


def _rejects_nulls(predicate: Scalar, columns: range) -> bool:
    """Whether ``predicate`` is never true when ``columns`` are all NULL."""
    if not isinstance(predicate, Call):
        return False
    if predicate.func in _NULL_REJECTING or predicate.func == "is_not_null":
        return any(_null_when_null(arg, columns) for arg in predicate.args)
    if predicate.func == "and":
        return any(_rejects_nulls(arg, columns) for arg in predicate.args)
    if predicate.func == "or":
        return all(_rejects_nulls(arg, columns) for arg in predicate.args)
    return False


def _null_when_null(expr: Scalar, columns: range) -> bool:
    """Whether ``expr`` is NULL when ``columns`` are all NULL."""
    if isinstance(expr, Column):
        return expr.index in columns
    if isinstance(expr, Cast):
        return _null_when_null(expr.expr, columns)
    if isinstance(expr, Call) and expr.func in _STRICT:
        return any(_null_when_null(arg, columns) for arg in expr.args)
    return False
