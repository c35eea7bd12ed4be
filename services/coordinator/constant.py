"""Queries that read no relation (``SELECT 1``), planned and evaluated in the coordinator.

They go through the planner and the engine (``loupe.dataflow.oneshot``) like
any query, only in process: the same expressions, types and errors as a
dataflow on a replica (Materialize's "constant" execution strategy). The
values of ``INSERT … VALUES`` expressions and of ``AS OF`` are computed
here too.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from loupe.coordinator.plan import plan_select
from loupe.coordinator.results import Column
from loupe.dataflow.oneshot import engine_finishing, evaluate_plan
from loupe.plan import lir


def evaluate_constant(
    expression: exp.Expression, *, query_time: int | None = None
) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """Plan and run ``expression`` (a query reading no relation): (columns, rows).

    ``query_time`` (ms) is what ``now()`` and ``mz_now()`` are; without it
    they raise ``TemporalError``. Errors are ``LoupeError`` with PostgreSQL's
    SQLSTATE, as the planner or the engine raise them.
    """
    planned = plan_select(expression, _no_relations, query_time=query_time)
    result = evaluate_plan(
        lir.lower_to_lir(planned.relation),
        planned.relation.columns,
        finishing=engine_finishing(planned.finishing),
    )
    return tuple(planned.columns), result.rows()


def _no_relations(_name: str) -> None:
    return None
