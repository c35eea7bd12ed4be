"""Planning: SQL to MIR, MIR to LIR with node ids, and EXPLAIN snapshots."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sqlglot

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import PlannedQuery, plan_query, plan_select
from loupe.plan import lir, mir
from loupe.plan.explain import explain
from loupe.plan.lir import JoinKind, ReduceKind, lower_to_lir, walk
from loupe.plan.scalar import Call, Cast, Column, Literal

CATALOG: dict[str, tuple[str, Sequence[tuple[str, str]]]] = {
    "t": ("materialize.public.t", [("a", "int4"), ("b", "text")]),
    "u": ("materialize.public.u", [("x", "int4"), ("y", "int8")]),
    "v": ("materialize.public.v", [("k", "int4")]),
    "w": ("materialize.public.w", [(f"c{i}", "int4") for i in range(8)]),
}


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]]:
    if name not in CATALOG:
        raise LoupeError(SqlState.UNDEFINED_TABLE, f'unknown catalog item "{name}"')
    return CATALOG[name]


def plan(sql: str) -> mir.Relation:
    return plan_query(sqlglot.parse_one(sql, dialect="postgres"), resolve, optimized=False)


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
    relation = plan("SELECT a FROM t JOIN u ON t.a = u.x, v WHERE x = k AND b <> 'z' AND a < y")
    assert isinstance(relation, mir.Project)
    filtered = relation.input
    assert isinstance(filtered, mir.Filter)
    assert filtered.predicates == (Call("lt", (Column(0), Column(3))),)
    join = filtered.input
    assert isinstance(join, mir.Join)
    assert join.equivalences == ((Column(0), Column(2)), (Column(2), Column(4)))
    first, *others = join.inputs
    assert first == mir.Filter(
        mir.Get("materialize.public.t", (("a", "int4"), ("b", "text"))),
        (Call("neq", (Column(1), Literal("z", "text"))),),
    )
    assert [i.name for i in others if isinstance(i, mir.Get)] == [
        "materialize.public.u",
        "materialize.public.v",
    ]


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
        ("SELECT corr(a, a) FROM t", SqlState.FEATURE_NOT_SUPPORTED, "aggregate"),
        ("SELECT a FROM t UNION SELECT x, y FROM u", SqlState.SYNTAX_ERROR, "same number"),
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


def _distinct_mir(relation: mir.Relation) -> int:
    """The MIR nodes of ``relation``, each object once however many parents read it."""
    seen: dict[int, mir.Relation] = {}
    stack = [relation]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.children())
    return len(seen)


@pytest.mark.parametrize(
    "on",
    ["t.a = u{i}.x", "t.a = u{i}.x AND u{i}.y > t.a", "t.a < u{i}.x"],
    ids=["equi", "mixed", "non_equi"],
)
def test_a_chain_of_left_joins_plans_linearly(on: str) -> None:
    """An outer join reads its left input three times (inner join, semijoin, minus): pushdown,
    pruning and lowering keep that input one shared node, so eight chained LEFT JOINs
    (with a WHERE pushed into them) are at most a few dozen nodes per join, not 3^8 times
    some (before: 3283 MIR nodes for six equi-joins)."""
    joins = 8
    chain = " ".join(f"LEFT JOIN u AS u{i} ON {on.format(i=i)}" for i in range(joins))
    sql = f"SELECT t.b, u0.y, u7.x FROM t {chain} WHERE t.a > 1"
    relation = plan_query(sqlglot.parse_one(sql, dialect="postgres"), resolve)
    assert _distinct_mir(relation) < 40 * joins
    root = lower_to_lir(relation)
    nodes = walk(root)
    assert len(nodes) < 40 * joins
    assert sorted(node.id for node in nodes) == list(range(len(nodes)))
    for node in nodes:
        assert all(child.id < node.id for child in node.inputs())


def test_left_joins_on_different_columns_share_their_input_narrowed_once() -> None:
    """Each join reads its own key column of w: the shared left input is narrowed to all
    the columns its readers use, once (narrowed per reader, the variants doubled per join)."""
    joins = 8
    chain = " ".join(f"LEFT JOIN u AS u{i} ON w.c{i} = u{i}.x" for i in range(joins))
    relation = plan_query(
        sqlglot.parse_one(f"SELECT u0.y FROM w {chain}", dialect="postgres"), resolve
    )
    assert _distinct_mir(relation) < 40 * joins
    assert len(walk(lower_to_lir(relation))) < 40 * joins


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


# Finishing (one-off SELECTs)


def planned(sql: str) -> PlannedQuery:
    return plan_select(sqlglot.parse_one(sql, dialect="postgres"), resolve, optimized=False)


def test_the_outer_order_by_and_limit_are_a_finishing_not_a_top_k() -> None:
    result = planned("SELECT a, b FROM t ORDER BY b DESC, 1 LIMIT 10 OFFSET 2")
    assert result.relation == plan("SELECT a, b FROM t")
    assert result.finishing == mir.Finishing(
        (mir.OrderKey(1, desc=True, nulls_last=False), mir.OrderKey(0)), 10, 2, (0, 1)
    )


def test_order_by_an_expression_outside_the_select_list_is_a_hidden_column() -> None:
    result = planned("SELECT b FROM t ORDER BY a + 1 DESC")
    assert result.relation.columns[1][1] == "int4"
    assert result.finishing.order == (mir.OrderKey(1, desc=True, nulls_last=False),)
    assert result.finishing.project == (0,)
    assert result.columns == (("b", "text"),)
    grouped = planned("SELECT b FROM t GROUP BY b ORDER BY count(*)")
    assert grouped.relation.arity == 2
    assert grouped.finishing.project == (0,)


def test_limits_inside_subqueries_and_views_stay_top_ks() -> None:
    inner = planned("SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 3) s")
    assert isinstance(inner.relation, mir.TopK)
    assert inner.finishing == mir.Finishing(project=(0,))
    view = plan("SELECT b FROM t ORDER BY a LIMIT 3")
    assert isinstance(view, mir.Project)
    assert isinstance(view.input, mir.TopK)
    assert view.input.order == (mir.OrderKey(1),)


def test_set_operations_order_by_output_columns() -> None:
    result = planned("SELECT a FROM t UNION SELECT k FROM v ORDER BY a DESC LIMIT 1")
    assert isinstance(result.relation, mir.Distinct)
    assert result.finishing.order == (mir.OrderKey(0, desc=True, nulls_last=False),)


# CTEs, subqueries, outer joins


def test_ctes_are_inlined_with_their_column_aliases_and_shadow_catalog_names() -> None:
    relation = plan("WITH t(z) AS (SELECT x FROM u), w AS (SELECT z FROM t) SELECT * FROM w, t")
    assert relation.columns == (("z", "int4"), ("z", "int4"))
    assert isinstance(relation, mir.Join)
    gets = [n for n in walk_mir(relation) if isinstance(n, mir.Get)]
    assert [g.name for g in gets] == ["materialize.public.u", "materialize.public.u"]


def test_aggregates_without_group_by_get_a_default_row() -> None:
    """The Reduce's row ranked first, the defaults second: a TopK keeps one, reading it once."""
    relation = plan("SELECT count(*) AS n, max(a) FROM t")
    top = next(n for n in walk_mir(relation) if isinstance(n, mir.TopK))
    assert (top.limit, top.order) == (1, (mir.OrderKey(2),))
    ranked, defaults = top.input.children()
    assert isinstance(ranked, mir.Map)
    assert isinstance(ranked.input, mir.Reduce)
    assert defaults == mir.Constant(
        ((0, None, 1),), (("count0", "int8"), ("max1", "int4"), ("rank", "int4"))
    )
    assert sum(isinstance(n, mir.Reduce) for n in walk_mir(relation)) == 1
    grouped = plan("SELECT b, count(*) FROM t GROUP BY b")
    assert not any(isinstance(n, mir.TopK) for n in walk_mir(grouped))


def test_join_equivalences_cast_to_one_type() -> None:
    relation = plan("SELECT * FROM t JOIN u ON a = y")
    assert isinstance(relation, mir.Join)
    assert relation.equivalences == ((Cast(Column(0), "int8"), Column(3)),)
    union = plan("SELECT a FROM t UNION ALL SELECT y FROM u")
    assert union.types == ("int8",)
    assert isinstance(union, mir.Union)
    assert all(i.types == ("int8",) for i in union.inputs)


def test_outer_joins_lower_to_inner_joins_only() -> None:
    root = physical("SELECT * FROM t FULL JOIN u ON a = x AND b < 'q'")
    kinds = {type(n) for n in walk(root)}
    assert lir.Join in kinds
    assert {lir.Negate, lir.Union} <= kinds
    assert plan("SELECT * FROM t LEFT JOIN u ON a = x").columns == (
        ("a", "int4"),
        ("b", "text"),
        ("x", "int4"),
        ("y", "int8"),
    )


def test_where_predicates_on_the_preserved_side_apply_before_a_left_join() -> None:
    relation = plan("SELECT * FROM t, v LEFT JOIN u ON k = x WHERE a = k AND y IS NULL")
    # The comma binds looser: t is joined with v LEFT JOIN u, whose output y IS NULL filters.
    (filtered,) = [n for n in walk_mir(relation) if isinstance(n, mir.Filter)]
    assert isinstance(filtered.input, mir.Union), "y IS NULL applies after the left join"
    assert [p.func for p in filtered.predicates if isinstance(p, Call)] == ["is_null"]
    joins = [n for n in walk_mir(relation) if isinstance(n, mir.Join)]
    assert all(j.equivalences for j in joins), "t and v became a cross join"


@pytest.mark.parametrize(
    ("sql", "code", "words"),
    [
        (
            "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE x > a GROUP BY y)",
            "0A000",
            "correlated",
        ),
        ("SELECT a FROM t WHERE a IN (SELECT x, y FROM u)", "42601", "too many columns"),
        ("SELECT (SELECT x FROM u) FROM t", "0A000", "more than one row"),
        ("SELECT * FROM t FULL JOIN (SELECT x AS a FROM u) s USING (a)", "0A000", "USING"),
        ("SELECT * FROM t JOIN u USING (a)", "42703", '"a"'),
        ("SELECT DISTINCT b FROM t ORDER BY a LIMIT 1", "42P10", "ORDER BY"),
        ("SELECT b FROM t UNION SELECT k FROM v", "42804", "text and int4"),
        (
            "WITH RECURSIVE r(n) AS (SELECT 1 INTERSECT SELECT n FROM r) SELECT * FROM r",
            "42P19",
            "non-recursive-term UNION [ALL] recursive-term",
        ),
        ("SELECT * FROM (SELECT 1) AS s(p, q)", "42601", "columns"),
    ],
)
def test_refusals_carry_sqlstates(sql: str, code: str, words: str) -> None:
    raised = error(sql)
    assert raised.code == code
    assert words in raised.message


def walk_mir(relation: mir.Relation) -> list[mir.Relation]:
    nodes = [relation]
    for child in relation.children():
        nodes.extend(walk_mir(child))
    return nodes


def test_using_and_natural_joins_merge_their_columns_first_in_star() -> None:
    """As PostgreSQL: ``*`` is the merged columns, then the left's others, then the right's."""
    natural = plan(
        "SELECT * FROM (SELECT y AS b, x FROM u) s NATURAL JOIN (SELECT x, y AS c FROM u) r"
    )
    assert [name for name, _ in natural.columns] == ["x", "b", "c"]
    right = plan("SELECT * FROM t RIGHT JOIN (SELECT y, x AS a FROM u) s USING (a)")
    assert right.columns == (("a", "int4"), ("b", "text"), ("y", "int8"))
    assert isinstance(right, mir.Project)
    assert right.outputs[0] == 3  # the right side's a: the left's is NULL where unmatched


def test_a_condition_shared_by_every_branch_of_an_or_becomes_a_join_equivalence() -> None:
    relation = plan("SELECT * FROM t, u WHERE (a = x AND y > 1) OR (b = 'q' AND t.a = u.x)")
    assert isinstance(relation, mir.Filter)
    assert isinstance(relation.input, mir.Join)
    assert relation.input.equivalences == ((Column(0), Column(2)),)
    (rest,) = relation.predicates
    assert rest == Call(
        "or",
        (
            Call("gt", (Column(3), Literal(1, "int4"))),
            Call("eq", (Column(1), Literal("q", "text"))),
        ),
    )


def test_output_columns_are_named_as_postgresql_names_them() -> None:
    relation = planned(
        "SELECT a, a + 1, b::text, 1::int8, CASE WHEN a > 1 THEN 1 END, trim(b), ltrim(b), "
        "substring(b, 1, 2), (SELECT max(x) FROM u) FROM t"
    ).relation
    assert [name for name, _ in relation.columns] == [
        "a",
        "?column?",
        "b",
        "int8",
        "case",
        "btrim",
        "ltrim",
        "substring",
        "max",
    ]


def test_outer_joins_whose_padded_rows_where_rejects_are_inner_or_one_sided() -> None:
    def unions(sql: str) -> int:
        return sum(isinstance(n, mir.Union) for n in walk_mir(plan(sql)))

    assert unions("SELECT * FROM t LEFT JOIN u ON a = x") == 2
    assert unions("SELECT * FROM t LEFT JOIN u ON a = x WHERE y > 0") == 0
    assert unions("SELECT * FROM t LEFT JOIN u ON a = x WHERE y IS NULL") == 2
    full = unions("SELECT * FROM t FULL JOIN u ON a = x")
    assert unions("SELECT * FROM t FULL JOIN u ON a = x WHERE a > 0") == full - 1


def test_untyped_null_results_are_text() -> None:
    assert planned("SELECT NULL AS n, a FROM t").columns == (("n", "text"), ("a", "int4"))
    assert plan("SELECT NULL UNION SELECT 1").types == ("int4",)


def test_filters_on_a_derived_table_move_into_its_join_and_below_its_group_keys() -> None:
    def optimized(sql: str) -> mir.Relation:
        return plan_query(sqlglot.parse_one(sql, dialect="postgres"), resolve)

    joined = optimized("SELECT * FROM (SELECT * FROM t JOIN u ON a = x) s WHERE s.b = 'q'")
    assert isinstance(joined, mir.Join)
    assert joined.inputs[0] == mir.Filter(
        mir.Get("materialize.public.t", (("a", "int4"), ("b", "text"))),
        (Call("eq", (Column(1), Literal("q", "text"))),),
    )
    grouped = optimized("SELECT * FROM (SELECT b, count(*) AS n FROM t GROUP BY b) s WHERE b = 'x'")
    reduce = next(n for n in walk_mir(grouped) if isinstance(n, mir.Reduce))
    filters = [n for n in walk_mir(grouped) if isinstance(n, mir.Filter)]
    assert filters
    assert all(reduce not in walk_mir(f) for f in filters), "a filter stayed above the Reduce"
    counted = optimized("SELECT * FROM (SELECT b, count(*) AS n FROM t GROUP BY b) s WHERE n > 1")
    reduce = next(n for n in walk_mir(counted) if isinstance(n, mir.Reduce))
    filters = [n for n in walk_mir(counted) if isinstance(n, mir.Filter)]
    assert [reduce in walk_mir(f) for f in filters] == [True]  # an aggregate's test stays above
