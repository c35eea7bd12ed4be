"""Every column type through a table, against PostgreSQL: insert, select, ``::text``, result types.

The same ``CREATE TABLE`` and ``INSERT`` (quoted literals, parsed as the
column's type) run on Loupe and on a real PostgreSQL; the stored values,
their text output and the types of the result columns must agree. numeric
text is compared as a number: Loupe prints numeric as Materialize does,
without trailing zeros.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from loupe.sqltypes import TYPES, is_list, lookup

# (column type as written, input literals). Each value round-trips through one table.
CASES = [
    ("integer", ["42", "-2147483648"]),
    ("bigint", ["9000000000", "-1"]),
    ("text", ["hello", ""]),
    ("varchar(5)", ["abc"]),
    ("boolean", ["t", "false"]),
    ("double precision", ["1.5", "0.1", "-0"]),
    ("numeric", ["12345.678", "-0.5"]),
    ("numeric(6,2)", ["3.14159", "1.5"]),
    ("date", ["2024-04-05"]),
    ("time", ["03:04:05", "23:59:59.5"]),
    ("timestamp", ["2024-01-02 03:04:05", "2024-01-02 03:04:05.25"]),
    ("timestamp without time zone", ["1999-12-31 23:59:59"]),
    ("timestamptz", ["2024-04-05 12:00:00+02", "2024-04-05 12:00:00"]),
    ("timestamp with time zone", ["2000-01-01 00:00:00.5+00"]),
    ("uuid", ["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "{00000000000000000000000000000001}"]),
    ("integer[]", ["{1,NULL,-3}", "{}"]),
    ("bigint[]", ["{9000000000}"]),
    ("text[]", ['{"a b",c,"","NULL",NULL}', '{"x\\"y"}']),
    ("boolean[]", ["{t,false}"]),
    ("double precision[]", ["{1.5,-0}"]),
    ("date[]", ["{2024-01-02}"]),
    ("time[]", ["{03:04:05}"]),
    ("timestamp[]", ['{"2024-01-02 03:04:05"}']),
    ("timestamptz[]", ['{"2024-01-02 03:04:05+00"}']),
    ("uuid[]", ["{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"]),
    ("jsonb", ['{"b": [1, 2], "a":1, "aa": {"z":null}}', '"text"', "null", "1.50"]),
    ("jsonb[]", ['{"{\\"a\\": 1}",2,NULL}']),
]

# Materialize's own types, which PostgreSQL lacks: (type, PostgreSQL's type holding the same
# values, input literals). The values and their text must be what PostgreSQL stores in it.
MATERIALIZE_CASES = [
    ("uint2", "integer", ["0", "65535"]),
    ("uint4", "bigint", ["4294967295", "7"]),
    ("uint8", "numeric", ["18446744073709551615", "0"]),
    ("mz_timestamp", "numeric", ["1700000000000", "0"]),
    # A list's values and text are those of an array of its elements.
    ("integer list", "integer[]", ["{1,NULL,3}", "{}"]),
    ("text list", "text[]", ['{"a b",c,"",NULL}']),
]


def _same(loupe: Any, postgres: Any) -> bool:
    if isinstance(postgres, Decimal):
        # Loupe's numeric drops trailing zeros (Materialize); compare by value.
        return Decimal(str(loupe)) == postgres
    return type(loupe) is type(postgres) and loupe == postgres


def _same_text(loupe: str, postgres: str, column_type: str) -> bool:
    if column_type.startswith("numeric"):
        return Decimal(loupe) == Decimal(postgres)
    return loupe == postgres


@pytest.fixture
def postgres(postgres_url: str) -> Any:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET TimeZone = 'UTC'")
        yield connection


@pytest.mark.parametrize(("column_type", "literals"), CASES, ids=[c for c, _ in CASES])
async def test_every_column_type_round_trips_as_in_postgresql(
    tables: Any, postgres: Any, column_type: str, literals: list[str]
) -> None:
    """Stored values, their ``::text`` and the result column types are PostgreSQL's."""
    session = await tables.session()
    table = "rt_" + "".join(ch if ch.isalnum() else "_" for ch in column_type)
    values = ", ".join(f"({i}, '{literal}')" for i, literal in enumerate(literals))
    statements = [
        f"CREATE TABLE {table} (k int, v {column_type})",
        f"INSERT INTO {table} VALUES {values}, ({len(literals)}, NULL)",
    ]
    postgres.execute(f"DROP TABLE IF EXISTS {table}")
    for sql in statements:
        postgres.execute(sql)
        await tables.tag(session, sql)
    query = f"SELECT k, v, v::text FROM {table} ORDER BY k"

    expected = postgres.execute(query)
    expected_oids = [column.type_code for column in expected.description]
    expected_rows = expected.fetchall()

    responses = await tables.execute(session, query)
    loupe_types = [
        c.type for r in responses if r.HasField("description") for c in r.description.columns
    ]
    rows = await tables.rows(session, query)

    assert len(rows) == len(expected_rows)
    for row, want in zip(rows, expected_rows, strict=True):
        assert row[0] == want[0]
        assert _same(row[1], want[1]) or (row[1] is None and want[1] is None), (row, want)
        if want[2] is None:
            assert row[2] is None
        else:
            assert _same_text(row[2], want[2], column_type), (row, want)
    # varchar is text in Loupe's expressions (its length is checked on assignment only).
    pg_oids = [TYPES["text"].oid if oid == TYPES["varchar"].oid else oid for oid in expected_oids]
    assert [TYPES[t].oid for t in loupe_types] == pg_oids


@pytest.mark.parametrize(
    ("column_type", "holder", "literals"),
    MATERIALIZE_CASES,
    ids=[c for c, _, _ in MATERIALIZE_CASES],
)
async def test_materialize_column_types_round_trip(
    tables: Any, postgres: Any, column_type: str, holder: str, literals: list[str]
) -> None:
    """Values and ``::text`` as PostgreSQL keeps them in the type holding them; the result
    column has the type's own OID."""
    session = await tables.session()
    table = "rt_" + column_type.replace(" ", "_")
    values = ", ".join(f"({i}, '{literal}')" for i, literal in enumerate(literals))
    for sql, holding in (
        (f"CREATE TABLE {table} (k int, v {column_type})", f"(k int, v {holder})"),
        (f"INSERT INTO {table} VALUES {values}, ({len(literals)}, NULL)", None),
    ):
        await tables.tag(session, sql)
        if holding is not None:
            postgres.execute(f"DROP TABLE IF EXISTS {table}")
            postgres.execute(f"CREATE TABLE {table} {holding}")
        else:
            postgres.execute(sql)
    query = f"SELECT k, v, v::text FROM {table} ORDER BY k"
    expected = postgres.execute(query).fetchall()
    responses = await tables.execute(session, query)
    loupe_types = [
        c.type for r in responses if r.HasField("description") for c in r.description.columns
    ]
    entry = lookup(column_type)
    assert entry is not None
    assert loupe_types == ["int4", entry.name, "text"]
    assert [TYPES[t].oid for t in loupe_types] == [23, entry.oid, 25]
    rows = await tables.rows(session, query)

    def plain(value: Any) -> Any:
        return int(value) if isinstance(value, int | Decimal) else value

    assert [(k, plain(v), t) for k, v, t in rows] == [(k, plain(v), t) for k, v, t in expected]


async def test_unsigned_columns_refuse_values_out_of_range(tables: Any) -> None:
    """A negative or too large value is 22003; a non-number 22P02."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE rt_bounds (u uint2)")
    for literal, code in (("-1", "22003"), ("65536", "22003"), ("'x'", "22P02")):
        error = await tables.error(session, f"INSERT INTO rt_bounds VALUES ({literal})")
        assert error.code == code


def test_every_table_column_type_has_a_round_trip_case() -> None:
    """A new column type in ``loupe.sqltypes`` must be added to CASES above."""
    covered = {lookup(column_type).name for column_type, _, _ in MATERIALIZE_CASES}  # type: ignore[union-attr]
    for column_type, _ in CASES:
        entry = lookup(column_type.split("(")[0])
        assert entry is not None
        covered.add(entry.name)
    # Lists share their text and storage with arrays: two element types stand for all.
    wanted = {t.name for t in TYPES.values() if t.column_type and not is_list(t.name)}
    assert wanted <= covered


def test_timestamp_values_keep_their_kind_on_the_wire() -> None:
    """A timestamp without time zone stays naive through ``common.v1.Value``; time too."""
    from loupe.common.values import from_value, to_value

    naive = dt.datetime(2024, 1, 2, 3, 4, 5, 250000)
    aware = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    clock = dt.time(23, 59, 59, 500000)
    assert from_value(to_value(naive)) == naive
    assert from_value(to_value(naive)).tzinfo is None
    assert from_value(to_value(aware)) == aware
    assert from_value(to_value(clock)) == clock
