"""Builtin views (``loupe.builtins.BUILTIN_VIEWS``): inlined into the queries that name them.

The statement log's views (``mz_recent_activity_log`` and its redacted twin)
are plain queries over builtin collections. Rather than a dataflow, a query
naming one gets the view's query in its place, as a subquery with the view's
name as alias, before names are resolved: it then reads only system
relations and runs where those run.
"""

from __future__ import annotations

from functools import cache

from sqlglot import exp

from loupe.builtins import BUILTIN_VIEWS, BuiltinView
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query


@cache
def _view_query(view: BuiltinView) -> exp.Expression:
    statement = parse_one(view.sql)
    assert isinstance(statement, Query), view.qualified_name
    return statement.expression


def _view_named(table: exp.Table) -> BuiltinView | None:
    """The builtin view ``table`` names; only ``mz_internal.<view>`` (not on the search path)."""
    return BUILTIN_VIEWS.get(f"{table.db.lower()}.{table.name.lower()}")


def inline_builtin_views(expression: exp.Expression) -> exp.Expression:
    """``expression`` with every builtin view it names replaced by the view's query."""
    if not any(_view_named(table) for table in expression.find_all(exp.Table)):
        return expression
    expression = expression.copy()
    for table in expression.find_all(exp.Table):
        view = _view_named(table)
        if view is None:
            continue
        alias = table.alias or view.name
        table.replace(
            exp.Subquery(
                this=_view_query(view).copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))
            )
        )
    return expression
