"""Scalar functions, row by row, against DuckDB: the planner's expression, the engine's evaluation.

Each expression is planned as ``SELECT r, <expr> FROM g`` (one Map over the
grid table) and evaluated by ``loupe.dataflow.expr.apply_mfp``; DuckDB runs
the same SQL (or a spelling with PostgreSQL's meaning where DuckDB's
differs). Rows are matched by ``r``.
"""

from __future__ import annotations

import datetime
import math
import random

import duckdb
import polars as pl
import pyarrow as pa
import pytest
import sqlglot

from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.dataflow.expr import apply_mfp, compile_scalar
from loupe.dataflow.types import polars_dtype
from loupe.plan import lir

from .harness import TEXTS, normalize

COLUMNS = (
    ("r", "int4"),
    ("i", "int4"),
    ("j", "int4"),
    ("s", "text"),
    ("p", "text"),
    ("f", "float8"),
    ("d", "date"),
    ("ts", "timestamp"),
    ("n", "numeric"),
    ("big", "int8"),
)
PATTERNS = ("a%", "%an%", "_p%", "%", "", "apple", "A%", "%,%", "é")
INTEGERS = (-7, -2, -1, 0, 1, 2, 3, 7, None)
NUMERICS = (-2.5, -1.25, 0.0, 0.5, 1.25, 2.675, 1234.5, None)
FLOATS = (-3.75, -1.25, -0.0, 0.1, 1.75, 9.0, 1e6, None)

# (PostgreSQL expression, DuckDB spelling when it differs)
EXPRESSIONS: tuple[tuple[str, str], ...] = (
    ("i + j", ""),
    ("i - j", ""),
    ("i * j", ""),
    ("CASE WHEN j <> 0 THEN i / j END", "CASE WHEN j <> 0 THEN i // j END"),
    ("CASE WHEN j <> 0 THEN i % j END", ""),
    ("-i", ""),
    ("abs(i)", ""),
    ("mod(i, 3)", ""),
    ("i = j", ""),
    ("i < j", ""),
    ("i >= j", ""),
    ("i <> j", ""),
    ("i BETWEEN j AND 3", ""),
    ("(i > 0) AND (j > 0)", ""),
    ("(i > 0) OR (j > 0)", ""),
    ("NOT (i > j)", ""),
    ("i IS NULL", ""),
    ("coalesce(i, j, 0)", ""),
    ("nullif(i, j)", ""),
    ("greatest(i, j)", ""),
    ("least(i, j, 3)", ""),
    ("CASE WHEN i > 0 THEN 'pos' WHEN i < 0 THEN 'neg' END", ""),
    ("CASE i WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END", ""),
    ("upper(s)", ""),
    ("lower(s)", ""),
    ("length(s)", ""),
    ("substr(s, 2)", ""),
    ("substr(s, 2, 3)", ""),
    ("strpos(s, p)", ""),
    ("replace(s, 'a', 'XY')", ""),
    ("s || p", ""),
    ("left(s, i)", ""),
    ("right(s, i)", ""),
    ("lpad(s, 7, '*-')", ""),
    ("rpad(s, 3)", ""),
    ("split_part(s, ',', 2)", ""),
    ("starts_with(s, 'a')", ""),
    ("trim(s)", ""),
    ("reverse(s)", ""),
    ("s LIKE p", ""),
    ("s ILIKE p", ""),
    ("s NOT LIKE 'a%'", ""),
    ("round(f)", "CASE WHEN f IS NULL THEN NULL ELSE round_even(f, 0) END"),
    ("ceil(f)", ""),
    ("floor(f)", ""),
    ("trunc(f)", ""),
    ("sqrt(abs(f))", ""),
    ("power(f, 2)", ""),
    ("sign(f)", ""),
    ("f * i", ""),
    ("f / 4", ""),
    ("d + i", ""),
    ("d - 1", ""),
    ("d - DATE '2024-01-01'", "d - DATE '2024-01-01'"),
    ("extract(year FROM d)", ""),
    ("extract(dow FROM d)", ""),
    ("extract(doy FROM d)", ""),
    ("date_trunc('month', d)", ""),
    ("ts + INTERVAL '1 day'", ""),
    ("ts - INTERVAL '90 minutes'", ""),
    ("d + INTERVAL '3 hours'", ""),
    ("ts - TIMESTAMP '2024-01-01 00:00:00'", ""),
    ("ts > d", ""),
    ("date_trunc('hour', ts)", ""),
    ("date_trunc('week', ts)", ""),
    ("date_trunc('quarter', ts)", ""),
    ("extract(hour FROM ts)", ""),
    ("extract(minute FROM ts)", ""),
    ("extract(epoch FROM ts)", ""),
    # DuckDB's second is whole; PostgreSQL's has the fraction.
    ("extract(second FROM ts)", "second(ts) + microsecond(ts) % 1000000 / 1e6"),
    ("CAST(ts AS date)", ""),
    ("CAST(ts AS text)", ""),
    ("n * 2 + i", ""),
    ("round(n)", ""),
    ("round(n, 1)", ""),
    ("trunc(n, 1)", ""),
    ("n / 3", ""),
    # numeric to integer rounds half away from zero; DuckDB's double casts round half to even.
    ("CAST(n AS int4)", "CAST(round(n) AS INTEGER)"),
    ("CAST(n AS int8) + big", "CAST(round(n) AS BIGINT) + big"),
    ("abs(big) - 1", ""),
    ("big * 3", ""),
    ("CASE WHEN i <> 0 THEN big / i END", "CASE WHEN i <> 0 THEN big // i END"),
    ("big % 7", ""),
    ("CASE WHEN i <> 0 THEN power(i, j) END", ""),
    ("sqrt(abs(big))", ""),
    ("exp(i)", ""),
    ("CASE WHEN f > 0 THEN ln(f) END", ""),
    ("CASE WHEN f > 0 THEN log(f) END", ""),
    ("CASE WHEN f > 0 THEN log(2, f) END", "CASE WHEN f > 0 THEN log(f) / log(2) END"),
    ("CAST(i AS numeric) / 7", ""),
    ("s ~ 'a.'", "regexp_matches(s, 'a.')"),
    ("s ~* '^a'", "regexp_matches(s, '^a', 'i')"),
    ("s !~ 'an'", "NOT regexp_matches(s, 'an')"),
    ("s ~ p", "regexp_matches(s, p)"),
    ("translate(s, 'ael', 'E')", ""),
    ("CASE WHEN i + 3 BETWEEN 1 AND 12 THEN make_date(2024, i + 3, j + 10) END", ""),
    ("CAST(i AS text)", ""),
    ("CAST(CAST(i AS text) AS int4)", ""),
    ("coalesce(s, p, 'none')", ""),
    ("nullif(s, '')", ""),
    ("greatest(s, p)", ""),
    ("s < p", ""),
    ("CASE WHEN s LIKE '%a%' THEN length(s) ELSE -1 END", ""),
    ("CASE WHEN i > 0 AND j >= 0 THEN substr(s, i, j) END", ""),
    ("CASE WHEN p <> '' THEN split_part(s, p, 2) END", ""),
    ("CASE WHEN p <> '' THEN lpad(s, i + 5, p) END", ""),
    ("CASE WHEN p <> '' THEN rpad(s, j + 4, p) END", ""),
    ("replace(s, p, '+')", ""),
    ("replace(s, 'an', p)", ""),
    ("trim(s, p)", ""),
    ("ltrim(s, p)", ""),
    ("rtrim(s, 'e')", ""),
    ("position(p IN s)", ""),
    ("starts_with(s, p)", ""),
    ("s || p || i", ""),
    ("ceil(f) * i", ""),
    ("upper(s) LIKE 'A%'", ""),
    ("CAST(d AS text)", ""),
    ("concat(s, '-', i)", ""),
    ("concat_ws('/', s, p)", ""),
    ("s || i", ""),
    ("strpos(s, 'an')", ""),
    ("CAST(i AS float8) / 3", ""),
)


def _minutes(count: int, chooser: random.Random) -> datetime.timedelta:
    """``count`` minutes, sometimes with a quarter second (fractional seconds print differently)."""
    return datetime.timedelta(minutes=count, microseconds=chooser.choice((0, 250000)))


def _grid(seed: int = 11, rows: int = 160) -> list[tuple[object, ...]]:
    chooser = random.Random(seed)
    day = datetime.date(2024, 1, 1)
    moment = datetime.datetime(2024, 2, 28, 22, 30)
    return [
        (
            r,
            chooser.choice(INTEGERS),
            chooser.choice(INTEGERS),
            chooser.choice((*TEXTS, None)),
            chooser.choice((*PATTERNS, None)),
            chooser.choice(FLOATS),
            chooser.choice((None, day + datetime.timedelta(days=chooser.randint(0, 800)))),
            chooser.choice((None, moment + _minutes(chooser.randint(-5000, 5000) * 7, chooser))),
            chooser.choice(NUMERICS),
            chooser.choice((None, -(2**40) - 3, -17, 0, 5, 2**40 + 1)),
        )
        for r in range(rows)
    ]


@pytest.fixture(scope="module")
def grid() -> tuple[pl.DataFrame, duckdb.DuckDBPyConnection]:
    rows = _grid()
    frame = pl.DataFrame(
        {
            f"c{k}": pl.Series([row[k] for row in rows], dtype=polars_dtype(pg_type))
            for k, (_, pg_type) in enumerate(COLUMNS)
        }
    ).with_columns(pl.lit(0, pl.UInt64).alias("time"), pl.lit(1, pl.Int64).alias("diff"))
    arrow = pa.table({name: [row[k] for row in rows] for k, (name, _) in enumerate(COLUMNS)})
    arrow = arrow.cast(pa.schema([(name, _ARROW[t]) for name, t in COLUMNS]))
    connection = duckdb.connect()
    connection.register("g", arrow)
    return frame, connection


_ARROW = {
    "int4": pa.int32(),
    "text": pa.string(),
    "float8": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "numeric": pa.float64(),  # the engine's numeric is Float64 too
    "int8": pa.int64(),
}


def _resolve(name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    return ("g", COLUMNS) if name == "g" else None


def _engine_values(sql: str, frame: pl.DataFrame) -> dict[int, object]:
    relation = plan_query(sqlglot.parse_one(f"SELECT r, {sql} FROM g", read="postgres"), _resolve)
    plan = lower_to_lir(relation)
    assert isinstance(plan, lir.Mfp), f"expected one Map over the table, got {type(plan).__name__}"
    ok, errors = apply_mfp(frame, plan.mfp, [t for _, t in COLUMNS])
    assert errors.height == 0, errors["error"].to_list()[:3]
    return dict(ok.select("c0", "c1").rows())


def _duckdb_values(sql: str, connection: duckdb.DuckDBPyConnection) -> dict[int, object]:
    query = sqlglot.transpile(f"SELECT r, {sql} FROM g", read="postgres", write="duckdb")[0]
    return dict(connection.execute(query).fetchall())


def _same(left: object, right: object) -> bool:
    left, right = normalize(left), normalize(right)
    if isinstance(left, float) and isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    return left == right


@pytest.mark.parametrize(("sql", "duckdb_sql"), EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_expression_matches_duckdb_on_every_row(
    sql: str, duckdb_sql: str, grid: tuple[pl.DataFrame, duckdb.DuckDBPyConnection]
) -> None:
    """The engine's value of the expression equals DuckDB's on every row of the grid."""
    frame, connection = grid
    engine = _engine_values(sql, frame)
    if duckdb_sql:
        oracle = dict(connection.execute(f"SELECT r, {duckdb_sql} FROM g").fetchall())
    else:
        oracle = _duckdb_values(sql, connection)
    assert engine.keys() == oracle.keys()
    wrong = [(r, engine[r], oracle[r]) for r in sorted(engine) if not _same(engine[r], oracle[r])]
    assert not wrong, f"{len(wrong)} rows differ (row, engine, duckdb): {wrong[:5]}"


# (PostgreSQL expression, DuckDB condition for the rows it must fail on, SQLSTATE)
FAILING: tuple[tuple[str, str, str], ...] = (
    ("i / j", "j = 0 AND i IS NOT NULL", "22012"),
    ("i % j", "j = 0 AND i IS NOT NULL", "22012"),
    ("f / j", "j = 0 AND f IS NOT NULL", "22012"),
    ("big * big", "abs(big) > 3037000499", "22003"),
    ("CAST(big AS int4)", "abs(big) > 2147483647", "22003"),
    ("CAST(s AS int4)", "s IS NOT NULL AND TRY_CAST(s AS INTEGER) IS NULL", "22P02"),
    ("sqrt(f)", "f < 0", "2201F"),
    ("ln(f)", "f <= 0", "2201E"),
    ("split_part(s, ',', i)", "i = 0 AND s IS NOT NULL", "22023"),
    ("substr(s, 1, i)", "i < 0 AND s IS NOT NULL", "22011"),
    ("coalesce(i, 10 / j)", "i IS NULL AND j = 0", "22012"),
    ("(i < 100) AND (i / j > 0)", "j = 0 AND i IS NOT NULL", "22012"),
    # Lazy evaluation: the failing operand is never the one that decides.
    ("CASE WHEN j = 0 THEN 0 ELSE i / j END", "false", ""),
    ("(j <> 0) AND (i / j > 0)", "false", ""),
    ("(j = 0) OR (i / j > 0)", "false", ""),
)


@pytest.mark.parametrize(("sql", "fails_when", "code"), FAILING, ids=[f[0] for f in FAILING])
def test_expression_fails_on_exactly_the_rows_postgres_would(
    sql: str, fails_when: str, code: str, grid: tuple[pl.DataFrame, duckdb.DuckDBPyConnection]
) -> None:
    """Error rows carry the SQLSTATE, on the rows where PostgreSQL would raise it, and no others."""
    frame, connection = grid
    relation = plan_query(sqlglot.parse_one(f"SELECT {sql} FROM g", read="postgres"), _resolve)
    plan = lower_to_lir(relation)
    assert isinstance(plan, lir.Mfp)
    assert len(plan.mfp.expressions) == 1
    compiled = compile_scalar(plan.mfp.expressions[0], [t for _, t in COLUMNS])
    assert compiled.error is not None
    frame = compiled.with_lets(frame.lazy()).collect()
    errors = frame.select(pl.col("c0"), compiled.error.alias("error"))
    failing = dict(errors.filter(pl.col("error").is_not_null()).rows())
    expected = {r for (r,) in connection.execute(f"SELECT r FROM g WHERE {fails_when}").fetchall()}
    assert set(failing) == expected
    assert expected or not code, "the grid never holds a row this expression fails on"
    assert {error.split("|")[0] for error in failing.values()} <= {code}
