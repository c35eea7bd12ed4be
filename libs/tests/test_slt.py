"""The sqllogictest runner: parsing, printing, hashing and checking, on a real PostgreSQL."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from pathlib import Path

import pytest

from loupe.slt import Query, Statement, check, format_value, parse_script, run_script
from loupe.slt.targets import PostgresTarget

SCRIPT = """\
hash-threshold 8

statement ok
CREATE TABLE t1(a INTEGER, b TEXT)

statement ok
INSERT INTO t1 VALUES (1, 'x'), (2, ''), (3, NULL)

skipif postgresql
query I nosort
SELECT 'never run here'
----
0

onlyif mysql
statement ok
THIS IS NOT SQL

query IT rowsort
SELECT a, b FROM t1
----
1
x
2
(empty)
3
NULL

query I nosort
SELECT a * 10 FROM t1 ORDER BY a
----
10
20
31

query R valuesort
SELECT a / 2.0 FROM t1
----
0.500
1.000
1.500

statement error
SELECT * FROM no_such_table

query I nosort
SELECT a FROM t1 ORDER BY 1
----
3 values hashing to HASH

halt

statement ok
NOT REACHED
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    digest = hashlib.md5(b"1\n2\n3\n").hexdigest()
    path = tmp_path / "sample.test"
    path.write_text(SCRIPT.replace("HASH", digest))
    return path


def test_records_are_parsed_and_guards_skip_other_engines(script):
    """skipif/onlyif drop records for other engines; halt ends the script."""
    parsed = parse_script(script)
    statements = [r for r in parsed.records if isinstance(r, Statement)]
    queries = [r for r in parsed.records if isinstance(r, Query)]
    assert parsed.skipped == 2
    assert [s.expect_error for s in statements] == [False, False, True]
    assert [q.sort for q in queries] == ["rowsort", "nosort", "valuesort", "nosort"]
    assert queries[-1].hashed == (3, hashlib.md5(b"1\n2\n3\n").hexdigest())
    assert not any("NOT REACHED" in s.sql for s in statements)


@pytest.mark.parametrize(
    ("value", "kind", "printed"),
    [
        (None, "I", "NULL"),
        (7, "I", "7"),
        (Decimal("7.9"), "I", "7"),
        (-7.9, "I", "-7"),
        (True, "I", "1"),
        (2, "R", "2.000"),
        (Decimal("0.1236"), "R", "0.124"),
        ("", "T", "(empty)"),
        ("tab\there", "T", "tab@here"),
        (3, "T", "3"),
    ],
)
def test_values_print_as_sqllogictest_prints_them(value, kind, printed):
    assert format_value(value, kind) == printed


def test_check_compares_values_and_hashes():
    """A wrong value or a wrong count is a failure, with what was expected and got."""
    expected = Query("q", "I", "rowsort", None, ("1", "2"), None, 1)
    assert check(expected, [(2,), (1,)]) is None
    assert "expected [1 2]" in (check(expected, [(1,), (3,)]) or "")
    hashed = Query("q", "I", "nosort", None, None, (2, hashlib.md5(b"1\n2\n").hexdigest()), 1)
    assert check(hashed, [(1,), (2,)]) is None
    assert check(hashed, [(2,), (1,)]) is not None


@pytest.mark.parametrize("mode", ["oneshot", "views"])
def test_a_script_runs_on_postgres_and_reports_its_one_failure(script, postgres_url, mode):
    """Every record but the deliberately wrong one passes; the failure names its line."""
    target = PostgresTarget(postgres_url)
    try:
        result = run_script(target, parse_script(script), mode=mode)
    finally:
        target.close()
    assert result.records == 7
    assert result.passed == 6
    wrong = SCRIPT.splitlines().index("SELECT a * 10 FROM t1 ORDER BY a")  # its record's line
    assert [f.line for f in result.failures] == [wrong]
    if mode == "views":
        assert result.not_views == 0
