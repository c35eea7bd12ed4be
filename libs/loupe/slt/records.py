"""sqllogictest scripts: records, as SQLite's sqllogictest defines them.

A script is records separated by blank lines. ``statement ok|error`` runs
SQL; ``query <types> [nosort|rowsort|valuesort] [label]`` runs a query whose
expected values follow ``----`` one per line (or ``N values hashing to
<md5>``). ``skipif``/``onlyif <engine>`` lines guard the next record,
``hash-threshold N`` sets when results are hashed, ``halt`` ends the script.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ENGINE = "postgresql"
SORT_MODES = ("nosort", "rowsort", "valuesort")


@dataclass(frozen=True)
class Statement:
    sql: str
    expect_error: bool
    line: int


@dataclass(frozen=True)
class Query:
    sql: str
    types: str
    sort: str
    label: str | None
    # The expected values, one per entry, or None when they are given as a hash.
    values: tuple[str, ...] | None
    hashed: tuple[int, str] | None  # (number of values, md5)
    line: int


@dataclass(frozen=True)
class HashThreshold:
    threshold: int
    line: int


Record = Statement | Query | HashThreshold


@dataclass
class Script:
    path: Path
    records: list[Record] = field(default_factory=list)
    skipped: int = 0  # records guarded away from this engine


def parse_script(path: Path, engine: str = ENGINE) -> Script:
    """The records of ``path`` that run on ``engine`` (the others are counted as skipped)."""
    script = Script(Path(path))
    for record, runs in _records(Path(path).read_text(errors="replace").splitlines(), engine):
        if record is None:
            break  # halt
        if runs:
            script.records.append(record)
        else:
            script.skipped += 1
    return script


def _blocks(lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    block: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        if line.strip() == "":
            if block:
                yield start, block
                block = []
            continue
        if line.startswith("#") and not block:
            continue
        if not block:
            start = number
        block.append(line)
    if block:
        yield start, block


def _records(lines: list[str], engine: str) -> Iterator[tuple[Record | None, bool]]:
    for start, block in _blocks(lines):
        runs = True
        while block and block[0].split()[0] in ("skipif", "onlyif"):
            guard, name = block[0].split()[:2]
            if (guard == "skipif" and name == engine) or (guard == "onlyif" and name != engine):
                runs = False
            block = block[1:]
            start += 1
        if not block:
            continue
        words = block[0].split()
        kind = words[0]
        if kind == "halt":
            if runs:
                yield None, True
                return
            continue
        if kind == "hash-threshold":
            yield HashThreshold(int(words[1]), start), runs
        elif kind == "statement":
            yield Statement("\n".join(block[1:]), words[1] == "error", start), runs
        elif kind == "query":
            yield _query(words, block[1:], start), runs


def _query(words: list[str], body: list[str], line: int) -> Query:
    types = words[1] if len(words) > 1 else ""
    sort = words[2] if len(words) > 2 and words[2] in SORT_MODES else "nosort"
    label = words[3] if len(words) > 3 else None
    if "----" in body:
        split = body.index("----")
        sql, expected = body[:split], body[split + 1 :]
    else:
        sql, expected = body, []
    hashed = None
    values: tuple[str, ...] | None = tuple(v.strip() for v in expected)
    if len(expected) == 1 and " values hashing to " in expected[0]:
        count, _, digest = expected[0].partition(" values hashing to ")
        hashed, values = (int(count), digest.strip()), None
    return Query("\n".join(sql), types, sort, label, values, hashed, line)
