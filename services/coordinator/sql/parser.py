"""Loupe's SQL parser: its own DDL by hand, queries through sqlglot.

sqlglot (postgres dialect) parses queries well but silently turns DDL it does
not know into ``exp.Command``, which would make ``CREATE CLUSTER`` look like
it parsed. So the request is tokenized once with sqlglot's tokenizer, split
into statements at ``;``, and:

- ``CREATE CLUSTER``, ``CREATE CLUSTER REPLICA``, ``DROP CLUSTER [REPLICA]``,
  ``CREATE TABLE``, ``DROP TABLE``, ``SHOW``, ``SET`` and ``RESET`` are
  parsed here, token by token;
- ``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN [WITH (node_ids)] FOR <query>`` is
  parsed here up to the query, which goes to sqlglot; ``EXPLAIN ANALYZE …``
  (Materialize's forms and Loupe's ``HYDRATION``) is parsed here entirely;
- ``PREPARE name [(types)] AS <statement>``, ``EXECUTE name [(args)]`` and
  ``DEALLOCATE [PREPARE] name | ALL`` are parsed here (the prepared statement
  and the arguments by the rules for them);
- ``INSERT``, ``UPDATE`` and ``DELETE`` are parsed by sqlglot and checked here
  (no ``RETURNING``, ``ON CONFLICT``, ``UPDATE … FROM`` or ``DELETE … USING``);
- a query's trailing ``AS OF <timestamp>`` (Materialize's time travel, which
  sqlglot does not know) is split off here, the rest goes to sqlglot;
- everything else goes to sqlglot's parser; a ``Command`` or a statement kind
  Loupe does not run is refused with 0A000.

Every error is a ``LoupeError`` with a 1-based character position into the
whole request (as PostgreSQL reports it): 42601 for syntax errors, 0A000 for
what is not supported, 22023 for bad option values.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.generators.postgres import PostgresGenerator
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokens import Token, TokenType

from loupe import sqltypes
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.sql.statements import (
    DROP_KINDS,
    AlterCluster,
    AlterRole,
    AlterSystem,
    Close,
    ColumnDef,
    Commit,
    Copy,
    CreateCluster,
    CreateClusterReplica,
    CreateIndex,
    CreateRole,
    CreateSource,
    CreateTable,
    CreateView,
    Deallocate,
    Declare,
    Delete,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    DropRole,
    DropTable,
    Execute,
    Explain,
    ExplainAnalyze,
    Fetch,
    GrantRole,
    Insert,
    ObjectName,
    Prepare,
    Query,
    ReplicaSpec,
    ResetVariable,
    RoleOptions,
    Rollback,
    SetVariable,
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
    ShowVariable,
    StartTransaction,
    Statement,
    Subscribe,
    UniqueKey,
    Update,
)

T = TypeVar("T")

# sqlglot warns when it falls back to a Command; Loupe refuses those itself.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

DEFAULT_INTROSPECTION_INTERVAL_NS = 1_000_000_000
MAX_REPLICATION_FACTOR = 32

# Statement kinds sqlglot parses that Loupe runs.
QUERY_TYPES = (exp.Select, exp.SetOperation, exp.Subquery)

# Statements that are not queries: refused without asking sqlglot.
OTHER_STATEMENT_KEYWORDS = frozenset(
    {
        "CREATE",
        "ALTER",
        "DROP",
        "INSERT",
        "UPDATE",
        "DELETE",
        "UPSERT",
        "MERGE",
        "COPY",
        "TRUNCATE",
        "GRANT",
        "REVOKE",
        "BEGIN",
        "START",
        "COMMIT",
        "ROLLBACK",
        "ABORT",
        "END",
        "SAVEPOINT",
        "RELEASE",
        "SUBSCRIBE",
        "TAIL",
        "DECLARE",
        "FETCH",
        "CLOSE",
        "PREPARE",
        "EXECUTE",
        "DEALLOCATE",
        "DISCARD",
        "COMMENT",
        "VALUES",
        "TABLE",
        "ANALYZE",
        "VACUUM",
        "LISTEN",
        "NOTIFY",
        "REASSIGN",
        "LOCK",
        "USE",
        "DESCRIBE",
        "CALL",
        "DO",
        "VALIDATE",
    }
)

# Transaction control and cursors, parsed here (``_LoupeParser.transaction_statement``).
TRANSACTION_KEYWORDS = frozenset(
    {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "DECLARE", "FETCH", "CLOSE"}
)
ISOLATION_LEVELS = (
    ("STRICT", "SERIALIZABLE"),
    ("SERIALIZABLE",),
    ("REPEATABLE", "READ"),
    ("READ", "COMMITTED"),
    ("READ", "UNCOMMITTED"),
)

# PREPARE, EXECUTE and DEALLOCATE, and the statements PREPARE takes (PostgreSQL's).
PREPARED_STATEMENT_KEYWORDS = frozenset({"PREPARE", "EXECUTE", "DEALLOCATE"})
PREPARABLE = (Query, Insert, Update, Delete)

# EXPLAIN stages: the ones Loupe explains, and Materialize's others (0A000).
EXPLAIN_STAGES = {"OPTIMIZED": "optimized", "PHYSICAL": "physical"}
UNSUPPORTED_EXPLAIN_STAGES = frozenset(
    {"RAW", "DECORRELATED", "LOCALLY", "OPTIMIZER", "TIMESTAMP", "FILTER", "KEY"}
)
# What an EXPLAIN explains besides a query: the keywords and the item type.
EXPLAIN_OBJECT_KINDS = (
    (("MATERIALIZED", "VIEW"), "materialized-view"),
    (("VIEW",), "view"),
    (("INDEX",), "index"),
)
# The object kinds CREATE and DROP handle here, by the keyword after CREATE/DROP.
OBJECT_KEYWORDS = frozenset({"VIEW", "MATERIALIZED", "INDEX", "DEFAULT", "SOURCE"})

# `SHOW <objects>` forms of Materialize that Loupe does not have yet: refused
# as unsupported rather than mistaken for a variable.
SHOW_OBJECT_KINDS = frozenset(
    {
        "TABLES",
        "VIEWS",
        "SOURCES",
        "SINKS",
        "INDEXES",
        "SCHEMAS",
        "DATABASES",
        "OBJECTS",
        "SECRETS",
        "CONNECTIONS",
        "TYPES",
        "COLUMNS",
        "MATERIALIZED",
        "CREATE",
        "PRIVILEGES",
        "DEFAULT",
        "NETWORK",
        "CLUSTER",
    }
)

# A PRIMARY KEY or UNIQUE constraint as written: (name, [(column, position)], primary, position).
_KeySpec = tuple[str, tuple[tuple[str, int], ...], bool, int]

# SHOW forms that list objects, and the kinds SHOW CREATE shows.
_SHOW_LISTS = (
    ("TABLES",),
    ("VIEWS",),
    ("MATERIALIZED", "VIEWS"),
    ("INDEXES",),
    ("SOURCES",),
    ("OBJECTS",),
    ("DATABASES",),
    ("SCHEMAS",),
)
_SHOW_CREATES = (
    ("TABLE",),
    ("VIEW",),
    ("MATERIALIZED", "VIEW"),
    ("INDEX",),
    ("SOURCE",),
    ("CLUSTER",),
)

_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


# An interval literal sqlglot may rewrite as 'n' UNIT without losing anything.
_ONE_INTERVAL_PART = re.compile(r"\s*[-+]?\d+(?:\.\d*)?\s*[a-zA-Z]+\s*")


class ListAgg(exp.ArrayAgg):
    """Materialize's ``list_agg(x [ORDER BY …])``: ``array_agg`` into a list."""

    _sql_names = ["LIST_AGG"]


class LoupeDialect(Postgres):
    """PostgreSQL with a tokenizer that never swallows a statement as a "command".

    The postgres tokenizer turns everything after ``SHOW``, ``RESET`` (and other
    command keywords) into one string token; Loupe parses those statements
    itself and needs their tokens.
    """

    class Tokenizer(Postgres.Tokenizer):
        COMMANDS: ClassVar[set[TokenType]] = set()

    # The keywords postgres treats as opaque commands; a statement starting with
    # one of them is refused before sqlglot sees it.
    COMMAND_TOKENS = frozenset(Postgres.Tokenizer.COMMANDS)

    class Parser(PostgresParser):
        """PostgreSQL's parser plus Materialize's ``WITH MUTUALLY RECURSIVE``, keeping
        what sqlglot would rewrite away (to_char's patterns, an interval's clock).

        ``WITH MUTUALLY RECURSIVE [(RETURN | ERROR) AT RECURSION LIMIT n)] name
        (column type, …) AS (…), …`` parses as a ``With`` whose
        ``mutually_recursive`` arg is true, with ``recursion_limit`` (an int or
        None) and ``return_at_limit``; the columns' types are on the CTEs' aliases.
        """

        # sqlglot rewrites to_char's format into strftime codes, losing what
        # PostgreSQL's patterns mean (D is Sunday-based, FM, TH…): keep the call as
        # written, for the engine's to_char.
        FUNCTIONS: ClassVar[dict[str, Any]] = {
            **PostgresParser.FUNCTIONS,
            "TO_CHAR": lambda args: exp.Anonymous(this="to_char", expressions=args),
            # sqlglot reads date_bin's origin as a unit: a column there would be a VAR.
            "DATE_BIN": lambda args: exp.Anonymous(this="date_bin", expressions=args),
            "LIST_AGG": ListAgg.from_arg_list,
        }
        # PostgreSQL has no lambdas: ``f(j -> 'k')`` is the jsonb operator, not ``x -> …``.
        LAMBDAS: ClassVar[dict[Any, Any]] = {}
        # PostgreSQL has no ``:name`` placeholders: ``address[:list_length(address) - 1]``
        # is a slice up to an expression, not a placeholder called list_length.
        PLACEHOLDER_PARSERS: ClassVar[dict[Any, Any]] = {
            k: v for k, v in PostgresParser.PLACEHOLDER_PARSERS.items() if k != TokenType.COLON
        }

        def _parse_interval_span(
            self, this: exp.Expr, parse_function_unit: bool = True
        ) -> exp.Interval:
            # sqlglot reads INTERVAL '1 day 00:00:10.5' as INTERVAL '1' DAY, dropping the
            # clock: keep such a literal whole (the planner reads PostgreSQL's syntax).
            interval = super()._parse_interval_span(this, parse_function_unit)
            if (
                this is not None
                and this.is_string
                and interval.this is not this
                and not _ONE_INTERVAL_PART.fullmatch(this.name)
            ):
                return exp.Interval(this=this)
            return interval

        # date_part is float8, extract numeric: sqlglot parses both as Extract.
        FUNCTION_PARSERS: ClassVar[dict[str, Any]] = {
            k: v for k, v in PostgresParser.FUNCTION_PARSERS.items() if k != "DATE_PART"
        }

        def _parse_with(self, skip_with_token: bool = False) -> exp.With | None:
            if not skip_with_token and not self._match(TokenType.WITH):
                return None
            if not self._match_text_seq("MUTUALLY", "RECURSIVE"):
                return super()._parse_with(skip_with_token=True)
            limit, return_at_limit = None, False
            if self._match(TokenType.L_PAREN):
                if self._match_text_seq("RETURN"):
                    return_at_limit = True
                elif not self._match_text_seq("ERROR"):
                    self.raise_error("Expected RETURN or ERROR")
                if not self._match_text_seq("AT", "RECURSION", "LIMIT"):
                    self.raise_error("Expected AT RECURSION LIMIT")
                number = self._parse_number()
                if not isinstance(number, exp.Literal) or not number.this.isdigit():
                    self.raise_error("Expected the recursion limit, a positive integer")
                limit = int(number.this) if isinstance(number, exp.Literal) else None
                self._match_r_paren()
            with_ = super()._parse_with(skip_with_token=True)
            if with_ is not None:
                with_.set("mutually_recursive", True)
                with_.set("recursion_limit", limit)
                with_.set("return_at_limit", return_at_limit)
            return with_

    class Generator(PostgresGenerator):
        """PostgreSQL's SQL, plus ``WITH MUTUALLY RECURSIVE`` (stored view definitions)."""

        def with_sql(self, expression: exp.With) -> str:
            if not expression.args.get("mutually_recursive"):
                return super().with_sql(expression)
            limit = expression.args.get("recursion_limit")
            options = ""
            if limit is not None:
                kind = "RETURN" if expression.args.get("return_at_limit") else "ERROR"
                options = f"({kind} AT RECURSION LIMIT {limit}) "
            return f"WITH MUTUALLY RECURSIVE {options}{self.expressions(expression, flat=True)}"


_DIALECT = LoupeDialect()


# Requests parsed of late, by their text (up to PARSE_CACHE_MAX_CHARS long): a client
# sends the same statements again and again, and a copy of a parse costs a fifth
# of making it (SELECT 1: 25 against 150 us here).
PARSE_CACHE_SIZE = 1024
PARSE_CACHE_MAX_CHARS = 4096


def parse(sql: str) -> list[Statement]:
    """Parse a request of zero or more ``;``-separated statements.

    A text parsed before (among the last ``PARSE_CACHE_SIZE``) is not parsed
    again: the caller gets a deep copy of its statements, its own to change,
    as planning does. A request that failed to parse is parsed (and fails)
    each time.
    """
    if len(sql) > PARSE_CACHE_MAX_CHARS:
        return _parse(sql)
    return copy.deepcopy(_parsed(sql))


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parsed(sql: str) -> list[Statement]:
    """``sql``'s statements, kept: never handed out, only copies of them."""
    return _parse(sql)


def _parse(sql: str) -> list[Statement]:
    tokens = _tokenize(sql)
    statements = []
    for chunk in _split(tokens):
        statements.append(_parse_statement(sql, chunk))
    return statements


def parse_one(sql: str) -> Statement:
    """Parse exactly one statement (tests and internal SQL)."""
    statements = parse(sql)
    if len(statements) != 1:
        raise LoupeError(SqlState.SYNTAX_ERROR, f"expected one statement, got {len(statements)}")
    return statements[0]


# -- tokens and statements ----------------------------------------------------------


def _tokenize(sql: str) -> list[Token]:
    try:
        return _DIALECT.tokenize(sql)
    except TokenError as error:
        # The cause says where the unterminated token starts: "Missing ' from 1:7".
        cause = str(error.__cause__ or "")
        match = re.search(r"Missing (\S+) from \d+:(\d+)", cause)
        if match:
            delimiter, start = match.group(1), int(match.group(2))
            what = {"'": "quoted string", '"': "quoted identifier"}.get(delimiter, "string")
            raise LoupeError(
                SqlState.SYNTAX_ERROR, f"unterminated {what}", position=start + 1
            ) from None
        raise LoupeError(
            SqlState.SYNTAX_ERROR, "unterminated comment or string", position=len(sql) or 1
        ) from None


def _split(tokens: Sequence[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            chunks.append([])
        else:
            chunks[-1].append(token)
    return [chunk for chunk in chunks if chunk]


def _parse_statement(sql: str, tokens: list[Token]) -> Statement:
    first = tokens[0].text.upper()
    second = tokens[1].text.upper() if len(tokens) > 1 else ""
    own = (
        (first in ("CREATE", "DROP") and second in ("CLUSTER", "TABLE"))
        or (first, second) in (("ALTER", "SYSTEM"), ("ALTER", "CLUSTER"))
    ) or first in (
        "SHOW",
        "SET",
        "RESET",
    )
    if own:
        return _LoupeParser(sql, tokens).statement()
    if (first in ("CREATE", "DROP") and second in ("ROLE", "USER")) or (first, second) == (
        "ALTER",
        "ROLE",
    ):
        return _LoupeParser(sql, tokens).role_statement()
    if first in ("GRANT", "REVOKE") and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).grant_role()
    if first == "CREATE" and second == "OR":
        raise _unsupported("CREATE OR REPLACE", tokens[0])
    if first == "CREATE" and (second in OBJECT_KEYWORDS or second == "UNIQUE"):
        return _LoupeParser(sql, tokens).create_object()
    if first == "DROP" and second in OBJECT_KEYWORDS - {"DEFAULT"}:
        return _LoupeParser(sql, tokens).drop_objects()
    if first == "SUBSCRIBE" and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).subscribe()
    if first == "COPY" and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).copy()
    if first in ("INSERT", "UPDATE", "DELETE"):
        return _parse_dml(sql, tokens)
    if first in PREPARED_STATEMENT_KEYWORDS and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).prepared_statement_command()
    if first == "EXPLAIN" and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).explain()
    if first in TRANSACTION_KEYWORDS and tokens[0].token_type != TokenType.IDENTIFIER:
        return _LoupeParser(sql, tokens).transaction_statement()
    if first in OTHER_STATEMENT_KEYWORDS or tokens[0].token_type in LoupeDialect.COMMAND_TOKENS:
        # Not a query: refused whether or not sqlglot would parse it (it parses
        # CREATE SOURCE as a Command and fails on others).
        raise _unsupported(_describe_words(tokens), tokens[0])
    return _parse_with_sqlglot(sql, tokens)


def _parse_with_sqlglot(sql: str, tokens: list[Token]) -> Query:
    start, end = tokens[0].start, tokens[-1].end + 1
    query_tokens, as_of, as_of_position = _split_as_of(sql, tokens)
    expression = _sqlglot_query(sql, query_tokens)
    return Query(
        text=sql[start:end],
        offset=start,
        expression=expression,
        as_of=as_of,
        as_of_position=as_of_position,
    )


def _sqlglot_query(sql: str, tokens: list[Token]) -> exp.Expression:
    try:
        expressions = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE).parse(tokens, sql)
    except ParseError as error:
        raise _from_parse_error(sql, tokens, error) from None
    expression = expressions[0] if expressions else None
    if expression is None or not isinstance(expression, QUERY_TYPES):
        raise _unsupported(_describe_words(tokens), tokens[0])
    if isinstance(expression, exp.Select) and expression.args.get("into"):
        raise _unsupported("SELECT INTO", tokens[0])
    return _unqualified_functions(expression)


# Schemas whose functions may be named qualified: ``pg_catalog.count(*)``, ``mz_catalog.list_length(a)``.
_FUNCTION_SCHEMAS = ("pg_catalog", "mz_catalog")


def _unqualified_functions(expression: exp.Expression) -> exp.Expression:
    """``pg_catalog.min(x)`` as ``min(x)``: sqlglot reads a qualified call as an anonymous
    function under a ``Dot``; read without its schema, it is the function (or aggregate)
    the planner knows. Innermost calls first, so an argument is unqualified before its call."""
    calls = [
        node
        for node in expression.find_all(exp.Dot)
        if isinstance(node.this, exp.Identifier)
        and node.this.name.lower() in _FUNCTION_SCHEMAS
        and isinstance(node.expression, exp.Anonymous)
    ]
    for dot in reversed(calls):
        text = dot.expression.sql(dialect=_DIALECT)
        replacement = sqlglot.parse_one(text, dialect=LoupeDialect)
        assert isinstance(replacement, exp.Expression)
        if dot is expression:
            return replacement
        dot.replace(replacement)
    return expression


def _split_as_of(sql: str, tokens: list[Token]) -> tuple[list[Token], exp.Expression | None, int]:
    """Split a trailing ``AS OF <expr>`` off a query: (query tokens, expr, 1-based position).

    The clause is the last ``AS OF`` outside parentheses followed by a plain
    expression; anything else (``SELECT 1 AS of``) is left to sqlglot.
    """
    depth = 0
    candidates: list[int] = []
    for index, token in enumerate(tokens):
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif (
            depth == 0
            and token.token_type == TokenType.ALIAS
            and index + 2 < len(tokens)
            and tokens[index + 1].token_type != TokenType.IDENTIFIER
            and tokens[index + 1].text.upper() == "OF"
        ):
            candidates.append(index)
    for index in reversed(candidates):
        rest = tokens[index + 2 :]
        try:
            parsed = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE).parse(rest, sql)
        except ParseError:
            continue
        expression = parsed[0] if len(parsed) == 1 else None
        if isinstance(expression, exp.Expression) and not isinstance(expression, QUERY_TYPES):
            return tokens[:index], expression, tokens[index].start + 1
    return tokens, None, 0


# -- INSERT, UPDATE, DELETE -------------------------------------------------------------


def _parse_dml(sql: str, tokens: list[Token]) -> Statement:
    start, end = tokens[0].start, tokens[-1].end + 1
    try:
        expressions = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE).parse(tokens, sql)
    except ParseError as error:
        raise _from_parse_error(sql, tokens, error) from None
    expression = expressions[0] if expressions else None
    common = {"text": sql[start:end], "offset": start}
    kind = tokens[0].text.upper()
    if expression is not None and expression.args.get("returning"):
        raise _unsupported(f"{kind} … RETURNING", tokens[0])
    if isinstance(expression, exp.Insert):
        return _insert(sql, tokens, expression, common)
    if isinstance(expression, exp.Update):
        if expression.args.get("from") or expression.args.get("from_"):
            raise _unsupported("UPDATE … FROM", tokens[0])
        table, alias = _dml_target(expression.this, tokens[0])
        assignments = []
        for assignment in expression.expressions:
            target = assignment.this if isinstance(assignment, exp.EQ) else None
            if not isinstance(target, exp.Column):
                raise _unsupported("this form of SET", tokens[0])
            assignments.append(
                (_identifier_name(target.this), _node_position(target), assignment.expression)
            )
        where = expression.args.get("where")
        return Update(
            **common,  # type: ignore[arg-type]
            table=table,
            alias=alias,
            assignments=tuple(assignments),
            where=where.this if where is not None else None,
        )
    if isinstance(expression, exp.Delete):
        if expression.args.get("using"):
            raise _unsupported("DELETE … USING", tokens[0])
        table, alias = _dml_target(expression.this, tokens[0])
        where = expression.args.get("where")
        return Delete(
            **common,  # type: ignore[arg-type]
            table=table,
            alias=alias,
            where=where.this if where is not None else None,
        )
    raise _unsupported(_describe_words(tokens), tokens[0])


def _insert(sql: str, tokens: list[Token], insert: exp.Insert, common: dict[str, Any]) -> Insert:
    if insert.args.get("conflict"):
        raise _unsupported("INSERT … ON CONFLICT", tokens[0])
    target = insert.this
    columns: tuple[tuple[str, int], ...] | None = None
    if isinstance(target, exp.Schema):
        columns = tuple((_identifier_name(c), _node_position(c)) for c in target.expressions)
        target = target.this
    table, _ = _dml_target(target, tokens[0])
    if insert.args.get("default"):
        # DEFAULT VALUES: one row, every column its default (NULL: no defaults yet).
        return Insert(**common, table=table, columns=(), rows=((),))
    source = insert.expression
    if isinstance(source, exp.Values):
        rows = tuple(
            tuple(row.expressions) if isinstance(row, exp.Tuple) else (row,)
            for row in source.expressions
        )
        return Insert(**common, table=table, columns=columns, rows=rows)
    if isinstance(source, QUERY_TYPES):
        query = Query(text=common["text"], offset=common["offset"], expression=source)
        return Insert(**common, table=table, columns=columns, query=query)
    raise _unsupported("this form of INSERT", tokens[0])


def _dml_target(target: Any, first: Token) -> tuple[ObjectName, str | None]:
    """The table an INSERT, UPDATE or DELETE writes, and its alias."""
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise _unsupported("writing to this kind of target", first)
    parts = [
        _identifier_name(part)
        for part in (target.args.get("catalog"), target.args.get("db"), target.this)
        if isinstance(part, exp.Identifier)
    ]
    position = next(
        (
            _node_position(part)
            for part in (target.args.get("catalog"), target.args.get("db"), target.this)
            if isinstance(part, exp.Identifier)
        ),
        0,
    )
    alias = target.alias or None
    return ObjectName(parts=tuple(parts), position=position), alias


def _identifier_name(node: exp.Expression) -> str:
    """An identifier's name as PostgreSQL folds it: quoted as written, else lower case."""
    identifier = node.this if isinstance(node, exp.Column) else node
    if isinstance(identifier, exp.Identifier):
        return identifier.this if identifier.quoted else identifier.this.lower()
    return str(identifier.name if hasattr(identifier, "name") else identifier).lower()


def _node_position(node: exp.Expression) -> int:
    """1-based position of an identifier (or a column's name) in the request; 0 if unknown."""
    identifier = node.this if isinstance(node, exp.Column) else node
    start = identifier.meta.get("start") if isinstance(identifier, exp.Expression) else None
    return int(start) + 1 if start is not None else 0


def _from_parse_error(sql: str, tokens: list[Token], error: ParseError) -> LoupeError:
    detail = error.errors[0] if error.errors else {}
    line, col = detail.get("line"), detail.get("col")
    description = detail.get("description") or str(error)
    # sqlglot reports the line and the column of the *end* of the offending
    # token; map it back to the token to point at its start.
    token = next((t for t in tokens if t.line == line and t.col == col), None)
    if token is not None:
        position = token.start + 1
        message = f'syntax error at or near "{sql[token.start : token.end + 1]}"'
    else:
        position = tokens[-1].end + 2
        message = "syntax error at end of input"
    # sqlglot's description names its internals ("Required keyword: 'expression'
    # missing for Add"): useful detail, not the headline.
    return LoupeError(SqlState.SYNTAX_ERROR, message, detail=description, position=position)


def _unsupported(what: str, token: Token) -> LoupeError:
    return LoupeError(
        SqlState.FEATURE_NOT_SUPPORTED, f"{what} is not supported", position=token.start + 1
    )


def _describe_words(tokens: Sequence[Token]) -> str:
    """``CREATE MATERIALIZED VIEW …`` -> ``CREATE MATERIALIZED VIEW``; ``INSERT INTO …`` -> ``INSERT``."""
    words = [t.text.upper() for t in tokens if t.token_type != TokenType.STRING]
    if not words or not _WORD.match(words[0]):
        return tokens[0].text
    if words[0] not in ("CREATE", "DROP", "ALTER", "SHOW"):
        return words[0]
    rest = [w for w in words[1:8] if _WORD.match(w)]
    # CREATE OR REPLACE [TEMPORARY] VIEW: the kind is what matters.
    while rest and rest[0] in ("OR", "REPLACE", "TEMP", "TEMPORARY", "IF", "NOT", "EXISTS"):
        rest.pop(0)
    two_words = rest[:1] in (["MATERIALIZED"], ["DEFAULT"]) or rest[:2] == ["CLUSTER", "REPLICA"]
    if two_words and len(rest) >= 2:
        return " ".join([words[0], *rest[:2]])
    return " ".join([words[0], *rest[:1]])


# -- Loupe's own statements ---------------------------------------------------------------


def _unique_keys(
    table: str,
    columns: Sequence[ColumnDef],
    keys: Sequence[_KeySpec],
) -> tuple[UniqueKey, ...]:
    """The table's keys, checked and named as PostgreSQL names them (``t_pkey``, ``t_a_key``)."""
    names = {c.name for c in columns}
    found: list[UniqueKey] = []
    for name, key_columns, primary, position in keys:
        for column, _ in key_columns:
            if column not in names:
                raise LoupeError(
                    SqlState.UNDEFINED_COLUMN,
                    f'column "{column}" named in key does not exist',
                    position=position,
                )
        if primary and any(k.primary for k in found):
            raise LoupeError(
                "42P16",
                f'multiple primary keys for table "{table}" are not allowed',
                position=position,
            )
        listed = tuple(c for c, _ in key_columns)
        default_name = f"{table}_pkey" if primary else f"{table}_{'_'.join(listed)}_key"
        found.append(UniqueKey(name or default_name, listed, primary))
    return tuple(sorted(found, key=lambda k: not k.primary))


def _key_columns_not_null(
    columns: Sequence[ColumnDef], keys: Sequence[_KeySpec]
) -> tuple[ColumnDef, ...]:
    """PRIMARY KEY columns are NOT NULL."""
    primary = {c for _, key_columns, is_primary, _ in keys if is_primary for c, _ in key_columns}
    return tuple(
        dataclasses.replace(c, nullable=False) if c.name in primary else c for c in columns
    )


_TIMEOUT_UNITS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
}
_TIMEOUT = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*")


def _timeout_seconds(text: str, position: int) -> float:
    """FETCH's timeout (``'1s'``, ``'500ms'``, ``'2 seconds'``, a bare number of seconds)."""
    match = _TIMEOUT.fullmatch(text.lower())
    if match is None or match.group(2) not in _TIMEOUT_UNITS:
        raise LoupeError(
            SqlState.INVALID_PARAMETER_VALUE,
            f"invalid FETCH timeout {text!r}: expected a duration such as '1s'",
            position=position,
        )
    return float(match.group(1)) * _TIMEOUT_UNITS[match.group(2)]


class _LoupeParser:
    """A recursive-descent parser over one statement's tokens."""

    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.index = 0

    # cursor ------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.index + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def advance(self) -> Token:
        token = self.peek()
        if token is None:
            raise self.error("more input")
        self.index += 1
        return token

    def at(self, *words: str) -> bool:
        """Whether the next tokens are ``words`` (keywords, case-insensitive, or punctuation)."""
        for ahead, word in enumerate(words):
            token = self.peek(ahead)
            if token is None or token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
                return False
            if " ".join(token.text.upper().split()) != word:
                return False
        return True

    def accept_primary_key(self) -> bool:
        """``PRIMARY KEY`` (sqlglot reads it as one token or two)."""
        return self.accept("PRIMARY KEY") or self.accept("PRIMARY", "KEY")

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.index += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        for word in words:
            if not self.accept(word):
                raise self.error(word)

    def position(self) -> int:
        """1-based position of the next token (just past the end at end of input)."""
        token = self.peek()
        if token is None:
            return self.tokens[-1].end + 2
        return token.start + 1

    def found(self) -> str:
        token = self.peek()
        if token is None:
            return "end of input"
        if token.token_type == TokenType.STRING:
            return f"string '{token.text}'"
        return f'"{self.sql[token.start : token.end + 1]}"'

    def error(self, expected: str) -> LoupeError:
        return LoupeError(
            SqlState.SYNTAX_ERROR,
            f"Expected {expected}, found {self.found()}",
            position=self.position(),
        )

    def value_error(self, message: str, position: int) -> LoupeError:
        return LoupeError(SqlState.INVALID_PARAMETER_VALUE, message, position=position)

    def end(self) -> None:
        if self.peek() is not None:
            raise self.error("end of statement")

    # terminals ---------------------------------------------------------------------

    def identifier(self, what: str = "identifier") -> str:
        token = self.peek()
        if token is None:
            raise self.error(what)
        if token.token_type == TokenType.IDENTIFIER:
            self.index += 1
            return token.text
        if token.token_type != TokenType.STRING and _WORD.match(token.text):
            self.index += 1
            return token.text.lower()
        raise self.error(what)

    def value(self, what: str = "a value") -> str:
        """A literal or a bare word: strings keep their text, words are folded to lower case."""
        token = self.peek()
        if token is None:
            raise self.error(what)
        if token.token_type == TokenType.STRING:
            self.index += 1
            return token.text
        if token.token_type == TokenType.NUMBER:
            self.index += 1
            return token.text
        if token.token_type == TokenType.DASH:
            following = self.peek(1)
            if following is not None and following.token_type == TokenType.NUMBER:
                self.index += 2
                return f"-{following.text}"
        if token.token_type == TokenType.IDENTIFIER:
            self.index += 1
            return token.text
        if _WORD.match(token.text):
            self.index += 1
            return token.text.lower()
        raise self.error(what)

    def optional_equals(self) -> None:
        self.accept("=")

    def comma_list(self, item: Callable[[], T]) -> list[T]:
        """``item [, item …]``: one or more, separated by commas."""
        items = [item()]
        while self.accept(","):
            items.append(item())
        return items

    # statements --------------------------------------------------------------------

    def statement(self) -> Statement:
        first = self.advance().text.upper()
        if first == "CREATE":
            if self.accept("TABLE"):
                return self.create_table()
            self.expect("CLUSTER")
            if self.accept("REPLICA"):
                return self.create_cluster_replica()
            return self.create_cluster()
        if first == "DROP":
            if self.accept("TABLE"):
                return self.drop_table()
            self.expect("CLUSTER")
            if self.accept("REPLICA"):
                return self.drop_cluster_replica()
            return self.drop_cluster()
        if first == "SHOW":
            return self.show()
        if first == "SET":
            return self.set_variable()
        if first == "ALTER":
            if self.accept("CLUSTER"):
                return self.alter_cluster()
            return self.alter_system()
        return self.reset_variable()

    def common(self) -> dict[str, object]:
        start = self.tokens[0].start
        return {"text": self.sql[start : self.tokens[-1].end + 1], "offset": start}

    def explain_analyze(self) -> ExplainAnalyze:
        """``EXPLAIN ANALYZE`` (after those words), as Materialize's parser reads it, with
        Loupe's ``HYDRATION`` beside ``HINTS``."""
        if self.accept("CLUSTER"):
            properties, skew = self.explain_analyze_properties()
            as_sql = self.accept("AS", "SQL")
            self.end()
            return ExplainAnalyze(
                **self.common(),  # type: ignore[arg-type]
                properties=properties,
                skew=skew,
                cluster=True,
                as_sql=as_sql,
            )
        if self.accept("HINTS"):
            properties, skew = ("hints",), False
        elif self.accept("HYDRATION"):
            properties, skew = ("hydration",), False
        else:
            properties, skew = self.explain_analyze_properties(object_form=True)
        self.expect("FOR")
        if self.accept("INDEX"):
            object_kind = "index"
        elif self.accept("MATERIALIZED"):
            self.expect("VIEW")
            object_kind = "materialized-view"
        else:
            raise self.error("INDEX or MATERIALIZED VIEW")
        object_name = self.object_name(f"{object_kind.replace('-', ' ')} name")
        as_sql = self.accept("AS", "SQL")
        self.end()
        return ExplainAnalyze(
            **self.common(),  # type: ignore[arg-type]
            properties=properties,
            skew=skew,
            object_kind=object_kind,
            object_name=object_name,
            as_sql=as_sql,
        )

    def explain_analyze_properties(self, object_form: bool = False) -> tuple[tuple[str, ...], bool]:
        """``{CPU | MEMORY} [, {CPU | MEMORY}] [WITH SKEW]``: each at most once, in order."""
        left = ["CPU", "MEMORY"]
        properties: list[str] = []
        while True:
            if not left:
                raise LoupeError(
                    SqlState.SYNTAX_ERROR,
                    "both CPU and MEMORY were specified, expected WITH SKEW or FOR",
                    position=self.position(),
                )
            word = next((w for w in left if self.accept(w)), None)
            if word is None:
                expected = " or ".join(left)
                if not properties and object_form:
                    expected = "CPU, MEMORY, HINTS or HYDRATION"
                raise self.error(expected)
            left.remove(word)
            properties.append(word.lower())
            if not self.accept(","):
                break
        skew = self.accept("WITH", "SKEW")
        return tuple(properties), skew

    def explain(self) -> Explain | ExplainAnalyze:
        """``EXPLAIN [[OPTIMIZED | PHYSICAL] PLAN [WITH (options)] [AS TEXT] FOR] <query>``."""
        self.expect("EXPLAIN")
        stage = "optimized"
        node_ids = False
        token = self.peek()
        word = token.text.upper() if token is not None else ""
        if token is not None and token.token_type == TokenType.IDENTIFIER:
            word = ""
        if word == "ANALYZE":
            self.index += 1
            return self.explain_analyze()
        if word in EXPLAIN_STAGES and self.at(word, "PLAN"):
            self.index += 2
            stage = EXPLAIN_STAGES[word]
            explicit = True
        elif self.accept("PLAN"):
            explicit = True
        elif word in UNSUPPORTED_EXPLAIN_STAGES:
            assert token is not None
            words = [word]
            for following in self.tokens[self.index + 1 : self.index + 3]:
                if following.text.upper() in ("FOR", "WITH", "AS") or not _WORD.match(
                    following.text
                ):
                    break
                words.append(following.text.upper())
            raise _unsupported(f"EXPLAIN {' '.join(words)}", token)
        else:
            explicit = False
        if explicit:
            if self.accept("WITH"):
                node_ids = self.explain_options()
            if self.at("AS"):
                position = self.position()
                self.index += 1
                output_format = self.identifier("TEXT")
                if output_format != "text":
                    raise LoupeError(
                        SqlState.FEATURE_NOT_SUPPORTED,
                        f"EXPLAIN … AS {output_format.upper()} is not supported",
                        position=position,
                    )
            self.expect("FOR")
        for keywords, object_kind in EXPLAIN_OBJECT_KINDS:
            if self.accept(*keywords):
                object_name = self.object_name(f"{object_kind.replace('-', ' ')} name")
                self.end()
                return Explain(
                    **self.common(),  # type: ignore[arg-type]
                    stage=stage,
                    node_ids=node_ids,
                    object_kind=object_kind,
                    object_name=object_name,
                )
        if self.peek() is None:
            raise self.error("a query")
        query = _parse_with_sqlglot(self.sql, self.tokens[self.index :])
        if query.as_of is not None:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "EXPLAIN … AS OF is not supported",
                position=query.as_of_position,
            )
        return Explain(
            **self.common(),  # type: ignore[arg-type]
            stage=stage,
            node_ids=node_ids,
            query=query,
        )

    def create_object(self) -> Statement:
        """``CREATE`` of a view, materialized view, index or source (after ``CREATE``)."""
        self.expect("CREATE")
        if self.accept("VIEW"):
            return self.create_view(materialized=False)
        if self.accept("MATERIALIZED", "VIEW"):
            return self.create_view(materialized=True)
        if self.accept("DEFAULT", "INDEX"):
            return self.create_index(default=True)
        if self.accept("INDEX"):
            return self.create_index(default=False)
        if self.accept("UNIQUE", "INDEX"):
            return self.create_index(default=False, unique=True)
        if self.accept("SOURCE"):
            return self.create_source()
        raise self.error("VIEW, MATERIALIZED VIEW, INDEX or SOURCE")

    def in_cluster(self) -> str:
        """An optional ``IN CLUSTER name``; empty when absent."""
        if self.accept("IN", "CLUSTER"):
            return self.identifier("cluster name")
        return ""

    def rest_as_query(self) -> Query:
        """The remaining tokens, a query (sqlglot); AS OF is refused."""
        if self.peek() is None:
            raise self.error("a query")
        query = _parse_with_sqlglot(self.sql, self.tokens[self.index :])
        if query.as_of is not None:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "AS OF in a view definition is not supported",
                position=query.as_of_position,
            )
        self.index = len(self.tokens)
        return query

    def create_view(self, *, materialized: bool) -> CreateView:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.object_name("view name")
        if self.at("("):
            raise _unsupported("a column list in CREATE VIEW", self.tokens[self.index])
        cluster = self.in_cluster() if materialized else ""
        self.expect("AS")
        query = self.rest_as_query()
        return CreateView(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            query=query,
            materialized=materialized,
            cluster=cluster,
            if_not_exists=if_not_exists,
        )

    def create_index(self, *, default: bool, unique: bool = False) -> CreateIndex:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = ""
        if not default and not self.at("IN", "CLUSTER") and not self.at("ON"):
            name = self.identifier("index name")
        cluster = self.in_cluster()
        self.expect("ON")
        on = self.object_name("object name")
        columns: list[tuple[str, int]] = []
        if not default:
            self.expect("(")
            while True:
                position = self.position()
                columns.append((self.identifier("column name"), position))
                # An arrangement has no order: ASC, DESC and NULLS FIRST/LAST change nothing.
                _ = self.accept("ASC") or self.accept("DESC")
                _ = self.accept("NULLS", "FIRST") or self.accept("NULLS", "LAST")
                if self.accept(")"):
                    break
                if not self.accept(","):
                    raise self.error(", or )")
        self.end()
        return CreateIndex(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            on=on,
            columns=tuple(columns),
            cluster=cluster,
            if_not_exists=if_not_exists,
            unique=unique,
        )

    def create_source(self) -> CreateSource:
        name = self.object_name("source name")
        if not self.accept("FROM", "LOAD", "GENERATOR"):
            raise _unsupported("CREATE SOURCE other than FROM LOAD GENERATOR", self.tokens[0])
        token = self.peek()
        generator = self.identifier("a load generator")
        if generator != "tpch":
            assert token is not None
            raise _unsupported(f"LOAD GENERATOR {generator.upper()}", token)
        scale = 0.01
        if self.accept("("):
            self.expect("SCALE", "FACTOR")
            self.optional_equals()
            position = self.position()
            raw = self.value("a scale factor")
            try:
                scale = float(raw)
            except ValueError:
                raise self.value_error(f"invalid SCALE FACTOR {raw!r}", position) from None
            if not scale > 0:
                raise self.value_error("SCALE FACTOR must be positive", position)
            self.expect(")")
        # Materialize's spelling; every table is what Loupe creates either way.
        self.accept("FOR", "ALL", "TABLES")
        self.end()
        return CreateSource(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            generator=generator,
            scale_factor=scale,
        )

    def drop_objects(self) -> DropObjects:
        self.expect("DROP")
        kind = "MATERIALIZED VIEW" if self.accept("MATERIALIZED", "VIEW") else self.advance().text
        kind = kind.upper()
        if_exists = self.accept("IF", "EXISTS")
        names = self.comma_list(lambda: self.object_name("name"))
        cascade = self.accept("CASCADE")
        if not cascade:
            self.accept("RESTRICT")
        self.end()
        return DropObjects(
            **self.common(),  # type: ignore[arg-type]
            kind=DROP_KINDS[kind],
            names=tuple(names),
            if_exists=if_exists,
            cascade=cascade,
        )

    def copy(self) -> Copy:
        """``COPY {(query) | t [(columns)]} TO STDOUT`` or ``COPY t [(columns)] FROM STDIN``,
        each with ``[WITH] (option [value], …)`` (PostgreSQL's option list; values kept as
        written, checked where COPY runs)."""
        self.expect("COPY")
        start = self.index
        query: Query | Subscribe | None = None
        table: ObjectName | None = None
        columns: tuple[str, ...] = ()
        if self.at("("):
            close = self.matching_paren()
            inner = self.tokens[start + 1 : close]
            if not inner:
                raise self.error("a query")
            parsed = _parse_statement(self.sql, inner)
            if not isinstance(parsed, Query | Subscribe):
                raise _unsupported(f"COPY ({_describe_words(inner)})", inner[0])
            query = parsed
            self.index = close + 1
        else:
            table = self.object_name("a table name or (query)")
            if self.accept("("):
                names = [self.identifier("a column name")]
                while self.accept(","):
                    names.append(self.identifier("a column name"))
                self.expect(")")
                columns = tuple(names)
        position = self.position()
        if self.accept("TO"):
            direction = "TO"
            if not self.accept("STDOUT"):
                raise _unsupported("COPY TO a file or program (only STDOUT)", self.advance())
        elif self.accept("FROM"):
            direction = "FROM"
            if query is not None:
                raise LoupeError(
                    SqlState.SYNTAX_ERROR, "COPY (query) FROM is not allowed", position=position
                )
            if not self.accept("STDIN"):
                raise _unsupported("COPY FROM a file or program (only STDIN)", self.advance())
        else:
            raise self.error("TO or FROM")
        options: list[tuple[str, str]] = []
        self.accept("WITH")
        if self.accept("("):
            while True:
                name = self.identifier("a COPY option")
                value = "true"
                if not self.at(",") and not self.at(")"):
                    value = self.value("a COPY option value")
                options.append((name, value))
                if self.accept(")"):
                    break
                self.expect(",")
        self.end()
        if query is None and direction == "TO":
            assert table is not None
            quoted = ".".join('"' + part.replace('"', '""') + '"' for part in table.parts)
            selected: list[exp.Expression] = [exp.column(c, quoted=True) for c in columns]
            query = Query(
                text=self.sql[self.tokens[start].start : self.tokens[self.index - 1].end + 1],
                offset=self.tokens[start].start,
                expression=exp.select(*(selected or [exp.Star()])).from_(
                    exp.to_table(quoted, dialect=_DIALECT)
                ),
            )
        return Copy(
            **self.common(),  # type: ignore[arg-type]
            direction=direction,
            query=query,
            table=table,
            columns=columns,
            options=tuple(options),
        )

    def subscribe(self) -> Subscribe:
        """``SUBSCRIBE [TO] <object | (query)> [WITH (SNAPSHOT [= bool])] [AS OF t]``."""
        self.expect("SUBSCRIBE")
        self.accept("TO")
        start = self.index
        if self.at("("):
            close = self.matching_paren()
            query = _parse_with_sqlglot(self.sql, self.tokens[start + 1 : close])
            self.index = close + 1
        else:
            name = self.object_name("an object name or (query)")
            quoted = ".".join('"' + part.replace('"', '""') + '"' for part in name.parts)
            query = Query(
                text=self.sql[self.tokens[start].start : self.tokens[self.index - 1].end + 1],
                offset=self.tokens[start].start,
                expression=exp.select("*").from_(exp.to_table(quoted, dialect=_DIALECT)),
            )
        snapshot = True
        if self.accept("WITH"):
            self.expect("(")
            while True:
                position = self.position()
                option = self.identifier("SNAPSHOT")
                if option != "snapshot":
                    raise LoupeError(
                        SqlState.FEATURE_NOT_SUPPORTED,
                        f"SUBSCRIBE option {option.upper()} is not supported",
                        position=position,
                    )
                snapshot = self.boolean_option()
                if self.accept(")"):
                    break
                self.expect(",")
        as_of, as_of_position = None, 0
        if self.at("AS", "OF"):
            as_of_position = self.position()
            self.index += 2
            as_of = self.rest_as_expression()
        self.end()
        return Subscribe(
            **self.common(),  # type: ignore[arg-type]
            query=query,
            snapshot=snapshot,
            as_of=as_of,
            as_of_position=as_of_position,
        )

    # transactions and cursors ------------------------------------------------------

    def transaction_statement(self) -> Statement:
        """``BEGIN``/``START TRANSACTION``, ``COMMIT``/``END``, ``ROLLBACK``/``ABORT``,
        ``DECLARE``, ``FETCH`` and ``CLOSE`` (PostgreSQL's forms, Materialize's FETCH options)."""
        first = self.advance().text.upper()
        if first == "DECLARE":
            return self.declare()
        if first == "FETCH":
            return self.fetch()
        if first == "CLOSE":
            name = None if self.accept("ALL") else self.identifier("a cursor name or ALL")
            self.end()
            return Close(**self.common(), name=name)  # type: ignore[arg-type]
        if first == "START":
            self.expect("TRANSACTION")
        elif not self.accept("TRANSACTION"):
            self.accept("WORK")
        if first in ("COMMIT", "END", "ROLLBACK", "ABORT"):
            if self.at("AND"):
                raise _unsupported(f"{first} AND CHAIN", self.tokens[0])
            self.end()
            kind = Commit if first in ("COMMIT", "END") else Rollback
            return kind(**self.common())  # type: ignore[arg-type]
        access = None
        while self.peek() is not None:
            if self.accept("READ", "ONLY"):
                access = "read only"
            elif self.accept("READ", "WRITE"):
                access = "read write"
            elif self.accept("ISOLATION", "LEVEL"):
                # One timestamp for the whole transaction: every level reads the same.
                if not any(self.accept(*level) for level in ISOLATION_LEVELS):
                    raise self.error("an isolation level")
            elif self.at("DEFERRABLE") or self.at("NOT", "DEFERRABLE"):
                raise _unsupported("DEFERRABLE", self.tokens[0])
            else:
                raise self.error("READ ONLY, READ WRITE, ISOLATION LEVEL or end of statement")
            if self.peek() is not None:
                self.accept(",")
        return StartTransaction(**self.common(), access=access)  # type: ignore[arg-type]

    def declare(self) -> Declare:
        """``DECLARE name [NO SCROLL] CURSOR [WITHOUT HOLD] FOR <SELECT | SUBSCRIBE>``."""
        name = self.identifier("a cursor name")
        self.accept("BINARY")
        self.accept("ASENSITIVE") or self.accept("INSENSITIVE")
        if self.at("SCROLL"):
            raise _unsupported("SCROLL cursors", self.tokens[self.index])
        self.accept("NO", "SCROLL")
        self.expect("CURSOR")
        if self.at("WITH", "HOLD"):
            raise _unsupported("WITH HOLD cursors", self.tokens[self.index])
        self.accept("WITHOUT", "HOLD")
        self.expect("FOR")
        rest = self.tokens[self.index :]
        if not rest:
            raise self.error("SELECT or SUBSCRIBE")
        statement = _parse_statement(self.sql, rest)
        if not isinstance(statement, Query | Subscribe):
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "DECLARE CURSOR needs a SELECT or SUBSCRIBE",
                position=statement.position,
            )
        return Declare(**self.common(), name=name, statement=statement)  # type: ignore[arg-type]

    def fetch(self) -> Fetch:
        """``FETCH [FORWARD] [count | ALL | NEXT] [FROM | IN] name [WITH (timeout [=] t)]``."""
        count: int | None = 1
        forward = self.accept("FORWARD")
        if self.accept("ALL"):
            count = None
        elif self.accept("NEXT"):
            count = 1
        else:
            token = self.peek()
            if token is not None and token.token_type == TokenType.NUMBER:
                if not token.text.isdigit():
                    raise self.value_error("FETCH count must be a whole number", self.position())
                count = int(token.text)
                self.index += 1
            elif (forward and self.at("FROM")) or self.at("IN"):
                count = 1
        if not self.accept("FROM"):
            self.accept("IN")
        name = self.identifier("a cursor name")
        timeout = None
        if self.accept("WITH"):
            self.expect("(")
            position = self.position()
            option = self.identifier("TIMEOUT")
            if option != "timeout":
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    f"FETCH option {option.upper()} is not supported",
                    position=position,
                )
            self.optional_equals()
            position = self.position()
            timeout = _timeout_seconds(self.value("a timeout"), position)
            self.expect(")")
        self.end()
        return Fetch(**self.common(), name=name, count=count, timeout=timeout)  # type: ignore[arg-type]

    def prepared_statement_command(self) -> Statement:
        """``PREPARE``, ``EXECUTE`` or ``DEALLOCATE`` (PostgreSQL's forms)."""
        first = self.advance().text.upper()
        if first == "PREPARE":
            return self.prepare()
        if first == "EXECUTE":
            return self.execute_prepared()
        return self.deallocate()

    def prepare(self) -> Prepare:
        """``PREPARE name [(type, …)] AS <SELECT | INSERT | UPDATE | DELETE>`` (after PREPARE)."""
        name = self.identifier("a prepared statement name")
        param_types: list[str] = []
        if self.accept("("):
            while True:
                param_types.append(self.column_type())
                if self.accept(")"):
                    break
                if not self.accept(","):
                    raise self.error(", or )")
        self.expect("AS")
        rest = self.tokens[self.index :]
        if not rest:
            raise self.error("SELECT, INSERT, UPDATE or DELETE")
        inner = _parse_statement(self.sql, rest)
        if not isinstance(inner, PREPARABLE):
            raise self.error("SELECT, INSERT, UPDATE or DELETE")
        # Parsed again from its own text: what runs at EXECUTE, and what is logged.
        statement = _parse_statement(inner.text, _tokenize(inner.text))
        return Prepare(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            param_types=tuple(param_types),
            statement=statement,
        )

    def execute_prepared(self) -> Execute:
        """``EXECUTE name [(expression, …)]`` (after EXECUTE)."""
        name = self.identifier("a prepared statement name")
        args: tuple[exp.Expression, ...] = ()
        if self.at("("):
            start = self.index
            close = self.matching_paren()
            if close == start + 1:
                self.index = close
                raise self.error("a parameter value")
            group = self.tokens[start : close + 1]
            try:
                parsed = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE).parse(group, self.sql)
            except ParseError as error:
                raise _from_parse_error(self.sql, group, error) from None
            expression = parsed[0] if len(parsed) == 1 else None
            if isinstance(expression, exp.Tuple):
                args = tuple(expression.expressions)
            elif isinstance(expression, exp.Paren):
                args = (expression.this,)
            elif isinstance(expression, exp.Expression):
                args = (expression,)  # a parenthesized subquery: refused when it runs
            else:
                raise self.error("parameter values")
            self.index = close + 1
        self.end()
        return Execute(**self.common(), name=name, args=args)  # type: ignore[arg-type]

    def deallocate(self) -> Deallocate:
        """``DEALLOCATE [PREPARE] name | ALL`` (after DEALLOCATE)."""
        if self.at("PREPARE") and self.peek(1) is not None:
            self.index += 1
        name: str | None = None
        if not self.accept("ALL"):
            name = self.identifier("a prepared statement name or ALL")
        self.end()
        return Deallocate(**self.common(), name=name)  # type: ignore[arg-type]

    def matching_paren(self) -> int:
        """The index of the ``)`` closing the ``(`` at the cursor."""
        depth = 0
        for index in range(self.index, len(self.tokens)):
            kind = self.tokens[index].token_type
            if kind == TokenType.L_PAREN:
                depth += 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    return index
        self.index = len(self.tokens)
        raise self.error(")")

    def rest_as_expression(self) -> exp.Expression:
        """The remaining tokens as one scalar expression (sqlglot)."""
        rest = self.tokens[self.index :]
        if not rest:
            raise self.error("a timestamp")
        try:
            parsed = _DIALECT.parser(error_level=ErrorLevel.IMMEDIATE).parse(rest, self.sql)
        except ParseError as error:
            raise _from_parse_error(self.sql, rest, error) from None
        self.index = len(self.tokens)
        expression = parsed[0] if len(parsed) == 1 else None
        if not isinstance(expression, exp.Expression):
            raise self.error("a timestamp")
        return expression

    def explain_options(self) -> bool:
        """``( option [= value] [, …] )`` after ``EXPLAIN … PLAN WITH``: whether node_ids is on."""
        self.expect("(")
        seen: set[str] = set()
        node_ids = False
        while True:
            position = self.position()
            name = self.identifier("an EXPLAIN option")
            if name == "node" and self.accept("IDENTIFIERS"):
                name = "node_ids"
            if name != "node_ids":
                raise LoupeError(
                    SqlState.FEATURE_NOT_SUPPORTED,
                    f"EXPLAIN option {name} is not supported",
                    position=position,
                )
            if name in seen:
                raise LoupeError(
                    SqlState.SYNTAX_ERROR,
                    f"option {name} specified more than once",
                    position=position,
                )
            seen.add(name)
            node_ids = self.boolean_option()
            if self.accept(")"):
                return node_ids
            if not self.accept(","):
                raise self.error(", or )")

    def create_cluster(self) -> CreateCluster:
        name = self.identifier("cluster name")
        options = _ClusterOptions()
        if self.at("REPLICAS"):
            options.add_replicas(self)
            if self.accept("("):
                self.cluster_options(options)
        else:
            self.expect("(")
            self.cluster_options(options)
        self.end()
        return options.build(self, name)

    def cluster_options(self, options: _ClusterOptions) -> None:
        """``option [, option …] )`` — the opening parenthesis is already consumed."""
        while True:
            position = self.position()
            if self.accept("SIZE"):
                options.set("SIZE", position)
                self.optional_equals()
                options.size = self.value("a size")
            elif self.accept("REPLICATION", "FACTOR"):
                options.set("REPLICATION FACTOR", position)
                self.optional_equals()
                options.replication_factor = self.replication_factor()
            elif self.accept("INTROSPECTION", "INTERVAL"):
                options.set("INTROSPECTION INTERVAL", position)
                self.optional_equals()
                value_position = self.position()
                options.introspection_interval_ns = self.interval(value_position)
            elif self.accept("INTROSPECTION", "DEBUGGING"):
                options.set("INTROSPECTION DEBUGGING", position)
                options.introspection_debugging = self.boolean_option()
            elif self.accept("MANAGED"):
                options.set("MANAGED", position)
                options.managed = self.boolean_option()
            elif self.at("REPLICAS"):
                options.add_replicas(self)
            else:
                raise self.error(
                    "one of SIZE, REPLICATION FACTOR, INTROSPECTION INTERVAL, "
                    "INTROSPECTION DEBUGGING, MANAGED or REPLICAS"
                )
            if self.accept(")"):
                return
            if not self.accept(","):
                raise self.error(", or )")

    def replica_definitions(self) -> tuple[ReplicaSpec, ...]:
        """``REPLICAS ( name (SIZE 'n'), … )``."""
        self.expect("REPLICAS")
        self.optional_equals()
        self.expect("(")
        replicas: list[ReplicaSpec] = []
        if self.accept(")"):
            return ()
        while True:
            position = self.position()
            name = self.identifier("replica name")
            if any(r.name == name for r in replicas):
                raise LoupeError(
                    SqlState.DUPLICATE_OBJECT,
                    f"replica '{name}' specified more than once",
                    position=position,
                )
            self.expect("(")
            size = self.replica_options(closing=True)
            replicas.append(ReplicaSpec(name=name, size=size, position=position))
            if self.accept(")"):
                return tuple(replicas)
            if not self.accept(","):
                raise self.error(", or )")

    def replica_options(self, *, closing: bool) -> str:
        """Replica options (only SIZE for now); returns the size."""
        size: str | None = None
        while True:
            position = self.position()
            if self.accept("SIZE"):
                if size is not None:
                    raise LoupeError(
                        SqlState.SYNTAX_ERROR,
                        "option SIZE specified more than once",
                        position=position,
                    )
                self.optional_equals()
                size = self.value("a size")
            else:
                raise self.error("SIZE")
            if closing and self.accept(")"):
                break
            if not self.accept(","):
                if closing:
                    raise self.error(", or )")
                break
        if size is None:  # pragma: no cover - the loop always reads SIZE first
            raise self.error("SIZE")
        return size

    def create_cluster_replica(self) -> CreateClusterReplica:
        cluster = self.identifier("cluster name")
        self.expect(".")
        replica = self.identifier("replica name")
        if self.accept("("):
            size = self.replica_options(closing=True)
        else:
            size = self.replica_options(closing=False)
        self.end()
        return CreateClusterReplica(
            **self.common(),  # type: ignore[arg-type]
            cluster=cluster,
            replica=replica,
            size=size,
        )

    def drop_cluster(self) -> DropCluster:
        if_exists = self.accept("IF", "EXISTS")
        name = self.identifier("cluster name")
        cascade = False
        if self.accept("CASCADE"):
            cascade = True
        else:
            self.accept("RESTRICT")
        self.end()
        return DropCluster(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            if_exists=if_exists,
            cascade=cascade,
        )

    def drop_cluster_replica(self) -> DropClusterReplica:
        if_exists = self.accept("IF", "EXISTS")
        cluster = self.identifier("cluster name")
        self.expect(".")
        replica = self.identifier("replica name")
        cascade = self.accept("CASCADE")
        if not cascade:
            self.accept("RESTRICT")
        self.end()
        return DropClusterReplica(
            **self.common(),  # type: ignore[arg-type]
            cluster=cluster,
            replica=replica,
            if_exists=if_exists,
            cascade=cascade,
        )

    def object_name(self, what: str) -> ObjectName:
        """``name``, ``schema.name`` or ``database.schema.name``."""
        position = self.position()
        parts = [self.identifier(what)]
        while self.accept("."):
            parts.append(self.identifier(what))
        if len(parts) > 3:
            raise LoupeError(
                SqlState.SYNTAX_ERROR,
                f"qualified name {'.'.join(parts)!r} has too many parts",
                position=position,
            )
        return ObjectName(parts=tuple(parts), position=position)

    def create_table(self) -> CreateTable:
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.object_name("table name")
        self.expect("(")
        columns: list[ColumnDef] = []
        keys: list[_KeySpec] = []
        if not self.accept(")"):
            while True:
                if self.at_table_constraint():
                    keys.append(self.table_constraint())
                else:
                    columns.append(self.column_definition(columns, keys))
                if self.accept(")"):
                    break
                if not self.accept(","):
                    raise self.error(", or )")
        self.end()
        return CreateTable(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            columns=_key_columns_not_null(columns, keys),
            if_not_exists=if_not_exists,
            keys=_unique_keys(name.parts[-1], columns, keys),
        )

    def at_table_constraint(self) -> bool:
        token = self.peek()
        if token is None or token.token_type == TokenType.IDENTIFIER:
            return False
        return token.text.upper().split()[0] in (
            "PRIMARY",
            "UNIQUE",
            "CONSTRAINT",
            "FOREIGN",
            "CHECK",
            "EXCLUDE",
        )

    def table_constraint(self) -> _KeySpec:
        """``[CONSTRAINT name] PRIMARY KEY (cols) | UNIQUE (cols)``: (name, columns, primary, position)."""
        position = self.position()
        name = self.identifier("constraint name") if self.accept("CONSTRAINT") else ""
        if self.accept_primary_key():
            primary = True
        elif self.accept("UNIQUE"):
            primary = False
        else:
            token = self.peek()
            word = token.text.upper() if token is not None else "this"
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                f"{word} constraints are not supported",
                position=self.position(),
            )
        self.expect("(")
        columns = []
        while True:
            columns.append((self.identifier("column name"), self.position()))
            if self.accept(")"):
                break
            if not self.accept(","):
                raise self.error(", or )")
        return name, tuple(columns), primary, position

    def column_definition(
        self,
        earlier: Sequence[ColumnDef],
        keys: list[_KeySpec],
    ) -> ColumnDef:
        position = self.position()
        name = self.identifier("column name")
        if any(column.name == name for column in earlier):
            raise LoupeError(
                "42701", f'column "{name}" specified more than once', position=position
            )
        column_type = self.column_type()
        nullable = True
        default: str | None = None
        while True:
            option = self.position()
            constraint = self.identifier("constraint name") if self.accept("CONSTRAINT") else ""
            if self.accept("NOT", "NULL"):
                nullable = False
            elif self.accept("NULL"):
                nullable = True
            elif self.accept_primary_key():
                keys.append((constraint, ((name, position),), True, option))
            elif self.accept("UNIQUE"):
                keys.append((constraint, ((name, position),), False, option))
            elif self.accept("DEFAULT"):
                default = self.default_expression()
            elif self.peek() is not None and not self.at(",") and not self.at(")"):
                token = self.peek()
                assert token is not None
                word = token.text.upper()
                if word.split()[0] in ("REFERENCES", "CHECK", "GENERATED", "COLLATE"):
                    raise LoupeError(
                        SqlState.FEATURE_NOT_SUPPORTED,
                        f"column option {word} is not supported",
                        position=self.position(),
                    )
                raise self.error("NOT NULL, NULL, PRIMARY KEY, UNIQUE, DEFAULT, , or )")
            else:
                break
        return ColumnDef(
            name=name, type=column_type, nullable=nullable, position=position, default=default
        )

    def default_expression(self) -> str:
        """The text of a DEFAULT expression: up to the next option, ``,`` or ``)`` outside parentheses."""
        start = self.index
        depth = 0
        while (token := self.peek()) is not None:
            word = token.text.upper() if token.token_type != TokenType.STRING else ""
            if depth == 0 and (
                word.split()[:1]
                in (
                    [","],
                    [")"],
                    ["NOT"],
                    ["NULL"],
                    ["PRIMARY"],
                    ["UNIQUE"],
                    ["CONSTRAINT"],
                    ["DEFAULT"],
                )
            ):
                break
            depth += word == "("
            depth -= word == ")"
            self.index += 1
        if self.index == start:
            raise self.error("a default expression")
        return self.sql[self.tokens[start].start : self.tokens[self.index - 1].end + 1]

    def column_type(self) -> str:
        """A column type, as PostgreSQL spells it (``integer``, ``numeric(10,2)``, …)."""
        position = self.position()
        token = self.peek()
        if token is None or token.token_type == TokenType.STRING:
            raise self.error("a type")
        self.index += 1
        word = " ".join(token.text.upper().split())
        if word == "DOUBLE" and self.accept("PRECISION"):
            word = "DOUBLE PRECISION"
        if word == "CHARACTER" and self.accept("VARYING"):
            word = "CHARACTER VARYING"
        if word in ("TIMESTAMP", "TIME"):
            if self.accept("WITH", "TIME", "ZONE"):
                word += "TZ"
            else:
                self.accept("WITHOUT", "TIME", "ZONE")
        entry = sqltypes.lookup(word)
        if entry is None or not entry.column_type or token.token_type == TokenType.IDENTIFIER:
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT,
                f'type "{token.text.lower()}" does not exist',
                position=position,
            )
        if entry.element is None and self.accept("[", "]"):
            entry = sqltypes.lookup(f"{entry.name}[]")
        elif entry.element is None and self.accept("LIST"):
            entry = sqltypes.lookup(f"{entry.name} list")
        if entry is None:
            raise LoupeError(
                SqlState.UNDEFINED_OBJECT,
                f'type "{token.text.lower()}" has no array or list type in Loupe',
                position=position,
            )
        base = entry.display
        modifiers = self.type_modifiers() if entry.modifiers else ()
        if base == "character varying" and len(modifiers) > 1:
            raise self.value_error("character varying takes one modifier, its length", position)
        if base == "numeric":
            if len(modifiers) > 2 or (modifiers and not 1 <= modifiers[0] <= 39):
                raise self.value_error("NUMERIC precision must be between 1 and 39", position)
            if len(modifiers) == 2 and not 0 <= modifiers[1] <= modifiers[0]:
                raise self.value_error(
                    f"NUMERIC scale {modifiers[1]} must be between 0 and precision {modifiers[0]}",
                    position,
                )
        if modifiers:
            return f"{base}({','.join(str(m) for m in modifiers)})"
        return base

    def type_modifiers(self) -> tuple[int, ...]:
        if not self.accept("("):
            return ()
        values = []
        while True:
            position = self.position()
            raw = self.value("a number")
            if not raw.isdigit():
                raise self.value_error(f"invalid type modifier {raw!r}", position)
            values.append(int(raw))
            if self.accept(")"):
                return tuple(values)
            if not self.accept(","):
                raise self.error(", or )")

    def drop_table(self) -> DropTable:
        if_exists = self.accept("IF", "EXISTS")
        names = self.comma_list(lambda: self.object_name("table name"))
        cascade = False
        if self.accept("CASCADE"):
            cascade = True
        else:
            self.accept("RESTRICT")
        self.end()
        return DropTable(
            **self.common(),  # type: ignore[arg-type]
            names=tuple(names),
            if_exists=if_exists,
            cascade=cascade,
        )

    def show(self) -> Statement:
        if self.accept("CLUSTERS"):
            self.end()
            return ShowClusters(**self.common())  # type: ignore[arg-type]
        if self.accept("CLUSTER", "REPLICAS"):
            self.end()
            return ShowClusterReplicas(**self.common())  # type: ignore[arg-type]
        if self.accept("ROLES"):
            self.end()
            return ShowRoles(**self.common())  # type: ignore[arg-type]
        shown = self.show_objects()
        if shown is not None:
            return shown
        token = self.peek()
        if token is not None and token.token_type != TokenType.IDENTIFIER:
            word = token.text.upper()
            following = self.peek(1)
            if word in SHOW_OBJECT_KINDS and (word != "CLUSTER" or following is not None):
                words = " ".join(t.text.upper() for t in self.tokens[:3] if _WORD.match(t.text))
                raise _unsupported(words, self.tokens[0])
        position = self.position()
        name = self.identifier("a variable name, CLUSTERS or CLUSTER REPLICAS")
        self.end()
        return ShowVariable(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            name_position=position,
        )

    def show_objects(self) -> ShowObjects | None:
        """The ``SHOW`` forms that list catalog objects (None: not one of them)."""
        for words in _SHOW_LISTS:
            if self.accept(*words):
                on = self.object_name("object name") if self.accept("ON") else None
                source = self.object_name("schema name") if self.accept("FROM") else None
                if on is None and words == ("INDEXES",) and self.accept("ON"):
                    on = self.object_name("object name")
                self.end()
                return ShowObjects(
                    **self.common(),  # type: ignore[arg-type]
                    kind=" ".join(words),
                    target=on,
                    source=source,
                )
        if self.accept("COLUMNS"):
            if not (self.accept("FROM") or self.accept("IN")):
                raise self.error("FROM")
            target = self.object_name("object name")
            self.end()
            return ShowObjects(**self.common(), kind="COLUMNS", target=target)  # type: ignore[arg-type]
        for words in _SHOW_CREATES:
            if self.accept("CREATE", *words):
                target = self.object_name("object name")
                self.end()
                return ShowObjects(
                    **self.common(),  # type: ignore[arg-type]
                    kind=" ".join(("CREATE", *words)),
                    target=target,
                )
        return None

    def set_variable(self) -> SetVariable:
        if self.at("SESSION", "CHARACTERISTICS"):
            raise _unsupported("SET SESSION CHARACTERISTICS", self.tokens[0])
        # SET SESSION and SET LOCAL both set the session's value: there are no transactions.
        if not self.accept("SESSION"):
            self.accept("LOCAL")
        position = self.position()
        name = self.identifier("a variable name")
        if not (self.accept("=") or self.accept("TO")):
            raise self.error("= or TO")
        value = None if self.accept("DEFAULT") else ", ".join(self.comma_list(self.value))
        self.end()
        return SetVariable(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            value=value,
            name_position=position,
        )

    def role_statement(self) -> Statement:
        """``CREATE ROLE | USER``, ``ALTER ROLE``, ``DROP ROLE | USER``."""
        first = self.advance().text.upper()
        user = self.advance().text.upper() == "USER"
        if first == "DROP":
            if_exists = self.accept("IF", "EXISTS")
            names = self.comma_list(self.role_name)
            self.end()
            return DropRole(
                **self.common(),  # type: ignore[arg-type]
                names=tuple(names),
                if_exists=if_exists,
            )
        name = self.role_name()
        options = self.role_options()
        if first == "CREATE":
            return CreateRole(
                **self.common(),  # type: ignore[arg-type]
                name=name,
                options=options,
                user=user,
            )
        if options == RoleOptions():
            raise self.error("a role option (SUPERUSER, LOGIN, INHERIT, PASSWORD, …)")
        return AlterRole(**self.common(), name=name, options=options)  # type: ignore[arg-type]

    def role_name(self) -> str:
        return self.identifier("a role name")

    def role_options(self) -> RoleOptions:
        self.accept("WITH")
        flags: dict[str, bool] = {}
        password: str | None = None
        password_null = False
        words = {
            "SUPERUSER": ("superuser", True),
            "NOSUPERUSER": ("superuser", False),
            "LOGIN": ("login", True),
            "NOLOGIN": ("login", False),
            "INHERIT": ("inherit", True),
            "NOINHERIT": ("inherit", False),
        }
        while (token := self.peek()) is not None:
            position = self.position()
            word = token.text.upper()
            if word == "PASSWORD":
                self.index += 1
                value = self.peek()
                if value is not None and value.token_type == TokenType.NULL:
                    self.index += 1
                    password_null = True
                elif value is not None and value.token_type == TokenType.STRING:
                    self.index += 1
                    password = value.text
                else:
                    raise self.error("a password string or NULL")
                continue
            if word not in words:
                raise self.error("SUPERUSER, LOGIN, INHERIT, PASSWORD or their NO… forms")
            attribute, value_flag = words[word]
            if attribute in flags:
                raise self.value_error(f"conflicting or redundant options: {word}", position)
            flags[attribute] = value_flag
            self.index += 1
        return RoleOptions(**flags, password=password, password_null=password_null)

    def grant_role(self) -> GrantRole:
        """``GRANT role [, …] TO member [, …]`` or ``REVOKE role [, …] FROM member [, …]``."""
        revoke = self.advance().text.upper() == "REVOKE"
        roles = self.comma_list(self.role_name)
        if self.at("ON") or self.at("("):
            token = self.tokens[self.index]
            raise _unsupported("privileges on objects (GRANT … ON …)", token)
        self.expect("FROM" if revoke else "TO")
        members = self.comma_list(self.role_name)
        self.end()
        return GrantRole(
            **self.common(),  # type: ignore[arg-type]
            roles=tuple(roles),
            members=tuple(members),
            revoke=revoke,
        )

    def alter_system(self) -> AlterSystem:
        """``ALTER SYSTEM SET name { = | TO } value | DEFAULT`` or ``ALTER SYSTEM RESET name``."""
        self.expect("SYSTEM")
        reset = self.accept("RESET")
        if not reset:
            self.expect("SET")
        position = self.position()
        name = self.identifier("a variable name")
        value: str | None = None
        if not reset:
            if not (self.accept("=") or self.accept("TO")):
                raise self.error("= or TO")
            if not self.accept("DEFAULT"):
                value = self.value()
        self.end()
        return AlterSystem(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            value=value,
            name_position=position,
        )

    def alter_cluster(self) -> AlterCluster:
        """``ALTER CLUSTER name SET (option = value, …)`` or ``RESET (option, …)``.

        The introspection options only; RESET restores CREATE CLUSTER's defaults.
        """
        name = self.identifier("cluster name")
        reset = self.accept("RESET")
        if not reset:
            self.expect("SET")
        self.expect("(")
        changes: dict[str, Any] = {}
        while True:
            position = self.position()
            if self.accept("INTROSPECTION", "INTERVAL"):
                key = "introspection_interval_ns"
                default: Any = DEFAULT_INTROSPECTION_INTERVAL_NS
            elif self.accept("INTROSPECTION", "DEBUGGING"):
                key, default = "introspection_debugging", False
            else:
                # Sizes and replicas change by dropping and creating replicas.
                token = self.peek()
                word = token.text.upper() if token is not None else ""
                raise _unsupported(f"ALTER CLUSTER {word}".strip(), self.tokens[0])
            if key in changes:
                option = key.removesuffix("_ns").replace("_", " ").upper()
                raise self.value_error(f"{option} given twice", position)
            if reset:
                changes[key] = default
            elif key == "introspection_debugging":
                changes[key] = self.boolean_option()
            else:
                self.optional_equals()
                changes[key] = self.interval(self.position())
            if self.accept(")"):
                break
            if not self.accept(","):
                raise self.error(", or )")
        self.end()
        return AlterCluster(**self.common(), name=name, **changes)  # type: ignore[arg-type]

    def reset_variable(self) -> ResetVariable:
        position = self.position()
        name = self.identifier("a variable name or ALL")
        self.end()
        return ResetVariable(
            **self.common(),  # type: ignore[arg-type]
            name=name,
            name_position=position,
        )

    # option values -----------------------------------------------------------------

    def replication_factor(self) -> int:
        position = self.position()
        raw = self.value("a replication factor")
        if not raw.isdigit() or int(raw) > MAX_REPLICATION_FACTOR:
            raise self.value_error(
                f"invalid REPLICATION FACTOR {raw!r}: "
                f"expected an integer from 0 to {MAX_REPLICATION_FACTOR}",
                position,
            )
        return int(raw)

    def interval(self, position: int) -> int:
        raw = self.value("an interval")
        try:
            return parse_interval_ns(raw)
        except ValueError:
            raise self.value_error(
                f"invalid INTROSPECTION INTERVAL {raw!r}: expected e.g. '1s', '100ms' or 0",
                position,
            ) from None

    def boolean_option(self) -> bool:
        """``[=] true|false|on|off``; a bare option means true."""
        self.optional_equals()
        if self.peek() is None or self.at(",") or self.at(")"):
            return True
        position = self.position()
        raw = self.value("true or false")
        lowered = raw.lower()
        if lowered in ("true", "on", "1", "yes"):
            return True
        if lowered in ("false", "off", "0", "no"):
            return False
        raise self.value_error(f"invalid boolean {raw!r}: expected true or false", position)


class _ClusterOptions:
    """Options of ``CREATE CLUSTER`` as they are read; ``build`` checks they fit together."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.size: str | None = None
        self.replication_factor: int | None = None
        self.introspection_interval_ns = DEFAULT_INTROSPECTION_INTERVAL_NS
        self.introspection_debugging = False
        self.managed: bool | None = None
        self.replicas: tuple[ReplicaSpec, ...] | None = None

    def set(self, option: str, position: int) -> None:
        if option in self.seen:
            raise LoupeError(
                SqlState.SYNTAX_ERROR,
                f"option {option} specified more than once",
                position=position,
            )
        self.seen[option] = position

    def add_replicas(self, parser: _LoupeParser) -> None:
        self.set("REPLICAS", parser.position())
        self.replicas = parser.replica_definitions()

    def build(self, parser: _LoupeParser, name: str) -> CreateCluster:
        managed = self.managed if self.managed is not None else self.replicas is None
        if managed:
            if self.replicas is not None:
                raise parser.value_error(
                    "REPLICAS cannot be specified for a managed cluster", self.seen["REPLICAS"]
                )
            if self.size is None:
                raise LoupeError(
                    SqlState.INVALID_PARAMETER_VALUE,
                    "SIZE option must be specified for a managed cluster",
                    position=parser.tokens[0].start + 1,
                )
        else:
            for option in ("SIZE", "REPLICATION FACTOR"):
                if option in self.seen:
                    raise parser.value_error(
                        f"{option} cannot be specified for an unmanaged cluster",
                        self.seen[option],
                    )
        return CreateCluster(
            **parser.common(),  # type: ignore[arg-type]
            name=name,
            managed=managed,
            size=self.size or "",
            replication_factor=(
                self.replication_factor if self.replication_factor is not None else 1
            )
            if managed
            else 0,
            replicas=self.replicas or (),
            introspection_interval_ns=self.introspection_interval_ns,
            introspection_debugging=self.introspection_debugging,
        )


_UNITS_NS = {
    "": 1_000_000_000,
    "ns": 1,
    "nanosecond": 1,
    "nanoseconds": 1,
    "us": 1_000,
    "microsecond": 1_000,
    "microseconds": 1_000,
    "ms": 1_000_000,
    "millisecond": 1_000_000,
    "milliseconds": 1_000_000,
    "s": 1_000_000_000,
    "sec": 1_000_000_000,
    "secs": 1_000_000_000,
    "second": 1_000_000_000,
    "seconds": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "mins": 60_000_000_000,
    "minute": 60_000_000_000,
    "minutes": 60_000_000_000,
    "h": 3_600_000_000_000,
    "hour": 3_600_000_000_000,
    "hours": 3_600_000_000_000,
}
_INTERVAL_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_interval_ns(text: str) -> int:
    """``'1s'``, ``'100ms'``, ``'1 minute 30 seconds'``, ``'0'`` -> nanoseconds."""
    text = text.strip().lower()
    if not text:
        raise ValueError("empty interval")
    total = 0.0
    position = 0
    while position < len(text):
        match = _INTERVAL_PART.match(text, position)
        if match is None or match.end() == position or match.group(2) not in _UNITS_NS:
            raise ValueError(f"invalid interval {text!r}")
        total += float(match.group(1)) * _UNITS_NS[match.group(2)]
        position = match.end()
    return round(total)
