"""Planning scalar expressions: registry names, PostgreSQL typing, constant folding, now()."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from decimal import Decimal

import pytest
import sqlglot

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import TemporalError, plan_query, plan_select
from loupe.coordinator.sql.parser import LoupeDialect
from loupe.interval import Interval
from loupe.plan import mir
from loupe.plan.functions import lookup
from loupe.plan.scalar import Call, Case, Cast, Column, Literal, Scalar

CATALOG: dict[str, tuple[str, Sequence[tuple[str, str]]]] = {
    "t": (
        "materialize.public.t",
        [("a", "int4"), ("b", "text"), ("d", "date"), ("ts", "timestamp"), ("y", "int8")],
    ),
}
A, B, D, TS, Y = (Column(i) for i in range(5))
NOON_2023_11_14 = 1_699_963_200_000  # ms since the epoch


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
    return CATALOG.get(name)


def select(sql: str) -> mir.Relation:
    return plan_query(
        sqlglot.parse_one(f"SELECT {sql} FROM t", dialect="postgres"), resolve, optimized=False
    )


def expression(sql: str) -> tuple[Scalar, str]:
    """The scalar one SELECT-list expression plans to, and its type."""
    relation = select(sql)
    assert isinstance(relation, mir.Project)
    assert isinstance(relation.input, mir.Map)
    return relation.input.scalars[0], relation.columns[0][1]


def predicate(sql: str) -> Scalar:
    relation = plan_query(
        sqlglot.parse_one(f"SELECT * FROM t WHERE {sql}", dialect="postgres"), resolve
    )
    assert isinstance(relation, mir.Filter)
    (only,) = relation.predicates
    return only


def error(sql: str) -> LoupeError:
    with pytest.raises(LoupeError) as raised:
        select(sql)
    return raised.value


# Operators and conditionals


def test_in_lists_are_disjunctions_of_equalities() -> None:
    assert predicate("a IN (1, 2)") == Call(
        "or", (Call("eq", (A, Literal(1, "int4"))), Call("eq", (A, Literal(2, "int4"))))
    )
    assert predicate("a IN (7)") == Call("eq", (A, Literal(7, "int4")))
    assert predicate("a NOT IN (7)") == Call("not", (Call("eq", (A, Literal(7, "int4"))),))


def test_between_not_like_and_is_true() -> None:
    assert predicate("a BETWEEN 1 AND y") == Call("between", (A, Literal(1, "int4"), Y))
    assert predicate("b NOT LIKE 'x%'") == Call("not", (Call("like", (B, Literal("x%", "text"))),))
    assert predicate("a > 1 IS TRUE") == Call(
        "coalesce", (Call("gt", (A, Literal(1, "int4"))), Literal(False, "bool"))
    )


def test_like_escape_passes_the_escape_character() -> None:
    assert predicate("b NOT LIKE 'a!_%' ESCAPE '!'") == Call(
        "not", (Call("like", (B, Literal("a!_%", "text"), Literal("!", "text"))),)
    )


def test_is_not_distinct_from_is_never_null() -> None:
    equal = Call("coalesce", (Call("eq", (A, Y)), Literal(False, "bool")))
    both_null = Call("and", (Call("is_null", (A,)), Call("is_null", (Y,))))
    assert predicate("a IS NOT DISTINCT FROM y") == Call("or", (equal, both_null))


def test_case_forms_and_a_typed_null_default() -> None:
    scalar, type_ = expression("CASE a WHEN 1 THEN 'one' END")
    assert scalar == Case(
        ((Call("eq", (A, Literal(1, "int4"))), Literal("one", "text")),), Literal(None, "text")
    )
    assert type_ == "text"


def test_conditional_functions_take_the_widest_type() -> None:
    assert expression("coalesce(a, y)") == (Call("coalesce", (A, Y)), "int8")
    assert expression("greatest(a, 2, y)")[1] == "int8"
    assert expression("least(a, 2)") == (Call("least", (A, Literal(2, "int4"))), "int4")
    assert expression("nullif(a, 0)") == (Call("nullif", (A, Literal(0, "int4"))), "int4")


# Strings


@pytest.mark.parametrize(
    ("sql", "call"),
    [
        ("substring(b from 2 for 3)", Call("substr", (B, Literal(2, "int4"), Literal(3, "int4")))),
        ("substr(b, 2)", Call("substr", (B, Literal(2, "int4")))),
        ("trim(b)", Call("trim", (B,))),
        ("trim(leading 'x' from b)", Call("ltrim", (B, Literal("x", "text")))),
        ("rtrim(b)", Call("rtrim", (B,))),
        ("position('a' in b)", Call("strpos", (B, Literal("a", "text")))),
        ("replace(b, 'a', 'b')", Call("replace", (B, Literal("a", "text"), Literal("b", "text")))),
        ("lpad(b, 5, '*')", Call("lpad", (B, Literal(5, "int4"), Literal("*", "text")))),
        ("rpad(b, 5)", Call("rpad", (B, Literal(5, "int4")))),
        (
            "split_part(b, ',', 2)",
            Call("split_part", (B, Literal(",", "text"), Literal(2, "int4"))),
        ),
        ("left(b, 2)", Call("left", (B, Literal(2, "int4")))),
        ("right(b, 2)", Call("right", (B, Literal(2, "int4")))),
        ("upper(b)", Call("upper", (B,))),
        ("char_length(b)", Call("length", (B,))),
        ("b || 'x'", Call("concat", (B, Literal("x", "text")))),
        ("concat(b, a)", Call("concat_variadic", (B, A))),
    ],
)
def test_string_functions_use_the_registry_names(sql: str, call: Call) -> None:
    scalar, type_ = expression(sql)
    assert scalar == call
    function = lookup(call.func)
    assert function is not None
    assert type_ == function.result(["text"] * len(call.args))


def test_unknown_functions_and_wrong_argument_counts_are_42883() -> None:
    assert error("frobnicate(a)").code == "42883"
    raised = error("octet_length(b, b)")
    assert raised.code == "42883"
    assert "2 arguments" in raised.message


# Literals and casts


def test_numeric_literals() -> None:
    assert expression("1.5 + a")[0] == Call("add", (Literal(Decimal("1.5"), "numeric"), A))
    assert expression("3000000000 + a")[0] == Call("add", (Literal(3_000_000_000, "int8"), A))
    assert expression("-2 * a")[0] == Call("mul", (Literal(-2, "int4"), A))


def test_casts_of_constants_fold_and_of_columns_stay() -> None:
    assert expression("a::text") == (Cast(A, "text"), "text")
    # numeric(p, s) rounds to s decimals, as PostgreSQL assigns the typmod.
    assert expression("CAST(a AS numeric(10, 2))") == (
        Call("round", (Cast(A, "numeric"), Literal(2, "int4"))),
        "numeric",
    )
    assert expression("a::float8 + 1")[1] == "float8"
    assert expression("'12'::int8 + a")[0] == Call("add", (Literal(12, "int8"), A))
    assert expression("'t'::boolean AND a > 1")[0].args[0] == Literal(True, "bool")  # type: ignore[union-attr]
    assert predicate("a::int4 > 1") == Call("gt", (A, Literal(1, "int4")))


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("'x'::int4 + a", "22P02"),
        ("DATE '2021-02-30' > d", "22008"),
        ("'99999'::int2 + a", "22003"),
        ("a::uuid", "42846"),
        ("a::bytea", SqlState.FEATURE_NOT_SUPPORTED),
    ],
)
def test_bad_constants_fail_while_planning(sql: str, code: str) -> None:
    assert error(sql).code == code


def test_quoted_literals_take_the_type_they_are_compared_with() -> None:
    assert predicate("d >= '1994-01-01'") == Call(
        "gte", (D, Literal(datetime.date(1994, 1, 1), "date"))
    )
    assert predicate("a = '3'") == Call("eq", (A, Literal(3, "int4")))
    assert predicate("b = '3'") == Call("eq", (B, Literal("3", "text")))


# Dates and intervals


def test_date_minus_interval_folds_and_compares_as_a_date() -> None:
    assert predicate("d <= DATE '1998-12-01' - INTERVAL '90' DAY") == Call(
        "lte", (D, Literal(datetime.date(1998, 9, 2), "date"))
    )
    assert predicate("d < DATE '1995-01-31' + INTERVAL '1' MONTH") == Call(
        "lt", (D, Literal(datetime.date(1995, 2, 28), "date"))
    )


def test_a_date_compared_with_a_timestamp_not_at_midnight_is_cast() -> None:
    assert predicate("d < TIMESTAMP '2020-01-01 12:00:00'") == Call(
        "lt", (Cast(D, "timestamp"), Literal(datetime.datetime(2020, 1, 1, 12), "timestamp"))
    )


def test_date_arithmetic_types() -> None:
    assert expression("d + 7") == (Call("add", (D, Literal(7, "int4"))), "date")
    assert expression("d - d")[1] == "int4"
    assert expression("ts + INTERVAL '2 hours'") == (
        Call("add", (TS, Literal(Interval(micros=7_200_000_000), "interval"))),
        "timestamp",
    )
    assert expression("ts - ts")[1] == "interval"
    assert expression("DATE '2020-01-01' + 1") == (
        Literal(datetime.date(2020, 1, 2), "date"),
        "date",
    )


def test_an_interval_with_months_is_one_constant_of_three_fields() -> None:
    assert expression("d + INTERVAL '1 month 2 days'") == (
        Call("add", (D, Literal(Interval(1, 2, 0), "interval"))),
        "timestamp",
    )
    assert expression("ts - INTERVAL '1 year'")[0] == Call(
        "sub", (TS, Literal(Interval(12), "interval"))
    )
    assert expression("INTERVAL '1 month' * 2") == (Literal(Interval(2), "interval"), "interval")


def test_extract_and_date_trunc() -> None:
    assert expression("extract(year from d)") == (
        Call("extract", (Literal("year", "text"), D)),
        "numeric",
    )
    assert expression("date_trunc('month', ts)") == (
        Call("date_trunc", (Literal("month", "text"), TS)),
        "timestamp",
    )


# now() and mz_now()


@pytest.mark.parametrize("call", ["now()", "current_timestamp", "mz_now()", "current_date"])
def test_temporal_functions_are_refused_in_maintained_plans(call: str) -> None:
    with pytest.raises(TemporalError) as raised:
        select(f"{call} IS NULL")
    assert raised.value.code == SqlState.FEATURE_NOT_SUPPORTED


def test_temporal_functions_fold_to_the_query_time_in_one_off_selects() -> None:
    query = sqlglot.parse_one("SELECT now(), mz_now(), current_date, a FROM t", dialect="postgres")
    planned = plan_select(query, resolve, query_time=NOON_2023_11_14, optimized=False)
    assert planned.temporal
    assert isinstance(planned.relation, mir.Project)
    assert isinstance(planned.relation.input, mir.Map)
    assert planned.relation.input.scalars == (
        Literal(datetime.datetime(2023, 11, 14, 12, tzinfo=datetime.UTC), "timestamptz"),
        Literal(NOON_2023_11_14, "mz_timestamp"),
        Literal(datetime.date(2023, 11, 14), "date"),
    )
    nested = plan_select(
        sqlglot.parse_one("SELECT a FROM t WHERE d < (SELECT now())", dialect="postgres"),
        resolve,
        query_time=NOON_2023_11_14,
    )
    assert nested.temporal
    plain = plan_select(
        sqlglot.parse_one("SELECT a FROM t", dialect="postgres"), resolve, optimized=False
    )
    assert not plain.temporal


# Aggregates


def test_aggregate_filter_is_a_case_inside_the_aggregate() -> None:
    relation = plan_query(
        sqlglot.parse_one(
            "SELECT count(*) FILTER (WHERE a > 1), sum(y) FILTER (WHERE a > 1) FROM t",
            dialect="postgres",
        ),
        resolve,
        optimized=False,
    )
    reduce = next(node for node in _walk(relation) if isinstance(node, mir.Reduce))
    condition = Call("gt", (A, Literal(1, "int4")))
    assert reduce.aggregates == (
        mir.Aggregate("count", Case(((condition, Literal(True, "bool")),), Literal(None, "bool"))),
        mir.Aggregate("sum", Case(((condition, Y),), Literal(None, "int8"))),
    )


def _walk(relation: mir.Relation) -> list[mir.Relation]:
    nodes = [relation]
    for child in relation.children():
        nodes.extend(_walk(child))
    return nodes


def test_times_compare_at_the_widest_type_unless_a_constant_converts_exactly() -> None:
    noon = datetime.datetime(2023, 11, 14, 12, tzinfo=datetime.UTC)
    query = sqlglot.parse_one("SELECT a FROM t WHERE d < now()", dialect="postgres")
    planned = plan_select(query, resolve, query_time=NOON_2023_11_14, optimized=False)
    assert isinstance(planned.relation, mir.Project)
    assert planned.relation.input == mir.Filter(
        mir.Get("materialize.public.t", tuple(CATALOG["t"][1])),
        (Call("lt", (Cast(D, "timestamptz"), Literal(noon, "timestamptz"))),),
    )
    assert predicate("ts >= TIMESTAMPTZ '2020-01-01 01:00:00+01'") == Call(
        "gte", (TS, Literal(datetime.datetime(2020, 1, 1), "timestamp"))
    )
    assert predicate("d = ts") == Call("eq", (Cast(D, "timestamp"), TS))


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("to_char(a, 'YYYY')", "42883"),
        ("to_char(ts, b)", SqlState.FEATURE_NOT_SUPPORTED),
        ("ts AT TIME ZONE 'Atlantis/Capital'", "22023"),
        ("timezone(b, ts)", SqlState.FEATURE_NOT_SUPPORTED),
        ("regexp_split_to_table(b, 'x', 'g')", "22023"),
        ("chr(b)", "42883"),
        ("a || y", "42883"),
        ("string_agg(a, ',')", "42883"),
    ],
)
def test_calls_the_engine_refuses_fail_when_planned(sql: str, code: str) -> None:
    """Argument types, constant formats and zones are checked while planning, not at render."""
    with pytest.raises(LoupeError) as raised:
        plan_query(sqlglot.parse_one(f"SELECT {sql} FROM t", read=LoupeDialect), resolve)
    assert raised.value.code == code


def test_a_table_function_reading_another_from_item_is_lateral() -> None:
    """PostgreSQL reads it as LATERAL: a FlatMap over the items before it."""
    relation = plan_query(
        sqlglot.parse_one(
            "SELECT x FROM t, regexp_split_to_table(t.b, ',') AS x", read=LoupeDialect
        ),
        resolve,
    )
    flat = [node for node in _nodes(relation) if isinstance(node, mir.FlatMap)]
    assert [f.func for f in flat] == ["regexp_split_to_table"]
    assert any(isinstance(node, mir.Get) for node in _nodes(flat[0].input))


def _nodes(relation: mir.Relation) -> list[mir.Relation]:
    return [relation, *(n for child in relation.children() for n in _nodes(child))]


def test_jsonb_is_not_ordered_by_its_text() -> None:
    """jsonb sorts by its own rules in PostgreSQL (2 before 10): refused, not sorted as text."""
    for sql in (
        "SELECT j FROM (VALUES ('2'::jsonb), ('10'::jsonb)) AS v(j) ORDER BY j",
        "SELECT j FROM (VALUES ('2'::jsonb)) AS v(j) ORDER BY j LIMIT 1",
        "SELECT '2'::jsonb < '10'::jsonb",
    ):
        with pytest.raises(LoupeError) as raised:
            plan_select(sqlglot.parse_one(sql, read=LoupeDialect), resolve)
        assert raised.value.code == SqlState.FEATURE_NOT_SUPPORTED
    ordered = "SELECT j FROM (VALUES ('2'::jsonb)) AS v(j) ORDER BY j::text"
    assert plan_select(sqlglot.parse_one(ordered, read=LoupeDialect), resolve)
