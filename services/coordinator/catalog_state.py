"""The coordinator's in-memory view of the catalog, and the relations derived from it.

``mz_catalog.mz_clusters``, ``mz_cluster_replicas``, ``mz_databases``,
``mz_schemas``, ``mz_roles`` and the item relations (``mz_tables``,
``mz_views``, ``mz_materialized_views``, ``mz_indexes``, ``mz_sources``,
``mz_objects``, ``mz_columns``; the builtin collections are listed there as
Materialize lists its builtin tables) are pure functions of a catalog snapshot;
``mz_catalog.mz_audit_events`` and ``mz_internal.mz_cluster_replica_history``
of the audit log (``loupe.coordinator.audit_log``), and
``mz_cluster_replica_sizes`` is the size table (``loupe.sizes``) the
coordinator was configured with. ``catalog_rows`` gives
them all; the coordinator keeps them in storage by appending the difference
between two states' rows (``row_diff``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loupe import sizes
from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    BY_QUALIFIED_NAME,
    MZ_CLUSTER_REPLICA_SIZES,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTERS,
    MZ_COLUMNS,
    MZ_DATABASES,
    MZ_INDEX_COLUMNS,
    MZ_INDEXES,
    MZ_MATERIALIZED_VIEWS,
    MZ_OBJECTS,
    MZ_ROLE_MEMBERS,
    MZ_ROLES,
    MZ_SCHEMAS,
    MZ_SOURCES,
    MZ_TABLES,
    MZ_VIEWS,
    SYSTEM_CLUSTER_NAME,
)
from loupe.common.logging import get_logger
from loupe.coordinator.audit_log import AUDIT_COLLECTIONS, AuditLog, Row
from loupe.coordinator.builtin_views import builtin_view_columns
from loupe.coordinator.introspection import (
    LOG_RELATIONS,
    Relations,
    ReplicaView,
    replica_view,
    split_replica_view,
)
from loupe.coordinator.objects import ComputeObject, load_objects, relation_columns
from loupe.coordinator.tables import Table, columns_of
from loupe.interval import Interval
from loupe.pg_catalog import VIEWS as PG_VIEWS
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.sqltypes import display_name

log = get_logger(__name__)

ITEM_COLLECTIONS = (
    MZ_TABLES,
    MZ_VIEWS,
    MZ_MATERIALIZED_VIEWS,
    MZ_INDEXES,
    MZ_INDEX_COLUMNS,
    MZ_SOURCES,
    MZ_OBJECTS,
    MZ_COLUMNS,
)
# The builtin collections that are functions of a catalog snapshot.
SNAPSHOT_COLLECTIONS = (
    MZ_CLUSTERS,
    MZ_CLUSTER_REPLICAS,
    MZ_CLUSTER_REPLICA_SIZES,
    MZ_DATABASES,
    MZ_SCHEMAS,
    MZ_ROLES,
    MZ_ROLE_MEMBERS,
    *ITEM_COLLECTIONS,
)
# The builtin collections whose contents come from the catalog.
CATALOG_COLLECTIONS = SNAPSHOT_COLLECTIONS + AUDIT_COLLECTIONS


@dataclass(frozen=True)
class ClusterInfo:
    id: str
    name: str
    managed: bool
    # 0: its replicas keep no introspection logs.
    introspection_interval_ns: int = 1_000_000_000


@dataclass(frozen=True)
class ReplicaInfo:
    id: str
    name: str
    cluster_id: str


class CatalogState:
    """One catalog snapshot with lookups by name."""

    def __init__(self, snapshot: catalog_pb2.CatalogSnapshot | None = None) -> None:
        self.snapshot = snapshot or catalog_pb2.CatalogSnapshot()
        self.clusters = {
            c.name: ClusterInfo(c.id, c.name, c.managed, c.introspection_interval_ns)
            for c in self.snapshot.clusters
        }
        self._clusters_by_id = {c.id: c for c in self.clusters.values()}
        self.replicas = [ReplicaInfo(r.id, r.name, r.cluster_id) for r in self.snapshot.replicas]
        self.roles = {r.name: r.id for r in self.snapshot.roles}
        self.role_objects = {r.name: r for r in self.snapshot.roles}
        self.databases = {d.id: d for d in self.snapshot.databases}
        self.schemas = {s.id: s for s in self.snapshot.schemas}
        self.items = {i.id: i for i in self.snapshot.items}
        # Tables by id; a table whose create_sql does not parse is left out (and logged).
        self.tables: dict[str, Table] = {}
        for item in self.snapshot.items:
            if item.type == "table":
                table = self._table(item)
                if table is not None:
                    self.tables[table.id] = table
        self._tables_by_full_name = {t.full_name: t for t in self.tables.values()}
        # Views, materialized views and indexes, planned from their definitions.
        self.objects: dict[str, ComputeObject] = load_objects(
            self.snapshot.items,
            names=self._item_names,
            plan=self._plan_stored,
            relation_named=self.relation_named,
        )

    @property
    def timestamp(self) -> int:
        return self.snapshot.timestamp

    @property
    def key(self) -> tuple[int, int]:
        """Where the snapshot is in commit order: (epoch, commit timestamp)."""
        return snapshot_key(self.snapshot)

    def is_newer_than(self, other: CatalogState) -> bool:
        """Whether this snapshot is at least as recent as ``other`` (epoch, then commit time)."""
        return self.key >= other.key

    def cluster(self, name: str) -> ClusterInfo | None:
        return self.clusters.get(name)

    @property
    def system_cluster(self) -> ClusterInfo | None:
        return self.clusters.get(SYSTEM_CLUSTER_NAME)

    def replicas_of(self, cluster_id: str) -> list[ReplicaInfo]:
        return [r for r in self.replicas if r.cluster_id == cluster_id]

    def replica_view(self, qualified_name: str) -> ReplicaView | None:
        """``mz_internal.<relation>_<replica id>`` while the replica exists and keeps logs."""
        split = split_replica_view(qualified_name)
        if split is None:
            return None
        relation, replica_id = split
        replica = next((r for r in self.replicas if r.id == replica_id), None)
        cluster = self._clusters_by_id.get(replica.cluster_id) if replica is not None else None
        if cluster is None or not cluster.introspection_interval_ns:
            return None
        return replica_view(relation, replica_id)

    def resolvable(self, database: str) -> Relations:
        """``schema.name`` -> what a query in ``database`` can name (``resolve_relations``)."""
        named = {**BY_QUALIFIED_NAME, **LOG_RELATIONS, **self.relations_in(database)}
        return Relations(named, self.replica_view)

    @property
    def compute_objects(self) -> Relations:
        """Id -> view, MV or index, and the per-replica views (whose ids are their names)."""
        return Relations(self.objects, self.replica_view)

    def replica(self, cluster_id: str, name: str) -> ReplicaInfo | None:
        return next(
            (r for r in self.replicas if r.cluster_id == cluster_id and r.name == name), None
        )

    def role_id(self, name: str) -> str | None:
        """The id of the role called ``name``, if the catalog has one."""
        return self.roles.get(name)

    def schema_named(self, database: str, name: str) -> catalog_pb2.Schema | None:
        """The schema ``name`` of database ``database`` (empty: an ambient schema)."""
        for schema in self.snapshot.schemas:
            if schema.name != name:
                continue
            owner = self.databases.get(schema.database_id)
            if (owner.name if owner is not None else "") == database:
                return schema
        return None

    def item_named(self, schema_id: str, name: str) -> catalog_pb2.Item | None:
        return next(
            (i for i in self.snapshot.items if i.schema_id == schema_id and i.name == name), None
        )

    def tables_in(self, database: str) -> dict[str, Table]:
        """``schema.name`` -> table, for the tables of ``database`` (name resolution)."""
        return {t.qualified_name: t for t in self.tables.values() if t.database == database}

    def relations_in(self, database: str) -> dict[str, Table | ComputeObject]:
        """``schema.name`` -> what a query can read in ``database``: tables, views, MVs."""
        relations: dict[str, Table | ComputeObject] = dict(self.tables_in(database))
        for obj in self.objects.values():
            if obj.type != "index" and obj.database == database:
                relations[obj.qualified_name] = obj
        return relations

    def relation_named(self, name: str, objects: dict[str, ComputeObject] | None = None) -> Any:
        """The relation a fully qualified name (as stored in ``create_sql``) names, or None.

        Builtins are ``schema.name``, user relations ``database.schema.name``.
        """
        found = (
            BY_QUALIFIED_NAME.get(name)
            or LOG_RELATIONS.get(name)
            or self._tables_by_full_name.get(name)
            or self.replica_view(name)
        )
        if found is not None:
            return found
        for obj in (self.objects if objects is None else objects).values():
            if obj.type != "index" and obj.full_name == name:
                return obj
        return None

    def indexes_on(self, object_id: str, cluster_id: str | None = None) -> list[ComputeObject]:
        """The indexes on ``object_id`` (on ``cluster_id`` only, when given), oldest first."""
        return [
            o
            for o in self.objects.values()
            if o.type == "index"
            and o.on_id == object_id
            and (cluster_id is None or o.cluster_id == cluster_id)
        ]

    def _item_names(self, item: catalog_pb2.Item) -> tuple[str, str, str]:
        schema = self.schemas.get(item.schema_id)
        database = self.databases.get(schema.database_id) if schema is not None else None
        return (
            database.name if database is not None else "",
            schema.name if schema is not None else "",
            item.name,
        )

    def _plan_stored(self, query: Any, objects: dict[str, ComputeObject]) -> tuple[Any, list[Any]]:
        """Plan a stored definition (fully qualified names) against ``objects`` so far."""
        from loupe.coordinator.plan import plan_query

        reads: list[Any] = []

        def resolve(name: str) -> tuple[str, list[tuple[str, str]]] | None:
            relation = self.relation_named(name, objects)
            if relation is None:
                return None
            reads.append(relation)
            return relation.id, relation_columns(relation)

        return plan_query(query, resolve), reads

    def _table(self, item: catalog_pb2.Item) -> Table | None:
        schema = self.schemas.get(item.schema_id)
        database = self.databases.get(schema.database_id) if schema is not None else None
        try:
            columns = columns_of(item.create_sql)
        except Exception as error:
            log.warning("table definition does not parse", id=item.id, error=str(error))
            return None
        return Table(
            id=item.id,
            database=database.name if database is not None else "",
            schema=schema.name if schema is not None else "",
            schema_id=item.schema_id,
            name=item.name,
            owner_id=item.owner_id,
            columns=columns,
            create_sql=item.create_sql,
        )


def snapshot_key(snapshot: catalog_pb2.CatalogSnapshot) -> tuple[int, int]:
    """(epoch, commit timestamp): snapshots compare in commit order by it."""
    return (snapshot.epoch, snapshot.timestamp)


def cluster_row(cluster: catalog_pb2.Cluster) -> Row:
    """A row of ``mz_catalog.mz_clusters``.

    Size and replication factor are NULL for unmanaged clusters, the
    introspection interval is NULL when introspection is disabled (as in
    Materialize).
    """
    interval = (
        Interval(micros=cluster.introspection_interval_ns // 1000)
        if cluster.introspection_interval_ns
        else None
    )
    return (
        cluster.id,
        cluster.name,
        cluster.owner_id,
        cluster.managed,
        cluster.size if cluster.managed else None,
        cluster.replication_factor if cluster.managed else None,
        interval,
        cluster.introspection_debugging,
    )


def replica_row(replica: catalog_pb2.ClusterReplica) -> Row:
    """A row of ``mz_catalog.mz_cluster_replicas``."""
    return (replica.id, replica.name, replica.cluster_id, replica.size, replica.owner_id)


def database_row(database: catalog_pb2.Database) -> Row:
    """A row of ``mz_catalog.mz_databases``."""
    return (database.id, database.name, database.owner_id)


def schema_row(schema: catalog_pb2.Schema) -> Row:
    """A row of ``mz_catalog.mz_schemas``; ambient schemas have a NULL database."""
    return (schema.id, schema.database_id or None, schema.name, schema.owner_id)


def role_row(role: catalog_pb2.Role) -> Row:
    """A row of ``mz_catalog.mz_roles``."""
    return (role.id, role.name, role.inherit)


def definition_of(create_sql: str) -> str | None:
    """The query of a view's ``CREATE … AS <query>`` (mz_views.definition)."""
    match = _DEFINITION.search(create_sql)
    return match.group(1).strip() if match else None


_DEFINITION = re.compile(r"\bAS\s+(.*)$", re.IGNORECASE | re.DOTALL)


def item_rows(snapshot: catalog_pb2.CatalogSnapshot) -> dict[str, Counter[Row]]:
    """The item relations: user items, the builtin collections as builtin tables, the logs as sources."""
    rows: dict[str, Counter[Row]] = {c.id: Counter() for c in ITEM_COLLECTIONS}
    schema_ids = {s.name: s.id for s in snapshot.schemas if not s.database_id}
    for builtin in BUILTIN_COLLECTIONS:
        schema_id = schema_ids.get(builtin.schema)
        rows[MZ_TABLES.id][(builtin.id, schema_id, builtin.name, "s1", None, None)] += 1
        rows[MZ_OBJECTS.id][(builtin.id, schema_id, builtin.name, "table", "s1", None)] += 1
        for position, (name, kind) in enumerate(builtin.columns, start=1):
            rows[MZ_COLUMNS.id][(builtin.id, name, position, True, display_name(kind))] += 1
    # The builtin views listed as Materialize lists its own (pg_catalog's; information_schema's
    # once the catalog has that schema).
    for view in PG_VIEWS.values():
        schema_id = schema_ids.get(view.schema)
        if view.id is None or schema_id is None:
            continue
        rows[MZ_VIEWS.id][(view.id, schema_id, view.name, view.sql.strip(), "s1", None, None)] += 1
        rows[MZ_OBJECTS.id][(view.id, schema_id, view.name, "view", "s1", None)] += 1
        columns = builtin_view_columns(view.schema, view.name)
        for position, (name, kind) in enumerate(columns, start=1):
            rows[MZ_COLUMNS.id][(view.id, name, position, True, display_name(kind))] += 1
    # The replicas' raw logs, as Materialize lists its log sources.
    for log_relation in LOG_RELATIONS.values():
        schema_id = schema_ids.get("mz_introspection")
        common = (log_relation.id, schema_id, log_relation.name)
        rows[MZ_SOURCES.id][(*common, "log", "s1", None)] += 1
        rows[MZ_OBJECTS.id][(*common, "source", "s1", None)] += 1
        for position, (name, kind) in enumerate(log_relation.columns, start=1):
            rows[MZ_COLUMNS.id][(log_relation.id, name, position, True, display_name(kind))] += 1
    state = CatalogState(snapshot)
    for item in snapshot.items:
        sql = item.create_sql or None
        cluster_id = item.cluster_id or None
        rows[MZ_OBJECTS.id][
            (item.id, item.schema_id, item.name, item.type, item.owner_id, cluster_id)
        ] += 1
        common = (item.id, item.schema_id, item.name)
        if item.type == "table":
            rows[MZ_TABLES.id][(*common, item.owner_id, sql, sql)] += 1
            table = state.tables.get(item.id)
            for position, column in enumerate(table.columns if table else (), start=1):
                rows[MZ_COLUMNS.id][
                    (item.id, column.name, position, column.nullable, column.base_type)
                ] += 1
        elif item.type == "view":
            rows[MZ_VIEWS.id][
                (*common, definition_of(item.create_sql), item.owner_id, sql, sql)
            ] += 1
            _computed_columns(rows, state, item.id)
        elif item.type == "materialized-view":
            rows[MZ_MATERIALIZED_VIEWS.id][
                (*common, cluster_id, definition_of(item.create_sql), item.owner_id, sql, sql)
            ] += 1
            _computed_columns(rows, state, item.id)
        elif item.type == "index":
            index = state.objects.get(item.id)
            on_id = index.on_id if index is not None else None
            rows[MZ_INDEXES.id][(item.id, item.name, on_id, cluster_id, item.owner_id, sql)] += 1
            for position, on_position in enumerate(index.key if index else (), start=1):
                rows[MZ_INDEX_COLUMNS.id][(item.id, position, on_position + 1, None, True)] += 1
        elif item.type == "source":
            rows[MZ_SOURCES.id][(*common, None, item.owner_id, sql)] += 1
    return rows


def _computed_columns(rows: dict[str, Counter[Row]], state: CatalogState, item_id: str) -> None:
    """mz_columns rows of a view or materialized view, as Materialize lists them (every column
    nullable: Loupe does not infer nullability), for psql's ``\\d`` and information_schema."""
    computed = state.objects.get(item_id)
    for position, (name, kind) in enumerate(computed.columns if computed else (), start=1):
        rows[MZ_COLUMNS.id][(item_id, name, position, True, display_name(kind))] += 1


def catalog_rows(
    snapshot: catalog_pb2.CatalogSnapshot, audit: AuditLog | None = None
) -> dict[str, Counter[Row]]:
    """Collection id -> the rows (as a multiset) the catalog says it holds.

    Without an audit log the audit-derived collections are left out.
    """
    rows = {
        MZ_CLUSTERS.id: Counter(cluster_row(c) for c in snapshot.clusters),
        MZ_CLUSTER_REPLICAS.id: Counter(replica_row(r) for r in snapshot.replicas),
        # Not from the snapshot: the size table this process was configured with.
        MZ_CLUSTER_REPLICA_SIZES.id: Counter(s.row() for s in sizes.sizes()),
        MZ_DATABASES.id: Counter(database_row(d) for d in snapshot.databases),
        MZ_SCHEMAS.id: Counter(schema_row(s) for s in snapshot.schemas),
        MZ_ROLES.id: Counter(role_row(r) for r in snapshot.roles),
        MZ_ROLE_MEMBERS.id: Counter(
            (role_id, r.id, grantor)
            for r in snapshot.roles
            for role_id, grantor in r.member_of.items()
        ),
        **item_rows(snapshot),
    }
    if audit is not None:
        rows.update(audit.rows())
    return rows


def row_diff(
    old: Mapping[str, Counter[Row]], new: Mapping[str, Counter[Row]]
) -> dict[str, list[tuple[Row, int]]]:
    """Collection id -> the updates (row, diff) that turn ``old`` into ``new``.

    Retractions come first; collections without changes are left out.
    """
    changes: dict[str, list[tuple[Row, int]]] = {}
    for collection_id in sorted(set(old) | set(new)):
        before = old.get(collection_id, Counter())
        after = new.get(collection_id, Counter())
        if before == after:
            continue  # the usual case, and cheap even for the whole audit log
        retracted = {
            row: after.get(row, 0) - n for row, n in before.items() if after.get(row, 0) < n
        }
        inserted = {
            row: n - before.get(row, 0) for row, n in after.items() if before.get(row, 0) < n
        }
        updates = [(row, retracted[row]) for row in _ordered(retracted)]
        updates += [(row, inserted[row]) for row in _ordered(inserted)]
        if updates:
            changes[collection_id] = updates
    return changes


def _ordered(rows: Iterable[Row]) -> list[Row]:
    # Deterministic order makes batches reproducible (and tests readable).
    return sorted(rows, key=lambda row: tuple("" if v is None else str(v) for v in row))
