"""PostgreSQL's WITH RECURSIVE, against PostgreSQL: rows as multisets, names, types, errors.

Loupe plans each recursive CTE as a binding of a LetRec (the machinery of
WITH MUTUALLY RECURSIVE); the tables are ``test_lateral``'s. Incremental
views over WITH RECURSIVE are compared in ``views.py``.
"""

from __future__ import annotations

import psycopg
import pytest

from loupe.common.errors import LoupeError

from .test_lateral import _loupe, _postgres, postgres  # noqa: F401
from .test_windows import _sortable, same_value

QUERIES = [
    "WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n + 1 FROM t WHERE n < 50) "
    "SELECT n FROM t",
    # Reachability over b's edges k -> w: UNION keeps each row once.
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION SELECT b.w FROM b JOIN r ON b.k = r.x) SELECT x FROM r",
    # UNION ALL keeps duplicates: a holds k = 1 twice, so does every step from it.
    "WITH RECURSIVE t(n, d) AS (SELECT k, 0 FROM a WHERE k IS NOT NULL UNION ALL "
    "SELECT n + 1, d + 1 FROM t WHERE d < 2) SELECT n, d FROM t",
    # Ordinary CTEs beside recursive ones, each seeing those before it.
    "WITH RECURSIVE base AS (SELECT k FROM a WHERE k < 3), t(n) AS (SELECT k FROM base "
    "UNION SELECT n + 10 FROM t WHERE n < 30), u AS (SELECT n * 2 AS m FROM t) SELECT m FROM u",
    # The step widens to the base's types; names come from the column list or the base.
    "WITH RECURSIVE t AS (SELECT 1::bigint AS n, 'a'::text AS s UNION ALL "
    "SELECT n + 1, s || 'b' FROM t WHERE n < 4) SELECT n, s FROM t",
    # Aggregating the result; recursion inside a subquery of the main query.
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n * 2 FROM t WHERE n < 1000) "
    "SELECT count(*), sum(n), max(n) FROM t",
    "SELECT a.k, (WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) "
    "SELECT sum(n) FROM t) AS s FROM a",
    # WITH RECURSIVE with no recursive CTE is a plain WITH.
    "WITH RECURSIVE x AS (SELECT 5 AS v) SELECT v FROM x",
]

ERRORS = [
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1::bigint FROM t WHERE n < 3) "
    "SELECT * FROM t",
    "WITH RECURSIVE t(n) AS (SELECT n FROM t UNION SELECT 1) SELECT * FROM t",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT t.n + u.n FROM t, t AS u) SELECT * FROM t",
    "WITH RECURSIVE t(n) AS (SELECT 1 INTERSECT SELECT n FROM t) SELECT * FROM t",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_with_recursive_matches_postgres(postgres: psycopg.Connection, sql: str) -> None:  # noqa: F811
    their_columns, theirs = _postgres(postgres, sql)
    our_columns, ours = _loupe(sql)
    assert our_columns == their_columns, "column names and types"
    ours, theirs = sorted(ours, key=_sortable), sorted(theirs, key=_sortable)
    assert len(ours) == len(theirs), f"{ours} where PostgreSQL has {theirs}"
    for mine, reference in zip(ours, theirs, strict=True):
        assert all(same_value(x, y) for x, y in zip(mine, reference, strict=True)), (
            f"{mine} where PostgreSQL has {reference}"
        )


@pytest.mark.parametrize("sql", ERRORS)
def test_with_recursive_errors_are_postgres_errors(
    postgres: psycopg.Connection,  # noqa: F811
    sql: str,
) -> None:
    with pytest.raises(psycopg.Error) as theirs:
        postgres.execute(sql)
    with pytest.raises(LoupeError) as ours:
        _loupe(sql)
    assert ours.value.code == theirs.value.sqlstate
    assert ours.value.message == theirs.value.diag.message_primary
