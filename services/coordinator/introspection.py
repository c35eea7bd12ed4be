"""Replica introspection in SQL: the relations of the raw logs, per-replica views, routing.

- ``mz_introspection.<raw log>`` (``LogRelation``) is the collection a replica
  keeps in memory (the variant's log id): no shard holds it, so a query reading
  it imports the log id with an empty shard id and the replica it runs on feeds
  it from its logs. Such a query runs on the session's cluster, on one replica:
  the one ``SET cluster_replica`` names, or the only one; more than one and
  none named is Materialize's 0A000 ``log source reads must target a replica``,
  as is a cluster whose ``INTROSPECTION INTERVAL`` is 0 (no logs kept).
  Replicas keep no history of their logs: ``AS OF`` is refused (the persisted
  ``mz_internal`` collections keep ``introspection_retention`` of it).
- ``mz_internal.<relation>_<replica id>`` (seed 001) is a view of one replica's
  rows of the persisted ``mz_internal.<relation>`` (a raw log or a view),
  ``incarnation`` in front of Materialize's columns. It exists while the
  replica does (and its cluster keeps logs): users' views over it depend on it,
  so dropping the replica or its cluster needs ``CASCADE``. Its id is its
  qualified name (it is no catalog item).
- ``mz_introspection.<view>`` and ``mz_internal.<view>`` are inlined as other
  builtin views are (``loupe.coordinator.builtin_views``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from loupe.builtins import BY_QUALIFIED_NAME
from loupe.common.errors import LoupeError, SqlState
from loupe.introspection.logs import BY_NAME, LOG_VARIANTS, LogVariant
from loupe.introspection.views import INTERNAL, VIEWS
from loupe.plan import codec
from loupe.plan.mir import Relation as MirRelation
from loupe.proto.common.v1 import common_pb2

REPLICA_VIEW_OWNER = "s1"
# Materialize's hint for an untargeted read of a cluster with several replicas.
TARGET_HINT = (
    "Use `SET cluster_replica = <replica-name>` to target a specific replica in the "
    "active cluster. Note that subsequent queries will only be answered by the selected "
    "replica, which might reduce availability. To undo the replica selection, use "
    "`RESET cluster_replica`."
)


@dataclass(frozen=True)
class LogRelation:
    """``mz_introspection.<raw log>``: read on one replica, from its in-memory log."""

    variant: LogVariant

    @property
    def id(self) -> str:
        return self.variant.log_id

    @property
    def qualified_name(self) -> str:
        return self.variant.qualified_name

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return self.variant.columns

    @property
    def name(self) -> str:
        return self.variant.name


LOG_RELATIONS: dict[str, LogRelation] = {v.qualified_name: LogRelation(v) for v in LOG_VARIANTS}
LOG_BY_ID: dict[str, LogRelation] = {r.id: r for r in LOG_RELATIONS.values()}


def log_metadata(relation: LogRelation) -> common_pb2.CollectionMetadata:
    """A log's source import: no shard; the replica feeds it from its logs."""
    return common_pb2.CollectionMetadata(
        collection_id=relation.id,
        shard_id="",
        relation_desc=codec.desc_to_proto(list(relation.columns)),
    )


def log_names(ids: Iterable[str]) -> list[str]:
    """The raw logs among ``ids``, by name (for the errors' detail)."""
    return [LOG_BY_ID[i].name for i in dict.fromkeys(ids) if i in LOG_BY_ID]


def log_detail(names: list[str]) -> str:
    return "The query references the following log sources:\n    " + "\n    ".join(names)


def untargeted_read(names: list[str]) -> LoupeError:
    return LoupeError(
        SqlState.FEATURE_NOT_SUPPORTED,
        "log source reads must target a replica",
        detail=log_detail(names),
        hint=TARGET_HINT,
    )


def introspection_disabled(names: list[str], cluster: str) -> LoupeError:
    return LoupeError(
        SqlState.FEATURE_NOT_SUPPORTED,
        "cannot read log sources of replica with disabled introspection",
        detail=log_detail(names),
        hint=f"Cluster '{cluster}' has INTROSPECTION INTERVAL = 0: its replicas keep no logs.",
    )


def no_history(names: list[str]) -> LoupeError:
    """AS OF on ``mz_introspection``: replicas keep their logs' present only."""
    return LoupeError(
        SqlState.FEATURE_NOT_SUPPORTED,
        "AS OF is not supported for mz_introspection relations: replicas keep no history",
        detail=log_detail(names),
        hint="Read the persisted mz_internal relations AS OF instead (introspection_retention).",
    )


# -- per-replica views ----------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaView:
    """``mz_internal.<relation>_<replica id>``: one replica's rows of a persisted relation."""

    relation: str
    replica_id: str
    plan: MirRelation

    @property
    def id(self) -> str:
        return self.qualified_name

    @property
    def type(self) -> str:
        return "view"

    @property
    def schema(self) -> str:
        return INTERNAL

    @property
    def full_name(self) -> str:
        return self.qualified_name

    @property
    def name(self) -> str:
        return f"{self.relation}_{self.replica_id}"

    @property
    def qualified_name(self) -> str:
        return f"{INTERNAL}.{self.name}"

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return self.plan.columns

    @property
    def sql(self) -> str:
        return replica_view_sql(self.relation, self.replica_id)


def _relation_columns(relation: str) -> tuple[tuple[str, str], ...] | None:
    variant = BY_NAME.get(relation)
    if variant is not None:
        return variant.columns
    view = VIEWS.get(relation)
    return view.columns if view is not None else None


def replica_view_sql(relation: str, replica_id: str) -> str:
    columns = _relation_columns(relation) or ()
    names = ", ".join(name for name, _ in columns)
    quoted = replica_id.replace("'", "''")
    return f"SELECT incarnation, {names} FROM {INTERNAL}.{relation} WHERE replica_id = '{quoted}'"


def split_replica_view(qualified_name: str) -> tuple[str, str] | None:
    """(relation, replica id) of a per-replica view's name, whether the replica exists or not."""
    schema, _, name = qualified_name.partition(".")
    relation, _, replica_id = name.rpartition("_")
    if schema != INTERNAL or not replica_id or _relation_columns(relation) is None:
        return None
    return relation, replica_id


@cache
def replica_view(relation: str, replica_id: str) -> ReplicaView:
    """The per-replica view (planned once: it reads builtin collections only)."""
    from loupe.coordinator.builtin_views import inline_builtin_views
    from loupe.coordinator.objects import relation_columns
    from loupe.coordinator.plan import plan_query
    from loupe.coordinator.sql.parser import parse_one
    from loupe.coordinator.sql.resolve import resolve_relations
    from loupe.coordinator.sql.statements import Query

    statement = parse_one(replica_view_sql(relation, replica_id))
    assert isinstance(statement, Query)
    expression = inline_builtin_views(statement.expression)
    expression, relations = resolve_relations(expression, collections=BY_QUALIFIED_NAME)

    def resolve(name: str) -> tuple[str, list[tuple[str, str]]] | None:
        found = relations.get(name)
        return (found.id, relation_columns(found)) if found is not None else None

    return ReplicaView(relation, replica_id, plan_query(expression, resolve))


class Relations(Mapping[str, Any]):
    """Relations by name (or id) with a fallback for the ones made on demand (per-replica views)."""

    def __init__(self, named: Mapping[str, Any], fallback: Callable[[str], Any]) -> None:
        self._named = named
        self._fallback = fallback

    def __getitem__(self, key: str) -> Any:
        found = self._named.get(key)
        if found is None:
            found = self._fallback(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._named)

    def __len__(self) -> int:
        return len(self._named)
