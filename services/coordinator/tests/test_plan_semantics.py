"""The planner's rewrites give SQL's answers: MIR evaluated row by row, checked against DuckDB.

Outer joins, semijoins, antijoins, NOT IN's NULLs and aggregates over empty
input are rewritten into plain relational operators; a small reference
evaluator of MIR (multisets of Python tuples, three-valued logic) runs the
plans on tables with duplicates and NULLs, and DuckDB runs the SQL itself.
This checks the plans independently of the dataflow engine (the
differential harness in ``tests/differential`` checks the two together).
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import duckdb
import pytest
import sqlglot

from loupe.coordinator.plan import plan_select
from loupe.plan import mir
from loupe.plan.scalar import Call, Case, Cast, Column, Literal, Scalar, columns_of

TABLES: dict[str, tuple[list[tuple[str, str, str]], list[tuple[Any, ...]]]] = {
    "t": (
        [("a", "int4", "INTEGER"), ("b", "text", "VARCHAR")],
        [(1, "x"), (1, "x"), (2, "y"), (3, None), (None, "z"), (5, "w")],
    ),
    "u": (
        [("x", "int4", "INTEGER"), ("y", "int8", "BIGINT")],
        [(1, 10), (1, 11), (3, 30), (None, 40), (4, 2), (2, None)],
    ),
    "e": ([("p", "int4", "INTEGER")], []),
    "w": ([("q", "int4", "INTEGER")], [(1,), (3,), (3,)]),
}

Multiset = Counter[tuple[Any, ...]]


def _three_valued_and(values: Sequence[Any]) -> Any:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _three_valued_or(values: Sequence[Any]) -> Any:
    if any(v is True for v in values):
        return True
    return None if any(v is None for v in values) else False


def _strict(function: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    return lambda args: None if any(a is None for a in args) else function(*args)


CALLS: dict[str, Callable[[list[Any]], Any]] = {
    "eq": _strict(lambda a, b: a == b),
    "neq": _strict(lambda a, b: a != b),
    "lt": _strict(lambda a, b: a < b),
    "lte": _strict(lambda a, b: a <= b),
    "gt": _strict(lambda a, b: a > b),
    "gte": _strict(lambda a, b: a >= b),
    "add": _strict(lambda a, b: a + b),
    "sub": _strict(lambda a, b: a - b),
    "mul": _strict(lambda a, b: a * b),
    "mod": _strict(lambda a, b: a % b),  # non-negative operands only here
    "and": _three_valued_and,
    "or": _three_valued_or,
    "not": _strict(lambda a: not a),
    "is_null": lambda args: args[0] is None,
    "is_not_null": lambda args: args[0] is not None,
    "coalesce": lambda args: next((a for a in args if a is not None), None),
}


def scalar(expr: Scalar, row: tuple[Any, ...]) -> Any:
    if isinstance(expr, Column):
        return row[expr.index]
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Cast):
        value = scalar(expr.expr, row)
        return value if value is None or expr.type.startswith("int") else float(value)
    if isinstance(expr, Case):
        for condition, result in expr.whens:
            if scalar(condition, row) is True:
                return scalar(result, row)
        return scalar(expr.otherwise, row)
    assert isinstance(expr, Call)
    return CALLS[expr.func]([scalar(a, row) for a in expr.args])


def aggregate(agg: mir.Aggregate, rows: list[tuple[Any, ...]]) -> Any:
    if agg.expr is None:
        return len(rows)
    values = [v for v in (scalar(agg.expr, r) for r in rows) if v is not None]
    if agg.distinct:
        values = list(set(values))
    if agg.func == "count":
        return len(values)
    if not values:
        return None
    function: dict[str, Callable[[list[Any]], Any]] = {
        "sum": sum,
        "min": min,
        "max": max,
        "avg": lambda v: sum(v) / len(v),
    }
    return function[agg.func](values)


def evaluate(relation: mir.Relation) -> Multiset:
    """The multiset ``relation`` denotes (multiplicities may go negative mid-plan)."""
    if isinstance(relation, mir.Get):
        return Counter(TABLES[relation.name.rsplit(".", 1)[-1]][1])
    if isinstance(relation, mir.Constant):
        return Counter(relation.rows)
    if isinstance(relation, mir.Union):
        total: Multiset = Counter()
        for child in relation.inputs:
            for row, count in evaluate(child).items():
                total[row] += count
        return total
    if isinstance(relation, mir.Join):
        return _join(relation)
    if isinstance(relation, mir.Reduce):
        return _reduce(relation)
    source = evaluate(relation.children()[0])
    if isinstance(relation, mir.Map):
        out: Multiset = Counter()
        for row, count in source.items():
            for expr in relation.scalars:
                row = (*row, scalar(expr, row))
            out[row] += count
        return out
    if isinstance(relation, mir.Filter):
        return Counter(
            {
                r: c
                for r, c in source.items()
                if all(scalar(p, r) is True for p in relation.predicates)
            }
        )
    if isinstance(relation, mir.Project):
        out = Counter()
        for row, count in source.items():
            out[tuple(row[i] for i in relation.outputs)] += count
        return out
    if isinstance(relation, mir.Negate):
        return Counter({r: -c for r, c in source.items()})
    if isinstance(relation, mir.Threshold):
        return Counter({r: c for r, c in source.items() if c > 0})
    if isinstance(relation, mir.Distinct):
        return Counter({r: 1 for r, c in source.items() if c > 0})
    if isinstance(relation, mir.TopK):
        return _top_k(relation, source)
    raise NotImplementedError(type(relation).__name__)


def _top_k(top: mir.TopK, source: Multiset) -> Multiset:
    """Per group, rows offset..offset+limit in order (ties broken arbitrarily but repeatably)."""

    def compare(left: tuple[Any, ...], right: tuple[Any, ...]) -> int:
        for key in top.order:
            a, b = left[key.column], right[key.column]
            if a == b:
                continue
            if a is None or b is None:
                return (1 if a is None else -1) * (1 if key.nulls_last else -1)
            return (1 if a > b else -1) * (-1 if key.desc else 1)
        return (repr(left) > repr(right)) - (repr(left) < repr(right))

    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in source.elements():
        groups.setdefault(tuple(row[c] for c in top.group_key), []).append(row)
    end = None if top.limit is None else top.offset + top.limit
    out: Multiset = Counter()
    for rows in groups.values():
        out.update(sorted(rows, key=functools.cmp_to_key(compare))[top.offset : end])
    return out


def _join(join: mir.Join) -> Multiset:
    product: Multiset = Counter({(): 1})
    for child in join.inputs:
        step: Multiset = Counter()
        for left, left_count in product.items():
            for right, right_count in evaluate(child).items():
                step[left + right] += left_count * right_count
        product = step
    return Counter(
        {
            row: count
            for row, count in product.items()
            if all(
                all(scalar(e, row) is not None for e in cls)
                and len({scalar(e, row) for e in cls}) == 1
                for cls in join.equivalences
            )
        }
    )


def _reduce(reduce: mir.Reduce) -> Multiset:
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row, count in evaluate(reduce.input).items():
        assert count >= 0, "a Reduce input with negative multiplicity"
        if not count:  # consolidated away: no group for it
            continue
        key = tuple(scalar(k, row) for k in reduce.group_key)
        groups.setdefault(key, []).extend([row] * count)
    return Counter(
        {
            key + tuple(aggregate(a, rows) for a in reduce.aggregates): 1
            for key, rows in groups.items()
        }
    )


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]] | None:
    if name not in TABLES:
        return None
    return f"materialize.public.{name}", [(c, t) for c, t, _ in TABLES[name][0]]


@pytest.fixture(scope="module")
def duck() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")  # PostgreSQL's
    for name, (columns, rows) in TABLES.items():
        connection.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {d}' for c, _, d in columns)})")
        if rows:
            marks = ", ".join("?" for _ in columns)
            connection.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
    return connection


def _normal(rows: Multiset) -> Multiset:
    def value(v: Any) -> Any:
        return round(float(v), 6) if isinstance(v, float) else v

    return Counter({tuple(value(v) for v in row): c for row, c in rows.items() if c})


QUERIES = [
    # Aggregates over empty input: one row.
    "SELECT count(*), sum(p), min(p), avg(p), count(DISTINCT p) FROM e",
    "SELECT count(*) FROM e HAVING count(*) = 0",
    "SELECT count(*) + 1, max(p) FROM e WHERE p > 1",
    "SELECT count(*), sum(a) FROM t",
    "SELECT p, count(*) FROM e GROUP BY p",
    "SELECT a % 2 AS parity, bool_and(b = 'x'), bool_or(b = 'x') FROM t GROUP BY parity",
    "SELECT bool_and(a > 0), bool_or(a > 4) FROM t",
    # CTEs and subqueries in FROM.
    "WITH s(c) AS (SELECT a FROM t WHERE a > 1), r AS (SELECT c FROM s) SELECT * FROM r, s",
    "SELECT z.c FROM (SELECT a + 1 FROM t) AS z(c) WHERE z.c > 2",
    # IN, EXISTS and their negations, correlated by equality or not.
    "SELECT * FROM t WHERE a IN (SELECT x FROM u)",
    "SELECT * FROM t WHERE a NOT IN (SELECT x FROM u)",
    "SELECT * FROM t WHERE a NOT IN (SELECT x FROM u WHERE x IS NOT NULL)",
    "SELECT * FROM t WHERE a NOT IN (SELECT p FROM e)",
    "SELECT * FROM t WHERE a NOT IN (SELECT x FROM u WHERE u.y = t.a * 10)",
    "SELECT * FROM t WHERE a IN (SELECT x FROM u WHERE u.y > 10)",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.x = t.a AND y > 10)",
    "SELECT * FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.x = t.a)",
    "SELECT * FROM t WHERE NOT EXISTS (SELECT 1 FROM e)",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u GROUP BY x HAVING count(*) > 1)",
    "SELECT * FROM t WHERE a IN (SELECT q FROM w) AND NOT b IN (SELECT b FROM t WHERE a = 2)",
    # A join condition shared by the branches of an OR.
    "SELECT * FROM t, u WHERE (a = x AND y > 10) OR (a = x AND b = 'x')",
    "SELECT * FROM t, u WHERE (a = x AND y > 10) OR (a = x)",
    # Subqueries correlated by other predicates than equalities.
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE x = a AND y > a * 10)",
    "SELECT * FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE y < a * 10)",
    "SELECT * FROM t WHERE a IN (SELECT x FROM u WHERE y > a)",
    "SELECT * FROM t WHERE a NOT IN (SELECT x FROM u WHERE y <> a * 10)",
    "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE x = 2 AND t.a IS NULL)",
    "SELECT * FROM t AS t1 WHERE EXISTS (SELECT 1 FROM t WHERE t.a = t1.a AND t.b <> t1.b)",
    # A subquery's subquery naming the outermost query.
    "SELECT * FROM t AS l WHERE EXISTS (SELECT 1 FROM u AS s WHERE s.x = l.a "
    "AND EXISTS (SELECT 1 FROM w AS i WHERE i.q = s.x AND i.q <> l.a + 1))",
    "SELECT * FROM t AS l WHERE l.a NOT IN (SELECT s.x FROM u AS s "
    "WHERE NOT EXISTS (SELECT 1 FROM w AS i WHERE i.q = l.a))",
    # EXISTS and IN as values: in the SELECT list, under OR, NOT, CASE and HAVING.
    "SELECT a, EXISTS (SELECT 1 FROM u WHERE x = a) FROM t",
    "SELECT a, a IN (SELECT x FROM u), a NOT IN (SELECT q FROM w) FROM t",
    "SELECT * FROM t WHERE a IN (SELECT x FROM u) OR b = 'z'",
    "SELECT * FROM t WHERE NOT (a IN (SELECT q FROM w) AND b = 'x')",
    "SELECT a, CASE WHEN EXISTS (SELECT 1 FROM u WHERE y > a * 10) THEN 1 ELSE 0 END FROM t",
    "SELECT b, count(*) FROM t GROUP BY b HAVING EXISTS (SELECT 1 FROM e) OR count(*) > 1",
    # Scalar subqueries.
    "SELECT a, (SELECT max(x) FROM u) FROM t WHERE a < (SELECT count(*) FROM u)",
    "SELECT a, (SELECT p FROM e LIMIT 1) FROM t",
    "SELECT a, (SELECT count(*) FROM u WHERE u.x = t.a) FROM t",
    "SELECT a, (SELECT sum(y) + 1 FROM u WHERE u.x = t.a AND y > 10) FROM t",
    "SELECT * FROM t WHERE a * 10 < (SELECT max(y) FROM u WHERE u.x = t.a)",
    "SELECT a, (SELECT count(*) FROM u WHERE y > t.a * 10) FROM t",
    "SELECT a, (SELECT sum(y) FROM u WHERE x = t.a AND y <> t.a * 10) FROM t",
    "SELECT a, b FROM t WHERE (SELECT count(*) FROM u WHERE t.a IS NULL OR x = t.a) > 1",
    "SELECT b, count(*) + (SELECT count(*) FROM u) FROM t GROUP BY b "
    "HAVING max(a) > (SELECT min(x) FROM u)",
    "SELECT a, count(*) FROM t GROUP BY a HAVING count(*) >= (SELECT count(*) FROM w WHERE q = 3)",
    "SELECT count(*) FILTER (WHERE a > 1), sum(a) FILTER (WHERE b = 'x') FROM t",
    # Outer joins, with ON predicates on one side and on both.
    "SELECT * FROM t LEFT JOIN u ON a = x",
    "SELECT * FROM t LEFT JOIN u ON a = x AND y > 10",
    "SELECT * FROM t LEFT JOIN u ON a = x AND b = 'x'",
    "SELECT * FROM t RIGHT JOIN u ON a = x",
    "SELECT * FROM t FULL JOIN u ON a = x",
    "SELECT * FROM t FULL JOIN u ON a = x AND y > a * 10",
    "SELECT * FROM t LEFT JOIN u ON a < x",
    "SELECT * FROM t LEFT JOIN e ON a = p",
    "SELECT a, q, x FROM t LEFT JOIN w ON a = q LEFT JOIN u ON q = x",
    "SELECT a, x, q FROM t LEFT JOIN u ON a = x RIGHT JOIN w ON a = q WHERE b IS NULL",
    "SELECT a, x, q FROM t LEFT JOIN u ON a = x FULL JOIN w ON a = q WHERE a IS NULL",
    "SELECT a, x FROM t, w LEFT JOIN u ON q = x WHERE a = q AND a > 1",
    "SELECT a, count(x) FROM t LEFT JOIN u ON a = x GROUP BY a",
    # Outer joins whose padded rows WHERE rejects (simplified), or keeps.
    "SELECT * FROM t LEFT JOIN u ON a = x WHERE y > 10",
    "SELECT * FROM t LEFT JOIN u ON a = x WHERE y IS NULL",
    "SELECT * FROM t FULL JOIN u ON a = x WHERE a + 1 > 2",
    "SELECT * FROM t FULL JOIN u ON a = x WHERE a > 1 OR y > 10",
    "SELECT * FROM t RIGHT JOIN u ON a = x WHERE b = 'x' AND y IS NOT NULL",
    # USING and NATURAL: one merged column, first in *.
    "SELECT * FROM t JOIN (SELECT y, x AS a FROM u) AS s USING (a)",
    "SELECT * FROM t LEFT JOIN (SELECT y, x AS a FROM u) AS s USING (a)",
    "SELECT a, s.a, t.a, y FROM t RIGHT JOIN (SELECT y, x AS a FROM u) AS s USING (a)",
    "SELECT x, b, c FROM (SELECT y AS b, x FROM u) AS s NATURAL JOIN (SELECT x, y AS c FROM u) AS r",
    # DISTINCT ON and LIMIT inside subqueries.
    "SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b",
    "SELECT DISTINCT ON (x) x, y FROM u ORDER BY x, y DESC",
    "SELECT DISTINCT ON (x % 2) x FROM u WHERE x IS NOT NULL ORDER BY x % 2, x DESC",
    "SELECT * FROM (SELECT x, y FROM u ORDER BY y DESC LIMIT 2) AS s WHERE x > 0",
    "SELECT * FROM ((SELECT x FROM u) ORDER BY x DESC LIMIT 2) AS s",
    # VALUES.
    "SELECT * FROM (VALUES (1, 'a'), (2, NULL), (2, NULL)) AS v(c, d) WHERE c IN (SELECT a FROM t)",
    # Set operations across int4 and int8.
    "SELECT a FROM t UNION ALL SELECT y FROM u",
    "SELECT x FROM u EXCEPT SELECT a FROM t",
]


@pytest.mark.parametrize("optimized", [True, False], ids=["optimized", "translated"])
@pytest.mark.parametrize("sql", QUERIES)
def test_plans_give_what_duckdb_gives(
    sql: str, optimized: bool, duck: duckdb.DuckDBPyConnection
) -> None:
    """The planned MIR, evaluated, equals DuckDB's answer as a multiset (before and after
    projection pushdown)."""
    query = sqlglot.parse_one(sql, dialect="postgres")
    planned = plan_select(query, resolve, optimized=optimized)
    result = evaluate(planned.relation)
    assert all(count >= 0 for count in result.values()), "negative multiplicities in the result"
    projected: Multiset = Counter()
    for row, count in result.items():
        projected[tuple(row[i] for i in planned.finishing.project)] += count
    expected = Counter(tuple(row) for row in duck.execute(sql).fetchall())
    assert _normal(projected) == _normal(expected)


@pytest.mark.parametrize("sql", QUERIES)
def test_optimizing_keeps_the_columns_and_narrows_reduce_inputs(sql: str) -> None:
    """Projection pushdown keeps every output column's name and type, and no Reduce reads a
    table directly unless it uses all of the table's columns."""
    query = sqlglot.parse_one(sql, dialect="postgres")
    translated = plan_select(query, resolve, optimized=False).relation
    optimized = plan_select(query, resolve).relation
    assert optimized.columns == translated.columns
    for node in _walk(optimized):
        if isinstance(node, mir.Reduce) and isinstance(node.input, mir.Get):
            used = set().union(*(columns_of(k) for k in node.group_key))
            used |= set().union(*(columns_of(a.expr) for a in node.aggregates if a.expr))
            assert used == set(range(node.input.arity)), f"{node.input.name} not narrowed"


def _walk(relation: mir.Relation) -> list[mir.Relation]:
    nodes = [relation]
    for child in relation.children():
        nodes.extend(_walk(child))
    return nodes


def test_a_join_keeps_only_the_columns_used_above_it() -> None:
    """Of t(a, b) joined with u(x, y), only t.a and u.y reach the join when only they are used."""
    query = sqlglot.parse_one("SELECT sum(y) FROM t JOIN u ON a = x", dialect="postgres")
    joins = [n for n in _walk(plan_select(query, resolve).relation) if isinstance(n, mir.Join)]
    assert joins
    assert all(j.arity == 3 for j in joins)  # a, x, y


class RandomQueries:
    """Seeded random SELECTs mixing the rewrites: inner and outer joins (ON with extra and
    non-equality conditions), [NOT] EXISTS and [NOT] IN (correlated by equalities and by
    other predicates), grouping, global aggregates and correlated scalar subqueries."""

    INTEGER_COLUMNS: ClassVar[dict[str, list[str]]] = {
        "t": ["a"],
        "u": ["x", "y"],
        "w": ["q"],
        "e": ["p"],
    }

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def column(self, table: str) -> str:
        return self.random.choice(self.INTEGER_COLUMNS[table])

    def predicate(self, alias: str, table: str, outer: str | None = None) -> str:
        column = f"{alias}.{self.column(table)}"
        forms = [
            f"{column} > {self.random.randint(0, 4)}",
            f"{column} IS NULL",
            f"{column} IS NOT NULL",
            f"({column} = 1 OR {column} > 2)",
        ]
        if outer is not None:
            forms += [f"{column} = {outer}", f"{column} = {outer}", f"{column} < {outer}"]
        return self.random.choice(forms)

    def subquery_predicate(self, outer: str) -> str:
        table = self.random.choice(list(self.INTEGER_COLUMNS))
        correlated = outer if self.random.random() < 0.6 else None
        inner = (
            f"SELECT {self.column(table)} FROM {table} AS s "
            f"WHERE {self.predicate('s', table, correlated)}"
        )
        form = self.random.choice(["EXISTS", "NOT EXISTS", "IN", "NOT IN"])
        predicate = f"{outer} {form} ({inner})" if "IN" in form else f"{form} ({inner})"
        if self.random.random() < 0.3:  # a value inside other logic, not a conjunct
            return f"({predicate} OR {outer} > 3)"
        return predicate

    def query(self) -> str:
        left, right = self.random.sample(list(self.INTEGER_COLUMNS), 2)
        lc, rc = f"l.{self.column(left)}", f"r.{self.column(right)}"
        kind = self.random.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", ","])
        where = []
        if kind == ",":
            where.append(f"{lc} = {rc}")
            source = f"{left} AS l, {right} AS r"
        else:
            on = [f"{lc} = {rc}"]
            if self.random.random() < 0.3:
                on.append(self.predicate("r", right))
            if self.random.random() < 0.2:
                on.append(f"{rc} < {lc} + 3")
            source = f"{left} AS l {kind} {right} AS r ON {' AND '.join(on)}"
        if self.random.random() < 0.5:
            where.append(self.predicate("l", left))
        if self.random.random() < 0.3:  # may make an outer join inner
            where.append(self.predicate("r", right))
        if self.random.random() < 0.4:
            where.append(self.subquery_predicate(lc))
        where_sql = f" WHERE {' AND '.join(where)}" if where else ""
        shape = self.random.random()
        if shape < 0.4:
            having = " HAVING count(*) > 1" if self.random.random() < 0.3 else ""
            select = f"{lc}, count(*), sum({rc}), min({rc})"
            return f"SELECT {select} FROM {source}{where_sql} GROUP BY {lc}{having}"
        if shape < 0.5:
            return f"SELECT count(*), max({lc}) FROM {source}{where_sql}"
        scalar = ""
        if self.random.random() < 0.3:
            table = self.random.choice(list(self.INTEGER_COLUMNS))
            operator = self.random.choice(["=", "<", ">"])
            scalar = (
                f", (SELECT count(*) FROM {table} AS z "
                f"WHERE z.{self.column(table)} {operator} {lc})"
            )
        return f"SELECT {lc}, {rc}{scalar} FROM {source}{where_sql}"

    def chain(self) -> str:
        """Three tables joined by any mix of inner and outer joins, filtered by predicates that
        keep or reject NULLs (outer joins interact with WHERE and with one another)."""
        tables = [self.random.choice(list(self.INTEGER_COLUMNS)) for _ in range(3)]
        aliases = ["p", "q", "r"]
        source = f"{tables[0]} AS p"
        for k in (1, 2):
            kind = self.random.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"])
            earlier = self.random.randrange(k)
            on = (
                f"{aliases[earlier]}.{self.column(tables[earlier])} = "
                f"{aliases[k]}.{self.column(tables[k])}"
            )
            source += f" {kind} {tables[k]} AS {aliases[k]} ON {on}"
        where = [
            self.predicate(aliases[j], tables[j]) for j in range(3) if self.random.random() < 0.35
        ]
        columns = ", ".join(f"{a}.{self.column(t)}" for a, t in zip(aliases, tables, strict=True))
        where_sql = f" WHERE {' AND '.join(where)}" if where else ""
        return f"SELECT {columns} FROM {source}{where_sql}"


@pytest.mark.parametrize("seed", range(4))
def test_random_queries_give_what_duckdb_gives(seed: int, duck: duckdb.DuckDBPyConnection) -> None:
    """60 random queries per seed: the optimized plan, evaluated, equals DuckDB's answer."""
    generator = RandomQueries(seed)
    for index in range(60):
        sql = generator.query() if index % 3 else generator.chain()
        planned = plan_select(sqlglot.parse_one(sql, dialect="postgres"), resolve)
        result = evaluate(planned.relation)
        assert all(count >= 0 for count in result.values()), sql
        projected: Multiset = Counter()
        for row, count in result.items():
            projected[tuple(row[i] for i in planned.finishing.project)] += count
        expected = Counter(tuple(row) for row in duck.execute(sql).fetchall())
        assert _normal(projected) == _normal(expected), sql
