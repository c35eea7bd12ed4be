"""Views, materialized views and indexes: the compute objects of the catalog.

The catalog stores every item as its ``create_sql``; the coordinator stores
those with every relation name fully qualified (``"materialize"."public"."t"``,
builtins as ``"mz_catalog"."mz_clusters"``), so a definition means the same
whatever the search path of the session that reads it.

Dependencies are computed from ``create_sql`` when a snapshot is loaded
rather than stored on the item: the coordinator parses and plans every
definition at load anyway (to know a view's columns and to re-send dataflows
at start), the names in ``create_sql`` are fully qualified and items are
never renamed, so the ids they name are exactly the dependencies, and the
catalog stays a plain store of what the statements said.

``load_objects`` turns the items of a snapshot into ``ComputeObject``s in id
order (an item's dependencies always have smaller ids); an item whose
definition no longer plans is logged and left out, as tables are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.coordinator.tables import CatalogNamed
from loupe.plan import mir

log = get_logger(__name__)

ColumnDesc = tuple[str, str]
COMPUTE_TYPES = ("view", "materialized-view", "index")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ComputeObject(CatalogNamed):
    """A view, materialized view or index, planned from its ``create_sql``."""

    id: str
    type: str
    database: str
    schema: str
    schema_id: str
    name: str
    owner_id: str
    cluster_id: str
    create_sql: str
    # Output columns (name, planner type): a view's or MV's; an index's are its object's.
    columns: tuple[ColumnDesc, ...]
    # Ids of the relations the definition reads (or the indexed object).
    depends_on: tuple[str, ...]
    # Views and MVs: the definition's MIR, reading other relations by id.
    plan: mir.Relation | None = field(default=None, compare=False)
    # Views and MVs: the stored query, names fully qualified.
    query: exp.Expression | None = field(default=None, compare=False)
    # Indexes: the indexed object and the key (column positions).
    on_id: str = ""
    key: tuple[int, ...] = ()

    @property
    def storage_columns(self) -> list[tuple[str, str]]:
        """(name, storage type) of a materialized view's shard columns."""
        return [(name, sqltypes.storage_type(kind)) for name, kind in self.columns]


def qualify(
    query: exp.Expression, relations: Mapping[str, Any]
) -> tuple[exp.Expression, list[Any]]:
    """``query`` with each relation reference replaced by its fully qualified name.

    ``relations`` maps each reference as written (``resolve_relations``'s
    keys) to the relation it names. Returns the rewritten copy and the
    relations in order of first reference.
    """
    rewritten = query.copy()
    found: dict[str, Any] = {}
    for table in list(rewritten.find_all(exp.Table)):
        written = ".".join(part.name for part in table.parts)
        relation = relations.get(written)
        if relation is None:
            continue  # a CTE's name
        found.setdefault(relation.id, relation)
        alias = table.alias or table.name
        parts = full_name_parts(relation)
        table.set("catalog", exp.to_identifier(parts[0], quoted=True) if len(parts) == 3 else None)
        table.set("db", exp.to_identifier(parts[-2], quoted=True))
        table.set("this", exp.to_identifier(parts[-1], quoted=True))
        table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    return rewritten, list(found.values())


def full_name_parts(relation: Any) -> tuple[str, ...]:
    """(database, schema, name) of a user relation; (schema, name) of a builtin."""
    database = getattr(relation, "database", "")
    schema, _, name = relation.qualified_name.partition(".")
    return (database, schema, name) if database else (schema, name)


def full_name(relation: Any) -> str:
    return ".".join(quote(part) for part in full_name_parts(relation))


def view_sql(kind: str, name: str, query: exp.Expression) -> str:
    """The stored ``create_sql`` of a view or materialized view (``name`` already quoted)."""
    from loupe.coordinator.sql.parser import LoupeDialect

    words = "MATERIALIZED VIEW" if kind == "materialized-view" else "VIEW"
    return f"CREATE {words} {name} AS {query.sql(dialect=LoupeDialect)}"


def index_sql(name: str, on: str, columns: Sequence[str], *, unique: bool = False) -> str:
    """The stored ``create_sql`` of an index (``on`` already quoted and qualified)."""
    kind = "UNIQUE INDEX" if unique else "INDEX"
    return f"CREATE {kind} {quote(name)} ON {on} ({', '.join(quote(c) for c in columns)})"


def is_unique_index(obj: ComputeObject) -> bool:
    """Whether ``obj`` is a ``CREATE UNIQUE INDEX`` (on a table: its values must be unique)."""
    return obj.type == "index" and obj.create_sql.startswith("CREATE UNIQUE INDEX")


# Plans a query whose relation names are fully qualified: (MIR reading ids, relations read).
Planner = Callable[[exp.Expression], tuple[mir.Relation, list[Any]]]


def load_objects(
    items: Iterable[Any],
    *,
    names: Callable[[Any], tuple[str, str, str]],
    plan: Callable[[exp.Expression, Mapping[str, ComputeObject]], tuple[mir.Relation, list[Any]]],
    relation_named: Callable[[str, Mapping[str, ComputeObject]], Any],
) -> dict[str, ComputeObject]:
    """The compute objects of ``items`` (catalog ``Item`` protos), by id.

    ``names(item)`` -> (database, schema, name); ``plan(query, objects)``
    plans a stored definition against the relations known so far;
    ``relation_named(full name, objects)`` finds an index's object.
    """
    from loupe.coordinator.sql.parser import parse_one
    from loupe.coordinator.sql.statements import CreateIndex, CreateView

    objects: dict[str, ComputeObject] = {}
    compute_items = [i for i in items if i.type in COMPUTE_TYPES]
    for item in sorted(compute_items, key=lambda i: id_order(i.id)):
        database, schema, name = names(item)
        common = {
            "id": item.id,
            "type": item.type,
            "database": database,
            "schema": schema,
            "schema_id": item.schema_id,
            "name": item.name,
            "owner_id": item.owner_id,
            "cluster_id": item.cluster_id,
            "create_sql": item.create_sql,
        }
        try:
            statement = parse_one(item.create_sql)
            if isinstance(statement, CreateView):
                relation, reads = plan(statement.query.expression, objects)
                objects[item.id] = ComputeObject(
                    **common,
                    columns=relation.columns,
                    depends_on=tuple(dict.fromkeys(r.id for r in reads)),
                    plan=relation,
                    query=statement.query.expression,
                )
            elif isinstance(statement, CreateIndex):
                target = relation_named(str(statement.on), objects)
                columns = tuple(relation_columns(target))
                key = index_key(columns, [c for c, _ in statement.columns])
                objects[item.id] = ComputeObject(
                    **common, columns=columns, depends_on=(target.id,), on_id=target.id, key=key
                )
        except Exception as error:
            log.warning("definition does not plan", id=item.id, name=name, error=str(error))
    return objects


def relation_columns(relation: Any) -> list[ColumnDesc]:
    """(name, planner type) of a table, builtin collection or compute object."""
    if isinstance(relation, ComputeObject):
        return list(relation.columns)
    storage = getattr(relation, "storage_columns", None)
    if storage is not None:
        return list(storage)
    return list(getattr(relation, "columns", ()))


def index_key(columns: Sequence[ColumnDesc], names: Sequence[str]) -> tuple[int, ...]:
    """Positions of ``names`` in ``columns`` (all columns when empty); 42703 for a stranger."""
    if not names:
        return tuple(range(len(columns)))
    positions = []
    for name in names:
        found = [i for i, (column, _) in enumerate(columns) if column == name]
        if not found:
            raise LoupeError(SqlState.UNDEFINED_COLUMN, f'column "{name}" does not exist')
        positions.append(found[0])
    return tuple(positions)


def id_order(item_id: str) -> tuple[str, int]:
    """``u10`` after ``u9``: ids sort by prefix, then number."""
    digits = item_id.lstrip("abcdefghijklmnopqrstuvwxyz")
    prefix = item_id[: len(item_id) - len(digits)]
    return (prefix, int(digits) if digits.isdigit() else 0)


def dependents(ids: Iterable[str], objects: Mapping[str, ComputeObject]) -> list[ComputeObject]:
    """Every object that depends on one of ``ids``, directly or not, dependents last."""
    wanted = set(ids)
    found: dict[str, ComputeObject] = {}
    changed = True
    while changed:
        changed = False
        for obj in objects.values():
            if obj.id in found or obj.id in wanted:
                continue
            if any(d in wanted or d in found for d in obj.depends_on):
                found[obj.id] = obj
                changed = True
    return sorted(found.values(), key=lambda o: id_order(o.id))


def inline_views(
    relation: mir.Relation,
    objects: Mapping[str, ComputeObject],
    keep: Callable[[ComputeObject], bool],
) -> mir.Relation:
    """``relation`` with every ``Get`` of a view replaced by the view's plan.

    A view for which ``keep`` is true (it has an index the dataflow can
    import) stays a ``Get``; materialized views and tables always do. A
    plan is a DAG (an outer join reads its left input three times): each
    node, and each view, is inlined once, so shared nodes stay shared.
    """
    # Values hold the key's node, so its id is not reused while inlining runs.
    done: dict[int, tuple[mir.Relation, mir.Relation]] = {}

    def inlined(node: mir.Relation) -> mir.Relation:
        known = done.get(id(node))
        if known is None:
            known = (node, _inline(node, objects, keep, inlined))
            done[id(node)] = known
        return known[1]

    return inlined(relation)


def _inline(
    relation: mir.Relation,
    objects: Mapping[str, ComputeObject],
    keep: Callable[[ComputeObject], bool],
    inlined: Callable[[mir.Relation], mir.Relation],
) -> mir.Relation:
    if isinstance(relation, mir.Get):
        view = objects.get(relation.name)
        if view is None or view.type != "view" or keep(view):
            return relation
        assert view.plan is not None
        return inlined(view.plan)
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(relation):  # type: ignore[arg-type]
        value = getattr(relation, item.name)
        if isinstance(value, mir.Relation):
            changes[item.name] = inlined(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, mir.Relation) for v in value):
            changes[item.name] = tuple(inlined(v) for v in value)
    return dataclasses.replace(relation, **changes) if changes else relation  # type: ignore[type-var]


def gets(relation: mir.Relation) -> list[str]:
    """Names of every relation ``relation`` reads (its ``Get``s), in order, once each."""
    names: dict[str, None] = {}
    seen: set[int] = set()  # a shared node (the plan is a DAG) is visited once
    stack = [relation]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, mir.Get):
            names.setdefault(node.name)
        stack.extend(reversed(node.children()))
    return list(names)
