"""Queries without FROM, planned and evaluated by the engine in the coordinator."""

from __future__ import annotations

import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.plan import TemporalError


def constant(sql: str, **kwargs):
    return evaluate_constant(sqlglot.parse_one(sql, read="postgres"), **kwargs)


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT 1 WHERE false", []),
        ("SELECT 1 WHERE true", [(1,)]),
        ("SELECT 1 AS a, 'x' AS b", [(1, "x")]),
        ("SELECT count(*) AS n", [(1,)]),
        ("SELECT count(*) AS n WHERE 1 = 2", [(0,)]),
    ],
)
def test_a_select_without_from_reads_one_row(sql, rows):
    """Like PostgreSQL, a FROM-less SELECT reads one row, so WHERE can empty it."""
    _columns, result = constant(sql)
    assert result == rows


def test_constants_are_typed_as_the_engine_types_them():
    """Integer division truncates and stays int4, as in PostgreSQL (polars said 3.5)."""
    columns, rows = constant("SELECT 7 / 2 AS q, -7 / 2 AS n, 7 % 3 AS m")
    assert columns == (("q", "int4"), ("n", "int4"), ("m", "int4"))
    assert rows == [(3, -3, 1)]


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT nope", "42703"),
        ("SELECT 1 / 0", "22012"),
        ("SELECT 2147483647 + 1", "22003"),
        ("SELECT 9223372036854775807 + 1", "22003"),
        ("SELECT CAST('abc' AS int)", "22P02"),
    ],
)
def test_constant_errors_carry_postgres_sqlstate(sql, code):
    """A failing constant query is PostgreSQL's error, not a library's."""
    with pytest.raises(LoupeError) as raised:
        constant(sql)
    assert raised.value.code == code


def test_now_needs_a_query_time():
    """now() is folded to the query's time; without one the planner says it needs one."""
    with pytest.raises(TemporalError):
        constant("SELECT now()")
    _, rows = constant("SELECT now() = now()", query_time=5)
    assert rows == [(True,)]
