"""A grammar of random, well-typed SQL: scalar expressions over typed columns, and queries.

``Expressions`` draws an expression of a wanted type from a seeded random
source: columns, literals (NULLs included), operators, functions, CASE,
casts, comparisons and boolean logic, nested up to a depth. Everything it
writes is PostgreSQL that Loupe claims to support; the tests run it on both
and compare, so a mismatch is a bug in one or the other (PostgreSQL is the
reference). ``Queries`` builds SELECTs over the differential workload's
tables from the same expressions: filters, joins, grouping, DISTINCT,
ORDER BY … LIMIT and set operations.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

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


class Expressions:
    """Random expressions over ``columns`` (name -> type), at most ``depth`` calls deep."""

    def __init__(
        self,
        rng: random.Random,
        columns: Mapping[str, str],
        depth: int = 3,
        *,
        extended: bool = False,
    ) -> None:
        self.rng = rng
        self.columns = dict(columns)
        self.depth = depth
        rules: dict[str, list[Callable[[int], str]]] = {t: [] for t in TYPES + EXTENDED_TYPES}
        rules["int4"] += [
            lambda d: self._binary("int4", ("+", "-", "*"), d),
            lambda d: f"({self.of('int4', d)} / {self.of('int4', d)})",
            lambda d: f"({self.of('int4', d)} % {self.of(self._pick(('int4', 'float8')), d)})",
            lambda d: f"abs({self.of('int4', d)})",
            lambda d: f"(- {self.of('int4', d)})",
            lambda d: f"length({self.of('text', d)})",
            lambda d: f"strpos({self.of('text', d)}, {self.of('text', d)})",
            lambda d: f"CAST({self.of(self._pick(_NUMBERS), d)} AS int4)",
            lambda d: f"CAST(extract(day FROM {self.of('date', d)}) AS int4)",
            lambda d: f"({self.of('date', d)} - {self.of('date', d)})",
            lambda d: f"mod({self.of('int4', d)}, {self.of('int4', d)})",
        ]
        rules["int8"] += [
            lambda d: self._binary("int8", ("+", "-", "*"), d),
            lambda d: f"({self.of('int8', d)} / {self.of('int4', d)})",
            lambda d: f"CAST({self.of('int4', d)} AS int8)",
            lambda d: f"({self.of('int4', d)} + {self.of('int8', d)})",
            lambda d: f"abs({self.of('int8', d)})",
        ]
        rules["float8"] += [
            lambda d: self._binary("float8", ("+", "-", "*", "/"), d),
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
        roll = self.rng.random()
        if columns and roll < 0.6:
            return self.rng.choice(columns)
        if roll < 0.68:
            return f"CAST(NULL AS {_SPELLED.get(type_, type_)})"
        return self.rng.choice(_LITERALS[type_])

    def _pick(self, options: Sequence[str]) -> str:
        return self.rng.choice(list(options))

    def _binary(self, type_: str, operators: Sequence[str], depth: int) -> str:
        return f"({self.of(type_, depth)} {self._pick(operators)} {self.of(type_, depth)})"

    def _comparison(self, depth: int) -> str:
        type_ = self._pick(_ORDERED)
        operator = self._pick(("=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM"))
        return f"({self.of(type_, depth)} {operator} {self.of(type_, depth)})"

    def _between(self, depth: int) -> str:
        type_ = self._pick(_ORDERED)
        return (
            f"({self.of(type_, depth)} BETWEEN {self.of(type_, depth)} AND {self.of(type_, depth)})"
        )
