"""Scalar expressions in the engine: PostgreSQL's values, NULLs and errors, vectorised."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from decimal import Decimal

import polars as pl
import pytest

from loupe.common.errors import LoupeError
from loupe.dataflow import expr as engine_expr
from loupe.dataflow.expr import apply_mfp, compile_scalar, eval_keys, like_regex
from loupe.dataflow.types import polars_dtype
from loupe.interval import Interval
from loupe.plan.functions import FUNCTIONS, lookup
from loupe.plan.lir import MapFilterProject
from loupe.plan.scalar import Call, Case, Cast, Column, Literal, Scalar


def c(index: int) -> Column:
    return Column(index)


def lit(value: object, pg_type: str) -> Literal:
    return Literal(value, pg_type)


def call(func: str, *args: Scalar) -> Call:
    return Call(func, args)


def batch(types: list[str], *columns: Sequence[object]) -> pl.DataFrame:
    """A batch with data columns of ``types``, at time 0 with diff 1."""
    rows = len(columns[0]) if columns else 1
    data = {
        f"c{i}": pl.Series(_exact(values) if t == "numeric" else values, dtype=polars_dtype(t))
        for i, (t, values) in enumerate(zip(types, columns, strict=True))
    }
    data["time"] = pl.Series([0] * rows, dtype=pl.UInt64)
    data["diff"] = pl.Series([1] * rows, dtype=pl.Int64)
    return pl.DataFrame(data)


def _exact(values: Sequence[object]) -> list[object]:
    """numeric column values written as floats, as the decimals they are written as."""
    return [Decimal(repr(v)) if isinstance(v, float | int) else v for v in values]


def evaluate(
    expr: Scalar, types: list[str], *columns: Sequence[object]
) -> tuple[list[object], list[str | None]]:
    """Per row: the value of ``expr`` and its error code (None when the row did not fail)."""
    frame = (
        batch(types, *columns)
        if columns
        else batch(
            [],
        )
    )
    compiled = compile_scalar(expr, types)
    frame = compiled.with_lets(frame.lazy()).collect()
    values = frame.select(compiled.value.alias("v"))["v"]
    if len(values) != frame.height:
        values = pl.Series([values[0]] * frame.height)
    if compiled.error is None:
        return values.to_list(), [None] * frame.height
    errors = frame.select(compiled.error.alias("e"))["e"]
    if len(errors) != frame.height:
        errors = pl.Series([errors[0]] * frame.height)
    return values.to_list(), [None if e is None else e.split("|")[0] for e in errors]


def value_of(expr: Scalar) -> object:
    """The value of a constant expression (asserting it does not fail)."""
    values, errors = evaluate(expr, ["int4"], [0])
    assert errors == [None], errors
    return values[0]


def error_of(expr: Scalar) -> str | None:
    return evaluate(expr, ["int4"], [0])[1][0]


# Logic


def test_and_or_follow_three_valued_logic() -> None:
    """NULL AND false is false, NULL OR true is true, NULL otherwise."""
    a = [True, True, True, False, False, None, None, False, None]
    b = [True, False, None, False, None, None, True, True, False]
    and_values, _ = evaluate(call("and", c(0), c(1)), ["bool", "bool"], a, b)
    or_values, _ = evaluate(call("or", c(0), c(1)), ["bool", "bool"], a, b)
    assert and_values == [True, False, None, False, False, None, None, False, False]
    assert or_values == [True, True, True, False, None, None, True, True, None]


def test_false_and_error_is_false_but_true_and_error_fails() -> None:
    """A false conjunct decides AND even when the other conjunct fails (Materialize's rule)."""
    division = call("gt", call("div", lit(1, "int4"), c(1)), lit(0, "int4"))
    values, errors = evaluate(call("and", c(0), division), ["bool", "int4"], [False, True], [0, 0])
    assert values[0] is False
    assert errors[0] is None
    assert errors[1] == "22012"
    _, or_errors = evaluate(call("or", c(0), division), ["bool", "int4"], [True, False], [0, 0])
    assert or_errors == [None, "22012"]


def test_not_and_is_null() -> None:
    assert evaluate(call("not", c(0)), ["bool"], [True, None])[0] == [False, None]
    assert evaluate(call("is_null", c(0)), ["int4"], [1, None])[0] == [False, True]
    assert evaluate(call("is_not_null", c(0)), ["int4"], [1, None])[0] == [True, False]


def test_comparisons_across_numeric_types_and_with_nulls() -> None:
    values, _ = evaluate(call("lt", c(0), c(1)), ["int4", "numeric"], [1, 2, None], [1.5, 1.5, 1.0])
    assert values == [True, False, None]
    values, _ = evaluate(call("eq", c(0), c(1)), ["int8", "int4"], [3, 4], [3, 5])
    assert values == [True, False]


def test_text_literal_compared_with_a_date_is_a_date() -> None:
    """'2024-03-01' next to a date column is a date literal, as in PostgreSQL."""
    days = [datetime.date(2024, 2, 29), datetime.date(2024, 3, 1)]
    values, errors = evaluate(call("gte", c(0), lit("2024-03-01", "text")), ["date"], days)
    assert values == [False, True]
    assert errors == [None, None]


def test_between() -> None:
    values, _ = evaluate(
        call("between", c(0), lit(2, "int4"), lit(4, "int4")), ["int4"], [1, 2, 4, 5, None]
    )
    assert values == [False, True, True, False, None]


# Arithmetic


def test_integer_division_truncates_toward_zero_and_mod_takes_the_dividends_sign() -> None:
    a, b = [7, -7, 7, -7], [2, 2, -2, -2]
    assert evaluate(call("div", c(0), c(1)), ["int4", "int4"], a, b)[0] == [3, -3, -3, 3]
    assert evaluate(call("mod", c(0), c(1)), ["int4", "int4"], a, b)[0] == [1, -1, 1, -1]


def test_division_by_zero_is_an_error_row_for_every_numeric_type() -> None:
    for pg_type, one in (("int4", 1), ("int8", 1), ("float8", 1.0), ("numeric", Decimal(1))):
        values, errors = evaluate(call("div", c(0), c(1)), [pg_type, pg_type], [one, one], [one, 0])
        assert errors == [None, "22012"], pg_type
        assert values[0] == one
    _, errors = evaluate(call("mod", c(0), c(1)), ["int4", "int4"], [1], [0])
    assert errors == ["22012"]


def test_integer_overflow_is_22003_per_type() -> None:
    big4, big8 = 2**31 - 1, 2**63 - 1
    _, errors = evaluate(call("add", c(0), lit(1, "int4")), ["int4"], [big4, 1])
    assert errors == ["22003", None]
    _, errors = evaluate(call("mul", c(0), lit(2, "int8")), ["int8"], [big8, 3])
    assert errors == ["22003", None]
    _, errors = evaluate(call("neg", c(0)), ["int8"], [-(2**63)])
    assert errors == ["22003"]
    values, errors = evaluate(call("add", c(0), lit(1, "int8")), ["int4"], [big4])
    assert values == [big4 + 1]
    assert errors == [None]


def test_mixed_integer_and_numeric_arithmetic_is_numeric() -> None:
    values, _ = evaluate(call("div", c(0), c(1)), ["int4", "numeric"], [7], [2.0])
    assert values == [3.5]
    assert compile_scalar(call("add", c(0), c(1)), ["int4", "numeric"]).type == "numeric"


def test_float_overflow_is_an_error() -> None:
    _, errors = evaluate(call("mul", c(0), c(0)), ["float8"], [1e200, 2.0])
    assert errors == ["22003", None]


def test_nulls_propagate_through_arithmetic() -> None:
    values, errors = evaluate(call("div", c(0), c(1)), ["int4", "int4"], [None, 1], [0, None])
    assert values == [None, None]
    assert errors == [None, None]


def test_date_and_time_arithmetic() -> None:
    day = datetime.date(2024, 2, 28)
    assert value_of(call("add", lit(day, "date"), lit(2, "int4"))) == datetime.date(2024, 3, 1)
    assert value_of(call("sub", lit(day, "date"), lit(day.replace(day=1), "date"))) == 27
    assert value_of(call("add", lit(day, "date"), lit("1 day 02:00:00", "interval"))) == (
        datetime.datetime(2024, 2, 29, 2, 0)
    )
    start = datetime.datetime(2024, 1, 1, 12, 0)
    assert value_of(call("sub", lit(start, "timestamp"), lit("3 hours", "interval"))) == (
        datetime.datetime(2024, 1, 1, 9, 0)
    )
    assert value_of(
        call("sub", lit(start, "timestamp"), lit(datetime.datetime(2024, 1, 1), "timestamp"))
    ) == {"months": 0, "days": 0, "micros": 12 * 3_600_000_000}
    # timestamp - timestamp: whole days as days, the rest with the same sign (never months).
    assert value_of(call("sub", lit(start, "timestamp"), lit(day, "date"))) == (
        {"months": 0, "days": -57, "micros": -12 * 3_600_000_000}
    )
    assert compile_scalar(call("sub", c(0), c(1)), ["timestamp", "date"]).type == "interval"
    assert value_of(call("mul", lit("1 hour", "interval"), lit(3, "int4"))) == (
        {"months": 0, "days": 0, "micros": 3 * 3_600_000_000}
    )


# CASE, COALESCE, NULLIF, GREATEST, LEAST


def test_case_is_lazy_errors_in_branches_not_taken_do_not_count() -> None:
    """CASE WHEN b = 0 THEN 0 ELSE a / b END never divides by zero."""
    guarded = Case(((call("eq", c(1), lit(0, "int4")), lit(0, "int4")),), call("div", c(0), c(1)))
    values, errors = evaluate(guarded, ["int4", "int4"], [6, 6, 6], [0, 3, None])
    assert values == [0, 2, None]
    assert errors == [None, None, None]
    # The branch taken does fail.
    unguarded = Case(((call("gt", c(1), lit(5, "int4")), lit(0, "int4")),), call("div", c(0), c(1)))
    _, errors = evaluate(unguarded, ["int4", "int4"], [6], [0])
    assert errors == ["22012"]


def test_case_without_else_is_null_and_mixes_numeric_types() -> None:
    expr = Case(
        ((call("gt", c(0), lit(1, "int4")), lit("2.5", "numeric")),), Literal(None, "unknown")
    )
    values, _ = evaluate(expr, ["int4"], [2, 1])
    assert values == [2.5, None]
    expr = Case(((call("gt", c(0), lit(1, "int4")), lit(1, "int4")),), lit("2.5", "numeric"))
    assert evaluate(expr, ["int4"], [2, 1])[0] == [1.0, 2.5]


def test_coalesce_stops_at_the_first_non_null_argument() -> None:
    fallback = call("div", lit(1, "int4"), c(1))
    values, errors = evaluate(call("coalesce", c(0), fallback), ["int4", "int4"], [5, None], [0, 0])
    assert values[0] == 5
    assert errors == [None, "22012"]
    values, _ = evaluate(
        call("coalesce", c(0), c(1), lit(9, "int4")), ["int4", "int4"], [None, None], [None, 2]
    )
    assert values == [9, 2]


def test_nullif_greatest_least() -> None:
    assert evaluate(call("nullif", c(0), lit(0, "int4")), ["int4"], [0, 3])[0] == [None, 3]
    assert evaluate(call("greatest", c(0), c(1)), ["int4", "int4"], [1, None], [2, 4])[0] == [2, 4]
    assert evaluate(call("least", c(0), lit("1.5", "numeric")), ["int4"], [1, 3])[0] == [1.0, 1.5]


# Casts


def test_casting_bad_text_is_an_error_row() -> None:
    text = ["12", " 7 ", "x", None, "99999999999"]
    values, errors = evaluate(Cast(c(0), "int4"), ["text"], text)
    assert values[:4] == [12, 7, None, None]
    assert errors == [None, None, "22P02", None, "22003"]
    values, errors = evaluate(Cast(c(0), "date"), ["text"], ["2024-02-29", "2023-02-29", "soon"])
    assert values[0] == datetime.date(2024, 2, 29)
    assert errors == [None, "22008", "22007"]  # February 29 of 2023 does not exist: 22008
    values, errors = evaluate(Cast(c(0), "bool"), ["text"], ["t", "YES", "off", "maybe"])
    assert values[:3] == [True, True, False]
    assert errors[3] == "22P02"
    values, errors = evaluate(Cast(c(0), "numeric"), ["text"], ["1.25", "-3", "1.2.3"])
    assert values[:2] == [1.25, -3.0]
    assert errors == [None, None, "22P02"]
    values, errors = evaluate(Cast(c(0), "timestamp"), ["text"], ["2024-01-02 03:04:05", "nope"])
    assert values[0] == datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert errors[1] == "22007"


def test_numbers_to_integers_round_like_postgres() -> None:
    """numeric rounds half away from zero, float8 half to even; out of range is 22003."""
    halves = [0.5, 1.5, 2.5, -2.5]
    assert evaluate(Cast(c(0), "int4"), ["numeric"], halves)[0] == [1, 2, 3, -3]
    assert evaluate(Cast(c(0), "int4"), ["float8"], halves)[0] == [0, 2, 2, -2]
    _, errors = evaluate(Cast(c(0), "int2"), ["int4"], [40000, 5])
    assert errors == ["22003", None]


def test_casts_to_text_print_like_postgres() -> None:
    assert evaluate(Cast(c(0), "text"), ["bool"], [True, False])[0] == ["true", "false"]
    assert evaluate(Cast(c(0), "text"), ["numeric"], [2.0, 2.5])[0] == ["2", "2.5"]
    floats = [1e15, 123456789012345.0, 0.1 + 0.2, 1.5e-05, 100.0, -0.0, float("inf"), None]
    assert evaluate(Cast(c(0), "text"), ["float8"], floats)[0] == [
        "1e+15",
        "123456789012345",
        "0.30000000000000004",
        "1.5e-05",
        "100",
        "-0",
        "Infinity",
        None,
    ]
    moment = datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert evaluate(Cast(c(0), "text"), ["timestamp"], [moment])[0] == ["2024-01-02 03:04:05"]
    whole, fractional = moment.replace(second=0), moment.replace(microsecond=250000)
    assert evaluate(Cast(c(0), "text"), ["timestamp"], [whole, fractional])[0] == [
        "2024-01-02 03:04:00",
        "2024-01-02 03:04:05.25",
    ]
    assert evaluate(Cast(c(0), "text"), ["date"], [moment.date()])[0] == ["2024-01-02"]
    spans = [Interval(0, 1, 2 * 3_600_000_000), Interval(micros=300_000_000), Interval(14, -1)]
    texts = ["1 day 02:00:00", "00:05:00", "1 year 2 mons -1 days"]
    assert evaluate(Cast(c(0), "text"), ["interval"], [i.to_struct() for i in spans])[0] == texts


# Strings


def test_like_and_ilike_with_wildcards_and_escapes() -> None:
    words = ["abc", "aXc", "ac", "a_c", "ABC", None]
    assert evaluate(call("like", c(0), lit("a_c", "text")), ["text"], words)[0] == [
        True,
        True,
        False,
        True,
        False,
        None,
    ]
    assert evaluate(call("like", c(0), lit("a\\_c", "text")), ["text"], words)[0] == [
        False,
        False,
        False,
        True,
        False,
        None,
    ]
    assert evaluate(call("ilike", c(0), lit("a%", "text")), ["text"], words)[0] == [
        True,
        True,
        True,
        True,
        True,
        None,
    ]
    assert evaluate(call("like", c(0), lit("a.c", "text")), ["text"], ["abc", "a.c"])[0] == [
        False,
        True,
    ]
    custom = call("like", c(0), lit("a!%", "text"), lit("!", "text"))
    assert evaluate(custom, ["text"], ["a%", "ab"])[0] == [True, False]
    column_pattern = call("like", c(0), c(1))
    assert evaluate(column_pattern, ["text", "text"], ["hello", "hello"], ["h%o", "x%"])[0] == [
        True,
        False,
    ]


def test_like_pattern_ending_in_escape_is_an_error() -> None:
    assert error_of(call("like", lit("a", "text"), lit("a\\", "text"))) == "22025"
    by_column = call("like", c(0), c(1), c(2))
    values, errors = evaluate(
        by_column, ["text"] * 3, ["a%", "ab", "a", None], ["a!%", "a!%", "a!", "a!"], ["!"] * 4
    )
    assert values[:2] == [True, False]
    assert errors == [None, None, "22025", None]
    with pytest.raises(ValueError):
        like_regex("a\\", "\\", insensitive=False)


def test_string_functions() -> None:
    s = ["Hello", "héllo wörld", None]
    text = ["text"]
    assert evaluate(call("upper", c(0)), text, s)[0] == ["HELLO", "HÉLLO WÖRLD", None]
    assert evaluate(call("length", c(0)), text, s)[0] == [5, 11, None]
    assert evaluate(call("octet_length", c(0)), text, s)[0] == [5, 13, None]
    assert evaluate(call("substr", c(0), lit(2, "int4"), lit(3, "int4")), text, s)[0] == [
        "ell",
        "éll",
        None,
    ]
    assert evaluate(call("substr", c(0), lit(0, "int4"), lit(3, "int4")), text, s)[0] == [
        "He",
        "hé",
        None,
    ]
    assert evaluate(call("substr", c(0), lit(3, "int4")), text, s)[0] == ["llo", "llo wörld", None]
    assert error_of(call("substr", lit("abc", "text"), lit(1, "int4"), lit(-1, "int4"))) == "22011"
    assert evaluate(call("strpos", c(0), lit("l", "text")), text, s)[0] == [3, 3, None]
    assert value_of(call("strpos", lit("héllo", "text"), lit("z", "text"))) == 0
    assert value_of(call("replace", lit("a-b-c", "text"), lit("-", "text"), lit("+", "text"))) == (
        "a+b+c"
    )
    assert value_of(call("trim", lit("  x  ", "text"))) == "x"
    assert value_of(call("ltrim", lit("xxaxx", "text"), lit("x", "text"))) == "axx"
    assert value_of(call("rtrim", lit("xxaxx", "text"), lit("x", "text"))) == "xxa"


def test_left_right_pad_split_part() -> None:
    s = lit("abcde", "text")
    assert value_of(call("left", s, lit(2, "int4"))) == "ab"
    assert value_of(call("left", s, lit(-2, "int4"))) == "abc"
    assert value_of(call("right", s, lit(2, "int4"))) == "de"
    assert value_of(call("right", s, lit(-2, "int4"))) == "cde"
    assert value_of(call("lpad", lit("hi", "text"), lit(5, "int4"), lit("xy", "text"))) == "xyxhi"
    assert value_of(call("rpad", lit("hi", "text"), lit(5, "int4"))) == "hi   "
    assert value_of(call("lpad", lit("hello", "text"), lit(2, "int4"))) == "he"
    parts = lit("a,b,,c", "text")
    assert value_of(call("split_part", parts, lit(",", "text"), lit(2, "int4"))) == "b"
    assert value_of(call("split_part", parts, lit(",", "text"), lit(3, "int4"))) == ""
    assert value_of(call("split_part", parts, lit(",", "text"), lit(9, "int4"))) == ""
    assert value_of(call("split_part", parts, lit(",", "text"), lit(-1, "int4"))) == "c"
    assert error_of(call("split_part", parts, lit(",", "text"), lit(0, "int4"))) == "22023"
    assert value_of(call("starts_with", s, lit("abc", "text"))) is True


def test_concat_operator_is_null_on_null_but_concat_function_skips_nulls() -> None:
    a, b = ["x", "x"], ["y", None]
    assert evaluate(call("concat", c(0), c(1)), ["text", "text"], a, b)[0] == ["xy", None]
    variadic = call("concat_variadic", c(0), c(1), lit(1, "int4"))
    assert evaluate(variadic, ["text", "text"], a, b)[0] == ["xy1", "x1"]
    assert evaluate(call("concat", c(0), lit("!", "text")), ["int4"], [42])[0] == ["42!"]
    ws = call("concat_ws", lit(",", "text"), c(0), c(1))
    assert evaluate(ws, ["text", "text"], a, b)[0] == ["x,y", "x"]


# Numbers


def test_rounding_functions() -> None:
    values = [2.5, -2.5, 1.25]
    assert evaluate(call("round", c(0)), ["numeric"], values)[0] == [3, -3, 1]
    assert evaluate(call("round", c(0)), ["float8"], values)[0] == [2.0, -2.0, 1.0]
    assert evaluate(call("round", c(0), lit(1, "int4")), ["numeric"], [1.25, -1.25])[0] == [
        Decimal("1.3"),
        Decimal("-1.3"),
    ]
    assert evaluate(call("trunc", c(0), lit(1, "int4")), ["numeric"], [1.29, -1.29])[0] == [
        Decimal("1.2"),
        Decimal("-1.2"),
    ]
    assert evaluate(call("round", c(0), lit(-2, "int4")), ["numeric"], [1250, -1249.9])[0] == [
        1300,
        -1200,
    ]
    assert evaluate(call("trunc", c(0)), ["float8"], [2.7, -2.7])[0] == [2.0, -2.0]
    assert evaluate(call("ceil", c(0)), ["float8"], [2.1, -2.1])[0] == [3.0, -2.0]
    assert evaluate(call("floor", c(0)), ["numeric"], [2.9, -2.1])[0] == [2.0, -3.0]
    assert evaluate(call("abs", c(0)), ["int4"], [-3, 3])[0] == [3, 3]
    assert compile_scalar(call("abs", c(0)), ["int4"]).type == "int4"


def test_math_functions_and_their_domain_errors() -> None:
    assert value_of(call("sqrt", lit(9, "int4"))) == 3.0
    assert error_of(call("sqrt", lit(-1, "int4"))) == "2201F"
    assert value_of(call("power", lit(2, "int4"), lit(10, "int4"))) == 1024.0
    assert error_of(call("power", lit(0, "int4"), lit(-1, "int4"))) == "2201F"
    assert error_of(call("ln", lit(0, "int4"))) == "2201E"
    assert value_of(call("log", lit(2, "int4"), lit(8, "int4"))) == pytest.approx(3.0)
    assert value_of(call("mod", lit(-7, "int4"), lit(3, "int4"))) == -1


# Dates and times


def test_date_trunc_and_extract() -> None:
    moment = lit(datetime.datetime(2024, 5, 17, 13, 45, 30, 250000), "timestamp")
    assert value_of(call("date_trunc", lit("month", "text"), moment)) == datetime.datetime(
        2024, 5, 1
    )
    assert value_of(call("date_trunc", lit("hour", "text"), moment)) == (
        datetime.datetime(2024, 5, 17, 13)
    )
    assert value_of(call("date_trunc", lit("week", "text"), moment)) == datetime.datetime(
        2024, 5, 13
    )
    assert value_of(call("date_trunc", lit("decade", "text"), moment)) == datetime.datetime(
        2020, 1, 1
    )
    assert value_of(call("date_trunc", lit("century", "text"), moment)) == datetime.datetime(
        2001, 1, 1
    )
    fields: dict[str, float] = {"year": 2024, "month": 5, "day": 17, "hour": 13, "dow": 5}
    fields |= {"isodow": 5, "doy": 138}
    fields |= {"quarter": 2, "second": 30.25, "minute": 45}
    for field, expected in fields.items():
        assert value_of(call("extract", lit(field, "text"), moment)) == expected, field
    day = lit(datetime.date(2024, 5, 19), "date")
    assert value_of(call("date_part", lit("dow", "text"), day)) == 0  # Sunday
    assert value_of(call("extract", lit("epoch", "text"), day)) == 1716076800
    with pytest.raises(LoupeError):
        compile_scalar(call("date_trunc", lit("fortnight", "text"), moment), [])


def test_now_is_refused_in_a_dataflow() -> None:
    """now() and mz_now() have no value inside a dataflow; the planner must fold them."""
    for name in ("now", "mz_now"):
        with pytest.raises(LoupeError) as raised:
            compile_scalar(call(name), [])
        assert raised.value.code == "0A000"


# The registry


def test_every_evaluable_registered_function_compiles() -> None:
    """Each registry entry has an implementation that accepts its minimum argument count."""
    samples: dict[int, list[Scalar]] = {0: [], 1: [c(0)], 2: [c(0), c(1)]}
    samples[3] = [c(0), c(1), lit(2, "int4")]
    samples[6] = []  # make_timestamp: a special call
    units = {"date_trunc", "extract", "date_part"}
    for function in FUNCTIONS.values():
        if not function.evaluable:
            continue
        assert function.name in engine_expr._HANDLERS, function.name
        args = list(samples[function.min_args])
        if function.name in units:
            args = [lit("day", "text"), c(2)]
        if function.name in CONSTANT_ARGS:  # patterns that must be constants
            args = [c(0), lit("a", "text"), lit("b", "text")]
        types = ["text", "text", "date"] if function.name not in NUMERIC_ARGS else ["int4"] * 3
        if function.name in SPECIAL_CALLS:
            args, types = SPECIAL_CALLS[function.name]
        compiled = compile_scalar(Call(function.name, tuple(args)), types)
        assert isinstance(compiled.value, pl.Expr)


CONSTANT_ARGS = {"regexp_replace", "translate"}
# Calls whose arguments are neither the text nor the number samples: (arguments, column types).
SPECIAL_CALLS: dict[str, tuple[list[Scalar], list[str]]] = {
    "to_char": ([c(0), lit("YYYY", "text")], ["timestamp"]),
    "timezone": ([lit("UTC", "text"), c(0)], ["timestamp"]),
    "age": ([c(0), c(0)], ["timestamp"]),
    "date_bin": ([c(0), c(1), c(1)], ["interval", "timestamp"]),
    "make_timestamp": ([c(0), c(0), c(0), c(0), c(0), c(1)], ["int4", "float8"]),
    # Arrays and lists.
    **dict.fromkeys(("subscript", "array_length"), ([c(0), c(1)], ["_int4", "int4"])),
    **dict.fromkeys(("cardinality", "list_length"), ([c(0)], ["_int4"])),
    "array_to_string": ([c(0), c(1)], ["_int4", "text"]),
    "list_slice": ([c(0), c(1), c(1)], ["int4 list", "int8"]),
    "pg_size_pretty": ([c(0)], ["int8"]),
    **dict.fromkeys(
        ("array_contains", "array_contained", "array_overlap"), ([c(0), c(1)], ["_int4", "_int4"])
    ),
    "eq_any": ([c(0), c(1)], ["int4", "_int4"]),
    "container_concat": ([c(0), c(1)], ["_int4", "int4"]),
    **dict.fromkeys(
        ("jsonb_get", "jsonb_get_text", "jsonb_exists"), ([c(0), c(1)], ["jsonb", "text"])
    ),
    **dict.fromkeys(("jsonb_contains", "jsonb_contained"), ([c(0), c(1)], ["jsonb", "jsonb"])),
    **dict.fromkeys(("jsonb_typeof", "jsonb_array_length"), ([c(0)], ["jsonb"])),
}
NUMERIC_ARGS = {
    "chr",
    "degrees",
    "radians",
    "to_timestamp",
    *engine_expr._TRIGONOMETRY,
    "add",
    "sub",
    "mul",
    "div",
    "mod",
    "neg",
    "abs",
    "sign",
    "round",
    "trunc",
    "ceil",
    "floor",
    "sqrt",
    "cbrt",
    "power",
    "exp",
    "ln",
    "log10",
    "log",
    "and",
    "or",
    "not",
    "make_date",
}


def test_aliases_resolve_to_registered_functions() -> None:
    assert lookup("char_length") is FUNCTIONS["length"]
    assert lookup("pow") is FUNCTIONS["power"]
    assert lookup("no_such_function") is None


# MapFilterProject and keys


def test_mfp_maps_filters_and_projects() -> None:
    frame = batch(["int4", "text"], [1, 2, 3], ["a", "b", "c"])
    mfp = MapFilterProject.identity(2).map((call("mul", c(0), lit(10, "int4")),))
    mfp = mfp.filter((call("gt", c(2), lit(10, "int4")),)).project((2, 1))
    ok, errors = apply_mfp(frame, mfp, ["int4", "text"])
    assert ok.select("c0", "c1").rows() == [(20, "b"), (30, "c")]
    assert ok.columns == ["c0", "c1", "time", "diff"]
    assert errors.height == 0


def test_mfp_predicates_guard_later_expressions() -> None:
    """WHERE b <> 0 runs before the mapped a / b, so b = 0 rows never divide."""
    frame = batch(["int4", "int4"], [6, 6, 6], [3, 0, -2])
    mfp = MapFilterProject.identity(2).filter((call("neq", c(1), lit(0, "int4")),))
    mfp = mfp.map((call("div", c(0), c(1)),)).project((2,))
    ok, errors = apply_mfp(frame, mfp, ["int4", "int4"])
    assert sorted(ok["c0"].to_list()) == [-3, 2]
    assert errors.height == 0
    # Without the guard the zero divisor is an error row carrying its time and diff.
    unguarded = MapFilterProject.identity(2).map((call("div", c(0), c(1)),)).project((2,))
    ok, errors = apply_mfp(frame, unguarded, ["int4", "int4"])
    assert ok.height == 2
    assert errors.rows() == [("22012|division by zero", 0, 1)]


def test_mfp_output_dtypes_follow_the_inferred_types() -> None:
    frame = batch(["int4"], [1])
    mfp = (
        MapFilterProject.identity(1).map((call("add", c(0), lit("0.5", "numeric")),)).project((1,))
    )
    ok, _ = apply_mfp(frame, mfp, ["int4"])
    assert ok.schema["c0"] == polars_dtype("numeric")
    assert engine_expr.mfp_output_types(mfp, ["int4"]) == ("numeric",)


def test_eval_keys_appends_keys_and_separates_failing_rows() -> None:
    frame = batch(["int4", "int4"], [4, 5], [2, 0])
    keyed, errors = eval_keys(frame, [call("div", c(0), c(1)), c(0)], ["int4", "int4"])
    assert keyed.select("k0", "k1").rows() == [(2, 4)]
    assert errors["error"].to_list() == ["22012|division by zero"]


# Regular expressions, translate, make_date


def test_regex_match_with_flags_and_invalid_patterns() -> None:
    words = ["Apple", "banana", None]
    assert evaluate(call("regexp_like", c(0), lit("^a", "text")), ["text"], words)[0] == [
        False,
        False,
        None,
    ]
    insensitive = call("regexp_like", c(0), lit("^a", "text"), lit("i", "text"))
    assert evaluate(insensitive, ["text"], words)[0] == [True, False, None]
    assert evaluate(call("regexp_ilike", c(0), lit("NAN", "text")), ["text"], words)[0] == [
        False,
        True,
        None,
    ]
    _, errors = evaluate(call("regexp_like", c(0), c(1)), ["text", "text"], ["a", "a"], ["(", "a"])
    assert errors == ["2201B", None]
    _, errors = evaluate(call("regexp_like", c(0), lit("(", "text")), ["text"], ["a"])
    assert errors == ["2201B"]


def test_regexp_replace_first_or_every_match_with_backreferences() -> None:
    text = lit("banana", "text")
    first = call("regexp_replace", text, lit("a(.)", "text"), lit("<\\1>", "text"))
    assert value_of(first) == "b<n>ana"
    every = call(
        "regexp_replace", text, lit("a(.)", "text"), lit("<\\1>", "text"), lit("g", "text")
    )
    assert value_of(every) == "b<n><n>a"
    whole = call("regexp_replace", text, lit("N", "text"), lit("[\\&$]", "text"), lit("gi", "text"))
    assert value_of(whole) == "ba[n$]a[n$]a"
    with pytest.raises(LoupeError):
        compile_scalar(
            call("regexp_replace", text, lit("a", "text"), lit("", "text"), lit("z", "text")), []
        )


def test_translate_and_make_date() -> None:
    assert value_of(
        call("translate", lit("hello", "text"), lit("elo", "text"), lit("EL", "text"))
    ) == ("hELL")
    made = call("make_date", lit(2024, "int4"), c(0), lit(29, "int4"))
    values, errors = evaluate(made, ["int4"], [2, 13, None])
    assert values[0] == datetime.date(2024, 2, 29)
    assert errors == [None, "22008", None]


def test_timestamptz_is_utc_inside_the_engine() -> None:
    """Offsets in input are applied; output prints +00 (the session time zone is UTC)."""
    values, errors = evaluate(
        Cast(c(0), "timestamptz"), ["text"], ["2024-03-01 12:00:00+02", "2024-03-01 12:00:00"]
    )
    assert values == [
        datetime.datetime(2024, 3, 1, 10, 0, tzinfo=datetime.UTC),
        datetime.datetime(2024, 3, 1, 12, 0, tzinfo=datetime.UTC),
    ]
    assert errors == [None, None]
    moment = lit("2024-03-01 10:00:00+00", "timestamptz")
    assert value_of(Cast(moment, "text")) == "2024-03-01 10:00:00+00"
    assert value_of(call("date_trunc", lit("day", "text"), moment)) == datetime.datetime(
        2024, 3, 1, tzinfo=datetime.UTC
    )
    later = call("add", moment, lit("90 minutes", "interval"))
    assert value_of(call("extract", lit("hour", "text"), later)) == 11
    naive = lit(datetime.datetime(2024, 3, 1, 10, 0), "timestamp")
    assert value_of(call("eq", moment, naive)) is True
