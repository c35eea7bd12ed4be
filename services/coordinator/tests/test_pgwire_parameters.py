"""Bind parameters as a PostgreSQL-wire client sends them, through Loupe's binding.

PostgreSQL encodes each sample (text and binary, the bytes a client would
put in a Bind message); ``loupe.pgwire.types`` decodes them, the parameter is
bound the way the server binds it (``Parameter(value, param_type_name(oid) or
inline_type(value))``) and ``SELECT $1`` runs on Loupe's engine. The result
column must have PostgreSQL's type for ``SELECT $1::type`` and its value must
print as PostgreSQL prints it.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from loupe.coordinator.constant import evaluate_constant
from loupe.coordinator.sql.params import Parameter, bind, inline_type
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query
from loupe.pgwire import types

SAMPLES = [
    ("boolean", "t"),
    ("smallint", "-32768"),
    ("integer", "42"),
    ("bigint", "9223372036854775807"),
    ("real", "1.5"),
    ("double precision", "-0.1"),
    ("double precision", "Infinity"),
    ("numeric", "12345.678"),
    ("text", 'ünï "q" 😀'),
    ("character varying", "abc"),
    ("date", "2024-02-29"),
    ("time", "23:59:59.999999"),
    ("timestamp", "1999-12-31 23:59:59.5"),
    ("timestamptz", "2024-01-02 03:04:05.123456+05:30"),
    ("interval", "-1 years +2 mons -3 days +04:05:06.5"),
    ("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("jsonb", '{"b": [1, 2.50], "a": null}'),
    ("jsonb", "7"),
    ("integer[]", "{1,NULL,-3}"),
    ("smallint[]", "{1,2}"),
    ("text[]", '{"a b",NULL,"","x\\"y"}'),
    ("numeric[]", "{1.5,-0.25}"),
    ("interval[]", '{"1 day",NULL}'),
    ("timestamptz[]", '{"2024-01-02 03:04:05+00"}'),
    ("jsonb[]", '{"{\\"a\\": 1}",NULL}'),
]


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


def _postgres(connection: psycopg.Connection, sql: str, result_format: int) -> tuple[int, bytes]:
    result = connection.pgconn.exec_params(sql.encode(), [], result_format=result_format)
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    return result.ftype(0), bytes(result.get_value(0, 0) or b"")


@pytest.mark.parametrize("result_format", [0, 1], ids=["text", "binary"])
@pytest.mark.parametrize(("pg_type", "literal"), SAMPLES)
def test_parameters_bind_as_postgresql_reads_them(
    postgres: psycopg.Connection, pg_type: str, literal: str, result_format: int
) -> None:
    """A Bind parameter of PostgreSQL's encoding selects the value PostgreSQL selects."""
    escaped = literal.replace("'", "''")
    oid, data = _postgres(postgres, f"SELECT '{escaped}'::{pg_type}", result_format)
    _, expected_text = _postgres(postgres, f"SELECT '{escaped}'::{pg_type}", 0)
    decode = types.decode_binary if result_format else types.decode_text
    value = decode(data, oid)
    parameter = Parameter(value, types.param_type_name(oid) or inline_type(value))
    bound = bind(parse_one("SELECT $1"), [parameter])
    assert isinstance(bound, Query)
    columns, rows = evaluate_constant(bound.expression)
    column_type = columns[0][1]
    # varchar is text in Loupe's expressions (as in Materialize's).
    assert types.type_oid(column_type) == (25 if oid == 1043 else oid)
    # (The numeric samples have no trailing zeros: Loupe's numeric keeps none.)
    assert types.encode_text(rows[0][0], column_type) == expected_text


@pytest.mark.parametrize("pg_type", ["integer[]", "text[]", "smallint", "uuid"])
def test_a_null_parameter_keeps_its_declared_type(
    postgres: psycopg.Connection, pg_type: str
) -> None:
    """A NULL of a declared OID binds as that type's NULL."""
    oid, _ = _postgres(postgres, f"SELECT NULL::{pg_type}", 0)
    bound = bind(parse_one("SELECT $1"), [Parameter(None, types.param_type_name(oid) or "")])
    assert isinstance(bound, Query)
    columns, rows = evaluate_constant(bound.expression)
    assert (types.type_oid(columns[0][1]), rows[0][0]) == (oid, None)
