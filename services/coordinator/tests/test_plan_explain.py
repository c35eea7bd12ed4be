"""EXPLAIN snapshots: the optimized and physical plans of representative queries, stored as files.

Each query's file in ``snapshots/explain/`` holds the text of
``EXPLAIN OPTIMIZED PLAN FOR …`` and ``EXPLAIN PHYSICAL PLAN WITH
(node_ids) FOR …`` (statements parsed by the coordinator's parser, planned
as one-off SELECTs). After an intended plan change, rewrite them with
``LOUPE_UPDATE_SNAPSHOTS=1 pytest services/coordinator/tests/test_plan_explain.py``
and review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from loupe.coordinator.plan import explain, lower_to_lir, plan_query, plan_select
from loupe.coordinator.sql.parser import parse
from loupe.coordinator.sql.statements import Explain

SNAPSHOTS = Path(__file__).parent / "snapshots" / "explain"
UPDATE = os.environ.get("LOUPE_UPDATE_SNAPSHOTS") == "1"
NAME = "Explained Query"

CATALOG: dict[str, tuple[str, Sequence[tuple[str, str]]]] = {
    "t": ("materialize.public.t", [("a", "int4"), ("b", "text")]),
    "u": ("materialize.public.u", [("x", "int4"), ("y", "int8")]),
    "v": ("materialize.public.v", [("k", "int4"), ("d", "date"), ("n", "numeric")]),
}

QUERIES = {
    "filter_map_project": "SELECT a + 1 AS c, upper(b) FROM t WHERE a > 2 AND b LIKE 'x%'",
    "join_group_by_top": (
        "SELECT t.a, count(*) AS n, sum(u.y) FROM t JOIN u ON t.a = u.x "
        "WHERE t.b <> 'z' GROUP BY t.a HAVING count(*) > 1 ORDER BY n DESC LIMIT 5"
    ),
    "global_aggregate": "SELECT count(*), sum(y), max(x) FROM u",
    "left_join": "SELECT t.a, u.y FROM t LEFT JOIN u ON t.a = u.x AND u.y > 0",
    "full_join_mixed_condition": "SELECT * FROM t FULL JOIN u ON a = x AND y > a",
    "exists_and_not_exists": (
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.x = t.a) "
        "AND NOT EXISTS (SELECT 1 FROM v WHERE v.k = t.a)"
    ),
    "not_in": "SELECT b FROM t WHERE a NOT IN (SELECT x FROM u)",
    "cte_distinct_union": "WITH s AS (SELECT DISTINCT b FROM t) SELECT b FROM s UNION SELECT 'z'",
    "correlated_scalar_subquery": "SELECT a, (SELECT max(y) FROM u WHERE u.x = t.a) AS m FROM t",
    "top_k_in_subquery": (
        "SELECT b FROM (SELECT a, b FROM t ORDER BY a DESC LIMIT 3) AS s ORDER BY a"
    ),
    "distinct_on": "SELECT DISTINCT ON (b) b, a FROM t ORDER BY b, a DESC",
    "dates_and_casts": (
        "SELECT k, n::float8 * 2, extract(year FROM d) FROM v "
        "WHERE d <= DATE '1998-12-01' - INTERVAL '90' DAY AND k IN (1, 2, 3)"
    ),
    "window_functions": (
        "SELECT * FROM (SELECT x, y, rank() OVER (PARTITION BY x ORDER BY y DESC) AS r, "
        "sum(y) OVER (PARTITION BY x ORDER BY y ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s, "
        "lag(y) OVER (ORDER BY x, y) AS p FROM u) w WHERE x > 1 AND r = 1"
    ),
    "window_range_offset": (
        "SELECT k, count(*) OVER (PARTITION BY k ORDER BY d "
        "RANGE BETWEEN INTERVAL '7 days' PRECEDING AND CURRENT ROW) FROM v"
    ),
}
STATEMENTS = ("EXPLAIN OPTIMIZED PLAN FOR", "EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR")


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
    return CATALOG.get(name)


def explained(statement_sql: str) -> str:
    """The text EXPLAIN returns for one statement."""
    (statement,) = parse(statement_sql)
    assert isinstance(statement, Explain)
    assert statement.query is not None
    planned = plan_select(statement.query.expression, resolve)
    plan = lower_to_lir(planned.relation) if statement.stage == "physical" else planned.relation
    return explain(plan, node_ids=statement.node_ids, name=NAME, finishing=planned.finishing)


def snapshot_text(sql: str) -> str:
    sections = []
    for prefix in STATEMENTS:
        statement = f"{prefix} {sql}"
        sections.append(f"{statement}\n----\n{explained(statement)}")
    return "====\n".join(sections)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_explain_matches_its_snapshot(name: str) -> None:
    """EXPLAIN's text is what the snapshot file says (LOUPE_UPDATE_SNAPSHOTS=1 rewrites it)."""
    path = SNAPSHOTS / f"{name}.txt"
    text = snapshot_text(QUERIES[name])
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; run with LOUPE_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text()


def test_every_snapshot_file_has_a_query() -> None:
    """Snapshots of removed queries do not linger."""
    assert {p.stem for p in SNAPSHOTS.glob("*.txt")} == set(QUERIES)


def test_the_seed_example_is_exact() -> None:
    """Seed 002's EXPLAIN of a materialized view ``SELECT * FROM t LIMIT 10``, to the character."""
    query = parse("SELECT * FROM t LIMIT 10")[0]
    relation = plan_query(query.expression, resolve)  # type: ignore[attr-defined]
    text = explain(lower_to_lir(relation), node_ids=True, name="materialize.public.mv")
    assert text == (
        "materialize.public.mv:\n"
        "  TopK::Basic limit=10 // { node_id: 1 }\n"
        "    Get::PassArrangements materialize.public.t // { node_id: 0 }\n"
        "      raw=true\n"
    )
