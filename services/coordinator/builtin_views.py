"""Builtin views: inlined into the queries that name them, before names are resolved.

Rather than a dataflow, a query naming a builtin view gets the view's query in
its place, as a subquery with the view's name as alias; views over views are
inlined until none is left. Two families:

- the statement log's views (``loupe.builtins.BUILTIN_VIEWS``, ``mz_internal``);
- PostgreSQL's catalog (``loupe.pg_catalog.VIEWS``, ``pg_catalog`` and
  ``information_schema``); ``pg_catalog`` is searched first for unqualified
  names, as PostgreSQL searches it (it holds views only, so no relation shadows);
- the introspection views (``loupe.introspection.views.VIEWS``), in two schemas:
  ``mz_introspection.<view>`` reads the raw logs of the replica a query
  targets, ``mz_internal.<view>`` the persisted collections of every replica
  (``replica_id`` and ``incarnation`` in front of the view's columns).

A qualified name is a view when its schema has one by that name. An
unqualified one is found as name resolution finds relations: through
``mz_catalog`` and then the session's search path, the first schema holding a
relation or a view by that name wins (so ``mz_introspection`` views are found
unqualified only with that schema on the search path, as in Materialize).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

from sqlglot import exp

from loupe.builtins import BUILTIN_VIEWS, IMPLICIT_SCHEMAS
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query
from loupe.introspection.views import INTERNAL, INTROSPECTION, VIEWS, passed_over
from loupe.pg_catalog import PG_CATALOG
from loupe.pg_catalog import VIEWS as PG_VIEWS


def view_sql(schema: str, name: str) -> str | None:
    """The query of the builtin view ``schema.name``, if there is one."""
    builtin = BUILTIN_VIEWS.get(f"{schema}.{name}") or PG_VIEWS.get(f"{schema}.{name}")
    if builtin is not None:
        return builtin.sql
    view = VIEWS.get(name) if schema in (INTROSPECTION, INTERNAL) else None
    return view.sql(schema) if view is not None else None


def view_columns(schema: str, name: str) -> tuple[tuple[str, str], ...] | None:
    """The columns of the introspection view ``schema.name``, if it is one."""
    view = VIEWS.get(name) if schema in (INTROSPECTION, INTERNAL) else None
    return view.columns_in(schema) if view is not None else None


@cache
def _view_query(schema: str, name: str) -> exp.Expression:
    sql = view_sql(schema, name)
    assert sql is not None, (schema, name)
    statement = parse_one(sql)
    assert isinstance(statement, Query), (schema, name)
    return statement.expression


def inline_builtin_views(
    expression: exp.Expression,
    *,
    search_path: Sequence[str] = (),
    is_relation: Callable[[str], bool] = lambda qualified: False,
) -> exp.Expression:
    """``expression`` with every builtin view it names replaced by the view's query.

    ``search_path``: the session's schemas, for unqualified names;
    ``is_relation(schema.name)``: whether a relation (not a view) has that
    name, so that it shadows a view later on the path.
    """
    schemas = (PG_CATALOG, *IMPLICIT_SCHEMAS, *search_path)
    if not _views_named(expression, schemas, is_relation):
        return expression
    expression = expression.copy()
    while found := _views_named(expression, schemas, is_relation):
        for table, (schema, name) in found:
            alias = table.alias or table.name
            table.replace(
                exp.Subquery(
                    this=_view_query(schema, name).copy(),
                    alias=exp.TableAlias(this=exp.to_identifier(alias)),
                )
            )
    return expression


def _views_named(
    expression: exp.Expression, schemas: Sequence[str], is_relation: Callable[[str], bool]
) -> list[tuple[exp.Table, tuple[str, str]]]:
    ctes = {cte.alias_or_name.lower() for cte in expression.find_all(exp.CTE)}
    found = []
    for table in expression.find_all(exp.Table):
        view = _view_named(table, ctes, schemas, is_relation)
        if view is not None:
            found.append((table, view))
    return found


def _view_named(
    table: exp.Table, ctes: set[str], schemas: Sequence[str], is_relation: Callable[[str], bool]
) -> tuple[str, str] | None:
    """(schema, name) of the builtin view ``table`` names, if it names one."""
    if table.catalog or not isinstance(table.this, exp.Identifier):
        return None
    name = table.name.lower()
    if table.db:
        schema = table.db.lower()
        return (schema, name) if view_sql(schema, name) is not None else None
    if name in ctes:
        return None
    for schema in schemas:
        if passed_over(schema, name, schemas):
            continue
        if is_relation(f"{schema}.{name}"):
            return None
        if view_sql(schema, name) is not None:
            return (schema, name)
    return None


# The session the columns of a builtin view are typed in (the values do not matter).
_TYPING_SESSION_USER = "mz_system"


@cache
def builtin_view_columns(schema: str, name: str) -> tuple[tuple[str, str], ...]:
    """(name, type) of each column of the builtin view ``schema.name``, as the planner types
    its query (for mz_columns, where the listed builtin views' columns are)."""
    from loupe.builtins import BY_QUALIFIED_NAME
    from loupe.coordinator.objects import relation_columns
    from loupe.coordinator.pg_functions import SessionValues, fold_session_functions
    from loupe.coordinator.plan import plan_query
    from loupe.coordinator.sql.resolve import resolve_relations

    expression = inline_builtin_views(_view_query(schema, name).copy())
    session = SessionValues(
        user=_TYPING_SESSION_USER, database="", search_path=(), setting=lambda _name: ""
    )
    expression = fold_session_functions(expression, session)
    expression, relations = resolve_relations(expression, collections=BY_QUALIFIED_NAME)

    def resolve(qualified: str) -> tuple[str, list[tuple[str, str]]] | None:
        found = relations.get(qualified)
        return (found.id, relation_columns(found)) if found is not None else None

    return tuple(plan_query(expression, resolve).columns)
