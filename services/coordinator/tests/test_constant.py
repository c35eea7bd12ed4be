"""Queries without FROM, answered by the coordinator itself."""

from __future__ import annotations

import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.constant import evaluate_constant


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT 1 WHERE false", []),
        ("SELECT 1 WHERE true", [(1,)]),
        ("SELECT 1 AS a, 'x' AS b", [(1, "x")]),
        ("SELECT count(*) AS n", [(1,)]),
        ("SELECT count(*) AS n WHERE 1 = 2", [(0,)]),
    ],
)
def test_a_select_without_from_reads_one_row(sql, rows):
    """Like PostgreSQL, a FROM-less SELECT reads one row, so WHERE can empty it."""
    _columns, result = evaluate_constant(sql)
    assert result == rows


def test_constant_errors_carry_a_sqlstate():
    """A bad constant query is a SQL error, not a crash."""
    with pytest.raises(LoupeError) as raised:
        evaluate_constant("SELECT nope")
    assert raised.value.code in {"42703", "0A000", "42601", "22000"}
