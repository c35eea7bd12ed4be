"""Materialize's unsigned integers and mz_timestamp: arithmetic, casts and ranges.

PostgreSQL has no unsigned types, so the oracle is their definition
(Materialize's documentation: uintN op uintN is uintN, the exact result when
it fits and 22003 otherwise) with PostgreSQL's exact numbers deciding what a
text or a signed value is; mz_timestamp's casts to and from timestamps are
checked against PostgreSQL's epoch arithmetic.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import psycopg
import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.parser import LoupeDialect

MAXIMUM = {"uint2": 2**16 - 1, "uint4": 2**32 - 1, "uint8": 2**64 - 1}
EDGES = (0, 1, 2, 3, 7, 255, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1)


def loupe(sql: str, query_time: int | None = None) -> tuple[object, str]:
    """(value, type) of a one-column, one-row SELECT, or ("error", SQLSTATE)."""
    try:
        columns, rows = evaluate_constant(
            sqlglot.parse_one(sql, read=LoupeDialect), query_time=query_time
        )
    except LoupeError as error:
        return "error", error.code
    return rows[0][0], columns[0][1]


def exact(left: int, op: str, right: int, top: int) -> tuple[object, str] | None:
    """What uintN op uintN must give; None when it is an error (the SQLSTATE is then checked)."""
    if op in ("/", "%") and right == 0:
        return None
    result = {
        "+": left + right,
        "-": left - right,
        "*": left * right,
        "/": left // right if right else 0,
        "%": left % right if right else 0,
    }[op]
    return (result, "") if 0 <= result <= top else None


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "%"])
@pytest.mark.parametrize("type_", list(MAXIMUM))
def test_unsigned_arithmetic_is_exact_or_out_of_range(type_: str, op: str) -> None:
    """uintN op uintN is a uintN: exact when it fits, 22003 when not, 22012 dividing by 0."""
    top = MAXIMUM[type_]
    values = [v for v in EDGES if v <= top]
    pairs = random.Random(f"{type_}{op}").sample(
        [(a, b) for a in values for b in values], k=min(40, len(values) ** 2)
    )
    for left, right in pairs:
        got = loupe(f"SELECT '{left}'::{type_} {op} '{right}'::{type_}")
        want = exact(left, op, right, top)
        if want is None:
            code = "22012" if op in ("/", "%") and right == 0 else "22003"
            assert got == ("error", code), (left, op, right, got)
        else:
            assert got == (want[0], type_), (left, op, right, got)


@pytest.fixture(scope="module")
def postgres(postgres_url: str):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


TEXTS = ("0", "42", "65535", "65536", "-1", "4294967295", "4294967296", "18446744073709551615")
TEXTS += ("18446744073709551616", "1.5", "abc", "", "1e3", "9223372036854775808")


@pytest.mark.parametrize("type_", list(MAXIMUM))
@pytest.mark.parametrize("text", TEXTS)
def test_text_to_unsigned_reads_integers_in_range(postgres, type_: str, text: str) -> None:
    """Text is a uintN when PostgreSQL reads it as an integer (22P02 if not) within range
    (22003 outside, as PostgreSQL's integer input is)."""
    try:
        number = postgres.execute("SELECT %s::numeric", (text,)).fetchone()[0]
        integral = number == number.to_integral_value() and "." not in text and "e" not in text
    except psycopg.errors.InvalidTextRepresentation:
        integral, number = False, None
    got = loupe(f"SELECT '{text}'::{type_}")
    if not integral:
        assert got == ("error", "22P02")
    elif 0 <= number <= MAXIMUM[type_]:
        assert got == (int(number), type_)
    else:
        assert got == ("error", "22003")


SIGNED = ((-1, "int4"), (0, "int4"), (70000, "int4"), (2**40, "int8"), (-(2**63), "int8"))


@pytest.mark.parametrize("type_", list(MAXIMUM))
@pytest.mark.parametrize(("value", "signed"), SIGNED)
def test_signed_to_unsigned_and_back_checks_both_ranges(
    postgres, type_: str, value: int, signed: str
) -> None:
    """A signed value casts to uintN when it fits; back to int4 it must fit int4 (PostgreSQL's
    own check of the same number decides)."""
    got = loupe(f"SELECT ({value})::{signed}::{type_}")
    if 0 <= value <= MAXIMUM[type_]:
        assert got == (value, type_)
        try:
            want = (postgres.execute(f"SELECT ({value})::int8::int4").fetchone()[0], "int4")
        except psycopg.errors.NumericValueOutOfRange:
            want = ("error", "22003")
        assert loupe(f"SELECT ({value})::{signed}::{type_}::int4") == want
    else:
        assert got == ("error", "22003")


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        # Mixed signed and unsigned: the narrowest type both convert to implicitly.
        ("SELECT 1::uint2 + 1::uint4", (2, "uint4")),
        ("SELECT 1::uint2 + 1::int2", (2, "int4")),
        ("SELECT 1::uint4 + 1::int4", (2, "int8")),
        ("SELECT 1::uint8 + 1::int8", (Decimal(2), "numeric")),
        ("SELECT 3::uint4 = 3::int8", (True, "bool")),
        ("SELECT 1.5::uint4", (2, "uint4")),
        ("SELECT 7::uint8::text", ("7", "text")),
        ("SELECT 7::uint2::float8", (7.0, "float8")),
        ("SELECT -(0::uint2) ", (0, "uint2")),
        # "boolean (integer only)": a boolean casts to uint4.
        ("SELECT true::uint4", (1, "uint4")),
    ],
)
def test_unsigned_promotion_and_casts(sql: str, want: tuple[object, str]) -> None:
    """Materialize's implicit casts: uint2 to int4, uint4 to int8, uint8 to numeric."""
    got = loupe(sql)
    if isinstance(want[0], Decimal):
        assert (Decimal(str(got[0])), got[1]) == want
    else:
        assert got == want


def test_unsigned_aggregates_have_materialize_types() -> None:
    """sum of uint2/uint4 is uint8, of uint8 numeric; min/max keep the type."""
    sql = (
        "SELECT sum(x), min(x), max(x), sum(x::uint8) FROM (VALUES (4294967295::uint4), "
        "(4294967295::uint4), (NULL)) AS t(x)"
    )
    columns, rows = evaluate_constant(sqlglot.parse_one(sql, read=LoupeDialect))
    assert [t for _, t in columns] == ["uint8", "uint4", "uint4", "numeric"]
    assert rows[0][:3] == (2 * (2**32 - 1), 2**32 - 1, 2**32 - 1)


MOMENTS = ("1970-01-01 00:00:00+00", "2024-02-29 12:34:56.789+00", "2001-09-09 01:46:40+00")


@pytest.mark.parametrize("moment", MOMENTS)
def test_mz_timestamp_is_milliseconds_since_the_epoch(postgres, moment: str) -> None:
    """timestamptz -> mz_timestamp is PostgreSQL's epoch in ms; text and back agree."""
    millis = int(
        postgres.execute(
            "SELECT (extract(epoch FROM %s::timestamptz) * 1000)::int8", (moment,)
        ).fetchone()[0]
    )
    back = postgres.execute("SELECT to_timestamp(%s / 1000.0)", (millis,)).fetchone()[0]
    assert loupe(f"SELECT (timestamptz '{moment}')::mz_timestamp") == (millis, "mz_timestamp")
    assert loupe(f"SELECT '{moment}'::mz_timestamp") == (millis, "mz_timestamp")
    assert loupe(f"SELECT '{millis}'::mz_timestamp") == (millis, "mz_timestamp")
    assert loupe(f"SELECT {millis}::int8::mz_timestamp::text") == (str(millis), "text")
    assert loupe(f"SELECT {millis}::int8::mz_timestamp::timestamptz") == (back, "timestamptz")
    assert loupe(f"SELECT {millis}::int8::mz_timestamp::timestamp")[0] == back.replace(tzinfo=None)


@pytest.mark.parametrize(
    ("sql", "want"),
    [
        ("SELECT (-1)::mz_timestamp", ("error", "22003")),
        ("SELECT 'x'::mz_timestamp", ("error", "22P02")),
        ("SELECT 1::mz_timestamp + 1", ("error", "42883")),
        ("SELECT 1::mz_timestamp::int8", ("error", "42846")),
        ("SELECT true::mz_timestamp", ("error", "42846")),
        ("SELECT 5::mz_timestamp > 4", (True, "bool")),
        ("SELECT 5::mz_timestamp = 5::uint8", (True, "bool")),
    ],
)
def test_mz_timestamp_has_no_operations_but_comparisons(sql: str, want: object) -> None:
    """Numbers and times convert to mz_timestamp implicitly when compared; nothing else."""
    assert loupe(sql) == want


def test_mz_now_is_an_mz_timestamp_comparable_with_times() -> None:
    """mz_now() is the query time as mz_timestamp; comparisons with timestamps convert them."""
    now = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert loupe("SELECT mz_now()", query_time=now) == (now, "mz_timestamp")
    later = "SELECT mz_now() < timestamptz '2024-01-01 00:00:01+00'"
    assert loupe(later, query_time=now) == (True, "bool")
    assert loupe("SELECT mz_now() <= 1704067200000", query_time=now) == (True, "bool")
