"""WITH MUTUALLY RECURSIVE: parsed, planned as a LetRec, evaluated to its fixpoint by the engine.

Expected answers are computed here by plain Python fixpoints of the same
definitions; the incremental views are compared with PostgreSQL's WITH
RECURSIVE in tests/differential (views ``recursive_*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.plan import plan_select
from loupe.coordinator.sql.parser import Query, parse_one
from loupe.dataflow.oneshot import engine_finishing, evaluate_plan
from loupe.plan import codec, lir, mir
from loupe.plan.explain import explain


def _resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
    return None


def _planned(sql: str) -> tuple[mir.Relation, mir.Finishing]:
    statement = parse_one(sql)
    assert isinstance(statement, Query)
    planned = plan_select(statement.expression, _resolve)
    return planned.relation, planned.finishing


def rows(sql: str) -> list[tuple[Any, ...]]:
    relation, finishing = _planned(sql)
    plan = lir.lower_to_lir(relation)
    # Through the wire format too: replicas receive the plan as protobuf.
    plan = codec.lir_from_proto(codec.lir_to_proto(plan))
    result = evaluate_plan(plan, relation.columns, finishing=engine_finishing(finishing))
    return sorted(result.frame.rows(), key=repr)


def error(sql: str) -> LoupeError:
    with pytest.raises(LoupeError) as raised:
        rows(sql)
    return raised.value


def test_a_counter_reaches_its_fixpoint() -> None:
    sql = (
        "WITH MUTUALLY RECURSIVE t (n int) AS "
        "(VALUES (1) UNION ALL SELECT n + 1 FROM t WHERE n < 100) SELECT sum(n) FROM t"
    )
    assert rows(sql) == [(sum(range(1, 101)),)]


def test_bindings_see_each_other_in_order() -> None:
    """Mutual recursion: evens and odds up to 100, then a binding reading both."""
    sql = (
        "WITH MUTUALLY RECURSIVE "
        "evens (n int) AS (VALUES (0) UNION ALL SELECT n + 1 FROM odds WHERE n < 100), "
        "odds (n int) AS (SELECT n + 1 FROM evens WHERE n < 100), "
        "both (n int) AS (SELECT * FROM evens UNION ALL SELECT * FROM odds) "
        "SELECT count(*), sum(n), min(n), max(n) FROM both"
    )
    evens: set[int] = set()
    odds: set[int] = set()
    while True:
        new_evens = {0} | {n + 1 for n in odds if n < 100}
        new_odds = {n + 1 for n in new_evens if n < 100}
        if (new_evens, new_odds) == (evens, odds):
            break
        evens, odds = new_evens, new_odds
    both = sorted(evens | odds)
    assert rows(sql) == [(len(both), sum(both), both[0], both[-1])]


def test_non_linear_recursion_and_a_cte_inside_a_binding() -> None:
    """Sums of two known numbers (PostgreSQL's WITH RECURSIVE cannot express this)."""
    sql = (
        "WITH MUTUALLY RECURSIVE numbers (n int) AS (VALUES (1) UNION ALL ("
        "WITH rebound AS (SELECT * FROM numbers) "
        "SELECT DISTINCT a.n + b.n AS n FROM rebound AS a, rebound AS b "
        "WHERE a.n <= 40 AND b.n <= 40)) SELECT count(*) FROM numbers"
    )
    numbers: list[int] = []
    while True:
        small = {n for n in numbers if n <= 40}
        new = sorted([1, *sorted({a + b for a in small for b in small})])
        if new == numbers:
            break
        numbers = new
    assert rows(sql) == [(len(numbers),)]


def test_recursion_limits_fail_or_return_the_state_at_the_limit() -> None:
    body = (
        "t (n int) AS (VALUES (1) UNION ALL SELECT n + 1 FROM t WHERE n < 100) SELECT max(n) FROM t"
    )
    failed = error(f"WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 3) {body}")
    assert failed.code == "54000"
    assert "exceeded the recursion limit 3" in failed.message
    # After three iterations t holds 1, 2 and 3.
    assert rows(f"WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 3) {body}") == [(3,)]
    # A limit the fixpoint never reaches changes nothing.
    assert rows(f"WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 1000) {body}") == [(100,)]


def test_declared_types_are_checked_and_widened() -> None:
    mismatch = error(
        "WITH MUTUALLY RECURSIVE foo (a text, b int) AS (SELECT 1, 2 UNION SELECT a, 7 FROM bar), "
        "bar (a int) AS (SELECT a FROM foo) SELECT * FROM bar"
    )
    assert mismatch.code == "42804"
    assert "did not match inferred type" in mismatch.message
    fewer = error("WITH MUTUALLY RECURSIVE foo (a int, b int) AS (SELECT 1) SELECT * FROM foo")
    assert fewer.code == "42804"
    relation, _ = _planned(
        "WITH MUTUALLY RECURSIVE t (n bigint) AS "
        "(VALUES (1) UNION SELECT n + 1 FROM t WHERE n < 3) SELECT n FROM t"
    )
    assert relation.types == ("int8",)
    untyped = error("WITH MUTUALLY RECURSIVE t AS (SELECT 1) SELECT * FROM t")
    assert untyped.code == "42601"
    twice = error(
        "WITH MUTUALLY RECURSIVE t (n int) AS (SELECT 1), t (n int) AS (SELECT 2) SELECT * FROM t"
    )
    assert twice.code == "42712"


def test_errors_inside_the_recursion_reach_the_query() -> None:
    failed = error(
        "WITH MUTUALLY RECURSIVE t (n int) AS "
        "(VALUES (3) UNION SELECT n - 1 FROM t WHERE n > 0 "
        "UNION SELECT 6 / n FROM t WHERE n < 2) SELECT * FROM t"
    )
    assert failed.code == "22012"


def test_explain_shows_the_bindings_under_with_mutually_recursive() -> None:
    relation, _ = _planned(
        "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 5) "
        "t (n int) AS (VALUES (1) UNION SELECT n + 1 FROM t WHERE n < 3) SELECT n FROM t"
    )
    text = explain(lir.lower_to_lir(relation), name="q", node_ids=True)
    lines = text.splitlines()
    assert lines[1].startswith("  Return // { limit: return_at_recursion_limit=5 }")
    assert "  With Mutually Recursive" in lines
    assert "    cte l0 =" in lines
    assert any("Get::PassArrangements l0" in line for line in lines)
    assert "Return" in explain(relation, name="q")
    assert "cte l0 =" in explain(relation, name="q")


def test_stored_definitions_keep_the_recursion_and_its_limit() -> None:
    """A view's create_sql is regenerated from the parse: it must plan the same again."""
    from loupe.coordinator.objects import view_sql

    sql = (
        "WITH MUTUALLY RECURSIVE (ERROR AT RECURSION LIMIT 7) t (n int8) AS "
        "(VALUES (1) UNION SELECT n + 1 FROM t WHERE n < 5) SELECT n FROM t"
    )
    statement = parse_one(sql)
    assert isinstance(statement, Query)
    stored = view_sql("view", '"v"', statement.expression)
    again = parse_one(stored)
    relation, _ = _planned(sql)
    assert again.query.expression.sql() == statement.expression.sql()  # type: ignore[attr-defined]
    replanned = plan_select(again.query.expression, _resolve).relation  # type: ignore[attr-defined]
    assert replanned == relation
    assert isinstance(relation, mir.LetRec)
    assert relation.limit == 7
