"""Run sqllogictest scripts against Loupe or PostgreSQL and count what passes.

Values are printed as sqllogictest prints them (``I`` integers, ``R`` with
three decimals, ``T`` text; ``NULL``, ``(empty)``, unprintable characters as
``@``), sorted by the record's sort mode, and compared with the expected
values or their md5 hash. The same printing serves both targets, so
PostgreSQL's own pass rate tells which failures are the corpus's dialect and
which are Loupe's.

Two modes:

- ``oneshot``: every query is run as it comes.
- ``views``: every query becomes a view with a default index, created right
  after the last DDL statement before it (before the inserts that follow),
  so the view is maintained while the script's writes arrive; at the query's
  place the view is read and compared (as a multiset: a view has no order).
  A query that cannot be a view is run as it comes instead, and counted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import sqlglot
import sqlglot.errors
from sqlglot import exp

from loupe.slt.records import HashThreshold, Query, Record, Script, Statement, parse_script

_DDL = re.compile(r"^\s*(CREATE|DROP|ALTER)\b", re.IGNORECASE)
_CREATED = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?(TABLE|VIEW|INDEX)\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][\w]*)",
    re.IGNORECASE,
)


class TargetError(Exception):
    """A statement failed on the target: its SQLSTATE and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Target(Protocol):
    """A SQL database a script runs on."""

    name: str

    def execute(self, sql: str) -> None: ...

    def query(self, sql: str) -> list[tuple[Any, ...]]: ...

    def drop(self, kind: str, name: str) -> None: ...


@dataclass
class Failure:
    line: int
    sql: str
    reason: str


@dataclass
class FileResult:
    path: str
    mode: str
    statements: int = 0
    queries: int = 0
    passed: int = 0
    skipped: int = 0
    # Queries that could not become views (views mode) and ran as they came.
    not_views: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    records_limited: bool = False

    @property
    def records(self) -> int:
        return self.statements + self.queries

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.records if self.records else 1.0

    @property
    def per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def format_value(value: Any, kind: str) -> str:
    """One value as sqllogictest prints it for a column of type ``kind`` (I, R or T)."""
    if value is None:
        return "NULL"
    if kind == "I":
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float | Decimal):
            if isinstance(value, float) and not math.isfinite(value):
                return str(value)
            return str(int(value))  # truncated toward zero, as the reference drivers do
        return "0"  # text in an integer column, as SQLite prints it
    if kind == "R":
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int | float | Decimal):
            return f"{float(value):.3f}"
        return "0.000"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value == int(value) and math.isfinite(value):
        text = str(int(value))
    else:
        text = str(value)
    if text == "":
        return "(empty)"
    return "".join(c if " " <= c <= "~" else "@" for c in text)


def result_values(rows: Sequence[Sequence[Any]], query: Query) -> list[str]:
    """The rows as the sorted list of printed values the record expects."""
    kinds = query.types
    printed = [
        [format_value(v, kinds[i] if i < len(kinds) else "T") for i, v in enumerate(row)]
        for row in rows
    ]
    if query.sort == "rowsort":
        printed.sort()
    values = [v for row in printed for v in row]
    if query.sort == "valuesort":
        values.sort()
    return values


def digest(values: Sequence[str]) -> str:
    md5 = hashlib.md5()
    for value in values:
        md5.update(value.encode())
        md5.update(b"\n")
    return md5.hexdigest()


def check(query: Query, rows: Sequence[Sequence[Any]]) -> str | None:
    """None when ``rows`` are what ``query`` expects, else why not."""
    if rows and query.types and len(rows[0]) != len(query.types):
        return f"expected {len(query.types)} columns, got {len(rows[0])}"
    values = result_values(rows, query)
    if query.hashed is not None:
        count, expected = query.hashed
        if len(values) != count or digest(values) != expected:
            return f"expected {count} values hashing to {expected}, got {len(values)} values hashing to {digest(values)}"
        return None
    expected_values = list(query.values or ())
    if values != expected_values:
        return f"expected {_short(expected_values)}, got {_short(values)}"
    return None


def _short(values: Sequence[str], limit: int = 12) -> str:
    shown = " ".join(values[:limit])
    return f"[{shown}{' …' if len(values) > limit else ''}] ({len(values)} values)"


def run_script(
    target: Target,
    script: Script,
    *,
    mode: str = "oneshot",
    max_records: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FileResult:
    """Run ``script``'s records on ``target``; the objects it created are dropped after."""
    records = script.records
    result = FileResult(str(script.path), mode, skipped=script.skipped)
    if max_records is not None and len(records) > max_records:
        records = records[:max_records]
        result.records_limited = True
    created: list[tuple[str, str]] = []
    views = _ViewPlan(records) if mode == "views" else None
    began = time.monotonic()
    try:
        if views is not None:
            views.create_after(-1, target, created)
        for position, record in enumerate(records):
            if progress is not None:
                progress(position, len(records))
            if isinstance(record, HashThreshold):
                continue
            if isinstance(record, Statement):
                result.statements += 1
                if views is not None and _DDL.match(record.sql):
                    views.drop_read(position, target, created)
                _run_statement(target, record, result, created)
                if views is not None and _DDL.match(record.sql):
                    views.create_after(position, target, created)
                continue
            result.queries += 1
            view = views.view_of(position) if views is not None else None
            if views is not None and view is None:
                result.not_views += 1
            _run_query(target, record, result, view)
    finally:
        for kind, name in reversed(created):
            with contextlib.suppress(TargetError):
                target.drop(kind, name)
        result.seconds = time.monotonic() - began
    return result


def _run_statement(
    target: Target, record: Statement, result: FileResult, created: list[tuple[str, str]]
) -> None:
    try:
        target.execute(record.sql)
    except TargetError as error:
        if record.expect_error:
            result.passed += 1
        else:
            result.failures.append(Failure(record.line, record.sql, f"error {error}"))
        return
    if record.expect_error:
        result.failures.append(Failure(record.line, record.sql, "statement succeeded"))
        return
    result.passed += 1
    match = _CREATED.match(record.sql)
    if match and match.group(1).upper() in ("TABLE", "VIEW"):
        created.append((match.group(1).upper(), match.group(2)))


def _run_query(target: Target, record: Query, result: FileResult, view: str | None) -> None:
    sql = record.sql if view is None else f"SELECT * FROM {view}{_positional_order(record.sql)}"
    try:
        rows = target.query(sql)
    except TargetError as error:
        result.failures.append(Failure(record.line, record.sql, f"error {error}"))
        return
    checked = record if view is None else _as_multiset(record)
    reason = check(checked, rows)
    if reason is None:
        result.passed += 1
    else:
        result.failures.append(Failure(record.line, record.sql, reason))


@functools.lru_cache(maxsize=4096)
def _positional_order(sql: str) -> str:
    """`` ORDER BY 1, 2 DESC`` when the query orders its output by position only, else ``""``."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError:
        return ""
    order = tree.args.get("order")
    if order is None:
        return ""
    keys = []
    for ordered in order.expressions:
        position = ordered.this
        if not (isinstance(position, exp.Literal) and position.is_int):
            return ""
        keys.append(f"{position.this}{' DESC' if ordered.args.get('desc') else ''}")
    return " ORDER BY " + ", ".join(keys)


def _can_be_view(query: Query) -> bool:
    """Whether a view's rows can be compared: any order will do, or the order is by position."""
    return query.sort != "nosort" or query.values is not None or bool(_positional_order(query.sql))


def _as_multiset(query: Query) -> Query:
    """A view's rows come in no order: compare a nosort query's rows sorted on both sides.

    A nosort query ordered by position keeps its order (the view is read with it).
    """
    if query.sort != "nosort" or query.values is None or _positional_order(query.sql):
        return query
    width = max(len(query.types), 1)
    rows = [query.values[i : i + width] for i in range(0, len(query.values), width)]
    values = tuple(v for row in sorted(rows) for v in row)
    return Query(query.sql, query.types, "rowsort", query.label, values, None, query.line)


class _ViewPlan:
    """Which query becomes which view, and when views are created and dropped."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records
        self.anchor: dict[int, list[int]] = {}
        last_ddl = -1
        for position, record in enumerate(records):
            if isinstance(record, Statement) and _DDL.match(record.sql):
                last_ddl = position
            elif isinstance(record, Query):
                self.anchor.setdefault(last_ddl, []).append(position)
        self.views: dict[int, str] = {}

    def view_of(self, position: int) -> str | None:
        return self.views.get(position)

    def create_after(self, position: int, target: Target, created: list[tuple[str, str]]) -> None:
        for query_position in self.anchor.get(position, []):
            record = self.records[query_position]
            assert isinstance(record, Query)
            if not _can_be_view(record):
                continue
            name = f"slt_view_{query_position}"
            try:
                target.execute(f"CREATE VIEW {name} AS {record.sql}")
            except TargetError:
                continue
            created.append(("VIEW", name))
            # PostgreSQL has no such index; the view is read all the same.
            with contextlib.suppress(TargetError):
                target.execute(f"CREATE DEFAULT INDEX ON {name}")
            self.views[query_position] = name

    def drop_read(self, position: int, target: Target, created: list[tuple[str, str]]) -> None:
        """Before DDL: drop the views of queries already read (they may depend on a table)."""
        for query_position, name in list(self.views.items()):
            if query_position < position:
                with contextlib.suppress(TargetError):
                    target.drop("VIEW", name)
                created.remove(("VIEW", name))
                del self.views[query_position]


def run_files(
    target: Target,
    paths: Sequence[Path],
    *,
    mode: str = "oneshot",
    max_records: int | None = None,
    engine: str = "postgresql",
    on_result: Callable[[FileResult], None] | None = None,
) -> list[FileResult]:
    results = []
    for path in paths:
        result = run_script(target, parse_script(path, engine), mode=mode, max_records=max_records)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
