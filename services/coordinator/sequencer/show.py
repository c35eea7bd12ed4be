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
from loupe.coordinator.objects import ComputeObject, quote
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import select
from loupe.coordinator.session import Session
from loupe.coordinator.show import builtin_columns_sql, quote_literal, show_sql
from loupe.coordinator.sql.parser import DEFAULT_INTROSPECTION_INTERVAL_NS, parse_one
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
    if statement.kind == "CREATE CLUSTER" and statement.target is not None:
        name = statement.target.name
        return StatementResult(
            tag="SELECT 1",
            columns=(("name", "text"), ("create_sql", "text")),
            rows=[(name, create_cluster_sql(ctx, name, statement))],
        )
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


def create_cluster_sql(ctx: SequencerContext, name: str, statement: ShowObjects) -> str:
    """A ``CREATE CLUSTER`` that makes the cluster as it is now (42704 for no such cluster).

    A managed cluster shows its options as Materialize prints them; an
    unmanaged one lists its replicas and their sizes.
    """
    snapshot = ctx.state.snapshot
    cluster = next((c for c in snapshot.clusters if c.name == name), None)
    if cluster is None:
        raise LoupeError(
            SqlState.UNDEFINED_OBJECT,
            f"unknown cluster '{name}'",
            position=statement.target.position if statement.target else 0,
        )
    quoted = quote(cluster.name)
    interval = cluster.introspection_interval_ns
    if cluster.managed:
        options = [
            f"INTROSPECTION DEBUGGING = {str(cluster.introspection_debugging).lower()}",
            f"INTROSPECTION INTERVAL = {_interval_literal(interval)}",
            "MANAGED = true",
            f"REPLICATION FACTOR = {cluster.replication_factor}",
            f"SIZE = {quote_literal(cluster.size)}",
        ]
        return f"CREATE CLUSTER {quoted} ({', '.join(options)})"
    replicas = sorted(
        (r for r in snapshot.replicas if r.cluster_id == cluster.id), key=lambda r: r.name
    )
    listed = ", ".join(f"{quote(r.name)} (SIZE {quote_literal(r.size)})" for r in replicas)
    # Introspection options that differ from the defaults follow the replicas.
    changed = []
    if cluster.introspection_debugging:
        changed.append("INTROSPECTION DEBUGGING = true")
    if interval != DEFAULT_INTROSPECTION_INTERVAL_NS:
        changed.append(f"INTROSPECTION INTERVAL = {_interval_literal(interval)}")
    suffix = f" ({', '.join(changed)})" if changed else ""
    return f"CREATE CLUSTER {quoted} REPLICAS ({listed}){suffix}"


def _interval_literal(nanoseconds: int) -> str:
    """An introspection interval as CREATE CLUSTER takes it back (0 disables introspection)."""
    if nanoseconds == 0:
        return "0"
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if nanoseconds % size == 0:
            return f"'{nanoseconds // size}{unit}'"
    return f"'{nanoseconds}ns'"
