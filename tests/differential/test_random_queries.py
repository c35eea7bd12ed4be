"""Random queries (``randomized.Queries``) as incrementally maintained views, against PostgreSQL.

Each drawn query is planned by Loupe's planner and maintained by the engine
as a view with an index (the differential harness's ``run``); seeded steps
insert and delete rows of t1, t2 and t3, and after every step the view's
contents (at the new time and at the one before) equal PostgreSQL's answer
to the same SQL over the same rows: as multisets, floats (and the engine's
float numeric) within 1e-9, top-k views up to ties at the boundary. A query
Loupe refuses when planning fails the test too: the grammar draws only
constructs the README says Loupe supports, and PostgreSQL runs them all.

``LOUPE_RANDOM_QUERIES=2000 LOUPE_RANDOM_SEED=7`` draws more of them
(``LOUPE_RANDOM_QUERY_STEPS`` steps each, on ``LOUPE_RANDOM_QUERY_WORKERS``
workers, which exchange data by key); a failure names the query's
index, its SQL and the step it went wrong at.
"""

from __future__ import annotations

import os
import random

import pytest

from loupe.common.errors import LoupeError

from .harness import View, Workload, run
from .randomized import Queries, Query

COUNT = int(os.environ.get("LOUPE_RANDOM_QUERIES", "60"))
SEED = int(os.environ.get("LOUPE_RANDOM_SEED", "3"))
STEPS = int(os.environ.get("LOUPE_RANDOM_QUERY_STEPS", "8"))
WORKERS = int(os.environ.get("LOUPE_RANDOM_QUERY_WORKERS", "1"))

TABLES = {table.name: dict(table.columns) for table in Workload.TABLES}


def draw(seed: int, count: int) -> list[Query]:
    grammar = Queries(random.Random(seed), TABLES)
    return [grammar.query() for _ in range(count)]


QUERIES = draw(SEED, COUNT)


@pytest.mark.parametrize("index", range(COUNT), ids=[f"q{i}" for i in range(COUNT)])
def test_random_query_matches_postgres_after_every_step(index: int, postgres_url: str) -> None:
    query = QUERIES[index]
    view = View(f"q{index}", query.sql, order_columns=query.order_columns)
    where = f"LOUPE_RANDOM_SEED={SEED} q{index}: {query.sql}"
    try:
        mismatches = run(
            [view],
            seed=SEED * 1000 + index,
            steps=STEPS,
            workers=WORKERS,
            postgres_url=postgres_url,
        )
    except LoupeError as error:
        pytest.fail(f"{where}\nLoupe refuses it: {error.code} {error.message}")
    assert not mismatches, f"{where}\n{mismatches[0]}"


def test_the_grammar_draws_every_construct() -> None:
    """The draw is not degenerate: the CI-sized sample holds each kind of construct."""
    sql = [q.sql for q in draw(SEED, 200)]
    for construct in (
        " JOIN ",
        " LEFT JOIN ",
        " RIGHT JOIN ",
        " FULL JOIN ",
        " CROSS JOIN ",
        " GROUP BY ",
        " HAVING ",
        "count(DISTINCT ",
        " FILTER (WHERE ",
        "bool_and(",
        "SELECT DISTINCT ",
        "SELECT DISTINCT ON (",
        " LIMIT ",
        " OFFSET ",
        " UNION ",
        " EXCEPT ",
        " INTERSECT ",
        "WITH ",
        "EXISTS (SELECT",
        " IN (SELECT ",
        " NOT IN (SELECT ",
        "(SELECT count(",
    ):
        assert any(construct in s for s in sql), construct
    assert any(" ORDER BY " in s and " LIMIT " in s for s in sql)
    assert any("FROM (SELECT " in s for s in sql)
