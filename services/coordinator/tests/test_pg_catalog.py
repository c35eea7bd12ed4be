"""pg_catalog and information_schema answer PostgreSQL clients' own queries as PostgreSQL does.

The queries are the clients': psql's for each backslash command (captured with
``psql -E``, ``data/psql_queries.json``), psycopg's ``TypeInfo.fetch`` query,
Grafana's and pgjdbc/DBeaver's schema browsing. Each runs against Loupe (the
in-process coordinator on the real engine, ``engine``) and against the local
PostgreSQL holding the same objects, and the answers are compared: the same
columns with the same types (up to the types Loupe lacks, ``_LOUPE_TYPE``), and
the same rows for the objects created, up to what necessarily differs (OIDs,
the owner's name, the index method).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loupe import sqltypes
from loupe.common.values import from_row
from loupe.coordinator.tests.conftest import TableHarness
from loupe.pg_catalog import PG_CLASS
from loupe.testing.postgres import PostgresUnavailable, postgres_database

QUERIES: dict[str, list[str]] = json.loads(
    (Path(__file__).parent / "data" / "psql_queries.json").read_text()
)["queries"]
OBJECTS = (
    "CREATE TABLE t (a int, b text NOT NULL)",
    "CREATE VIEW v AS SELECT a FROM t",
    "CREATE MATERIALIZED VIEW mv AS SELECT a, b FROM t",
    "CREATE INDEX t_a_idx ON t (a)",
)
# PostgreSQL's types Loupe has no type for -> the Loupe type of those columns (loupe.pg_catalog).
_LOUPE_TYPE = {
    "oid": "int4",
    "regproc": "int4",
    "regclass": "int4",
    "regtype": "int4",
    "xid": "int4",
    "name": "text",
    "char": "text",
    "bpchar": "text",
    # information_schema's character_data and yes_or_no: Loupe's varchar is text in expressions.
    "varchar": "text",
    "pg_node_tree": "text",
    "_aclitem": "_text",
    "_char": "_text",
    "_name": "_text",
    "int2vector": "_int2",
    "oidvector": "_int4",
    "_oid": "_int4",
}
LOUPE_USER = "materialize"


@pytest.fixture(scope="module")
def postgres() -> Iterator[psycopg.Connection]:
    """The local PostgreSQL with the same objects (skipped where there is none)."""
    try:
        context = postgres_database()
        url = context.__enter__()
    except PostgresUnavailable as error:
        pytest.skip(str(error))
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            for statement in OBJECTS:
                connection.execute(statement)
            yield connection
    finally:
        context.__exit__(None, None, None)


def pg_answer(
    connection: psycopg.Connection, sql: str
) -> tuple[list[tuple[str, str]], list[tuple]]:
    """(columns as (name, Loupe type), rows) of ``sql`` on PostgreSQL."""
    # PostgreSQL 15 has no relhasoids, proisagg, proiswindow (psql asks a 9.5 server for
    # them): false, as they are on 9.5 for these objects.
    sql = sql.replace("c.relhasoids", "false AS relhasoids")
    sql = sql.replace("p.proisagg", "false").replace("p.proiswindow", "false")
    cursor = connection.execute(sql)
    columns: list[tuple[str, str]] = []
    for column in cursor.description or ():
        typname = connection.execute(
            "SELECT typname FROM pg_type WHERE oid = %s", (column.type_code,)
        ).fetchone()
        assert typname is not None
        name = str(typname[0])
        columns.append((str(column.name), _LOUPE_TYPE.get(name, name)))
    return columns, [tuple(row) for row in cursor.fetchall()]


async def loupe_answer(
    harness: TableHarness, session: str, sql: str
) -> tuple[list[tuple[str, str]], list[tuple]]:
    """(columns as (name, type), rows) of ``sql`` on Loupe."""
    responses = await harness.execute(session, sql)
    errors = [r.error for r in responses if r.HasField("error")]
    assert not errors, (errors[0].message, sql)
    [description] = [r.description for r in responses if r.HasField("description")]
    columns = [(c.name, _canonical(c.type)) for c in description.columns]
    rows = [tuple(from_row(row)) for r in responses if r.HasField("rows") for row in r.rows.rows]
    return columns, rows


def _canonical(type_name: str) -> str:
    found = sqltypes.lookup(type_name)
    return found.name if found is not None else type_name


def _normalized(row: tuple, pg_user: str) -> tuple:
    """A row with the owner's name and lists compared as PostgreSQL prints them."""
    return tuple(LOUPE_USER if value == pg_user else _as_list(value) for value in row)


def _as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


async def _loupe_with_objects(engine: TableHarness) -> str:
    session = await engine.session()
    for statement in OBJECTS:
        await engine.tag(session, statement)
    return session


def _pg_user(connection: psycopg.Connection) -> str:
    row = connection.execute("SELECT current_user").fetchone()
    assert row is not None
    return str(row[0])


LISTINGS = ("\\d", "\\dt", "\\dv", "\\dm", "\\di")


async def test_psql_listings_answer_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """\\d, \\dt, \\dv, \\dm, \\di (and their + forms): PostgreSQL's columns and the same rows
    for t, v, mv, t_a_idx; \\dn, \\l, \\du (+): PostgreSQL's columns, a row for public, the
    database and the user."""
    session = await _loupe_with_objects(engine)
    pg_user = _pg_user(postgres)
    for command in (*LISTINGS, *(f"{c}+" for c in LISTINGS[1:])):
        [sql] = QUERIES[command]
        pg_columns, pg_rows = pg_answer(postgres, sql)
        columns, rows = await loupe_answer(engine, session, sql)
        assert columns == pg_columns, command
        # Sizes (\\dt+…) are PostgreSQL's files' sizes; Loupe does not know them here (NULL).
        kept = [i for i, (name, _) in enumerate(columns) if name != "Size"]
        expected = [_normalized(tuple(r[i] for i in kept), pg_user) for r in pg_rows]
        assert [tuple(r[i] for i in kept) for r in rows] == expected, command
        assert rows, command
    for command in ("\\dn+", "\\l+", "\\du+"):
        [sql] = QUERIES[command]
        columns, _ = await loupe_answer(engine, session, sql)
        assert columns == pg_answer(postgres, sql)[0], command
    [schemas] = QUERIES["\\dn"]
    pg_columns, pg_rows = pg_answer(postgres, schemas)
    columns, rows = await loupe_answer(engine, session, schemas)
    assert columns == pg_columns
    assert ("public", LOUPE_USER) in rows
    assert any(r[0] == "public" for r in pg_rows)
    [databases] = QUERIES["\\l"]
    pg_columns, pg_rows = pg_answer(postgres, databases)
    columns, rows = await loupe_answer(engine, session, databases)
    assert columns == pg_columns
    [pg_current] = [r for r in pg_rows if r[0] == postgres.info.dbname]
    # The same but for the database's name, its collation (C in Loupe) and its ACL.
    assert rows == [("materialize", LOUPE_USER, *pg_current[2:3], "C", "C", *pg_current[5:7], None)]
    [roles] = QUERIES["\\du"]
    pg_columns, pg_rows = pg_answer(postgres, roles)
    columns, rows = await loupe_answer(engine, session, roles)
    assert columns == pg_columns
    [pg_superuser] = [r for r in pg_rows if r[0] == pg_user]
    [superuser] = [r for r in rows if r[0] == LOUPE_USER]
    # rolsuper, rolinherit, rolcanlogin, rolconnlimit, memberof as PostgreSQL's superuser's.
    assert [superuser[i] for i in (1, 2, 5, 6, 8)] == [pg_superuser[i] for i in (1, 2, 5, 6, 8)]


# psql's listings of what Loupe has none of, or only builtins of (PostgreSQL lists its own casts,
# operators, conversions, extensions): PostgreSQL's columns; the same rows where neither has
# builtins to list.
OTHER_LISTINGS = ("\\dT", "\\dx", "\\db", "\\dC", "\\do", "\\dy", "\\dc", "\\dD", "\\df", "\\dS")
SAME_ROWS = ("\\dT", "\\dy", "\\dD", "\\df")


async def test_psql_other_listings_answer_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """\\dT, \\dx, \\db, \\dC, \\do, \\dy, \\dc, \\dD, \\df, \\dS: PostgreSQL's columns; the
    same rows where PostgreSQL has no builtins to list; \\db lists pg_default and pg_global;
    \\dS lists the pg_catalog views."""
    session = await engine.session()
    for command in OTHER_LISTINGS:
        [sql] = QUERIES[command]
        columns, rows = await loupe_answer(engine, session, sql)
        pg_columns, pg_rows = pg_answer(postgres, sql)
        assert columns == pg_columns, command
        if command in SAME_ROWS:
            assert rows == pg_rows, command
        elif command == "\\db":
            assert [r[0] for r in rows] == [r[0] for r in pg_rows] == ["pg_default", "pg_global"]
        elif command == "\\dS":
            listed = {(r[0], r[1], r[2]) for r in rows}
            assert ("pg_catalog", "pg_class", "view") in listed
            assert ("pg_catalog", "pg_class", "table") in {(r[0], r[1], r[2]) for r in pg_rows}


def _describe_queries(command: str, oid: int) -> list[str]:
    return [q.replace("{oid}", str(oid)) for q in QUERIES[command][1:]]


def _indexdef_keys(definition: str) -> str:
    """What psql prints of an index definition (after USING), less the method and quoting."""
    after = definition.split(" USING ", 1)[1]
    return after.split(" ", 1)[1].replace('"', "")


async def test_psql_describe_answers_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """\\d t, \\d v, \\d mv, \\d t_a_idx: each of psql's queries has PostgreSQL's columns and
    rows (the relation's kind and flags, its columns with format_type's names and NOT NULL,
    its indexes; an index's key columns and table)."""
    session = await _loupe_with_objects(engine)
    for name in ("t", "v", "mv", "t_a_idx"):
        await _check_describe(engine, session, postgres, name)


async def _check_describe(
    engine: TableHarness, session: str, postgres: psycopg.Connection, name: str
) -> None:
    pg_user = _pg_user(postgres)
    command = f"\\d {name}"
    lookup = QUERIES[command][0]
    pg_columns, [(pg_oid, *pg_named)] = pg_answer(postgres, lookup)
    columns, [(oid, *named)] = await loupe_answer(engine, session, lookup)
    assert columns == pg_columns
    assert named == pg_named
    for pg_sql, sql in zip(
        _describe_queries(command, pg_oid), _describe_queries(command, oid), strict=True
    ):
        pg_columns, pg_rows = pg_answer(postgres, pg_sql)
        columns, rows = await loupe_answer(engine, session, sql)
        assert columns == pg_columns, sql
        # PostgreSQL's index method is btree, Loupe's arrangement.
        expected = [
            _normalized(tuple("arrangement" if v == "btree" else v for v in r), pg_user)
            for r in pg_rows
        ]
        if "pg_get_indexdef(i.indexrelid, 0, true)" in sql:
            # Index definitions: the same keys; PostgreSQL's method is btree, Loupe's arrangement.
            assert [_indexdef_keys(r[5]) for r in rows] == [_indexdef_keys(r[5]) for r in expected]
            rows = [r[:5] + r[6:] for r in rows]
            expected = [r[:5] + r[6:] for r in expected]
        assert rows == expected, sql


# psycopg's TypeInfo.fetch (psycopg.types.TypeInfo._get_info_query), for a type by name: with
# to_regtype() for servers from 9.4 on (Loupe reports 9.5.0), ::regtype before.
TYPE_INFO = """\
SELECT
    typname AS name, oid, typarray AS array_oid,
    oid::regtype::text AS regtype, typdelim AS delimiter
FROM pg_type t
WHERE t.oid = {regtype}
ORDER BY t.oid
"""
# Grafana's PostgreSQL data source (postgresMetaQuery.ts): its version and TimescaleDB checks,
# table and column pickers; and the plain forms of those pickers.
_GRAFANA_SCHEMAS = """quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""
GRAFANA = (
    "SELECT current_setting('server_version_num')::int/100 as version",
    "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'",
    """select quote_ident(table_name) as "table" from information_schema.tables
    where quote_ident(table_schema) not in ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
      and """
    + _GRAFANA_SCHEMAS
    + " ORDER BY 1",
    """select quote_ident(column_name) as "column", data_type as "type"
    from information_schema.columns
    where quote_ident(table_name) = 't' ORDER BY 1""",
    "SELECT table_name FROM information_schema.tables"
    " WHERE table_schema = 'public' ORDER BY table_name",
    "SELECT column_name, data_type FROM information_schema.columns"
    " WHERE table_name = 't' ORDER BY column_name",
    "SELECT schema_name FROM information_schema.schemata WHERE schema_name = 'public'",
    "SELECT table_name, view_definition IS NOT NULL FROM information_schema.views"
    " WHERE table_schema = 'public'",
)
# DBeaver (pgjdbc's metadata and DBeaver's own navigator queries).
DBEAVER_SCHEMAS = (
    "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n"
    " LEFT OUTER JOIN pg_catalog.pg_description d"
    " ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass"
    " WHERE nspname = 'public' ORDER BY nspname"
)
DBEAVER_TABLES = (
    "SELECT c.oid,c.*,d.description,pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,"
    " pg_catalog.pg_get_partkeydef(c.oid) as partition_key"
    " FROM pg_catalog.pg_class c"
    " LEFT OUTER JOIN pg_catalog.pg_description d"
    " ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass"
    " WHERE c.relnamespace={namespace} AND c.relkind not in ('i','I','c') ORDER BY c.relname"
)
DBEAVER_COLUMNS = (
    "SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,"
    "dsc.description,dep.objid"
    " FROM pg_catalog.pg_attribute a"
    " INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)"
    " LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)"
    " LEFT OUTER JOIN pg_catalog.pg_description dsc"
    " ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)"
    " LEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i'"
    " and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid"
    " WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid={relation}"
    " ORDER BY a.attnum"
)
# DBeaver's navigator: databases, roles, the relation sizes and the index list of a table.
DBEAVER_MORE = (
    "SELECT db.oid,db.* FROM pg_catalog.pg_database db"
    " WHERE datallowconn AND NOT datistemplate OR db.datname = current_database()"
    " ORDER BY db.datname",
    "SELECT a.oid,a.* FROM pg_catalog.pg_roles a ORDER BY a.rolname",
    "select c.oid,pg_catalog.pg_total_relation_size(c.oid) as total_rel_size,"
    "pg_catalog.pg_relation_size(c.oid) as rel_size FROM pg_class c"
    " WHERE c.relnamespace={namespace}",
    "SELECT i.*,i.indkey as keys,c.relname,c.relnamespace,c.relam,c.reltablespace,"
    "tc.relname as tabrelname,dsc.description,"
    "pg_catalog.pg_get_expr(i.indpred, i.indrelid) as pred_expr,"
    "pg_catalog.pg_get_expr(i.indexprs, i.indrelid, true) as expr,"
    "pg_catalog.pg_relation_size(i.indexrelid) as index_rel_size,"
    "pg_catalog.pg_stat_get_numscans(i.indexrelid) as index_num_scans"
    " FROM pg_catalog.pg_index i"
    " INNER JOIN pg_catalog.pg_class c ON c.oid=i.indexrelid"
    " INNER JOIN pg_catalog.pg_class tc ON tc.oid=i.indrelid"
    " LEFT OUTER JOIN pg_catalog.pg_description dsc ON i.indexrelid=dsc.objoid"
    " WHERE i.indrelid={relation} ORDER BY c.relname",
    "SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod)"
    " as base_type_name, d.description FROM pg_catalog.pg_type t"
    " LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem"
    " LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid"
    " LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid"
    " WHERE t.typname IS NOT NULL AND (c.relkind IS NULL OR c.relkind = 'c')"
    " AND (et.typcategory IS NULL OR et.typcategory <> 'C')",
)
# (Types whose array type Loupe has: the others have typarray 0 in Loupe, bytea, varchar…)
DBEAVER_TYPES = (
    "SELECT t.oid, t.typname, t.typtype, t.typcategory, t.typlen, t.typelem, t.typarray,"
    " t.typispreferred, t.typbyval, t.typdelim, t.typcollation, t.typalign, t.typstorage,"
    " t.typbasetype, format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name,"
    " c.relkind, d.description"
    " FROM pg_catalog.pg_type t"
    " LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid"
    " LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid"
    " WHERE t.typname IN ('bool', 'int2', 'int4', 'int8', 'float8', 'text',"
    " 'numeric', 'date', 'time', 'timestamp', 'timestamptz', 'interval', 'jsonb', 'uuid',"
    " 'unknown', '_int4', '_text', '_numeric') ORDER BY t.oid"
)
# pgjdbc's TypeInfoCache, for a type OID it does not know (DBeaver's driver).
PGJDBC_TYPES = (
    "SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid"
    " FROM pg_catalog.pg_type"
    " LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r from pg_namespace as ns"
    " join ( select s.r, (current_schemas(false))[s.r] as nspname"
    " from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r"
    " using ( nspname ) ) as sp ON sp.nspoid = typnamespace"
    " WHERE pg_type.oid = {oid} ORDER BY sp.r, pg_type.oid DESC",
    "SELECT n.nspname = ANY(current_schemas(true)), n.nspname, t.typname"
    " FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON t.typnamespace = n.oid"
    " WHERE t.oid = {oid}",
    "SELECT e.typdelim FROM pg_catalog.pg_type t, pg_catalog.pg_type e"
    " WHERE t.oid = {oid} and t.typelem = e.oid",
)
# The columns DBeaver reads of pg_class and pg_attribute rows (c.* and a.* hold more: OIDs,
# statistics and storage details that necessarily differ).
_CLASS_READ = ("relname", "relkind", "relhasindex", "relpersistence", "relnatts", "description")
_ATTRIBUTE_READ = ("relname", "attname", "attnum", "attnotnull", "atthasdef", "def_value")


def _picked(
    answer: tuple[list[tuple[str, str]], list[tuple]], names: tuple[str, ...]
) -> tuple[list[tuple[str, str]], list[tuple]]:
    """Only the columns ``names`` of an answer (columns and rows)."""
    columns, rows = answer
    positions = [[c for c, _ in columns].index(name) for name in names]
    return [columns[p] for p in positions], [tuple(r[p] for p in positions) for r in rows]


async def test_client_catalog_queries_answer_as_postgresql(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """psycopg's TypeInfo query, pgjdbc's type lookups, Grafana's information_schema pickers
    and DBeaver's pg_namespace/pg_class/pg_attribute/pg_type browsing: PostgreSQL's columns
    and rows."""
    session = await _loupe_with_objects(engine)
    for name in ("int4", "integer", "text", "numeric", "bool", "timestamptz", "jsonb", "no_such"):
        for regtype in (f"to_regtype('{name}')", f"'{name}'::regtype"):
            sql = TYPE_INFO.format(regtype=regtype)
            if name == "no_such" and "::" in regtype:  # an error, PostgreSQL's
                with pytest.raises(psycopg.Error) as pg_error:
                    pg_answer(postgres, sql)
                error = await engine.error(session, sql)
                assert error.code == pg_error.value.sqlstate
                continue
            assert await loupe_answer(engine, session, sql) == pg_answer(postgres, sql), sql
    for sql in (q.format(oid=oid) for q in PGJDBC_TYPES for oid in (23, 25, 1007, 1009)):
        assert await loupe_answer(engine, session, sql) == pg_answer(postgres, sql), sql
    for sql in GRAFANA:
        if "server_version_num" in sql:  # Loupe reports 9.5.0, as Materialize does
            assert await loupe_answer(engine, session, sql) == ([("version", "int4")], [(905,)])
            assert pg_answer(postgres, sql)[0] == [("version", "int4")]
            continue
        assert await loupe_answer(engine, session, sql) == pg_answer(postgres, sql), sql
    pg_columns, pg_rows = pg_answer(postgres, DBEAVER_SCHEMAS)
    columns, rows = await loupe_answer(engine, session, DBEAVER_SCHEMAS)
    assert columns == pg_columns
    # public (PostgreSQL's has an ACL and a description, Loupe keeps neither).
    assert [r[2] for r in rows] == [r[2] for r in pg_rows] == ["public"]
    [[namespace]] = (
        await loupe_answer(engine, session, "SELECT oid FROM pg_namespace WHERE nspname = 'public'")
    )[1]
    [pg_namespace] = pg_answer(postgres, "SELECT oid FROM pg_namespace WHERE nspname = 'public'")[1]
    tables = await loupe_answer(engine, session, DBEAVER_TABLES.format(namespace=namespace))
    pg_tables = pg_answer(postgres, DBEAVER_TABLES.format(namespace=pg_namespace[0]))
    # Loupe's pg_class also has relhasoids (PostgreSQL 9.5's, which psql asks a 9.5 server for).
    assert [c for c, _ in tables[0] if c != "relhasoids"] == [c for c, _ in pg_tables[0]]
    assert _picked(tables, _CLASS_READ) == _picked(pg_tables, _CLASS_READ)
    [[relation]] = (await loupe_answer(engine, session, "SELECT 't'::regclass::int4"))[1]
    [pg_relation] = pg_answer(postgres, "SELECT 't'::regclass::oid")[1]
    attributes = await loupe_answer(engine, session, DBEAVER_COLUMNS.format(relation=relation))
    pg_attributes = pg_answer(postgres, DBEAVER_COLUMNS.format(relation=pg_relation[0]))
    assert [c for c, _ in attributes[0]] == [c for c, _ in pg_attributes[0]]
    # PostgreSQL's system columns (ctid, xmin…, attnum < 0) Loupe has none of.
    pg_columns, pg_rows = _picked(pg_attributes, _ATTRIBUTE_READ)
    assert _picked(attributes, _ATTRIBUTE_READ) == (pg_columns, [r for r in pg_rows if r[2] > 0])
    for template in DBEAVER_MORE:
        sql = template.format(namespace=namespace, relation=relation)
        pg_sql = template.format(namespace=pg_namespace[0], relation=pg_relation[0])
        more, pg_more = await loupe_answer(engine, session, sql), pg_answer(postgres, pg_sql)
        assert [c for c, _ in more[0] if c != "relhasoids"] == [c for c, _ in pg_more[0]], sql
        assert more[1], sql
        if "indkey as keys" in sql:  # the key columns' positions, as PostgreSQL's int2vector
            assert _picked(more, ("keys", "relname", "tabrelname")) == (
                [("keys", "_int2"), ("relname", "text"), ("tabrelname", "text")],
                [([1], "t_a_idx", "t")],
            )
            # (psycopg reads an int2vector as its text, "1")
            [(pg_keys,)] = _picked(pg_more, ("keys",))[1]
            assert [int(k) for k in pg_keys.split()] == [1]
    types, pg_types = (
        await loupe_answer(engine, session, DBEAVER_TYPES),
        pg_answer(postgres, DBEAVER_TYPES),
    )
    assert types[0] == pg_types[0]
    # All but the description (PostgreSQL describes its types; pg_description is empty in Loupe).
    assert [r[:-1] for r in types[1]] == [r[:-1] for r in pg_types[1]]


async def test_catalog_views_are_listed_as_materialize_lists_its_own(engine: TableHarness) -> None:
    """The pg_catalog views are in mz_views, mz_objects and mz_columns (with the types their
    queries have), and in pg_class under pg_catalog, so \\dS and schema browsers see them."""
    session = await engine.session()
    views = await engine.rows(
        session,
        "SELECT v.id, o.type FROM mz_catalog.mz_views AS v"
        " JOIN mz_catalog.mz_schemas AS s ON s.id = v.schema_id"
        " JOIN mz_catalog.mz_objects AS o ON o.id = v.id"
        " WHERE s.name = 'pg_catalog' AND v.name = 'pg_class'",
    )
    assert views == [(PG_CLASS.id, "view")]
    columns = await engine.rows(
        session,
        f"SELECT name, type FROM mz_catalog.mz_columns WHERE id = '{PG_CLASS.id}'"
        " ORDER BY position",
    )
    assert columns[:3] == [("oid", "integer"), ("relname", "text"), ("relnamespace", "integer")]
    listed = await engine.rows(
        session,
        "SELECT c.relkind, n.nspname FROM pg_catalog.pg_class AS c"
        " JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE c.relname = 'pg_type'",
    )
    assert listed == [("v", "pg_catalog")]


async def test_session_functions_answer_from_the_session(
    engine: TableHarness, postgres: psycopg.Connection
) -> None:
    """current_user, current_database(), current_schemas, current_setting, pg_settings and
    version() give the session's values, as SHOW does; pg_get_viewdef gives the definition."""
    session = await engine.session()
    await engine.tag(session, "SET search_path = public, mz_internal")
    [(shown_path,)] = await engine.rows(session, "SHOW search_path")
    [(version,)] = await engine.rows(session, "SHOW server_version")
    [row] = await engine.rows(
        session,
        "SELECT current_user, current_database(), current_schema, current_schemas(false),"
        " current_schemas(true), current_setting('search_path'), version()",
    )
    assert row[:5] == (
        LOUPE_USER,
        "materialize",
        "public",
        ["public", "mz_internal"],
        ["pg_catalog", "mz_catalog", "public", "mz_internal"],
    )
    assert row[5] == shown_path
    assert row[6].startswith(f"PostgreSQL {version} ")
    # Folded to the session's values, they keep the names PostgreSQL gives them.
    named = (
        "SELECT current_user, session_user, user, current_role, current_schema,"
        " current_schemas(false), current_catalog, current_database(),"
        " current_setting('search_path'), version()"
    )
    columns, _ = await loupe_answer(engine, session, named)
    assert columns == pg_answer(postgres, named)[0]
    settings = await engine.rows(
        session, "SELECT setting FROM pg_settings WHERE name IN ('search_path', 'server_version')"
    )
    assert sorted(settings) == sorted([(shown_path,), (version,)])
    # current_setting of a column (psql's \\dconfig): each setting's own value.
    by_name = await engine.rows(session, "SELECT setting, current_setting(name) FROM pg_settings")
    assert by_name
    assert all(setting == current for setting, current in by_name)
    [dconfig] = QUERIES["\\dconfig"]
    columns, _ = await loupe_answer(engine, session, dconfig)
    assert columns == pg_answer(postgres, dconfig)[0]
    await engine.tag(session, "CREATE TABLE t (a int)")
    await engine.tag(session, "CREATE VIEW v AS SELECT a FROM t")
    [(definition, viewdef)] = await engine.rows(
        session,
        "SELECT v.definition, pg_catalog.pg_get_viewdef('public.v'::regclass, true)"
        " FROM mz_catalog.mz_views AS v WHERE v.name = 'v'",
    )
    assert viewdef == definition
