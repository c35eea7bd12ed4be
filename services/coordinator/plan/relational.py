"""MIR building blocks for the SQL the engine has no operator for.

The engine joins only inner joins and has no semijoin, antijoin or outer
join; these are written with Join, Distinct, Negate and Union, as
Materialize's decorrelation does:

- semijoin(R, S): R joined with the DISTINCT keys of S, so each R row is
  kept once or not at all;
- antijoin(R, S): R minus semijoin(R, S). The subtrahend is a sub-multiset
  of R, so the difference never goes negative and needs no Threshold (as
  Materialize's threshold elision proves);
- outer joins: the inner join plus the unmatched rows of a preserved side,
  padded with NULLs, where unmatched = side minus semijoin(side, the inner
  join's matches).

Join equivalences follow SQL ``=``: a NULL never matches. Where whole rows
must match (rows that may hold NULLs), keys are made null-safe first.

MIR has no let-bindings: a relation used twice (antijoins and outer joins
read their input two or three times) is one node several parents read, so a
plan is a DAG. The optimizer, lowering, the codec and the renderer keep such
a node shared (one LIR node, one operator); rebuilt as a tree, a chain of
outer joins would grow threefold per join.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

import loupe.plan.mir as mir
from loupe import sqltypes
from loupe.plan.scalar import (
    NUMERIC_RANK,
    Call,
    Case,
    Cast,
    Column,
    Literal,
    Scalar,
    scalar_type,
    shift,
)

# A value of each type that stands in for NULL in a null-safe key (paired with is_null).
_ZERO: dict[str, object] = {
    "int2": 0,
    "int4": 0,
    "int8": 0,
    "uint8": 0,
    "float4": 0.0,
    "float8": 0.0,
    "numeric": "0",
    "text": "",
    "jsonb": "",
    "bool": False,
    "date": datetime.date(1970, 1, 1),
    "timestamp": datetime.datetime(1970, 1, 1),
    "timestamptz": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC),
    "interval": datetime.timedelta(0),
    "uuid": "00000000-0000-0000-0000-000000000000",
    "uint2": 0,
    "uint4": 0,
}


def project_exprs(relation: mir.Relation, exprs: Sequence[Scalar]) -> mir.Relation:
    """A relation of one column per expression of ``relation`` (a Project when all are columns)."""
    if all(isinstance(e, Column) for e in exprs):
        outputs = tuple(e.index for e in exprs if isinstance(e, Column))
        if isinstance(relation, mir.Project):  # compose rather than stack projections
            return mir.Project(relation.input, tuple(relation.outputs[i] for i in outputs))
        return mir.Project(relation, outputs)
    arity = relation.arity
    mapped = mir.Map(relation, tuple(exprs), tuple(f"key{i}" for i in range(len(exprs))))
    return mir.Project(mapped, tuple(range(arity, arity + len(exprs))))


def unify(left: Scalar, right: Scalar, types: Sequence[str]) -> tuple[Scalar, Scalar]:
    """``left`` and ``right`` cast to one numeric type when they differ, so a join can compare them."""
    left_type, right_type = scalar_type(left, tuple(types)), scalar_type(right, tuple(types))
    if left_type == right_type or left_type not in NUMERIC_RANK or right_type not in NUMERIC_RANK:
        return left, right
    common = sqltypes.common_numeric([left_type, right_type])
    return (
        left if left_type == common else Cast(left, common),
        right if right_type == common else Cast(right, common),
    )


def keyed_join(
    left: mir.Relation,
    left_keys: Sequence[Scalar],
    right: mir.Relation,
    right_keys: Sequence[Scalar],
) -> mir.Join:
    """``left`` joined with ``right`` where each left key equals its right key."""
    types = left.types + right.types
    classes = []
    for left_key, right_key in zip(left_keys, right_keys, strict=True):
        classes.append(unify(left_key, shift(right_key, left.arity), types))
    return mir.Join((left, right), tuple(classes))


def semijoin(
    relation: mir.Relation,
    keys: Sequence[Scalar],
    other: mir.Relation,
    other_keys: Sequence[Scalar],
) -> mir.Relation:
    """The rows of ``relation`` whose ``keys`` equal ``other_keys`` of some row of ``other``."""
    distinct_keys = project_exprs(other, other_keys)
    if not _unique(other, other_keys):
        distinct_keys = mir.Distinct(distinct_keys)
    joined = keyed_join(relation, keys, distinct_keys, [Column(i) for i in range(len(other_keys))])
    return mir.Project(joined, tuple(range(relation.arity)))


def _unique(relation: mir.Relation, keys: Sequence[Scalar]) -> bool:
    """Whether no two rows of ``relation`` agree on all of ``keys`` (a Reduce's group key)."""
    columns = [k.index for k in keys if isinstance(k, Column)]
    if len(columns) != len(keys):
        return False
    if isinstance(relation, mir.Project):
        return _unique(relation.input, [Column(relation.outputs[c]) for c in columns])
    if isinstance(relation, mir.Reduce):
        group = range(len(relation.group_key))
        return bool(relation.group_key) and set(group) <= set(columns)
    return isinstance(relation, mir.Distinct) and set(columns) >= set(range(relation.arity))


def minus(relation: mir.Relation, subset: mir.Relation) -> mir.Relation:
    """``relation`` without ``subset``, which must be a sub-multiset of it."""
    return mir.Union((relation, mir.Negate(subset)))


def antijoin(
    relation: mir.Relation,
    keys: Sequence[Scalar],
    other: mir.Relation,
    other_keys: Sequence[Scalar],
) -> mir.Relation:
    """The rows of ``relation`` whose ``keys`` match no row of ``other`` (NULL keys match none)."""
    return minus(relation, semijoin(relation, keys, other, other_keys))


def null_safe_keys(relation: mir.Relation) -> list[Scalar]:
    """Keys that are equal exactly when two rows of ``relation`` are equal, NULLs included."""
    return null_safe([Column(i) for i in range(relation.arity)], relation.types)


def null_safe(exprs: Sequence[Scalar], types: Sequence[str]) -> list[Scalar]:
    """Keys that are equal exactly when ``exprs`` are equal or both NULL (is_null, coalesce)."""
    keys: list[Scalar] = []
    for expr, type_ in zip(exprs, types, strict=True):
        keys.append(Call("is_null", (expr,)))
        if type_ in _ZERO:
            keys.append(Call("coalesce", (expr, Literal(_ZERO[type_], type_))))
        elif type_ != "unknown":  # no zero literal of the type: its text stands for it
            keys.append(Call("coalesce", (Cast(expr, "text"), Literal("", "text"))))
    return keys


def null_row(types: Sequence[str]) -> tuple[Scalar, ...]:
    """One NULL of each type."""
    return tuple(Literal(None, t) for t in types)


def pad(relation: mir.Relation, before: Sequence[mir.ColumnSpec], after: Sequence[mir.ColumnSpec]):
    """``relation`` with NULL columns ``before`` and ``after`` its own."""
    nulls = null_row([t for _, t in (*before, *after)])
    names = tuple(n for n, _ in (*before, *after))
    if not nulls:
        return relation
    mapped = mir.Map(relation, nulls, names)
    arity = relation.arity
    outputs = (
        tuple(range(arity, arity + len(before)))
        + tuple(range(arity))
        + tuple(range(arity + len(before), arity + len(nulls)))
    )
    return mir.Project(mapped, outputs)


def with_default_row(relation: mir.Relation, row: Sequence[Literal]) -> mir.Relation:
    """``relation`` (at most one row) or, when it is empty, ``row``.

    Both are ranked (``relation``'s row first) and a TopK keeps the first:
    ``relation`` is read once, where subtracting its presence from a
    constant would read it twice and add a count, a join and a Negate.
    """
    arity = relation.arity
    rank = ("rank", "int4")
    ranked = mir.Map(relation, (Literal(0, "int4"),), (rank[0],))
    default = mir.Constant(((*tuple(v.value for v in row), 1),), (*relation.columns, rank))
    first = mir.TopK(mir.Union((ranked, default)), (mir.OrderKey(arity),), limit=1)
    return mir.Project(first, tuple(range(arity)))


def outer_join(
    left: mir.Relation,
    right: mir.Relation,
    equalities: Sequence[tuple[Scalar, Scalar]],
    left_predicates: Sequence[Scalar],
    right_predicates: Sequence[Scalar],
    mixed_predicates: Sequence[Scalar],
    *,
    preserve_left: bool,
    preserve_right: bool,
) -> mir.Relation:
    """LEFT, RIGHT or FULL join; ``mixed_predicates`` read both sides (concatenated columns).

    ``equalities`` pair an expression over ``left`` with one over ``right``;
    the side predicates read one side only.
    """
    left_matching = mir.Filter(left, tuple(left_predicates)) if left_predicates else left
    right_matching = mir.Filter(right, tuple(right_predicates)) if right_predicates else right
    left_keys = [pair[0] for pair in equalities]
    right_keys = [pair[1] for pair in equalities]
    inner: mir.Relation = keyed_join(left_matching, left_keys, right_matching, right_keys)
    if mixed_predicates:
        inner = mir.Filter(inner, tuple(mixed_predicates))
    parts: list[mir.Relation] = [inner]
    if preserve_left:
        if mixed_predicates:
            matches = mir.Project(inner, tuple(range(left.arity)))
            matched = _row_semijoin(left, matches)
        else:
            matched = semijoin(left_matching, left_keys, right_matching, right_keys)
        parts.append(pad(minus(left, matched), (), right.columns))
    if preserve_right:
        if mixed_predicates:
            matches = mir.Project(inner, tuple(range(left.arity, left.arity + right.arity)))
            matched = _row_semijoin(right, matches)
        else:
            matched = semijoin(right_matching, right_keys, left_matching, left_keys)
        parts.append(pad(minus(right, matched), left.columns, ()))
    return mir.Union(tuple(parts))


def _row_semijoin(relation: mir.Relation, rows: mir.Relation) -> mir.Relation:
    """The rows of ``relation`` equal (NULLs included) to some row of ``rows``."""
    keys = null_safe_keys(relation)
    return semijoin(relation, keys, rows, keys)


def not_in(
    relation: mir.Relation, outer: list[Scalar], subquery: mir.Relation, inner: list[Scalar]
) -> mir.Relation:
    """The rows where ``subject NOT IN (subquery)`` is true (the last outer key is the subject):
    those matching no subquery value, minus those for which IN is NULL."""
    kept = antijoin(relation, outer, subquery, inner)
    return minus(kept, in_is_null(kept, outer, subquery, inner))


def marked_in(
    relation: mir.Relation, outer: list[Scalar], subquery: mir.Relation, inner: list[Scalar]
) -> mir.Relation:
    """``relation`` with one more column: ``subject IN (subquery)`` (true, false or NULL)."""
    matched = semijoin(relation, outer, subquery, inner)
    unmatched = minus(relation, matched)
    unknown = in_is_null(unmatched, outer, subquery, inner)
    return mir.Union(
        (
            mir.Map(matched, (Literal(True, "bool"),), ("in",)),
            mir.Map(minus(unmatched, unknown), (Literal(False, "bool"),), ("in",)),
            mir.Map(unknown, (Literal(None, "bool"),), ("in",)),
        )
    )


def marked_exists(
    relation: mir.Relation, outer: list[Scalar], subquery: mir.Relation, inner: list[Scalar]
) -> mir.Relation:
    """``relation`` with one more column: whether the (correlated) subquery has rows."""
    matched = semijoin(relation, outer, subquery, inner)
    return mir.Union(
        (
            mir.Map(matched, (Literal(True, "bool"),), ("exists",)),
            mir.Map(minus(relation, matched), (Literal(False, "bool"),), ("exists",)),
        )
    )


def in_is_null(
    unmatched: mir.Relation, outer: list[Scalar], subquery: mir.Relation, inner: list[Scalar]
) -> mir.Relation:
    """Of ``unmatched`` (rows whose subject matched no subquery value), those for which
    ``subject IN (subquery)`` is NULL rather than false.

    SQL's IN is NULL when the subquery (for this row's correlation keys) has
    rows and either holds a NULL value or the subject is NULL.
    """
    *correlation, value = inner
    *outer_correlation, subject = outer
    aggregates = (mir.Aggregate("count", None), mir.Aggregate("count", value))
    names = (*tuple(f"k{i}" for i in range(len(correlation))), "rows", "values")
    counts = mir.Reduce(subquery, tuple(correlation), aggregates, names)
    width = len(correlation)
    joined = keyed_join(unmatched, outer_correlation, counts, [Column(i) for i in range(width)])
    rows, values = Column(unmatched.arity + width), Column(unmatched.arity + width + 1)
    null_seen = Call("or", (Call("gt", (rows, values)), Call("is_null", (subject,))))
    return mir.Project(mir.Filter(joined, (null_seen,)), tuple(range(unmatched.arity)))


def substitute(expr: Scalar, values: Mapping[int, Scalar]) -> Scalar:
    """``expr`` with the columns in ``values`` replaced by their expressions."""
    if isinstance(expr, Column):
        return values.get(expr.index, Literal(None, "unknown"))
    if isinstance(expr, Literal):
        return expr
    if isinstance(expr, Call):
        return Call(expr.func, tuple(substitute(a, values) for a in expr.args))
    if isinstance(expr, Cast):
        return Cast(substitute(expr.expr, values), expr.type)
    whens = tuple((substitute(c, values), substitute(r, values)) for c, r in expr.whens)
    return Case(whens, substitute(expr.otherwise, values))


# Intervals are equal when their total spans are ('1 mon' = '30 days'): grouping and DISTINCT
# key them by ``interval_span`` (one value per span) and keep, of the intervals of one span,
# the one with the smallest fields (``min``), as the group's value.


def grouped(
    relation: mir.Relation,
    keys: tuple[Scalar, ...],
    aggregates: tuple[mir.Aggregate, ...],
    names: tuple[str, ...],
) -> mir.Relation:
    """``mir.Reduce(relation, keys, aggregates, names)``, intervals among the keys grouped by
    their total span; the columns are the Reduce's."""
    spans = [i for i, k in enumerate(keys) if scalar_type(k, relation.types) == "interval"]
    if not spans:
        return mir.Reduce(relation, keys, aggregates, names)
    chosen = tuple(mir.Aggregate("min", keys[i]) for i in spans)
    span_keys = tuple(Call("interval_span", (k,)) if i in spans else k for i, k in enumerate(keys))
    reduced = mir.Reduce(
        relation,
        span_keys,
        aggregates + chosen,
        names + tuple(f"_span{i}" for i in spans),
    )
    width = len(keys) + len(aggregates)
    outputs = [width + spans.index(i) if i in spans else i for i in range(len(keys))]
    return mir.Project(reduced, (*outputs, *range(len(keys), width)), names)


def distinct(relation: mir.Relation) -> mir.Relation:
    """``mir.Distinct(relation)``, interval columns compared by their total span."""
    if "interval" not in relation.types:
        return mir.Distinct(relation)
    keys = tuple(Column(i) for i in range(relation.arity))
    return grouped(relation, keys, (), tuple(name for name, _ in relation.columns))
