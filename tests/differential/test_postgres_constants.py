"""Constant expressions: Loupe's one evaluator against a real PostgreSQL.

Each expression is evaluated by Loupe (planner and engine, in process, as a
constant SELECT is) and by PostgreSQL; the value, the type and, for failing
expressions, the SQLSTATE must be PostgreSQL's. Known gaps are listed with
their reason and run as strict xfails, so the list shrinks as they are fixed.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import ROUND_HALF_UP, Decimal

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
    # numeric is exact: values, result types, errors.
    "0.1 + 0.2 = 0.3",
    "0.1::numeric + 0.2::numeric",
    "12345678901234567.89 + 0.01",
    "123456789012345678.5 - 0.25",
    "1.10 * 3",
    "1.5 * 2.25",
    "0.001 * 0.001",
    "7.5 / 2.5",
    "1 / 4.0",
    "(SELECT sum(x) / 7 FROM (VALUES (14.0)) t(x))",
    "10 % 3.5",
    "-7.5 % 2",
    "-(2.50)",
    "2::int8 + 1.5",
    "1.5 + 1::float8",
    "1.5 < 2",
    "1.5 = 1.50",
    "2.5::int",
    "(-2.5)::numeric::int8",
    "99999999999.5::int",
    "0.1::float8::numeric",
    "'12.340'::numeric",
    "' -0.5 '::numeric",
    "'abc'::numeric",
    "'1.5e3'::numeric",
    "1.0 / 0",
    "1.0 % 0",
    "round(1.23456, 3)",
    "round(-1.5)",
    "round(1250, -2)",
    "trunc(-1.789, 2)",
    "abs(-1.25)",
    "2.675::numeric(10,2)",
    "-2.675::numeric(10,2)",
    "12345.6::numeric(4,1)",
    "1.5::decimal(3)",
    "(SELECT sum(x) FROM (VALUES (2.675)) t(x))::numeric(10,2)",
    "(SELECT sum(x) FROM (VALUES (0.1), (0.2), (0.3)) t(x))",
    "(SELECT sum(x::int8) FROM (VALUES (9223372036854775807), (1)) t(x))",
    "(SELECT avg(x) FROM (VALUES (1), (2), (4)) t(x))",
    "(SELECT avg(x) FROM (VALUES (0.1), (0.2)) t(x))",
    "(SELECT min(x) FROM (VALUES (1.25), (-0.5)) t(x))",
    "(SELECT max(x) FROM (VALUES (1.25), (-0.5)) t(x))",
    # time and timestamp (without time zone) stay without a zone.
    "TIME '03:04:05' < TIME '04:00'",
    "'2024-01-02 03:04:05'::timestamp::time",
    "(TIME '03:04:05.5')::text",
    "'2024-01-02 03:04:05'::timestamp::text",
    "'2024-01-02 03:04:05+02'::timestamptz::timestamp",
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
    if isinstance(theirs, Decimal):  # exact: a float that prints alike is not enough
        return isinstance(ours, Decimal) and ours == theirs
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


# numeric quotients: Loupe rounds to its 16 decimals, PostgreSQL to a scale it picks per
# value (at least 16 significant digits): they agree at the smaller of the two scales.
QUOTIENTS = [
    "1 / 3.0",
    "2 / 3.0",
    "10 / 3.0",
    "-1.0 / 7",
    "1000000 / 7.0",
    "(SELECT avg(x) FROM (VALUES (1), (1), (2)) t(x))",
    "(SELECT avg(x) FROM (VALUES (0.1), (0.25), (1)) t(x))",
]


@pytest.mark.parametrize("expression", QUOTIENTS)
def test_numeric_quotients_agree_with_postgresql_at_the_smaller_scale(postgres, expression):
    """Same type; the values agree rounded (half away from zero) to the smaller scale."""
    theirs = postgres_answer(postgres, expression)
    ours = loupe_answer(expression)
    assert ours[1] == theirs[1] == "numeric"
    assert isinstance(ours[0], Decimal)
    exponent = theirs[0].as_tuple().exponent
    assert isinstance(exponent, int)
    quantum = Decimal(1).scaleb(max(exponent, -16))
    assert ours[0].quantize(quantum, rounding=ROUND_HALF_UP) == theirs[0].quantize(
        quantum, rounding=ROUND_HALF_UP
    )


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("1.50::numeric", "1.5"),
        ("100.00::numeric", "100"),
        ("0.000::numeric", "0"),
        ("-0.0100", "-0.01"),
        ("1e-7::numeric", "0.0000001"),
        ("2.5 * 4", "10"),
    ],
)
def test_numeric_text_trims_trailing_zeros_as_materialize(postgres, expression, text):
    """``::text`` drops trailing zeros (Materialize); the number is PostgreSQL's."""
    ours = loupe_answer(f"({expression})::text")
    assert ours == (text, "text")
    theirs = postgres_answer(postgres, f"({expression})::text")
    assert Decimal(theirs[0]) == Decimal(text)
