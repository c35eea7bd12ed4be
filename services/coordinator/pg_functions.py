"""PostgreSQL's catalog and session functions, as the queries of PostgreSQL clients call them.

psql, psycopg, pgjdbc and Grafana send queries written for PostgreSQL's
catalog (``loupe.pg_catalog``): they call functions that look catalog rows up
by OID (``pg_get_userbyid``, ``format_type``, ``pg_table_is_visible``…), read
the session (``current_user``, ``current_schemas``, ``current_setting``…) and
use PostgreSQL's own syntax (``OPERATOR(pg_catalog.~)``, ``COLLATE
pg_catalog.default``, ``E'\\n'``, ``::pg_catalog.regclass``, ``ARRAY(SELECT …)``).

Rather than engine functions, these are rewritten before planning, into SQL the
planner and engine already have:

- ``rewrite_catalog_calls`` (before builtin views are inlined): lookups become
  scalar subqueries over the ``pg_catalog`` views (``pg_get_userbyid(x)`` is
  ``(SELECT max(rolname) FROM pg_catalog.pg_roles WHERE oid = x)``: over a key,
  the one row's value, as an aggregate the planner decorrelates), so they answer
  from the catalog at the query's timestamp as any join does; ``format_type``
  and ``pg_encoding_to_char`` become CASEs over the fixed type and encoding
  tables; the functions of things Loupe has none of (descriptions, column
  defaults, constraints) are NULL, as PostgreSQL answers for objects without
  them; the syntax is rewritten to Loupe's (``OPERATOR(pg_catalog.~)`` is
  ``~``, the default collation is no collation, ``ARRAY(subquery)`` is an
  ``array_agg`` of it, empty when it has no rows).
- ``fold_session_functions`` (before the rewrite, and after inlining, so the
  views' own calls are folded too): the session's values as literals, as the
  planner folds ``now()``; ``current_setting`` of a column is a CASE over the
  session's settings.

``pg_table_is_visible(oid)`` (and ``pg_type_is_visible``,
``pg_function_is_visible``) is true for objects of ``pg_catalog`` and of the
schemas on the session's ``search_path``, as PostgreSQL's (psql filters
``pg_catalog`` out by name); Loupe's implicit ``mz_catalog`` is not counted,
so that ``\\d`` lists the user's relations rather than hundreds of builtins.
Shadowing (an earlier schema's relation of the same name hiding a later one's)
is not checked.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from loupe import sqltypes
from loupe.builtins import IMPLICIT_SCHEMAS
from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import Query
from loupe.pg_catalog import (
    ARRAY_IN_OID,
    PG_CATALOG,
    UTF8_ENCODING,
    format_type_sql,
    index_definition,
    oid_for,
    oid_of,
)
from loupe.pg_catalog import VIEWS as PG_VIEWS

# The version() PostgreSQL clients parse (Materialize reports 9.5.0 as server_version).
VERSION = "PostgreSQL 9.5.0 on x86_64-pc-linux-gnu (Loupe)"
# Types whose values are OIDs (Loupe's OID columns are int4, see loupe.pg_catalog).
_OID_TYPES = frozenset(
    {"oid", "regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole"}
)
# Types Loupe holds as text.
_TEXT_TYPES = frozenset({"name", "char", "bpchar", "pg_node_tree"})
# Functions of things Loupe has none of: NULL, as PostgreSQL answers for objects without them.
_NULL_TEXT = frozenset(
    {
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_expr",
        "pg_get_constraintdef",
        "pg_get_triggerdef",
        "pg_get_statisticsobjdef_columns",
        "pg_get_partkeydef",
        "pg_get_function_identity_arguments",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_tablespace_location",
        "pg_get_ruledef",
    }
)
# Sizes Loupe does not know here (storage is the storage writer's): NULL, which psql
# shows as an empty Size.
_NULL_SIZES = frozenset(
    {
        "pg_table_size",
        "pg_relation_size",
        "pg_total_relation_size",
        "pg_indexes_size",
        "pg_database_size",
    }
)
_REGEX_OPERATORS = {
    "~": (False, False),
    "~*": (True, False),
    "!~": (False, True),
    "!~*": (True, True),
}


@dataclass(frozen=True)
class SessionValues:
    """What the session functions return for one session."""

    user: str
    database: str
    search_path: tuple[str, ...]
    setting: Callable[[str], str | None]
    # Every setting's name, for current_setting(x) of a column (psql's \\dconfig).
    names: tuple[str, ...] = ()


def _select(sql: str) -> exp.Expression:
    statement = parse_one(sql)
    assert isinstance(statement, Query), sql
    return statement.expression


def _scalar(sql: str, **args: exp.Expression) -> exp.Expression:
    """``(sql)`` as a scalar subquery with its ``arg_<name>`` columns replaced by ``args``."""
    tree = _select(sql)
    for placeholder in list(tree.find_all(exp.Column)):
        name = placeholder.name
        if not placeholder.table and name.startswith("arg_") and name[4:] in args:
            placeholder.replace(args[name[4:]].copy())
    return exp.Subquery(this=tree)


def _null_text() -> exp.Expression:
    return exp.Cast(this=exp.Null(), to=exp.DataType.build("text", dialect="postgres"))


def _int(value: int) -> exp.Expression:
    return exp.Literal.number(value)


def _type_name(to: exp.Expression) -> str | None:
    """The unqualified lower-case name of a cast's target type when it is a PostgreSQL one
    the rewrite handles (``pg_catalog.regclass``, ``"char"``, ``name``, ``oid``…)."""
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    if not isinstance(to, exp.DataType):
        return None
    if to.this == exp.DataType.Type.NAME:
        return "name"
    if to.this != exp.DataType.Type.USERDEFINED:
        return None
    kind = to.args.get("kind")
    if isinstance(kind, exp.Dot):
        if kind.this.name.lower() != PG_CATALOG:
            return None
        return kind.expression.name.lower()
    if isinstance(kind, exp.Identifier):
        return kind.name.lower()
    return None


def _rewrite_cast(node: exp.Cast, regclass: Callable[[str], int]) -> exp.Expression | None:
    name = _type_name(node.to)
    if (
        name is None
        and isinstance(node.to, exp.DataType)
        and node.to.this == exp.DataType.Type.TEXT
    ):
        name = "text"
    if name is None:
        return None
    operand = node.this
    if name in _OID_TYPES:
        if name == "regtype" and isinstance(operand, exp.Literal) and operand.is_string:
            spelled = operand.name.lower().removeprefix("pg_catalog.")
            if spelled in PSEUDO_TYPE_OIDS:
                return _int(PSEUDO_TYPE_OIDS[spelled])
            found = sqltypes.lookup(spelled)
            if found is None:
                raise LoupeError(UNDEFINED_OBJECT, f'type "{operand.name}" does not exist')
            return _int(found.oid)
        if name == "regclass" and isinstance(operand, exp.Literal) and operand.is_string:
            return _int(regclass(operand.name))
        if name == "regproc" and isinstance(operand, exp.Literal) and operand.is_string:
            function = operand.name.split(".")[-1].lower()
            if function not in PROCEDURE_OIDS:
                raise LoupeError(UNDEFINED_FUNCTION, f'function "{operand.name}" does not exist')
            return _int(PROCEDURE_OIDS[function])
        cast = exp.Cast(this=operand, to=exp.DataType.build("int4", dialect="postgres"))
        cast.meta["pg_type"] = name  # x::regtype::text is the type's name, not its number
        return cast
    if name == "text" and operand.meta.get("pg_type") == "regtype":
        return _rewrite_call(
            exp.Anonymous(this="format_type", expressions=[operand.this, exp.Null()]), (), regclass
        )
    if name == "text" and operand.meta.get("pg_type") == "regclass":
        return _scalar(
            "SELECT max(c.relname) FROM pg_catalog.pg_class AS c WHERE c.oid = arg_x",
            x=operand.this,
        )
    if name in _TEXT_TYPES:
        return exp.Cast(this=operand, to=exp.DataType.build("text", dialect="postgres"))
    # pg_catalog.text, pg_catalog.int4…: the type itself.
    return exp.Cast(this=operand, to=exp.DataType.build(name, dialect="postgres"))


def _function_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return None


def _rewrite_call(
    node: exp.Anonymous, search_path: Sequence[str], regclass: Callable[[str], int]
) -> exp.Expression | None:
    name = _function_name(node)
    args = node.expressions
    if name == "pg_get_userbyid" and len(args) == 1:
        return _scalar(
            "SELECT max(r.rolname) FROM pg_catalog.pg_roles AS r WHERE r.oid = arg_x", x=args[0]
        )
    visible_in = {
        "pg_table_is_visible": ("pg_class", "relnamespace"),
        "pg_type_is_visible": ("pg_type", "typnamespace"),
        "pg_function_is_visible": ("pg_proc", "pronamespace"),
        "pg_operator_is_visible": ("pg_operator", "oprnamespace"),
        "pg_conversion_is_visible": ("pg_conversion", "connamespace"),
        "pg_collation_is_visible": ("pg_collation", "collnamespace"),
    }
    if name in visible_in and len(args) == 1:
        relation, namespace = visible_in[name]
        visible = (PG_CATALOG, *search_path)
        schemas = ", ".join("'" + s.replace("'", "''") + "'" for s in visible)
        subquery = _select(
            f"SELECT x.oid FROM pg_catalog.{relation} AS x"
            f" JOIN pg_catalog.pg_namespace AS n ON n.oid = x.{namespace}"
            f" WHERE n.nspname IN ({schemas})"
        )
        return exp.In(this=args[0].copy(), query=exp.Subquery(this=subquery))
    if name == "format_type" and len(args) == 2:
        case = _select(f"SELECT {format_type_sql('arg_x')}").expressions[0]
        for placeholder in list(case.find_all(exp.Column)):
            if placeholder.name == "arg_x":
                placeholder.replace(args[0].copy())
        return exp.Paren(this=case)
    if name == "pg_encoding_to_char" and len(args) == 1:
        return exp.Case(
            this=args[0].copy(),
            ifs=[exp.If(this=_int(UTF8_ENCODING), true=exp.Literal.string("UTF8"))],
            default=exp.Literal.string(""),
        )
    if name == "pg_get_viewdef" and args:
        return _scalar(
            "SELECT max(v.definition) FROM (SELECT id, definition FROM mz_catalog.mz_views"
            " UNION ALL SELECT id, definition FROM mz_catalog.mz_materialized_views) AS v"
            f" WHERE {oid_of('v.id')} = arg_x",
            x=args[0],
        )
    if name == "pg_get_indexdef" and args:
        column = args[1] if len(args) > 1 else None
        if column is not None and not (isinstance(column, exp.Literal) and column.name == "0"):
            # One key column's expression: the indexed object's column (Loupe's keys are columns).
            return _scalar(
                "SELECT max(c.name) FROM mz_catalog.mz_index_columns AS ic"
                " JOIN mz_catalog.mz_indexes AS i ON i.id = ic.index_id"
                " JOIN mz_catalog.mz_columns AS c ON c.id = i.on_id AND c.position = ic.on_position"
                f" WHERE {oid_of('ic.index_id')} = arg_x AND ic.index_position = arg_n",
                x=args[0],
                n=column,
            )
        return _scalar(
            f"SELECT max({index_definition('i.create_sql')}) FROM mz_catalog.mz_indexes AS i"
            f" WHERE {oid_of('i.id')} = arg_x",
            x=args[0],
        )
    if name in ("to_regtype", "to_regclass") and len(args) == 1:
        # The OID of the type or relation the constant names, NULL when there is none.
        target = "regtype" if name == "to_regtype" else "regclass"
        cast = exp.Cast(this=args[0].copy(), to=exp.DataType.build("text", dialect="postgres"))
        cast.set("to", exp.ObjectIdentifier(this=target.upper()))
        try:
            return _rewrite_cast(cast, regclass)
        except LoupeError:
            return exp.Cast(this=exp.Null(), to=exp.DataType.build("int4", dialect="postgres"))
    if name == "quote_ident" and len(args) == 1:
        return _quote_ident(args[0])
    if name in ("array_upper", "array_lower") and len(args) == 2:
        # Loupe's arrays have one dimension, from 1: bounds of dimension 1, NULL otherwise.
        count = exp.Anonymous(this="cardinality", expressions=[args[0].copy()])
        bound = count if name == "array_upper" else _int(1)
        present = exp.and_(
            exp.EQ(this=args[1].copy(), expression=_int(1)),
            exp.GT(this=count.copy(), expression=_int(0)),
        )
        return exp.Case(ifs=[exp.If(this=present, true=bound)])
    if name in _NULL_TEXT:
        return _null_text()
    if name in _NULL_SIZES or (name is not None and name.startswith("pg_stat_get_")):
        # (and PostgreSQL's access statistics, which Loupe does not keep)
        return exp.Cast(this=exp.Null(), to=exp.DataType.build("int8", dialect="postgres"))
    if name == "pg_relation_is_publishable":
        return exp.Boolean(this=False)
    if name is not None and name.startswith("has_") and name.endswith("_privilege"):
        return exp.Boolean(this=True)
    return None


def _quote_ident(value: exp.Expression) -> exp.Expression:
    """``quote_ident(x)``: x, or x in double quotes (inner ones doubled) unless it is a plain
    lower-case identifier. (PostgreSQL also quotes reserved keywords; this does not.)"""
    plain = exp.RegexpLike(this=value.copy(), expression=exp.Literal.string("^[a-z_][a-z0-9_$]*$"))
    doubled = exp.Anonymous(
        this="replace",
        expressions=[value.copy(), exp.Literal.string('"'), exp.Literal.string('""')],
    )
    quoted = exp.DPipe(
        this=exp.DPipe(this=exp.Literal.string('"'), expression=doubled),
        expression=exp.Literal.string('"'),
    )
    return exp.Paren(this=exp.Case(ifs=[exp.If(this=plain, true=value.copy())], default=quoted))


def _string_to_array(node: exp.StringToArray) -> exp.Expression | None:
    """``string_to_array(text, delimiter)`` of constants (Grafana splits ``search_path``):
    the array; Loupe has no such function over columns."""
    text, delimiter = node.this, node.expression
    constants = all(isinstance(a, exp.Literal) and a.is_string for a in (text, delimiter))
    if not constants or node.args.get("null") is not None:
        return None
    parts = text.name.split(delimiter.name) if delimiter.name else [text.name]
    return exp.Cast(
        this=exp.Array(expressions=[exp.Literal.string(p) for p in parts]),
        to=exp.DataType.build("text[]", dialect="postgres"),
    )


def _scalar_in_from(node: exp.Table) -> exp.Expression | None:
    """A scalar function in FROM (``FROM string_to_array(…) s``): as PostgreSQL reads it, one
    row whose one column is named after the alias."""
    call = node.this
    table_functions = (exp.Explode, exp.Unnest, exp.GenerateSeries, exp.ExplodingGenerateSeries)
    if isinstance(call, (exp.Identifier, *table_functions)):
        return None
    if isinstance(call, exp.Anonymous) and str(call.name).lower() in (
        "generate_series",
        "unnest",
        "regexp_split_to_table",
    ):
        return None
    if not isinstance(call, exp.Func):
        return None
    name = node.alias or call.sql_name().lower()
    select = exp.select(exp.Alias(this=call.copy(), alias=exp.to_identifier(name)))
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(name)))


def _rewrite_array_subquery(node: exp.Array) -> exp.Expression | None:
    """``ARRAY(SELECT x …)``: ``(SELECT array_agg(x) …)``, ``'{}'`` when it has no rows."""
    if len(node.expressions) != 1 or not isinstance(node.expressions[0], exp.Select):
        return None
    select = node.expressions[0].copy()
    if len(select.expressions) != 1:
        return None
    unnested = _unnested_array(select)
    if unnested is not None:
        return exp.Coalesce(this=unnested, expressions=[exp.Literal.string("{}")])
    select.set("order", None)
    value = select.expressions[0]
    value = value.this if isinstance(value, exp.Alias) else value
    select.set("expressions", [exp.ArrayAgg(this=value.copy())])
    return exp.Coalesce(this=exp.Subquery(this=select), expressions=[exp.Literal.string("{}")])


def _unnested_array(select: exp.Select) -> exp.Expression | None:
    """``a`` when ``select`` is ``SELECT x FROM unnest(a) AS t(x)``: its rows are a's elements
    in order, so ``ARRAY(select)`` is ``a`` (psql's ``\\dy`` lists tags that way)."""
    source = select.args.get("from_") or select.args.get("from")
    if source is None or any(select.args.get(k) for k in ("joins", "where", "group", "order")):
        return None
    table = source.this
    call = table.this if isinstance(table, exp.Table) else table
    if not isinstance(call, exp.Explode):  # unnest(a) of one array
        return None
    alias = table.args.get("alias")
    names = {alias.name} if alias is not None else set()
    names |= {c.name for c in (alias.args.get("columns") or [])} if alias is not None else set()
    item = select.expressions[0]
    item = item.this if isinstance(item, exp.Alias) else item
    if not isinstance(item, exp.Column) or item.name not in names:
        return None
    return call.this.copy()


def _rewrite_operator(node: exp.Operator) -> exp.Expression | None:
    operator = str(node.args.get("operator") or "")
    symbol = operator.split(".")[-1].strip()
    left, right = node.this, node.expression
    if symbol in _REGEX_OPERATORS:
        insensitive, negated = _REGEX_OPERATORS[symbol]
        match: exp.Expression = (
            exp.RegexpILike(this=left, expression=right)
            if insensitive
            else exp.RegexpLike(this=left, expression=right)
        )
        return exp.Not(this=match) if negated else match
    comparisons: dict[str, type[exp.Expression]] = {
        "=": exp.EQ,
        "<>": exp.NEQ,
        "!=": exp.NEQ,
        "<": exp.LT,
        "<=": exp.LTE,
        ">": exp.GT,
        ">=": exp.GTE,
        "~~": exp.Like,
        "~~*": exp.ILike,
    }
    if symbol in comparisons:
        return comparisons[symbol](this=left, expression=right)
    return None


def rewrite_catalog_calls(
    expression: exp.Expression,
    *,
    search_path: Sequence[str] = ("public",),
    regclass: Callable[[str], int] = lambda name: _no_relation(name),
) -> exp.Expression:
    """``expression`` with PostgreSQL's catalog functions and syntax in Loupe's terms (above).

    ``regclass(name)``: the OID of the relation ``'name'::regclass`` names, as the session
    resolves it (PostgreSQL resolves these constants when it parses the query too).
    """
    if not _has_work(expression):
        return expression

    def transform(node: exp.Expression) -> exp.Expression:
        replaced: exp.Expression | None = None
        if isinstance(node, exp.Subquery):
            replaced = _catalog_lookup(node)
        elif isinstance(node, exp.Operator):
            replaced = _rewrite_operator(node)
        elif isinstance(node, exp.Collate):
            replaced = node.this  # the default collation: PostgreSQL's order of bytes is Loupe's
        elif isinstance(node, exp.ByteString):
            replaced = exp.Literal.string(codecs.decode(str(node.this), "unicode_escape"))
        elif isinstance(node, exp.Cast):
            replaced = _rewrite_cast(node, regclass)
        elif isinstance(node, exp.Anonymous):
            replaced = _rewrite_call(node, search_path, regclass)
        elif isinstance(node, exp.Array):
            replaced = _rewrite_array_subquery(node)
        elif isinstance(node, exp.StringToArray):
            replaced = _string_to_array(node)
        elif isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
            if node.db.lower() == PG_CATALOG:
                node.set("db", None)  # pg_catalog.unnest(…): the function itself
            replaced = _scalar_in_from(node)
        return replaced if replaced is not None else node

    return _post_order(_named(expression.copy()), transform)


def _named(tree: exp.Expression) -> exp.Expression:
    """``tree`` with every unaliased SELECT-list item aliased by the name PostgreSQL gives it,
    so that rewriting it (``pg_get_userbyid(x)`` into a subquery) keeps the name."""
    from loupe.coordinator.plan.sql import output_name

    for select in tree.find_all(exp.Select):
        items = select.expressions
        if all(_keeps_its_name(i) for i in items):
            continue
        select.set("expressions", [_aliased(i, output_name) for i in items])
    return tree


def _keeps_its_name(item: exp.Expression) -> bool:
    """An alias, a star, or a column (but not ``user``/``current_role``, folded to literals)."""
    if isinstance(item, exp.Column):
        return not _is_user_keyword(item)
    return isinstance(item, exp.Alias | exp.Star)


def _aliased(item: exp.Expression, output_name: Callable[[exp.Expression], str]) -> exp.Expression:
    if _keeps_its_name(item):
        return item
    try:
        name = output_name(item)
    except (LoupeError, AttributeError):  # a cast to a type the planner names differently
        name = "?column?"
    return exp.Alias(this=item, alias=exp.to_identifier(name, quoted=True))


def _post_order(
    tree: exp.Expression, transform: Callable[[exp.Expression], exp.Expression]
) -> exp.Expression:
    """``tree`` with ``transform`` applied to every node, children before their parent (so
    ``x::pg_catalog.regtype::pg_catalog.text`` has both casts rewritten)."""
    nodes: list[exp.Expression] = [n for n in tree.dfs() if isinstance(n, exp.Expression)]
    for node in reversed(nodes):
        replaced = transform(node)
        if replaced is not node:
            if node is tree:
                tree = replaced
            else:
                node.replace(replaced)
    return tree


def _catalog_lookup(node: exp.Subquery) -> exp.Expression | None:
    """A scalar subquery over ``pg_catalog`` relations alone whose value is no aggregate, with
    its value as ``max(value)``.

    psql's queries look catalog rows up by key in correlated scalar subqueries
    (``(SELECT c.collname FROM pg_catalog.pg_collation c, pg_catalog.pg_type t
    WHERE c.oid = a.attcollation AND …)``); the planner takes correlated scalar
    subqueries only when they aggregate. Over a key there is at most one row,
    where ``max`` is that row's value, so the answer is PostgreSQL's. Queries
    over any other relation are left alone (PostgreSQL fails one that finds
    more than one row; Loupe refuses to plan it).
    """
    select = node.this
    if not isinstance(select, exp.Select) or not isinstance(node.parent, exp.Expression):
        return None
    if isinstance(node.parent, exp.In | exp.Exists | exp.From | exp.Join | exp.Array):
        return None
    if len(select.expressions) != 1 or select.args.get("group") or select.args.get("limit"):
        return None
    tables = list(select.find_all(exp.Table))
    if not tables or any(t.db.lower() != PG_CATALOG for t in tables):
        return None
    value = select.expressions[0]
    inner = value.this if isinstance(value, exp.Alias) else value
    if isinstance(inner, exp.AggFunc) or any(True for _ in inner.find_all(exp.AggFunc)):
        return None
    aggregate = exp.Max(this=inner.copy())
    select.set(
        "expressions",
        [
            exp.Alias(this=aggregate, alias=value.args["alias"])
            if isinstance(value, exp.Alias)
            else aggregate
        ],
    )
    return node


def _no_relation(name: str) -> int:
    raise LoupeError(SqlState.UNDEFINED_TABLE, f'relation "{name}" does not exist')


UNDEFINED_FUNCTION = "42883"
UNDEFINED_OBJECT = "42704"
# PostgreSQL's pseudo-types (functions' argument and result types, which psql's \\df
# compares with: ``prorettype = 'pg_catalog.trigger'::pg_catalog.regtype``).
PSEUDO_TYPE_OIDS = {
    "record": 2249,
    "cstring": 2275,
    "any": 2276,
    "anyarray": 2277,
    "void": 2278,
    "trigger": 2279,
    "internal": 2281,
    "anyelement": 2283,
    "event_trigger": 3838,
}
# PostgreSQL's OIDs of the functions pg_type names (typinput…) that clients compare with
# (pgjdbc: ``typinput = 'pg_catalog.array_in'::regproc`` tells arrays).
PROCEDURE_OIDS = {"array_in": ARRAY_IN_OID}


def regclass_resolver(
    search_path: Sequence[str], relations: Mapping[str, Any]
) -> Callable[[str], int]:
    """``'name'::regclass`` for a session: the OID of the relation (or pg_catalog view,
    ``pg_class`` lists them) the name resolves to on ``search_path``; 42P01 otherwise."""

    def resolve(text: str) -> int:
        parts = [p.strip().strip('"') for p in text.split(".")]
        name = parts[-1] if parts[-1].startswith('"') else parts[-1].lower()
        schemas = [parts[-2]] if len(parts) > 1 else [PG_CATALOG, *IMPLICIT_SCHEMAS, *search_path]
        for schema in schemas:
            view = PG_VIEWS.get(f"{schema}.{name}")
            if view is not None and view.id is not None:
                return oid_for(view.id)
            relation = relations.get(f"{schema}.{name}")
            if relation is not None:
                return oid_for(relation.id)
        return _no_relation(text)

    return resolve


def _has_work(expression: exp.Expression) -> bool:
    kinds = (
        exp.Operator,
        exp.Collate,
        exp.ByteString,
        exp.Cast,
        exp.Anonymous,
        exp.Array,
        exp.Subquery,
        exp.StringToArray,
    )
    if any(True for _ in expression.find_all(*kinds)):
        return True
    return any(not isinstance(t.this, exp.Identifier) for t in expression.find_all(exp.Table))


def fold_session_functions(expression: exp.Expression, session: SessionValues) -> exp.Expression:
    """``expression`` with the session's functions (current_user, current_setting…) as literals."""
    kinds = (
        exp.CurrentUser,
        exp.SessionUser,
        exp.CurrentSchema,
        exp.CurrentSchemas,
        exp.CurrentCatalog,
        exp.CurrentDatabase,
        exp.CurrentVersion,
        exp.Anonymous,
        exp.Column,
    )
    if not any(_is_session_function(n) for n in expression.find_all(*kinds)):
        return expression

    def transform(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.CurrentUser | exp.SessionUser):
            return exp.Literal.string(session.user)
        if isinstance(node, exp.Column) and _is_user_keyword(node):
            return exp.Literal.string(session.user)
        if isinstance(node, exp.CurrentSchema):
            return (
                exp.Literal.string(session.search_path[0]) if session.search_path else _null_text()
            )
        if isinstance(node, exp.CurrentSchemas):
            implicit = _is_true(node.this)
            schemas = [*((PG_CATALOG, *IMPLICIT_SCHEMAS) if implicit else ()), *session.search_path]
            return exp.Cast(
                this=exp.Array(expressions=[exp.Literal.string(s) for s in schemas]),
                to=exp.DataType.build("text[]", dialect="postgres"),
            )
        if isinstance(node, exp.CurrentCatalog | exp.CurrentDatabase):
            return exp.Literal.string(session.database)
        if isinstance(node, exp.CurrentVersion):
            return exp.Literal.string(VERSION)
        if isinstance(node, exp.Anonymous):
            name = str(node.name).lower()
            if name == "version" and not node.expressions:
                return exp.Literal.string(VERSION)
            if name == "current_setting" and node.expressions:
                setting = node.expressions[0]
                if isinstance(setting, exp.Literal) and setting.is_string:
                    value = session.setting(setting.name.lower())
                    return exp.Literal.string(value) if value is not None else _null_text()
                if session.names:  # of a column: each setting's value, NULL for others
                    return _settings_case(setting, session)
        return node

    # Named first: a folded literal would lose the name PostgreSQL gives the call.
    return _named(expression.copy()).transform(transform, copy=False)


def _settings_case(setting: exp.Expression, session: SessionValues) -> exp.Expression:
    whens = []
    for name in session.names:
        value = session.setting(name)
        if value is not None:
            whens.append(exp.If(this=exp.Literal.string(name), true=exp.Literal.string(value)))
    lowered = exp.Lower(this=setting.copy())
    return exp.Paren(this=exp.Case(this=lowered, ifs=whens, default=_null_text()))


def _is_session_function(node: exp.Expr) -> bool:
    if isinstance(node, exp.Column):
        return _is_user_keyword(node)
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower() in ("version", "current_setting")
    return True


def _is_user_keyword(node: exp.Column) -> bool:
    """``current_role`` and ``user`` (keywords sqlglot reads as column names)."""
    return not node.table and node.name.lower() in ("current_role", "user") and not node.this.quoted


def _is_true(node: exp.Expression | None) -> bool:
    return isinstance(node, exp.Boolean) and bool(node.this)


def session_values(session: Any) -> SessionValues:
    """The values of ``session`` (a ``loupe.coordinator.session.Session``) for the functions."""
    from loupe.coordinator.session import VARIABLES
    from loupe.coordinator.sql.resolve import search_path_schemas

    return SessionValues(
        user=session.user,
        database=session.database,
        search_path=tuple(search_path_schemas(session.search_path)),
        setting=session.get,
        names=(*VARIABLES, "is_superuser"),
    )
