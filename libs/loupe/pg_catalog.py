"""``pg_catalog`` and ``information_schema``: PostgreSQL's catalog as views over Loupe's.

PostgreSQL clients learn what a database holds from PostgreSQL's own catalog:
psql's ``\\d`` family reads ``pg_class``, ``pg_namespace``, ``pg_attribute``…,
psycopg's ``TypeInfo.fetch`` reads ``pg_type``, Grafana reads
``information_schema``, pgjdbc (DBeaver) joins ``pg_namespace``, ``pg_class``,
``pg_attribute`` and ``pg_type``. As in Materialize (``src/catalog/src/builtin.rs``
defines ``PG_CLASS`` and the others as SQL over its ``mz_`` relations), each is a
builtin view over ``mz_catalog``'s relations (``loupe.builtins``), inlined
where a query names it (``loupe.coordinator.builtin_views``); relations Loupe
has nothing for (constraints, triggers, policies, inheritance, defaults,
descriptions) are empty with PostgreSQL's columns, so the queries that join
them plan and answer as PostgreSQL answers for objects without any.

OIDs. PostgreSQL names catalog rows by OID; Loupe names its objects by ids
(``u<n>`` for user objects, ``s<n>`` for system ones). An OID is derived from
the id, not allocated: ``u<n>`` → 20000 + n (Materialize's user OIDs start at
20000) and ``s<n>`` → 17000 + n. Derived OIDs need no catalog column, so no
catalog migration; they are stable for as long as the id is (ids are never
reused); and they collide with no type OID (PostgreSQL's types are below
16384, Materialize's own at 16384 to 16999, see ``loupe.sqltypes``). Each kind of
object (relations, schemas, roles, databases) derives from its own ids, so
``u1`` the database and ``u1`` the schema share 20001: PostgreSQL's OIDs are
unique within one catalog relation, which is what joins need. ``pg_catalog``
and ``information_schema`` are not schemas in Loupe's catalog: they get
PostgreSQL's fixed OIDs (11, and 13000 for information_schema).

Types. Loupe has no ``oid``, ``name``, ``"char"``, ``regclass``/``regtype``/
``regproc``, ``aclitem`` or ``pg_node_tree`` types: OID columns are ``int4``
(every derived OID fits), names and ``"char"`` columns are ``text``,
``aclitem[]`` is ``text[]`` (always NULL: Loupe keeps no ACLs here),
``int2vector`` is ``int2[]``, ``oidvector``/``oid[]`` are ``int4[]`` and
``pg_node_tree`` is ``text`` (and ``pg_trigger.tgargs``, ``bytea``, is ``text``: casts to
bytea are not planned). A client reads the same values from them; the
wire announces ``int4``/``text`` where PostgreSQL announces ``oid``/``name``.
``information_schema``'s domains (``sql_identifier``, ``cardinal_number``…)
are their base types (``text``, ``int4``).
"""

from __future__ import annotations

from loupe import sqltypes
from loupe.builtins import BuiltinView
from loupe.pgwire import types as pgtypes

PG_CATALOG = "pg_catalog"
INFORMATION_SCHEMA = "information_schema"
PG_CATALOG_OID = 11
INFORMATION_SCHEMA_OID = 13000
USER_OID_BASE = 20000
SYSTEM_OID_BASE = 17000
# PostgreSQL's OIDs for what Loupe has one of: the "heap" access method, the
# default collation, the UTF8 encoding number.
HEAP_AM_OID = 2
# Loupe's indexes are arrangements, an access method PostgreSQL does not have (Materialize
# prints "arrangement" where PostgreSQL prints "btree").
ARRANGEMENT_AM_OID = SYSTEM_OID_BASE - 1
DEFAULT_COLLATION_OID = 100
UTF8_ENCODING = 6
# PostgreSQL's array_in, every array type's typinput (pgjdbc tells arrays by it).
ARRAY_IN_OID = 750
# PostgreSQL's pg_default tablespace (pg_database.dattablespace joins pg_tablespace on it).
DEFAULT_TABLESPACE_OID = 1663


def oid_of(id_sql: str) -> str:
    """SQL for the OID of the object whose id is the text expression ``id_sql`` (see above)."""
    return (
        f"(CASE WHEN left({id_sql}, 1) = 'u' THEN {USER_OID_BASE} ELSE {SYSTEM_OID_BASE} END"
        f" + substr({id_sql}, 2)::int4)"
    )


def oid_for(object_id: str) -> int:
    """The OID of the object whose id is ``object_id`` (the Python twin of ``oid_of``)."""
    base = USER_OID_BASE if object_id.startswith("u") else SYSTEM_OID_BASE
    return base + int(object_id[1:])


# Types pg_type lists: one row per OID (Materialize's lists share one anonymous OID and
# are left out, as PostgreSQL has no such type).
PG_TYPES = tuple(
    t for t in sqltypes.TYPES.values() if not sqltypes.is_list(t.name) and t.name not in ("list",)
)
_ARRAYS = {t.element: t.oid for t in PG_TYPES if t.element is not None}
# Types with collations in PostgreSQL (those of the string category, and their arrays).
_COLLATABLE = frozenset({"text", "varchar"})
# Each category's preferred type (PostgreSQL's typispreferred).
_PREFERRED = frozenset({"bool", "text", "float8", "timestamptz", "interval"})
# typalign by length, and PostgreSQL's exceptions (typstorage likewise).
_ALIGNMENT = {8: "d", 16: "d", 2: "s", 1: "c"}
_BYTE_ALIGNED = frozenset({"uuid", "unknown"})
_STORAGE = {"numeric": "m", "unknown": "p", "interval": "p", "uuid": "p"}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def type_oid_of(display_sql: str) -> str:
    """SQL for the type OID of a column whose type, as ``format_type`` prints it, is
    ``display_sql`` (mz_columns.type); 0 for a type Loupe does not know."""
    whens = " ".join(
        f"WHEN {_quote(t.display)} THEN {t.oid}"
        for t in sqltypes.TYPES.values()
        if not sqltypes.is_list(t.name) or t.name == "int8 list"
    )
    return f"(CASE {display_sql} {whens} ELSE 0 END)"


def format_type_sql(oid_sql: str) -> str:
    """SQL for ``format_type(oid, typmod)``: the type's name as PostgreSQL prints it
    (Loupe keeps no type modifiers in the catalog, so ``typmod`` is not applied)."""
    whens = " ".join(f"WHEN {t.oid} THEN {_quote(t.display)}" for t in PG_TYPES)
    return f"(CASE {oid_sql} {whens} END)"


def index_definition(create_sql: str) -> str:
    """SQL for ``pg_get_indexdef``'s text of an index whose ``CREATE INDEX`` is ``create_sql``:
    PostgreSQL's shape, ``… ON t USING <method> (<keys>)`` (psql prints what follows USING)."""
    return (
        f"split_part({create_sql}, ' (', 1) || ' USING arrangement ('"
        f" || substr({create_sql}, strpos({create_sql}, ' (') + 2)"
    )


def _type_rows() -> str:
    rows = []
    for t in PG_TYPES:
        element = sqltypes.element_type(t.name)
        element_oid = sqltypes.sql_type(element).oid if element is not None else 0
        length = pgtypes.type_size(t.name)
        rows.append(
            "("
            + ", ".join(
                (
                    str(t.oid),
                    _quote(t.name),
                    _quote("p" if t.name == "unknown" else "b"),
                    _quote(t.category),
                    "true" if t.name in _PREFERRED else "false",
                    str(length),
                    "true" if 0 < length <= 8 else "false",
                    str(element_oid),
                    str(_ARRAYS.get(t.name, 0)),
                    str(DEFAULT_COLLATION_OID if (element or t.name) in _COLLATABLE else 0),
                    _quote(_ALIGNMENT.get(length, "i") if t.name not in _BYTE_ALIGNED else "c"),
                    _quote(_STORAGE.get(t.name, "p" if length > 0 else "x")),
                    _quote(t.display),
                )
            )
            + ")"
        )
    return ",\n".join(rows)


def _empty(columns: str) -> str:
    """A relation with these ``name type`` columns and no rows."""
    parts = [c.strip().rsplit(" ", 1) for c in columns.split(",")]
    return "SELECT " + ", ".join(f"NULL::{t} AS {n}" for n, t in parts) + " WHERE false"


_SYSTEM_OWNER = oid_of("'s1'")

# Every relation, with its kind (PostgreSQL's relkind), schema and owner; indexes have
# no schema of their own (PostgreSQL's live in their table's schema).
_RELATIONS = """
SELECT id, schema_id, name, owner_id, 'r' AS relkind, NULL::text AS on_id FROM mz_catalog.mz_tables
UNION ALL SELECT id, schema_id, name, owner_id, 'r', NULL FROM mz_catalog.mz_sources
UNION ALL SELECT id, schema_id, name, owner_id, 'v', NULL FROM mz_catalog.mz_views
UNION ALL SELECT id, schema_id, name, owner_id, 'm', NULL FROM mz_catalog.mz_materialized_views
UNION ALL SELECT i.id, o.schema_id, i.name, i.owner_id, 'i', i.on_id
  FROM mz_catalog.mz_indexes AS i JOIN mz_catalog.mz_objects AS o ON o.id = i.on_id
"""


def namespace_oid(id_sql: str, name_sql: str) -> str:
    """SQL for the OID of the schema with this id and name: PostgreSQL's fixed OIDs for
    pg_catalog and information_schema, the derived one for the others."""
    return (
        f"(CASE {name_sql} WHEN '{PG_CATALOG}' THEN {PG_CATALOG_OID}"
        f" WHEN '{INFORMATION_SCHEMA}' THEN {INFORMATION_SCHEMA_OID} ELSE {oid_of(id_sql)} END)"
    )


# The catalog's schemas; pg_catalog and information_schema also when it has none by those
# names (catalogs bootstrapped before Loupe had them).
_NAMESPACES = f"""
SELECT {namespace_oid("id", "name")} AS oid, name AS nspname,
       {oid_of("owner_id")} AS nspowner, NULL::text[] AS nspacl
FROM mz_catalog.mz_schemas
WHERE database_id IS NULL OR database_id = (
  SELECT min(id) FROM mz_catalog.mz_databases WHERE name = current_database()
)
UNION ALL
SELECT x.oid, x.nspname, {oid_of("'s1'")}, NULL::text[]
FROM (VALUES ({PG_CATALOG_OID}, '{PG_CATALOG}'), ({INFORMATION_SCHEMA_OID}, '{INFORMATION_SCHEMA}'))
  AS x(oid, nspname)
LEFT JOIN mz_catalog.mz_schemas AS s ON s.name = x.nspname AND s.database_id IS NULL
WHERE s.id IS NULL
"""

_CLASSES = f"""
SELECT {oid_of("r.id")} AS oid, r.name AS relname,
       {namespace_oid("r.schema_id", "s.name")} AS relnamespace,
       0 AS reltype, 0 AS reloftype, {oid_of("r.owner_id")} AS relowner,
       CASE r.relkind WHEN 'i' THEN {ARRANGEMENT_AM_OID} WHEN 'v' THEN 0 ELSE {HEAP_AM_OID} END
         AS relam,
       0 AS relfilenode, 0 AS reltablespace, 0 AS relpages, -1::float4 AS reltuples,
       0 AS relallvisible, 0 AS reltoastrelid,
       EXISTS (SELECT 1 FROM mz_catalog.mz_indexes AS x WHERE x.on_id = r.id) AS relhasindex,
       false AS relisshared, 'p' AS relpersistence, r.relkind,
       ((SELECT count(*) FROM mz_catalog.mz_columns AS col WHERE col.id = r.id)
        + (SELECT count(*) FROM mz_catalog.mz_index_columns AS ic WHERE ic.index_id = r.id)
       )::int2 AS relnatts,
       0::int2 AS relchecks,
       r.relkind IN ('v', 'm') AS relhasrules,  -- PostgreSQL's views are rewrite rules
       false AS relhastriggers,
       false AS relhassubclass, false AS relrowsecurity, false AS relforcerowsecurity,
       true AS relispopulated,
       CASE WHEN r.relkind IN ('v', 'i') THEN 'n' ELSE 'd' END AS relreplident, false AS relispartition, 0 AS relrewrite,
       0 AS relfrozenxid, 0 AS relminmxid, NULL::text[] AS relacl, NULL::text[] AS reloptions,
       NULL::text AS relpartbound, false AS relhasoids
FROM ({_RELATIONS}) AS r
LEFT JOIN mz_catalog.mz_schemas AS s ON s.id = r.schema_id
"""

_ATTRIBUTES = f"""
SELECT {oid_of("c.id")} AS attrelid, c.name AS attname, {type_oid_of("c.type")} AS atttypid,
       -1 AS attstattarget, -1::int2 AS attlen, c.position::int2 AS attnum, 0 AS attndims,
       -1 AS attcacheoff, -1 AS atttypmod, false AS attbyval, 'i' AS attalign,
       'x' AS attstorage, '' AS attcompression, NOT c.nullable AS attnotnull,
       false AS atthasdef, false AS atthasmissing, '' AS attidentity, '' AS attgenerated,
       false AS attisdropped, true AS attislocal, 0 AS attinhcount,
       CASE WHEN c.type IN ('text', 'character varying') THEN {DEFAULT_COLLATION_OID} ELSE 0 END
         AS attcollation,
       NULL::text[] AS attacl, NULL::text[] AS attoptions, NULL::text[] AS attfdwoptions,
       NULL::text AS attmissingval
FROM mz_catalog.mz_columns AS c
UNION ALL
SELECT {oid_of("ic.index_id")}, c.name, {type_oid_of("c.type")}, -1, -1::int2,
       ic.index_position::int2, 0, -1, -1, false, 'i', 'x', '', false, false, false, '', '',
       false, true, 0,
       CASE WHEN c.type IN ('text', 'character varying') THEN {DEFAULT_COLLATION_OID} ELSE 0 END,
       NULL::text[], NULL::text[], NULL::text[], NULL::text
FROM mz_catalog.mz_index_columns AS ic
JOIN mz_catalog.mz_indexes AS i ON i.id = ic.index_id
JOIN mz_catalog.mz_columns AS c ON c.id = i.on_id AND c.position = ic.on_position
"""

_TYPES = f"""
SELECT t.oid, t.typname, {PG_CATALOG_OID} AS typnamespace, {oid_of("'s1'")} AS typowner,
       t.typlen::int2 AS typlen, t.typbyval, t.typtype, t.typcategory, t.typispreferred,
       true AS typisdefined, ',' AS typdelim, 0 AS typrelid, 0 AS typsubscript, t.typelem,
       t.typarray, CASE WHEN t.typcategory = 'A' THEN {ARRAY_IN_OID} ELSE 0 END AS typinput,
       0 AS typoutput, 0 AS typreceive, 0 AS typsend,
       0 AS typmodin, 0 AS typmodout, 0 AS typanalyze,
       t.typalign, t.typstorage, false AS typnotnull,
       0 AS typbasetype, -1 AS typtypmod, 0 AS typndims, t.typcollation,
       NULL::text AS typdefaultbin, NULL::text AS typdefault, NULL::text[] AS typacl
FROM (VALUES
{_type_rows()}
) AS t(oid, typname, typtype, typcategory, typispreferred, typlen, typbyval, typelem,
       typarray, typcollation, typalign, typstorage, display)
"""

_ROLES = f"""
SELECT r.name AS rolname,
       r.id = 's1' OR r.name = current_user AND current_setting('is_superuser') = 'on'
         AS rolsuper,
       r.inherit AS rolinherit, false AS rolcreaterole, false AS rolcreatedb,
       true AS rolcanlogin, false AS rolreplication, -1 AS rolconnlimit,
       '********' AS rolpassword, NULL::timestamptz AS rolvaliduntil, false AS rolbypassrls,
       NULL::text[] AS rolconfig, {oid_of("r.id")} AS oid
FROM mz_catalog.mz_roles AS r
"""

_INDEXES = f"""
SELECT {oid_of("i.id")} AS indexrelid, {oid_of("i.on_id")} AS indrelid,
       (SELECT count(*) FROM mz_catalog.mz_index_columns AS ic WHERE ic.index_id = i.id)::int2
         AS indnatts,
       (SELECT count(*) FROM mz_catalog.mz_index_columns AS ic WHERE ic.index_id = i.id)::int2
         AS indnkeyatts,
       false AS indisunique,
       false AS indnullsnotdistinct, false AS indisprimary, false AS indisexclusion,
       true AS indimmediate, false AS indisclustered, true AS indisvalid,
       false AS indcheckxmin, true AS indisready, true AS indislive, false AS indisreplident,
       (SELECT array_agg(ic.on_position::int2 ORDER BY ic.index_position)
        FROM mz_catalog.mz_index_columns AS ic WHERE ic.index_id = i.id) AS indkey,
       NULL::int4[] AS indcollation, NULL::int4[] AS indclass,
       NULL::int2[] AS indoption, NULL::text AS indexprs, NULL::text AS indpred
FROM mz_catalog.mz_indexes AS i
"""

_SCHEMA_NAMES = """
SELECT r.id, r.name, s.name AS schema_name, d.name AS database_name, ro.name AS owner_name,
       r.relkind
FROM ({relations}) AS r
JOIN mz_catalog.mz_schemas AS s ON s.id = r.schema_id
LEFT JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id
LEFT JOIN mz_catalog.mz_roles AS ro ON ro.id = r.owner_id
"""
_NAMED_RELATIONS = _SCHEMA_NAMES.format(relations=_RELATIONS)


# The ids the views are listed under in mz_views, mz_objects and mz_columns: fixed here,
# never reused (s6NN: pg_catalog, s65N: information_schema).
_IDS = {
    "pg_namespace": "s600",
    "pg_class": "s601",
    "pg_attribute": "s602",
    "pg_type": "s603",
    "pg_database": "s604",
    "pg_roles": "s605",
    "pg_authid": "s606",
    "pg_user": "s607",
    "pg_auth_members": "s608",
    "pg_index": "s609",
    "pg_am": "s610",
    "pg_description": "s611",
    "pg_shdescription": "s612",
    "pg_constraint": "s613",
    "pg_inherits": "s614",
    "pg_attrdef": "s615",
    "pg_depend": "s616",
    "pg_trigger": "s617",
    "pg_policy": "s618",
    "pg_collation": "s619",
    "pg_proc": "s620",
    "pg_settings": "s621",
    "pg_tables": "s622",
    "pg_views": "s623",
    "pg_matviews": "s624",
    "pg_indexes": "s625",
    "pg_rewrite": "s626",
    "pg_tablespace": "s627",
    "pg_extension": "s628",
    "pg_cast": "s629",
    "pg_operator": "s630",
    "pg_event_trigger": "s631",
    "pg_conversion": "s632",
    "pg_enum": "s633",
    "pg_range": "s634",
    "tables": "s650",
    "columns": "s651",
    "schemata": "s652",
    "views": "s653",
}


def _view(schema: str, name: str, sql: str) -> BuiltinView:
    return BuiltinView(schema, name, sql, _IDS[name])


PG_NAMESPACE = _view(PG_CATALOG, "pg_namespace", _NAMESPACES)
PG_CLASS = _view(PG_CATALOG, "pg_class", _CLASSES)
PG_ATTRIBUTE = _view(PG_CATALOG, "pg_attribute", _ATTRIBUTES)
PG_TYPE = _view(PG_CATALOG, "pg_type", _TYPES)
PG_DATABASE = _view(
    PG_CATALOG,
    "pg_database",
    f"""
SELECT {oid_of("id")} AS oid, name AS datname, {oid_of("owner_id")} AS datdba,
       {UTF8_ENCODING} AS encoding, 'c' AS datlocprovider, false AS datistemplate,
       true AS datallowconn, -1 AS datconnlimit, 0 AS datfrozenxid, 0 AS datminmxid,
       {DEFAULT_TABLESPACE_OID} AS dattablespace, 'C' AS datcollate, 'C' AS datctype, NULL::text AS daticulocale,
       NULL::text AS datcollversion, NULL::text[] AS datacl
FROM mz_catalog.mz_databases
""",
)
PG_ROLES = _view(PG_CATALOG, "pg_roles", _ROLES)
PG_AUTHID = _view(
    PG_CATALOG,
    "pg_authid",
    """
SELECT oid, rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin,
       rolreplication, rolbypassrls, rolconnlimit, NULL::text AS rolpassword, rolvaliduntil
FROM pg_catalog.pg_roles
""",
)
PG_USER = _view(
    PG_CATALOG,
    "pg_user",
    """
SELECT rolname AS usename, oid AS usesysid, rolcreatedb AS usecreatedb, rolsuper AS usesuper,
       rolreplication AS userepl, rolbypassrls AS usebypassrls, '********' AS passwd,
       rolvaliduntil AS valuntil, rolconfig AS useconfig
FROM pg_catalog.pg_roles
WHERE rolcanlogin
""",
)
PG_AUTH_MEMBERS = _view(
    PG_CATALOG,
    "pg_auth_members",
    f"""
SELECT {oid_of("m.role_id")} AS roleid, {oid_of("m.member")} AS member,
       {oid_of("m.grantor")} AS grantor, false AS admin_option
FROM mz_catalog.mz_role_members AS m
""",
)
PG_INDEX = _view(PG_CATALOG, "pg_index", _INDEXES)
PG_AM = _view(
    PG_CATALOG,
    "pg_am",
    f"SELECT {HEAP_AM_OID} AS oid, 'heap' AS amname, 0 AS amhandler, 't' AS amtype"
    f" UNION ALL SELECT {ARRANGEMENT_AM_OID}, 'arrangement', 0, 'i'",
)
PG_DESCRIPTION = _view(
    PG_CATALOG,
    "pg_description",
    _empty("objoid int4, classoid int4, objsubid int4, description text"),
)
PG_SHDESCRIPTION = _view(
    PG_CATALOG, "pg_shdescription", _empty("objoid int4, classoid int4, description text")
)
PG_CONSTRAINT = _view(
    PG_CATALOG,
    "pg_constraint",
    _empty(
        "oid int4, conname text, connamespace int4, contype text, condeferrable bool,"
        " condeferred bool, convalidated bool, conrelid int4, contypid int4, conindid int4,"
        " conparentid int4, confrelid int4, confupdtype text, confdeltype text,"
        " confmatchtype text, conislocal bool, coninhcount int4, connoinherit bool,"
        " conkey int2[], confkey int2[], conpfeqop int4[], conppeqop int4[],"
        " conffeqop int4[], confdelsetcols int2[], conexclop int4[], conbin text"
    ),
)
PG_INHERITS = _view(
    PG_CATALOG,
    "pg_inherits",
    _empty("inhrelid int4, inhparent int4, inhseqno int4, inhdetachpending bool"),
)
PG_ATTRDEF = _view(
    PG_CATALOG, "pg_attrdef", _empty("oid int4, adrelid int4, adnum int2, adbin text")
)
PG_DEPEND = _view(
    PG_CATALOG,
    "pg_depend",
    _empty(
        "classid int4, objid int4, objsubid int4, refclassid int4, refobjid int4,"
        " refobjsubid int4, deptype text"
    ),
)
PG_REWRITE = _view(
    PG_CATALOG,
    "pg_rewrite",
    _empty(
        "oid int4, rulename text, ev_class int4, ev_type text, ev_enabled text,"
        " is_instead bool, ev_qual text, ev_action text"
    ),
)
PG_EXTENSION = _view(
    PG_CATALOG,
    "pg_extension",
    _empty(
        "oid int4, extname text, extowner int4, extnamespace int4, extrelocatable bool,"
        " extversion text, extconfig int4[], extcondition text[]"
    ),
)
# Relations of things Loupe has none of that clients list (psql's \\dC, \\do, \\dy, \\dc,
# \\dT's enums, asyncpg's ranges): empty, with PostgreSQL's columns.
PG_CAST = _view(
    PG_CATALOG,
    "pg_cast",
    _empty(
        "oid int4, castsource int4, casttarget int4, castfunc int4, castcontext text,"
        " castmethod text"
    ),
)
PG_OPERATOR = _view(
    PG_CATALOG,
    "pg_operator",
    _empty(
        "oid int4, oprname text, oprnamespace int4, oprowner int4, oprkind text,"
        " oprcanmerge bool, oprcanhash bool, oprleft int4, oprright int4, oprresult int4,"
        " oprcom int4, oprnegate int4, oprcode int4, oprrest int4, oprjoin int4"
    ),
)
PG_EVENT_TRIGGER = _view(
    PG_CATALOG,
    "pg_event_trigger",
    _empty(
        "oid int4, evtname text, evtevent text, evtowner int4, evtfoid int4, evtenabled text,"
        " evttags text[]"
    ),
)
PG_CONVERSION = _view(
    PG_CATALOG,
    "pg_conversion",
    _empty(
        "oid int4, conname text, connamespace int4, conowner int4, conforencoding int4,"
        " contoencoding int4, conproc int4, condefault bool"
    ),
)
PG_ENUM = _view(
    PG_CATALOG,
    "pg_enum",
    _empty("oid int4, enumtypid int4, enumsortorder float4, enumlabel text"),
)
PG_RANGE = _view(
    PG_CATALOG,
    "pg_range",
    _empty(
        "rngtypid int4, rngsubtype int4, rngmultitypid int4, rngcollation int4,"
        " rngsubopc int4, rngcanonical int4, rngsubdiff int4"
    ),
)
PG_TABLESPACE = _view(
    PG_CATALOG,
    "pg_tablespace",
    f"SELECT {DEFAULT_TABLESPACE_OID} AS oid, 'pg_default' AS spcname,"
    f" {_SYSTEM_OWNER} AS spcowner, NULL::text[] AS spcacl, NULL::text[] AS spcoptions"
    f" UNION ALL SELECT {DEFAULT_TABLESPACE_OID + 1}, 'pg_global', {_SYSTEM_OWNER},"
    " NULL::text[], NULL::text[]",
)
PG_TRIGGER = _view(
    PG_CATALOG,
    "pg_trigger",
    _empty(
        "oid int4, tgrelid int4, tgparentid int4, tgname text, tgfoid int4, tgtype int2,"
        " tgenabled text, tgisinternal bool, tgconstrrelid int4, tgconstrindid int4,"
        " tgconstraint int4, tgdeferrable bool, tginitdeferred bool, tgnargs int2,"
        " tgattr int2[], tgargs text, tgqual text, tgoldtable text, tgnewtable text"
    ),
)
PG_POLICY = _view(
    PG_CATALOG,
    "pg_policy",
    _empty(
        "oid int4, polname text, polrelid int4, polcmd text, polpermissive bool,"
        " polroles int4[], polqual text, polwithcheck text"
    ),
)
PG_COLLATION = _view(
    PG_CATALOG,
    "pg_collation",
    f"""
SELECT {DEFAULT_COLLATION_OID} AS oid, 'default' AS collname, {PG_CATALOG_OID} AS collnamespace,
       {oid_of("'s1'")} AS collowner, 'd' AS collprovider, true AS collisdeterministic,
       -1 AS collencoding, NULL::text AS collcollate, NULL::text AS collctype,
       NULL::text AS colliculocale, NULL::text AS collversion
""",
)
PG_PROC = _view(
    PG_CATALOG,
    "pg_proc",
    _empty(
        "oid int4, proname text, pronamespace int4, proowner int4, prolang int4,"
        " procost float4, prorows float4, provariadic int4, prosupport int4, prokind text,"
        " prosecdef bool, proleakproof bool, proisstrict bool, proretset bool,"
        " provolatile text, proparallel text, pronargs int2, pronargdefaults int2,"
        " prorettype int4, proargtypes int4[], proallargtypes int4[], proargmodes text[],"
        " proargnames text[], proargdefaults text, protrftypes int4[], prosrc text,"
        " probin text, prosqlbody text, proconfig text[], proacl text[],"
        # PostgreSQL 9.5's, which psql's \\df asks a 9.5 server for (as relhasoids).
        " proisagg bool, proiswindow bool"
    ),
)
PG_TABLES = _view(
    PG_CATALOG,
    "pg_tables",
    f"""
SELECT r.schema_name AS schemaname, r.name AS tablename, r.owner_name AS tableowner,
       NULL::text AS tablespace,
       EXISTS (SELECT 1 FROM mz_catalog.mz_indexes AS x WHERE x.on_id = r.id) AS hasindexes,
       false AS hasrules, false AS hastriggers, false AS rowsecurity
FROM ({_NAMED_RELATIONS}) AS r
WHERE r.relkind = 'r'
""",
)
PG_VIEWS = _view(
    PG_CATALOG,
    "pg_views",
    """
SELECT s.name AS schemaname, v.name AS viewname, ro.name AS viewowner, v.definition
FROM mz_catalog.mz_views AS v
JOIN mz_catalog.mz_schemas AS s ON s.id = v.schema_id
LEFT JOIN mz_catalog.mz_roles AS ro ON ro.id = v.owner_id
""",
)
PG_MATVIEWS = _view(
    PG_CATALOG,
    "pg_matviews",
    """
SELECT s.name AS schemaname, v.name AS matviewname, ro.name AS matviewowner,
       NULL::text AS tablespace,
       EXISTS (SELECT 1 FROM mz_catalog.mz_indexes AS x WHERE x.on_id = v.id) AS hasindexes,
       true AS ispopulated, v.definition
FROM mz_catalog.mz_materialized_views AS v
JOIN mz_catalog.mz_schemas AS s ON s.id = v.schema_id
LEFT JOIN mz_catalog.mz_roles AS ro ON ro.id = v.owner_id
""",
)
PG_INDEXES = _view(
    PG_CATALOG,
    "pg_indexes",
    f"""
SELECT s.name AS schemaname, o.name AS tablename, i.name AS indexname,
       NULL::text AS tablespace, {index_definition("i.create_sql")} AS indexdef
FROM mz_catalog.mz_indexes AS i
JOIN mz_catalog.mz_objects AS o ON o.id = i.on_id
JOIN mz_catalog.mz_schemas AS s ON s.id = o.schema_id
""",
)
# The session's settings clients read (``SETTINGS``), each current_setting(name) folded
# when a query is planned (``loupe.coordinator.pg_functions``).
PG_SETTINGS = _view(
    PG_CATALOG,
    "pg_settings",
    """
SELECT s.name, s.setting, NULL::text AS unit, NULL::text AS category,
       NULL::text AS short_desc, NULL::text AS extra_desc, 'user' AS context,
       'string' AS vartype, 'default' AS source, NULL::text AS min_val, NULL::text AS max_val,
       NULL::text[] AS enumvals, NULL::text AS boot_val, NULL::text AS reset_val,
       NULL::text AS sourcefile, NULL::int4 AS sourceline, false AS pending_restart
FROM (VALUES {settings}) AS s(name, setting)
""",
)

# information_schema: PostgreSQL's definitions over the same relations.
IS_TABLES = _view(
    INFORMATION_SCHEMA,
    "tables",
    f"""
SELECT r.database_name AS table_catalog, r.schema_name AS table_schema,
       r.name AS table_name,
       CASE r.relkind WHEN 'r' THEN 'BASE TABLE' ELSE 'VIEW' END AS table_type,
       NULL::text AS self_referencing_column_name, NULL::text AS reference_generation,
       NULL::text AS user_defined_type_catalog, NULL::text AS user_defined_type_schema,
       NULL::text AS user_defined_type_name,
       CASE WHEN r.relkind = 'r' THEN 'YES' ELSE 'NO' END AS is_insertable_into,
       'NO' AS is_typed, NULL::text AS commit_action
FROM ({_NAMED_RELATIONS}) AS r
WHERE r.relkind IN ('r', 'v')  -- PostgreSQL's lists no materialized views
""",
)
IS_COLUMNS = _view(
    INFORMATION_SCHEMA,
    "columns",
    f"""
SELECT r.database_name AS table_catalog, r.schema_name AS table_schema,
       r.name AS table_name, c.name AS column_name, c.position::int4 AS ordinal_position,
       NULL::text AS column_default, CASE WHEN c.nullable THEN 'YES' ELSE 'NO' END AS is_nullable,
       c.type AS data_type, NULL::int4 AS character_maximum_length,
       NULL::int4 AS character_octet_length, NULL::int4 AS numeric_precision,
       NULL::int4 AS numeric_precision_radix, NULL::int4 AS numeric_scale,
       NULL::int4 AS datetime_precision, NULL::text AS interval_type,
       NULL::int4 AS interval_precision, NULL::text AS character_set_catalog,
       NULL::text AS character_set_schema, NULL::text AS character_set_name,
       NULL::text AS collation_catalog, NULL::text AS collation_schema,
       NULL::text AS collation_name, NULL::text AS domain_catalog,
       NULL::text AS domain_schema, NULL::text AS domain_name,
       r.database_name AS udt_catalog, '{PG_CATALOG}' AS udt_schema,
       t.typname AS udt_name, NULL::text AS scope_catalog, NULL::text AS scope_schema,
       NULL::text AS scope_name, NULL::int4 AS maximum_cardinality,
       c.position::text AS dtd_identifier, 'NO' AS is_self_referencing, 'NO' AS is_identity,
       NULL::text AS identity_generation, NULL::text AS identity_start,
       NULL::text AS identity_increment, NULL::text AS identity_maximum,
       NULL::text AS identity_minimum, 'NO' AS identity_cycle, 'NEVER' AS is_generated,
       NULL::text AS generation_expression,
       CASE WHEN r.relkind = 'r' THEN 'YES' ELSE 'NO' END AS is_updatable
FROM ({_NAMED_RELATIONS}) AS r
JOIN mz_catalog.mz_columns AS c ON c.id = r.id
LEFT JOIN pg_catalog.pg_type AS t ON t.oid = {type_oid_of("c.type")}
WHERE r.relkind IN ('r', 'v')  -- PostgreSQL's lists no materialized views
""",
)
IS_SCHEMATA = _view(
    INFORMATION_SCHEMA,
    "schemata",
    """
SELECT d.name AS catalog_name, s.name AS schema_name, ro.name AS schema_owner,
       NULL::text AS default_character_set_catalog, NULL::text AS default_character_set_schema,
       NULL::text AS default_character_set_name, NULL::text AS sql_path
FROM mz_catalog.mz_schemas AS s
LEFT JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id
LEFT JOIN mz_catalog.mz_roles AS ro ON ro.id = s.owner_id
""",
)
IS_VIEWS = _view(
    INFORMATION_SCHEMA,
    "views",
    """
SELECT d.name AS table_catalog, s.name AS table_schema, v.name AS table_name,
       v.definition AS view_definition, 'NONE' AS check_option, 'NO' AS is_updatable,
       'NO' AS is_insertable_into, 'NO' AS is_trigger_updatable,
       'NO' AS is_trigger_deletable, 'NO' AS is_trigger_insertable_into
FROM mz_catalog.mz_views AS v
JOIN mz_catalog.mz_schemas AS s ON s.id = v.schema_id
LEFT JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id
""",
)

# Settings pg_settings lists (session variables clients commonly read).
SETTINGS = (
    "application_name",
    "client_encoding",
    "cluster",
    "DateStyle",
    "integer_datetimes",
    "is_superuser",
    "search_path",
    "server_version",
    "server_version_num",
    "standard_conforming_strings",
    "statement_timeout",
    "TimeZone",
    "transaction_isolation",
)
PG_SETTINGS = _view(
    PG_CATALOG,
    "pg_settings",
    PG_SETTINGS.sql.replace(
        "{settings}",
        ", ".join(f"({_quote(n.lower())}, current_setting({_quote(n.lower())}))" for n in SETTINGS),
    ),
)

VIEWS: dict[str, BuiltinView] = {
    v.qualified_name: v
    for v in (
        PG_NAMESPACE,
        PG_CLASS,
        PG_ATTRIBUTE,
        PG_TYPE,
        PG_DATABASE,
        PG_ROLES,
        PG_AUTHID,
        PG_USER,
        PG_AUTH_MEMBERS,
        PG_INDEX,
        PG_AM,
        PG_DESCRIPTION,
        PG_SHDESCRIPTION,
        PG_CONSTRAINT,
        PG_INHERITS,
        PG_ATTRDEF,
        PG_DEPEND,
        PG_REWRITE,
        PG_TABLESPACE,
        PG_EXTENSION,
        PG_CAST,
        PG_OPERATOR,
        PG_EVENT_TRIGGER,
        PG_CONVERSION,
        PG_ENUM,
        PG_RANGE,
        PG_TRIGGER,
        PG_POLICY,
        PG_COLLATION,
        PG_PROC,
        PG_SETTINGS,
        PG_TABLES,
        PG_VIEWS,
        PG_MATVIEWS,
        PG_INDEXES,
        IS_TABLES,
        IS_COLUMNS,
        IS_SCHEMATA,
        IS_VIEWS,
    )
}
