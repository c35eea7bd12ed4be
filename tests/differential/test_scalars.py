"""Scalar functions, row by row, against PostgreSQL: the planner's expression, the engine's evaluation.

Each expression is planned as ``SELECT r, <expr> FROM g`` (one Map over the
grid table) and evaluated by ``loupe.dataflow.expr.apply_mfp``; PostgreSQL
runs the same SQL over the same rows. Values are compared one for one with
their types (floats within 1e-9, numeric exactly: see ``_pg_same``), and
failing expressions must fail on exactly the rows PostgreSQL fails on, with
its SQLSTATE.
"""

from __future__ import annotations

import datetime
import math
import random
from decimal import ROUND_HALF_UP, Decimal

import polars as pl
import psycopg
import pytest
import sqlglot

from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.coordinator.sql.parser import LoupeDialect
from loupe.dataflow import expr
from loupe.dataflow.expr import apply_mfp, compile_scalar
from loupe.dataflow.types import polars_dtype
from loupe.interval import Interval
from loupe.plan import lir

from .harness import LOUPE_TYPES, PG_COLUMN_TYPES, TEXTS

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

EXPRESSIONS: tuple[str, ...] = (
    "i + j",
    "i - j",
    "i * j",
    "CASE WHEN j <> 0 THEN i / j END",
    "CASE WHEN j <> 0 THEN i % j END",
    "-i",
    "abs(i)",
    "mod(i, 3)",
    "i = j",
    "i < j",
    "i >= j",
    "i <> j",
    "i BETWEEN j AND 3",
    "(i > 0) AND (j > 0)",
    "(i > 0) OR (j > 0)",
    "NOT (i > j)",
    "i IS NULL",
    "coalesce(i, j, 0)",
    "nullif(i, j)",
    "greatest(i, j)",
    "least(i, j, 3)",
    "CASE WHEN i > 0 THEN 'pos' WHEN i < 0 THEN 'neg' END",
    "CASE i WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END",
    "upper(s)",
    "lower(s)",
    "length(s)",
    "substr(s, 2)",
    "substr(s, 2, 3)",
    "strpos(s, p)",
    "replace(s, 'a', 'XY')",
    "s || p",
    "left(s, i)",
    "right(s, i)",
    "lpad(s, 7, '*-')",
    "rpad(s, 3)",
    "split_part(s, ',', 2)",
    "starts_with(s, 'a')",
    "trim(s)",
    "reverse(s)",
    "s LIKE p",
    "s ILIKE p",
    "s NOT LIKE 'a%'",
    "round(f)",
    "ceil(f)",
    "floor(f)",
    "trunc(f)",
    "sqrt(abs(f))",
    "power(f, 2)",
    "sign(f)",
    "f * i",
    "f / 4",
    "d + i",
    "d - 1",
    "d - DATE '2024-01-01'",
    "extract(year FROM d)",
    "extract(dow FROM d)",
    "extract(doy FROM d)",
    "date_trunc('month', d)",
    "ts + INTERVAL '1 day'",
    "ts - INTERVAL '90 minutes'",
    "d + INTERVAL '3 hours'",
    "ts - TIMESTAMP '2024-01-01 00:00:00'",
    "ts > d",
    "date_trunc('hour', ts)",
    "date_trunc('week', ts)",
    "date_trunc('quarter', ts)",
    "extract(hour FROM ts)",
    "extract(minute FROM ts)",
    "extract(epoch FROM ts)",
    "extract(second FROM ts)",
    "CAST(ts AS date)",
    "CAST(ts AS text)",
    "n * 2 + i",
    "round(n)",
    "round(n, 1)",
    "trunc(n, 1)",
    "n / 3",
    "CAST(n AS int4)",
    "CAST(n AS int8) + big",
    "abs(big) - 1",
    "big * 3",
    "CASE WHEN i <> 0 THEN big / i END",
    "big % 7",
    "CASE WHEN i <> 0 THEN power(i, j) END",
    "sqrt(abs(big))",
    "exp(i)",
    "CASE WHEN f > 0 THEN ln(f) END",
    "CASE WHEN f > 0 THEN log(f) END",
    "CASE WHEN f > 0 THEN log(2, CAST(f AS numeric)) END",
    "CAST(i AS numeric) / 7",
    "s ~ 'a.'",
    "s ~* '^a'",
    "s !~ 'an'",
    "s ~ p",
    "translate(s, 'ael', 'E')",
    "CASE WHEN i + 3 BETWEEN 1 AND 12 THEN make_date(2024, i + 3, j + 10) END",
    "CAST(i AS text)",
    "CAST(CAST(i AS text) AS int4)",
    "coalesce(s, p, 'none')",
    "nullif(s, '')",
    "greatest(s, p)",
    "s < p",
    "CASE WHEN s LIKE '%a%' THEN length(s) ELSE -1 END",
    "CASE WHEN i > 0 AND j >= 0 THEN substr(s, i, j) END",
    "CASE WHEN p <> '' THEN split_part(s, p, 2) END",
    "CASE WHEN p <> '' THEN lpad(s, i + 5, p) END",
    "CASE WHEN p <> '' THEN rpad(s, j + 4, p) END",
    "replace(s, p, '+')",
    "replace(s, 'an', p)",
    "trim(s, p)",
    "ltrim(s, p)",
    "rtrim(s, 'e')",
    "position(p IN s)",
    "starts_with(s, p)",
    "s || p || i",
    "ceil(f) * i",
    "upper(s) LIKE 'A%'",
    "CAST(d AS text)",
    "concat(s, '-', i)",
    "concat_ws('/', s, p)",
    "s || i",
    "strpos(s, 'an')",
    "CAST(i AS float8) / 3",
    "sin(f)",
    "cos(i)",
    "tan(f)",
    "cot(f)",
    "CASE WHEN abs(f) <= 1 THEN asin(f) END",
    "CASE WHEN abs(f) <= 1 THEN acos(f) END",
    "atan(f)",
    "sinh(i)",
    "cosh(f)",
    "tanh(f)",
    "asinh(f)",
    "CASE WHEN f >= 1 THEN acosh(f) END",
    "CASE WHEN abs(f) < 1 THEN atanh(f) END",
    "degrees(f)",
    "radians(i)",
    "degrees(n)",
    "ascii(s)",
    "chr(CASE WHEN i > 0 THEN i + 64 END)",
    "md5(s)",
    "bit_length(s)",
    "octet_length(s)",
    "s || f",
    "i || s",
    "s || d",
    "s || (i > 0)",
    "to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US')",
    "to_char(ts, 'FMDay DDth Month YYYY, HH12:MI am Q IW ID D DDD WW J SSSS MS FF2')",
    "to_char(ts, 'IYYY-IW CC W Y,YYY RM Dy dy MON mon TZ OF \"at\" HH')",
    "to_char(d, 'Dy Mon DD YYYY TZ OF FMMM/FMDD')",
    "to_timestamp(f)",
    "to_timestamp(i * 86400.5)",
    "CASE WHEN f >= 0 AND f < 60 THEN make_timestamp(2024, 2, 29, abs(i), 7, f) END",
    "date_bin(INTERVAL '15 minutes', ts, TIMESTAMP '2001-01-01 00:02:30')",
    "date_bin(INTERVAL '1 day 2 hours', ts, TIMESTAMP '2024-01-01')",
    "date_bin('7 days', d, TIMESTAMP '2024-01-03')",
    "date_bin(INTERVAL '1 hour', TIMESTAMP '2024-03-01', ts)",
    "extract(hour FROM ts - TIMESTAMP '2024-03-01 12:00:00')",
    "extract(day FROM ts - TIMESTAMP '2024-03-01 12:00:00')",
    "extract(second FROM TIMESTAMP '2024-03-01 12:00:00' - ts)",
    "extract(epoch FROM TIMESTAMP '2024-03-01 12:00:00' - ts)",
    "date_part('minute', ts - TIMESTAMP '2024-03-01')",
    "date_part('milliseconds', ts - TIMESTAMP '2024-03-01')",
    "date_part('dow', d)",
    "date_part('epoch', ts)",
    "justify_hours(ts - TIMESTAMP '2024-03-01')",
    "CASE WHEN abs(i) < 3 THEN justify_days(ts - TIMESTAMP '2024-02-28 12:00') END",
    "(ts - TIMESTAMP '2024-03-01') * 1.5",
    "(ts - TIMESTAMP '2024-03-01') / 4",
    "CAST(ts - TIMESTAMP '2024-03-01' AS text)",
    "date_trunc('hour', ts - TIMESTAMP '2024-03-01')",
    "d + INTERVAL '1 month'",
    "d - INTERVAL '1 month'",
    "ts - INTERVAL '1 year 1 month 2 days 03:00'",
    "INTERVAL '2 months -1 day' + CAST(ts AS timestamptz)",
    "(d + INTERVAL '1 mon') - d",
    # Intervals over columns: months, days and microseconds kept apart.
    "d + i * INTERVAL '1 mon 1 day'",
    "ts + (i * INTERVAL '1 mon') - (j * INTERVAL '1 day 02:00')",
    "(ts - TIMESTAMP '2024-03-01') * f",
    "CASE WHEN f <> 0 THEN INTERVAL '1 mon 1 day' / f END",
    "-(i * INTERVAL '1 year 1 mon')",
    "(i * INTERVAL '1 mon 2 days 03:00')::text",
    "age(ts, TIMESTAMP '2024-01-31')",
    "age(d, ts)",
    "justify_interval(i * INTERVAL '1 mon' + j * INTERVAL '40 days 25 hours')",
    "justify_days(j * INTERVAL '17 days')",
    "i * INTERVAL '1 mon' = j * INTERVAL '30 days'",
    "i * INTERVAL '1 mon' < ts - TIMESTAMP '2024-01-01'",
    "extract(epoch FROM age(ts, TIMESTAMP '2024-01-31'))",
    "date_part('day', ts - TIMESTAMP '2024-03-01')",
    "date_trunc('month', age(ts, d))",
    "date_trunc('second', TIMESTAMP '2024-03-01' - ts)",
    "ts AT TIME ZONE 'America/New_York'",
    "CAST(ts AS timestamptz) AT TIME ZONE 'Asia/Kolkata'",
    "timezone('Europe/Paris', d)",
    "ts AT TIME ZONE '-03:30'",
    # Across New York's daylight-saving changes: a skipped hour, a repeated one.
    "(TIMESTAMP '2024-03-10 01:00' + (i + 7) * INTERVAL '15 minutes') AT TIME ZONE 'America/New_York'",
    "(TIMESTAMP '2024-11-03 00:30' + (j + 7) * INTERVAL '10 minutes') AT TIME ZONE 'America/New_York'",
    "(TIMESTAMPTZ '2024-11-03 04:30:00+00' + (j + 7) * INTERVAL '10 minutes') "
    "AT TIME ZONE 'America/New_York'",
    "(date_trunc('day', ts) + INTERVAL '2 hours 30 minutes') AT TIME ZONE 'America/New_York'",
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
def grid() -> pl.DataFrame:
    """The grid as an engine batch (``c0..``, ``time``, ``diff``)."""
    rows = _grid()
    return pl.DataFrame(
        {
            f"c{k}": pl.Series([row[k] for row in rows], dtype=polars_dtype(pg_type))
            for k, (_, pg_type) in enumerate(COLUMNS)
        }
    ).with_columns(pl.lit(0, pl.UInt64).alias("time"), pl.lit(1, pl.Int64).alias("diff"))


def _resolve(name: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    return ("g", COLUMNS) if name == "g" else None


def _engine_values(sql: str, frame: pl.DataFrame) -> dict[int, object]:
    relation = plan_query(sqlglot.parse_one(f"SELECT r, {sql} FROM g", read=LoupeDialect), _resolve)
    plan = lower_to_lir(relation)
    assert isinstance(plan, lir.Mfp), f"expected one Map over the table, got {type(plan).__name__}"
    ok, errors = apply_mfp(frame, plan.mfp, [t for _, t in COLUMNS])
    assert errors.height == 0, errors["error"].to_list()[:3]
    return dict(ok.select("c0", "c1").rows())


# (PostgreSQL expression, the SQLSTATE it fails with on some rows; "" for none)
FAILING: tuple[tuple[str, str], ...] = (
    ("i / j", "22012"),
    ("i % j", "22012"),
    ("f / j", "22012"),
    ("big * big", "22003"),
    ("CAST(big AS int4)", "22003"),
    ("CAST(s AS int4)", "22P02"),
    ("sqrt(f)", "2201F"),
    ("ln(f)", "2201E"),
    ("split_part(s, ',', i)", "22023"),
    ("substr(s, 1, i)", "22011"),
    ("coalesce(i, 10 / j)", "22012"),
    ("(i < 100) AND (i / j > 0)", "22012"),
    ("asin(f)", "22003"),
    ("acosh(f)", "22003"),
    ("atanh(f)", "22003"),
    ("chr(i)", "54000"),
    ("chr(i + 1114105)", "54000"),
    ("make_timestamp(2024, 1, 1, 0, 0, f)", "22008"),
    ("make_timestamp(2024, 2, i + 25, 0, 0, 0)", "22008"),
    # Lazy evaluation: the failing operand is never the one that decides.
    ("CASE WHEN j = 0 THEN 0 ELSE i / j END", ""),
    ("(j <> 0) AND (i / j > 0)", ""),
    ("(j = 0) OR (i / j > 0)", ""),
)


@pytest.fixture(scope="module")
def pg_grid(postgres_url: str):
    """The grid as a table of a PostgreSQL schema of its own."""

    rows = _grid()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA IF NOT EXISTS loupe_scalars")
        connection.execute("SET search_path TO loupe_scalars")
        connection.execute("DROP TABLE IF EXISTS g")
        definition = ", ".join(f"{name} {PG_COLUMN_TYPES[t]}" for name, t in COLUMNS)
        connection.execute(f"CREATE TABLE g ({definition})")
        with connection.cursor() as cursor:
            placeholders = ", ".join(["%s"] * len(COLUMNS))
            cursor.executemany(f"INSERT INTO g VALUES ({placeholders})", rows)
        yield connection
        connection.execute("DROP SCHEMA loupe_scalars CASCADE")


# numeric functions Loupe evaluates in float8 (PostgreSQL: in numeric, to 16+ digits).
FLOAT_COMPUTED = ("log(", "ln(", "sqrt(", "exp(", "power(")


def _pg_same(ours: object, theirs: object, *, approximate: bool = False) -> bool:
    """Equal as PostgreSQL's value; floats within 1e-9.

    numeric is exact: equal at the smaller of PostgreSQL's scale and Loupe's 16
    decimals (PostgreSQL's quotients may carry more), except the results of
    functions Loupe computes in float8 (``FLOAT_COMPUTED``), within 1e-12.
    """
    if ours is None or theirs is None:
        return ours is None and theirs is None
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return ours is theirs
    if isinstance(theirs, Decimal):
        if not isinstance(ours, Decimal):
            return False
        if approximate:
            return math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=1e-12)
        exponent = theirs.as_tuple().exponent
        assert isinstance(exponent, int)
        quantum = Decimal(1).scaleb(max(exponent, -16))
        rounded = [v.quantize(quantum, rounding=ROUND_HALF_UP) for v in (ours, theirs)]
        return rounded[0] == rounded[1]
    if isinstance(theirs, float):
        return isinstance(ours, float) and (
            math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12)
            or (math.isnan(ours) and math.isnan(theirs))
        )
    if isinstance(theirs, datetime.datetime) and isinstance(ours, datetime.datetime):
        return ours.replace(tzinfo=None) == theirs.replace(tzinfo=None)
    return type(ours) is type(theirs) and ours == theirs


def _interval_text(value: object) -> str | None:
    interval = Interval.from_struct(value)
    return None if interval is None else str(interval)


@pytest.mark.parametrize("sql", EXPRESSIONS)
def test_expression_matches_postgres_on_every_row(
    sql: str, grid: pl.DataFrame, pg_grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's value and type of the expression are PostgreSQL's on every row, both
    columnar and, where it compiles, over Python rows (``apply_mfp`` takes that way for a
    few rows, as the grid is)."""
    frame = grid
    assert frame.height <= expr.ROW_MFP_ROWS
    monkeypatch.setattr(expr, "ROW_MFP_ROWS", 0)
    columnar = _engine_values(sql, frame)
    monkeypatch.undo()
    for engine in (columnar, _engine_values(sql, frame)):
        _check_against_postgres(sql, engine, pg_grid)


def _check_against_postgres(sql: str, engine: dict[int, object], pg_grid) -> None:
    relation = plan_query(sqlglot.parse_one(f"SELECT r, {sql} FROM g", read=LoupeDialect), _resolve)
    ours_type = relation.types[1]
    theirs = dict(pg_grid.execute(f"SELECT r, {sql} FROM g").fetchall())
    typed = pg_grid.execute(f"SELECT pg_typeof({sql})::text FROM g LIMIT 1").fetchone()
    assert typed is not None
    theirs_type = LOUPE_TYPES.get(typed[0], typed[0])
    assert ours_type == theirs_type, f"type {ours_type} where PostgreSQL says {theirs_type}"
    if ours_type == "interval":  # psycopg reads intervals as timedeltas: compare PostgreSQL's text
        theirs = dict(pg_grid.execute(f"SELECT r, ({sql})::text FROM g").fetchall())
        engine = {r: _interval_text(v) for r, v in engine.items()}
    assert engine.keys() == theirs.keys()
    wrong = [
        (r, engine[r], theirs[r])
        for r in sorted(engine)
        if not _pg_same(engine[r], theirs[r], approximate=any(f in sql for f in FLOAT_COMPUTED))
    ]
    assert not wrong, f"{len(wrong)} rows differ (row, engine, postgresql): {wrong[:5]}"


@pytest.mark.parametrize(("sql", "code"), FAILING, ids=[f[0] for f in FAILING])
def test_expression_fails_on_the_rows_and_with_the_code_postgres_does(
    sql: str, code: str, grid: pl.DataFrame, pg_grid
) -> None:
    """Row by row, PostgreSQL's error (or none) is the engine's error row (or none)."""
    frame = grid
    relation = plan_query(sqlglot.parse_one(f"SELECT {sql} FROM g", read=LoupeDialect), _resolve)
    plan = lower_to_lir(relation)
    assert isinstance(plan, lir.Mfp)
    compiled = compile_scalar(plan.mfp.expressions[0], [t for _, t in COLUMNS])
    error = compiled.error if compiled.error is not None else pl.lit(None, pl.Utf8)
    evaluated = compiled.with_lets(frame.lazy()).collect()
    ours = {
        r: (e.split("|")[0] if e is not None else None)
        for r, e in evaluated.select(pl.col("c0"), error.alias("error")).rows()
    }

    theirs: dict[int, str | None] = {}
    for r in sorted(ours):
        try:
            pg_grid.execute(f"SELECT {sql} FROM g WHERE r = {r}").fetchall()
            theirs[r] = None
        except psycopg.Error as failure:
            theirs[r] = failure.sqlstate
    wrong = [(r, ours[r], theirs[r]) for r in sorted(ours) if ours[r] != theirs[r]]
    assert not wrong, f"{len(wrong)} rows differ (row, engine, postgresql): {wrong[:5]}"
    assert (code in theirs.values()) if code else not any(theirs.values())
