"""Introspection SQL planned and run in process, over raw log rows given by the test.

The raw logs of ``loupe.introspection.logs`` (and the few catalog relations
the views join) become the planner's relations; a view named in a query is
replaced by its rendered template, as a subquery (views name views), so a
query reads only raw logs. ``run`` renders the plan in a
``loupe.dataflow.ComputeInstance`` and feeds it the rows in persist's
format, each with its diff: a ``count`` log's value is its row's
multiplicity, as a replica logs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
from sqlglot import exp

from loupe.builtins import MZ_DATABASES, MZ_OBJECTS, MZ_SCHEMAS
from loupe.coordinator.plan import PlannedQuery, lower_to_lir, plan_query, plan_select
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query
from loupe.dataflow import ComputeInstance
from loupe.introspection.logs import LOG_VARIANTS
from loupe.introspection.views import INTERNAL, INTROSPECTION, VIEWS
from loupe.persist.shard import arrow_schema
from loupe.plan import lir, mir
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport

Row = tuple[object, ...]
CATALOG = {c.qualified_name: c.columns for c in (MZ_OBJECTS, MZ_SCHEMAS, MZ_DATABASES)}
# Unqualified names, as Materialize resolves them for a session: its catalog
# schemas and mz_introspection are always on the search path.
SEARCH_PATH = ("mz_catalog", INTROSPECTION)


def relations(schema: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """The raw logs as ``schema`` has them (with replica columns in mz_internal), and the
    catalog relations, by qualified name."""
    logs = {
        f"{schema}.{v.name}": v.persisted_columns if schema == INTERNAL else v.columns
        for v in LOG_VARIANTS
    }
    return logs | CATALOG


def _view_named(table: exp.Table, schema: str, ctes: set[str]) -> str | None:
    name = table.name.lower()
    if name not in VIEWS:
        return None
    if table.db:
        return name if table.db.lower() == schema else None
    return name if schema == INTROSPECTION and name not in ctes else None


def expand(sql: str, schema: str) -> exp.Expression:
    """``sql`` parsed, with each introspection view of ``schema`` it names replaced by its
    rendered query (unqualified names too, for ``mz_introspection``), until none is left."""
    statement = parse_one(sql)
    assert isinstance(statement, Query), sql
    expression = statement.expression
    while True:
        ctes = {c.alias_or_name.lower() for c in expression.find_all(exp.CTE)}
        tables = [
            (t, name)
            for t in expression.find_all(exp.Table)
            if (name := _view_named(t, schema, ctes)) is not None
        ]
        if not tables:
            return expression
        for table, name in tables:
            query = parse_one(VIEWS[name].sql(schema))
            assert isinstance(query, Query)
            alias = exp.TableAlias(this=exp.to_identifier(table.alias or name))
            table.replace(exp.Subquery(this=query.expression, alias=alias))


def resolver(schema: str):
    known = relations(schema)

    def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
        lowered = name.lower()
        candidates = [lowered] if "." in lowered else [f"{s}.{lowered}" for s in SEARCH_PATH]
        for candidate in candidates:
            if candidate in known:
                return candidate, known[candidate]
        return None

    return resolve


def plan(sql: str, schema: str) -> mir.Relation:
    return plan_query(expand(sql, schema), resolver(schema), query_time=1)


def run(sql: str, schema: str, data: dict[str, Iterable[tuple[Row, int]]]) -> list[Row]:
    """``sql``'s rows (with repetitions) over ``data``: relation name -> (row, diff)s."""
    relation = plan(sql, schema)
    plan_ = lower_to_lir(relation)
    known = relations(schema)
    read = {node.name for node in lir.walk(plan_) if isinstance(node, lir.Get)}
    imports = tuple(SourceImport(id=n, shard_id=n, columns=known[n]) for n in sorted(read))
    instance = ComputeInstance(workers=2)
    instance.create_dataflow(
        DataflowDescription(
            id="d_test",
            debug_name="test",
            source_imports=imports,
            objects_to_build=(BuildDesc("v_test", plan_, relation.columns, "test"),),
            index_exports=(IndexExport("i_test", "v_test", tuple(range(relation.arity))),),
            as_of=0,
        )
    )
    for name in read:
        rows = list(data.get(name, ()))
        instance.push(name, _updates(known[name], rows), 2)
    while instance.step():
        pass
    return list(instance.peek("i_test", 1).rows())


def _updates(columns: Sequence[tuple[str, str]], rows: list[tuple[Row, int]]) -> pa.Table:
    schema = arrow_schema(columns)
    arrays = [
        pa.array([row[i] for row, _ in rows], field.type)
        for i, field in enumerate(list(schema)[: len(columns)])
    ]
    arrays.append(pa.array([1] * len(rows), pa.uint64()))
    arrays.append(pa.array([diff for _, diff in rows], pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


def plan_one_off(sql: str, schema: str) -> PlannedQuery:
    """A SELECT as a session runs it (ORDER BY and LIMIT as its finishing)."""
    return plan_select(expand(sql, schema), resolver(schema), query_time=1)
