"""MIR: the relational plan a SELECT lowers to, as immutable trees.

Every node knows its output ``columns`` as ``(name, pg_type)`` pairs; scalar
expressions refer to the columns of a node's input by position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from loupe import sqltypes
from loupe.plan.scalar import Column, Literal, Scalar, scalar_type, widest_numeric

ColumnSpec = tuple[str, str]

# Variance and standard deviation (sample and population).
SPREAD_AGGREGATES = frozenset({"var_samp", "var_pop", "stddev_samp", "stddev_pop"})
# Aggregates whose value depends on every value of the group: recomputed per changed group.
RECOMPUTED_AGGREGATES = SPREAD_AGGREGATES | {"string_agg", "array_agg", "list_agg"}
AGGREGATES = ("count", "sum", "min", "max", "avg", *sorted(RECOMPUTED_AGGREGATES))


@dataclass(frozen=True)
class AggregateOrder:
    """One ORDER BY key inside an aggregate call (``string_agg(x, ',' ORDER BY y DESC)``)."""

    expr: Scalar
    desc: bool = False
    nulls_last: bool = True


@dataclass(frozen=True)
class Aggregate:
    """An aggregate over a group: ``func`` of ``expr`` (None for ``count(*)``).

    ``args`` are the arguments after the first (string_agg's delimiter);
    ``order_by`` orders the values an order-sensitive aggregate reads.
    """

    func: str
    expr: Scalar | None
    distinct: bool = False
    args: tuple[Scalar, ...] = ()
    order_by: tuple[AggregateOrder, ...] = ()

    @property
    def scalars(self) -> tuple[Scalar, ...]:
        """Every expression the aggregate reads: its arguments, then its ORDER BY keys."""
        first = () if self.expr is None else (self.expr,)
        return (*first, *self.args, *(key.expr for key in self.order_by))

    def map_scalars(self, function: Callable[[Scalar], Scalar]) -> Aggregate:
        """The aggregate with ``function`` applied to every expression it reads."""
        return Aggregate(
            self.func,
            None if self.expr is None else function(self.expr),
            self.distinct,
            tuple(function(a) for a in self.args),
            tuple(AggregateOrder(function(k.expr), k.desc, k.nulls_last) for k in self.order_by),
        )

    def result_type(self, input_types: tuple[str, ...]) -> str:
        """The PostgreSQL result type of the aggregate."""
        if self.func == "count":
            return "int8"
        if self.func == "string_agg":
            return "text"
        assert self.expr is not None
        arg = scalar_type(self.expr, input_types)
        if arg == "interval" and self.func in ("sum", "avg"):
            return "interval"
        if self.func == "array_agg":
            return sqltypes.array_of(arg)
        if self.func == "list_agg":
            return sqltypes.list_of(arg)
        if self.func == "avg" or self.func in SPREAD_AGGREGATES:
            return "float8" if arg.startswith("float") else "numeric"
        if self.func == "sum":
            # Materialize's sums of unsigned integers: uint8, and numeric for uint8.
            sums = {"int2": "int8", "int4": "int8", "int8": "numeric", "uint2": "uint8"}
            return {**sums, "uint4": "uint8", "uint8": "numeric"}.get(arg, widest_numeric([arg]))
        return arg


@dataclass(frozen=True)
class OrderKey:
    """One ORDER BY key: an output column, its direction and where NULLs go."""

    column: int
    desc: bool = False
    nulls_last: bool = True


@dataclass(frozen=True)
class Finishing:
    """What a one-off SELECT does to its result rows after computing them (a peek applies it).

    ORDER BY, OFFSET and LIMIT of the outermost query order only the rows
    sent to the client, so they are not part of the maintained collection:
    ``order`` keys and ``project`` are positions in the planned relation,
    which may carry extra columns (ORDER BY expressions not in the SELECT
    list) that ``project`` drops. Field names match the engine's
    ``loupe.dataflow.Finishing`` and ``RowSetFinishing``.
    """

    order: tuple[OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    project: tuple[int, ...] = ()


class Relation:
    """Base of MIR nodes: output columns and children.

    Each node's ``columns`` is computed once and kept on the (immutable) node:
    a plan shares subtrees (an outer join reads its left input twice), and
    recomputing a shared input's columns at every use made planning
    exponential in the number of outer joins.
    """

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        computed = cls.__dict__.get("columns")
        if isinstance(computed, property) and computed.fget is not None:
            cls.columns = _kept(computed.fget)  # type: ignore[method-assign,assignment]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        raise NotImplementedError

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.columns)

    @property
    def arity(self) -> int:
        return len(self.columns)

    def children(self) -> tuple[Relation, ...]:
        return ()


def _kept(compute: Callable[[Relation], tuple[ColumnSpec, ...]]) -> property:
    """``compute`` as a property whose value is stored on the node at its first read."""

    def columns(self: Relation) -> tuple[ColumnSpec, ...]:
        kept = self.__dict__.get("_columns")
        if kept is None:
            kept = compute(self)
            object.__setattr__(self, "_columns", kept)
        return kept

    return property(columns)


@dataclass(frozen=True)
class _Named(Relation):
    name: str
    schema: tuple[ColumnSpec, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.schema


@dataclass(frozen=True)
class Get(_Named):
    """Read a catalog relation by its qualified name."""


@dataclass(frozen=True)
class Constant(Relation):
    """A literal collection of rows."""

    rows: tuple[tuple[object, ...], ...]
    schema: tuple[ColumnSpec, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.schema


@dataclass(frozen=True)
class _Unary(Relation):
    input: Relation

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.input.columns

    def children(self) -> tuple[Relation, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Map(_Unary):
    """Append one column per scalar, each computed from the input columns and earlier ones."""

    scalars: tuple[Scalar, ...]
    names: tuple[str, ...]

    @cached_property
    def columns(self) -> tuple[ColumnSpec, ...]:  # type: ignore[override]
        columns = list(self.input.columns)
        for name, scalar in zip(self.names, self.scalars, strict=True):
            columns.append((name, scalar_type(scalar, tuple(t for _, t in columns))))
        return tuple(columns)


@dataclass(frozen=True)
class Filter(_Unary):
    """Keep the rows for which every predicate is true."""

    predicates: tuple[Scalar, ...]


@dataclass(frozen=True)
class Project(_Unary):
    """Reorder, drop or repeat columns; ``names`` renames the outputs."""

    outputs: tuple[int, ...]
    names: tuple[str, ...] | None = None

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        picked = [self.input.columns[i] for i in self.outputs]
        if self.names is None:
            return tuple(picked)
        return tuple((n, t) for n, (_, t) in zip(self.names, picked, strict=True))


@dataclass(frozen=True)
class Join(Relation):
    """The cross product of the inputs restricted to rows where each equivalence class is equal.

    Expressions in ``equivalences`` refer to the concatenated input columns.
    """

    inputs: tuple[Relation, ...]
    equivalences: tuple[tuple[Scalar, ...], ...] = ()

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(c for i in self.inputs for c in i.columns)

    def children(self) -> tuple[Relation, ...]:
        return self.inputs


@dataclass(frozen=True)
class Reduce(_Unary):
    """Group by ``group_key``; outputs the keys and then one column per aggregate."""

    group_key: tuple[Scalar, ...]
    aggregates: tuple[Aggregate, ...]
    names: tuple[str, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        types = [scalar_type(k, self.input.types) for k in self.group_key]
        types += [a.result_type(self.input.types) for a in self.aggregates]
        return tuple(zip(self.names, types, strict=True))


# The table functions a FlatMap applies.
TABLE_FUNCTIONS = ("generate_series", "unnest", "regexp_split_to_table")


@dataclass(frozen=True)
class FlatMap(_Unary):
    """For each input row, the rows of table function ``func(exprs)``: the input's columns
    followed by the function's (``generate_series``: one per value; ``unnest``: one per
    element of a list)."""

    func: str
    exprs: tuple[Scalar, ...]
    names: tuple[str, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        arg_types = [scalar_type(e, self.input.types) for e in self.exprs]
        return (
            *self.input.columns,
            *zip(self.names, table_function_types(self.func, arg_types), strict=True),
        )


def table_function_types(func: str, arg_types: Sequence[str]) -> tuple[str, ...]:
    """The column types ``func`` produces for arguments of ``arg_types``."""
    if func == "generate_series":
        known = [t for t in arg_types if t != "unknown"]
        if "timestamp" in known and "timestamptz" not in known and "date" not in known:
            return ("timestamp",)
        if set(known) & {"timestamptz", "date", "timestamp"}:
            return ("timestamptz",)
        if "numeric" in known:
            return ("numeric",)
        if "int8" in known:
            return ("int8",)
        return ("int4",)
    if func == "regexp_split_to_table":
        return ("text",)
    if func == "unnest":
        return (sqltypes.element_type(arg_types[0]) or "unknown",)
    raise KeyError(func)


@dataclass(frozen=True)
class TopK(_Unary):
    """Per group, the rows ``offset`` to ``offset + limit`` in ``order``."""

    order: tuple[OrderKey, ...]
    limit: int | None = None
    offset: int = 0
    group_key: tuple[int, ...] = ()


# Window functions: ranking (frames do not apply), values at other rows, then aggregates.
RANKING_FUNCTIONS = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
VALUE_FUNCTIONS = ("lag", "lead", "first_value", "last_value", "nth_value")
WINDOW_FUNCTIONS = (*RANKING_FUNCTIONS, *VALUE_FUNCTIONS)
# The argument counts PostgreSQL defines for each.
WINDOW_ARGUMENTS = {
    "row_number": (0,),
    "rank": (0,),
    "dense_rank": (0,),
    "percent_rank": (0,),
    "cume_dist": (0,),
    "ntile": (1,),
    "lag": (1, 2, 3),
    "lead": (1, 2, 3),
    "first_value": (1,),
    "last_value": (1,),
    "nth_value": (2,),
}
# Frame bound kinds, in PostgreSQL's order (a frame's start may not come after its end).
FRAME_BOUNDS = (
    "unbounded_preceding",
    "offset_preceding",
    "current_row",
    "offset_following",
    "unbounded_following",
)


@dataclass(frozen=True)
class FrameBound:
    """One end of a window frame. For the two ``offset_*`` kinds, ``offset`` counts rows in
    a ROWS frame; in a RANGE frame ``distance`` is how far the ORDER BY key may be from the
    current row's (a constant of the key's type, an interval for dates and times)."""

    kind: str
    offset: int = 0
    distance: Literal | None = None


@dataclass(frozen=True)
class WindowFrame:
    """The rows an aggregate or first/last/nth_value reads: ``rows`` counts rows,
    ``groups`` counts peer groups (rows equal in the window's ORDER BY, every row of
    the partition without one), ``range`` measures the ORDER BY key (its CURRENT ROW
    is the row's peers). The default is PostgreSQL's: RANGE BETWEEN UNBOUNDED
    PRECEDING AND CURRENT ROW."""

    mode: str = "range"
    start: FrameBound = FrameBound("unbounded_preceding")
    end: FrameBound = FrameBound("current_row")


@dataclass(frozen=True)
class WindowFunction:
    """``func`` of the input columns ``args`` for every row, over ``frame``.

    ``func`` is a ranking or value function (``WINDOW_FUNCTIONS``) or an
    aggregate (``AGGREGATES``; ``count`` without args is ``count(*)``).
    """

    func: str
    args: tuple[int, ...] = ()
    frame: WindowFrame = WindowFrame()

    def result_type(self, input_types: tuple[str, ...]) -> str:
        """The PostgreSQL result type."""
        if self.func in ("row_number", "rank", "dense_rank"):
            return "int8"
        if self.func in ("percent_rank", "cume_dist"):
            return "float8"
        if self.func == "ntile":
            return "int4"
        if self.func in VALUE_FUNCTIONS:
            return input_types[self.args[0]]
        expr = Column(self.args[0]) if self.args else None
        return Aggregate(self.func, expr).result_type(input_types)


@dataclass(frozen=True)
class Window(_Unary):
    """Every input row with one more column per window function, computed over the rows of
    its partition (equal ``partition_by`` columns) in ``order`` (ties: by the whole row)."""

    partition_by: tuple[int, ...]
    order: tuple[OrderKey, ...]
    functions: tuple[WindowFunction, ...]
    names: tuple[str, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        types = self.input.types
        added = [f.result_type(types) for f in self.functions]
        return (*self.input.columns, *zip(self.names, added, strict=True))


@dataclass(frozen=True)
class Distinct(_Unary):
    """Each distinct row once."""


@dataclass(frozen=True)
class Negate(_Unary):
    """Every row's multiplicity negated."""


@dataclass(frozen=True)
class Threshold(_Unary):
    """Only the rows with positive multiplicity."""


@dataclass(frozen=True)
class Union(Relation):
    """The inputs' rows together (UNION ALL); column names come from the first input."""

    inputs: tuple[Relation, ...]

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.inputs[0].columns

    def children(self) -> tuple[Relation, ...]:
        return self.inputs


@dataclass(frozen=True)
class LocalGet(_Named):
    """Read binding ``name`` of an enclosing ``LetRec`` (not a catalog relation)."""


@dataclass(frozen=True)
class LetRec(Relation):
    """``WITH MUTUALLY RECURSIVE``: ``body`` over the fixpoint of ``bindings``.

    Every binding starts empty; an iteration evaluates the bindings in order,
    each reading (through ``LocalGet``) the newest value of every binding:
    this iteration's for those before it, the previous one's for itself and
    those after it. Iteration stops when an iteration changes no binding, or
    after ``limit`` iterations (then the query fails, unless
    ``return_at_limit``: it returns the bindings as they are).
    """

    names: tuple[str, ...]
    bindings: tuple[Relation, ...]
    body: Relation
    limit: int | None = None
    return_at_limit: bool = False

    @property
    def columns(self) -> tuple[ColumnSpec, ...]:
        return self.body.columns

    def children(self) -> tuple[Relation, ...]:
        return (*self.bindings, self.body)
