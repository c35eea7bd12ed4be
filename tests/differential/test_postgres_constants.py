"""Constant expressions: Loupe's one evaluator against a real PostgreSQL.

Each expression is evaluated by Loupe (planner and engine, in process, as a
constant SELECT is) and by PostgreSQL; the value, the type and, for failing
expressions, the SQLSTATE must be PostgreSQL's. Known gaps are listed with
their reason and run as strict xfails, so the list shrinks as they are fixed.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import psycopg
import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator.constant import evaluate_constant

from .harness import LOUPE_TYPES

EXPRESSIONS = [
    # Integer arithmetic: truncating division, the sign of %, overflow, division by zero.
    "7 / 2",
    "-7 / 2",
    "7 / -2",
    "-7 % 3",
    "7 % -3",
    "1 / 0",
    "1 % 0",
    "2147483647 + 1",
    "-2147483648 - 1",
    "2147483647 * 2",
    "9223372036854775807 + 1",
    "2147483647::int8 + 1",
    "(-2147483648) / -1",
    "abs(-2147483648)",
    "- (-2147483648)",
    # Casts: rounding, overflow, bad input.
    "3.5::int",
    "2.5::int",
    "-2.5::int",
    "CAST('abc' AS int)",
    "CAST(' 42 ' AS int)",
    "CAST('2147483648' AS int)",
    "CAST(NULL AS boolean)::text",
    "true::text",
    "CAST(1.5e10 AS int)",
    "'t'::boolean",
    "CAST('maybe' AS boolean)",
    "'2024-02-30'::date",
    "'2024-02-29'::date + 1",
    "date '2024-03-01' - date '2024-02-01'",
    # Mixed-type arithmetic and promotion.
    "1 + 1.5",
    "1 + 1.5::float8",
    "7 / 2.0",
    "2 ^ 10",
    "sqrt(16)",
    "sqrt(-1)",
    "ln(0)",
    "log(100)",
    "power(2, 3)",
    "round(2.5)",
    "round(-2.5)",
    "round(2.5::float8)",
    "round(1.2345, 2)",
    "trunc(-1.7)",
    "ceil(1.2)",
    "floor(-1.2)",
    "sign(-3)",
    # Strings.
    "'a_c' LIKE 'a\\_c'",
    "'abc' LIKE 'a%'",
    "'ABC' ILIKE 'a%'",
    "'abc' || 'def'",
    "'abc' || NULL",
    "concat('a', NULL, 'b')",
    "length('héllo')",
    "upper('abc')",
    "substr('hello', 2, 3)",
    "substr('hello', 0)",
    "position('l' in 'hello')",
    "replace('hello', 'l', 'L')",
    "lpad('7', 3, '0')",
    "split_part('a,b,c', ',', 2)",
    "trim('  x  ')",
    "repeat('ab', 3)",
    # Logic and NULLs.
    "NOT 1 IS NOT NULL",
    "NOT NULL IS NULL",
    "NULL AND false",
    "NULL OR true",
    "NULL = NULL",
    "1 IS DISTINCT FROM NULL",
    "coalesce(NULL, 2, 3)",
    "nullif(1, 1)",
    "greatest(1, 5, 3)",
    "least(1, NULL, 3)",
    "CASE WHEN 1 > 2 THEN 'a' ELSE 'b' END",
    "CASE WHEN true THEN 1 ELSE 1 / 0 END",
    "1 IN (1, 2, NULL)",
    "3 IN (1, 2, NULL)",
    "3 NOT IN (1, 2)",
    "2 BETWEEN 1 AND 3",
    # Aggregates over a constant row.
    "(SELECT count(*))",
    "(SELECT sum(x) FROM (VALUES (2147483647), (2147483647)) t(x))",
    "(SELECT count(x) FROM (VALUES ('a'), (NULL)) t(x))",
    "(SELECT avg(x) FROM (VALUES (1), (2)) t(x))",
    "(SELECT max(x) FROM (VALUES ('b'), ('a')) t(x))",
]

# Gaps that remain, each with why; a strict xfail, so a fix must remove it here.
KNOWN_GAPS: dict[str, str] = {}


@pytest.fixture(scope="module")
def postgres(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


def postgres_answer(connection, expression: str):
    """(value, type) or ("error", SQLSTATE) from PostgreSQL."""
    try:
        row = connection.execute(f"SELECT {expression}, pg_typeof({expression})::text").fetchone()
    except psycopg.Error as error:
        return "error", error.sqlstate
    assert row is not None
    return row[0], LOUPE_TYPES.get(row[1], row[1])


def loupe_answer(expression: str):
    try:
        columns, rows = evaluate_constant(
            sqlglot.parse_one(f"SELECT {expression}", read="postgres")
        )
    except LoupeError as error:
        return "error", error.code
    return rows[0][0], columns[0][1]


def same_value(ours, theirs) -> bool:
    if ours is None or theirs is None:
        return ours is theirs
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return ours is theirs
    if isinstance(theirs, Decimal):
        return Decimal(str(ours)) == theirs
    if isinstance(theirs, float):
        return isinstance(ours, float) and (ours == theirs or math.isclose(ours, theirs))
    if isinstance(theirs, dt.timedelta) and isinstance(ours, int):
        return False
    return type(ours) is type(theirs) and ours == theirs


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(e, marks=pytest.mark.xfail(reason=KNOWN_GAPS[e], strict=True))
        if e in KNOWN_GAPS
        else e
        for e in EXPRESSIONS
    ],
)
def test_constant_matches_postgres(postgres, expression):
    """The value and type PostgreSQL gives, or its SQLSTATE when it fails."""
    theirs = postgres_answer(postgres, expression)
    ours = loupe_answer(expression)
    if theirs[0] == "error" or ours[0] == "error":
        assert ours == theirs
        return
    assert ours[1] == theirs[1], f"type {ours[1]} where PostgreSQL says {theirs[1]}"
    assert same_value(ours[0], theirs[0]), f"{ours[0]!r} where PostgreSQL says {theirs[0]!r}"


QUERIES = [
    "SELECT generate_series(1, 3)",
    "SELECT generate_series(5, 1, -2) AS g",
    "SELECT x, x * x FROM generate_series(1, 4) AS t(x)",
    "SELECT g FROM generate_series(1, 3) g WHERE g <> 2",
    "SELECT 'k', generate_series(2147483646, 2147483647)",
    "SELECT generate_series(1, NULL::int)",
    "SELECT generate_series(1, 3, 0)",
    "SELECT count(*), sum(x), min(x), max(x) FROM generate_series(1, 1000) AS t(x)",
    "SELECT x % 3, count(*) FROM generate_series(1, 10) AS t(x) GROUP BY x % 3",
    "SELECT a.x, b.x FROM generate_series(1, 2) AS a(x), generate_series(1, 2) AS b(x)",
    "SELECT v FROM (VALUES (1), (NULL), (3)) AS t(v) WHERE NOT v IS NOT NULL",
    "SELECT v, count(v) FROM (VALUES ('a'), (NULL), ('a')) AS t(v) GROUP BY v",
    "SELECT x / 2, x % 2 FROM generate_series(-3, 3) AS t(x)",
    "SELECT row_number() OVER ()",
    "SELECT x, sum(x) OVER (ORDER BY x), rank() OVER (ORDER BY x) FROM (VALUES (1), (2), (2)) t(x)",
    "SELECT count(*) OVER (), ntile(2) OVER (ORDER BY x) FROM generate_series(1, 3) AS t(x)",
]


def postgres_rows(connection, sql: str):
    try:
        cursor = connection.execute(sql)
    except psycopg.Error as error:
        return "error", error.sqlstate, None
    names = [c.name for c in cursor.description]
    return "ok", names, cursor.fetchall()


def loupe_rows(sql: str):
    try:
        columns, rows = evaluate_constant(sqlglot.parse_one(sql, read="postgres"))
    except LoupeError as error:
        return "error", error.code, None
    return "ok", [name for name, _ in columns], rows


def _sortable(row):
    return tuple((value is None, str(value)) for value in row)


@pytest.mark.parametrize("sql", QUERIES)
def test_query_matches_postgres(postgres, sql):
    """Rows (as a multiset), column names, or the SQLSTATE, as PostgreSQL answers."""
    theirs = postgres_rows(postgres, sql)
    ours = loupe_rows(sql)
    if theirs[0] == "error" or ours[0] == "error":
        assert ours[:2] == theirs[:2]
        return
    assert ours[1] == theirs[1]
    assert sorted(ours[2], key=_sortable) == sorted(theirs[2], key=_sortable)
