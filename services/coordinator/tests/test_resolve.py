"""Name resolution: table references bound to builtin collections and rewritten."""

from __future__ import annotations

import pytest
import sqlglot

from loupe.common.errors import LoupeError
from loupe.coordinator.sql import parse_one, resolve_query
from loupe.coordinator.sql.resolve import output_name, search_path_schemas
from loupe.coordinator.sql.statements import Query


def resolve(sql: str, **kwargs: object):
    statement = parse_one(sql)
    assert isinstance(statement, Query)
    return resolve_query(statement.expression, **kwargs)  # type: ignore[arg-type]


def test_qualified_name_becomes_the_source_aliased_to_the_original_name() -> None:
    """mz_catalog.mz_clusters reads source s101, still addressable as mz_clusters."""
    resolved = resolve("SELECT mz_clusters.name FROM mz_catalog.mz_clusters")
    assert [s.qualified_name for s in resolved.sources] == ["mz_catalog.mz_clusters"]
    assert resolved.sql == 'SELECT mz_clusters.name FROM s101 AS "mz_clusters"'


def test_user_aliases_are_kept_and_joins_resolve_each_table() -> None:
    """Aliases survive; every joined relation becomes a source, each once."""
    resolved = resolve(
        "SELECT r.name, s.status FROM mz_internal.mz_cluster_replica_statuses s "
        "JOIN mz_catalog.mz_cluster_replicas r ON r.id = s.replica_id "
        "WHERE r.cluster_id IN (SELECT id FROM mz_cluster_replicas)"
    )
    assert [s.id for s in resolved.sources] == ["s201", "s102"]
    assert 'FROM s201 AS "s" JOIN s102 AS "r"' in resolved.sql
    assert 'SELECT id FROM s102 AS "mz_cluster_replicas"' in resolved.sql


def test_unqualified_names_resolve_through_mz_catalog_then_the_search_path() -> None:
    """mz_catalog is searched first; mz_internal only when on the search path."""
    assert resolve("SELECT * FROM MZ_CLUSTERS").sources[0].id == "s101"
    with pytest.raises(LoupeError) as caught:
        resolve("SELECT * FROM mz_cluster_replica_statuses")
    assert caught.value.code == "42P01"
    found = resolve(
        "SELECT * FROM mz_cluster_replica_statuses", search_path=["public", "mz_internal"]
    )
    assert found.sources[0].id == "s201"


@pytest.mark.parametrize(
    ("sql", "written"),
    [
        ("SELECT * FROM nope", "nope"),
        (
            "SELECT 1 FROM mz_catalog.mz_clusters c JOIN   mz_internal.nope n ON true",
            "mz_internal.nope",
        ),
        ("SELECT * FROM other_db.mz_catalog.mz_clusters", "other_db.mz_catalog.mz_clusters"),
    ],
)
def test_unknown_relation_is_42P01_at_the_name(sql: str, written: str) -> None:
    """Unknown names say which and point at where the name starts."""
    with pytest.raises(LoupeError) as caught:
        resolve(sql)
    assert caught.value.code == "42P01"
    assert caught.value.message == f"unknown catalog item '{written}'"
    assert caught.value.position == sql.index(written) + 1


def test_schema_qualified_columns_refer_to_the_alias() -> None:
    """mz_catalog.mz_clusters.name works after the rewrite."""
    resolved = resolve("SELECT mz_catalog.mz_clusters.name FROM mz_catalog.mz_clusters")
    assert resolved.sql.startswith("SELECT mz_clusters.name FROM s101")


def test_cte_names_are_not_catalog_items() -> None:
    """A WITH name is the query's own; a query reading only CTEs of constants is constant."""
    resolved = resolve("WITH x AS (SELECT 1 AS a) SELECT a FROM x")
    assert resolved.is_constant
    assert resolved.sources == ()


def test_select_without_from_is_constant_with_postgres_column_names() -> None:
    """SELECT 1 reads nothing; unnamed columns are ?column?, calls take the function's name."""
    resolved = resolve("SELECT 1, 2 AS two, upper('a'), 3")
    assert resolved.is_constant
    assert resolved.output_names == ("?column?", "two", "upper", "?column?")
    # The engine gets unique names; the client sees PostgreSQL's.
    assert '"?column?_0"' in resolved.sql
    assert '"?column?_3"' in resolved.sql


def test_star_keeps_the_engine_names() -> None:
    """With * in the projection the columns are the relation's own."""
    assert resolve("SELECT * FROM mz_clusters").output_names is None


@pytest.mark.parametrize(
    ("projection", "name"),
    [
        ("a", "a"),
        ("a AS b", "b"),
        ("count(*)", "count"),
        ("1 + 1", "?column?"),
        ("CAST(a AS TEXT)", "a"),
        ("CASE WHEN a THEN 1 END", "case"),
        ("(a)", "a"),
    ],
)
def test_output_names(projection: str, name: str) -> None:
    """Column names follow PostgreSQL's rules."""
    expression = sqlglot.parse_one(f"SELECT {projection}", dialect="postgres")
    assert output_name(expression.expressions[0]) == name


def test_search_path_schemas() -> None:
    """search_path values split on commas, quoted names keep their case."""
    assert search_path_schemas('public, "My Schema", MZ_INTERNAL') == [
        "public",
        "My Schema",
        "mz_internal",
    ]
