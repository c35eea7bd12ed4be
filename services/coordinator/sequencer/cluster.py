"""Cluster DDL: ``CREATE CLUSTER``, ``ALTER CLUSTER``, ``CREATE|DROP CLUSTER REPLICA``.

Each is one catalog operation (``catalog_op``) committed by
``ddl.transact``; the controller starts and stops the replicas when it
follows the commit. ``DROP CLUSTER`` drops the indexes and materialized
views maintained on the cluster too, and ``DROP CLUSTER REPLICA`` the objects
reading its introspection views, so ``loupe.coordinator.compute`` sequences
them (with ``catalog_op`` for the cluster or replica itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loupe.common.errors import LoupeError
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import (
    AlterCluster,
    CreateCluster,
    CreateClusterReplica,
    DropCluster,
    DropClusterReplica,
    Statement,
)
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"


async def cluster_ddl(
    ctx: SequencerContext,
    session: Session,
    statement: CreateCluster | CreateClusterReplica | DropClusterReplica | AlterCluster,
) -> StatementResult:
    """Commit the statement's catalog operation (superusers only)."""
    if isinstance(statement, AlterCluster) and statement.introspection_interval_ns == 0:
        check_no_replica_view_readers(ctx, statement)
    op = catalog_op(statement, owner_id=ddl.owner_id(ctx, session))
    _, result = await ddl.transact(ctx, session, statement, [op])
    return result


def check_no_replica_view_readers(ctx: SequencerContext, statement: AlterCluster) -> None:
    """Refuse (2BP01) to disable introspection while objects read the replicas' views.

    A cluster that keeps no logs has no per-replica introspection views
    (``loupe.coordinator.introspection``): what reads them would stop planning.
    """
    cluster = ctx.state.cluster(statement.name)
    if cluster is None:
        return  # the catalog answers for an unknown cluster
    replicas = {r.id for r in ctx.state.replicas_of(cluster.id)}
    readers = ctx.compute.replica_view_dependents(replicas)
    if readers:
        names = ", ".join(f'{o.type.replace("-", " ")} "{o.full_name}"' for o in readers)
        raise LoupeError(
            DEPENDENT_OBJECTS_STILL_EXIST,
            f'cannot disable introspection of cluster "{statement.name}": '
            f"still depended upon by {names}",
            hint="Drop the objects reading its replicas' introspection views first.",
            position=statement.position,
        )


def catalog_op(statement: Statement, *, owner_id: str) -> catalog_pb2.CatalogOp:
    """The catalog operation a DDL statement asks for."""
    match statement:
        case CreateCluster():
            cluster = catalog_pb2.Cluster(
                name=statement.name,
                owner_id=owner_id,
                managed=statement.managed,
                size=statement.size if statement.managed else "",
                replication_factor=statement.replication_factor if statement.managed else 0,
                introspection_interval_ns=statement.introspection_interval_ns,
                introspection_debugging=statement.introspection_debugging,
            )
            # The catalog names a managed cluster's replicas (r1..rk) itself and
            # refuses explicit ones; an unmanaged cluster's are listed.
            replicas = [
                catalog_pb2.ClusterReplica(name=r.name, size=r.size, owner_id=owner_id)
                for r in statement.replicas
            ]
            return catalog_pb2.CatalogOp(
                create_cluster=catalog_pb2.CreateCluster(cluster=cluster, replicas=replicas)
            )
        case CreateClusterReplica():
            return catalog_pb2.CatalogOp(
                create_cluster_replica=catalog_pb2.CreateClusterReplica(
                    replica=catalog_pb2.ClusterReplica(
                        name=statement.replica, size=statement.size, owner_id=owner_id
                    ),
                    cluster_name=statement.cluster,
                )
            )
        case AlterCluster():
            return catalog_pb2.CatalogOp(
                alter_cluster=catalog_pb2.AlterCluster(
                    name=statement.name,
                    introspection_interval_ns=statement.introspection_interval_ns,
                    introspection_debugging=statement.introspection_debugging,
                )
            )
        case DropCluster():
            return catalog_pb2.CatalogOp(
                drop_cluster=catalog_pb2.DropCluster(
                    name=statement.name, if_exists=statement.if_exists, cascade=statement.cascade
                )
            )
        case DropClusterReplica():
            return catalog_pb2.CatalogOp(
                drop_cluster_replica=catalog_pb2.DropClusterReplica(
                    cluster_name=statement.cluster,
                    replica_name=statement.replica,
                    if_exists=statement.if_exists,
                )
            )
    raise TypeError(f"not a DDL statement: {statement!r}")
