"""Queries without FROM, planned and evaluated by the engine in the coordinator."""

from __future__ import annotations

import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator import constant as constant_module
from loupe.coordinator.constant import evaluate_constant, is_small
from loupe.coordinator.plan import TemporalError, scalars


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


# Queries the planner folds to one row of literals, and a few it does not.
ENGINE_EQUAL = [
    "SELECT 1",
    "SELECT 1 AS a, 'x' AS b, true AS c, NULL AS d",
    "SELECT 'x' || 2, 2 + 3 * 4, -7 / 2, 7 % 3",
    "SELECT 32767::int2, 2147483647, 9223372036854775807, -0.0::float8, 1.5::float8",
    "SELECT 'NaN'::float8, 'Infinity'::float8, 1e300::float8 * 10",
    "SELECT NULL::int, NULL::numeric, NULL::date, NULL::text",
    "SELECT 1.50, 2::numeric, DATE '2024-01-02', INTERVAL '1 day', now()",
    "SELECT 'a'::varchar, 'b'::char(3), 'ab' = 'ab', 3 > 2 AND NOT false",
    "SELECT 1 AS a ORDER BY 1 LIMIT 1",
    "SELECT 1 LIMIT 0",
    "SELECT 1 OFFSET 1",
    "SELECT 2 AS x, 1 AS y ORDER BY y DESC",
]


@pytest.mark.parametrize("sql", ENGINE_EQUAL)
def test_literal_rows_are_what_the_engine_returns(sql, monkeypatch):
    """The fast path for literal rows answers exactly as the engine does: the same
    columns, values and Python types (1 is not True, -0.0 is not 0.0, NaN is NaN)."""
    fast = constant(sql, query_time=5)
    monkeypatch.setattr(constant_module, "literal_rows", lambda planned: None)
    engine = constant(sql, query_time=5)
    assert fast[0] == engine[0]
    assert [[(type(v), repr(v)) for v in row] for row in fast[1]] == [
        [(type(v), repr(v)) for v in row] for row in engine[1]
    ]


def test_a_query_of_literals_skips_the_engine(monkeypatch):
    """SELECT 1 and its kind build no dataflow; a numeric literal still goes to the engine."""

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine ran")

    monkeypatch.setattr(constant_module, "evaluate_plan", no_engine)
    assert constant("SELECT 1 AS a, 'x' || 2 AS b, NULL::date AS c") == (
        (("a", "int4"), ("b", "text"), ("c", "date")),
        [(1, "x2", None)],
    )
    with pytest.raises(AssertionError, match="the engine ran"):
        constant("SELECT 1.5")


@pytest.mark.parametrize(
    ("sql", "small"),
    [
        ("SELECT 1", True),
        ("SELECT 'x' || 2, 2 + 3 * 4, NULL::int, -1.5::float8", True),
        ("SELECT repeat('x', 100000000)", False),
        ("SELECT generate_series(1, 10)", False),
        ("SELECT (SELECT 1)", False),
        ("SELECT 1 FROM t", False),
        ("SELECT 1 UNION SELECT 2", False),
        ("SELECT " + " + ".join(["1"] * 40), False),
    ],
)
def test_only_small_queries_of_literals_and_operators_run_on_the_event_loop(sql, small):
    """A function call could build a large value or run long: those go to a thread."""
    assert is_small(sqlglot.parse_one(sql, read="postgres")) is small


def test_a_folded_constant_is_reused_and_told_apart_from_equal_looking_ones(monkeypatch):
    """The second fold of the same call runs no engine; 0.0 and -0.0 (equal in Python)
    are folded apart, so their text differs as in PostgreSQL."""
    scalars._FOLDED.clear()
    runs = []
    evaluate = scalars.evaluate_closed

    def counted(expr):
        runs.append(expr)
        return evaluate(expr)

    monkeypatch.setattr(scalars, "evaluate_closed", counted)
    assert constant("SELECT 'a' || 'b' AS x") == ((("x", "text"),), [("ab",)])
    folds = len(runs)
    assert folds > 0
    assert constant("SELECT 'a' || 'b' AS x") == ((("x", "text"),), [("ab",)])
    assert len(runs) == folds
    _, rows = constant("SELECT (-0.0::float8)::text AS n, (0.0::float8)::text AS p")
    assert rows == [("-0", "0")]
