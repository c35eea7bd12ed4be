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

from loupe.interval import Interval
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
    # Months, days and microseconds stay apart: '25 hours' is not '1 day 01:00:00'.
    (
        "interval",
        [
            "1 year 2 mons 3 days 04:05:06.5",
            "25 hours",
            "-1 day +02:00",
            "1.5 months",
            "@ 3 days ago",
            "-1 year -2 mons",
            "0",
        ],
    ),
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
    ("interval[]", ['{"1 day","2 mons 03:00:00",NULL}']),
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


def _as_psycopg_reads(value: Interval) -> dt.timedelta:
    """An interval as psycopg reads PostgreSQL's text of it: a year 365 days, a month 30."""
    years = abs(value.months) // 12 * (1 if value.months >= 0 else -1)
    months = value.months - years * 12
    return dt.timedelta(days=years * 365 + months * 30 + value.days, microseconds=value.micros)


def _same(loupe: Any, postgres: Any) -> bool:
    if isinstance(loupe, list) and isinstance(postgres, list):  # arrays, element by element
        return len(loupe) == len(postgres) and all(
            (a is None and b is None) or (a is not None and _same(a, b))
            for a, b in zip(loupe, postgres, strict=True)
        )
    if isinstance(loupe, Interval):
        return _as_psycopg_reads(loupe) == postgres
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
    loupe_oids, rows, expected_oids, expected_rows = await _both(tables, session, postgres, query)

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
    assert loupe_oids == pg_oids


async def _both(
    tables: Any, session: str, postgres: Any, query: str
) -> tuple[list[int], list[tuple], list[int], list[tuple]]:
    """(result column OIDs, rows) of ``query`` from Loupe, then from PostgreSQL."""
    expected = postgres.execute(query)
    expected_oids = [column.type_code for column in expected.description]
    expected_rows = expected.fetchall()
    responses = await tables.execute(session, query)
    loupe_oids = [
        TYPES[c.type].oid
        for r in responses
        if r.HasField("description")
        for c in r.description.columns
    ]
    return loupe_oids, await tables.rows(session, query), expected_oids, expected_rows


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
    # numeric travels exact, as Materialize prints it: no trailing zeros, no exponent.
    for number, text in [("1.5000000000000000", "1.5"), ("0E-16", "0"), ("1E+2", "100")]:
        assert to_value(Decimal(number)).numeric_value == text
        assert from_value(to_value(Decimal(number))) == Decimal(number)


NUMERIC_TABLE = (
    "CREATE TABLE amounts (g int, price numeric(20,2), qty numeric, big bigint, f double precision)"
)
NUMERIC_ROWS = (
    "INSERT INTO amounts VALUES (1, '0.10', 3, 9223372036854775807, 0.5),"
    " (1, '0.20', 1.5, 1, 0.25), (2, '12345678901234567.89', '0.001', 5, 1),"
    " (2, NULL, NULL, NULL, NULL), (3, 2.675, '-0.5', -7, 2)"
)
NUMERIC_QUERIES = [
    "SELECT g, sum(price), avg(price), min(qty), max(qty), sum(big), avg(big),"
    " sum(price * qty), count(price), avg(f) FROM amounts GROUP BY g ORDER BY g",
    "SELECT g, price + 0.2 = 0.3, price * 2, price + qty, price / 4, price + f, price + big,"
    " -price, price % 0.15 FROM amounts ORDER BY g, price",
    "SELECT sum(price), avg(qty), sum(big), min(price), max(price) FROM amounts",
    "SELECT g FROM amounts WHERE price + 0.20 = 0.30",
]


def _agrees(loupe: Any, postgres: Any) -> bool:
    """Equal; numeric exactly, at the smaller of the two scales (see the numeric docs)."""
    if isinstance(postgres, Decimal):
        if not isinstance(loupe, Decimal):
            return False
        exponent = postgres.as_tuple().exponent
        assert isinstance(exponent, int)
        quantum = Decimal(1).scaleb(max(exponent, -16))
        return loupe.quantize(quantum) == postgres.quantize(quantum)
    if isinstance(postgres, float):
        return isinstance(loupe, float) and abs(loupe - postgres) <= 1e-12 * max(1, abs(postgres))
    return type(loupe) is type(postgres) and loupe == postgres


async def test_numeric_columns_are_exact_in_tables_expressions_and_aggregates(
    tables: Any, postgres: Any
) -> None:
    """numeric through a table, arithmetic and sum/avg/min/max: PostgreSQL's values and types."""
    session = await tables.session()
    postgres.execute("DROP TABLE IF EXISTS amounts")
    for sql in (NUMERIC_TABLE, NUMERIC_ROWS):
        postgres.execute(sql)
        await tables.tag(session, sql)
    for query in NUMERIC_QUERIES:
        loupe_oids, rows, expected_oids, expected_rows = await _both(
            tables, session, postgres, query
        )
        assert loupe_oids == expected_oids, query
        assert len(rows) == len(expected_rows), query
        for row, want in zip(rows, expected_rows, strict=True):
            for ours, theirs in zip(row, want, strict=True):
                assert (ours is None and theirs is None) or _agrees(ours, theirs), (
                    query,
                    row,
                    want,
                )


async def test_numeric_overflow_and_division_by_zero_are_postgresql_s_errors(
    tables: Any,
) -> None:
    """A numeric(p, s) value too wide is 22003 at INSERT; dividing by zero is 22012."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE narrow (x numeric(4,2))")
    error = await tables.error(session, "INSERT INTO narrow VALUES (123.456)")
    assert (error.code, error.message) == ("22003", "numeric field overflow")
    await tables.tag(session, "INSERT INTO narrow VALUES (12.345)")
    assert await tables.rows(session, "SELECT x, x::text FROM narrow") == [
        (Decimal("12.35"), "12.35")
    ]
    error = await tables.error(session, "SELECT x / 0 FROM narrow")
    assert error.code == "22012"


async def test_interval_columns_update_and_delete_by_span_as_in_postgresql(
    tables: Any, postgres: Any
) -> None:
    """UPDATE and DELETE on an interval column: WHERE compares by total span
    ('1 mon' = '30 days'), SET adds months first; the rows left are PostgreSQL's."""
    session = await tables.session()
    statements = [
        "CREATE TABLE spans (k int, v interval)",
        "INSERT INTO spans VALUES (1, '1 mon'), (2, '30 days'), (3, '25 hours'), "
        "(4, '1 year 1 day'), (5, NULL), (6, '-720:00:00')",
        "UPDATE spans SET v = v * 1.5 + interval '1 mon 01:00' WHERE v = interval '720 hours'",
        "UPDATE spans SET v = -v WHERE v < interval '0'",
        "DELETE FROM spans WHERE v > interval '1 year'",
    ]
    postgres.execute("DROP TABLE IF EXISTS spans")
    for sql in statements:
        postgres.execute(sql)
        await tables.tag(session, sql)
    query = "SELECT k, v::text FROM spans ORDER BY k"
    expected = postgres.execute(query).fetchall()
    assert [tuple(row) for row in await tables.rows(session, query)] == expected
