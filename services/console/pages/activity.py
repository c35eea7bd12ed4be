"""Activity: the statement log (``mz_recent_activity_log``, or its redacted form when
the viewer may read only that) with filters, the execution estimates, and each
statement's lifecycle.

Filters come from the query string (a plain GET form, no JavaScript needed) and go
to SQL as parameters only: each active filter adds a fixed condition with ``%s``
placeholders, never its value written into the SQL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from loupe.console.app import render, session_of
from loupe.console.sql import Query, Result, SqlError

routes = web.RouteTableDef()

FULL = "mz_internal.mz_recent_activity_log"
REDACTED = "mz_internal.mz_recent_activity_log_redacted"
INSUFFICIENT_PRIVILEGE = "42501"
CONSOLE_APPLICATION = "loupe-console"

STATUSES = ("success", "error", "canceled", "aborted", "running")
LIMITS = (50, 100, 500)
DEFAULT_LIMIT = 100
ESTIMATES_LIMIT = 20


@dataclass(frozen=True)
class Filters:
    status: str = ""
    user: str = ""
    application: str = ""
    min_duration_ms: float | None = None
    text: str = ""
    include_console: bool = False
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, query: MultiMapping[str]) -> tuple[Filters, list[str]]:
        """The filters of a query string, and what was wrong in it (ignored)."""
        problems = []
        status = query.get("status", "").strip()
        if status and status not in STATUSES:
            problems.append(f"Unknown status {status!r}: not filtered by status.")
            status = ""
        duration: float | None = None
        raw = query.get("min_duration", "").strip()
        if raw:
            try:
                duration = float(raw)
                if not math.isfinite(duration) or duration < 0:
                    raise ValueError
            except ValueError:
                problems.append(f"Minimum duration {raw!r} is not a number of ms: ignored.")
                duration = None
        try:
            limit = int(query.get("limit", DEFAULT_LIMIT))
        except ValueError:
            limit = DEFAULT_LIMIT
        if limit not in LIMITS:
            limit = DEFAULT_LIMIT
        return (
            cls(
                status=status,
                user=query.get("user", "").strip(),
                application=query.get("application", "").strip(),
                min_duration_ms=duration,
                text=query.get("q", "").strip(),
                include_console=query.get("console") == "1",
                limit=limit,
            ),
            problems,
        )

    @property
    def active(self) -> bool:
        return bool(
            self.status
            or self.user
            or self.application
            or self.min_duration_ms is not None
            or self.text
        )


def like_pattern(text: str) -> str:
    """``text`` as an ILIKE pattern matching it anywhere (its ``%``, ``_`` and ``\\``
    taken literally)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def where(filters: Filters, sql_column: str) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause of the filters (fixed SQL, values as parameters)."""
    conditions: list[str] = []
    params: list[Any] = []
    if filters.status == "running":
        conditions.append("finished_status IS NULL")
    elif filters.status:
        conditions.append("finished_status = %s")
        params.append(filters.status)
    if filters.user:
        conditions.append("authenticated_user = %s")
        params.append(filters.user)
    if filters.application:
        conditions.append("application_name = %s")
        params.append(filters.application)
    elif not filters.include_console:
        conditions.append("coalesce(application_name, '') <> %s")
        params.append(CONSOLE_APPLICATION)
    if filters.min_duration_ms is not None:
        conditions.append("coalesce(finished_at, now()) - began_at >= %s::interval")
        params.append(f"{filters.min_duration_ms:g} milliseconds")
    if filters.text:
        conditions.append(f"{sql_column} ILIKE %s ESCAPE '\\'")
        params.append(like_pattern(filters.text))
    clause = ("\nWHERE " + "\n  AND ".join(conditions)) if conditions else ""
    return clause, tuple(params)


def log_queries(filters: Filters, redacted: bool) -> tuple[Query, Query]:
    """The statements the filters match, newest first (at most ``limit``), and how many
    there are."""
    relation = REDACTED if redacted else FULL
    sql_column = "redacted_sql" if redacted else "sql"
    error = "NULL::text" if redacted else "error_message"
    clause, params = where(filters, sql_column)
    rows = Query(
        f"""SELECT execution_id, began_at, finished_at, coalesce(finished_status, 'running') AS status,
       coalesce(finished_at, now()) - began_at AS duration, authenticated_user, application_name,
       cluster_name, statement_type, execution_strategy, rows_returned, {error} AS error_message,
       {sql_column} AS sql
FROM {relation}{clause}
ORDER BY began_at DESC
LIMIT %s""",
        (*params, filters.limit),
    )
    count = Query(f"SELECT count(*) AS matching FROM {relation}{clause}", params)
    return rows, count


def estimates_query(filters: Filters) -> Query:
    if filters.text:
        return Query(
            """SELECT sql_hash, sql, estimated_executions, estimated_error_rate, p50_ms, p90_ms,
       p99_ms, sampled_executions
FROM mz_internal.mz_statement_execution_estimates
WHERE sql ILIKE %s ESCAPE '\\'
ORDER BY estimated_executions * coalesce(p50_ms, 0) DESC
LIMIT %s""",
            (like_pattern(filters.text), ESTIMATES_LIMIT),
        )
    return Query(
        """SELECT sql_hash, sql, estimated_executions, estimated_error_rate, p50_ms, p90_ms,
       p99_ms, sampled_executions
FROM mz_internal.mz_statement_execution_estimates
ORDER BY estimated_executions * coalesce(p50_ms, 0) DESC
LIMIT %s""",
        (ESTIMATES_LIMIT,),
    )


def refused(*results: Result | SqlError) -> bool:
    return any(
        isinstance(result, SqlError) and result.sqlstate == INSUFFICIENT_PRIVILEGE
        for result in results
    )


@routes.get("/activity")
async def activity(request: web.Request) -> web.Response:
    session = session_of(request)
    filters, problems = Filters.parse(request.query)
    rows_q, count_q = log_queries(filters, redacted=False)
    rows, count, estimates = await session.sql.query_all(rows_q, count_q, estimates_query(filters))
    redacted = False
    if refused(rows, count):
        # The viewer may not read the full log: its redacted form, if that is allowed.
        redacted = True
        rows, count = await session.sql.query_all(*log_queries(filters, redacted=True))
    return render(
        request,
        "activity.html",
        filters=filters,
        problems=problems,
        statuses=STATUSES,
        limits=LIMITS,
        rows=rows,
        count=count,
        estimates=estimates,
        redacted=redacted,
        statements=rows.dicts() if isinstance(rows, Result) else [],
        matching=count.rows[0][0] if isinstance(count, Result) and count.rows else None,
        estimate_rows=estimates.dicts() if isinstance(estimates, Result) else [],
    )


def statement_query(execution_id: str, redacted: bool) -> Query:
    """One statement's row; the redacted log has no parameters or error messages."""
    relation = REDACTED if redacted else FULL
    params = "NULL::text" if redacted else "params::text"
    error = "NULL::text" if redacted else "error_message"
    sql_column = "redacted_sql" if redacted else "sql"
    return Query(
        f"""SELECT execution_id, began_at, finished_at, coalesce(finished_status, 'running') AS status,
       coalesce(finished_at, now()) - began_at AS duration, authenticated_user, application_name,
       cluster_name, database_name, search_path, transaction_isolation, statement_type,
       execution_strategy, rows_returned, result_size, sample_rate, session_id,
       prepared_statement_name, prepared_at, connected_at, {params} AS params,
       {error} AS error_message, {sql_column} AS sql
FROM {relation}
WHERE execution_id = %s""",
        (execution_id,),
    )


def lifecycle_query(execution_id: str) -> Query:
    return Query(
        """SELECT event_type, occurred_at
FROM mz_internal.mz_statement_lifecycle_history
WHERE statement_id = %s
ORDER BY occurred_at""",
        (execution_id,),
    )


def event_offsets(began_at: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each lifecycle event with its time since the statement began (``since_began``)
    and since the previous event (``step``)."""
    out = []
    previous = None
    for event in events:
        at = event["occurred_at"]
        out.append(
            {
                **event,
                "since_began": at - began_at if began_at is not None else None,
                "step": at - previous if previous is not None else None,
            }
        )
        previous = at
    return out


@routes.get("/activity/{execution_id}")
async def lifecycle(request: web.Request) -> web.Response:
    session = session_of(request)
    execution_id = request.match_info["execution_id"]
    statement, events = await session.sql.query_all(
        statement_query(execution_id, redacted=False), lifecycle_query(execution_id)
    )
    redacted = False
    if refused(statement):
        redacted = True
        (statement,) = await session.sql.query_all(statement_query(execution_id, redacted=True))
    row = statement.dicts()[0] if isinstance(statement, Result) and statement.rows else None
    event_rows = events.dicts() if isinstance(events, Result) else []
    return render(
        request,
        "lifecycle.html",
        status=200 if row is not None or not isinstance(statement, Result) else 404,
        execution_id=execution_id,
        statement=statement,
        events=events,
        row=row,
        redacted=redacted,
        event_rows=event_offsets(row["began_at"] if row else None, event_rows),
    )
