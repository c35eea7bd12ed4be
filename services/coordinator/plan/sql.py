"""Lower a parsed SELECT (sqlglot, postgres dialect) to MIR.

Supported: WITH (non-recursive CTEs, inlined); FROM with tables, CTEs,
subqueries and VALUES (with column aliases); inner, comma, LEFT, RIGHT and
FULL joins, JOIN … USING and NATURAL JOIN (not FULL); WHERE, including
EXISTS, NOT EXISTS, IN and NOT IN over subqueries (as semijoins and
antijoins when they are conjuncts, as boolean columns elsewhere); scalar
subqueries that return at most one row (in WHERE, the SELECT list and
HAVING); the SELECT
list; GROUP BY and HAVING with count, sum, min, max, avg, count(DISTINCT),
bool_and, bool_or and FILTER; DISTINCT and DISTINCT ON; ORDER BY with LIMIT
or OFFSET (a TopK); UNION [ALL], EXCEPT [ALL], INTERSECT [ALL];
generate_series(start, stop [, step]) over integers in FROM and (one call) in
the SELECT list (a FlatMap); WITH MUTUALLY RECURSIVE (a LetRec whose bindings
are read by LocalGet); window functions in the SELECT list and ORDER BY
(``windows``: mir.Window nodes). Anything else is a 0A000 error naming the
construct.

Subqueries may be correlated when they are plain SELECTs (no grouping,
DISTINCT or LIMIT) or aggregates without GROUP BY: equalities with the
outer query become join keys; other predicates read the distinct outer
values joined into the subquery (Materialize's decorrelation).

Two entry points. ``plan_query`` plans a query whose result is a
maintained collection (a view, or a subquery): its ORDER BY matters only
with LIMIT or OFFSET (a TopK). ``plan_select`` plans a one-off SELECT: the
outermost ORDER BY, LIMIT and OFFSET order the rows sent to the client, so
they come back separately as a ``mir.Finishing`` a peek applies. Both
return the plan after projection pushdown (``optimize``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from sqlglot import exp

import loupe.plan.mir as mir
from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import parameters, relational
from loupe.coordinator.plan.joins import (
    factor_or,
    inner_join,
    is_comma,
    join_scopes,
    outer_join,
    simplified_side,
    using_equalities,
)
from loupe.coordinator.plan.optimize import optimize
from loupe.coordinator.plan.scalars import (
    Context,
    CorrelatedReference,
    Grouping,
    Scalars,
    TemporalError,
    cast_type,
    describe,
    unsupported,
)
from loupe.coordinator.plan.scope import Scope, ScopeColumn
from loupe.coordinator.plan.values import fold_cast
from loupe.coordinator.plan.windows import (
    calls_in,
    plan_windows,
    refuse_misplaced,
    window_operands,
)
from loupe.dataflow.expr import regexp_splitter
from loupe.plan import functions
from loupe.plan.scalar import (
    NUMERIC_RANK,
    Call,
    Cast,
    Column,
    Literal,
    Scalar,
    columns_of,
    shift,
)

# resolve(name) -> (qualified_name, [(column, pg_type)]); raises or returns None if unknown.
Resolver = Callable[[str], "tuple[str, Sequence[tuple[str, str]]] | None"]

GROUPING_ERROR = SqlState.GROUPING_ERROR
UNDEFINED_FUNCTION = "42883"
# generate_series as sqlglot parses it, and the column a SELECT-list call reads.
_SERIES = (exp.ExplodingGenerateSeries, exp.GenerateSeries)
_SRF_TABLE = "__loupe_srf"
_SRF_COLUMN = "__loupe_series"
INVALID_COLUMN_REFERENCE = "42P10"
DATATYPE_MISMATCH = "42804"
DUPLICATE_ALIAS = "42712"
OUTER_SIDES = ("LEFT", "RIGHT", "FULL")


@dataclass(frozen=True)
class PlannedQuery:
    """A one-off SELECT: the collection to compute and what to do with its rows."""

    relation: mir.Relation
    finishing: mir.Finishing
    # now()/mz_now() were folded into literals of the query time.
    temporal: bool = False

    @property
    def columns(self) -> tuple[mir.ColumnSpec, ...]:
        """The result's columns as the client sees them."""
        return tuple(self.relation.columns[i] for i in self.finishing.project)


def plan_query(
    query: exp.Expression,
    resolve: Resolver,
    *,
    query_time: int | None = None,
    optimized: bool = True,
) -> mir.Relation:
    """The MIR of a SELECT or set operation whose result is maintained (a view, an index).

    Raises ``LoupeError`` on unknown names or unsupported SQL, and
    ``TemporalError`` for now()/mz_now() unless ``query_time`` (ms) is given.
    ``optimized=False`` returns the plan as translated, before projection
    pushdown (``optimize``).
    """
    query = _flatten_parenthesized_joins(query)
    relation = _text_for_unknown(_Planner(resolve, Context(query_time=query_time)).query(query))
    return optimize(relation) if optimized else relation


def plan_select(
    query: exp.Expression,
    resolve: Resolver,
    *,
    query_time: int | None = None,
    optimized: bool = True,
) -> PlannedQuery:
    """A one-off SELECT: MIR plus the finishing (outermost ORDER BY/LIMIT/OFFSET) a peek applies.

    ``query_time`` (ms since the epoch) is what now() and mz_now() fold to;
    without it they raise ``TemporalError``.
    """
    query = _flatten_parenthesized_joins(query)
    planner = _Planner(resolve, Context(query_time=query_time))
    ordered = planner.ordered(query, finishing=True)
    finishing = mir.Finishing(
        ordered.order, ordered.limit, ordered.offset, tuple(range(ordered.visible))
    )
    relation = _text_for_unknown(ordered.relation)
    relation = optimize(relation) if optimized else relation
    return PlannedQuery(relation, finishing, planner.context.temporal)


def _check_on_reads_its_group(on: Sequence[Scalar], scope: Scope, offset: int) -> None:
    """An ON condition reads only the FROM items after the last comma (42P01 otherwise)."""
    for column in sorted({c for p in on for c in columns_of(p) if c < offset}):
        table = scope.columns[column].table
        raise LoupeError(
            SqlState.UNDEFINED_TABLE,
            f'invalid reference to FROM-clause entry for table "{table}"',
        )


def _flatten_parenthesized_joins(query: exp.Expression) -> exp.Expression:
    """``FROM (a JOIN b …) JOIN c`` as ``FROM a JOIN b … JOIN c``.

    A parenthesized join first in FROM means the same without parentheses
    (joins associate to the left) and keeps its tables' names in scope.
    Elsewhere, parentheses can change the meaning: those stay unsupported.
    """
    if not any(_parenthesized_join(s) for s in query.find_all(exp.Select)):
        return query
    query = query.copy()
    for select in query.find_all(exp.Select):
        while (inner := _parenthesized_join(select)) is not None:
            joins = [*inner.args.get("joins", []), *(select.args.get("joins") or [])]
            inner.set("joins", None)
            select.set("from_", exp.From(this=inner))
            select.set("joins", joins)
    return query


def _parenthesized_join(select: exp.Select) -> exp.Table | None:
    from_ = select.args.get("from_")
    node = from_.this if from_ is not None else None
    if isinstance(node, exp.Subquery) and not node.alias:
        inner = node.this
        if isinstance(inner, exp.Table) and inner.args.get("joins"):
            return inner
    return None


@dataclass(frozen=True)
class _Ordered:
    """A query's relation with its ORDER BY, LIMIT and OFFSET not yet applied.

    ``relation`` may end in hidden columns (ORDER BY expressions outside the
    SELECT list); the first ``visible`` columns are the query's.
    """

    relation: mir.Relation
    visible: int
    order: tuple[mir.OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0

    def __post_init__(self) -> None:
        types = self.relation.types
        if any(types[key.column] == "jsonb" for key in self.order):
            # jsonb's order (objects after arrays after scalars, numbers by value…) is not
            # its text's: refused rather than sorted wrongly.
            raise unsupported("ORDER BY of jsonb values")

    def maintained(self) -> mir.Relation:
        """The collection: a TopK when there is a LIMIT or OFFSET, without hidden columns."""
        relation = self.relation
        if self.limit is not None or self.offset:
            relation = mir.TopK(relation, self.order, self.limit, self.offset)
        if relation.arity != self.visible:
            relation = mir.Project(relation, tuple(range(self.visible)))
        return relation


@dataclass(frozen=True)
class _Item:
    """One entry of a SELECT list after ``*`` expansion: a scope column or an expression."""

    name: str
    position: int | None = None
    node: exp.Expression | None = None


class _Planner:
    """SQL to MIR for one query level (a new planner per subquery)."""

    def __init__(
        self,
        resolve: Resolver,
        context: Context,
        ctes: dict[str, mir.Relation] | None = None,
        parent: _Planner | None = None,
    ) -> None:
        self.resolve = resolve
        self.context = context
        self.ctes = dict(ctes or {})
        self.parent = parent
        # FROM items planned already (a LATERAL item joined with what precedes it), by name.
        self.planned: dict[str, tuple[mir.Relation, Scope]] = {}
        # The outer values a LATERAL subquery reads, joined into its FROM (``_lateral``).
        self.outer_values: tuple[mir.Relation, Scope] | None = None

    def child(self, outer: Scope | None) -> _Planner:
        """A planner for a subquery; ``outer`` is the scope a correlated subquery may refer to."""
        context = self.context.child(outer)
        return _Planner(self.resolve, context, self.ctes, self)

    # Queries

    def query(self, node: exp.Expression) -> mir.Relation:
        return self.ordered(node, finishing=False).maintained()

    def ordered(self, node: exp.Expression, *, finishing: bool) -> _Ordered:
        """Plan ``node``; keeps its ORDER BY when ``finishing`` or when it has LIMIT/OFFSET."""
        if isinstance(node, exp.Subquery):
            if node.args.get("order") or _has_limit(node):  # (SELECT …) ORDER BY … LIMIT …
                ordering = finishing or _has_limit(node)
                return _ordered_by_output(self.query(node.this), node, ordering)
            return self.ordered(node.this, finishing=finishing)
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None and (with_.args.get("mutually_recursive") or _recursive_ctes(with_)):
            recursive = (
                self._mutually_recursive
                if with_.args.get("mutually_recursive")
                else (self._recursive)
            )
            planner, let_rec = recursive(with_)
            body = planner.ordered(_without_with(node), finishing=finishing)
            return replace(body, relation=let_rec(body.relation))
        if with_ is not None:
            return self._with(with_).ordered(_without_with(node), finishing=finishing)
        ordering = finishing or _has_limit(node)
        if isinstance(node, exp.SetOperation):
            return self._set_operation_ordered(node, ordering)
        if isinstance(node, exp.Select):
            return self._select(node, ordering)
        if isinstance(node, exp.Values):
            relation = self._values(node)
            return _Ordered(relation, relation.arity)
        raise unsupported(describe(node))

    def _values(self, node: exp.Values) -> mir.Constant:
        """``VALUES (…), (…)``: a constant collection; each column takes its rows' common type."""
        scalars = Scalars(self.context, Scope(()))
        rows = [[scalars.lower(cell) for cell in row.expressions] for row in node.expressions]
        if any(len(row) != len(rows[0]) for row in rows):
            raise LoupeError(SqlState.SYNTAX_ERROR, "VALUES lists must all be the same length")
        if any(not isinstance(cell, Literal) for row in rows for cell in row):
            raise unsupported("non-constant expressions in VALUES")
        literals = [[cell for cell in row if isinstance(cell, Literal)] for row in rows]
        types = [
            functions.expr_type(Call("coalesce", tuple(column)), ())
            for column in zip(*literals, strict=True)
        ]
        values = tuple(
            tuple(
                fold_cast(cell.value, cell.type, type_)
                for cell, type_ in zip(row, types, strict=True)
            )
            for row in literals
        )
        names = tuple(f"column{i + 1}" for i in range(len(types)))
        return mir.Constant(values, tuple(zip(names, types, strict=True)))

    def _with(self, with_: exp.With) -> _Planner:
        """A planner that sees the CTEs of ``with_`` (each may use the ones before it)."""
        planner = _Planner(self.resolve, self.context, self.ctes, self.parent)
        for cte in with_.expressions:
            relation = planner.query(cte.this)
            planner.ctes[cte.alias_or_name] = _renamed(
                relation, _alias_columns(cte.args.get("alias"))
            )
        return planner

    def _recursive(
        self, with_: exp.With
    ) -> tuple[_Planner, Callable[[mir.Relation], mir.Relation]]:
        """PostgreSQL's ``WITH RECURSIVE``: each recursive CTE, ``base UNION [ALL] step``, is a
        binding of a ``LetRec`` (the others are inlined as in a plain WITH).

        PostgreSQL iterates ``step`` over the rows the previous iteration added;
        a LetRec iterates ``base UNION step(t)`` to its fixpoint. For the linear
        recursions PostgreSQL accepts (one reference to ``t``, in ``step``, not
        in a subquery) both give the same rows, duplicates included. Columns
        take the base term's types; the step's must convert to them (42804).
        """
        recursive = _recursive_ctes(with_)
        planner = _Planner(self.resolve, self.context, self.ctes, self.parent)
        names: list[str] = []
        bindings: list[mir.Relation] = []
        for cte in with_.expressions:
            name = cte.alias_or_name
            columns = _alias_columns(cte.args.get("alias"))
            if name not in recursive:
                planner.ctes[name] = _renamed(planner.query(cte.this), columns)
                continue
            base, step, distinct = _recursive_terms(cte.this, name)
            first = _renamed(planner.query(base), columns)
            schema = first.columns
            local = f"l{len(self.context.bindings)}"
            self.context.bindings.append(local)
            planner.ctes[name] = mir.LocalGet(local, schema)
            following = planner.query(step)
            if following.arity != first.arity:
                raise LoupeError(
                    SqlState.SYNTAX_ERROR, "each UNION query must have the same number of columns"
                )
            for index, (have, want) in enumerate(
                zip(following.types, first.types, strict=True), start=1
            ):
                if not _converts_to(have, want):
                    numbers = have in NUMERIC_RANK and want in NUMERIC_RANK
                    overall = functions.widest([have, want]) if numbers else have
                    raise LoupeError(
                        DATATYPE_MISMATCH,
                        f'recursive query "{name}" column {index} has type '
                        f"{sqltypes.display_name(want)} in non-recursive term but type "
                        f"{sqltypes.display_name(overall)} overall",
                    )
            union: mir.Relation = mir.Union((first, _as_declared(following, name, schema)))
            names.append(local)
            bindings.append(mir.Distinct(union) if distinct else union)

        def let_rec(body: mir.Relation) -> mir.Relation:
            return mir.LetRec(tuple(names), tuple(bindings), body)

        return planner, let_rec

    def _mutually_recursive(
        self, with_: exp.With
    ) -> tuple[_Planner, Callable[[mir.Relation], mir.Relation]]:
        """``WITH MUTUALLY RECURSIVE``: a planner that sees every binding (in every binding
        and in the body), and what wraps the body into the ``LetRec``."""
        planner = _Planner(self.resolve, self.context, self.ctes, self.parent)
        declared: list[tuple[str, str, tuple[mir.ColumnSpec, ...]]] = []
        for cte in with_.expressions:
            name = cte.alias_or_name
            if name in (n for n, _, _ in declared):
                raise LoupeError(
                    DUPLICATE_ALIAS, f'WITH query name "{name}" specified more than once'
                )
            columns = cte.args["alias"].args.get("columns") or []
            if not columns or not all(
                isinstance(c, exp.ColumnDef) and c.args.get("kind") for c in columns
            ):
                raise LoupeError(
                    SqlState.SYNTAX_ERROR,
                    f'WITH MUTUALLY RECURSIVE query "{name}" must declare its columns '
                    "and their types: name (column type, …)",
                )
            schema = tuple((c.name, cast_type(c.args["kind"])) for c in columns)
            local = f"l{len(self.context.bindings)}"
            self.context.bindings.append(local)
            declared.append((name, local, schema))
            planner.ctes[name] = mir.LocalGet(local, schema)
        bindings = tuple(
            _as_declared(planner.query(cte.this), name, schema)
            for cte, (name, _, schema) in zip(with_.expressions, declared, strict=True)
        )
        names = tuple(local for _, local, _ in declared)
        limit = with_.args.get("recursion_limit")
        return_at_limit = bool(with_.args.get("return_at_limit"))

        def let_rec(body: mir.Relation) -> mir.Relation:
            return mir.LetRec(names, bindings, body, limit, return_at_limit)

        return planner, let_rec

    # FROM and WHERE

    def _from_where(
        self,
        select: exp.Select,
        correlations: list[tuple[Scalar, Scalar]] | None = None,
        extra: tuple[mir.Relation, Scope] | None = None,
    ) -> tuple[mir.Relation, Scope]:
        """The FROM relation filtered by WHERE, and its scope.

        With ``correlations``, WHERE equalities between this query and the
        enclosing one are not applied but collected there as ``(inner,
        outer)`` pairs, for the caller to join on. ``extra`` is one more
        relation joined after the FROM items (a decorrelated subquery's
        outer values).
        """
        lateral = _first_lateral(select)
        while lateral is not None:
            select = self._without_lateral(select, lateral)
            lateral = _first_lateral(select)
        if extra is None and self.outer_values is not None:
            extra, self.outer_values = self.outer_values, None
        tables = self._tables(select)
        scopes = join_scopes(select, [s for _, s in tables])
        if extra is not None:
            scopes.append(scopes[-1] + extra[1])
        scope = scopes[-1]
        plain, scalar_subqueries, predicates = [], [], []
        for conjunct in _conjuncts(select.args.get("where")):
            if _is_subquery_predicate(conjunct):
                predicates.append(conjunct)
            elif _scalar_subqueries(conjunct):
                scalar_subqueries.append(conjunct)
            else:
                try:
                    plain.extend(factor_or(Scalars(self.context, scope).lower(conjunct)))
                except CorrelatedReference:
                    if correlations is None:
                        raise
                    correlations.append(self._correlation(conjunct, scope))
        relations = [r for r, _ in tables]
        relation = self._joins(select, relations, scopes, plain, extra and extra[0])
        if scalar_subqueries:
            relation, scope = self._attach_scalar_subqueries(relation, scope, scalar_subqueries)
            lowered = tuple(Scalars(self.context, scope).lower(c) for c in scalar_subqueries)
            relation = mir.Filter(relation, lowered)
        for predicate in predicates:
            relation = self._subquery_predicate(relation, scope, predicate)
        return relation, scope

    # LATERAL

    def _without_lateral(self, select: exp.Select, index: int) -> exp.Select:
        """``select`` with its FROM items up to LATERAL item ``index`` planned as one item.

        The items before it are planned (with their joins) as one relation, the
        LATERAL item over it (``_lateral``), and that pair stands in the FROM in
        their place, under a name only the planner uses.
        """
        joins = select.args.get("joins") or []
        before = exp.Select(expressions=[exp.Star()])
        before.set("from_", select.args["from_"].copy())
        if index > 1:
            before.set("joins", [j.copy() for j in joins[: index - 1]])
        left, left_scope = self._from_where(before)
        relation, scope = self._lateral(left, left_scope, joins[index - 1])
        name = f"__loupe_lateral{len(self.planned)}"
        self.planned[name] = (relation, scope)
        rewritten = select.copy()
        rewritten.set("from_", exp.From(this=exp.to_table(name)))
        rewritten.set("joins", rewritten.args["joins"][index:] or None)
        return rewritten

    def _lateral(
        self, left: mir.Relation, left_scope: Scope, join: exp.Join
    ) -> tuple[mir.Relation, Scope]:
        """``left`` joined with a LATERAL item, which reads ``left``'s columns.

        A table function becomes a FlatMap over ``left``. A subquery is planned
        once for the distinct values of the columns it reads (Materialize's
        decorrelation), keyed by those values, and joined back to ``left`` on
        them, NULL-safely; with aggregates and no GROUP BY, each of its columns
        is a correlated scalar subquery (one row for every row of ``left``).
        ``LEFT JOIN LATERAL … ON c`` pads the rows of ``left`` that match none.
        """
        node = join.this
        alias = node.args.get("alias")
        inner = node.this if isinstance(node, exp.Lateral | exp.Table) else node
        side = (join.side or "").upper()
        on = join.args.get("on")
        if side not in ("", "LEFT"):
            raise unsupported(f"{side} JOIN LATERAL")
        if isinstance(inner, _SERIES) or _table_function_name(inner) is not None:
            func, args = self._table_function_args(inner, Scalars(self.context, left_scope))
            columns = _alias_columns(alias)
            table = (alias.name if isinstance(alias, exp.TableAlias) else "") or func
            name = columns[0] if columns else table
            relation: mir.Relation = mir.FlatMap(left, func, tuple(args), (name,))
            column = ScopeColumn(table, name, relation.types[-1])
            scope = Scope((*left_scope.columns, column))
        elif isinstance(inner, exp.Subquery):
            relation, own = self._lateral_subquery(left, left_scope, inner.this, alias)
            scope = left_scope + own
        else:
            raise unsupported(f"{describe(inner)} in LATERAL")
        predicates = [
            p for c in _conjuncts(on) for p in factor_or(Scalars(self.context, scope).lower(c))
        ]
        matched = mir.Filter(relation, tuple(predicates)) if predicates else relation
        if side != "LEFT":
            return matched, scope
        width = left.arity
        right_columns = relation.columns[width:]
        matched_left = mir.Distinct(mir.Project(matched, tuple(range(width))))
        unmatched = relational.antijoin(
            left,
            relational.null_safe_keys(left),
            matched_left,
            relational.null_safe_keys(matched_left),
        )
        padded = relational.pad(unmatched, (), right_columns)
        return mir.Union((matched, padded)), scope

    def _lateral_subquery(
        self,
        left: mir.Relation,
        left_scope: Scope,
        query: exp.Expression,
        alias: exp.Expression | None,
    ) -> tuple[mir.Relation, Scope]:
        """``left``'s columns followed by its LATERAL subquery's, for each row of ``left``
        and each of its subquery's rows; and the scope of the subquery's columns."""
        names = _alias_columns(alias)
        table = alias.name if isinstance(alias, exp.TableAlias) and alias.name else None
        if not isinstance(query, exp.Select):  # a set operation: it reads nothing of left
            right = _renamed(self.child(None).query(query), names)
            return mir.Join((left, right)), Scope.of(table, right)
        tables = self.child(None)._tables(query)
        inner_scope = join_scopes(query, [s for _, s in tables])[-1]
        read = sorted(_lateral_reads(query, inner_scope, left_scope))
        if not read:
            right = _renamed(self.child(None).query(query), names)
            return mir.Join((left, right)), Scope.of(table, right)
        if _is_global_aggregate(query) and not query.args.get("distinct"):
            return self._lateral_aggregate(left, left_scope, query, table, names)
        columns = tuple(
            replace(
                left_scope.columns[p],
                qualified_only=inner_scope.has(None, left_scope.columns[p].name),
            )
            for p in read
        )
        planner = self.child(None)
        planner.outer_values = (mir.Distinct(mir.Project(left, tuple(read))), Scope(columns))
        ordered = planner.ordered(_with_outer_keys(query, columns), finishing=False)
        width = len(read)
        relation = ordered.relation
        if ordered.limit is not None or ordered.offset:  # the top rows of each outer value
            group = tuple(range(width))
            relation = mir.TopK(relation, ordered.order, ordered.limit, ordered.offset, group)
        right = mir.Project(relation, tuple(range(ordered.visible)))
        left_keys = relational.null_safe([Column(p) for p in read], [left.types[p] for p in read])
        right_keys = relational.null_safe(
            [Column(i) for i in range(width)], list(right.types[:width])
        )
        joined = relational.keyed_join(left, left_keys, right, right_keys)
        outputs = (*range(left.arity), *range(left.arity + width, left.arity + right.arity))
        own = _renamed(mir.Project(right, tuple(range(width, right.arity))), names)
        return mir.Project(joined, outputs), Scope.of(table, own)

    def _lateral_aggregate(
        self,
        left: mir.Relation,
        left_scope: Scope,
        query: exp.Select,
        table: str | None,
        names: list[str],
    ) -> tuple[mir.Relation, Scope]:
        """A LATERAL aggregate without GROUP BY: one row for every row of ``left``.

        Each aggregate call becomes a correlated scalar subquery over the
        LATERAL's FROM and WHERE (count 0, the others NULL, over no rows); the
        SELECT list is then computed per row of ``left`` from those values and
        ``left``'s own columns (``count(*) + a.v``).
        """
        items = []
        for item in query.expressions:
            rewritten = _unalias(item).copy()
            for call in _aggregate_calls(rewritten):
                single = query.copy()
                single.set("expressions", [call.copy()])
                subquery = exp.Subquery(this=single)
                if call is rewritten:
                    rewritten = subquery
                else:
                    call.replace(subquery)
            items.append(rewritten)
        relation, scope = self._attach_scalar_subqueries(left, left_scope, items)
        scalars = Scalars(self.context, scope)
        values = tuple(scalars.lower(item) for item in items)
        own_names = names + [_output_name(i) for i in query.expressions][len(names) :]
        mapped = mir.Map(relation, values, tuple(own_names))
        outputs = (*range(left.arity), *range(relation.arity, mapped.arity))
        relation = mir.Project(mapped, outputs)
        right = _renamed(mir.Project(relation, tuple(range(left.arity, relation.arity))), own_names)
        return relation, Scope.of(table, right)

    def _tables(self, select: exp.Select) -> list[tuple[mir.Relation, Scope]]:
        from_ = select.args.get("from_")
        if from_ is None:
            if select.args.get("joins"):
                raise unsupported("JOIN without FROM")
            return [(mir.Constant(((),), ()), Scope(()))]
        nodes = [from_.this] + [j.this for j in select.args.get("joins") or []]
        return [self._table(node) for node in nodes]

    def _table(self, node: exp.Expression) -> tuple[mir.Relation, Scope]:
        if isinstance(node, exp.Table) and node.name in self.planned and not node.db:
            return self.planned[node.name]
        if isinstance(node, exp.Lateral):
            raise unsupported("LATERAL as the first FROM item")  # it has nothing to read
        alias = node.args.get("alias")
        if isinstance(node, exp.Values):
            relation = _renamed(self._values(node), _alias_columns(alias))
            return relation, Scope.of(node.alias or None, relation)
        if isinstance(node, exp.Subquery):
            relation = self.child(self.context.outer).query(node.this)
            relation = _renamed(relation, _alias_columns(alias))
            return relation, Scope.of(node.alias or None, relation)
        if isinstance(node, exp.Table) and _table_function_name(node.this) is not None:
            return self._table_function(node)
        if isinstance(node, exp.Unnest):
            return self._table_function(node)
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise unsupported(f"{describe(node)} in FROM")
        name = ".".join(p.name for p in node.parts)
        if name in self.ctes:
            relation = self.ctes[name]
        else:
            resolved = self.resolve(name)
            if resolved is None:
                raise LoupeError(SqlState.UNDEFINED_TABLE, f'relation "{name}" does not exist')
            qualified, columns = resolved
            relation = mir.Get(qualified, tuple((c, t) for c, t in columns))
        relation = _renamed(relation, _alias_columns(alias))
        return relation, Scope.of(node.alias_or_name, relation)

    def _joins(
        self,
        select: exp.Select,
        relations: list[mir.Relation],
        scopes: list[Scope],
        where: list[Scalar],
        extra: mir.Relation | None = None,
    ) -> mir.Relation:
        """Join the FROM items left to right, applying ON conditions and WHERE.

        Runs of inner joins become one n-ary Join whose column equalities
        (from ON or WHERE) are its equivalences. An outer join ends the run
        before it; WHERE predicates over its preserved left side alone are
        applied to that side first (they would filter the same rows after),
        unless a later RIGHT or FULL join matches against that side.
        ``scopes[i]`` is the scope of the first ``i + 1`` FROM items.

        A comma binds looser than JOIN: in ``FROM a, b RIGHT JOIN c ON …``
        the outer join's left side is ``b`` alone (``a`` is crossed with its
        result), and its ON may not read ``a`` (42P01, as in PostgreSQL).
        """
        run, run_predicates = [relations[0]], []
        group, offset = 0, 0  # where the current comma-separated group starts: in run, in columns
        pending = list(where)
        joins = select.args.get("joins") or []
        for index, (join, right) in enumerate(zip(joins, relations[1:], strict=True), start=1):
            side = (join.side or "").upper()
            left_arity = len(scopes[index - 1].columns)
            scope = scopes[index]
            if is_comma(join):
                group, offset = len(run), left_arity
            on = [
                factored
                for c in _conjuncts(join.args.get("on"))
                for factored in factor_or(Scalars(self.context, scope).lower(c))
            ]
            on += using_equalities(join, scopes[index - 1], scope, offset)
            _check_on_reads_its_group(on, scope, offset)
            side = simplified_side(side, pending, left_arity, len(scope.columns), offset)
            if side not in OUTER_SIDES:
                run.append(right)
                run_predicates.extend(on)
                continue
            # A later RIGHT or FULL join matches against these rows: filtering them
            # first would leave rows it should have matched padded instead.
            later = {(j.side or "").upper() for j in joins[index:]}
            if side == "LEFT" and not later & {"RIGHT", "FULL"}:
                pushed = [p for p in pending if all(c < left_arity for c in columns_of(p))]
                pending = [p for p in pending if p not in pushed]
                run_predicates.extend(pushed)
            # The left side is the current group; predicates over earlier groups stay outside.
            inside = [p for p in run_predicates if all(c >= offset for c in columns_of(p))]
            left = inner_join(run[group:], [shift(p, -offset) for p in inside])
            joined = outer_join(left, right, [shift(p, -offset) for p in on], side)
            run = [*run[:group], joined]
            run_predicates = [p for p in run_predicates if not any(p is q for q in inside)]
        if extra is not None:
            run.append(extra)
        return inner_join(run, run_predicates + pending)

    def _correlation(self, conjunct: exp.Expression, scope: Scope) -> tuple[Scalar, Scalar]:
        """``inner = outer`` split into its two sides, or the CorrelatedReference it is not."""
        assert self.parent is not None
        assert self.context.outer is not None
        inner_scalars = Scalars(self.context, scope)
        outer_scalars = Scalars(self.parent.context, self.context.outer)
        node = conjunct.this if isinstance(conjunct, exp.Paren) else conjunct
        if isinstance(node, exp.EQ):
            for inner, outer in ((node.this, node.expression), (node.expression, node.this)):
                try:
                    return inner_scalars.lower(inner), outer_scalars.lower(outer)
                except LoupeError:
                    continue
        inner_scalars.lower(conjunct)  # raises the CorrelatedReference naming the outer column
        raise AssertionError(f"{conjunct} lowered after failing to")

    # Subqueries

    def _subquery_predicate(
        self, relation: mir.Relation, scope: Scope, predicate: exp.Expression
    ) -> mir.Relation:
        """Keep the rows of ``relation`` for which [NOT] EXISTS / [NOT] IN holds."""
        negated, node = _strip_not(predicate)
        exists, subquery, inner, outer = self._membership(relation, scope, node)
        if negated:
            anti = relational.antijoin if exists else relational.not_in
            return anti(relation, outer, subquery, inner)
        return relational.semijoin(relation, outer, subquery, inner)

    def _membership(
        self, relation: mir.Relation, scope: Scope, node: exp.Expression
    ) -> tuple[bool, mir.Relation, list[Scalar], list[Scalar]]:
        """``EXISTS (…)`` or ``x IN (…)`` decorrelated against ``relation``: whether it is
        EXISTS, and the subquery with its inner keys and the outer keys they must equal
        (for IN, the outer keys end with ``x``)."""
        if isinstance(node, exp.Exists):
            subquery, inner, outer = self._decorrelated(node.this, relation, scope, value=False)
            return True, subquery, inner, outer
        assert isinstance(node, exp.In)
        if isinstance(node.this, exp.Tuple):
            raise unsupported("row constructors in IN")
        query = node.args["query"]
        subquery, inner, outer = self._decorrelated(query, relation, scope, value=True)
        return False, subquery, inner, [*outer, Scalars(self.context, scope).lower(node.this)]

    def _decorrelated(
        self, node: exp.Expression, outer_relation: mir.Relation, scope: Scope, *, value: bool
    ) -> tuple[mir.Relation, list[Scalar], list[Scalar]]:
        """A subquery as ``(relation, inner keys, outer keys)``: a row of the enclosing query
        (``outer_relation`` over ``scope``) matches the rows of ``relation`` whose inner keys
        equal its outer keys.

        With ``value``, the last inner key is the subquery's one output column.
        Only a plain SELECT (no grouping, DISTINCT, LIMIT or set operation)
        may be correlated: by equalities in its WHERE (joined on directly), or
        by any WHERE predicates (``_decorrelated_generally``).
        """
        node = node.this if isinstance(node, exp.Subquery) else node
        planner = self.child(scope)
        # A window in the value reads the subquery's rows across outer values: it is
        # not computed per outer row over a filter of FROM (EXISTS reads no value).
        windowed = value and any(any(True for _ in calls_in(e)) for e in node.expressions)
        if not _is_plain(node) or windowed:
            relation = planner.query(node)
            if not value:
                return relation, [], []
            _one_column(relation.arity)
            return relation, [Column(0)], []
        assert isinstance(node, exp.Select)
        correlations: list[tuple[Scalar, Scalar]] = []
        try:
            relation, inner_scope = planner._from_where(node, correlations)
        except CorrelatedReference:
            return self._decorrelated_generally(node, outer_relation, scope, value=value)
        inner = [pair[0] for pair in correlations]
        outer = [pair[1] for pair in correlations]
        if value:
            inner.append(planner._value(node, inner_scope))
        return relation, inner, outer

    def _decorrelated_generally(
        self, node: exp.Select, outer_relation: mir.Relation, scope: Scope, *, value: bool
    ) -> tuple[mir.Relation, list[Scalar], list[Scalar]]:
        """A subquery correlated by any predicates, as Materialize decorrelates it.

        The distinct values of the outer columns it reads are joined into the
        subquery's FROM, where its predicates read them as columns; the
        result is keyed by those values (NULL-safely: a predicate such as
        ``IS NULL`` may hold for a NULL).
        """
        planner = self.child(None)
        relation, subquery_scope, read, start = planner._with_outer_values(
            node, outer_relation, scope
        )
        value_types = outer_relation.types
        inner = relational.null_safe(
            [Column(start + i) for i in range(len(read))], [value_types[p] for p in read]
        )
        outer = relational.null_safe([Column(p) for p in read], [value_types[p] for p in read])
        if value:
            inner.append(planner._value(node, subquery_scope))
        return relation, inner, outer

    def _value(self, select: exp.Select, scope: Scope) -> Scalar:
        """The one SELECT-list expression of an IN subquery."""
        items = self._items(select, scope)
        _one_column(len(items))
        item = items[0]
        if item.position is not None:
            return Column(item.position)
        assert item.node is not None
        return Scalars(self.context, scope).lower(_unalias(item.node))

    def _attach_scalar_subqueries(
        self, relation: mir.Relation, scope: Scope, nodes: Sequence[exp.Expression]
    ) -> tuple[mir.Relation, Scope]:
        """Append to ``relation`` one column per scalar subquery in ``nodes``: its value or NULL."""
        for node in nodes:
            for subquery in _scalar_subqueries(node):
                if id(subquery) in self.context.subquery_columns:
                    continue
                if not isinstance(subquery, exp.Subquery):  # EXISTS or IN as a value
                    relation = self._marked(relation, scope, subquery)
                    scope = scope.with_hidden("bool")
                    self.context.subquery_columns[id(subquery)] = len(scope.columns) - 1
                    continue
                try:
                    value = self.child(scope).query(subquery.this)
                except CorrelatedReference:
                    if not _is_global_aggregate(subquery.this) or not _is_plain_from(subquery.this):
                        raise
                    relation, type_ = self._correlated_aggregate(relation, scope, subquery.this)
                else:
                    relation, type_ = _join_scalar(relation, value, subquery.this)
                scope = scope.with_hidden(type_)
                self.context.subquery_columns[id(subquery)] = len(scope.columns) - 1
        return relation, scope

    def _marked(self, relation: mir.Relation, scope: Scope, node: exp.Expression) -> mir.Relation:
        """``relation`` with the value of ``EXISTS (…)`` or ``x IN (…)`` as one more column,
        for a predicate inside other logic (``a IN (…) OR b``) or in the SELECT list."""
        exists, subquery, inner, outer = self._membership(relation, scope, node)
        marked = relational.marked_exists if exists else relational.marked_in
        return marked(relation, outer, subquery, inner)

    def _correlated_aggregate(
        self, relation: mir.Relation, scope: Scope, select: exp.Select
    ) -> tuple[mir.Relation, str]:
        """``relation`` with the value of a correlated aggregate subquery.

        The subquery is grouped by its inner correlation keys (or, when it is
        correlated by other predicates than equalities, by the distinct outer
        values it reads); each row of ``relation`` takes its group's value,
        or, when no group matches, the value over no rows (count 0, others
        NULL).
        """
        planner = self.child(scope)
        correlations: list[tuple[Scalar, Scalar]] = []
        try:
            inner_relation, inner_scope = planner._from_where(select, correlations)
            keys = tuple(pair[0] for pair in correlations)
            outer_keys = [pair[1] for pair in correlations]
            null_safe = False
        except CorrelatedReference:
            planner = self.child(None)
            inner_relation, inner_scope, read, start = planner._with_outer_values(
                select, relation, scope
            )
            keys = tuple(Column(start + i) for i in range(len(read)))
            outer_keys = [Column(p) for p in read]
            null_safe = True
        items = planner._items(select, inner_scope)
        _one_column(len(items))
        assert items[0].node is not None
        grouping = Grouping(keys, Scalars(planner.context, inner_scope))
        value = Scalars(planner.context, Scope(()), grouping).lower(_unalias(items[0].node))
        names = tuple(f"k{i}" for i in range(len(keys)))
        names += tuple(f"{a.func}{i}" for i, a in enumerate(grouping.aggregates))
        reduced = mir.Reduce(inner_relation, keys, tuple(grouping.aggregates), names)
        width = len(keys)
        if isinstance(value, Column):
            groups = mir.Project(reduced, (*range(width), value.index))
        else:
            mapped = mir.Map(reduced, (value,), ("value",))
            groups = mir.Project(mapped, (*range(width), reduced.arity))
        group_keys: list[Scalar] = [Column(i) for i in range(width)]
        if null_safe:  # a predicate like IS NULL may hold for NULL outer values
            group_keys = relational.null_safe(group_keys, groups.types[:width])
            outer_keys = relational.null_safe(outer_keys, groups.types[:width])
        matched = mir.Project(
            relational.keyed_join(relation, outer_keys, groups, group_keys),
            (*range(relation.arity), relation.arity + width),
        )
        empty = {
            width + i: Literal(0, "int8") if a.func == "count" else Literal(None, t)
            for i, (a, t) in enumerate(zip(grouping.aggregates, reduced.types[width:], strict=True))
        }
        default = relational.substitute(value, empty)
        unmatched = relational.antijoin(relation, outer_keys, groups, group_keys)
        padded = mir.Map(unmatched, (default,), ("value",))
        return mir.Union((matched, padded)), groups.types[-1]

    def _with_outer_values(
        self, select: exp.Select, outer_relation: mir.Relation, scope: Scope
    ) -> tuple[mir.Relation, Scope, list[int], int]:
        """``select``'s FROM and WHERE joined with the distinct values of the outer columns
        it reads (positions ``read`` in ``scope``), which are its columns from ``start`` on."""
        tables = self._tables(select)
        inner_scope = join_scopes(select, [s for _, s in tables])[-1]
        read = sorted(_outer_positions(select, inner_scope, scope))
        columns = tuple(
            replace(scope.columns[p], qualified_only=inner_scope.has(None, scope.columns[p].name))
            for p in read
        )
        values = mir.Distinct(mir.Project(outer_relation, tuple(read)))
        relation, joined_scope = self._from_where(select, extra=(values, Scope(columns)))
        return relation, joined_scope, read, len(inner_scope.columns)

    # SELECT

    def _set_returning(
        self, select: exp.Select, relation: mir.Relation, scope: Scope
    ) -> tuple[mir.Relation, Scope, exp.Select]:
        """``SELECT …, generate_series(a, b) …``: one row per value, for each row of FROM.

        The call becomes a FlatMap over the FROM relation and the SELECT list
        reads its column (a name only the planner can spell).
        """
        calls = [
            (i, node)
            for i, node in enumerate(select.expressions)
            if _table_function_name(_unalias(node)) is not None
        ]
        if not calls:
            return relation, scope, select
        if len(calls) > 1:
            raise unsupported("more than one set-returning function in a SELECT list")
        if select.args.get("group") or any(
            _aggregate_calls(_unalias(n)) for n in select.expressions
        ):
            raise unsupported("set-returning functions with aggregates")
        position, node = calls[0]
        func, args = self._table_function_args(_unalias(node), Scalars(self.context, scope))
        flat = mir.FlatMap(relation, func, tuple(args), (_SRF_COLUMN,))
        column = ScopeColumn(_SRF_TABLE, _SRF_COLUMN, flat.types[-1], qualified_only=True)
        flat_scope = Scope((*scope.columns, column), tuple(scope.visible()))
        rewritten = select.copy()
        reference = exp.column(_SRF_COLUMN, table=_SRF_TABLE, quoted=True)
        rewritten.expressions[position].replace(
            exp.alias_(reference, _output_name(node), quoted=True)
        )
        return flat, flat_scope, rewritten

    def _table_function_args(
        self, call: exp.Expression, scalars: Scalars
    ) -> tuple[str, list[Scalar]]:
        """The table function ``call`` names and its arguments, checked."""
        func = _table_function_name(call)
        if func == "regexp_split_to_table":
            return func, _regexp_split_args(call, scalars)
        if func == "unnest":
            return func, _unnest_args(call, scalars)
        return "generate_series", self._series_args(call, scalars)

    def _series_args(self, call: exp.Expression, scalars: Scalars) -> list[Scalar]:
        """The arguments of generate_series(start, stop [, step]): integers only, for now."""
        nodes = [call.args.get(k) for k in ("start", "end", "step")]
        args = [scalars.lower(a) for a in nodes if a is not None]
        types = [scalars.type_of(a) for a in args]
        times = {"date", "timestamp", "timestamptz"}
        if set(types[:2]) & times:
            # generate_series(start, stop, interval): both ends times, a step is required.
            if len(args) == 3 and set(types[:2]) <= times | {"unknown"} and types[2] == "interval":
                return args
            names = ", ".join(sqltypes.display_name(t) for t in types)
            raise LoupeError(
                UNDEFINED_FUNCTION, f"function generate_series({names}) does not exist"
            )
        if not all(t in ("int2", "int4", "int8", "numeric", "unknown") for t in types):
            raise LoupeError(
                UNDEFINED_FUNCTION,
                f"function generate_series({', '.join(types)}) does not exist",
            )
        return args

    def _table_function(self, node: exp.Table | exp.Unnest) -> tuple[mir.Relation, Scope]:
        """``FROM generate_series(a, b [, step]) [AS t(col)]``: one row per value (or per
        piece of ``regexp_split_to_table(s, pattern [, flags])``, per element of
        ``unnest(array or list)``)."""
        call = node if isinstance(node, exp.Unnest) else node.this
        try:
            func, args = self._table_function_args(call, Scalars(self.context, Scope(())))
        except LoupeError as error:
            missing = error.code in (SqlState.UNDEFINED_TABLE, SqlState.UNDEFINED_COLUMN)
            select = node.find_ancestor(exp.Select)
            if not missing or select is None or not select.args.get("joins"):
                raise
            # PostgreSQL reads a function in FROM as LATERAL: it may use earlier FROM items.
            raise unsupported("a table function reading columns of other FROM items") from error
        alias = node.args.get("alias")
        columns = _alias_columns(alias)
        table = node.alias or func
        name = columns[0] if columns else (node.alias or func)
        relation = mir.FlatMap(mir.Constant(((),), ()), func, tuple(args), (name,))
        return relation, Scope.of(table, relation)

    def _items(self, select: exp.Select, scope: Scope) -> list[_Item]:
        """The SELECT list with ``*`` and ``t.*`` expanded to scope columns."""
        items: list[_Item] = []
        for node in select.expressions:
            if isinstance(node, exp.Star):
                positions = scope.visible()
            elif isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
                positions = scope.of_table(node.table)
            else:
                items.append(_Item(_output_name(node), node=node))
                continue
            items.extend(_Item(scope.columns[p].name, position=p) for p in positions)
        return items

    def _select(self, select: exp.Select, ordering: bool) -> _Ordered:
        refuse_misplaced(select)
        relation, scope = self._from_where(select)
        relation, scope, select = self._set_returning(select, relation, scope)
        items = self._items(select, scope)
        distinct = select.args.get("distinct")
        distinct_on = distinct.args.get("on") if distinct else None
        # DISTINCT ON keeps each group's first row in ORDER BY order, even in a view.
        order = _order_nodes(select) if ordering or distinct_on else []
        targets = [_order_target(o, items) for o in order]
        on_targets = [
            _order_target(exp.Ordered(this=e), items)
            for e in (distinct_on.expressions if distinct_on else [])
        ]
        extra: list[exp.Expression] = []
        for target in [*targets, *on_targets]:
            if isinstance(target, exp.Expression) and target not in extra:
                extra.append(target)
        if _is_grouped(select, items, extra):
            scalars = Scalars(self.context, scope)
            relation, scalars = self._reduce(select, relation, scalars, items, extra)
        else:
            expressions = [i.node for i in items if i.node is not None] + extra
            relation, scope = self._attach_scalar_subqueries(relation, scope, expressions)
            scalars = Scalars(self.context, scope)
        relation, scalars = plan_windows(
            relation, scalars, [*(i.node for i in items if i.node is not None), *extra]
        )
        relation = _project(relation, scalars, items, extra)

        def position(target: int | exp.Expression) -> int:
            return target if isinstance(target, int) else len(items) + extra.index(target)

        keys = tuple(_order_key(o, position(t)) for o, t in zip(order, targets, strict=True))
        if distinct_on:
            group = tuple(dict.fromkeys(position(t) for t in on_targets))
            relation = mir.TopK(relation, keys, 1, 0, group)
        elif distinct:
            if extra:
                raise LoupeError(
                    INVALID_COLUMN_REFERENCE,
                    "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                )
            relation = relational.distinct(relation)
        limit, offset = _limit_offset(select)
        return _Ordered(relation, len(items), keys if ordering else (), limit, offset)

    def _reduce(
        self,
        select: exp.Select,
        relation: mir.Relation,
        below: Scalars,
        items: list[_Item],
        extra: list[exp.Expression],
    ) -> tuple[mir.Relation, Scalars]:
        """A Reduce for GROUP BY and aggregates, then HAVING; returns the scalars above it.

        Without GROUP BY the Reduce has no rows for empty input, where SQL
        has one (count 0, other aggregates NULL): that row is added when the
        Reduce is empty.
        """
        if any(i.position is not None for i in items):
            # SELECT * with every column grouped is fine: each becomes a column reference.
            items[:] = [_star_as_reference(i, below.scope) for i in items]
        group = select.args.get("group")
        keys_sql = group.expressions if group else []
        key_nodes = [_group_key(k, items, below.scope) for k in keys_sql]
        keys = tuple(dict.fromkeys(below.lower(k) for k in key_nodes))
        grouping = Grouping(keys, below)
        having_nodes = _conjuncts(select.args.get("having"))
        above_nodes = [*(_unalias(i.node) for i in items if i.node is not None), *extra]
        for node in [*above_nodes, *having_nodes]:  # the aggregates, in SELECT-list order
            for call in _aggregate_calls(node):
                grouping.aggregate(call)
        names = tuple(f"k{i}" for i in range(len(keys)))
        names += tuple(f"{a.func}{i}" for i, a in enumerate(grouping.aggregates))
        reduced = relational.grouped(relation, keys, tuple(grouping.aggregates), names)
        if not keys:
            defaults = [
                Literal(0, "int8") if a.func == "count" else Literal(None, t)
                for a, t in zip(grouping.aggregates, reduced.types, strict=True)
            ]
            reduced = relational.with_default_row(reduced, defaults)
        # Scalar subqueries above the Reduce (HAVING x > (SELECT …)) join onto its output.
        width = reduced.arity
        reduced, scope = self._attach_scalar_subqueries(
            reduced, Scope.of(None, reduced), [*above_nodes, *having_nodes]
        )
        grouping.hidden = scope.types[width:]
        above = Scalars(self.context, Scope(()), grouping)
        having = [above.lower(c) for c in having_nodes]
        if having:
            reduced = mir.Filter(reduced, tuple(having))
        return reduced, above

    # Set operations

    def _set_operation_ordered(self, node: exp.SetOperation, ordering: bool) -> _Ordered:
        return _ordered_by_output(self._set_operation(node), node, ordering)

    def _set_operation(self, node: exp.SetOperation) -> mir.Relation:
        left, right = self.query(node.this), self.query(node.expression)
        kind = node.key.upper()
        if left.arity != right.arity:
            raise LoupeError(
                SqlState.SYNTAX_ERROR, f"each {kind} query must have the same number of columns"
            )
        left, right = _conform(left, right, kind)
        distinct = bool(node.args.get("distinct"))
        if isinstance(node, exp.Union):
            union = mir.Union((left, right))
            return relational.distinct(union) if distinct else union
        if distinct:
            left, right = relational.distinct(left), relational.distinct(right)
        except_ = mir.Threshold(mir.Union((left, mir.Negate(right))))
        if isinstance(node, exp.Except):
            return except_
        # INTERSECT: left minus (left minus right).
        return mir.Threshold(mir.Union((left, mir.Negate(except_))))


def _star_as_reference(item: _Item, scope: Scope) -> _Item:
    """A ``*`` column as the column reference it stands for (42803 when it is ambiguous)."""
    if item.position is None:
        return item
    column = scope.columns[item.position]
    node = exp.column(column.name, table=column.table, quoted=True)
    try:
        found = scope.lookup(column.table, column.name)
    except LoupeError:
        found = None
    if found != item.position:
        raise LoupeError(GROUPING_ERROR, "SELECT * is not allowed with GROUP BY")
    return _Item(item.name, None, node)


# SELECT list and ORDER BY


def _project(
    relation: mir.Relation,
    scalars: Scalars,
    items: list[_Item],
    extra: list[exp.Expression],
) -> mir.Relation:
    """Map the SELECT list's expressions (then the hidden ORDER BY ones) and project onto them."""
    arity = relation.arity
    outputs: list[int] = []
    maps: list[Scalar] = []
    nodes: list[int | exp.Expression] = [_item_source(i) for i in items]
    nodes.extend(extra)
    for node in nodes:
        if isinstance(node, int):
            outputs.append(node)
            continue
        scalar = scalars.lower(_unalias(node))
        if isinstance(scalar, Column):
            outputs.append(scalar.index)
        else:
            outputs.append(arity + len(maps))
            maps.append(scalar)
    names = tuple(i.name for i in items) + tuple("?order?" for _ in extra)
    if maps:
        relation = mir.Map(relation, tuple(maps), tuple(f"map{i}" for i in range(len(maps))))
    identity = outputs == list(range(relation.arity))
    if identity and names == tuple(name for name, _ in relation.columns):
        return relation
    return mir.Project(relation, tuple(outputs), names)


def _ordered_by_output(relation: mir.Relation, node: exp.Expression, ordering: bool) -> _Ordered:
    """``relation`` with ``node``'s ORDER BY (output columns only), LIMIT and OFFSET."""
    names = [name for name, _ in relation.columns]
    keys = []
    for ordered in _order_nodes(node) if ordering else []:
        position = _output_position(ordered.this, names)
        if position is None:
            raise unsupported("ORDER BY an expression that is not in the select list")
        keys.append(_order_key(ordered, position))
    limit, offset = _limit_offset(node)
    return _Ordered(relation, relation.arity, tuple(keys), limit, offset)


def _item_source(item: _Item) -> int | exp.Expression:
    if item.position is not None:
        return item.position
    assert item.node is not None
    return item.node


def _order_target(ordered: exp.Ordered, items: list[_Item]) -> int | exp.Expression:
    """What an ORDER BY key sorts by: a SELECT item's position, or an expression to compute."""
    key = ordered.this
    position = _output_position(key, [i.name for i in items])
    if position is not None:
        if position >= len(items):
            raise LoupeError(
                SqlState.UNDEFINED_COLUMN, f"ORDER BY position {key.this} is not in select list"
            )
        return position
    for index, item in enumerate(items):
        if item.node is not None and _unalias(item.node) == key:
            return index
    return key


def _output_position(key: exp.Expression, names: list[str]) -> int | None:
    """The output column ``key`` names by position (``ORDER BY 2``) or unique output name."""
    if isinstance(key, exp.Literal) and not key.is_string and str(key.this).isdigit():
        position = int(key.this) - 1
        if not 0 <= position < len(names):
            raise LoupeError(
                SqlState.UNDEFINED_COLUMN, f"ORDER BY position {key.this} is not in select list"
            )
        return position
    if isinstance(key, exp.Column) and not key.table and names.count(key.name) == 1:
        return names.index(key.name)
    return None


def _order_key(ordered: exp.Ordered, position: int) -> mir.OrderKey:
    desc = bool(ordered.args.get("desc"))
    return mir.OrderKey(position, desc, nulls_last=not ordered.args.get("nulls_first"))


def _order_nodes(node: exp.Expression) -> list[exp.Ordered]:
    order = node.args.get("order")
    return list(order.expressions) if order else []


def _limit_offset(node: exp.Expression) -> tuple[int | None, int]:
    limit = _constant_int(node.args.get("limit"), "LIMIT")
    offset = _constant_int(node.args.get("offset"), "OFFSET") or 0
    return limit, offset


def _has_limit(node: exp.Expression) -> bool:
    return node.args.get("limit") is not None or node.args.get("offset") is not None


def _group_key(key: exp.Expression, items: list[_Item], scope: Scope) -> exp.Expression:
    """A GROUP BY key, with positions (``GROUP BY 1``) and output names replaced by the item.

    As in PostgreSQL, a name is an input column first and an output column
    name only when no input column has it.
    """
    if isinstance(key, exp.Column) and not key.table and not scope.has(None, key.name):
        named = [i.node for i in items if i.node is not None and i.name == key.name]
        if len(named) == 1:
            return _unalias(named[0])
    position = key.this if isinstance(key, exp.Literal) and not key.is_string else None
    if position is None:
        return key
    index = int(position) - 1
    item = items[index] if 0 <= index < len(items) else None
    if item is None or item.node is None:
        raise LoupeError(
            SqlState.UNDEFINED_COLUMN, f"GROUP BY position {position} is not in select list"
        )
    return _unalias(item.node)


def _aggregate_calls(node: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls of this query level in ``node`` (``agg(x) FILTER (…)`` whole)."""
    calls: list[exp.Expression] = []
    for child in _walk_level(node):
        if (isinstance(child, exp.Filter) and isinstance(child.this, exp.AggFunc)) or (
            isinstance(child, exp.AggFunc) and not isinstance(child.parent, exp.Filter)
        ):
            calls.append(child)
    return calls


def _is_grouped(select: exp.Select, items: list[_Item], extra: list[exp.Expression]) -> bool:
    nodes = [i.node for i in items if i.node is not None] + extra
    return bool(
        select.args.get("group")
        or select.args.get("having")
        or any(_has_aggregate(n) for n in nodes)
    )


def _has_aggregate(node: exp.Expression) -> bool:
    """Whether ``node`` calls an aggregate of this query level (not inside a subquery)."""
    return any(isinstance(n, exp.AggFunc) for n in _walk_level(node))


def _walk_level(node: exp.Expression) -> Iterator[exp.Expression]:
    """``node`` and its descendants, not entering subqueries.

    A window call's function is not this level's aggregate (``sum(x) OVER ()``
    groups nothing), but its arguments, PARTITION BY and ORDER BY are
    expressions of this level (``rank() OVER (ORDER BY sum(x))``).
    """
    if isinstance(node, exp.Window):
        for operand in window_operands(node):
            yield from _walk_level(operand)
        return
    yield node
    for child in node.iter_expressions():
        if not isinstance(child, exp.Subquery | exp.Select | exp.SetOperation):
            yield from _walk_level(child)


# Subquery shapes


def _strip_not(node: exp.Expression) -> tuple[bool, exp.Expression]:
    negated = False
    while isinstance(node, exp.Not | exp.Paren):
        if isinstance(node, exp.Not):
            negated = not negated
        node = node.this
    return negated, node


def _is_subquery_predicate(node: exp.Expression) -> bool:
    """EXISTS, NOT EXISTS, IN (subquery) or NOT IN (subquery) as a whole WHERE conjunct."""
    _, inner = _strip_not(node)
    return isinstance(inner, exp.Exists) or (
        isinstance(inner, exp.In) and inner.args.get("query") is not None
    )


def _scalar_subqueries(node: exp.Expression) -> list[exp.Expression]:
    """The subqueries used as values in ``node``: scalar subqueries, EXISTS and
    IN (subquery) (not nested ones)."""
    found: list[exp.Expression] = []

    def visit(current: exp.Expression) -> None:
        if isinstance(current, exp.Subquery | exp.Exists) or _is_in_subquery(current):
            found.append(current)
            return
        for child in current.iter_expressions():
            if not isinstance(child, exp.Select | exp.SetOperation):
                visit(child)

    visit(node)
    return found


def _is_in_subquery(node: exp.Expression) -> bool:
    return isinstance(node, exp.In) and node.args.get("query") is not None


def _is_plain(node: exp.Expression) -> bool:
    """A SELECT whose rows are its FROM's rows filtered: may be correlated by its WHERE."""
    if not isinstance(node, exp.Select):
        return False
    shaped = any(
        node.args.get(k)
        for k in ("group", "having", "distinct", "limit", "offset", "with_", "with")
    )
    return not shaped and not any(_has_aggregate(e) for e in node.expressions)


def _is_global_aggregate(node: exp.Expression) -> bool:
    """Aggregates without GROUP BY: exactly one row."""
    return (
        isinstance(node, exp.Select)
        and not node.args.get("group")
        and not node.args.get("having")
        and not _has_limit(node)
        and any(_has_aggregate(e) for e in node.expressions)
    )


def _at_most_one_row(node: exp.Expression) -> bool:
    if _is_global_aggregate(node):
        return True
    if isinstance(node, exp.Select) and node.args.get("from_") is None:
        return not node.args.get("group")  # SELECT without FROM: one row, or none
    limit = node.args.get("limit")
    if limit is None:
        return False
    return (_constant_int(limit, "LIMIT") or 0) <= 1


def _first_lateral(select: exp.Select) -> int | None:
    """The position (1-based among the joins) of the first LATERAL FROM item, or None.

    A table function reading an earlier item is LATERAL too, as in PostgreSQL
    (``FROM t, generate_series(1, t.n)``): one whose arguments name a column.
    """
    for index, join in enumerate(select.args.get("joins") or [], start=1):
        node = join.this
        if isinstance(node, exp.Lateral):
            return index
        call = node.this if isinstance(node, exp.Table) else None
        if call is None or _table_function_name(call) is None:
            continue
        if any(isinstance(c, exp.Column) for c in call.walk()):
            return index
    return None


def _lateral_reads(select: exp.Select, inner: Scope, outer: Scope) -> set[int]:
    """The positions in ``outer`` of the columns a LATERAL subquery reads from the items
    before it, anywhere in it (SELECT list, WHERE, GROUP BY, HAVING, ORDER BY, ON…)."""
    return _outer_positions(select, inner, outer, [select])


def _with_outer_keys(select: exp.Select, columns: Sequence[ScopeColumn]) -> exp.Select:
    """A LATERAL subquery that also outputs, first, the outer values it is planned for, and
    groups and picks DISTINCT ON by them too: its result is keyed by them."""
    keyed = select.copy()
    references = [
        exp.column(c.name, table=c.table, quoted=True) if c.table else exp.column(c.name)
        for c in columns
    ]
    aliased = [exp.alias_(r, f"__loupe_outer{i}", quoted=True) for i, r in enumerate(references)]
    keyed.set("expressions", aliased + list(keyed.expressions))
    group = keyed.args.get("group")
    if group is not None:
        group.set("expressions", [r.copy() for r in references] + list(group.expressions))
    elif any(_has_aggregate(e) for e in select.expressions) or select.args.get("having"):
        keyed.set("group", exp.Group(expressions=[r.copy() for r in references]))
    distinct = keyed.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    if on is not None:
        on.set("expressions", [r.copy() for r in references] + list(on.expressions))
    return keyed


def _outer_positions(
    select: exp.Select,
    inner: Scope,
    outer: Scope,
    nodes: Sequence[exp.Expression | None] | None = None,
) -> set[int]:
    """The positions in ``outer`` of the enclosing query's columns ``select`` reads (in its
    SELECT list and WHERE, or in ``nodes``), its own subqueries included (they reach them
    through ``select``'s scope)."""
    positions = set()
    if nodes is None:
        nodes = [*select.expressions, select.args.get("where")]
    for node in nodes:
        for column in node.walk() if node is not None else []:
            if not isinstance(column, exp.Column) or isinstance(column.this, exp.Star):
                continue
            table = column.table or None
            if not inner.has(table, column.name) and outer.has(table, column.name):
                positions.add(outer.lookup(table, column.name))
    return positions


def _is_plain_from(node: exp.Select) -> bool:
    """No GROUP BY, HAVING, DISTINCT or LIMIT: the rows aggregated are the FROM's, filtered."""
    shaped = ("group", "having", "distinct", "limit", "offset", "with_", "with")
    return not any(node.args.get(k) for k in shaped)


def _join_scalar(
    relation: mir.Relation, value: mir.Relation, select: exp.Expression
) -> tuple[mir.Relation, str]:
    """``relation`` with the value of an uncorrelated scalar subquery (NULL when it is empty)."""
    _one_column(value.arity)
    if not _at_most_one_row(select):
        raise unsupported("scalar subqueries that may return more than one row")
    if not _is_global_aggregate(select):
        value = relational.with_default_row(value, relational.null_row(value.types))
    return mir.Join((relation, value)), value.types[0]


def _one_column(arity: int) -> None:
    if arity != 1:
        raise LoupeError(SqlState.SYNTAX_ERROR, "subquery has too many columns")


# Small helpers


def _without_with(node: exp.Expression) -> exp.Expression:
    copy = node.copy()
    copy.set("with_", None)
    copy.set("with", None)
    return copy


def _alias_columns(alias: exp.Expression | None) -> list[str]:
    if not isinstance(alias, exp.TableAlias):
        return []
    return [c.name for c in alias.args.get("columns") or []]


def _renamed(relation: mir.Relation, names: list[str]) -> mir.Relation:
    """``relation`` with its first columns renamed to ``names`` (``AS s(a, b)``)."""
    if not names:
        return relation
    if len(names) > relation.arity:
        raise LoupeError(
            SqlState.SYNTAX_ERROR,
            f"table has {relation.arity} columns available but {len(names)} columns specified",
        )
    current = [name for name, _ in relation.columns]
    new_names = tuple(names) + tuple(current[len(names) :])
    if isinstance(relation, mir.Project):  # rename in place rather than stack projections
        return mir.Project(relation.input, relation.outputs, new_names)
    return mir.Project(relation, tuple(range(relation.arity)), new_names)


def _conform(
    left: mir.Relation, right: mir.Relation, kind: str
) -> tuple[mir.Relation, mir.Relation]:
    """Both inputs of a set operation cast to common column types (int4 with int8 is int8)."""
    targets = []
    for left_type, right_type in zip(left.types, right.types, strict=True):
        if left_type == right_type or "unknown" in (left_type, right_type):
            targets.append(right_type if left_type == "unknown" else left_type)
        elif left_type in NUMERIC_RANK and right_type in NUMERIC_RANK:
            targets.append(sqltypes.common_numeric([left_type, right_type]))
        else:
            raise LoupeError(
                DATATYPE_MISMATCH, f"{kind} types {left_type} and {right_type} cannot be matched"
            )
    return _cast_columns(left, targets), _cast_columns(right, targets)


INVALID_RECURSION = "42P19"


def _recursive_ctes(with_: exp.With) -> set[str]:
    """The CTEs of a ``WITH RECURSIVE`` that read themselves (none for a plain WITH)."""
    if not with_.args.get("recursive") or with_.args.get("mutually_recursive"):
        return set()
    return {
        cte.alias_or_name
        for cte in with_.expressions
        if any(_names(t, cte.alias_or_name) for t in cte.this.find_all(exp.Table))
    }


def _names(table: exp.Table, name: str) -> bool:
    return not table.db and table.name == name


def _recursive_terms(
    query: exp.Expression, name: str
) -> tuple[exp.Expression, exp.Expression, bool]:
    """``base UNION [ALL] step`` of recursive CTE ``name``, checked as PostgreSQL checks it:
    (base, step, whether UNION is distinct)."""
    if isinstance(query, exp.Union) and any(
        _names(t, name) for t in query.this.find_all(exp.Table)
    ):
        raise LoupeError(
            INVALID_RECURSION,
            f'recursive reference to query "{name}" must not appear within its non-recursive term',
        )
    if not isinstance(query, exp.Union):
        raise LoupeError(
            INVALID_RECURSION,
            f'recursive query "{name}" does not have the form '
            "non-recursive-term UNION [ALL] recursive-term",
        )
    step = query.expression
    references = [t for t in step.find_all(exp.Table) if _names(t, name)]
    if len(references) > 1:
        raise LoupeError(
            INVALID_RECURSION,
            f'recursive reference to query "{name}" must not appear more than once',
        )
    for reference in references:
        subquery = reference.find_ancestor(exp.Subquery)
        if (
            subquery is not None
            and subquery.find_ancestor(exp.Union) is query
            and (subquery.parent_select is not None)
            and not isinstance(subquery.parent, exp.From | exp.Join)
        ):
            raise LoupeError(
                INVALID_RECURSION,
                f'recursive reference to query "{name}" must not appear within a subquery',
            )
    return query.this, step, bool(query.args.get("distinct"))


def _converts_to(have: str, want: str) -> bool:
    """Whether a recursive binding's column of type ``have`` may stand for ``want``: the
    same type, an untyped NULL, or a number that widens to it."""
    return have in (want, "unknown") or (
        have in NUMERIC_RANK and want in NUMERIC_RANK and NUMERIC_RANK[have] <= NUMERIC_RANK[want]
    )


def _as_declared(
    relation: mir.Relation, name: str, schema: tuple[mir.ColumnSpec, ...]
) -> mir.Relation:
    """A WITH MUTUALLY RECURSIVE binding's plan with its declared columns.

    Its columns may widen implicitly (int4 to int8, numeric…) as a set
    operation's do; any other difference is an error, as in Materialize.
    """
    declared = [t for _, t in schema]
    inferred = list(relation.types)
    matches = len(declared) == len(inferred) and all(
        _converts_to(have, want) for have, want in zip(inferred, declared, strict=True)
    )
    if not matches:
        want, have = ", ".join(declared), ", ".join(inferred)
        raise LoupeError(
            DATATYPE_MISMATCH,
            f'declared type ({want}) of WITH MUTUALLY RECURSIVE query "{name}" '
            f"did not match inferred type ({have})",
        )
    cast = _cast_columns(relation, declared)
    return _renamed(cast, [n for n, _ in schema])


def _text_for_unknown(relation: mir.Relation) -> mir.Relation:
    """A result column still untyped (``SELECT NULL``) is text, as in PostgreSQL."""
    if "unknown" not in relation.types:
        return relation
    return _cast_columns(relation, ["text" if t == "unknown" else t for t in relation.types])


def _cast_columns(relation: mir.Relation, types: list[str]) -> mir.Relation:
    casts = [
        (i, Cast(Column(i), t))
        for i, (t, own) in enumerate(zip(types, relation.types, strict=True))
        if t != own
    ]
    if not casts:
        return relation
    arity = relation.arity
    names = tuple(name for name, _ in relation.columns)
    mapped = mir.Map(relation, tuple(c for _, c in casts), tuple(names[i] for i, _ in casts))
    replaced = {i: arity + n for n, (i, _) in enumerate(casts)}
    return mir.Project(mapped, tuple(replaced.get(i, i) for i in range(arity)), names)


# Output column names PostgreSQL gives calls sqlglot parses into differently named nodes.
_CALL_NAMES: dict[type[exp.Expression], str] = {
    exp.TimestampTrunc: "date_trunc",
    exp.DateTrunc: "date_trunc",
    exp.Substring: "substring",
    exp.StrPosition: "position",
    exp.CurrentTimestamp: "now",
    exp.CurrentVersion: "version",
    exp.Concat: "concat",
    exp.Pow: "power",
    exp.ExplodingGenerateSeries: "generate_series",
    exp.VariancePop: "var_pop",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.GenerateSeries: "generate_series",
    exp.GroupConcat: "string_agg",
    exp.ArraySize: "array_length",
    exp.Explode: "unnest",
    exp.AtTimeZone: "timezone",
    exp.UnixToTime: "to_timestamp",
    exp.TimestampFromParts: "make_timestamp",
}


def _unnest_args(call: exp.Expression, scalars: Scalars) -> list[Scalar]:
    """unnest(array or list): one argument, a container."""
    nodes = call.expressions if isinstance(call, exp.Unnest) else [call.this]
    args = [scalars.lower(n) for n in nodes]
    types = [scalars.type_of(a) for a in args]
    if len(args) != 1 or sqltypes.element_type(types[0]) is None:
        names = ", ".join(sqltypes.display_name(t) for t in types)
        raise LoupeError(UNDEFINED_FUNCTION, f"function unnest({names}) does not exist")
    return args


def _table_function_name(node: exp.Expression) -> str | None:
    """The table function a call in FROM or the SELECT list is, if it is one."""
    if isinstance(node, _SERIES):
        return "generate_series"
    if isinstance(node, exp.Explode | exp.Unnest):
        return "unnest"
    if isinstance(node, exp.Anonymous) and str(node.name).lower() == "regexp_split_to_table":
        return "regexp_split_to_table"
    return None


def _regexp_split_args(call: exp.Expression, scalars: Scalars) -> list[Scalar]:
    """regexp_split_to_table(text, pattern [, flags]): the pattern and flags constants."""
    args = [scalars.lower(a) for a in call.expressions]
    types = [scalars.type_of(a) for a in args]
    if len(args) not in (2, 3) or any(t not in ("text", "unknown") for t in types):
        names = ", ".join(sqltypes.display_name(t) for t in types)
        raise LoupeError(
            UNDEFINED_FUNCTION, f"function regexp_split_to_table({names}) does not exist"
        )
    for arg, what in zip(args[1:], ("pattern", "flags"), strict=False):
        if not isinstance(arg, Literal):
            raise unsupported(f"regexp_split_to_table with a {what} that is not a constant")
    if any(a.value is None for a in args[1:] if isinstance(a, Literal)):
        return [Literal(None, "text"), Literal("", "text")]  # NULL pattern or flags: no rows
    regexp_splitter(args)  # a bad pattern or flag fails the statement, not a replica's render
    return [a if t == "text" else Literal(None, "text") for a, t in zip(args, types, strict=True)]


def output_name(node: exp.Expression) -> str:
    """The name PostgreSQL gives a SELECT-list item without an alias."""
    return _output_name(node)


def _output_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Window):  # named after the function, as in PostgreSQL
        function = node.this
        return _output_name(function.this if isinstance(function, exp.Filter) else function)
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Cast):  # PostgreSQL names x::t after x, or after t for a constant
        inner: exp.Expression = node.this
        if isinstance(inner, exp.Column | exp.Func):
            return _output_name(inner)
        if not isinstance(inner, exp.Literal):
            return "?column?"
        type_ = cast_type(node.to)  # an array constant is named after its element type
        return (sqltypes.element_type(type_) or type_) if sqltypes.is_array(type_) else type_
    if isinstance(node, exp.Bracket):  # a[i] is named after a
        inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
        return _output_name(inner)
    if isinstance(node, exp.Trim):
        position = str(node.args.get("position") or "").upper()
        return {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "btrim")
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
        return _output_name(node.this.expressions[0]) if node.this.expressions else "?column?"
    if isinstance(node, exp.Pad):
        return "lpad" if node.args.get("is_left") else "rpad"
    if isinstance(node, exp.Case):  # after its ELSE when that has a name, as in PostgreSQL
        default = node.args.get("default")
        named = _output_name(default) if default is not None else "?column?"
        return "case" if named == "?column?" or isinstance(default, exp.Case) else named
    if type(node) in _CALL_NAMES:
        return _CALL_NAMES[type(node)]
    if isinstance(node, exp.Filter):  # agg(x) FILTER (WHERE …) is named after agg
        return _output_name(node.this)
    if isinstance(node, exp.Binary | exp.Unary | exp.In | exp.Between):
        return "?column?"  # operators are not named, even those sqlglot calls functions
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return "?column?"


def _unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.Paren | exp.Where | exp.Having):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _constant_int(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    value = node.expression if isinstance(node, exp.Limit | exp.Offset) else node
    number = parameters.number_of(value)
    if number is not None and parameters.active():
        parameters.typed_number(number, "int8")  # LIMIT $1 is bigint, as in PostgreSQL
        return None
    if isinstance(value, exp.Cast) and value.to.is_type(*exp.DataType.INTEGER_TYPES):
        value = value.this  # a bound bigint parameter: CAST('5' AS bigint)
        if isinstance(value, exp.Literal) and value.is_string and value.this.isdigit():
            return int(value.this)
    if isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit():
        return int(value.this)
    raise unsupported(f"non-constant {what}")


__all__ = [
    "PlannedQuery",
    "Resolver",
    "Scope",
    "TemporalError",
    "plan_query",
    "plan_select",
    "unsupported",
]
