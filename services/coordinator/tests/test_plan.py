"""Planning: SQL to MIR, MIR to LIR with node ids, and EXPLAIN snapshots."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sqlglot

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import explain, lir, lower_to_lir, mir, plan_query
from loupe.coordinator.plan.lir import JoinKind, ReduceKind, walk
from loupe.coordinator.plan.scalar import Call, Column, Literal

CATALOG: dict[str, tuple[str, Sequence[tuple[str, str]]]] = {
    "t": ("materialize.public.t", [("a", "int4"), ("b", "text")]),
    "u": ("materialize.public.u", [("x", "int4"), ("y", "int8")]),
    "v": ("materialize.public.v", [("k", "int4")]),
}


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]]:
    if name not in CATALOG:
        raise LoupeError(SqlState.UNDEFINED_TABLE, f'unknown catalog item "{name}"')
    return CATALOG[name]


def plan(sql: str) -> mir.Relation:
    return plan_query(sqlglot.parse_one(sql, dialect="postgres"), resolve)


def physical(sql: str) -> lir.Node:
    return lower_to_lir(plan(sql))


def error(sql: str) -> LoupeError:
    with pytest.raises(LoupeError) as raised:
        plan(sql)
    return raised.value


# SQL to MIR


def test_select_list_maps_and_projects_with_names_and_types() -> None:
    relation = plan("SELECT a + 1 AS c, b, upper(b) FROM t")
    assert relation.columns == (("c", "int4"), ("b", "text"), ("upper", "text"))
    assert isinstance(relation, mir.Project)
    assert relation.outputs == (2, 1, 3)
    assert isinstance(relation.input, mir.Map)
    assert relation.input.scalars[0] == Call("add", (Column(0), Literal(1, "int4")))


def test_star_over_a_table_is_the_get_itself() -> None:
    assert plan("SELECT * FROM t") == mir.Get(
        "materialize.public.t", (("a", "int4"), ("b", "text"))
    )


def test_inner_and_comma_joins_turn_column_equalities_into_equivalences() -> None:
    relation = plan("SELECT a FROM t JOIN u ON t.a = u.x, v WHERE x = k AND b <> 'z'")
    assert isinstance(relation, mir.Project)
    filtered = relation.input
    assert isinstance(filtered, mir.Filter)
    assert filtered.predicates == (Call("neq", (Column(1), Literal("z", "text"))),)
    join = filtered.input
    assert isinstance(join, mir.Join)
    assert [i.name for i in join.inputs if isinstance(i, mir.Get)] == [
        "materialize.public.t",
        "materialize.public.u",
        "materialize.public.v",
    ]
    assert join.equivalences == ((Column(0), Column(2)), (Column(2), Column(4)))


def test_group_by_having_builds_a_reduce_with_deduplicated_aggregates() -> None:
    relation = plan(
        "SELECT b, count(*), sum(a), avg(a), count(DISTINCT a) FROM t "
        "GROUP BY b HAVING count(*) > 1 AND min(a) < 5"
    )
    assert [t for _, t in relation.columns] == ["text", "int8", "int8", "numeric", "int8"]
    assert isinstance(relation, mir.Project)
    having = relation.input
    assert isinstance(having, mir.Filter)
    reduce = having.input
    assert isinstance(reduce, mir.Reduce)
    assert reduce.group_key == (Column(1),)
    assert reduce.aggregates == (
        mir.Aggregate("count", None),
        mir.Aggregate("sum", Column(0)),
        mir.Aggregate("avg", Column(0)),
        mir.Aggregate("count", Column(0), distinct=True),
        mir.Aggregate("min", Column(0)),
    )


def test_group_by_expression_and_position() -> None:
    by_expression = plan("SELECT a + 1, count(*) FROM t GROUP BY a + 1")
    by_position = plan("SELECT a + 1, count(*) FROM t GROUP BY 1")
    assert by_expression == by_position


def test_order_by_with_limit_and_offset_is_a_top_k() -> None:
    relation = plan("SELECT a, b FROM t ORDER BY b DESC, 1 LIMIT 10 OFFSET 2")
    assert isinstance(relation, mir.TopK)
    assert relation.order == (
        mir.OrderKey(1, desc=True, nulls_last=False),
        mir.OrderKey(0),
    )
    assert (relation.limit, relation.offset) == (10, 2)


def test_order_by_without_limit_is_left_to_the_caller() -> None:
    assert plan("SELECT * FROM t ORDER BY a") == plan("SELECT * FROM t")


def test_set_operations() -> None:
    t, u = plan("SELECT a FROM t"), plan("SELECT x FROM u")
    assert plan("SELECT a FROM t UNION ALL SELECT x FROM u") == mir.Union((t, u))
    assert plan("SELECT a FROM t UNION SELECT x FROM u") == mir.Distinct(mir.Union((t, u)))
    assert plan("SELECT a FROM t EXCEPT ALL SELECT x FROM u") == mir.Threshold(
        mir.Union((t, mir.Negate(u)))
    )
    distinct_t, distinct_u = mir.Distinct(t), mir.Distinct(u)
    except_ = mir.Threshold(mir.Union((distinct_t, mir.Negate(distinct_u))))
    assert plan("SELECT a FROM t EXCEPT SELECT x FROM u") == except_
    assert plan("SELECT a FROM t INTERSECT SELECT x FROM u") == mir.Threshold(
        mir.Union((distinct_t, mir.Negate(except_)))
    )


def test_subquery_in_from_is_scoped_by_its_alias() -> None:
    relation = plan("SELECT s.c FROM (SELECT a * 2 AS c FROM t) AS s WHERE s.c > 3")
    assert relation.columns == (("c", "int4"),)


# Errors


@pytest.mark.parametrize(
    ("sql", "code", "words"),
    [
        ("SELECT * FROM nope", SqlState.UNDEFINED_TABLE, "nope"),
        ("SELECT zzz FROM t", SqlState.UNDEFINED_COLUMN, "zzz"),
        ("SELECT w.a FROM t", SqlState.UNDEFINED_TABLE, '"w"'),
        ("SELECT a FROM t, t AS t2", "42702", "ambiguous"),
        ("SELECT a, count(*) FROM t", "42803", "GROUP BY"),
        ("SELECT * FROM t LEFT JOIN u ON a = x", SqlState.FEATURE_NOT_SUPPORTED, "LEFT JOIN"),
        ("SELECT a FROM t WHERE a IN (SELECT x FROM u)", SqlState.FEATURE_NOT_SUPPORTED, "IN"),
        ("SELECT string_agg(b, ',') FROM t", SqlState.FEATURE_NOT_SUPPORTED, "aggregate"),
        ("SELECT a FROM t UNION SELECT x, y FROM u", SqlState.SYNTAX_ERROR, "same number"),
        ("SELECT a FROM t ORDER BY b LIMIT 1", SqlState.FEATURE_NOT_SUPPORTED, "ORDER BY"),
        ("WITH w AS (SELECT 1) SELECT * FROM w", SqlState.FEATURE_NOT_SUPPORTED, "WITH"),
    ],
)
def test_errors_carry_sqlstates(sql: str, code: str, words: str) -> None:
    raised = error(sql)
    assert raised.code == code
    assert words in raised.message


# MIR to LIR


def test_node_ids_are_unique_and_increase_from_inputs_to_outputs() -> None:
    root = physical(
        "SELECT a, count(*) FROM t JOIN u ON a = x GROUP BY a "
        "UNION ALL SELECT k, 1 FROM v ORDER BY 1 LIMIT 3"
    )
    nodes = walk(root)
    ids = [node.id for node in nodes]
    assert sorted(ids) == list(range(len(nodes)))
    for node in nodes:
        assert all(child.id < node.id for child in node.inputs())
    assert root.id == len(nodes) - 1


def test_each_lowering_is_its_own_dataflow_numbered_from_zero() -> None:
    relation = plan("SELECT * FROM t LIMIT 1")
    assert lower_to_lir(relation) == lower_to_lir(relation)
    assert lower_to_lir(relation).id == 1


def test_map_filter_project_chains_fuse_into_one_mfp() -> None:
    root = physical("SELECT s.c FROM (SELECT a + 1 AS c FROM t) AS s WHERE s.c > 3")
    assert isinstance(root, lir.Mfp)
    assert root.mfp == lir.MapFilterProject(
        input_arity=2,
        expressions=(Call("add", (Column(0), Literal(1, "int4"))),),
        predicates=(Call("gt", (Column(2), Literal(3, "int4"))),),
        projection=(2,),
    )
    assert isinstance(root.input, lir.Get)


def test_join_and_reduce_kinds() -> None:
    two_way = physical("SELECT * FROM t JOIN u ON a = x")
    three_way = physical("SELECT * FROM t, u, v WHERE a = x AND x = k")
    assert isinstance(two_way, lir.Join)
    assert two_way.kind is JoinKind.LINEAR
    assert isinstance(three_way, lir.Join)
    assert three_way.kind is JoinKind.DELTA
    assert all(isinstance(i, lir.ArrangeBy) for i in three_way.inputs())

    def reduce_kind(sql: str) -> ReduceKind:
        return next(n.kind for n in walk(physical(sql)) if isinstance(n, lir.Reduce))

    assert (
        reduce_kind("SELECT b, count(*), sum(a), avg(a) FROM t GROUP BY b")
        is ReduceKind.ACCUMULABLE
    )
    assert reduce_kind("SELECT b, min(a), max(a) FROM t GROUP BY b") is ReduceKind.HIERARCHICAL
    assert reduce_kind("SELECT b, min(a), count(*) FROM t GROUP BY b") is ReduceKind.BASIC
    assert reduce_kind("SELECT count(DISTINCT a) FROM t") is ReduceKind.BASIC
    assert reduce_kind("SELECT DISTINCT b FROM t") is ReduceKind.DISTINCT


# EXPLAIN snapshots


def test_explain_physical_with_node_ids_matches_the_seed_example() -> None:
    text = explain(
        physical("SELECT * FROM t LIMIT 10"), node_ids=True, name="materialize.public.mv"
    )
    assert text == (
        "materialize.public.mv:\n"
        "  TopK::Basic limit=10 // { node_id: 1 }\n"
        "    Get::PassArrangements materialize.public.t // { node_id: 0 }\n"
        "      raw=true\n"
    )


def test_explain_physical_without_node_ids() -> None:
    text = explain(physical("SELECT * FROM t LIMIT 10"), name="materialize.public.mv")
    assert "node_id" not in text
    assert text.splitlines()[1] == "  TopK::Basic limit=10"


SQL_JOIN_GROUP = (
    "SELECT t.a, count(*) AS n, sum(u.y) FROM t JOIN u ON t.a = u.x "
    "WHERE t.b LIKE 'x%' GROUP BY t.a HAVING count(*) > 1"
)


def test_explain_optimized_join_group_by() -> None:
    assert explain(plan(SQL_JOIN_GROUP), name="q") == (
        "q:\n"
        "  Project (#0, #1, #2)\n"
        "    Filter (#1 > 1)\n"
        "      Reduce group_by=(#0) aggregates=[count(*), sum(#3)]\n"
        "        Filter (#1 LIKE 'x%')\n"
        "          Join on=((#0, #2))\n"
        "            Get materialize.public.t\n"
        "            Get materialize.public.u\n"
    )


def test_explain_physical_join_group_by() -> None:
    assert explain(lower_to_lir(plan(SQL_JOIN_GROUP)), node_ids=True, name="q") == (
        "q:\n"
        "  Mfp // { node_id: 7 }\n"
        "    filter=((#1 > 1))\n"
        "    project=(#0, #1, #2)\n"
        "    Reduce::Accumulable // { node_id: 6 }\n"
        "      group_by=(#0)\n"
        "      aggregates=[count(*), sum(#3)]\n"
        "      Mfp // { node_id: 5 }\n"
        "        filter=((#1 LIKE 'x%'))\n"
        "        project=(#0, #1, #2, #3)\n"
        "        Join::Linear // { node_id: 4 }\n"
        "          equivalences=((#0, #2))\n"
        "          ArrangeBy // { node_id: 1 }\n"
        "            keys=[(#0)]\n"
        "            Get::PassArrangements materialize.public.t // { node_id: 0 }\n"
        "              raw=true\n"
        "          ArrangeBy // { node_id: 3 }\n"
        "            keys=[(#0)]\n"
        "            Get::PassArrangements materialize.public.u // { node_id: 2 }\n"
        "              raw=true\n"
    )


def test_explain_except_and_top_k() -> None:
    sql = (
        "SELECT b, max(a) FROM t WHERE a IS NOT NULL GROUP BY b "
        "EXCEPT ALL SELECT 'q', x FROM u ORDER BY 2 DESC LIMIT 5 OFFSET 1"
    )
    assert explain(plan(sql), name="q") == (
        "q:\n"
        "  TopK order_by=[#1 desc nulls_first] limit=5 offset=1\n"
        "    Threshold\n"
        "      Union\n"
        "        Project (#0, #1)\n"
        "          Reduce group_by=(#1) aggregates=[max(#0)]\n"
        "            Filter (#0) IS NOT NULL\n"
        "              Get materialize.public.t\n"
        "        Negate\n"
        "          Project (#2, #0)\n"
        "            Map ('q')\n"
        "              Get materialize.public.u\n"
    )
    assert explain(lower_to_lir(plan(sql)), node_ids=True, name="q") == (
        "q:\n"
        "  TopK::Basic order_by=[#1 desc nulls_first] limit=5 offset=1 // { node_id: 8 }\n"
        "    Threshold::Basic // { node_id: 7 }\n"
        "      Union // { node_id: 6 }\n"
        "        Reduce::Hierarchical // { node_id: 2 }\n"
        "          group_by=(#1)\n"
        "          aggregates=[max(#0)]\n"
        "          Mfp // { node_id: 1 }\n"
        "            filter=((#0) IS NOT NULL)\n"
        "            project=(#0, #1)\n"
        "            Get::PassArrangements materialize.public.t // { node_id: 0 }\n"
        "              raw=true\n"
        "        Negate // { node_id: 5 }\n"
        "          Mfp // { node_id: 4 }\n"
        "            map=('q')\n"
        "            project=(#2, #0)\n"
        "            Get::PassArrangements materialize.public.u // { node_id: 3 }\n"
        "              raw=true\n"
    )
