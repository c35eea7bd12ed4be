"""Queries that read no relation (``SELECT 1``), planned and evaluated in the coordinator.

They go through the planner and the engine (``loupe.dataflow.oneshot``) like
any query, only in process: the same expressions, types and errors as a
dataflow on a replica (Materialize's "constant" execution strategy). The
values of ``INSERT … VALUES`` expressions and of ``AS OF`` are computed
here too.

A query the planner folds to one row of literals (``SELECT 1``, ``SELECT 'a'
|| 'b'``) skips the engine when its values are the engine's own: integers,
booleans, text, float8 and NULLs (``literal_rows``). The rest, and every
error, comes from the engine as before.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from loupe.coordinator.plan import plan_select
from loupe.coordinator.plan.sql import PlannedQuery
from loupe.coordinator.results import Column
from loupe.dataflow.oneshot import engine_finishing, evaluate_plan
from loupe.plan import lir, mir
from loupe.plan.scalar import Literal

# Types whose planner literal is the very Python value the engine would return.
_AS_THE_ENGINE_RETURNS = frozenset({"bool", "int2", "int4", "int8", "text", "float8"})

# Syntax a query evaluated on the event loop may use (``is_small``): no function
# calls, so nothing in it can build a large value or run long.
_SMALL_SYNTAX = (
    exp.Select,
    exp.Literal,
    exp.Alias,
    exp.Identifier,
    exp.Neg,
    exp.Paren,
    exp.Cast,
    exp.DataType,
    exp.Boolean,
    exp.Null,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.DPipe,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.And,
    exp.Or,
    exp.Not,
)
SMALL_NODES = 64


def evaluate_constant(
    expression: exp.Expression, *, query_time: int | None = None
) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """Plan and run ``expression`` (a query reading no relation): (columns, rows).

    ``query_time`` (ms) is what ``now()`` and ``mz_now()`` are; without it
    they raise ``TemporalError``. Errors are ``LoupeError`` with PostgreSQL's
    SQLSTATE, as the planner or the engine raise them.
    """
    planned = plan_select(expression, _no_relations, query_time=query_time)
    rows = literal_rows(planned)
    if rows is None:
        result = evaluate_plan(
            lir.lower_to_lir(planned.relation),
            planned.relation.columns,
            finishing=engine_finishing(planned.finishing),
        )
        rows = result.rows()
    return tuple(planned.columns), rows


def literal_rows(planned: PlannedQuery) -> list[tuple[Any, ...]] | None:
    """The rows of a query planned to one row of literals, without the engine; None if it
    is not one, or a value's type is one the engine would convert (numeric, dates…)."""
    relation = planned.relation
    if not isinstance(relation, mir.Project) or not isinstance(relation.input, mir.Map):
        return None
    mapped = relation.input
    if not isinstance(mapped.input, mir.Constant) or mapped.input.rows != ((),):
        return None
    values = []
    for scalar in mapped.scalars:
        if not isinstance(scalar, Literal):
            return None
        if scalar.value is not None and scalar.type not in _AS_THE_ENGINE_RETURNS:
            return None
        values.append(scalar.value)
    row = tuple(values[i] for i in relation.outputs)
    finishing = planned.finishing
    if finishing.offset or finishing.limit == 0:
        return []
    if finishing.project:
        row = tuple(row[i] for i in finishing.project)
    return [row]


def is_small(expression: exp.Expression) -> bool:
    """Whether ``expression`` is cheap enough to plan and evaluate on the event loop: a
    SELECT of at most ``SMALL_NODES`` nodes of literals, casts and operators only."""
    if not isinstance(expression, exp.Select):
        return False
    for count, node in enumerate(expression.walk(), start=1):
        if count > SMALL_NODES or not isinstance(node, _SMALL_SYNTAX):
            return False
    return True


def _no_relations(_name: str) -> None:
    return None
