"""``SHOW`` of catalog objects: each form becomes a SELECT over the catalog relations.

``SHOW CLUSTERS``, ``SHOW CLUSTER REPLICAS`` and ``SHOW ROLES`` are fixed
queries (below); ``SHOW TABLES | VIEWS | … | COLUMNS FROM x | CREATE … x``
are written by ``loupe.coordinator.show`` once the target (if any) is
resolved here. All run as SELECTs (``sequencer.select``), so they are
cancelable and read at a timestamp like any query. ``SHOW <variable>`` is
``sequencer.variables``'.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.objects import ComputeObject
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import select
from loupe.coordinator.session import Session
from loupe.coordinator.show import builtin_columns_sql, show_sql
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.resolve import search_path_schemas
from loupe.coordinator.sql.statements import (
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
)
from loupe.coordinator.tables import Table

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

SHOW_CLUSTERS_SQL = "SELECT name FROM mz_catalog.mz_clusters ORDER BY name"
# Materialize's SHOW ROLES: the roles users create (not the system ones).
SHOW_ROLES_SQL = "SELECT name FROM mz_catalog.mz_roles WHERE id LIKE 'u%' ORDER BY name"
SHOW_CLUSTER_REPLICAS_SQL = """
SELECT c.name AS "cluster", r.name AS replica, r.size AS size,
       COALESCE(s.status = 'online', FALSE) AS ready
FROM mz_catalog.mz_cluster_replicas AS r
JOIN mz_catalog.mz_clusters AS c ON c.id = r.cluster_id
LEFT JOIN mz_internal.mz_cluster_replica_statuses AS s ON s.replica_id = r.id
ORDER BY c.name, r.name
"""


async def show(
    ctx: SequencerContext,
    session: Session,
    statement: ShowClusters | ShowClusterReplicas | ShowRoles | ShowObjects,
) -> StatementResult:
    """Run the SELECT a ``SHOW`` of catalog objects stands for."""
    match statement:
        case ShowClusters():
            return await select.select(ctx, session, parse_one(SHOW_CLUSTERS_SQL))
        case ShowClusterReplicas():
            return await select.select(ctx, session, parse_one(SHOW_CLUSTER_REPLICAS_SQL))
        case ShowRoles():
            return await select.select(ctx, session, parse_one(SHOW_ROLES_SQL))
    return await show_objects(ctx, session, statement)


async def show_objects(
    ctx: SequencerContext, session: Session, statement: ShowObjects
) -> StatementResult:
    """``SHOW TABLES``, ``SHOW COLUMNS FROM t``, ``SHOW CREATE VIEW v``…: a catalog query."""
    target_id = None
    if statement.target is not None:
        if statement.kind == "CREATE INDEX":
            index = await ctx.compute._object_named(session, statement.target)
            if index is None or index.type != "index":
                raise LoupeError(
                    SqlState.UNDEFINED_OBJECT,
                    f"unknown catalog item '{statement.target}'",
                    position=statement.target.position,
                )
            target_id = index.id
        else:
            relation = await ctx.compute.relation_named(session, statement.target)
            if statement.kind == "COLUMNS" and not isinstance(relation, Table | ComputeObject):
                return await select.select(ctx, session, parse_one(builtin_columns_sql(relation)))
            target_id = relation.id
    schema = next(
        (
            name
            for name in search_path_schemas(session.search_path)
            if ctx.state.schema_named(session.database, name) is not None
        ),
        "public",
    )
    sql = show_sql(statement, database=session.database, schema=schema, target_id=target_id)
    result = await select.select(ctx, session, parse_one(sql))
    return dataclasses.replace(result, tag=f"SELECT {len(result.rows)}")
