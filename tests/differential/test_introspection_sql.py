"""The SQL Materialize's introspection views and troubleshooting queries use (issue 12),
against PostgreSQL: ``pg_size_pretty``, interval arithmetic on elapsed nanoseconds,
functions named with their schema, and list slices (PostgreSQL's array slices mean the
same for one dimension). Values, types and SQLSTATEs must be PostgreSQL's.
"""

from __future__ import annotations

import psycopg
import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query

from .test_lists import _as_array
from .test_postgres_constants import loupe_answer, postgres_answer, same_value

SIZES = (
    0, 1, -1, 10239, 10240, -10240, 10751, 10752, 20479 * 1024, 20479 * 1024 + 511,
    20 * 1024 * 1024, 123456789, -123456789, 2**40, 15 * 2**50, 2**62, 2**63 - 1, -(2**63),
)  # fmt: skip
SAME = [
    *(f"pg_size_pretty({n}::bigint)" for n in SIZES),
    *(f"pg_size_pretty({n}::numeric)" for n in SIZES),
    "pg_size_pretty(1024::int4)",
    "pg_size_pretty(NULL::bigint)",
    "pg_size_pretty(123.456::numeric)",
    "pg_size_pretty(-10239.5::numeric)",
    "pg_size_pretty(10240.9::numeric)",
    "pg_size_pretty(1e20::numeric)",
    "pg_size_pretty(1.5::float8)",
    "pg_size_pretty('1024'::text)",
    "pg_size_pretty(1024::int2)",
    # mz_scheduling_elapsed.elapsed_ns is numeric, its _per_worker form bigint.
    "123456789::numeric / 1000 * '1 MICROSECONDS'::interval",
    "123456789::bigint / 1000 * '1 MICROSECONDS'::interval",
    "2000::numeric * '1 second'::interval",
    "repeat(' ', 3 * 2) || 'Reduce'",
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


@pytest.mark.parametrize("expression", SAME, ids=SAME)
def test_as_postgresql(postgres, expression: str) -> None:
    ours, our_type = loupe_answer(expression)
    theirs, their_type = postgres_answer(postgres, expression)
    assert (ours == "error") == (theirs == "error"), (ours, theirs)
    if ours == "error":
        assert our_type == their_type
    else:
        assert same_value(ours, theirs), (ours, theirs)
        assert our_type == their_type


SLICES = [
    ("(LIST[10, 20, 30])[2:3]", "(ARRAY[10, 20, 30])[2:3]"),
    ("(LIST[10, 20, 30])[:2]", "(ARRAY[10, 20, 30])[:2]"),
    ("(LIST[10, 20, 30])[2:]", "(ARRAY[10, 20, 30])[2:]"),
    ("(LIST[10, 20, 30])[0:1]", "(ARRAY[10, 20, 30])[0:1]"),
    ("(LIST[10, 20, 30])[-5:2]", "(ARRAY[10, 20, 30])[-5:2]"),
    ("(LIST[10, 20, 30])[3:2]", "(ARRAY[10, 20, 30])[3:2]"),
    ("(LIST[10, 20, 30])[4:9]", "(ARRAY[10, 20, 30])[4:9]"),
    ("(LIST[10, 20, 30])[2:99]", "(ARRAY[10, 20, 30])[2:99]"),
    ("(LIST[10, 20, 30])[NULL:2]", "(ARRAY[10, 20, 30])[NULL:2]"),
    ("(LIST[10, 20, 30])[:cardinality(ARRAY[1, 2]) - 1]", "(ARRAY[10, 20, 30])[:1]"),
    ("(LIST[10, 20, 30])[1:list_length(LIST[1, 2, 3]) - 1]", "(ARRAY[10, 20, 30])[1:2]"),
    ("(LIST[10, 20, 30])[2:3]::text", "(ARRAY[10, 20, 30])[2:3]::text"),
]


@pytest.mark.parametrize(("ours", "theirs"), SLICES, ids=[s[0] for s in SLICES])
def test_list_slice_is_the_array_slice(postgres, ours: str, theirs: str) -> None:
    loupe_value, loupe_type = loupe_answer(ours)
    postgres_value, postgres_type = postgres_answer(postgres, theirs)
    assert loupe_value == postgres_value
    assert _as_array(loupe_type) == postgres_type


QUALIFIED = [
    "pg_catalog.repeat('ab', 2)",
    "mz_catalog.list_length(LIST[1, 2, 3])",
    "pg_catalog.abs(pg_catalog.abs(-3))",
    "(SELECT pg_catalog.count(*) FROM (VALUES (1), (2)) AS t(x))",
    "(SELECT pg_catalog.min(x) FROM (VALUES (1), (2)) AS t(x))",
    "(SELECT pg_catalog.sum(x) FROM (VALUES (1), (2)) AS t(x))",
]


@pytest.mark.parametrize("expression", QUALIFIED, ids=QUALIFIED)
def test_schema_qualified_function_is_the_function(expression: str) -> None:
    """``pg_catalog.f(x)`` and ``mz_catalog.f(x)`` are ``f(x)`` (a query as a session sends it)."""
    unqualified = expression.replace("pg_catalog.", "").replace("mz_catalog.", "")
    assert _evaluate(expression) == _evaluate(unqualified)


def _evaluate(expression: str) -> object:
    statement = parse_one(f"SELECT {expression}")
    assert isinstance(statement, Query)
    try:
        columns, rows = evaluate_constant(statement.expression)
    except LoupeError as error:
        return "error", error.code
    return rows[0][0], columns[0][1]


def test_list_of_addresses_prints_as_materialize() -> None:
    """``list_agg`` of uint8 lists (the Console's LIR operators): a list of lists, printed
    with its inner lists bare, ``{{1},{1,2}}`` (Materialize's text; PostgreSQL has no
    ragged arrays to compare with)."""
    rows = (
        "(SELECT LIST[1::uint8] AS a UNION ALL SELECT LIST[1::uint8, 2::uint8]"
        " UNION ALL SELECT NULL) AS t"
    )
    value, kind = _evaluate(f"(SELECT list_agg(a ORDER BY a)::text FROM {rows})")
    assert (value, kind) == ("{{1},{1,2},NULL}", "text")
    value, kind = _evaluate(f"(SELECT list_agg(a ORDER BY a) FROM {rows})")
    assert (value, kind) == ([[1], [1, 2], None], "uint8 list list")
