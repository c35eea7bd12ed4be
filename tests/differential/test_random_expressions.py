"""Random well-typed expressions (``randomized.Expressions``) against PostgreSQL, row by row.

Each expression is planned as ``SELECT r, <expr> FROM g`` over the grid of
``test_scalars`` and evaluated by the engine; PostgreSQL runs the same SQL
over the same rows. Per row, both give the same value (floats within 1e-9)
or the same SQLSTATE; the result types are the same; an expression Loupe
refuses when planning must fail in PostgreSQL with the same SQLSTATE.

``LOUPE_RANDOM_EXPRESSIONS=2000 LOUPE_RANDOM_SEED=7`` draws more of them.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable

import polars as pl
import psycopg
import pytest

from loupe.common.errors import LoupeError
from loupe.common.jsonb import Jsonb
from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.coordinator.sql.parser import Query, parse_one
from loupe.dataflow.expr import compile_scalar
from loupe.dataflow.results import PeekResult
from loupe.dataflow.types import polars_dtype
from loupe.plan import lir

from .randomized import EXTENDED_TYPES, TYPES, Expressions
from .test_scalars import COLUMNS, _pg_same, _resolve, grid, pg_grid  # noqa: F401

COUNT = int(os.environ.get("LOUPE_RANDOM_EXPRESSIONS", "160"))
SEED = int(os.environ.get("LOUPE_RANDOM_SEED", "3"))

# PostgreSQL's result type OIDs -> Loupe's type names.
_OIDS = {
    16: "bool",
    20: "int8",
    21: "int2",
    23: "int4",
    25: "text",
    700: "float4",
    701: "float8",
    1082: "date",
    1114: "timestamp",
    1184: "timestamptz",
    1186: "interval",
    1700: "numeric",
    2950: "uuid",
    1007: "_int4",
    1009: "_text",
    3802: "jsonb",
}


def _expressions(
    seed: int = SEED, count: int = COUNT, *, extended: bool = False
) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    columns = {name: t for name, t in COLUMNS if name != "r"}
    grammar = Expressions(rng, columns, depth=3, extended=extended)
    # The extended draw asks for the new types and what reads them (bool, int4, text).
    types = (*EXTENDED_TYPES, "bool", "int4", "text") if extended else TYPES
    drawn = []
    for _ in range(count):
        type_ = rng.choice(types)
        drawn.append((type_, grammar.of(type_)))
    return drawn


# The base grammar, and the one making and reading uuid, arrays and jsonb (its own seed).
EXPRESSIONS = _expressions() + _expressions(SEED + 1000, COUNT // 2, extended=True)


Outcome = tuple[str, object]  # ("ok", value) or ("error", sqlstate)


def _loupe(sql: str, frame: pl.DataFrame) -> tuple[str, dict[int, Outcome]] | LoupeError:
    """The result type and per-row outcomes in Loupe, or the error planning raised."""
    statement = parse_one(f"SELECT r, {sql} FROM g")
    assert isinstance(statement, Query)
    try:
        relation = plan_query(statement.expression, _resolve)
    except LoupeError as error:
        return error
    plan = lower_to_lir(relation)
    assert isinstance(plan, lir.Mfp), f"expected one Map over the grid, got {type(plan).__name__}"
    types = [t for _, t in COLUMNS]
    position = plan.mfp.projection[1]
    if position < len(types):  # the expression is a column
        values = frame.select("c0", f"c{position}").rows()
        return relation.types[1], {r: ("ok", v) for r, v in values}
    scalar = plan.mfp.expressions[position - len(types)]
    compiled = compile_scalar(scalar, types)
    error = compiled.error if compiled.error is not None else pl.lit(None, pl.Utf8)
    evaluated = compiled.with_lets(frame.lazy())
    # with_columns, as the engine's Map: a constant broadcasts to every row.
    computed = evaluated.with_columns(compiled.value.alias("v"), error.alias("e")).collect()
    rows = computed.select("c0", "v", "e").rows()
    client = _client_value(relation.types[1])
    outcomes: dict[int, Outcome] = {
        r: ("error", e.split("|")[0]) if e is not None else ("ok", client(v)) for r, v, e in rows
    }
    return relation.types[1], outcomes


def _client_value(type_: str) -> Callable[[object], object]:
    """What a client reads of an engine value of ``type_`` (a uuid, jsonb's JSON value)."""
    if type_ not in ("uuid", "jsonb"):
        return lambda value: value

    def convert(value: object) -> object:
        if value is None:
            return None
        frame = pl.DataFrame({"c0": pl.Series([value], dtype=polars_dtype(type_))})
        (converted,) = PeekResult(frame, (type_,)).rows()[0]
        return json.loads(converted) if isinstance(converted, Jsonb) else converted

    return convert


def _postgres(sql: str, connection: psycopg.Connection) -> tuple[str | None, dict[int, Outcome]]:
    """PostgreSQL's result type (None when planning fails) and per-row outcomes."""
    type_: str | None = None
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {sql} FROM g LIMIT 0")
            assert cursor.description is not None
            type_ = _OIDS.get(cursor.description[0].type_code, str(cursor.description[0].type_code))
        rows = connection.execute(f"SELECT r, {sql} FROM g").fetchall()
        return type_, {r: ("ok", v) for r, v in rows}
    except psycopg.Error:
        pass
    outcomes: dict[int, Outcome] = {}
    for (r,) in connection.execute("SELECT r FROM g").fetchall():
        try:
            row = connection.execute(f"SELECT {sql} FROM g WHERE r = {int(r)}").fetchone()
            assert row is not None
            outcomes[r] = ("ok", row[0])
        except psycopg.Error as failure:
            outcomes[r] = ("error", failure.sqlstate)
    return type_, outcomes


# Loupe's AND and OR (and IN lists and BETWEEN, made of them) are Materialize's: an
# operand's error is absorbed where another operand decides the result (false for AND,
# true for OR), whatever their order; PostgreSQL evaluates left to right and raises the
# first error it meets. That is the one difference tolerated: Loupe answers where
# PostgreSQL fails, in an expression holding one of them.
_ABSORBING = (" AND ", " OR ", " IN (", " BETWEEN ")


def _same(ours: Outcome, theirs: Outcome, sql: str) -> bool:
    if ours[0] == "ok" and theirs[0] == "error" and any(op in sql for op in _ABSORBING):
        return True
    if theirs == ("error", None):
        # PostgreSQL answered a date past year 9999, which no Python client can hold;
        # Loupe's dates end there: 22008, "date out of range".
        return ours == ("error", "22008")
    if ours[0] != theirs[0]:
        return False
    if ours[0] == "error":
        return ours[1] == theirs[1]
    return _pg_same(ours[1], theirs[1])


@pytest.mark.parametrize(
    ("type_", "sql"), EXPRESSIONS, ids=[f"{i}-{t}" for i, (t, _) in enumerate(EXPRESSIONS)]
)
def test_random_expression_matches_postgres(
    type_: str,
    sql: str,
    grid: pl.DataFrame,  # noqa: F811
    pg_grid: psycopg.Connection,  # noqa: F811
) -> None:
    theirs_type, theirs = _postgres(sql, pg_grid)
    ours = _loupe(sql, grid)
    if isinstance(ours, LoupeError):
        # Refused when planning (a constant that fails): PostgreSQL fails with the same code.
        codes = {outcome[1] for outcome in theirs.values() if outcome[0] == "error"}
        assert ours.code in codes, f"{sql}: Loupe {ours.code} {ours.message}; PostgreSQL {codes}"
        return
    ours_type, outcomes = ours
    if theirs_type is None:
        # PostgreSQL evaluates constant subexpressions when planning and fails the whole
        # query on one that fails, even in a branch no row reaches (coalesce(i, 1 / 0)).
        # Loupe, as Materialize, fails where a row reaches it (and may meet another error
        # first): PostgreSQL gives no row-by-row answer to compare with.
        return
    assert ours_type == theirs_type, f"{sql}: type {ours_type}, PostgreSQL {theirs_type}"
    wrong = [
        (r, outcomes[r], theirs[r])
        for r in sorted(theirs)
        if not _same(outcomes[r], theirs[r], sql)
    ]
    assert not wrong, f"{sql}: {len(wrong)} rows differ (row, Loupe, PostgreSQL): {wrong[:4]}"


def test_the_grammar_covers_every_type_and_nests() -> None:
    """The draw is not degenerate: every type, calls inside calls, NULLs and CASE appear."""
    drawn = [sql for _, sql in EXPRESSIONS]
    assert {t for t, _ in EXPRESSIONS} == set(TYPES + EXTENDED_TYPES)
    assert sum(sql.count("(") >= 3 for sql in drawn) > len(drawn) // 4
    assert any("CASE WHEN" in sql for sql in drawn)
    assert any("CAST(NULL" in sql for sql in drawn)
