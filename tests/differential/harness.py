"""The differential harness: Loupe's planner and engine against PostgreSQL on the same changing data.

A ``Workload`` holds a few small tables and produces a seeded sequence of
steps, each inserting or deleting a few rows at the next timestamp. The
``EngineSide`` plans every view with the real planner
(``loupe.coordinator.plan.plan_query``, then ``lower_to_lir``), renders it in
a ``loupe.dataflow.ComputeInstance`` with an index on it, and feeds it the
updates in persist's format; the ``PostgresSide`` runs the view's own SQL on
the tables' current contents in a schema of its own. After every step both
answers are compared as multisets (floats within a relative tolerance, numerics
exactly: see ``_close``), at the new time and at the one before;
ORDER BY … LIMIT views are compared as top-k sets, where rows tied on the
order keys at the boundary may differ; where PostgreSQL fails, the engine must
fail with the same SQLSTATE. ``DuckDBSide`` (transpiled SQL, hand-written
error conditions) remains for the harness's self-checks.
"""

from __future__ import annotations

import datetime
import functools
import math
import random
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from loupe import sqltypes
from loupe.common.errors import LoupeError
from loupe.coordinator.plan import lower_to_lir, plan_query
from loupe.coordinator.sql.parser import parse_one
from loupe.dataflow import ComputeInstance
from loupe.plan import lir
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport

Row = tuple[object, ...]
ColumnSpec = tuple[str, str]

# Persist's arrow types for the harness's column types (numeric travels as text).
_PERSIST_ARROW = {
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float8": pa.float64(),
    "numeric": pa.string(),
    "text": pa.string(),
    "bool": pa.bool_(),
    "date": pa.date32(),
}
# DuckDB reads numeric as a double: the engine's numeric is Float64 too.
_DUCKDB_ARROW = _PERSIST_ARROW | {"numeric": pa.float64()}


@dataclass(frozen=True)
class View:
    """A view under test: its SQL (PostgreSQL dialect) and how to compare it.

    ``order_columns`` marks an ORDER BY … LIMIT view: the output positions
    of its order keys, for the tie-aware comparison. ``duckdb_sql`` overrides
    the transpiled SQL where DuckDB spells a PostgreSQL meaning differently
    (``/`` on integers). ``error_when`` is a DuckDB query returning whether
    the data holds a row the view must fail on; the engine must then answer
    with SQLSTATE ``error_code`` (and with the rows otherwise). ``xfail``
    names a planner gap. ``postgres_sql`` is PostgreSQL's spelling of a view
    written in Materialize's syntax (``WITH MUTUALLY RECURSIVE``).
    """

    name: str
    sql: str
    order_columns: tuple[int, ...] = ()
    duckdb_sql: str = ""
    error_when: str = ""
    error_code: str = ""
    xfail: str = ""
    postgres_sql: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[ColumnSpec, ...]


@dataclass
class Step:
    """The changes of one timestamp: per table, rows with their diffs (+1 insert, -1 delete)."""

    time: int
    changes: dict[str, list[tuple[Row, int]]] = field(default_factory=dict)


TEXTS = ("apple", "banana", "cherry", "Apple pie", "a_b", "x%y", "", "kiwi,lime", "héllo")


class Workload:
    """Small tables with values from small domains (so joins and groups collide), NULLs included."""

    TABLES = (
        Table("t1", (("a", "int4"), ("b", "int4"), ("s", "text"), ("f", "float8"))),
        Table("t2", (("a", "int4"), ("c", "int8"), ("d", "date"), ("n", "numeric"))),
        Table("t3", (("k", "int4"), ("name", "text"))),
    )

    def __init__(self, seed: int, initial_rows: int = 8) -> None:
        self.random = random.Random(seed)
        self.contents: dict[str, Counter[Row]] = {t.name: Counter() for t in self.TABLES}
        self.initial_rows = initial_rows

    def value(self, pg_type: str) -> object:
        """A random value of ``pg_type``; about one in eight is NULL."""
        if self.random.random() < 0.12:
            return None
        if pg_type == "int4":
            return self.random.randint(-2, 5)
        if pg_type == "int8":
            return self.random.randint(-8, 8)
        if pg_type == "float8":
            # 0.1 and 0.2 are inexact in binary: sums that retract them must still agree.
            return self.random.choice([-1.5, 0.0, 0.1, 0.2, 0.25, 2.0, 3.75, 10.0])
        if pg_type == "numeric":
            return self.random.choice(["1.5", "2", "-0.25", "100.125"])
        if pg_type == "date":
            return datetime.date(2024, 1, 1) + datetime.timedelta(days=self.random.randint(0, 400))
        return self.random.choice(TEXTS)

    def row(self, table: Table) -> Row:
        return tuple(self.value(t) for _, t in table.columns)

    def snapshot(self) -> Step:
        """The initial contents, at time 0."""
        step = Step(0)
        for table in self.TABLES:
            rows = [self.row(table) for _ in range(self.initial_rows)]
            step.changes[table.name] = [(r, 1) for r in rows]
            self.contents[table.name].update(rows)
        return step

    def next_step(self, time: int) -> Step:
        """Insert or delete one to three rows of one or two tables."""
        step = Step(time)
        for table in self.random.sample(self.TABLES, self.random.randint(1, 2)):
            changes = []
            for _ in range(self.random.randint(1, 3)):
                current = self.contents[table.name]
                if current and self.random.random() < 0.45:
                    row = self.random.choice(sorted(current, key=repr))
                    current[row] -= 1
                    if not current[row]:
                        del current[row]
                    changes.append((row, -1))
                else:
                    row = self.row(table)
                    current[row] += 1
                    changes.append((row, 1))
            step.changes[table.name] = changes
        return step

    @classmethod
    def resolve(cls, name: str) -> tuple[str, Sequence[ColumnSpec]] | None:
        """The planner's catalog: the workload's tables by name."""
        table = next((t for t in cls.TABLES if t.name == name), None)
        return (table.name, table.columns) if table else None


def persist_updates(table: Table, changes: Iterable[tuple[Row, int]], time: int) -> pa.Table:
    """Changes of ``table`` at ``time`` in persist's format (its columns, mz_timestamp, mz_diff)."""
    changes = list(changes)
    columns = {
        name: pa.array([row[i] for row, _ in changes], _PERSIST_ARROW[pg_type])
        for i, (name, pg_type) in enumerate(table.columns)
    }
    columns["mz_timestamp"] = pa.array([time] * len(changes), pa.uint64())
    columns["mz_diff"] = pa.array([diff for _, diff in changes], pa.int64())
    return pa.table(columns)


class EngineSide:
    """Every view as its own dataflow with an index, in one ``ComputeInstance``."""

    def __init__(self, views: Sequence[View], workers: int = 1) -> None:
        self.instance = ComputeInstance(workers=workers)
        self.index_ids: dict[str, str] = {}
        for view in views:
            self.index_ids[view.name] = self._create(view)

    def _create(self, view: View) -> str:
        relation = plan_query(parse_one(view.sql).expression, Workload.resolve)
        plan = lower_to_lir(relation)
        read = {node.name for node in lir.walk(plan) if isinstance(node, lir.Get)}
        imports = tuple(
            SourceImport(id=t.name, shard_id=t.name, columns=t.columns)
            for t in Workload.TABLES
            if t.name in read
        )
        view_id, index_id = f"v_{view.name}", f"i_{view.name}"
        desc = DataflowDescription(
            id=f"d_{view.name}",
            debug_name=view.name,
            source_imports=imports,
            objects_to_build=(BuildDesc(view_id, plan, relation.columns, view.name),),
            index_exports=(IndexExport(index_id, view_id, tuple(range(relation.arity))),),
            as_of=0,
        )
        self.instance.create_dataflow(desc)
        return index_id

    def apply(self, step: Step) -> None:
        """Push the step's changes (and an empty batch to tables it leaves alone), then run."""
        wanted = self.instance.source_ids()
        for table in Workload.TABLES:
            if table.name in wanted:
                changes = step.changes.get(table.name, [])
                updates = persist_updates(table, changes, step.time)
                self.instance.push(table.name, updates, step.time + 1)
        while self.instance.step():
            pass

    def read(self, view: View, time: int) -> list[Row]:
        return self.instance.peek(self.index_ids[view.name], time).rows()


class DuckDBSide:
    """The oracle: DuckDB running each view's SQL over the tables' current contents."""

    def __init__(self) -> None:
        self.connection = _connection()
        self._tables: dict[str, pa.Table] = {}

    def load(self, contents: dict[str, Counter[Row]], changed: Iterable[str] | None = None) -> None:
        """Register the tables' contents (only the ``changed`` ones, when given)."""
        names = set(changed) if changed is not None else {t.name for t in Workload.TABLES}
        for table in Workload.TABLES:
            if table.name not in names:
                continue
            rows = list(contents[table.name].elements())
            arrays = {
                name: pa.array(
                    [_duckdb_value(row[i], pg_type) for row in rows], _DUCKDB_ARROW[pg_type]
                )
                for i, (name, pg_type) in enumerate(table.columns)
            }
            self._tables[table.name] = pa.table(arrays)
            self.connection.register(table.name, self._tables[table.name])

    def read(self, view: View) -> list[Row]:
        return self.connection.execute(duckdb_sql(view)).fetchall()

    def fails(self, view: View) -> bool:
        """Whether the data holds a row ``view`` must fail on."""
        rows = self.connection.execute(view.error_when).fetchall()
        return bool(rows and rows[0][0])

    def read_unlimited(self, view: View) -> list[Row]:
        """The view's rows before ORDER BY/LIMIT/OFFSET (what a top-k picks from)."""
        return self.connection.execute(_transpile(_without_limit(view.sql))).fetchall()


# Loupe's type names -> PostgreSQL's, to declare a column of that type there.
# Loupe's type names -> the column types PostgreSQL's tables are created with.
PG_COLUMN_TYPES = {t.name: t.display for t in sqltypes.TYPES.values() if t.column_type}
# What pg_typeof() says -> Loupe's type names, to compare result types.
LOUPE_TYPES = {t.display: t.name for t in sqltypes.TYPES.values()}


class PostgresSide:
    """The oracle: PostgreSQL itself running each view's SQL over the tables' current contents.

    No translation and no hand-written error conditions: a view PostgreSQL
    fails on must fail in the engine with the same SQLSTATE.
    """

    def __init__(self, url: str) -> None:
        import psycopg

        self.errors = psycopg.Error
        self.connection = psycopg.connect(url, autocommit=True)
        self.schema = f"loupe_differential_{uuid.uuid4().hex[:10]}"
        self.connection.execute(f"CREATE SCHEMA {self.schema}")
        self.connection.execute(f"SET search_path TO {self.schema}")
        for table in Workload.TABLES:
            columns = ", ".join(f"{name} {PG_COLUMN_TYPES[t]}" for name, t in table.columns)
            self.connection.execute(f"CREATE TABLE {table.name} ({columns})")

    def close(self) -> None:
        self.connection.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        self.connection.close()

    def load(self, contents: dict[str, Counter[Row]], changed: Iterable[str] | None = None) -> None:
        names = set(changed) if changed is not None else {t.name for t in Workload.TABLES}
        for table in Workload.TABLES:
            if table.name not in names:
                continue
            self.connection.execute(f"DELETE FROM {table.name}")
            rows = list(contents[table.name].elements())
            if rows:
                marks = ", ".join(["%s"] * len(table.columns))
                with self.connection.cursor() as cursor:
                    cursor.executemany(f"INSERT INTO {table.name} VALUES ({marks})", rows)

    def answer(self, view: View) -> Answer:
        sql = view.postgres_sql or view.sql
        try:
            rows = self.connection.execute(sql).fetchall()
            unlimited = (
                self.connection.execute(_without_limit(sql)).fetchall()
                if view.order_columns
                else []
            )
        except self.errors as error:
            return Answer([], [], fails=True, code=error.sqlstate or "")
        return Answer(rows, unlimited, fails=False)


@functools.cache
def _connection() -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB for every run (each run registers its tables afresh)."""
    return duckdb.connect()


def _duckdb_value(value: object, pg_type: str) -> object:
    return float(value) if pg_type == "numeric" and value is not None else value  # type: ignore[arg-type]


def duckdb_sql(view: View) -> str:
    return view.duckdb_sql or _transpile(view.sql)


@functools.cache
def _transpile(sql: str) -> str:
    return sqlglot.transpile(sql, read="postgres", write="duckdb")[0]


@functools.cache
def _without_limit(sql: str) -> str:
    tree = sqlglot.parse_one(sql, read="postgres")
    for key in ("order", "limit", "offset"):
        tree.set(key, None)
    assert isinstance(tree, exp.Expression)
    return tree.sql(dialect="postgres")


# Comparison.


def normalize(value: object) -> object:
    """One representation per value across both sides: numbers as float, dates as midnight."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, Decimal):  # numeric is exact: compared exactly (``_close``)
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day)
    return value


def _sort_key(row: Row) -> tuple[object, ...]:
    """Rows ordered by type then value, floats rounded so near-equal values sort together."""
    key: list[tuple[int, object]] = []
    for value in row:
        if isinstance(value, Decimal):
            key.append((1, round(float(value), 6)))
        elif isinstance(value, float):
            key.append((1, round(value, 6) if math.isfinite(value) else value))
        else:
            key.append((0 if value is None else 2, repr(value)))
    return tuple(key)


def _close(left: object, right: object) -> bool:
    """``left`` (Loupe's) is ``right`` (PostgreSQL's): floats within a relative tolerance,
    numerics exactly, to PostgreSQL's scale or the 16 decimals Loupe keeps (a quotient of
    PostgreSQL's may have 20: see the README)."""
    if isinstance(left, Decimal) and isinstance(right, Decimal):
        exponent = right.as_tuple().exponent
        assert isinstance(exponent, int)
        # Equal once rounded to PostgreSQL's scale, or to the 16 decimals Loupe keeps.
        if abs(left - right) <= Decimal(5).scaleb(max(exponent, -16) - 1):
            return True
        # sqrt, stddev, variance… of numeric are computed in float8 and kept to 15
        # significant digits (README): such a value, and only such, is compared at those.
        digits = left.normalize().as_tuple().digits
        return len(digits) <= 15 and abs(left - right) <= abs(right) * Decimal("1e-14")
    if isinstance(left, float) and isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-9) or (
            math.isnan(left) and math.isnan(right)
        )
    return left == right


def same_multiset(engine: Iterable[Row], oracle: Iterable[Row]) -> bool:
    """Whether two row lists are equal as multisets, floats within a relative tolerance."""
    left = sorted((tuple(normalize(v) for v in r) for r in engine), key=_sort_key)
    right = sorted((tuple(normalize(v) for v in r) for r in oracle), key=_sort_key)
    if len(left) != len(right):
        return False
    return all(
        len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
        for a, b in zip(left, right, strict=True)
    )


def is_sub_multiset(rows: Iterable[Row], of: Iterable[Row]) -> bool:
    """Whether every row of ``rows`` occurs in ``of`` at least as often."""
    available = Counter(_exact(r) for r in of)
    for row in rows:
        key = _exact(row)
        if available[key] <= 0:
            return False
        available[key] -= 1
    return True


def _exact(row: Row) -> tuple[object, ...]:
    return tuple(
        round(v, 6) if isinstance(v, float) and math.isfinite(v) else v
        for v in (normalize(x) for x in row)
    )


def same_top_k(
    engine: Sequence[Row], oracle: Sequence[Row], unlimited: Sequence[Row], order: Sequence[int]
) -> bool:
    """A top-k result is right when it has the oracle's size, the oracle's order-key values,
    and takes its rows from the unlimited result (rows tied at the boundary may differ)."""
    if len(engine) != len(oracle):
        return False
    keys = [tuple(row[i] for i in order) for row in engine]
    oracle_keys = [tuple(row[i] for i in order) for row in oracle]
    return same_multiset(keys, oracle_keys) and is_sub_multiset(engine, unlimited)


@dataclass
class Mismatch:
    view: str
    time: int
    engine: list[Row]
    oracle: list[Row]

    def __str__(self) -> str:
        return (
            f"view {self.view} at time {self.time}:\n  engine: {sorted(map(repr, self.engine))}"
            f"\n  oracle: {sorted(map(repr, self.oracle))}"
        )


@dataclass(frozen=True)
class Answer:
    """The oracle's answer for a view at one time: its rows, or the SQLSTATE it fails with."""

    rows: list[Row]
    unlimited: list[Row]
    fails: bool
    code: str = ""

    @classmethod
    def of(cls, view: View, oracle: DuckDBSide | PostgresSide) -> Answer:
        if isinstance(oracle, PostgresSide):
            return oracle.answer(view)
        if view.error_when and oracle.fails(view):
            return cls([], [], fails=True, code=view.error_code)
        unlimited = oracle.read_unlimited(view) if view.order_columns else []
        return cls(oracle.read(view), unlimited, fails=False)


def run(
    views: Sequence[View],
    *,
    seed: int,
    steps: int,
    workers: int = 1,
    postgres_url: str | None = None,
) -> list[Mismatch]:
    """Apply ``steps`` random steps; after each, compare every view. Returns the mismatches.

    Each view is read at the new time and, again, at the time before: an
    index keeps its history back to its since (0 here), so old times must
    still answer as they did.
    """
    workload = Workload(seed)
    engine = EngineSide(views, workers)
    oracle: DuckDBSide | PostgresSide = (
        PostgresSide(postgres_url) if postgres_url is not None else DuckDBSide()
    )
    try:
        return _run(views, workload, engine, oracle, steps)
    finally:
        if isinstance(oracle, PostgresSide):
            oracle.close()


def _run(
    views: Sequence[View],
    workload: Workload,
    engine: EngineSide,
    oracle: DuckDBSide | PostgresSide,
    steps: int,
) -> list[Mismatch]:
    answers: dict[str, Answer] = {}
    step = workload.snapshot()
    for time in range(steps + 1):
        if time:
            step = workload.next_step(time)
        engine.apply(step)
        oracle.load(workload.contents, None if time == 0 else step.changes)
        for view in views:
            previous = answers.get(view.name)
            answers[view.name] = Answer.of(view, oracle)
            mismatch = compare(view, engine, answers[view.name], time)
            if mismatch is None and previous is not None:
                mismatch = compare(view, engine, previous, time - 1)
            if mismatch is not None:
                return [mismatch]
    return []


def compare(view: View, engine: EngineSide, answer: Answer, time: int) -> Mismatch | None:
    """The view's mismatch at ``time``, or None when the engine agrees with DuckDB's answer."""
    try:
        engine_rows = engine.read(view, time)
    except LoupeError as error:
        if answer.fails and error.code == answer.code:
            return None
        return Mismatch(view.name, time, [("error", error.code, error.message)], answer.rows)
    if answer.fails:
        return Mismatch(view.name, time, engine_rows, [("error", answer.code)])
    if view.order_columns:
        if same_top_k(engine_rows, answer.rows, answer.unlimited, view.order_columns):
            return None
    elif same_multiset(engine_rows, answer.rows):
        return None
    return Mismatch(view.name, time, engine_rows, answer.rows)


__all__ = [
    "LOUPE_TYPES",
    "PG_COLUMN_TYPES",
    "Answer",
    "DuckDBSide",
    "EngineSide",
    "Mismatch",
    "PostgresSide",
    "View",
    "Workload",
    "run",
    "same_multiset",
    "same_top_k",
]
