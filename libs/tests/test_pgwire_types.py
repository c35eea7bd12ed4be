"""``loupe.pgwire.types`` against a real PostgreSQL, byte for byte.

For each sample value PostgreSQL sends its text and its binary form
(``exec_params`` with result format 0 / 1: the raw bytes, no loader in
between). From the Python value Loupe holds for it (psycopg's reading of
PostgreSQL's value, put in Loupe's representation), ``encode_text`` and
``encode_binary`` must give the same bytes; decoding PostgreSQL's bytes as a
Bind parameter must give the value back. The session is PostgreSQL's default
but for ``TimeZone`` UTC, as Loupe's sessions are.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal, localcontext
from typing import Any

import psycopg
import pytest

from loupe.common.jsonb import Jsonb
from loupe.common.jsonb import text as jsonb_text
from loupe.interval import parse_interval
from loupe.pgwire import types

# Loupe's numeric values carry 16 decimals (NUMERIC_SCALE); its output drops trailing
# zeros (Materialize), so the samples have none for PostgreSQL's bytes to compare.
_LOUPE_SCALE = Decimal("1e-16")


def _numeric(value: Decimal) -> Decimal:
    if value.is_nan() or value.is_infinite():
        return value
    with localcontext() as context:
        context.prec = 38
        return value.quantize(_LOUPE_SCALE)


def _same_value(left: Any, right: Any) -> bool:
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            _same_value(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, Decimal) and isinstance(right, Decimal) and left.is_nan():
        return right.is_nan()
    if isinstance(right, Jsonb):  # a parameter is the parsed document
        return jsonb_text(left) == right
    if isinstance(left, dt.datetime) and isinstance(right, dt.datetime):
        return left == right and (left.tzinfo is None) == (right.tzinfo is None)
    return (type(left) is type(right) and left == right) or (left is None and right is None)


# (PostgreSQL type, Loupe type, literals). Literals are what PostgreSQL reads.
CASES: list[tuple[str, str, list[str]]] = [
    ("boolean", "bool", ["t", "f"]),
    ("smallint", "int2", ["0", "-32768", "32767"]),
    ("integer", "int4", ["0", "-2147483648", "2147483647", "42"]),
    ("bigint", "int8", ["-9223372036854775808", "9223372036854775807", "-1"]),
    (
        "real",
        "float4",
        [
            "0",
            "-0",
            "0.1",
            "1.5",
            "123456",
            "1000000",
            "1234567",
            "0.0001",
            "0.00001",
            "3.4028235e38",
            "1.17549435e-38",
            "1e-45",
            "-2.5e-7",
            "NaN",
            "Infinity",
            "-Infinity",
        ],
    ),
    (
        "double precision",
        "float8",
        [
            "0",
            "-0",
            "0.1",
            "1.0000000000000002",
            "123456789012345",
            "1e15",
            "0.0001",
            "0.00001",
            "5e-324",
            "1.7976931348623157e308",
            "-3.14159",
            "NaN",
            "Infinity",
            "-Infinity",
        ],
    ),
    (
        "numeric",
        "numeric",
        [
            "0",
            "1",
            "-1",
            "12345.678",
            "-0.5",
            "0.0001",
            "0.00001234",
            "10000",
            "100000000",
            "9999.9999",
            "1234567890123456789012.0123456789012345",
            "-0.0000000000000001",
            "NaN",
        ],
    ),
    ("text", "text", ["hello", "", "ünïcødé 😀", 'with "quote" and \\ backslash', "a\tb\nc"]),
    ("character varying", "varchar", ["abc", ""]),
    ("bytea", "bytea", ["\\x", "\\x00ff10", "\\x5c22"]),
    ("date", "date", ["2024-02-29", "2000-01-01", "1999-12-31", "0001-01-01", "9999-12-31"]),
    ("time", "time", ["00:00:00", "23:59:59.999999", "03:04:05.5", "12:00:00.000001"]),
    (
        "timestamp",
        "timestamp",
        [
            "2024-01-02 03:04:05",
            "2024-02-29 23:59:59.999999",
            "1999-12-31 23:59:59.5",
            "0001-01-01 00:00:00",
            "9999-12-31 23:59:59.999999",
        ],
    ),
    (
        "timestamptz",
        "timestamptz",
        [
            "2024-01-02 03:04:05+00",
            "2024-01-02 03:04:05.123456+05:30",
            "1970-01-01 00:00:00-08",
            "1999-12-31 23:59:59.25+00",
        ],
    ),
    (
        "interval",
        "interval",
        [
            "1 year 2 mons 3 days 04:05:06.5",
            "-1 days +02:00:00",
            "-1 year -2 mons",
            "1 mon -1 days",
            "00:00:00",
            "-00:00:00.000001",
            "25:00:00",
            "3 days",
            "-2 years +3 mons -4 days +05:06:07",
            "178000000 years",
            "2562047788:00:54.775807",
        ],
    ),
    (
        "uuid",
        "uuid",
        ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000"],
    ),
    (
        "jsonb",
        "jsonb",
        ['{"b": [1, 2.50], "a": null, "aa": {"z": true}}', '"ü\\n"', "1.50", "[]", "null"],
    ),
    ("integer[]", "_int4", ["{1,NULL,-3}", "{}", "{NULL}"]),
    ("bigint[]", "_int8", ["{9000000000,-1}"]),
    ("smallint[]", "_int2", ["{1,2}"]),
    ("boolean[]", "_bool", ["{t,f,NULL}"]),
    (
        "text[]",
        "_text",
        [
            '{"a b",c,"","NULL",NULL,"null","x\\"y","back\\\\slash","{brace}","comma,"}',
            '{"tab\\there",ünï,"😀 x"}',
            "{ a }",
            '{"nbsp\u00a0inside"}',
        ],
    ),
    ("double precision[]", "_float8", ["{1.5,NaN,-Infinity,0.1,1e20}"]),
    ("real[]", "_float4", ["{1.5,0.1,1e10}"]),
    ("numeric[]", "_numeric", ["{1.5,-0.25,NaN,NULL,0}"]),
    ("date[]", "_date", ["{2024-02-29,NULL,1999-12-31}"]),
    ("time[]", "_time", ["{03:04:05,23:59:59.5}"]),
    ("timestamp[]", "_timestamp", ['{"2024-01-02 03:04:05.25"}']),
    ("timestamptz[]", "_timestamptz", ['{"2024-01-02 03:04:05+00",NULL}']),
    ("interval[]", "_interval", ['{"1 day","-1 mons +03:00:00",NULL,00:00:00}']),
    ("uuid[]", "_uuid", ["{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}"]),
    ("jsonb[]", "_jsonb", ['{"{\\"a\\": 1}",2,NULL,"\\"s p\\""}']),
    ("bytea[]", "_bytea", ['{"\\\\x0102",NULL}']),
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


def _raw(connection: psycopg.Connection, sql: str, result_format: int) -> bytes:
    """The bytes PostgreSQL sends for the one value ``sql`` selects."""
    result = connection.pgconn.exec_params(sql.encode(), [], result_format=result_format)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    value = result.get_value(0, 0)
    assert value is not None
    return bytes(value)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _loupe_value(value: Any, loupe_type: str, pg_text: str) -> Any:
    """psycopg's reading of PostgreSQL's value, as Loupe holds a value of ``loupe_type``."""
    element = types._element(loupe_type)
    if element is not None:
        from loupe.dataflow.containers import split_literal

        texts = split_literal(pg_text)
        return [
            None if v is None or t is None else _loupe_value(v, element, t)
            for v, t in zip(value, texts, strict=True)
        ]
    if loupe_type == "numeric":
        return _numeric(value)
    if loupe_type == "interval":
        return parse_interval(pg_text)
    if loupe_type == "jsonb":
        return Jsonb(pg_text)
    return value


def _samples() -> Iterator[Any]:
    for pg_type, loupe_type, literals in CASES:
        for literal in literals:
            yield pytest.param(pg_type, loupe_type, literal, id=f"{loupe_type}:{literal}")


@pytest.mark.parametrize(("pg_type", "loupe_type", "literal"), list(_samples()))
def test_values_encode_and_decode_as_postgresql_sends_them(
    postgres: psycopg.Connection, pg_type: str, loupe_type: str, literal: str
) -> None:
    """encode_text/encode_binary give PostgreSQL's bytes; decode_* read them back."""
    sql = f"SELECT {_literal(literal)}::{pg_type}"
    pg_text = _raw(postgres, sql, 0)
    pg_binary = _raw(postgres, sql, 1)
    loaded = postgres.execute(sql).fetchone()
    assert loaded is not None
    value = _loupe_value(loaded[0], loupe_type, pg_text.decode())

    assert types.encode_text(value, loupe_type) == pg_text
    assert types.encode_binary(value, loupe_type) == pg_binary

    oid = types.type_oid(loupe_type)
    for decoded in (types.decode_text(pg_text, oid), types.decode_binary(pg_binary, oid)):
        assert _same_value(decoded, value), (decoded, value)


def _pg_type_row(connection: psycopg.Connection, pg_type: str) -> tuple[int, int]:
    row = connection.execute(
        "SELECT t.oid::int, t.typlen::int FROM pg_type t WHERE t.oid = %s::regtype",
        [pg_type],
    ).fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.parametrize(
    ("pg_type", "loupe_type"),
    [
        *((pg, loupe) for pg, loupe, _ in CASES),
        ("oid", "oid"),
        ("regclass", "regclass"),
        ("name", "name"),
        ('"char"', "char"),
        ("json", "json"),
        ("character", "bpchar"),
        ("unknown", "unknown"),
    ],
)
def test_oids_and_sizes_are_pg_types(
    postgres: psycopg.Connection, pg_type: str, loupe_type: str
) -> None:
    """type_oid and type_size are pg_type's oid and typlen."""
    assert (types.type_oid(loupe_type), types.type_size(loupe_type)) == _pg_type_row(
        postgres, pg_type
    )


# Materialize's own types: (Loupe type, PostgreSQL type with the same bytes for these
# values, literals). Unsigned integers print their digits and send big-endian.
MATERIALIZE_CASES = [
    ("uint2", "smallint", ["0", "32767"]),
    ("uint4", "integer", ["0", "2147483647"]),
    ("uint8", "bigint", ["0", "9223372036854775807"]),
    ("mz_timestamp", "bigint", ["1700000000000"]),
]


@pytest.mark.parametrize(("loupe_type", "pg_type", "literals"), MATERIALIZE_CASES)
def test_unsigned_integers_are_sent_as_their_digits_and_big_endian(
    postgres: psycopg.Connection, loupe_type: str, pg_type: str, literals: list[str]
) -> None:
    """What PostgreSQL sends for the same non-negative value of its signed type."""
    for literal in literals:
        sql = f"SELECT {literal}::{pg_type}"
        assert types.encode_text(int(literal), loupe_type) == _raw(postgres, sql, 0)
        assert types.encode_binary(int(literal), loupe_type) == _raw(postgres, sql, 1)
        oid = types.type_oid(loupe_type)
        assert types.decode_text(literal.encode(), oid) == int(literal)
        assert types.decode_binary(types.encode_binary(int(literal), loupe_type), oid) == int(
            literal
        )
    top = 2 ** (8 * types.type_size(loupe_type)) - 1
    assert (
        types.decode_binary(b"\xff" * types.type_size(loupe_type), types.type_oid(loupe_type))
        == top
    )
    with pytest.raises(ValueError):
        types.decode_text(b"-1", types.type_oid(loupe_type))


@pytest.mark.parametrize(
    ("loupe_type", "pg_type", "literal"),
    [
        ("int4 list", "integer[]", "{1,NULL,-3}"),
        ("text list", "text[]", '{"a b",c,"",NULL,"NULL"}'),
        ("timestamptz list", "timestamptz[]", '{"2024-01-02 03:04:05+00"}'),
    ],
)
def test_lists_print_as_arrays_and_have_no_binary_format(
    postgres: psycopg.Connection, loupe_type: str, pg_type: str, literal: str
) -> None:
    """A list's text is its array's (Materialize); binary is refused with 0A000."""
    from loupe.common.errors import LoupeError

    sql = f"SELECT {_literal(literal)}::{pg_type}"
    loaded = postgres.execute(sql).fetchone()
    assert loaded is not None
    assert types.encode_text(loaded[0], loupe_type) == _raw(postgres, sql, 0)
    with pytest.raises(LoupeError) as refused:
        types.encode_binary(loaded[0], loupe_type)
    assert refused.value.code == "0A000"


def test_lists_of_lists_print_their_lists_bare() -> None:
    """Materialize prints ``{{1,2},{3}}`` (no quotes around inner lists)."""
    assert types.encode_text([[1, 2], [3], None], "uint8 list list") == b"{{1,2},{3},NULL}"


# Parameters in spellings clients send (psycopg, JDBC, asyncpg's text fallback): PostgreSQL
# reads each; decode_text must read the same value PostgreSQL's binary output holds.
PARAMETER_SPELLINGS = [
    ("boolean", ["true", "FALSE", "yes", "off", "1", " t ", "n"]),
    ("integer", [" 42 ", "+7", "-0"]),
    ("double precision", ["1e3", ".5", "-inf", "nan", "  2.5  ", "Infinity", "4.9e-324"]),
    ("real", ["0.1", "3.4028235e38", "1.4e-45", "-1e-3"]),
    ("numeric", ["1.50", "-.5", "1e3", "  7 ", "nan"]),
    (
        "timestamptz",
        [
            "2024-01-02 03:04:05+01:00",
            "2024-01-02T03:04:05Z",
            "2024-01-02 03:04:05.123-0830",
            "2024-01-02",
            "2024-01-02 03:04",
            "2024-01-02 03:04:05.1234567",
            "2024-01-02 03:04:05 Europe/Paris",
            "2024-07-01 03:04:05 America/New_York",
            "2024-03-31 02:30:00 Europe/Berlin",  # in the hour a DST change skips
            "2024-01-02 03:04:05 UTC",
        ],
    ),
    ("timestamp", ["2024-01-02T03:04:05", "2024-01-02 03:04:05+05", "2024-01-02"]),
    ("date", ["2024-1-2", " 2024-02-29 "]),
    ("time", ["3:04", "03:04:05.123"]),
    ("interval", ["1 day 02:00", "P1Y2M3DT4H5M6S", "@ 3 days ago", "90"]),
    ("uuid", ["{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}", "a0eebc999c0b4ef8bb6d6bb9bd380a11"]),
    ("bytea", ["\\x0aFF", "abc\\\\d\\001"]),
    ("integer[]", ["{ 1 , 2 }", '{"3",NULL}']),
    ("text[]", ['{a,"b,c"}', "{}"]),
]


@pytest.mark.parametrize(
    ("pg_type", "spelling"),
    [(pg_type, s) for pg_type, spellings in PARAMETER_SPELLINGS for s in spellings],
)
def test_text_parameters_read_as_postgresql_reads_them(
    postgres: psycopg.Connection, pg_type: str, spelling: str
) -> None:
    """decode_text of a client's spelling is what PostgreSQL makes of it."""
    oid = _pg_type_row(postgres, pg_type)[0]
    result = postgres.pgconn.exec_params(b"SELECT $1", [spelling.encode()], [oid], result_format=1)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    expected = types.decode_binary(bytes(result.get_value(0, 0) or b""), oid)
    assert _same_value(types.decode_text(spelling.encode(), oid), expected)


@pytest.mark.parametrize(
    ("pg_type", "spelling"),
    [
        ("boolean", "maybe"),
        ("boolean", "o"),
        ("integer", "1.5"),
        ("integer", "2147483648"),
        ("smallint", "40000"),
        ("bigint", "1_000"),
        ("double precision", "1,5"),
        ("double precision", "1e400"),
        ("double precision", "-1e-400"),
        ("real", "1e40"),
        ("real", "1e-50"),
        ("numeric", "1_0"),
        ("numeric", "abc"),
        ("date", "2024-02-30"),
        ("time", "25:00"),
        ("timestamptz", "2024-01-02 03:04:05 Nowhere/Special"),
        ("uuid", "not-a-uuid"),
        ("jsonb", "{nope"),
        ("integer[]", "{1,{2}}"),
        ("integer[]", "1,2"),
    ],
)
def test_malformed_text_parameters_are_refused_as_postgresql_refuses_them(
    postgres: psycopg.Connection, pg_type: str, spelling: str
) -> None:
    """Where PostgreSQL's input function errors, decode_text raises ValueError."""
    oid = _pg_type_row(postgres, pg_type)[0]
    result = postgres.pgconn.exec_params(b"SELECT $1", [spelling.encode()], [oid])
    assert result.status == psycopg.pq.ExecStatus.FATAL_ERROR
    with pytest.raises(ValueError):
        types.decode_text(spelling.encode(), oid)


def test_malformed_binary_parameters_are_refused() -> None:
    """Short data, bad numeric signs, a jsonb version other than 1: ValueError."""
    for data, loupe_type in [
        (b"\x00\x01", "int4"),
        (b"\x00\x00\x00\x00\x80\x00\x00\x00", "numeric"),
        (b"\x00\x00\x00\x00\x00\x00\x80\x00", "numeric"),
        (b"\x02{}", "jsonb"),
        (b"\x00" * 15, "uuid"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x17", "_int4"),
    ]:
        with pytest.raises(ValueError):
            types.decode_binary(data, types.type_oid(loupe_type))


def test_unspecified_parameters_are_text_and_param_type_names_bind() -> None:
    """OID 0 is text; character types bind as text, json as jsonb, Loupe's own by name."""
    assert types.decode_text(b"12", 0) == "12"
    assert types.decode_binary(b"12", 0) == "12"
    assert types.param_type_name(0) is None
    names: dict[int, str | None] = {
        1043: "text",
        1042: "text",
        19: "text",
        114: "jsonb",
        3802: "jsonb",
        23: "int4",
        1007: "_int4",
        16462: "uint4",
        1184: "timestamptz",
        99999: None,
    }
    assert {oid: types.param_type_name(oid) for oid in names} == names


def test_every_column_type_has_a_wire_case() -> None:
    """A new column type in loupe.sqltypes must get samples here (text and binary)."""
    from loupe.sqltypes import TYPES, is_list

    covered = {c[1] for c in CASES} | {c[0] for c in MATERIALIZE_CASES}
    missing = [
        t.name
        for t in TYPES.values()
        if t.column_type and not is_list(t.name) and t.name not in covered
    ]
    assert missing == []


def test_uuid_values_may_be_held_as_text() -> None:
    """A uuid held as its canonical text (builtin relations) encodes as a UUID does."""
    value = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert types.encode_binary(value, "uuid") == uuid.UUID(value).bytes
    assert types.encode_text(value, "uuid") == value.encode()
