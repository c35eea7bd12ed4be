"""``SELECT``: resolve the names, pick the strategy, read at one timestamp.

A query that reads relations runs on compute (``loupe.coordinator.compute``:
a fast-path index peek or a transient dataflow, on the system cluster when
it reads only system relations, else on the session's cluster), at ``AS OF``
if given, else at the oracle's read timestamp (strict serializable;
``transaction_isolation = serializable`` reads the latest complete time
instead). A query that reads no relation is evaluated here (``constant``,
Materialize's constant strategy). The builtin views (the statement log's,
the introspection views) are inlined first (``loupe.coordinator.builtin_views``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.admission import until_answered
from loupe.coordinator.constant import evaluate_constant, is_small
from loupe.coordinator.plan import TemporalError
from loupe.coordinator.results import Column, StatementResult
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import Query, Statement
from loupe.coordinator.timestamps import as_of_timestamp

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext


async def select(ctx: SequencerContext, session: Session, statement: Statement) -> StatementResult:
    """Run a ``Query``: its rows and ``SELECT n``."""
    assert isinstance(statement, Query)
    columns, rows = await run_query(ctx, session, statement)
    return StatementResult(tag=f"SELECT {len(rows)}", columns=columns, rows=rows)


async def run_query(
    ctx: SequencerContext, session: Session, query: Query
) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """Resolve, choose the timestamp, run: (columns, rows)."""
    async with ctx.compute.early_timestamp(session, query) as early:
        query = dataclasses.replace(
            query, expression=ctx.compute.inline_views(session, query.expression)
        )
        expression, relations = await ctx.compute.resolved(session, query.expression)
        if relations:
            # The planner names the columns as PostgreSQL does.
            columns, rows = await ctx.compute.select(
                session, query, expression, relations, early=early
            )
            return tuple(columns), rows
        return await constant(ctx, query, expression)


async def constant(
    ctx: SequencerContext, query: Query, expression: exp.Expression
) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """A query that reads no relation, evaluated here (``evaluate_constant``).

    Its time is ``AS OF`` if given; else the oracle's, read only when
    ``now()``/``mz_now()`` need one.
    """
    timestamp = None if query.as_of is None else as_of_timestamp(query.as_of, query.as_of_position)
    try:
        columns, rows = await _evaluated(expression, timestamp)
    except TemporalError:
        timestamp = await until_answered("ReadTimestamp", ctx.oracle.read_timestamp)
        columns, rows = await _evaluated(expression, timestamp)
    stmtlog.note_event(stmtlog.OPTIMIZATION_FINISHED)
    stmtlog.note_strategy(stmtlog.CONSTANT)
    return columns, rows


async def _evaluated(
    expression: exp.Expression, timestamp: int | None
) -> tuple[tuple[Column, ...], list[tuple[Any, ...]]]:
    """``evaluate_constant`` here when the query is small (``SELECT 1``): a thread hop
    cost more than the query. A larger one goes to a thread, so it never stalls every
    other session."""
    if is_small(expression):
        return evaluate_constant(expression, query_time=timestamp)
    return await asyncio.to_thread(evaluate_constant, expression, query_time=timestamp)
