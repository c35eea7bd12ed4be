"""FROM items separated by commas: each comma-separated group joins on its own."""

from __future__ import annotations

import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.plan import plan_query
from loupe.coordinator.sql.parser import parse_one

TABLES = {"t": (("a", "int4"), ("b", "text")), "u": (("x", "int4"), ("y", "int8"))}


def _plan(sql: str) -> object:
    return plan_query(parse_one(sql).expression, lambda n: (n, TABLES[n]) if n in TABLES else None)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 FROM t, u JOIN t AS w ON t.a = w.a",
        "SELECT 1 FROM t, u RIGHT JOIN t AS w ON u.x = w.a AND t.a > 0",
    ],
)
def test_an_on_condition_cannot_read_an_item_before_a_comma(sql: str) -> None:
    """As in PostgreSQL: 42P01, invalid reference to FROM-clause entry for table "t"."""
    with pytest.raises(LoupeError) as raised:
        _plan(sql)
    assert raised.value.code == "42P01"
    assert raised.value.message == 'invalid reference to FROM-clause entry for table "t"'


def test_items_after_the_comma_may_join_on_each_other() -> None:
    _plan("SELECT 1 FROM t, u RIGHT JOIN t AS w ON u.x = w.a JOIN u AS z ON z.x = w.a")
