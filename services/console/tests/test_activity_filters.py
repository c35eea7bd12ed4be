"""The Activity page's filters: parsed from the query string, and turned into SQL
whose values are parameters only; the SQL checked against the local PostgreSQL over
a table shaped like ``mz_recent_activity_log``."""

from __future__ import annotations

import datetime

import psycopg
import pytest
from multidict import MultiDict

from loupe.console.pages.activity import (
    CONSOLE_APPLICATION,
    DEFAULT_LIMIT,
    Filters,
    event_offsets,
    like_pattern,
    log_queries,
    where,
)

T0 = datetime.datetime(2026, 11, 26, 17, 0, tzinfo=datetime.UTC)


def parse(**args: str) -> tuple[Filters, list[str]]:
    return Filters.parse(MultiDict(args))


def test_parse_keeps_good_values_and_reports_bad_ones() -> None:
    filters, problems = parse(
        status="error", user=" anna ", application="psql", min_duration="12.5", q="  x ", limit="50"
    )
    assert filters == Filters("error", "anna", "psql", 12.5, "x", False, 50)
    assert not problems
    assert filters.active
    filters, problems = parse(status="exploded", min_duration="slow", limit="7", console="1")
    assert filters == Filters(include_console=True, limit=DEFAULT_LIMIT)
    assert len(problems) == 2
    assert not filters.active
    assert parse(min_duration="-1")[1]
    assert parse(min_duration="nan")[1]
    assert parse(min_duration="inf")[1]


def test_values_are_parameters_never_sql() -> None:
    evil = "'; DROP TABLE t; --"
    filters = Filters(status="error", user=evil, application=evil, min_duration_ms=5, text=evil)
    clause, params = where(filters, "sql")
    assert evil not in clause
    assert "DROP" not in clause
    assert clause.count("%s") == len(params) == 5
    rows, count = log_queries(filters, redacted=False)
    assert evil not in rows.sql
    assert evil not in count.sql
    assert rows.params[-1] == DEFAULT_LIMIT
    # Show SQL writes them in as literals.
    assert "'''; DROP TABLE t; --'" in rows.pasteable()


def test_the_console_is_left_out_unless_asked_or_named() -> None:
    clause, params = where(Filters(), "sql")
    assert params == (CONSOLE_APPLICATION,)
    assert where(Filters(include_console=True), "sql") == ("", ())
    clause, params = where(Filters(application=CONSOLE_APPLICATION), "sql")
    assert params == (CONSOLE_APPLICATION,)
    assert "application_name = %s" in clause


def test_the_redacted_log_reads_its_own_columns() -> None:
    rows, count = log_queries(Filters(text="abc"), redacted=True)
    assert "mz_recent_activity_log_redacted" in rows.sql
    assert "redacted_sql ILIKE" in rows.sql
    assert "NULL::text AS error_message" in rows.sql
    assert " sql AS sql" not in rows.sql
    assert "redacted_sql ILIKE" in count.sql


def test_event_offsets() -> None:
    events = [
        {"event_type": "execution-began", "occurred_at": T0},
        {"event_type": "execution-finished", "occurred_at": T0 + datetime.timedelta(seconds=2)},
    ]
    out = event_offsets(T0, events)
    assert out[0]["since_began"] == datetime.timedelta(0)
    assert out[0]["step"] is None
    assert out[1]["step"] == datetime.timedelta(seconds=2)
    assert event_offsets(None, events)[1]["since_began"] is None


LOG = """CREATE TEMP TABLE log (
    execution_id text, began_at timestamptz, finished_at timestamptz, finished_status text,
    authenticated_user text, application_name text, cluster_name text, statement_type text,
    execution_strategy text, rows_returned bigint, error_message text, sql text)"""
ROWS = [
    ("a", 0, 0.005, "success", "materialize", "psql", "SELECT 1"),
    ("b", 1, 2.5, "error", "materialize", "psql", "SELECT * FROM nope"),
    ("c", 2, 4, "success", "anna", "", "SELECT pg_sleep(2) -- 100% _slow_"),
    ("d", 3, None, None, "anna", None, "SUBSCRIBE t"),
    ("e", 4, 4.001, "success", "materialize", CONSOLE_APPLICATION, "SELECT 2"),
]


@pytest.fixture
def log(postgres_url: str):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(LOG)
        for eid, began, finished, status, user, app, sql in ROWS:
            connection.execute(
                "INSERT INTO log VALUES (%s, %s, %s, %s, %s, %s, 'quickstart', 'select', NULL, 1, NULL, %s)",
                (
                    eid,
                    T0 + datetime.timedelta(seconds=began),
                    T0 + datetime.timedelta(seconds=finished) if finished is not None else None,
                    status,
                    user,
                    app,
                    sql,
                ),
            )
        yield connection


def run(connection, filters: Filters) -> tuple[list[str], int]:
    rows, count = log_queries(filters, redacted=False)
    relation = "mz_internal.mz_recent_activity_log"
    ids = [r[0] for r in connection.execute(rows.sql.replace(relation, "log"), rows.params)]
    (total,) = connection.execute(count.sql.replace(relation, "log"), count.params).fetchone()
    return ids, total


def test_filters_in_postgresql(log) -> None:
    # Newest first, the console's own statement left out.
    assert run(log, Filters()) == (["d", "c", "b", "a"], 4)
    assert run(log, Filters(include_console=True))[0] == ["e", "d", "c", "b", "a"]
    assert run(log, Filters(status="error")) == (["b"], 1)
    assert run(log, Filters(status="running")) == (["d"], 1)
    assert run(log, Filters(user="anna")) == (["d", "c"], 2)
    assert run(log, Filters(application="psql")) == (["b", "a"], 2)
    # Duration: a running statement counts its time so far.
    assert run(log, Filters(min_duration_ms=1000)) == (["d", "c", "b"], 3)
    assert run(log, Filters(min_duration_ms=1600)) == (["d", "c"], 2)
    # Text search: case-insensitive, %, _ and \ taken literally.
    assert run(log, Filters(text="from NOPE")) == (["b"], 1)
    assert run(log, Filters(text="100%")) == (["c"], 1)
    assert run(log, Filters(text="_slow_")) == (["c"], 1)
    assert run(log, Filters(text="1_0")) == ([], 0)
    # The limit bounds the rows, not the count.
    limited = Filters(limit=50)
    assert run(log, limited)[1] == 4


@pytest.mark.parametrize("text", ["50%", "a_b", "back\\slash", "plain", "%", "_", "\\%"])
def test_like_pattern_matches_the_text_literally(postgres_url: str, text: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        query = "SELECT %s ILIKE %s ESCAPE '\\'"
        found = connection.execute(query, ("xx" + text.upper() + "yy", like_pattern(text)))
        wrong = connection.execute(query, ("xx" + "Q" * len(text) + "yy", like_pattern(text)))
        assert found.fetchall() == [(True,)]
        assert wrong.fetchall() == [(False,)]
