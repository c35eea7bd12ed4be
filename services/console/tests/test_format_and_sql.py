"""The console writes sizes as pg_size_pretty and parameters as literals PostgreSQL
reads back to the same values: both checked against the local PostgreSQL."""

from __future__ import annotations

import datetime
import decimal

import psycopg
import pytest

from loupe.console import format as fmt
from loupe.console.app import safe_next
from loupe.console.sql import Query, literal

SIZES = [0, 1, 1023, 10239, 10240, 10752, 123456, 10485759, 10485760, 5 * 1024**3 + 77, -20480]
VALUES = [
    None,
    True,
    0,
    -42,
    2**40,
    1.5,
    decimal.Decimal("12.340"),
    "plain",
    "it's",
    "back\\slash",
    "100%",
    datetime.datetime(2026, 11, 26, 17, 5, 3, 250000, tzinfo=datetime.UTC),
    datetime.date(2026, 1, 2),
    ["a", "b'c"],
]


@pytest.fixture
def pg(postgres_url: str):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


def test_size_is_pg_size_pretty(pg) -> None:
    for value in SIZES:
        (expected,) = pg.execute("SELECT pg_size_pretty(%s::bigint)", [value]).fetchone()
        assert fmt.size(value) == expected, value


def test_literals_read_back_as_the_bound_values(pg) -> None:
    for value in VALUES:
        # psycopg binds a list of strings untyped (read back as text): compare with the list.
        bound = value if isinstance(value, list) else pg.execute("SELECT %s", [value]).fetchone()[0]
        written = pg.execute(f"SELECT {literal(value)}").fetchone()[0]
        if isinstance(value, datetime.datetime):
            written = datetime.datetime.fromisoformat(written)
        elif isinstance(value, datetime.date):
            written = datetime.date.fromisoformat(written)
        assert written == bound, value


def test_pasteable_writes_parameters_in_and_keeps_percent(pg) -> None:
    query = Query("SELECT %s::text AS a, %s::int AS b, 'x%%y' LIKE 'x%%' AS c", ("o'k", 7))
    assert query.pasteable() == "SELECT 'o''k'::text AS a, 7::int AS b, 'x%y' LIKE 'x%' AS c"
    assert (
        pg.execute(query.pasteable()).fetchone() == pg.execute(query.sql, query.params).fetchone()
    )


def test_only_a_path_of_the_console_is_followed_after_login() -> None:
    assert safe_next("/objects/u1?replica=r1") == "/objects/u1?replica=r1"
    for hostile in ["https://evil.example/", "//evil.example/x", "javascript:alert(1)", "", None]:
        assert safe_next(hostile) == "/"


def test_states_read_without_colour() -> None:
    assert fmt.state_label(fmt.hydration_state(True)) == "✓ hydrated"
    assert fmt.state_label(fmt.hydration_state(False, 10)) == "◐ hydrating"
    assert fmt.state_label(fmt.hydration_state(False, 0)) == "○ not started"
    assert fmt.state_label(fmt.hydration_state(None)) == "? no report"
