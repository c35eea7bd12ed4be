"""``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN … FOR <query | VIEW v | INDEX i | …>``.

A query's names are resolved as a SELECT resolves them, the query is planned
(``loupe.coordinator.plan``) and the plan's text returned as one row, without
reading anything; a stored object's plan comes from
``loupe.coordinator.compute``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlglot import exp

from loupe.coordinator.catalog_state import CatalogState
from loupe.coordinator.compute import explain_text
from loupe.coordinator.plan import plan_query
from loupe.coordinator.results import StatementResult
from loupe.coordinator.session import Session
from loupe.coordinator.sql.resolve import Relation, resolve_relations, search_path_schemas
from loupe.coordinator.sql.statements import Explain
from loupe.coordinator.tables import Table

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

# The name line of EXPLAIN for a query (Materialize prints ``Explained Query:``).
EXPLAINED_QUERY = "Explained Query"
EXPLAIN_COLUMNS = {"optimized": "Optimized Plan", "physical": "Physical Plan"}


async def explain(ctx: SequencerContext, session: Session, statement: Explain) -> StatementResult:
    """The plan of the query (or stored definition) as text: one row, one column."""
    if statement.query is None:
        name, planned = await ctx.compute.explain_object(session, statement)
    else:
        query = dataclasses.replace(
            statement.query,
            expression=ctx.compute.inline_views(session, statement.query.expression),
        )

        def attempt(state: CatalogState) -> tuple[exp.Expression, dict[str, Relation]]:
            return resolve_relations(
                query.expression,
                search_path=search_path_schemas(session.search_path),
                database=session.database,
                collections=state.resolvable(session.database),
            )

        expression, relations = await ctx.resolving(attempt)
        planned = plan_query(expression, lambda name: plan_source(relations[name]))
        name = EXPLAINED_QUERY
    text = explain_text(planned, statement.stage, statement.node_ids, name)
    return StatementResult(
        tag=statement.tag,
        columns=((EXPLAIN_COLUMNS[statement.stage], "text"),),
        rows=[(text,)],
    )


def plan_source(relation: Relation) -> tuple[str, list[tuple[str, str]]]:
    """(name, [(column, type)]) of a relation as the planner sees it.

    User tables are named ``database.schema.name`` with their storage types,
    builtin collections ``schema.name`` (as Materialize's EXPLAIN names them).
    """
    if isinstance(relation, Table):
        return relation.full_name, list(relation.storage_columns)
    return relation.qualified_name, list(getattr(relation, "columns", ()))
