"""Name resolution: bind a query's table references to storage collections.

A query may name a relation qualified (``mz_catalog.mz_clusters``) or not
(``mz_clusters``, found through ``mz_catalog`` and then the session's
``search_path``). Every reference is rewritten to the plain name of the peek
source it reads (the collection id), aliased to what the user wrote so
``mz_clusters.name`` still refers to it. Unknown names are 42P01 with the
position of the name.

Output columns get PostgreSQL's names (``?column?`` for an unnamed
expression, the function's name for a call): unnamed or duplicate output
columns are aliased to unique names for the engine and renamed back in the
result description.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from loupe.builtins import BY_QUALIFIED_NAME, IMPLICIT_SCHEMAS
from loupe.common.errors import LoupeError, SqlState
from loupe.introspection.views import passed_over

GENERATE_DIALECT = "postgres"
MZ_NOW = "mz_now"


class Relation(Protocol):
    """What name resolution needs of a relation: builtin collections and user tables."""

    @property
    def id(self) -> str: ...

    @property
    def qualified_name(self) -> str: ...


@dataclass(frozen=True)
class ResolvedQuery:
    """A query that refers only to peek sources by name."""

    sql: str
    sources: tuple[Any, ...]
    # The names the client sees, in order; None when the engine's names stand
    # (a ``*`` in the projection).
    output_names: tuple[str, ...] | None = None
    # The rewritten tree ``sql`` was generated from (for ``sql_at``).
    expression: exp.Expression | None = field(default=None, compare=False)

    @property
    def is_constant(self) -> bool:
        """No relation is read: the coordinator evaluates it itself."""
        return not self.sources

    @property
    def uses_mz_now(self) -> bool:
        return self.expression is not None and any(_is_mz_now(f) for f in self.expression.walk())

    def sql_at(self, timestamp: int) -> str:
        """The SQL with every ``mz_now()`` replaced by ``timestamp`` (an mz_timestamp literal)."""
        if self.expression is None or not self.uses_mz_now:
            return self.sql
        rewritten = self.expression.copy().transform(
            lambda node: mz_now_literal(timestamp) if _is_mz_now(node) else node
        )
        return rewritten.sql(dialect=GENERATE_DIALECT)


def _is_mz_now(node: Any) -> bool:
    return (
        isinstance(node, exp.Anonymous)
        and str(node.name).lower() == MZ_NOW
        and not node.expressions
    )


def mz_now_literal(timestamp: int) -> exp.Expression:
    """``mz_now()`` as the value it has in a query reading at ``timestamp``."""
    return exp.Cast(
        this=exp.Literal.number(timestamp),
        to=exp.DataType.build("mz_timestamp", dialect="postgres", udt=True),
    )


def source_name(collection: Any) -> str:
    """The name a peek's SQL uses for ``collection``."""
    return str(collection.id)


def search_path_schemas(search_path: str) -> list[str]:
    """``'public, "My Schema"'`` -> ``["public", "My Schema"]``."""
    schemas = []
    for part in search_path.split(","):
        part = part.strip()
        if len(part) >= 2 and part[0] == part[-1] and part[0] in "'\"":
            schemas.append(part[1:-1])
        elif part:
            schemas.append(part.lower())
    return schemas


def resolve_query(
    expression: exp.Expression,
    *,
    search_path: Sequence[str] = ("public",),
    database: str = "materialize",
    collections: Mapping[str, Relation] = BY_QUALIFIED_NAME,
) -> ResolvedQuery:
    """Resolve and rewrite ``expression`` (a copy is rewritten; the argument is untouched).

    ``collections`` maps ``schema.name`` to the relations of ``database`` and
    the ambient schemas (builtin collections, user tables).
    """
    expression = normalize_identifiers(expression.copy(), dialect=GENERATE_DIALECT)
    resolver = _Resolver(search_path, database, collections)
    sources = resolver.rewrite_tables(expression)
    output_names = _name_outputs(expression)
    return ResolvedQuery(
        expression.sql(dialect=GENERATE_DIALECT), tuple(sources), output_names, expression
    )


def resolve_relations(
    expression: exp.Expression,
    *,
    search_path: Sequence[str] = ("public",),
    database: str = "materialize",
    collections: Mapping[str, Relation] = BY_QUALIFIED_NAME,
) -> tuple[exp.Expression, dict[str, Relation]]:
    """Bind a query's relation names for the planner, without rewriting them.

    Returns a normalized copy of ``expression`` and, for each table reference
    in it, the relation it names, keyed by the reference as written
    (``mz_clusters``, ``mz_catalog.mz_clusters``): what ``plan_query``'s
    resolver is asked for. Names are found as ``resolve_query`` finds them;
    an unknown one is 42P01 with its position.
    """
    expression = normalize_identifiers(expression.copy(), dialect=GENERATE_DIALECT)
    resolver = _Resolver(search_path, database, collections)
    cte_names = {cte.alias for cte in expression.find_all(exp.CTE)}
    relations: dict[str, Relation] = {}
    for table in expression.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # the planner refuses table functions itself
        if not table.db and not table.catalog and table.name in cte_names:
            continue
        relations[".".join(part.name for part in table.parts)] = resolver.resolve(table)
    return expression, relations


class _Resolver:
    def __init__(
        self,
        search_path: Sequence[str],
        database: str,
        collections: Mapping[str, Relation],
    ) -> None:
        self.schemas = [*IMPLICIT_SCHEMAS, *search_path]
        self.database = database
        self.collections = collections

    def rewrite_tables(self, expression: exp.Expression) -> list[Relation]:
        cte_names = {cte.alias for cte in expression.find_all(exp.CTE)}
        sources: dict[str, Relation] = {}
        for table in list(expression.find_all(exp.Table)):
            if not isinstance(table.this, exp.Identifier):
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    "table functions are not supported",
                    position=_position(table),
                )
            if not table.db and not table.catalog and table.name in cte_names:
                continue
            collection = self.resolve(table)
            sources.setdefault(collection.id, collection)
            alias = table.alias or table.name
            table.set("this", exp.to_identifier(source_name(collection)))
            table.set("db", None)
            table.set("catalog", None)
            table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
        # Columns qualified with a schema (mz_catalog.mz_clusters.name) now refer to the alias.
        for column in expression.find_all(exp.Column):
            if column.args.get("db") is not None:
                column.set("db", None)
                column.set("catalog", None)
        return list(sources.values())

    def resolve(self, table: exp.Table) -> Relation:
        name, schema, database = table.name, table.db, table.catalog
        written = ".".join(part for part in (database, schema, name) if part)
        found: Relation | None = None
        if database and database != self.database:
            found = None
        elif schema:
            found = self.collections.get(f"{schema}.{name}")
        else:
            for candidate in self.schemas:
                if passed_over(candidate, name, self.schemas):
                    continue
                found = self.collections.get(f"{candidate}.{name}")
                if found is not None:
                    break
        if found is None:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE,
                f"unknown catalog item '{written}'",
                position=_position(table),
            )
        return found


def _position(table: exp.Table) -> int:
    """1-based position of the reference's first part, 0 when unknown."""
    for key in ("catalog", "db", "this"):
        part = table.args.get(key)
        if isinstance(part, exp.Identifier) and "start" in part.meta:
            return int(part.meta["start"]) + 1
    return 0


def _first_select(expression: exp.Expression) -> exp.Select | None:
    node: Any = expression
    while True:
        if isinstance(node, exp.Select):
            return node
        if isinstance(node, exp.Subquery):
            node = node.this
        elif isinstance(node, exp.SetOperation):
            node = node.left
        else:
            return None


def _name_outputs(expression: exp.Expression) -> tuple[str, ...] | None:
    select = _first_select(expression)
    if select is None:
        return None
    projections = list(select.expressions)
    if any(_is_star(p) for p in projections):
        return None
    names = [output_name(p) for p in projections]
    counts = Counter(names)
    taken = set(names)
    rewritten: list[Any] = []
    for index, (projection, name) in enumerate(zip(projections, names, strict=True)):
        internal = name
        if counts[name] > 1:
            internal = f"{name}_{index}"
            while internal in taken:
                internal += "_"
            taken.add(internal)
        if isinstance(projection, exp.Column) and internal == name:
            rewritten.append(projection)
        else:
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            rewritten.append(exp.alias_(inner, exp.to_identifier(internal, quoted=True)))
    select.set("expressions", rewritten)
    return tuple(names)


def _is_star(projection: exp.Expression) -> bool:
    return isinstance(projection, exp.Star) or (
        isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
    )


def output_name(projection: exp.Expression) -> str:
    """The column name PostgreSQL gives a projection."""
    if isinstance(projection, exp.Alias):
        return projection.alias
    if isinstance(projection, exp.Paren):
        return output_name(projection.this)
    if isinstance(projection, exp.Column):
        return projection.name
    if isinstance(projection, exp.Cast | exp.TryCast):
        if isinstance(projection.this, exp.Column):
            return projection.this.name
        return projection.to.sql(dialect=GENERATE_DIALECT).lower()
    if isinstance(projection, exp.Anonymous):
        return projection.name.lower()
    if isinstance(projection, exp.Func):
        return projection.sql_name().lower()
    if isinstance(projection, exp.Case):
        return "case"
    return "?column?"
