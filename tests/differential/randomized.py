"""A grammar of random, well-typed SQL: scalar expressions over typed columns, and queries.

``Expressions`` draws an expression of a wanted type from a seeded random
source: columns, literals (NULLs included), operators, functions, CASE,
casts, comparisons and boolean logic, nested up to a depth. Everything it
writes is PostgreSQL that Loupe claims to support; the tests run it on both
and compare, so a mismatch is a bug in one or the other (PostgreSQL is the
reference). ``Queries`` builds SELECTs over the differential workload's
tables from the same expressions: filters, joins, grouping, DISTINCT [ON],
ORDER BY … LIMIT, set operations, subqueries and CTEs.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# The types the grammar writes expressions of.
TYPES = ("int4", "int8", "float8", "numeric", "text", "bool", "date", "timestamp")
# uuid, arrays and jsonb: made from and read into the types above (``extended=True``).
EXTENDED_TYPES = ("uuid", "_int4", "_text", "jsonb")

_LITERALS: dict[str, tuple[str, ...]] = {
    "int4": ("0", "1", "2", "-3", "7", "100", "2147483647"),
    "int8": ("CAST(5 AS int8)", "CAST(-1 AS int8)", "9223372036854775807", "4294967296"),
    "float8": ("CAST(0.5 AS float8)", "CAST(-2.25 AS float8)", "CAST(1e10 AS float8)"),
    "numeric": ("1.5", "0.25", "-3.75", "100", "0.001"),
    "text": ("'a'", "'apple'", "''", "'x%y'", "'A_b'", "'héllo'", "' pad '"),
    "bool": ("true", "false"),
    "date": ("DATE '2024-02-29'", "DATE '2023-12-31'", "DATE '2000-01-01'"),
    "timestamp": ("TIMESTAMP '2024-02-29 12:30:00'", "TIMESTAMP '2023-12-31 23:59:59.5'"),
    "uuid": ("'A0EEBC99-9C0B4EF8-BB6D6BB9BD380A11'::uuid", "md5('')::uuid"),
    "_int4": ("'{1,NULL,3}'::int[]", "'{}'::int[]", "ARRAY[2, 2]"),
    "_text": ("'{a,\"b c\",NULL}'::text[]", "ARRAY['x', '']"),
    "jsonb": ('\'{"a": 1, "b": [1, "x"]}\'::jsonb', "'[1, 2.50, null]'::jsonb", "'\"s\"'::jsonb"),
}
_SPELLED = {"_int4": "int[]", "_text": "text[]"}
_JSON_KEYS = ("0", "1", "-1", "'a'", "'b'")
_JSON_TEXT_KEYS = ("'a'", "'k'", "1")
_JSON_EXISTS = ("'a'", "'k'", "'s'")
_PATTERNS = ("'a%'", "'%p%'", "'_%'", "'%'", "''", "'x\\%y'", "'A_b'")
_NUMBERS = ("int4", "int8", "float8", "numeric")
_ORDERED = ("int4", "int8", "float8", "numeric", "text", "date", "timestamp")


# Literals whose arithmetic overflows (or whose casts to int4 do): not drawn when safe.
_OVERFLOWING = frozenset(
    ("2147483647", "9223372036854775807", "4294967296", "CAST(1e10 AS float8)")
)

# Values the differential workload's columns hold: safe draws use them too, so that
# comparisons with a literal hold for some rows.
_DATA_LITERALS = {
    "int4": ("-2", "3", "4", "5"),
    "int8": ("CAST(3 AS int8)", "CAST(-8 AS int8)"),
    "float8": ("CAST(0.1 AS float8)", "CAST(2.0 AS float8)", "CAST(3.75 AS float8)"),
    "numeric": ("2", "100.125", "-0.25"),
    "text": ("'banana'", "'kiwi,lime'", "'cherry'", "'Apple pie'"),
    "date": ("DATE '2024-06-30'", "DATE '2024-11-15'"),
}


class Expressions:
    """Random expressions over ``columns`` (name -> type), at most ``depth`` calls deep.

    ``columns`` may name any expression of the type, not only columns (the
    queries pass aggregates and subqueries as leaves). ``safe`` draws
    expressions that raise no error on the workload's small values: no
    integer ``*``, no overflowing literals, divisors wrapped in
    ``nullif(x, 0)``, no ``float8 %`` (which PostgreSQL does not have). Where
    an error surfaces in a query depends on the order a plan evaluates in,
    in PostgreSQL as in Materialize; the expression tests compare errors.
    """

    def __init__(
        self,
        rng: random.Random,
        columns: Mapping[str, str],
        depth: int = 3,
        safe: bool = False,
        *,
        extended: bool = False,
    ) -> None:
        self.rng = rng
        self.columns = dict(columns)
        self.depth = depth
        self.safe = safe
        integer_operators = ("+", "-") if safe else ("+", "-", "*")
        modulo_types = ("int4",) if safe else ("int4", "float8")
        rules: dict[str, list[Callable[[int], str]]] = {t: [] for t in TYPES + EXTENDED_TYPES}
        rules["int4"] += [
            lambda d: self._binary("int4", integer_operators, d),
            lambda d: f"({self.of('int4', d)} / {self._divisor('int4', d)})",
            lambda d: f"({self.of('int4', d)} % {self._divisor(self._pick(modulo_types), d)})",
            lambda d: f"abs({self.of('int4', d)})",
            lambda d: f"(- {self.of('int4', d)})",
            lambda d: f"length({self.of('text', d)})",
            lambda d: f"strpos({self.of('text', d)}, {self.of('text', d)})",
            lambda d: f"CAST({self.of(self._pick(_NUMBERS), d)} AS int4)",
            lambda d: f"CAST(extract(day FROM {self.of('date', d)}) AS int4)",
            lambda d: f"({self.of('date', d)} - {self.of('date', d)})",
            lambda d: f"mod({self.of('int4', d)}, {self._divisor('int4', d)})",
        ]
        rules["int8"] += [
            lambda d: self._binary("int8", integer_operators, d),
            lambda d: f"({self.of('int8', d)} / {self._divisor('int4', d)})",
            lambda d: f"CAST({self.of('int4', d)} AS int8)",
            lambda d: f"({self.of('int4', d)} + {self.of('int8', d)})",
            lambda d: f"abs({self.of('int8', d)})",
        ]
        float_division = [lambda d: f"({self.of('float8', d)} / {self._divisor('float8', d)})"]
        rules["float8"] += [
            lambda d: self._binary("float8", ("+", "-", "*") if safe else ("+", "-", "*", "/"), d),
            *(float_division if safe else []),
            lambda d: f"CAST({self.of(self._pick(('int4', 'int8', 'numeric')), d)} AS float8)",
            lambda d: f"({self.of('float8', d)} * {self.of('int4', d)})",
            lambda d: f"sqrt(abs({self.of('float8', d)}))",
            lambda d: f"{self._pick(('round', 'floor', 'ceil', 'trunc'))}({self.of('float8', d)})",
            lambda d: f"power({self.of('float8', d)}, 2)",
            lambda d: f"sign({self.of(self._pick(('int4', 'float8')), d)})",
            lambda d: f"extract(epoch FROM {self.of('timestamp', d)})::float8",
        ]
        rules["numeric"] += [
            lambda d: self._binary("numeric", ("+", "-", "*"), d),
            lambda d: f"({self.of('numeric', d)} + {self.of('int4', d)})",
            lambda d: f"round({self.of('numeric', d)}, {self.rng.randint(0, 2)})",
            lambda d: f"abs({self.of('numeric', d)})",
            lambda d: f"CAST({self.of('int8', d)} AS numeric)",
        ]
        rules["text"] += [
            lambda d: f"({self.of('text', d)} || {self.of('text', d)})",
            lambda d: f"{self._pick(('upper', 'lower', 'reverse', 'btrim'))}({self.of('text', d)})",
            lambda d: f"substr({self.of('text', d)}, {self.of('int4', d)})",
            lambda d: f"replace({self.of('text', d)}, {self.of('text', d)}, {self.of('text', d)})",
            lambda d: f"CAST({self.of(self._pick(('int4', 'int8', 'bool', 'date')), d)} AS text)",
            lambda d: f"concat({self.of('text', d)}, {self.of('int4', d)})",
            lambda d: f"lpad({self.of('text', d)}, {self.rng.randint(0, 6)}, 'xy')",
            lambda d: f"split_part({self.of('text', d)}, 'p', {self.rng.randint(1, 3)})",
            lambda d: f"left({self.of('text', d)}, {self.rng.randint(-2, 3)})",
        ]
        rules["bool"] += [
            lambda d: self._comparison(d),
            lambda d: f"({self.of('bool', d)} AND {self.of('bool', d)})",
            lambda d: f"({self.of('bool', d)} OR {self.of('bool', d)})",
            lambda d: f"(NOT {self.of('bool', d)})",
            lambda d: f"({self.of(self._pick(TYPES), d)} IS {self._pick(('', 'NOT '))}NULL)",
            lambda d: (
                f"({self.of('text', d)} {self._pick(('LIKE', 'ILIKE', 'NOT LIKE'))} "
                f"{self._pick(_PATTERNS)})"
            ),
            lambda d: self._between(d),
            lambda d: f"({self.of('int4', d)} IN ({self.of('int4', d)}, {self.of('int4', d)}))",
        ]
        rules["date"] += [
            lambda d: f"({self.of('date', d)} + {self.of('int4', d)})",
            lambda d: f"({self.of('date', d)} - {self.rng.randint(0, 400)})",
            lambda d: f"CAST({self.of('timestamp', d)} AS date)",
        ]
        rules["timestamp"] += [
            lambda d: f"({self.of('timestamp', d)} + INTERVAL '{self.rng.randint(1, 90)} minutes')",
            lambda d: (
                f"date_trunc('{self._pick(('hour', 'day', 'month', 'year'))}', "
                f"{self.of('timestamp', d)})"
            ),
            lambda d: f"CAST({self.of('date', d)} AS timestamp)",
        ]
        for type_ in TYPES:  # forms every type has
            rules[type_] += [
                lambda d, t=type_: (
                    f"CASE WHEN {self.of('bool', d)} THEN {self.of(t, d)} ELSE {self.of(t, d)} END"
                ),
                lambda d, t=type_: f"coalesce({self.of(t, d)}, {self.of(t, d)})",
                lambda d, t=type_: f"nullif({self.of(t, d)}, {self.of(t, d)})",
            ]
            if type_ != "bool":
                rules[type_].append(
                    lambda d, t=type_: (
                        f"{self._pick(('greatest', 'least'))}({self.of(t, d)}, {self.of(t, d)})"
                    )
                )
        if extended:
            self._extend(rules)
        self.rules = rules

    def _extend(self, rules: dict[str, list[Callable[[int], str]]]) -> None:
        """Rules making and reading uuid, int[], text[] and jsonb values (only when asked for:
        the base grammar's draws stay what they were)."""
        rules["uuid"] += [lambda d: f"CAST(md5({self.of('text', d)}) AS uuid)"]
        rules["_int4"] += [
            lambda d: f"ARRAY[{self.of('int4', d)}, {self.of('int4', d)}]",
            lambda d: f"({self.of('_int4', d)} || {self.of('int4', d)})",
            lambda d: f"({self.of('_int4', d)} || {self.of('_int4', d)})",
        ]
        rules["_text"] += [
            lambda d: f"ARRAY[{self.of('text', d)}, {self.of('text', d)}]",
            lambda d: f"CAST({self.of('_int4', d)} AS text[])",
        ]
        rules["jsonb"] += [
            lambda d: f"CAST(('{{\"k\": ' || {self.of('int4', d)} || '}}') AS jsonb)",
            lambda d: f"({self.of('jsonb', d)} -> {self._pick(_JSON_KEYS)})",
        ]
        rules["int4"] += [
            lambda d: f"cardinality({self.of('_int4', d)})",
            lambda d: f"array_length({self.of(self._pick(('_int4', '_text')), d)}, 1)",
            lambda d: f"({self.of('_int4', d)})[{self.of('int4', d)}]",
        ]
        rules["text"] += [
            lambda d: f"CAST({self.of(self._pick(EXTENDED_TYPES), d)} AS text)",
            lambda d: f"array_to_string({self.of('_text', d)}, ',', '*')",
            lambda d: f"({self.of('_text', d)})[{self.rng.randint(0, 3)}]",
            lambda d: f"({self.of('jsonb', d)} ->> {self._pick(_JSON_TEXT_KEYS)})",
            lambda d: f"jsonb_typeof({self.of('jsonb', d)})",
        ]
        rules["bool"] += [
            lambda d: f"({self.of('int4', d)} = ANY({self.of('_int4', d)}))",
            lambda d: (
                f"({self.of('_int4', d)} {self._pick(('@>', '<@', '&&'))} {self.of('_int4', d)})"
            ),
            lambda d: (
                f"({self.of('_int4', d)} {self._pick(('=', '<>', '<', '>='))} "
                f"{self.of('_int4', d)})"
            ),
            lambda d: f"({self.of('uuid', d)} {self._pick(('=', '<', '>='))} {self.of('uuid', d)})",
            lambda d: f"({self.of('jsonb', d)} ? {self._pick(_JSON_EXISTS)})",
            lambda d: f"({self.of('jsonb', d)} @> {self.of('jsonb', d)})",
            lambda d: f"({self.of('jsonb', d)} = {self.of('jsonb', d)})",
        ]
        for type_ in EXTENDED_TYPES:
            rules[type_] += [
                lambda d, t=type_: (
                    f"CASE WHEN {self.of('bool', d)} THEN {self.of(t, d)} ELSE {self.of(t, d)} END"
                ),
                lambda d, t=type_: f"coalesce({self.of(t, d)}, {self.of(t, d)})",
            ]

    def of(self, type_: str, depth: int | None = None) -> str:
        """An expression of ``type_``; deeper calls lean to leaves."""
        depth = self.depth if depth is None else depth
        if depth <= 0 or self.rng.random() < 0.3:
            return self._leaf(type_)
        return self.rng.choice(self.rules[type_])(depth - 1)

    def _leaf(self, type_: str) -> str:
        columns = [name for name, t in self.columns.items() if t == type_]
        if self.safe:
            return self._safe_leaf(type_, columns)
        roll = self.rng.random()
        if columns and roll < 0.6:
            return self.rng.choice(columns)
        if roll < 0.68:
            return f"CAST(NULL AS {_SPELLED.get(type_, type_)})"
        return self.rng.choice(_LITERALS[type_])

    def _safe_leaf(self, type_: str, columns: Sequence[str]) -> str:
        """A query's leaf: mostly a column; a boolean without columns of its type is mostly
        a comparison of one; few NULLs (a query of NULLs tells little); no overflow."""
        roll = self.rng.random()
        if columns and roll < 0.65:
            return self.rng.choice(columns)
        compared = [(name, t) for name, t in self.columns.items() if t in _LITERALS]
        if type_ == "bool" and not columns and compared and roll < 0.85:
            name, column_type = self.rng.choice(compared)
            other = self._safe_leaf(column_type, [])  # a literal, mostly
            return f"({name} {self._pick(('=', '<', '>=', '<>'))} {other})"
        if self.rng.random() < 0.05:
            return f"CAST(NULL AS {type_})"
        literals = [v for v in _LITERALS[type_] if v not in _OVERFLOWING]
        return self.rng.choice(literals + list(_DATA_LITERALS.get(type_, ())))

    def _divisor(self, type_: str, depth: int) -> str:
        """A divisor of ``type_``: never zero when safe (``nullif(x, 0)`` is NULL instead)."""
        divisor = self.of(type_, depth)
        return f"nullif({divisor}, 0)" if self.safe else divisor

    def _pick(self, options: Sequence[str]) -> str:
        return self.rng.choice(list(options))

    def _binary(self, type_: str, operators: Sequence[str], depth: int) -> str:
        return f"({self.of(type_, depth)} {self._pick(operators)} {self.of(type_, depth)})"

    def _operand_type(self, options: Sequence[str]) -> str:
        """A type among ``options``; when safe, mostly one the columns have (a comparison of
        two constants filters all rows or none)."""
        present = sorted({t for t in self.columns.values() if t in options})
        if self.safe and present and self.rng.random() < 0.85:
            return self._pick(present)
        return self._pick(options)

    def _comparison(self, depth: int) -> str:
        type_ = self._operand_type(_ORDERED)
        operator = self._pick(("=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM"))
        return f"({self.of(type_, depth)} {operator} {self.of(type_, depth)})"

    def _between(self, depth: int) -> str:
        type_ = self._operand_type(_ORDERED)
        return (
            f"({self.of(type_, depth)} BETWEEN {self.of(type_, depth)} AND {self.of(type_, depth)})"
        )


# Column types an equality may join on (PostgreSQL compares the numeric types with each other).
_JOINABLE = {
    "int4": _NUMBERS,
    "int8": _NUMBERS,
    "float8": _NUMBERS,
    "numeric": _NUMBERS,
    "text": ("text",),
    "date": ("date",),
    "bool": ("bool",),
    "timestamp": ("timestamp",),
}
# The aggregates of each result type: (SQL with {} for the argument, the argument's types).
_AGGREGATES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "int8": (
        ("count({})", TYPES),
        ("count(DISTINCT {})", TYPES),
        ("sum({})", ("int4",)),
        ("count(*)", ()),
    ),
    "int4": (("min({})", ("int4",)), ("max({})", ("int4",))),
    "numeric": (
        ("sum({})", ("int8", "numeric")),
        ("avg({})", ("int4", "int8", "numeric")),
        ("avg(DISTINCT {})", ("int4",)),
        ("max({})", ("numeric",)),
        ("stddev({})", ("int4", "numeric")),
        ("var_pop({})", ("int8",)),
    ),
    "float8": (
        ("sum({})", ("float8",)),
        ("avg({})", ("float8",)),
        ("min({})", ("float8",)),
        ("sum(DISTINCT {})", ("float8",)),
        ("variance({})", ("float8",)),
        ("stddev_pop({})", ("float8",)),
    ),
    "text": (("min({})", ("text",)), ("max({})", ("text",))),
    "date": (("min({})", ("date",)), ("max({})", ("date",))),
    "timestamp": (("max({})", ("timestamp",)),),
    "bool": (("bool_and({})", ("bool",)), ("bool_or({})", ("bool",))),
}
_VALUES_TEXTS = ("'apple'", "'banana'", "'x'", "NULL")
_SET_OPERATIONS = ("UNION", "UNION ALL", "EXCEPT", "EXCEPT ALL", "INTERSECT", "INTERSECT ALL")

Scope = dict[str, str]  # a qualified column (or any expression) -> its type


@dataclass(frozen=True)
class Query:
    """A drawn query: its SQL, its output types, and (with ORDER BY … LIMIT) the
    output positions of its order keys."""

    sql: str
    types: tuple[str, ...]
    order_columns: tuple[int, ...] = ()


class Queries:
    """Random SELECTs over ``tables`` (name -> column -> type), subqueries ``depth`` deep.

    Scalars come from ``Expressions`` in its safe mode (PostgreSQL and Loupe
    may meet errors in different orders; the expression tests compare
    errors). Every query is deterministic: a LIMIT inside a query orders by
    every output column, DISTINCT ON orders by every output column after its
    keys; only the outermost ORDER BY … LIMIT may leave ties at its boundary
    (``Query.order_columns``, for the tie-aware comparison); float sums and
    averages add whole numbers, so no float result depends on the order
    rows are added in.
    """

    def __init__(self, rng: random.Random, tables: Mapping[str, Mapping[str, str]], depth: int = 2):
        self.rng = rng
        self.tables = {name: dict(columns) for name, columns in tables.items()}
        self.depth = depth
        self._names = itertools.count()

    def query(self) -> Query:
        """A top-level query: maybe CTEs, a SELECT or a set operation, maybe ORDER BY … LIMIT."""
        ctes: dict[str, Scope] = {}
        definitions = []
        for _ in range(self._weighted((0.8, 0.15, 0.05))):
            name = f"w{next(self._names)}"
            sql, types, ordered = self._body(self.depth - 1, ctes)
            if not ordered and self.rng.random() < 0.2:  # a top-k, ordered by every column
                order = ", ".join(self._ordered(i) for i in range(len(types)))
                sql = f"{sql} ORDER BY {order}{self._limit()}"
            definitions.append(f"{name} AS ({sql})")
            ctes[name] = {f"c{i}": t for i, t in enumerate(types)}
        sql, types, ordered = self._body(self.depth, ctes)
        prefix = f"WITH {', '.join(definitions)} " if definitions else ""
        if ordered or self.rng.random() >= 0.25:
            return Query(prefix + sql, types)
        positions = self.rng.sample(range(len(types)), self.rng.randint(1, len(types)))
        keys = ", ".join(
            f"{self._output_name(p)}{self._pick(('', ' DESC', ' NULLS FIRST', ' DESC NULLS LAST'))}"
            for p in positions
        )
        return Query(prefix + f"{sql} ORDER BY {keys}{self._limit()}", types, tuple(positions))

    # Query bodies.

    def _body(
        self, depth: int, ctes: Mapping[str, Scope], types: Sequence[str] | None = None
    ) -> tuple[str, tuple[str, ...], bool]:
        """A SELECT, or (one in seven) a chain of set operations over SELECTs of the same
        types; and whether it ends in an ORDER BY (a DISTINCT ON's)."""
        operations = self._weighted((0.86, 0.11, 0.03))
        sql, drawn, ordered = self._select(depth, ctes, types, distinct_on=not operations)
        for _ in range(operations):
            right, _, _ = self._select(depth, ctes, drawn, distinct_on=False)
            sql = f"{sql} {self._pick(_SET_OPERATIONS)} {right}"
        return sql, drawn, ordered

    def _select(
        self,
        depth: int,
        ctes: Mapping[str, Scope],
        types: Sequence[str] | None = None,
        distinct_on: bool = True,
    ) -> tuple[str, tuple[str, ...], bool]:
        from_sql, scope = self._from(depth, ctes)
        where = self._where(scope, depth, ctes)
        if self.rng.random() < 0.35:
            return (*self._grouped(from_sql, where, scope, types, depth, ctes), False)
        leaves = dict(scope)
        if depth > 0 and self.rng.random() < 0.2:
            subquery, type_ = self._scalar_subquery(scope, depth - 1, ctes)
            leaves[subquery] = type_
        if depth > 0 and self.rng.random() < 0.1:  # EXISTS or IN (SELECT …) as a value
            leaves[self._subquery_predicate(scope, depth - 1, ctes)] = "bool"
        wanted = tuple(types) if types is not None else self._types(scope)
        expressions = Expressions(self.rng, leaves, depth=2, safe=True)
        items = [self._item(expressions, t, leaves) for t in wanted]
        select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(items))
        roll = self.rng.random()
        if roll < 0.12:
            return f"SELECT DISTINCT {select} FROM {from_sql}{where}", wanted, False
        keyed = [e for e in items if _mentions(e, scope)]
        if roll < 0.2 and keyed and distinct_on:
            # The keys, then every output column: whichever row a group keeps, the output is one.
            keys = self.rng.sample(keyed, self.rng.randint(1, min(2, len(keyed))))
            order = ", ".join([*keys, *(self._ordered(i) for i in range(len(items)))])
            return (
                f"SELECT DISTINCT ON ({', '.join(keys)}) {select} FROM {from_sql}{where} "
                f"ORDER BY {order}",
                wanted,
                True,
            )
        return f"SELECT {select} FROM {from_sql}{where}", wanted, False

    def _grouped(
        self,
        from_sql: str,
        where: str,
        scope: Scope,
        types: Sequence[str] | None,
        depth: int,
        ctes: Mapping[str, Scope],
    ) -> tuple[str, tuple[str, ...]]:
        """GROUP BY keys (none: a global aggregate), aggregates, HAVING."""
        expressions = Expressions(self.rng, scope, depth=1, safe=True)
        keys: dict[str, str] = {}
        for _ in range(self._weighted((0.25, 0.5, 0.25))):
            column = self._pick(sorted(scope))
            if self.rng.random() < 0.3:
                key = expressions.of(scope[column])
                if _mentions(key, scope) and key not in scope:
                    keys[key] = scope[column]
                    continue
            keys[column] = scope[column]
        leaves = dict(keys)
        for _ in range(self.rng.randint(1, 2)):
            type_ = self._pick(tuple(_AGGREGATES))
            leaves[self._aggregate(type_, scope)] = type_
        wanted = tuple(types) if types is not None else self._types(leaves)
        over = Expressions(self.rng, leaves, depth=1, safe=True)
        items = []
        for type_ in wanted:
            if not any(t == type_ for t in leaves.values()):
                aggregate = self._aggregate(type_, scope)
                leaves[aggregate] = type_
                items.append(aggregate)
                over = Expressions(self.rng, leaves, depth=1, safe=True)
            else:
                items.append(self._item(over, type_, leaves))
        select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(items))
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        having = ""
        if self.rng.random() < 0.3:
            if depth > 0 and self.rng.random() < 0.25:  # an uncorrelated scalar subquery
                subquery, type_ = self._scalar_subquery({}, depth - 1, ctes)
                over = Expressions(self.rng, leaves | {subquery: type_}, depth=1, safe=True)
            having = f" HAVING {over.of('bool')}"
        return f"SELECT {select} FROM {from_sql}{where}{group}{having}", wanted

    def _aggregate(self, type_: str, scope: Scope) -> str:
        """An aggregate call of result type ``type_`` over ``scope``, maybe with FILTER."""
        template, argument_types = self._pick(_AGGREGATES[type_])
        expressions = Expressions(self.rng, scope, depth=1, safe=True)
        argument_type = self._pick(argument_types) if argument_types else ""
        argument = expressions.of(argument_type) if argument_types else ""
        if argument_type == "float8" and not template.startswith(("min", "max", "count")):
            # A float sum depends on the order it adds in (PostgreSQL's and the engine's
            # differ): its last bits, and then a DISTINCT, a comparison or a set operation
            # over it. Summing whole numbers keeps it exact.
            argument = f"round({argument})"
        call = template.format(argument)
        if self.rng.random() < 0.2:
            call += f" FILTER (WHERE {expressions.of('bool')})"
        return call

    def _item(self, expressions: Expressions, type_: str, leaves: Scope) -> str:
        """A SELECT-list expression of ``type_``: often a leaf as it is."""
        names = [name for name, t in leaves.items() if t == type_]
        if names and self.rng.random() < 0.5:
            return self._pick(names)
        return expressions.of(type_)

    # FROM and WHERE.

    def _from(self, depth: int, ctes: Mapping[str, Scope]) -> tuple[str, Scope]:
        """One to three FROM items, joined by commas, CROSS JOIN or [outer] JOIN … ON."""
        sql, scope = self._from_item(depth, ctes)
        visible = scope  # what an ON may read: a comma binds looser than JOIN
        for _ in range(self._weighted((0.45, 0.4, 0.15))):
            item, item_scope = self._from_item(depth, ctes)
            kind = self._pick(
                ("JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", ",", "CROSS")
            )
            equalities = [
                f"{left} = {right}"
                for left, left_type in visible.items()
                for right, right_type in item_scope.items()
                if left_type in _JOINABLE[right_type]
            ]
            both = visible | item_scope
            if kind == ",":
                sql, visible = f"{sql}, {item}", item_scope
            elif kind == "CROSS" or (kind == "FULL JOIN" and not equalities):
                sql, visible = f"{sql} CROSS JOIN {item}", both
            else:
                using = _using_candidates(visible, item_scope)
                if using and kind != "FULL JOIN" and self.rng.random() < 0.15:
                    sql = f"{sql} {kind} {item} USING ({self._pick(using)})"
                    visible, scope = both, scope | item_scope
                    continue
                conditions = []
                if equalities and (kind == "FULL JOIN" or self.rng.random() < 0.85):
                    # PostgreSQL's FULL JOIN needs an equality (merge- or hash-joinable).
                    conditions.append(self._pick(sorted(equalities)))
                if not conditions or self.rng.random() < 0.3:  # a non-equi condition
                    conditions.append(Expressions(self.rng, both, depth=1, safe=True).of("bool"))
                sql, visible = f"{sql} {kind} {item} ON {' AND '.join(conditions)}", both
            scope = scope | item_scope
        return sql, scope

    def _from_item(self, depth: int, ctes: Mapping[str, Scope]) -> tuple[str, Scope]:
        """A table, a CTE or a subquery, under a fresh alias."""
        alias = f"x{next(self._names)}"
        roll = self.rng.random()
        if depth > 0 and roll < 0.15:
            sql, types, ordered = self._body(depth - 1, ctes)
            if (
                not ordered and self.rng.random() < 0.3
            ):  # a top-k inside: ordered by every column, so no ties
                order = ", ".join(self._ordered(i) for i in range(len(types)))
                sql = f"{sql} ORDER BY {order}{self._limit()}"
            return f"({sql}) AS {alias}", {f"{alias}.c{i}": t for i, t in enumerate(types)}
        if roll > 0.95:  # VALUES: an int4 and a text column
            rows = [
                f"({self._pick(('1', '3', '-2', 'NULL'))}, {self._pick(_VALUES_TEXTS)})"
                for _ in range(self.rng.randint(1, 3))
            ]
            rows[0] = rows[0].replace("(NULL,", "(0,").replace(", NULL)", ", '')")  # typed
            return (
                f"(VALUES {', '.join(rows)}) AS {alias}(c0, c1)",
                {f"{alias}.c0": "int4", f"{alias}.c1": "text"},
            )
        if ctes and roll < 0.35:
            name = self._pick(sorted(ctes))
            return f"{name} AS {alias}", {f"{alias}.{c}": t for c, t in ctes[name].items()}
        table = self._pick(sorted(self.tables))
        return f"{table} AS {alias}", {f"{alias}.{c}": t for c, t in self.tables[table].items()}

    def _where(self, scope: Scope, depth: int, ctes: Mapping[str, Scope]) -> str:
        """A WHERE clause (or nothing): a filter, a subquery predicate, or both."""
        conjuncts = []
        if self.rng.random() < 0.55:
            depth = 2 if self.rng.random() < 0.3 else 1  # deeper filters keep fewer rows
            conjuncts.append(Expressions(self.rng, scope, depth=depth, safe=True).of("bool"))
        if depth > 0 and self.rng.random() < 0.3:
            predicate = self._subquery_predicate(scope, depth - 1, ctes)
            roll = self.rng.random()
            if roll < 0.15:
                predicate = f"NOT {predicate}"
            elif roll < 0.3:
                other = Expressions(self.rng, scope, depth=1, safe=True).of("bool")
                predicate = f"({predicate} OR {other})"
            conjuncts.append(predicate)
        return f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""

    # Subqueries.

    def _inner(self, depth: int, ctes: Mapping[str, Scope], outer: Scope) -> tuple[str, Scope]:
        """A subquery's FROM and WHERE: maybe correlated with ``outer``, by an equality
        (a join key when decorrelated) or by any predicate."""
        from_sql, scope = (
            self._from(0, ctes) if self.rng.random() < 0.3 else self._from_item(0, ctes)
        )
        conjuncts = []
        roll = self.rng.random()
        equalities = [
            f"{inner} = {other}"
            for inner, inner_type in scope.items()
            for other, other_type in outer.items()
            if other_type in _JOINABLE[inner_type]
        ]
        if roll < 0.65 and equalities:
            conjuncts.append(self._pick(sorted(equalities)))
        elif roll < 0.85:
            conjuncts.append(Expressions(self.rng, scope | outer, depth=1, safe=True).of("bool"))
        if self.rng.random() < 0.4:
            conjuncts.append(Expressions(self.rng, scope, depth=1, safe=True).of("bool"))
        where = f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""
        if depth > 0 and self.rng.random() < 0.2:
            nested = self._subquery_predicate(scope, depth - 1, ctes)
            where = f"{where} AND {nested}" if where else f" WHERE {nested}"
        return f"{from_sql}{where}", scope

    def _subquery_predicate(self, outer: Scope, depth: int, ctes: Mapping[str, Scope]) -> str:
        """[NOT] EXISTS, [NOT] IN (SELECT …), or a comparison with a scalar subquery."""
        roll = self.rng.random()
        if roll < 0.35:
            body, _ = self._inner(depth, ctes, outer)
            return f"{self._pick(('EXISTS', 'NOT EXISTS'))} (SELECT 1 FROM {body})"
        if roll < 0.7:
            body, scope = self._inner(depth, ctes, outer)
            type_ = self._pick(sorted(set(scope.values())))
            value = Expressions(self.rng, scope, depth=1, safe=True).of(type_)
            probe = Expressions(self.rng, outer, depth=1, safe=True).of(type_)
            values = f"SELECT {value} FROM {body}"
            if self.rng.random() < 0.15:  # a set operation inside, uncorrelated
                left, _, _ = self._select(0, ctes, (type_,), distinct_on=False)
                right, _, _ = self._select(0, ctes, (type_,), distinct_on=False)
                values = f"{left} {self._pick(_SET_OPERATIONS)} {right}"
            return f"{probe} {self._pick(('IN', 'NOT IN'))} ({values})"
        subquery, type_ = self._scalar_subquery(outer, depth, ctes)
        if type_ == "bool":
            return subquery
        probe = Expressions(self.rng, outer, depth=1, safe=True).of(type_)
        return f"{probe} {self._pick(('=', '<>', '<', '>='))} {subquery}"

    def _scalar_subquery(
        self, outer: Scope, depth: int, ctes: Mapping[str, Scope]
    ) -> tuple[str, str]:
        """``(SELECT aggregate FROM …)``, maybe correlated: one row, always; or, uncorrelated,
        ``(SELECT x FROM … ORDER BY 1 LIMIT 1)``: at most one row."""
        if self.rng.random() < 0.15:
            item, scope = self._from_item(0, ctes)
            type_ = self._pick(sorted(set(scope.values())))
            value = Expressions(self.rng, scope, depth=1, safe=True).of(type_)
            order = self._pick(("1", "1 DESC", "1 NULLS FIRST"))
            return f"(SELECT {value} FROM {item} ORDER BY {order} LIMIT 1)", type_
        body, scope = self._inner(depth, ctes, outer)
        type_ = self._pick(tuple(_AGGREGATES))
        return f"(SELECT {self._aggregate(type_, scope)} FROM {body})", type_

    # Helpers.

    def _types(self, scope: Scope) -> tuple[str, ...]:
        """One to four output types, mostly of the scope's."""
        present = sorted(set(scope.values()))
        return tuple(
            self._pick(present) if self.rng.random() < 0.8 else self._pick(TYPES)
            for _ in range(self._weighted((0.0, 0.35, 0.35, 0.2, 0.1)))
        )

    def _ordered(self, position: int) -> str:
        return f"{position + 1}{self._pick(('', ' DESC'))}"

    def _output_name(self, position: int) -> str:
        return f"c{position}" if self.rng.random() < 0.5 else str(position + 1)

    def _limit(self) -> str:
        limit = f" LIMIT {self.rng.randint(1, 5)}"
        offset = f" OFFSET {self.rng.randint(1, 3)}" if self.rng.random() < 0.3 else ""
        return limit + offset if self.rng.random() < 0.9 else offset

    def _weighted(self, weights: Sequence[float]) -> int:
        """An index drawn with the given weights."""
        return self.rng.choices(range(len(weights)), weights)[0]

    def _pick(self, options: Sequence[T]) -> T:
        return self.rng.choice(list(options))


def _mentions(sql: str, scope: Scope) -> bool:
    """Whether ``sql`` reads one of ``scope``'s columns (so it is no constant)."""
    return any(re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", sql) for name in scope)


def _using_candidates(left: Scope, right: Scope) -> list[str]:
    """Column names JOIN … USING may name: once on each side, of one type."""

    def names(scope: Scope) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for qualified, type_ in scope.items():
            found.setdefault(qualified.split(".")[-1], []).append(type_)
        return found

    on_left, on_right = names(left), names(right)
    return sorted(
        name
        for name, types in on_left.items()
        if len(types) == 1 and on_right.get(name, []) == types
    )
