"""LATERAL in one-off SELECTs, against PostgreSQL: rows (as multisets), column names, types.

Two tables, ``a`` and ``b``, with duplicates and NULLs (in join keys too):
each query runs in PostgreSQL and in Loupe (planned by ``plan_select`` and
evaluated once by the engine, as a peek would be). The incremental side —
LATERAL views kept through random changes — is in ``views.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.plan import lower_to_lir, plan_select
from loupe.coordinator.sql.parser import Query, parse_one
from loupe.dataflow.oneshot import OneShotInput, engine_finishing, evaluate_plan

from .harness import Table, persist_updates
from .test_windows import _sortable, same_value

A = Table("a", (("k", "int4"), ("v", "int4"), ("s", "text")))
B = Table("b", (("k", "int4"), ("w", "int4"), ("t", "text")))
A_ROWS = [(1, 10, "x"), (1, 10, "x"), (2, 20, "y"), (3, None, "z"), (None, 5, None), (4, 0, "w")]
B_ROWS = [(1, 1, "p"), (1, 2, "q"), (1, 3, None), (2, 7, "r"), (None, 9, "s"), (3, 3, "t")]
TABLES = {A.name: (A, A_ROWS), B.name: (B, B_ROWS)}

QUERIES = [
    # Plain correlated subqueries, by equality and by other predicates.
    "SELECT a.k, x.w FROM a, LATERAL (SELECT b.w FROM b WHERE b.k = a.k) x",
    "SELECT a.k, a.v, x.w FROM a CROSS JOIN LATERAL (SELECT w FROM b WHERE b.w < a.v) x",
    "SELECT a.k, x.s2 FROM a, LATERAL (SELECT a.s || '!' AS s2) x",
    "SELECT a.k, x.* FROM a JOIN LATERAL (SELECT b.t, b.w + a.v AS total FROM b "
    "WHERE b.k = a.k) x ON x.total > 11",
    # Per outer row: grouping, aggregates without GROUP BY (a row even for no matches),
    # DISTINCT, DISTINCT ON, ORDER BY … LIMIT (the top rows of each).
    "SELECT a.k, x.n, x.top, x.c FROM a, LATERAL (SELECT count(*) AS n, max(b.w) AS top, "
    "count(b.t) + a.v AS c FROM b WHERE b.k = a.k) x",
    "SELECT a.k, x.t, x.n FROM a, LATERAL (SELECT b.t, count(*) AS n FROM b "
    "WHERE b.k IS NOT DISTINCT FROM a.k GROUP BY b.t) x",
    "SELECT a.k, x.w FROM a, LATERAL (SELECT DISTINCT b.w % 2 AS w FROM b WHERE b.k <= a.k) x",
    "SELECT a.k, x.w FROM a, LATERAL (SELECT b.w FROM b WHERE b.k = a.k "
    "ORDER BY b.w DESC LIMIT 2) x",
    "SELECT a.k, x.w FROM a, LATERAL (SELECT b.w FROM b WHERE b.w > a.k "
    "ORDER BY b.w LIMIT 1 OFFSET 1) x",
    "SELECT a.k, x.k2, x.w FROM a, LATERAL (SELECT DISTINCT ON (b.k) b.k AS k2, b.w FROM b "
    "WHERE b.w >= a.v / 10 ORDER BY b.k, b.w DESC) x",
    # LEFT JOIN LATERAL pads the rows with no match; ON conditions too.
    "SELECT a.k, a.s, x.w FROM a LEFT JOIN LATERAL (SELECT b.w FROM b WHERE b.k = a.k "
    "ORDER BY b.w LIMIT 1) x ON true",
    "SELECT a.k, x.w, x.t FROM a LEFT JOIN LATERAL (SELECT * FROM b WHERE b.k = a.k) x ON x.w > 1",
    # Table functions reading the rows before them (implicit LATERAL too).
    "SELECT a.k, g FROM a, generate_series(1, a.k) AS g",
    "SELECT a.k, g.n FROM a, LATERAL generate_series(a.k, 3) AS g(n) WHERE a.k IS NOT NULL",
    "SELECT a.s, piece FROM a, regexp_split_to_table(a.s || ',q', ',') AS piece",
    # Chains: a second LATERAL reads the first, then an ordinary join after them.
    "SELECT a.k, x.w, y.d FROM a, LATERAL (SELECT b.w FROM b WHERE b.k = a.k) x, "
    "LATERAL (SELECT x.w * 2 AS d) y",
    "SELECT a.k, x.w, b2.t FROM a, LATERAL (SELECT max(b.w) AS w FROM b WHERE b.k = a.k) x "
    "JOIN b AS b2 ON b2.w = x.w",
    # A LATERAL that reads nothing before it is a plain cross join.
    "SELECT a.k, x.c FROM a, LATERAL (SELECT count(*) AS c FROM b) x",
    # In a subquery and under aggregation.
    "SELECT k, sum(w) FROM (SELECT a.k, x.w FROM a, LATERAL (SELECT b.w FROM b "
    "WHERE b.k = a.k) x) y GROUP BY k",
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for table, rows in TABLES.values():
            columns = ", ".join(f"{n} {'int' if t == 'int4' else t}" for n, t in table.columns)
            connection.execute(f"CREATE TEMPORARY TABLE {table.name} ({columns})")
            with connection.cursor() as cursor:
                marks = ", ".join(["%s"] * len(table.columns))
                cursor.executemany(f"INSERT INTO {table.name} VALUES ({marks})", rows)
        yield connection


def _postgres(connection: psycopg.Connection, sql: str) -> tuple[list[tuple[str, str]], list]:
    cursor = connection.execute(sql)
    types = connection.adapters.types
    columns = [(c.name, types.get(c.type_code).name) for c in cursor.description or []]
    return columns, cursor.fetchall()


def _loupe(sql: str) -> tuple[list[tuple[str, str]], list]:
    def resolve(name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        found = TABLES.get(name)
        return (found[0].name, found[0].columns) if found else None

    statement = parse_one(sql)
    assert isinstance(statement, Query)
    planned = plan_select(statement.expression, resolve)
    inputs = {
        table.name: OneShotInput(table.columns, persist_updates(table, [(r, 1) for r in rows], 0))
        for table, rows in TABLES.values()
    }
    result = evaluate_plan(
        lower_to_lir(planned.relation),
        planned.relation.columns,
        inputs,
        engine_finishing(planned.finishing),
    )
    return list(planned.columns), result.rows()


_PG_TYPES = {"int4": "int4", "int8": "int8", "text": "text", "numeric": "numeric"}


@pytest.mark.parametrize("sql", QUERIES)
def test_lateral_query_matches_postgres(postgres: psycopg.Connection, sql: str) -> None:
    their_columns, theirs = _postgres(postgres, sql)
    our_columns, ours = _loupe(sql)
    assert [n for n, _ in our_columns] == [n for n, _ in their_columns], "column names"
    assert [t for _, t in our_columns] == [t for _, t in their_columns], "column types"
    ours, theirs = sorted(ours, key=_sortable), sorted(theirs, key=_sortable)
    assert len(ours) == len(theirs), f"{ours} where PostgreSQL has {theirs}"
    for mine, reference in zip(ours, theirs, strict=True):
        assert all(same_value(x, y) for x, y in zip(mine, reference, strict=True)), (
            f"{mine} where PostgreSQL has {reference}"
        )


def test_lateral_first_or_right_joined_is_refused_clearly() -> None:
    for sql in (
        "SELECT * FROM LATERAL (SELECT 1) x",
        "SELECT * FROM a RIGHT JOIN LATERAL (SELECT b.w FROM b WHERE b.k = a.k) x ON true",
    ):
        with pytest.raises(LoupeError) as raised:
            _loupe(sql)
        assert raised.value.code == "0A000"
