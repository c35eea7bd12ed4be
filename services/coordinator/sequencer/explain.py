"""``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN … FOR <query | VIEW v | INDEX i | …>`` and
``EXPLAIN ANALYZE``.

A query's names are resolved as a SELECT resolves them, the query is planned
(``loupe.coordinator.plan``) and the plan's text returned as one row, without
reading anything; a stored object's plan comes from
``loupe.coordinator.compute``.

``EXPLAIN ANALYZE`` is a query over the introspection relations
(``loupe.coordinator.explain_analyze``), run as a SELECT (or returned as
text with ``AS SQL``). It reads ``mz_introspection`` on the replica the
session targets, or on the only replica of the cluster (the object's, for
``FOR``; the session's, for ``CLUSTER``); otherwise the persisted
``mz_internal`` relations of every replica, with a ``replica`` column.
``HYDRATION`` reads the controller's hydration collections (every replica,
or the targeted one).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator import explain_analyze as analyze
from loupe.coordinator.catalog_state import CatalogState
from loupe.coordinator.compute import WRONG_OBJECT_TYPE, explain_text
from loupe.coordinator.plan import plan_query
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import select
from loupe.coordinator.sequencer.peek import peek_target_replica
from loupe.coordinator.session import Session
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.resolve import Relation, resolve_relations, search_path_schemas
from loupe.coordinator.sql.statements import Explain, ExplainAnalyze
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


# Materialize's names of item types, for "Expected … to be an index, not a …".
_KIND_WORDS = {"materialized-view": "materialized view"}


async def explain_analyze(
    ctx: SequencerContext, session: Session, statement: ExplainAnalyze
) -> StatementResult:
    """The query ``EXPLAIN ANALYZE`` stands for, run (or its text, ``AS SQL``)."""
    cluster = await ctx.compute.session_cluster(session)
    _, replica_id = await peek_target_replica(ctx, session, cluster)
    replicas = ctx.state.replicas_of(cluster.id)
    if statement.cluster:
        persisted = not replica_id and len(replicas) != 1
        target = analyze.Target(persisted=persisted, cluster_id=cluster.id)
        sql = analyze.cluster_sql(statement.properties, statement.skew, target)
    else:
        assert statement.object_name is not None
        obj = await ctx.compute._object_named(session, statement.object_name)
        if obj is None:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE,
                f"unknown catalog item '{statement.object_name}'",
                position=statement.object_name.position,
            )
        name = f"{obj.database}.{obj.schema}.{obj.name}"
        if obj.type != statement.object_kind:
            wanted = _KIND_WORDS.get(statement.object_kind, statement.object_kind)
            article = "an" if wanted[0] in "aeiou" else "a"
            raise LoupeError(
                WRONG_OBJECT_TYPE,
                f"Expected {name} to be {article} {wanted}, "
                f"not a {_KIND_WORDS.get(obj.type, obj.type)}",
                position=statement.object_name.position,
            )
        here = obj.cluster_id == cluster.id
        if statement.properties == (analyze.HYDRATION,):
            sql = analyze.hydration_sql(obj.id, name, replica_id if here else "")
        else:
            persisted = not replica_id and not (here and len(replicas) == 1)
            sql = analyze.object_sql(
                statement.properties, statement.skew, name, analyze.Target(persisted=persisted)
            )
    if statement.as_sql:
        return StatementResult(tag="SELECT 1", columns=(("SQL", "text"),), rows=[(sql,)])
    return await select.select(ctx, session, parse_one(sql))
