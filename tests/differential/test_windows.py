"""Window functions in one-off SELECTs, against PostgreSQL: rows, column names, types, errors.

Every query runs in PostgreSQL over table ``w`` and in Loupe (planned by
``plan_select``, evaluated once by the engine, as a peek would be) over the
same rows: several partitions, a NULL partition, ties in the window
ORDER BY, a duplicate row and NULLs in every column. Queries whose outer
ORDER BY orders every row are compared in order; the others as multisets.
Values are compared with their types (floats within 1e-12, numerics exactly).
Failing queries must fail with PostgreSQL's
SQLSTATE and message.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator.plan import lower_to_lir, plan_select
from loupe.dataflow.oneshot import OneShotInput, engine_finishing, evaluate_plan

from .harness import PG_COLUMN_TYPES, Table, persist_updates

W = Table(
    "w",
    (
        ("p", "int4"),
        ("o", "int4"),
        ("v", "int4"),
        ("s", "text"),
        ("f", "float8"),
        ("n", "numeric"),
        ("d", "date"),
    ),
)
D = datetime.date
ROWS = [
    (1, 1, 10, "a", 1.5, "1.25", D(2024, 1, 1)),
    (1, 1, 20, "b", None, "2.5", D(2024, 1, 3)),
    (1, 2, None, "c", 0.1, None, D(2024, 1, 3)),
    (1, 3, 30, None, 0.2, "3", None),
    (1, None, 5, "d", 2.0, "0.5", D(2024, 1, 10)),
    (2, 5, 7, "e", -1.0, "10", D(2024, 2, 1)),
    (2, 5, 7, "e", -1.0, "10", D(2024, 2, 1)),
    (2, 6, -3, "f", 3.5, "-2", D(2024, 1, 30)),
    (None, 1, 100, "g", 4.0, "7.75", D(2023, 12, 31)),
    (None, None, None, None, None, None, None),
    (3, 1, 1, "h", 0.25, "1", D(2024, 1, 1)),
]
# The window ORDER BY that orders every row (rows still tied are equal).
TOTAL = "o, v, s, f, n, d"

QUERIES = [
    # Ranking.
    f"SELECT p, o, v, row_number() OVER (PARTITION BY p ORDER BY {TOTAL}) AS rn, "
    "rank() OVER (PARTITION BY p ORDER BY o) AS r, "
    "dense_rank() OVER (PARTITION BY p ORDER BY o DESC) AS dr, "
    "percent_rank() OVER (PARTITION BY p ORDER BY o) AS pr, "
    "cume_dist() OVER (PARTITION BY p ORDER BY o NULLS FIRST) AS cd FROM w",
    f"SELECT p, o, ntile(3) OVER (PARTITION BY p ORDER BY {TOTAL}), "
    f"ntile(10) OVER (ORDER BY p, {TOTAL}) AS many FROM w",
    "SELECT p, percent_rank() OVER (PARTITION BY p), cume_dist() OVER (PARTITION BY p), "
    "rank() OVER (), dense_rank() OVER () FROM w",
    "SELECT ntile(NULL::int) OVER (), ntile(2::smallint) OVER (ORDER BY v, o, s) AS t FROM w",
    # lag, lead, first, last and nth value.
    f"SELECT p, v, lag(v) OVER x, lead(v, 2) OVER x, lag(v, 2, -1) OVER x AS back, "
    f"lead(s, 1, 'none') OVER x AS next_s, lag(f, 1, 0) OVER x AS prev_f, "
    f"lag(n, 1, 0.5) OVER x AS prev_n, lag(v, -1) OVER x AS ahead, lag(v, NULL) OVER x AS nothing "
    f"FROM w WINDOW x AS (PARTITION BY p ORDER BY {TOTAL})",
    f"SELECT p, v, first_value(v) OVER x, last_value(v) OVER x, nth_value(s, 2) OVER x, "
    f"nth_value(v, 9) OVER x AS beyond, last_value(o) OVER (PARTITION BY p ORDER BY o) AS peers "
    f"FROM w WINDOW x AS (PARTITION BY p ORDER BY {TOTAL})",
    f"SELECT p, v, first_value(v) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS after_me, "
    f"last_value(v) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS final, "
    f"nth_value(v, 2) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS middle FROM w",
    # Aggregates: the default frame (peers included), whole partitions, explicit frames.
    "SELECT p, o, sum(v) OVER x, count(*) OVER x, count(v) OVER x AS nv, avg(v) OVER x, "
    "min(s) OVER x, max(f) OVER x, sum(n) OVER x AS sn, bool_or(v > 10) OVER x AS big "
    "FROM w WINDOW x AS (PARTITION BY p ORDER BY o)",
    "SELECT p, sum(v) OVER (PARTITION BY p), count(*) OVER (), avg(n) OVER (PARTITION BY p), "
    "max(s) OVER (PARTITION BY p) AS ms, stddev(f) OVER (PARTITION BY p) AS sd, "
    "sum(v::int8) OVER () AS total FROM w",
    f"SELECT p, v, sum(v) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS moving, "
    f"sum(f) OVER (PARTITION BY p ORDER BY {TOTAL} ROWS UNBOUNDED PRECEDING) AS running, "
    f"count(*) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS rest, "
    f"min(v) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN 2 PRECEDING AND 1 PRECEDING) AS earlier, "
    f"max(s) OVER (PARTITION BY p ORDER BY {TOTAL} "
    "ROWS BETWEEN CURRENT ROW AND CURRENT ROW) AS own, "
    "avg(v) OVER (PARTITION BY p ORDER BY o "
    "RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS later, "
    "sum(v) OVER (PARTITION BY p ORDER BY o "
    "RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS everything FROM w",
    "SELECT p, sum(v) FILTER (WHERE v > 5) OVER (PARTITION BY p ORDER BY o) AS big, "
    "count(*) FILTER (WHERE s IS NULL) OVER () AS nameless FROM w",
    # RANGE frames with offsets: distances in the ORDER BY key's terms.
    "SELECT p, v, sum(v) OVER (PARTITION BY p ORDER BY v "
    "RANGE BETWEEN 5 PRECEDING AND 2 FOLLOWING) AS near, "
    "count(*) OVER (ORDER BY v DESC RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS above, "
    "max(s) OVER (ORDER BY v NULLS FIRST RANGE BETWEEN 3 FOLLOWING AND 20 FOLLOWING) AS ahead, "
    "sum(o) OVER (ORDER BY f RANGE BETWEEN 1 PRECEDING AND 0.5 FOLLOWING) AS by_float, "
    "sum(v) OVER (ORDER BY n DESC NULLS LAST RANGE BETWEEN CURRENT ROW AND 2 FOLLOWING) AS lower "
    "FROM w",
    "SELECT p, d, count(*) OVER (ORDER BY d RANGE BETWEEN INTERVAL '2 days' PRECEDING "
    "AND CURRENT ROW) AS recent, "
    "sum(v) OVER (PARTITION BY p ORDER BY d DESC RANGE BETWEEN '1 day' PRECEDING "
    "AND '1 week' FOLLOWING) AS around, "
    "count(*) OVER (ORDER BY d::timestamp RANGE BETWEEN UNBOUNDED PRECEDING "
    "AND INTERVAL '36 hours' PRECEDING) AS before FROM w",
    # Where no key is within the distance, NULL keys (beyond every value) may be.
    "SELECT p, o, v, sum(v) OVER (ORDER BY o RANGE BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) "
    "AS a, sum(v) OVER (ORDER BY o RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS b, "
    "sum(v) OVER (ORDER BY o RANGE BETWEEN 5 FOLLOWING AND 6 FOLLOWING) AS c, "
    "sum(v) OVER (ORDER BY o NULLS FIRST RANGE BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) "
    "AS d, sum(v) OVER (ORDER BY o NULLS FIRST RANGE BETWEEN UNBOUNDED PRECEDING "
    "AND 1 PRECEDING) AS e, sum(v) OVER (ORDER BY o DESC RANGE BETWEEN UNBOUNDED PRECEDING "
    "AND 2 FOLLOWING) AS g, sum(v) OVER (ORDER BY o DESC NULLS LAST RANGE BETWEEN "
    "3 PRECEDING AND UNBOUNDED FOLLOWING) AS h FROM w",
    # GROUPS frames: offsets count peer groups.
    "SELECT p, o, v, sum(v) OVER (PARTITION BY p ORDER BY o GROUPS BETWEEN 1 PRECEDING "
    "AND 1 FOLLOWING) AS a, count(*) OVER (ORDER BY o DESC GROUPS BETWEEN CURRENT ROW "
    "AND 2 FOLLOWING) AS b, sum(v) OVER (ORDER BY o GROUPS BETWEEN 2 FOLLOWING "
    "AND 3 FOLLOWING) AS c, max(s) OVER (ORDER BY o NULLS FIRST GROUPS BETWEEN UNBOUNDED "
    "PRECEDING AND 1 PRECEDING) AS d, first_value(v) OVER (ORDER BY o, v GROUPS 2 PRECEDING) "
    "AS e, avg(v) OVER (ORDER BY p GROUPS BETWEEN CURRENT ROW AND CURRENT ROW) AS f FROM w",
    # Windows with the rest of a SELECT.
    "SELECT p, sum(v), rank() OVER (ORDER BY sum(v) DESC NULLS LAST) AS r, "
    "sum(count(*)) OVER (ORDER BY p) AS running FROM w GROUP BY p",
    "SELECT * FROM (SELECT p, v, s, row_number() OVER "
    "(PARTITION BY p ORDER BY v DESC NULLS LAST, o, s) AS rn FROM w) x WHERE rn <= 2",
    "SELECT DISTINCT p, count(*) OVER (PARTITION BY p) AS n FROM w",
    f"SELECT p, v, v - lag(v) OVER (PARTITION BY p ORDER BY {TOTAL}) AS delta FROM w",
    "WITH ranked AS (SELECT p, v, rank() OVER (PARTITION BY p ORDER BY v) AS r FROM w) "
    "SELECT a.p, a.v, b.v AS next FROM ranked a JOIN ranked b ON a.p = b.p AND b.r = a.r + 1",
    "SELECT row_number() OVER () FROM w WHERE false",
    "SELECT v, bool_and(v > 5) OVER (ORDER BY v DESC ROWS BETWEEN CURRENT ROW AND "
    "UNBOUNDED FOLLOWING) FROM w",
    "SELECT sum(v) OVER (ORDER BY v ROWS 2.5 PRECEDING) AS a, "
    "sum(v) OVER (ORDER BY v ROWS BETWEEN '1' PRECEDING AND 1.5::float8 FOLLOWING) AS b FROM w",
    "SELECT count(*) OVER () FROM w GROUP BY p",
    "SELECT v, rank() OVER (ORDER BY v), rank() OVER (ORDER BY v) + 1 AS next FROM w",
    f"SELECT p, v FROM w WHERE v IN (SELECT row_number() OVER (ORDER BY {TOTAL}) FROM w)",
    "SELECT p, v FROM w AS x WHERE EXISTS "
    "(SELECT row_number() OVER () FROM w WHERE w.p = x.p AND w.v > 10)",
    "SELECT p, (SELECT max(r) FROM (SELECT rank() OVER (ORDER BY v) AS r FROM w) y) FROM w",
]
# Queries whose outer ORDER BY orders every row: compared in order.
ORDERED = [
    "SELECT p, v, rank() OVER (ORDER BY v DESC NULLS LAST) AS r FROM w ORDER BY r, p, o, s",
    f"SELECT p, v FROM w ORDER BY row_number() OVER (ORDER BY p, {TOTAL}) DESC LIMIT 4",
    "SELECT p, sum(v) AS total FROM w GROUP BY p "
    "ORDER BY rank() OVER (ORDER BY sum(v) NULLS FIRST), p",
]
ERRORS = [
    "SELECT p FROM w WHERE row_number() OVER () > 1",
    "SELECT p FROM w GROUP BY row_number() OVER ()",
    "SELECT p FROM w GROUP BY p HAVING rank() OVER () > 1",
    "SELECT p FROM w JOIN w AS x ON row_number() OVER () = 1",
    "SELECT foo(v) OVER () FROM w",
    "SELECT abs(v) OVER () FROM w",
    "SELECT row_number() FROM w",
    "SELECT row_number(1) OVER () FROM w",
    "SELECT ntile(1.5) OVER () FROM w",
    "SELECT lag(v, 1, 'x') OVER () FROM w",
    "SELECT lag(s, 1, 5) OVER () FROM w",
    "SELECT lag(NULL) OVER () FROM w",
    "SELECT lead(v, 1::int8) OVER () FROM w",
    "SELECT sum(v) OVER (ORDER BY v ROWS 'a' PRECEDING) FROM w",
    "SELECT sum(v) OVER (ORDER BY v GROUPS BETWEEN -1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY v ROWS true PRECEDING) FROM w",
    "SELECT sum(row_number() OVER ()) FROM w",
    "SELECT sum(sum(v) OVER ()) OVER () FROM w",
    "SELECT count(DISTINCT v) OVER () FROM w",
    "SELECT ntile(0) OVER () FROM w",
    "SELECT ntile(p - 1) OVER (PARTITION BY p ORDER BY o) FROM w",
    "SELECT nth_value(v, o - 1) OVER (ORDER BY o) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN -1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN 1 PRECEDING AND -1 FOLLOWING) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN NULL PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN UNBOUNDED FOLLOWING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN CURRENT ROW AND UNBOUNDED PRECEDING) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN CURRENT ROW AND 1 PRECEDING) FROM w",
    "SELECT sum(v) OVER (ROWS BETWEEN 1 FOLLOWING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY s RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY v RANGE BETWEEN 1.5 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY v RANGE BETWEEN -1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY d RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER (ORDER BY n RANGE BETWEEN NULL PRECEDING AND CURRENT ROW) FROM w",
    "SELECT sum(v) OVER x FROM w WINDOW x AS (ORDER BY v), x AS (ORDER BY p)",
    "SELECT sum(v) OVER y FROM w WINDOW x AS (ORDER BY v)",
    "SELECT sum(v) OVER (x ORDER BY p) FROM w WINDOW x AS (ORDER BY v)",
    "SELECT sum(v) OVER (x PARTITION BY p) FROM w WINDOW x AS (ORDER BY v)",
]
# What Loupe refuses (0A000) where PostgreSQL answers.
REFUSED = [
    "SELECT sum(v) OVER (ORDER BY v ROWS 1 PRECEDING EXCLUDE CURRENT ROW) FROM w",
    # A window over a subquery's rows for each outer row.
    f"SELECT p, v FROM w AS x WHERE v IN "
    f"(SELECT row_number() OVER (ORDER BY {TOTAL}) FROM w WHERE w.p = x.p)",
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TEMPORARY TABLE w (p int, o int, v int, s text, f float8, n numeric, d date)"
        )
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO w VALUES (%s, %s, %s, %s, %s, %s, %s)", ROWS)
        yield connection


def postgres_answer(connection: psycopg.Connection, sql: str) -> tuple[object, ...]:
    """("ok", [(name, type)], rows) or ("error", SQLSTATE, message)."""
    try:
        cursor = connection.execute(sql)
    except psycopg.Error as error:
        return "error", error.sqlstate, error.diag.message_primary
    types = connection.adapters.types
    columns = [(c.name, types.get(c.type_code).name) for c in cursor.description or []]
    return "ok", columns, cursor.fetchall()


def loupe_answer(sql: str) -> tuple[object, ...]:
    def resolve(name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        return (W.name, W.columns) if name == W.name else None

    try:
        planned = plan_select(sqlglot.parse_one(sql, read="postgres"), resolve)
        contents = persist_updates(W, [(row, 1) for row in ROWS], 0)
        result = evaluate_plan(
            lower_to_lir(planned.relation),
            planned.relation.columns,
            {W.name: OneShotInput(W.columns, contents)},
            engine_finishing(planned.finishing),
        )
    except LoupeError as error:
        return "error", error.code, error.message
    return "ok", list(planned.columns), result.rows()


def same_value(ours: object, theirs: object) -> bool:
    if ours is None or theirs is None or isinstance(theirs, bool):
        return ours is theirs
    if isinstance(theirs, Decimal):  # numeric is exact: equal as decimals
        return isinstance(ours, Decimal) and ours == theirs
    if isinstance(theirs, float):
        return isinstance(ours, float) and math.isclose(ours, theirs, rel_tol=1e-12)
    return type(ours) is type(theirs) and ours == theirs


def _sortable(row: tuple[object, ...]) -> tuple[tuple[bool, str], ...]:
    """Rows in one order on both sides: numbers by their float's text (numeric is a float)."""
    return tuple((value is None, _text(value)) for value in row)


def _text(value: object) -> str:
    if isinstance(value, Decimal | int | float) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


def assert_same(sql: str, connection: psycopg.Connection, *, ordered: bool) -> None:
    theirs = postgres_answer(connection, sql)
    ours = loupe_answer(sql)
    assert theirs[0] == "ok", f"PostgreSQL fails: {theirs}"
    assert ours[0] == "ok", f"Loupe fails: {ours}"
    assert ours[1] == theirs[1], "column names and types"
    our_rows, their_rows = list(ours[2]), list(theirs[2])  # type: ignore[call-overload]
    if not ordered:
        our_rows.sort(key=_sortable)
        their_rows.sort(key=_sortable)
    assert len(our_rows) == len(their_rows), f"{our_rows} where PostgreSQL has {their_rows}"
    for mine, reference in zip(our_rows, their_rows, strict=True):
        assert all(same_value(a, b) for a, b in zip(mine, reference, strict=True)), (
            f"{mine} where PostgreSQL has {reference}"
        )


@pytest.mark.parametrize("sql", QUERIES)
def test_window_query_matches_postgres(postgres: psycopg.Connection, sql: str) -> None:
    """The rows, as a multiset, with PostgreSQL's column names and types."""
    assert_same(sql, postgres, ordered=False)


@pytest.mark.parametrize("sql", ORDERED)
def test_window_query_in_order_matches_postgres(postgres: psycopg.Connection, sql: str) -> None:
    """ORDER BY a window function's value: the rows in PostgreSQL's order."""
    assert_same(sql, postgres, ordered=True)


@pytest.mark.parametrize("sql", ERRORS)
def test_window_error_matches_postgres(postgres: psycopg.Connection, sql: str) -> None:
    """The SQLSTATE and message PostgreSQL fails with."""
    theirs = postgres_answer(postgres, sql)
    assert theirs[0] == "error", "PostgreSQL answers"
    assert loupe_answer(sql) == theirs


@pytest.mark.parametrize("sql", REFUSED)
def test_unsupported_frames_are_refused_not_answered_wrongly(
    postgres: psycopg.Connection, sql: str
) -> None:
    """EXCLUDE and windows in correlated IN subqueries: 0A000, never a wrong answer."""
    assert postgres_answer(postgres, sql)[0] == "ok"
    answer = loupe_answer(sql)
    assert answer[:2] == ("error", "0A000")


def test_harness_sees_a_wrong_window_value(postgres: psycopg.Connection) -> None:
    """The comparison itself: a different frame is a mismatch, not a pass."""
    ours = loupe_answer("SELECT p, sum(v) OVER (PARTITION BY p ORDER BY o) FROM w")
    theirs = postgres_answer(postgres, "SELECT p, sum(v) OVER (PARTITION BY p) FROM w")
    assert sorted(ours[2], key=_sortable) != sorted(theirs[2], key=_sortable)  # type: ignore[arg-type]


assert set(PG_COLUMN_TYPES) >= {t for _, t in W.columns}
