"""Loupe's SQL parser: cluster DDL, session commands, queries and their errors."""

from __future__ import annotations

import pytest
from sqlglot import exp

from loupe.common.errors import LoupeError
from loupe.coordinator.sql import parse, parse_interval_ns, parse_one
from loupe.coordinator.sql.statements import (
    AlterCluster,
    Close,
    Commit,
    CreateCluster,
    CreateClusterReplica,
    CreateIndex,
    CreateSource,
    CreateTable,
    CreateView,
    Declare,
    Delete,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    Explain,
    Fetch,
    Insert,
    Query,
    ReplicaSpec,
    ResetVariable,
    Rollback,
    SetVariable,
    ShowClusterReplicas,
    ShowClusters,
    ShowVariable,
    StartTransaction,
    Subscribe,
    Update,
)


def error_of(sql: str) -> LoupeError:
    with pytest.raises(LoupeError) as caught:
        parse(sql)
    return caught.value


def test_alter_cluster_sets_and_resets_the_introspection_options() -> None:
    altered = parse_one("ALTER CLUSTER c SET (INTROSPECTION INTERVAL = '100ms')")
    assert isinstance(altered, AlterCluster)
    assert (altered.name, altered.introspection_interval_ns) == ("c", 100_000_000)
    assert altered.introspection_debugging is None
    assert altered.tag == "ALTER CLUSTER"
    both = parse_one("ALTER CLUSTER c SET (INTROSPECTION INTERVAL 0, INTROSPECTION DEBUGGING)")
    assert (both.introspection_interval_ns, both.introspection_debugging) == (0, True)  # type: ignore[attr-defined]
    reset = parse_one("ALTER CLUSTER c RESET (INTROSPECTION DEBUGGING, INTROSPECTION INTERVAL)")
    assert (reset.introspection_interval_ns, reset.introspection_debugging) == (  # type: ignore[attr-defined]
        1_000_000_000,
        False,
    )
    twice = error_of("ALTER CLUSTER c SET (INTROSPECTION DEBUGGING, INTROSPECTION DEBUGGING)")
    assert "INTROSPECTION DEBUGGING given twice" in twice.message


def test_drop_cluster_replica_takes_cascade() -> None:
    dropped = parse_one("DROP CLUSTER REPLICA c.r1 CASCADE")
    assert isinstance(dropped, DropClusterReplica)
    assert dropped.cascade
    plain = parse_one("DROP CLUSTER REPLICA IF EXISTS c.r1 RESTRICT")
    assert isinstance(plain, DropClusterReplica)
    assert (plain.cascade, plain.if_exists) == (False, True)


def test_create_managed_cluster_reads_size_and_replication_factor() -> None:
    """CREATE CLUSTER c (SIZE 'n', REPLICATION FACTOR k) is a managed cluster."""
    statement = parse_one("CREATE CLUSTER c (SIZE '2', REPLICATION FACTOR 3)")
    assert isinstance(statement, CreateCluster)
    assert (statement.name, statement.managed, statement.size, statement.replication_factor) == (
        "c",
        True,
        "2",
        3,
    )
    assert statement.introspection_interval_ns == 1_000_000_000
    assert statement.introspection_debugging is False
    assert statement.tag == "CREATE CLUSTER"


def test_create_cluster_options_in_any_order_with_optional_equals() -> None:
    """Options may come in any order, with or without '='."""
    statement = parse_one(
        "create cluster Prod (replication factor = 2, INTROSPECTION DEBUGGING = true, "
        "INTROSPECTION INTERVAL '100ms', size = '4')"
    )
    assert isinstance(statement, CreateCluster)
    assert statement.name == "prod"
    assert statement.size == "4"
    assert statement.replication_factor == 2
    assert statement.introspection_debugging is True
    assert statement.introspection_interval_ns == 100_000_000


def test_replication_factor_defaults_to_one_and_interval_zero_disables() -> None:
    """REPLICATION FACTOR defaults to 1; INTROSPECTION INTERVAL 0 turns introspection off."""
    statement = parse_one("CREATE CLUSTER c (SIZE '1', INTROSPECTION INTERVAL 0)")
    assert isinstance(statement, CreateCluster)
    assert statement.replication_factor == 1
    assert statement.introspection_interval_ns == 0


def test_create_cluster_with_replicas_is_unmanaged() -> None:
    """CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE '2')) lists its replicas."""
    sql = "CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r2 (SIZE = '2'))"
    statement = parse_one(sql)
    assert isinstance(statement, CreateCluster)
    assert statement.managed is False
    assert [(r.name, r.size) for r in statement.replicas] == [("r1", "1"), ("r2", "2")]
    assert statement.replicas[1] == ReplicaSpec(name="r2", size="2", position=sql.index("r2") + 1)


def test_create_cluster_replicas_inside_the_option_list() -> None:
    """REPLICAS may also be one of the parenthesised options."""
    statement = parse_one("CREATE CLUSTER c (INTROSPECTION INTERVAL '2s', REPLICAS (a (SIZE '1')))")
    assert isinstance(statement, CreateCluster)
    assert statement.managed is False
    assert [r.name for r in statement.replicas] == ["a"]
    assert statement.introspection_interval_ns == 2_000_000_000


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE CLUSTER REPLICA c.r SIZE '2'",
        "CREATE CLUSTER REPLICA c.r SIZE = '2'",
        "CREATE CLUSTER REPLICA c.r (SIZE '2')",
    ],
)
def test_create_cluster_replica_forms(sql: str) -> None:
    """CREATE CLUSTER REPLICA c.r takes SIZE with or without '=' or parentheses."""
    statement = parse_one(sql)
    assert statement == CreateClusterReplica(text=sql, offset=0, cluster="c", replica="r", size="2")
    assert statement.tag == "CREATE CLUSTER REPLICA"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("DROP CLUSTER c", ("c", False, False)),
        ("DROP CLUSTER IF EXISTS c", ("c", True, False)),
        ("DROP CLUSTER c CASCADE", ("c", False, True)),
        ("DROP CLUSTER IF EXISTS c RESTRICT", ("c", True, False)),
    ],
)
def test_drop_cluster_forms(sql: str, expected: tuple[str, bool, bool]) -> None:
    """DROP CLUSTER [IF EXISTS] c [CASCADE|RESTRICT]."""
    statement = parse_one(sql)
    assert isinstance(statement, DropCluster)
    assert (statement.name, statement.if_exists, statement.cascade) == expected


def test_drop_cluster_replica_forms() -> None:
    """DROP CLUSTER REPLICA [IF EXISTS] c.r."""
    plain = parse_one("DROP CLUSTER REPLICA c.r1")
    guarded = parse_one('DROP CLUSTER REPLICA IF EXISTS "C".r2')
    assert isinstance(plain, DropClusterReplica)
    assert isinstance(guarded, DropClusterReplica)
    assert (plain.cluster, plain.replica, plain.if_exists) == ("c", "r1", False)
    assert (guarded.cluster, guarded.replica, guarded.if_exists) == ("C", "r2", True)


def test_show_statements() -> None:
    """SHOW CLUSTERS, SHOW CLUSTER REPLICAS and SHOW <variable>."""
    clusters, replicas, variable, everything = parse(
        "SHOW CLUSTERS; SHOW CLUSTER REPLICAS; SHOW cluster; SHOW ALL"
    )
    assert isinstance(clusters, ShowClusters)
    assert isinstance(replicas, ShowClusterReplicas)
    assert isinstance(variable, ShowVariable)
    assert variable.name == "cluster"
    assert isinstance(everything, ShowVariable)
    assert everything.name == "all"


@pytest.mark.parametrize(
    ("sql", "name", "value"),
    [
        ("SET cluster = c", "cluster", "c"),
        ("SET cluster TO 'My Cluster'", "cluster", "My Cluster"),
        ("SET SESSION cluster_replica = r1", "cluster_replica", "r1"),
        ("SET search_path TO public, mz_internal", "search_path", "public, mz_internal"),
        ("SET cluster = DEFAULT", "cluster", None),
        ("SET application_name = 42", "application_name", "42"),
    ],
)
def test_set_forms(sql: str, name: str, value: str | None) -> None:
    """SET name [=|TO] value (DEFAULT resets)."""
    statement = parse_one(sql)
    assert isinstance(statement, SetVariable)
    assert (statement.name, statement.value) == (name, value)


def test_reset() -> None:
    """RESET name."""
    statement = parse_one("RESET cluster")
    assert isinstance(statement, ResetVariable)
    assert statement.name == "cluster"


def test_statements_run_in_order_with_their_offsets() -> None:
    """A request splits at ';' and each statement knows where it starts."""
    sql = "SET cluster = c;\n  SELECT 1 ;; SHOW cluster;"
    statements = parse(sql)
    assert [type(s) for s in statements] == [SetVariable, Query, ShowVariable]
    assert [s.text for s in statements] == ["SET cluster = c", "SELECT 1", "SHOW cluster"]
    assert [sql[s.offset :].startswith(s.text) for s in statements] == [True, True, True]


def test_queries_go_to_sqlglot() -> None:
    """SELECT, set operations and CTEs are queries."""
    for sql in ["SELECT 1", "SELECT 1 UNION SELECT 2", "WITH x AS (SELECT 1) SELECT * FROM x"]:
        assert isinstance(parse_one(sql), Query)


def test_empty_request_has_no_statements() -> None:
    """Only whitespace, comments and semicolons: nothing to run."""
    assert parse("  ;; -- nothing\n") == []


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER CLUSTER c SET (SIZE '2')", "ALTER CLUSTER SIZE is not supported"),
        ("CREATE SINK k FROM t INTO x", "CREATE SINK is not supported"),
        ("TRUNCATE t", "TRUNCATE is not supported"),
        ("SHOW SINKS", "SHOW SINKS is not supported"),
        (
            "CREATE SOURCE s FROM x",
            "CREATE SOURCE other than FROM LOAD GENERATOR is not supported",
        ),
        ("VALUES (1)", "VALUES is not supported"),
        (
            "CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT 1",
            "CREATE OR REPLACE is not supported",
        ),
        ("SAVEPOINT s", "SAVEPOINT is not supported"),
    ],
)
def test_what_sqlglot_cannot_run_is_refused(sql: str, message: str) -> None:
    """Statements sqlglot turns into Command (or Loupe does not run) are 0A000, not silently run."""
    error = error_of(f"SELECT 1; {sql}")
    assert (error.code, error.message, error.position) == ("0A000", message, 11)


@pytest.mark.parametrize(
    ("sql", "stage", "node_ids"),
    [
        ("EXPLAIN SELECT a FROM t", "optimized", False),
        ("EXPLAIN OPTIMIZED PLAN FOR SELECT a FROM t", "optimized", False),
        ("explain plan for select a from t", "optimized", False),
        ("EXPLAIN PHYSICAL PLAN FOR SELECT a FROM t", "physical", False),
        ("EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR SELECT a FROM t", "physical", True),
        (
            "EXPLAIN OPTIMIZED PLAN WITH (node_ids = false) AS TEXT FOR SELECT a FROM t",
            "optimized",
            False,
        ),
        ("EXPLAIN PHYSICAL PLAN WITH (NODE IDENTIFIERS) FOR (SELECT a FROM t)", "physical", True),
    ],
)
def test_explain_forms(sql: str, stage: str, node_ids: bool) -> None:
    """EXPLAIN's stage and node_ids flag, with the inner query parsed by sqlglot."""
    statement = parse_one(sql)
    assert isinstance(statement, Explain)
    assert (statement.stage, statement.node_ids, statement.tag) == (stage, node_ids, "EXPLAIN")
    table = statement.query.expression.find(exp.Table)
    assert table is not None
    assert table.name == "t"


def test_explain_after_another_statement_keeps_its_offset() -> None:
    first, second = parse("SELECT 1; EXPLAIN SELECT 2")
    assert isinstance(first, Query)
    assert isinstance(second, Explain)
    assert (second.text, second.position, second.query.position) == ("EXPLAIN SELECT 2", 11, 19)


@pytest.mark.parametrize(
    ("sql", "code", "message", "position"),
    [
        ("EXPLAIN RAW PLAN FOR SELECT 1", "0A000", "EXPLAIN RAW PLAN is not supported", 9),
        (
            "EXPLAIN PLAN WITH (arity) FOR SELECT 1",
            "0A000",
            "EXPLAIN option arity is not supported",
            20,
        ),
        ("EXPLAIN PLAN AS JSON FOR SELECT 1", "0A000", "EXPLAIN … AS JSON is not supported", 14),
        ("EXPLAIN SELECT 1 AS OF 5", "0A000", "EXPLAIN … AS OF is not supported", 18),
        ("EXPLAIN INSERT INTO t VALUES (1)", "0A000", "INSERT is not supported", 9),
        ("EXPLAIN PLAN SELECT 1", "42601", 'Expected FOR, found "SELECT"', 14),
        ("EXPLAIN PLAN FOR", "42601", "Expected a query, found end of input", 17),
        (
            "EXPLAIN PLAN WITH (node_ids on FOR SELECT 1",
            "42601",
            'Expected , or ), found "FOR"',
            32,
        ),
    ],
)
def test_explain_errors(sql: str, code: str, message: str, position: int) -> None:
    error = error_of(sql)
    assert (error.code, error.message, error.position) == (code, message, position)


def test_syntax_error_in_query_points_at_the_token() -> None:
    """A sqlglot parse error is 42601 with the 1-based position of the offending token."""
    error = error_of("SELECT 1;\nSELECT a FROM b WHERE c = = 1")
    assert error.code == "42601"
    assert error.position == "SELECT 1;\nSELECT a FROM b WHERE c = = 1".index("= 1") + 1
    assert "syntax error" in error.message


def test_unterminated_string_points_at_its_start() -> None:
    """An unterminated quote is reported where it opens."""
    error = error_of("SELECT 'abc")
    assert (error.code, error.position, error.message) == ("42601", 8, "unterminated quoted string")


@pytest.mark.parametrize(
    ("sql", "code", "position", "fragment"),
    [
        ("CREATE CLUSTER c (SIZE '1', COLOR 'red')", "42601", 29, 'found "COLOR"'),
        ("CREATE CLUSTER c (SIZE '1', SIZE '2')", "42601", 29, "SIZE specified more than once"),
        ("CREATE CLUSTER c (SIZE '1'", "42601", 27, "found end of input"),
        ("CREATE CLUSTER (SIZE '1')", "42601", 16, "cluster name"),
        ("CREATE CLUSTER c (REPLICATION FACTOR 2)", "22023", 1, "SIZE option must be specified"),
        ("CREATE CLUSTER c (SIZE '1', REPLICATION FACTOR 'x')", "22023", 48, "REPLICATION FACTOR"),
        ("CREATE CLUSTER c (SIZE '1', INTROSPECTION INTERVAL 'soon')", "22023", 52, "INTERVAL"),
        ("CREATE CLUSTER c (SIZE '1', INTROSPECTION DEBUGGING = maybe)", "22023", 55, "boolean"),
        ("CREATE CLUSTER c REPLICAS (r1 (SIZE '1'), r1 (SIZE '2'))", "42710", 43, "r1"),
        ("CREATE CLUSTER c (SIZE '1', REPLICAS (r1 (SIZE '1')))", "22023", 19, "unmanaged"),
        ("CREATE CLUSTER c (MANAGED, SIZE '1', REPLICAS (r (SIZE '1')))", "22023", 38, "managed"),
        ("CREATE CLUSTER REPLICA c SIZE '1'", "42601", 26, "Expected ."),
        ("DROP CLUSTER c d", "42601", 16, "end of statement"),
        ("SET cluster", "42601", 12, "= or TO"),
    ],
)
def test_ddl_errors_have_codes_and_positions(
    sql: str, code: str, position: int, fragment: str
) -> None:
    """Loupe's own parser reports what it expected and where."""
    error = error_of(sql)
    assert (error.code, error.position) == (code, position), error
    assert fragment in error.message


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("1s", 1_000_000_000),
        ("100ms", 100_000_000),
        ("0", 0),
        ("1 minute 30 seconds", 90_000_000_000),
        ("1.5s", 1_500_000_000),
        ("250us", 250_000),
    ],
)
def test_parse_interval(text: str, nanoseconds: int) -> None:
    """Introspection intervals accept the usual units."""
    assert parse_interval_ns(text) == nanoseconds


def test_parse_interval_rejects_nonsense() -> None:
    """An interval with an unknown unit is an error."""
    with pytest.raises(ValueError):
        parse_interval_ns("3 fortnights")


def test_create_table_reads_types_as_postgresql_spells_them() -> None:
    """Column types are canonicalised (int -> integer, varchar(5) -> character varying(5))."""
    statement = parse_one(
        "CREATE TABLE IF NOT EXISTS public.t (a int NOT NULL, b varchar(5), c double precision,"
        " d timestamp with time zone, e timestamp, f numeric(10, 2), g bool, h bigint, i date)"
    )
    assert isinstance(statement, CreateTable)
    assert statement.if_not_exists
    assert statement.name.parts == ("public", "t")
    assert [(c.name, c.type, c.nullable) for c in statement.columns] == [
        ("a", "integer", False),
        ("b", "character varying(5)", True),
        ("c", "double precision", True),
        ("d", "timestamp with time zone", True),
        ("e", "timestamp without time zone", True),
        ("f", "numeric(10,2)", True),
        ("g", "boolean", True),
        ("h", "bigint", True),
        ("i", "date", True),
    ]


@pytest.mark.parametrize(
    ("sql", "code", "position"),
    [
        ("CREATE TABLE t (a pizza)", "42704", 19),
        ("CREATE TABLE t (a int, a text)", "42701", 24),
        ("CREATE TABLE t (a int REFERENCES u)", "0A000", 23),
        ("CREATE TABLE t (a int, CHECK (a > 0))", "0A000", 24),
        ("CREATE TABLE t (a int PRIMARY KEY, b int PRIMARY KEY)", "42P16", 42),
        ("CREATE TABLE t (a int, PRIMARY KEY (b))", "42703", 24),
        ("CREATE TABLE t (a numeric(50))", "22023", 19),
        ("INSERT INTO t VALUES (1) RETURNING a", "0A000", 1),
        ("UPDATE t SET a = 1 FROM u", "0A000", 1),
        ("DELETE FROM t USING u", "0A000", 1),
    ],
)
def test_table_statement_errors(sql: str, code: str, position: int) -> None:
    """What Loupe cannot store or run is refused with a code and a position."""
    error = error_of(sql)
    assert (error.code, error.position) == (code, position)


def test_keys_and_defaults_are_parsed_and_named_as_postgresql_names_them() -> None:
    """PRIMARY KEY columns become NOT NULL; unnamed keys are t_pkey and t_<cols>_key."""
    statement = parse_one(
        "CREATE TABLE t (a int PRIMARY KEY, b text UNIQUE DEFAULT ('x' || 'y'),"
        " c int DEFAULT -1 NOT NULL, CONSTRAINT bc UNIQUE (b, c))"
    )
    assert isinstance(statement, CreateTable)
    assert [(c.name, c.nullable, c.default) for c in statement.columns] == [
        ("a", False, None),
        ("b", True, "('x' || 'y')"),
        ("c", False, "-1"),
    ]
    assert [(k.name, k.columns, k.primary) for k in statement.keys] == [
        ("t_pkey", ("a",), True),
        ("t_b_key", ("b",), False),
        ("bc", ("b", "c"), False),
    ]


def test_dml_statements_keep_targets_and_expressions() -> None:
    """INSERT, UPDATE and DELETE name their table (folded like identifiers) and columns."""
    insert = parse_one('INSERT INTO Materialize.Public."T" (A, "B") VALUES (1, \'x\'), (2, NULL)')
    assert isinstance(insert, Insert)
    assert insert.table.parts == ("materialize", "public", "T")
    assert [name for name, _ in insert.columns or ()] == ["a", "B"]
    assert len(insert.rows) == 2
    update = parse_one("UPDATE t AS x SET a = a + 1 WHERE b")
    assert isinstance(update, Update)
    assert (update.alias, [a for a, _, _ in update.assignments]) == ("x", ["a"])
    delete = parse_one("DELETE FROM t")
    assert isinstance(delete, Delete)
    assert delete.where is None


def test_as_of_is_split_off_a_query() -> None:
    """A trailing AS OF is the query's timestamp; an alias called "of" is not."""
    query = parse_one("SELECT * FROM t WHERE a IN (SELECT 1 AS of) AS OF 1712345678901")
    assert isinstance(query, Query)
    assert query.as_of is not None
    assert query.as_of.sql() == "1712345678901"
    assert query.as_of_position == len("SELECT * FROM t WHERE a IN (SELECT 1 AS of) ") + 1
    aliased = parse_one("SELECT a AS of FROM t")
    assert isinstance(aliased, Query)
    assert aliased.as_of is None


# -- views, indexes, sources, SUBSCRIBE -------------------------------------------------


def test_create_view_keeps_its_query() -> None:
    statement = parse_one("CREATE VIEW public.v AS SELECT a FROM t WHERE a > 1")
    assert isinstance(statement, CreateView)
    assert (statement.name.parts, statement.materialized, statement.tag) == (
        ("public", "v"),
        False,
        "CREATE VIEW",
    )
    assert statement.query.expression.sql() == "SELECT a FROM t WHERE a > 1"


def test_create_materialized_view_in_cluster() -> None:
    statement = parse_one("CREATE MATERIALIZED VIEW IF NOT EXISTS mv IN CLUSTER c AS SELECT 1")
    assert isinstance(statement, CreateView)
    assert (statement.materialized, statement.cluster, statement.if_not_exists) == (True, "c", True)
    assert statement.tag == "CREATE MATERIALIZED VIEW"


@pytest.mark.parametrize(
    ("sql", "name", "on", "columns", "cluster"),
    [
        ("CREATE INDEX i ON t (a, b)", "i", ("t",), ("a", "b"), ""),
        ("CREATE INDEX IN CLUSTER c ON s.t (a)", "", ("s", "t"), ("a",), "c"),
        ("CREATE DEFAULT INDEX ON t", "", ("t",), (), ""),
        ("CREATE DEFAULT INDEX IN CLUSTER c ON t", "", ("t",), (), "c"),
    ],
)
def test_create_index_forms(
    sql: str, name: str, on: tuple[str, ...], columns: tuple[str, ...], cluster: str
) -> None:
    statement = parse_one(sql)
    assert isinstance(statement, CreateIndex)
    assert (statement.name, statement.on.parts, statement.cluster) == (name, on, cluster)
    assert tuple(c for c, _ in statement.columns) == columns


@pytest.mark.parametrize(
    ("sql", "kind", "names", "cascade"),
    [
        ("DROP VIEW v", "view", (("v",),), False),
        (
            "DROP MATERIALIZED VIEW IF EXISTS a, s.b CASCADE",
            "materialized-view",
            (("a",), ("s", "b")),
            True,
        ),
        ("DROP INDEX i RESTRICT", "index", (("i",),), False),
    ],
)
def test_drop_object_forms(
    sql: str, kind: str, names: tuple[tuple[str, ...], ...], cascade: bool
) -> None:
    statement = parse_one(sql)
    assert isinstance(statement, DropObjects)
    assert (statement.kind, tuple(n.parts for n in statement.names), statement.cascade) == (
        kind,
        names,
        cascade,
    )


def test_subscribe_to_an_object_reads_all_of_it() -> None:
    statement = parse_one("SUBSCRIBE TO s.t")
    assert isinstance(statement, Subscribe)
    assert statement.query.expression.sql() == 'SELECT * FROM "s"."t"'
    assert (statement.snapshot, statement.as_of) == (True, None)


def test_subscribe_to_a_query_with_options_and_as_of() -> None:
    statement = parse_one("SUBSCRIBE (SELECT a FROM t) WITH (SNAPSHOT = false) AS OF 42")
    assert isinstance(statement, Subscribe)
    assert statement.query.expression.sql() == "SELECT a FROM t"
    assert statement.snapshot is False
    assert statement.as_of is not None
    assert statement.as_of.sql() == "42"


def test_create_source_load_generator() -> None:
    statement = parse_one(
        "CREATE SOURCE s FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.5) FOR ALL TABLES"
    )
    assert isinstance(statement, CreateSource)
    assert (statement.name.parts, statement.generator, statement.scale_factor) == (
        ("s",),
        "tpch",
        0.5,
    )


@pytest.mark.parametrize(
    ("sql", "kind", "name"),
    [
        ("EXPLAIN PLAN FOR VIEW v", "view", ("v",)),
        ("EXPLAIN OPTIMIZED PLAN FOR MATERIALIZED VIEW s.mv", "materialized-view", ("s", "mv")),
        ("EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR INDEX i", "index", ("i",)),
    ],
)
def test_explain_for_objects(sql: str, kind: str, name: tuple[str, ...]) -> None:
    statement = parse_one(sql)
    assert isinstance(statement, Explain)
    assert statement.query is None
    assert statement.object_name is not None
    assert (statement.object_kind, statement.object_name.parts) == (kind, name)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("BEGIN", StartTransaction(text="BEGIN", offset=0)),
        ("begin work", StartTransaction(text="begin work", offset=0)),
        (
            "START TRANSACTION READ ONLY",
            StartTransaction(text="START TRANSACTION READ ONLY", offset=0, access="read only"),
        ),
        (
            "BEGIN ISOLATION LEVEL STRICT SERIALIZABLE, READ WRITE",
            StartTransaction(
                text="BEGIN ISOLATION LEVEL STRICT SERIALIZABLE, READ WRITE",
                offset=0,
                access="read write",
            ),
        ),
        ("END", Commit(text="END", offset=0)),
        ("COMMIT TRANSACTION", Commit(text="COMMIT TRANSACTION", offset=0)),
        ("ABORT", Rollback(text="ABORT", offset=0)),
        ("FETCH c", Fetch(text="FETCH c", offset=0, name="c")),
        ("FETCH ALL IN c", Fetch(text="FETCH ALL IN c", offset=0, name="c", count=None)),
        (
            "FETCH FORWARD 5 FROM c",
            Fetch(text="FETCH FORWARD 5 FROM c", offset=0, name="c", count=5),
        ),
        (
            "FETCH 100 c WITH (timeout = '1.5s')",
            Fetch(
                text="FETCH 100 c WITH (timeout = '1.5s')",
                offset=0,
                name="c",
                count=100,
                timeout=1.5,
            ),
        ),
        (
            "FETCH c WITH (TIMEOUT '250ms')",
            Fetch(text="FETCH c WITH (TIMEOUT '250ms')", offset=0, name="c", timeout=0.25),
        ),
        ("CLOSE c", Close(text="CLOSE c", offset=0, name="c")),
        ("CLOSE ALL", Close(text="CLOSE ALL", offset=0, name=None)),
    ],
)
def test_transaction_and_cursor_statements(sql: str, expected: object) -> None:
    """BEGIN/COMMIT/ROLLBACK and FETCH/CLOSE in PostgreSQL's forms and Materialize's timeout."""
    assert parse_one(sql) == expected


def test_declare_takes_a_select_or_a_subscribe() -> None:
    """DECLARE's statement is parsed as itself; anything but SELECT or SUBSCRIBE is 0A000."""
    declared = parse_one('DECLARE "C" NO SCROLL CURSOR WITHOUT HOLD FOR SUBSCRIBE t')
    assert isinstance(declared, Declare)
    assert declared.name == "C"
    assert isinstance(declared.statement, Subscribe)
    assert isinstance(parse_one("DECLARE c CURSOR FOR SELECT 1").statement, Query)  # type: ignore[attr-defined]
    error = error_of("DECLARE c CURSOR FOR INSERT INTO t VALUES (1)")
    assert error.code == "0A000"
    assert error_of("FETCH c WITH (timeout = 'soon')").code == "22023"
    assert error_of("DECLARE c CURSOR WITH HOLD FOR SELECT 1").code == "0A000"
    assert error_of("DECLARE c SCROLL CURSOR FOR SELECT 1").code == "0A000"


def test_a_text_parsed_again_gives_a_fresh_copy_of_the_same_statements():
    from loupe.coordinator.sql import parser

    sql = "SELECT a + 1 AS b FROM t WHERE c = 'x'; SELECT 2"
    first = parse(sql)
    hits = parser._parsed.cache_info().hits
    second = parse(sql)
    assert parser._parsed.cache_info().hits == hits + 1  # not parsed again
    assert [s.expression.sql() for s in first] == [s.expression.sql() for s in second]
    assert all(
        a is not b and a.expression is not b.expression for a, b in zip(first, second, strict=True)
    )
    # A caller may change its statements (planning does): the next parse does not see it.
    first[0].expression.find(exp.Literal).replace(exp.Literal.number(42))
    assert "42" in first[0].expression.sql()
    assert parse(sql)[0].expression.sql() == second[0].expression.sql()
    assert "42" not in parse(sql)[0].expression.sql()
    # A text that does not parse fails every time; a long one is never kept.
    for _ in range(2):
        with pytest.raises(LoupeError):
            parse("SELEC 1")
    long = "SELECT " + " + ".join(["1"] * (parser.PARSE_CACHE_MAX_CHARS // 4))
    size = parser._parsed.cache_info().currsize
    assert parse(long)[0].expression.sql() == parse(long)[0].expression.sql()
    assert parser._parsed.cache_info().currsize == size
