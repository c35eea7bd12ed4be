"""Wrong answers the random queries (``test_random_queries``) found, reduced, against PostgreSQL.

Each view is the smallest query that showed the bug, maintained by the engine
through seeded inserts and deletes and compared with PostgreSQL after every
step, as the differential tests do; the comment says what was wrong.
"""

from __future__ import annotations

import pytest

from .harness import View, run

FINDINGS = (
    # A comma binds looser than JOIN: FROM x, y RIGHT JOIN z is x CROSS JOIN (y RIGHT JOIN z); the
    # planner joined (x CROSS JOIN y) RIGHT JOIN z, padding z's unmatched rows once instead of per x.
    View(
        "comma_then_right_join",
        "SELECT y.a, z.k FROM t1 AS x, t2 AS y RIGHT JOIN t3 AS z ON y.a = z.k",
    ),
    View(
        "comma_then_full_join_filtered_before",
        "SELECT x.s, y.c, z.name FROM t1 AS x, t2 AS y FULL JOIN t3 AS z ON y.a = z.k "
        "WHERE x.a > 0",
    ),
    # A WHERE over the first item must not turn the group's RIGHT JOIN into an inner join.
    View(
        "comma_then_right_join_where_on_the_first",
        "SELECT x.a, z.k FROM t1 AS x, t2 AS y RIGHT JOIN t3 AS z ON y.a = z.k AND y.c > 5 "
        "WHERE x.b = 2",
    ),
    View(
        "comma_then_join_then_right_join",
        "SELECT y.a, w.name, z.k FROM t1 AS x, t2 AS y JOIN t3 AS w ON y.a = w.k "
        "RIGHT JOIN t3 AS z ON y.a = z.k AND w.name > 'a' WHERE x.b = 2",
    ),
    # JOIN … USING after a comma names the group's columns: t2's n here, not t2's and x's
    # (42702 "ambiguous" before); * lists the items before the comma first.
    View(
        "comma_then_join_using",
        "SELECT x.a, y.c, z.d FROM t2 AS x, t2 AS y LEFT JOIN t2 AS z USING (n)",
    ),
    View("comma_then_join_using_star", "SELECT * FROM t1, t2 JOIN t2 AS y USING (a)"),
    View("comma_then_natural_join_star", "SELECT * FROM t3, t2 NATURAL JOIN t1"),
)


@pytest.mark.parametrize("view", FINDINGS, ids=[v.name for v in FINDINGS])
def test_found_by_random_queries(view: View, postgres_url: str) -> None:
    for seed in (1, 2):
        mismatches = run([view], seed=seed, steps=8, postgres_url=postgres_url)
        assert not mismatches, f"seed {seed}: {mismatches[0]}"
