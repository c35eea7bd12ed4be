"""Describing a statement without running it: its parameters' types and its result columns.

What a PostgreSQL-wire ``Describe`` answers (``ParameterDescription`` and
``RowDescription``/``NoData``). Nothing here reads data, takes the session's
lock or writes the statement log: a query is resolved and planned only.

Parameter types are PostgreSQL's: a type the client gave at Parse stays;
an untyped ``$n`` takes the type the planner gives it from its context
(``loupe.coordinator.plan.parameters``), the column it is assigned to in
``INSERT … VALUES`` and ``UPDATE … SET``, and otherwise ``text``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Sequence

from sqlglot import exp

from loupe.common.errors import LoupeError
from loupe.coordinator.compute import SUBSCRIBE_COLUMNS
from loupe.coordinator.coordinator import Coordinator
from loupe.coordinator.plan import parameters, plan_select
from loupe.coordinator.sequencer.explain import EXPLAIN_COLUMNS
from loupe.coordinator.sequencer.table import table_named
from loupe.coordinator.session import Session
from loupe.coordinator.sql.params import Parameter, highest_parameter, literal, parameter_number
from loupe.coordinator.sql.statements import (
    Delete,
    Explain,
    Insert,
    Query,
    Statement,
    Subscribe,
    Update,
)
from loupe.coordinator.tables import check_columns

Columns = tuple[tuple[str, str], ...]


# Statements that never return rows (their Describe is NoData), by command tag.
ROWLESS_TAGS = frozenset(
    {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "SET", "RESET", "PREPARE"}
    | {"DEALLOCATE", "GRANT", "REVOKE", "COMMENT", "DISCARD", "BEGIN", "COMMIT", "ROLLBACK"}
)


def rowless(statement: Statement) -> bool:
    """Whether ``statement`` never returns rows (so Describe is NoData without planning)."""
    return statement.tag.split()[0] in ROWLESS_TAGS


def planned_shape(statement: Statement | None) -> bool:
    """Whether Describe knows ``statement``'s columns by planning alone."""
    return isinstance(statement, Query | Subscribe | Explain)


@dataclasses.dataclass(frozen=True)
class Described:
    """A statement's parameter types (PostgreSQL type names) and result columns (None: no rows)."""

    parameter_types: tuple[str, ...]
    columns: Columns | None


async def describe(
    coordinator: Coordinator,
    session: Session,
    statement: Statement | None,
    client_types: Sequence[str | None],
) -> Described:
    """Describe ``statement`` whose ``$n`` the client typed as ``client_types`` (None: untyped).

    A query that cannot be planned without its values (it fails at Execute with
    its own error) is described with what was found.
    """
    count = max(len(client_types), highest_parameter(statement) if statement else 0)
    given = {n + 1: t for n, t in enumerate(client_types) if t}
    inferred: dict[int, str] = {}
    columns: Columns | None = None
    if statement is not None:
        with parameters.inferring() as inferred, contextlib.suppress(LoupeError):
            columns = await _plan(coordinator, session, statement, given)
    types = tuple(given.get(n) or inferred.get(n) or "text" for n in range(1, count + 1))
    return Described(types, columns)


async def query_columns(
    coordinator: Coordinator, session: Session, query: exp.Expression, given: dict[int, str]
) -> Columns:
    """A query's result columns, planned (not run); ``$n`` in ``given`` are typed NULLs."""
    expression = _typed_nulls(query, given)
    compute = coordinator.compute
    expression = compute.inline_views(session, expression)
    expression, relations = await compute.resolved(session, expression)
    now = int(time.time() * 1000)
    if relations:
        planned = compute.plan(expression, relations, query_time=now)
    else:
        planned = plan_select(expression, lambda _name: None, query_time=now)
    return tuple(planned.columns)


async def _plan(
    coordinator: Coordinator, session: Session, statement: Statement, given: dict[int, str]
) -> Columns | None:
    match statement:
        case Query():
            return await query_columns(coordinator, session, statement.expression, given)
        case Subscribe():
            columns = await query_columns(coordinator, session, statement.query.expression, given)
            # SUBSCRIBE's rows lead with mz_timestamp and mz_diff.
            return (*SUBSCRIBE_COLUMNS, *columns)
        case Explain():
            if statement.query is not None:
                await query_columns(coordinator, session, statement.query.expression, given)
            return ((EXPLAIN_COLUMNS[statement.stage], "text"),)
        case Insert():
            await _insert_targets(coordinator, session, statement)
            for row in statement.rows:
                select = exp.select(*(value.copy() for value in row))
                await query_columns(coordinator, session, select, given)
            if statement.query is not None:
                await query_columns(coordinator, session, statement.query.expression, given)
            return None
        case Update() | Delete():
            await _update_targets(coordinator, session, statement)
            table = exp.to_table(str(statement.table))
            if statement.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(statement.alias)))
            values = (
                [v.copy() for _, _, v in statement.assignments]
                if isinstance(statement, Update)
                else []
            )
            select = exp.select(*(values or [exp.Literal.number(1)])).from_(table)
            if statement.where is not None:
                select = select.where(statement.where.copy())
            await query_columns(coordinator, session, select, given)
            return None
    return None


async def _insert_targets(coordinator: Coordinator, session: Session, insert: Insert) -> None:
    """A ``$n`` that is a whole value of ``INSERT … VALUES`` takes its column's type."""
    table = await table_named(coordinator.context, session, insert.table)
    if table is None:
        return
    targets = (
        check_columns(table, insert.columns) if insert.columns is not None else list(table.columns)
    )
    for row in insert.rows:
        for column, value in zip(targets, row, strict=False):
            number = parameter_number(value)
            if number is not None:
                parameters.typed_number(number, column.sql_type.name)


async def _update_targets(
    coordinator: Coordinator, session: Session, statement: Update | Delete
) -> None:
    """A ``$n`` that is a whole value of ``UPDATE … SET`` takes its column's type."""
    if not isinstance(statement, Update):
        return
    table = await table_named(coordinator.context, session, statement.table)
    if table is None:
        return
    types = {column.name: column.sql_type.name for column in table.columns}
    for column, _position, value in statement.assignments:
        number = parameter_number(value)
        if number is not None and column in types:
            parameters.typed_number(number, types[column])


def _typed_nulls(tree: exp.Expression, given: dict[int, str]) -> exp.Expression:
    """``tree`` with each ``$n`` the client typed as a NULL of that type (the others stay)."""

    def replace(node: exp.Expression) -> exp.Expression:
        number = parameter_number(node)
        if number is None or number not in given:
            return node
        return literal(Parameter(None, given[number]))

    return tree.transform(replace)
