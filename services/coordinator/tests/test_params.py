"""Positional parameters and PREPARE/EXECUTE/DEALLOCATE: parsing, binding, errors, text forms."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from sqlglot import exp

from loupe.common.errors import LoupeError
from loupe.coordinator.sql.params import (
    Parameter,
    array_text,
    bind,
    highest_parameter,
    inline_type,
    literal,
    params_text,
    text_form,
)
from loupe.coordinator.sql.parser import parse, parse_one
from loupe.coordinator.sql.statements import (
    Deallocate,
    Delete,
    Execute,
    Insert,
    Prepare,
    Query,
    Update,
)


def _p(*values: object) -> list[Parameter]:
    return [Parameter(v, inline_type(v)) for v in values]


def _sql(statement: object) -> str:
    assert isinstance(statement, Query)
    return statement.expression.sql(dialect="postgres")


def test_parameters_are_bound_as_literals_of_their_types():
    """Each $n becomes a literal typed by its value, written as PostgreSQL reads it."""
    query = parse_one("SELECT $1, $2, $3, $4, $2 || 'x'")
    bound = bind(query, _p(5, "a b", None, True))
    assert _sql(bound) == "SELECT 5, 'a b', NULL, TRUE, 'a b' || 'x'"
    typed = bind(
        parse_one("SELECT $1, $2, $3, $4, $5, $6, $7"),
        _p(
            -7,
            2**40,
            1.5,
            Decimal("12.50"),
            dt.date(2024, 1, 2),
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            dt.timedelta(days=1, seconds=1),
        ),
    )
    assert _sql(typed) == (
        "SELECT -7, CAST('1099511627776' AS BIGINT), CAST('1.5' AS DOUBLE PRECISION),"
        " CAST('12.50' AS DECIMAL), CAST('2024-01-02' AS DATE),"
        " CAST('2024-01-02 03:04:05+00:00' AS TIMESTAMPTZ), INTERVAL '1 day 00:00:01'"
    )
    # The parsed statement keeps its parameters: a prepared statement binds again and again.
    assert _sql(query) == "SELECT $1, $2, $3, $4, $2 || 'x'"


def test_a_typed_null_keeps_its_type_and_unsupported_types_are_refused():
    assert literal(Parameter(None, "int4")).sql(dialect="postgres") == "CAST(NULL AS INT)"
    assert isinstance(literal(Parameter(None)), exp.Null)
    for value in (b"\x00", [1, "x"], [[1]]):
        with pytest.raises(LoupeError) as refused:
            literal(Parameter(value, inline_type(value)))
        assert refused.value.code == "0A000"


def test_lists_bind_as_arrays_of_their_elements_type():
    """A list is an array literal that reads back into the same values, typed by them."""
    from loupe.coordinator.constant import evaluate_constant

    for values, array in (
        ([1, None, 2**40], "_int8"),
        (["a b", None, 'q"', "back\\slash", ""], "_text"),
        ([None], "_text"),
        ([True, False], "_bool"),
    ):
        bound = bind(parse_one("SELECT $1"), _p(values))
        assert isinstance(bound, Query)
        columns, rows = evaluate_constant(bound.expression)
        assert (columns[0][1], rows[0][0]) == (array, values)


def test_insert_update_delete_and_as_of_bind_their_parameters():
    insert = bind(parse_one("INSERT INTO t VALUES ($1, $2), ($2, $1)"), _p(1, "x"))
    assert isinstance(insert, Insert)
    assert [[e.sql() for e in row] for row in insert.rows] == [["1", "'x'"], ["'x'", "1"]]
    insert_select = bind(parse_one("INSERT INTO t SELECT $1"), _p(3))
    assert isinstance(insert_select, Insert)
    assert insert_select.query is not None
    assert _sql(insert_select.query) == "SELECT 3"
    update = bind(parse_one("UPDATE t SET a = $1 WHERE b = $2"), _p(None, 2))
    assert isinstance(update, Update)
    assert update.where is not None
    assert update.assignments[0][2].sql() == "NULL"
    assert update.where.sql() == "b = 2"
    delete = bind(parse_one("DELETE FROM t WHERE a > $1"), _p(9))
    assert isinstance(delete, Delete)
    assert delete.where is not None
    assert delete.where.sql() == "a > 9"
    as_of = bind(parse_one("SELECT 1 AS OF $1"), _p(1000))
    assert isinstance(as_of, Query)
    assert as_of.as_of is not None
    assert as_of.as_of.sql() == "1000"


def test_a_missing_parameter_is_42p02_at_its_position():
    """PostgreSQL: ERROR 42P02 there is no parameter $3, pointing at the $3."""
    sql = "SELECT $1 + $3"
    with pytest.raises(LoupeError) as missing:
        bind(parse_one(sql), _p(1, 2, 3)[:1])
    assert (missing.value.code, missing.value.message) == ("42P02", "there is no parameter $3")
    assert missing.value.position == sql.index("$3") + 1
    with pytest.raises(LoupeError) as unbound:
        bind(parse_one("SELECT $1"), [])  # a simple query has no parameters
    assert unbound.value.code == "42P02"
    with pytest.raises(LoupeError) as zero:
        bind(parse_one("SELECT $0"), _p(1)[:0])
    assert zero.value.message == "there is no parameter $0"


def test_extra_parameters_are_a_protocol_violation():
    """More values than the statement uses: 08P01, as PostgreSQL's Bind reports it."""
    with pytest.raises(LoupeError) as extra:
        bind(parse_one("SELECT $1"), _p(1, 2))
    assert extra.value.code == "08P01"
    assert extra.value.message == (
        'bind message supplies 2 parameters, but prepared statement "" requires 1'
    )
    with pytest.raises(LoupeError) as none_used:
        bind(parse_one("SELECT 1"), _p(1))
    assert none_used.value.code == "08P01"
    # The statement PREPARE holds keeps its $n: they are not the request's.
    with pytest.raises(LoupeError):
        bind(parse_one("PREPARE p AS SELECT $1"), _p(1))
    assert bind(parse_one("PREPARE p AS SELECT $1"), []) is not None


def test_a_view_definition_has_no_parameters():
    with pytest.raises(LoupeError) as refused:
        bind(parse_one("CREATE VIEW v AS SELECT $1"), _p(1))
    assert refused.value.code == "42P02"


def test_prepare_execute_and_deallocate_parse_as_postgresql_writes_them():
    prepare = parse_one("PREPARE q (integer, text) AS INSERT INTO t VALUES ($1, $2)")
    assert isinstance(prepare, Prepare)
    assert (prepare.name, prepare.param_types) == ("q", ("integer", "text"))
    # The statement is parsed from its own text: what is logged, and where errors point.
    assert (prepare.statement.text, prepare.statement.offset) == (
        "INSERT INTO t VALUES ($1, $2)",
        0,
    )
    assert highest_parameter(prepare.statement) == 2
    execute = parse_one("EXECUTE q (1 + 2, NULL, 'a b')")
    assert isinstance(execute, Execute)
    assert [a.sql() for a in execute.args] == ["1 + 2", "NULL", "'a b'"]
    assert parse_one("EXECUTE q") == Execute(text="EXECUTE q", offset=0, name="q")
    assert [s.name for s in parse("DEALLOCATE q; DEALLOCATE PREPARE q; DEALLOCATE prepare")] == [
        "q",
        "q",
        "prepare",
    ]  # type: ignore[attr-defined]
    deallocate_all = parse_one("DEALLOCATE ALL")
    assert isinstance(deallocate_all, Deallocate)
    assert (deallocate_all.name, deallocate_all.tag) == (None, "DEALLOCATE ALL")


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("PREPARE p AS CREATE TABLE t (a int)", "42601"),
        ("PREPARE p AS", "42601"),
        ("PREPARE p (nope) AS SELECT $1", "42704"),
        ("EXECUTE p ()", "42601"),
        ("EXECUTE p (1,", "42601"),
        ("DEALLOCATE", "42601"),
    ],
)
def test_malformed_prepared_statement_commands_are_refused(sql: str, code: str):
    with pytest.raises(LoupeError) as refused:
        parse(sql)
    assert refused.value.code == code


def test_parameters_are_logged_as_a_postgresql_text_array_with_nulls_kept():
    assert array_text(["1", None, "a b"]) == '{1,NULL,"a b"}'
    assert array_text([]) == "{}"
    # Quoted: empty, the word NULL, braces, commas, quotes, backslashes, white space.
    assert array_text(["", "null", "{x}", "a,b", 'say "hi"', "back\\slash", "tab\t"]) == (
        '{"","null","{x}","a,b","say \\"hi\\"","back\\\\slash","tab\t"}'
    )
    moment = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    values = _p(1, None, "a b", True, float("inf"), moment, moment.date())
    assert params_text(values) == '{1,NULL,"a b",t,Infinity,"2024-01-02 03:04:05+00",2024-01-02}'
    assert params_text([Parameter("a", "jsonb")]) == '{"\\"a\\""}'
    assert text_form(dt.timedelta(days=1, hours=2)) == "1 day 02:00:00"


def test_an_integer_past_bigint_binds_as_numeric():
    """An unsigned 64-bit value (uint_value on the wire) is a numeric, as its literal is."""
    from loupe.common.values import from_value, to_value

    value = from_value(to_value(2**64 - 1))
    bound = literal(Parameter(value, inline_type(value)))
    assert bound.sql(dialect="postgres") == "CAST('18446744073709551615' AS DECIMAL)"
