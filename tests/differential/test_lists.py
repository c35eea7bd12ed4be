"""Materialize's lists, against PostgreSQL's arrays of the same elements.

PostgreSQL has no list type; Materialize documents a one-dimensional list as
holding, printing and indexing its elements as an array does. So each list
expression is compared with its array twin run by PostgreSQL: the same
value, the same text, and the list type of the array's element type.
"""

from __future__ import annotations

import psycopg
import pytest

from loupe import sqltypes

from .test_postgres_constants import loupe_answer, postgres_answer

# (Loupe's list expression, PostgreSQL's array expression)
TWINS = [
    ("LIST[1, 2, NULL]", "ARRAY[1, 2, NULL]"),
    ("LIST[1, 2, NULL]::text", "ARRAY[1, 2, NULL]::text"),
    ("LIST['a b', '', 'NULL', 'x']::text", "ARRAY['a b', '', 'NULL', 'x']::text"),
    ("LIST[true, false]::text", "ARRAY[true, false]::text"),
    ("'{1, 2 ,NULL}'::int list", "'{1, 2 ,NULL}'::int[]"),
    ("'{}'::text list", "'{}'::text[]"),
    ("'{1,x}'::int list", "'{1,x}'::int[]"),
    ("list_length(LIST[1, 2, 3])", "cardinality(ARRAY[1, 2, 3])"),
    ("list_length('{}'::int list)", "cardinality('{}'::int[])"),
    ("(LIST[10, 20, 30])[2]", "(ARRAY[10, 20, 30])[2]"),
    ("(LIST[10, 20])[3]", "(ARRAY[10, 20])[3]"),
    ("(LIST[10, 20])[0]", "(ARRAY[10, 20])[0]"),
    ("LIST[1, 2]::int8 list", "ARRAY[1, 2]::int8[]"),
    (
        "(SELECT list_agg(x ORDER BY x DESC) FROM (VALUES (1), (NULL), (3)) AS t(x))",
        "(SELECT array_agg(x ORDER BY x DESC) FROM (VALUES (1), (NULL), (3)) AS t(x))",
    ),
    (
        "(SELECT count(*) FROM unnest(LIST[1, NULL, 3]))",
        "(SELECT count(*) FROM unnest(ARRAY[1, NULL, 3]))",
    ),
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


def _as_array(type_: str) -> str:
    """A list type as the array type of its elements (other types as they are)."""
    if sqltypes.is_list(type_):
        return sqltypes.array_of(sqltypes.element_type(type_) or "")
    return type_


@pytest.mark.parametrize(("ours", "theirs"), TWINS, ids=[t[0] for t in TWINS])
def test_list_behaves_as_the_array_of_its_elements(postgres, ours: str, theirs: str) -> None:
    """Value, text and SQLSTATE of the array twin; the list type of its element type."""
    loupe_value, loupe_type = loupe_answer(ours)
    postgres_value, postgres_type = postgres_answer(postgres, theirs)
    assert loupe_value == postgres_value
    if loupe_value != "error":
        assert _as_array(loupe_type) == postgres_type
        if sqltypes.element_type(postgres_type) is not None:
            assert sqltypes.is_list(loupe_type)
