"""``SHOW`` statements that list catalog objects, as SELECTs over ``mz_catalog`` (as Materialize).

Each form becomes one query over the catalog relations, run like any SELECT,
with Materialize's output columns:

| statement | columns |
|---|---|
| ``SHOW TABLES | VIEWS [FROM schema]`` | name |
| ``SHOW MATERIALIZED VIEWS [FROM schema]`` | name, cluster |
| ``SHOW INDEXES [ON obj] [FROM schema]`` | name, on, cluster |
| ``SHOW SOURCES [FROM schema]`` | name, type |
| ``SHOW OBJECTS [FROM schema]`` | name, type |
| ``SHOW DATABASES``, ``SHOW SCHEMAS [FROM database]`` | name |
| ``SHOW COLUMNS FROM obj`` | name, nullable, type |
| ``SHOW CREATE TABLE | VIEW | MATERIALIZED VIEW | INDEX | SOURCE obj`` | name, create_sql |
| ``SHOW CREATE CLUSTER c`` (built from the catalog, ``sequencer/show.py``) | name, create_sql |

Without ``FROM``, objects are those of the session's current schema (the
first schema of ``search_path`` that exists) in its database.
"""

from __future__ import annotations

from loupe.coordinator.sql.statements import ShowObjects


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_IN_SCHEMA = """JOIN mz_catalog.mz_schemas AS s ON s.id = {alias}.schema_id
JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id
WHERE s.name = {schema} AND d.name = {database}"""

_LISTS = {
    "TABLES": "SELECT o.name FROM mz_catalog.mz_tables AS o {scope} ORDER BY o.name",
    "VIEWS": "SELECT o.name FROM mz_catalog.mz_views AS o {scope} ORDER BY o.name",
    "MATERIALIZED VIEWS": """SELECT o.name, c.name AS "cluster"
FROM mz_catalog.mz_materialized_views AS o
LEFT JOIN mz_catalog.mz_clusters AS c ON c.id = o.cluster_id {scope} ORDER BY o.name""",
    "SOURCES": "SELECT o.name, o.type FROM mz_catalog.mz_sources AS o {scope} ORDER BY o.name",
    "OBJECTS": """SELECT o.name, o.type FROM mz_catalog.mz_objects AS o {scope}
AND o.type <> 'index' ORDER BY o.name""",
}


def show_sql(
    statement: ShowObjects, *, database: str, schema: str, target_id: str | None = None
) -> str:
    """The SELECT ``statement`` stands for (``target_id``: its resolved ``target``)."""
    kind = statement.kind
    if kind == "DATABASES":
        return "SELECT name FROM mz_catalog.mz_databases ORDER BY name"
    if kind == "SCHEMAS":
        owner = statement.source.parts[-1] if statement.source is not None else database
        return (
            "SELECT s.name FROM mz_catalog.mz_schemas AS s"
            " JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id"
            f" WHERE d.name = {quote_literal(owner)} ORDER BY s.name"
        )
    if statement.source is not None:
        parts = statement.source.parts
        schema = parts[-1]
        database = parts[0] if len(parts) > 1 else database
    if kind == "COLUMNS":
        return (
            "SELECT name, nullable, type FROM mz_catalog.mz_columns"
            f" WHERE id = {quote_literal(target_id or '')} ORDER BY position"
        )
    if kind.startswith("CREATE "):
        relation = {
            "CREATE TABLE": "mz_tables",
            "CREATE VIEW": "mz_views",
            "CREATE MATERIALIZED VIEW": "mz_materialized_views",
            "CREATE INDEX": "mz_indexes",
            "CREATE SOURCE": "mz_sources",
        }[kind]
        return (
            f"SELECT {quote_literal(str(statement.target))} AS name, create_sql"
            f" FROM mz_catalog.{relation} WHERE id = {quote_literal(target_id or '')}"
        )
    if kind == "INDEXES":
        where = (
            f"i.on_id = {quote_literal(target_id)}"
            if target_id is not None
            else f"s.name = {quote_literal(schema)} AND d.name = {quote_literal(database)}"
        )
        return f"""SELECT i.name, o.name AS "on", c.name AS "cluster"
FROM mz_catalog.mz_indexes AS i
JOIN mz_catalog.mz_objects AS o ON o.id = i.on_id
JOIN mz_catalog.mz_schemas AS s ON s.id = o.schema_id
JOIN mz_catalog.mz_databases AS d ON d.id = s.database_id
LEFT JOIN mz_catalog.mz_clusters AS c ON c.id = i.cluster_id
WHERE {where} ORDER BY i.name"""
    scope = _IN_SCHEMA.format(
        alias="o", schema=quote_literal(schema), database=quote_literal(database)
    )
    return _LISTS[kind].format(scope=scope)


def builtin_columns_sql(relation: object) -> str:
    """``SHOW COLUMNS`` of a system relation, from its definition (builtins have no catalog rows)."""
    columns = getattr(relation, "columns", ())
    rows = ", ".join(
        f"({quote_literal(name)}, true, {quote_literal(kind)})" for name, kind in columns
    )
    if not rows:
        return "SELECT NULL::text AS name, NULL::bool AS nullable, NULL::text AS type WHERE false"
    return f"SELECT * FROM (VALUES {rows}) AS c(name, nullable, type)"
