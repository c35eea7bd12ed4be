"""The statements the coordinator understands, as parsed from SQL text.

Loupe's own statements (cluster and table DDL, session commands) are
dataclasses; queries and the expressions of INSERT, UPDATE and DELETE keep
sqlglot's expression trees. Every statement remembers where it starts in the
request text so errors can point into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp


@dataclass(frozen=True, kw_only=True)
class Statement:
    """One statement of a request: its own text and its 0-based offset in the request."""

    text: str
    offset: int

    @property
    def position(self) -> int:
        """1-based position of the statement's first character in the request."""
        return self.offset + 1

    @property
    def tag(self) -> str:
        """The PostgreSQL-style command tag of a successful run (rows are added for SELECT)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class ReplicaSpec:
    """A replica named in ``CREATE CLUSTER … REPLICAS (…)``."""

    name: str
    size: str
    position: int = 0


@dataclass(frozen=True, kw_only=True)
class CreateCluster(Statement):
    name: str
    managed: bool
    # Managed clusters only: the size of each replica and how many there are.
    size: str = ""
    replication_factor: int = 1
    # Unmanaged clusters only: the replicas to create with the cluster.
    replicas: tuple[ReplicaSpec, ...] = ()
    introspection_interval_ns: int = 1_000_000_000
    introspection_debugging: bool = False

    @property
    def tag(self) -> str:
        return "CREATE CLUSTER"


@dataclass(frozen=True, kw_only=True)
class CreateClusterReplica(Statement):
    cluster: str
    replica: str
    size: str

    @property
    def tag(self) -> str:
        return "CREATE CLUSTER REPLICA"


@dataclass(frozen=True, kw_only=True)
class DropCluster(Statement):
    name: str
    if_exists: bool = False
    cascade: bool = False

    @property
    def tag(self) -> str:
        return "DROP CLUSTER"


@dataclass(frozen=True, kw_only=True)
class DropClusterReplica(Statement):
    cluster: str
    replica: str
    if_exists: bool = False
    # Also drop the objects reading the replica's introspection views.
    cascade: bool = False

    @property
    def tag(self) -> str:
        return "DROP CLUSTER REPLICA"


@dataclass(frozen=True, kw_only=True)
class ShowClusters(Statement):
    @property
    def tag(self) -> str:
        return "SELECT"


@dataclass(frozen=True, kw_only=True)
class ShowRoles(Statement):
    @property
    def tag(self) -> str:
        return "SELECT"


@dataclass(frozen=True, kw_only=True)
class ShowObjects(Statement):
    """``SHOW TABLES | VIEWS | MATERIALIZED VIEWS | INDEXES | SOURCES | OBJECTS | DATABASES
    | SCHEMAS [FROM name] [ON obj]``, ``SHOW COLUMNS FROM obj`` and ``SHOW CREATE kind obj``.

    ``kind`` is the upper-case words after SHOW (``MATERIALIZED VIEWS``, ``CREATE TABLE``);
    ``target`` the object of COLUMNS, CREATE and INDEXES ON; ``source`` the FROM schema
    (or database, for SCHEMAS).
    """

    kind: str
    target: ObjectName | None = None
    source: ObjectName | None = None

    @property
    def tag(self) -> str:
        return "SELECT"


@dataclass(frozen=True, kw_only=True)
class ShowClusterReplicas(Statement):
    @property
    def tag(self) -> str:
        return "SELECT"


@dataclass(frozen=True, kw_only=True)
class SetVariable(Statement):
    name: str
    # None means DEFAULT (the same as RESET).
    value: str | None
    name_position: int = 0

    @property
    def tag(self) -> str:
        return "SET"


@dataclass(frozen=True, kw_only=True)
class AlterCluster(Statement):
    """``ALTER CLUSTER name SET (…)`` / ``RESET (…)``: the introspection options (None: unchanged)."""

    name: str
    introspection_interval_ns: int | None = None
    introspection_debugging: bool | None = None

    @property
    def tag(self) -> str:
        return "ALTER CLUSTER"


@dataclass(frozen=True, kw_only=True)
class AlterSystem(Statement):
    """``ALTER SYSTEM SET name = value`` or ``ALTER SYSTEM RESET name`` (value None)."""

    name: str
    value: str | None
    name_position: int = 0

    @property
    def tag(self) -> str:
        return "ALTER SYSTEM"


@dataclass(frozen=True, kw_only=True)
class ShowVariable(Statement):
    # "all" shows every variable.
    name: str
    name_position: int = 0

    @property
    def tag(self) -> str:
        return "SHOW"


@dataclass(frozen=True, kw_only=True)
class ResetVariable(Statement):
    # "all" resets every variable.
    name: str
    name_position: int = 0

    @property
    def tag(self) -> str:
        return "RESET"


@dataclass(frozen=True, kw_only=True)
class Query(Statement):
    """A SELECT (or a set operation of SELECTs), parsed by sqlglot.

    ``as_of`` is the expression of a trailing ``AS OF <timestamp>`` clause
    (Materialize's time travel), which sqlglot does not parse.
    """

    expression: exp.Expression = field(compare=False)
    as_of: exp.Expression | None = field(default=None, compare=False)
    as_of_position: int = 0

    @property
    def tag(self) -> str:
        return "SELECT"


@dataclass(frozen=True, kw_only=True)
class ObjectName:
    """A possibly qualified name as written: ``t``, ``public.t``, ``materialize.public.t``."""

    parts: tuple[str, ...]
    # 1-based position of the name's first part in the request; 0 when unknown.
    position: int = 0

    @property
    def name(self) -> str:
        return self.parts[-1]

    def __str__(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True, kw_only=True)
class ColumnDef:
    """A column of ``CREATE TABLE``: its name, type (as PostgreSQL spells it) and nullability."""

    name: str
    # PostgreSQL's canonical spelling with modifiers: ``integer``, ``character varying(10)``.
    type: str
    nullable: bool = True
    position: int = 0
    # The DEFAULT expression's SQL text; None: NULL.
    default: str | None = None


@dataclass(frozen=True)
class UniqueKey:
    """A ``PRIMARY KEY`` or ``UNIQUE`` constraint of a table: its name and columns."""

    name: str
    columns: tuple[str, ...]
    primary: bool = False


@dataclass(frozen=True, kw_only=True)
class CreateTable(Statement):
    name: ObjectName
    columns: tuple[ColumnDef, ...]
    if_not_exists: bool = False
    # PRIMARY KEY first, then UNIQUE constraints, in the order written.
    keys: tuple[UniqueKey, ...] = ()

    @property
    def tag(self) -> str:
        return "CREATE TABLE"


@dataclass(frozen=True, kw_only=True)
class DropTable(Statement):
    names: tuple[ObjectName, ...]
    if_exists: bool = False
    cascade: bool = False

    @property
    def tag(self) -> str:
        return "DROP TABLE"


@dataclass(frozen=True, kw_only=True)
class Insert(Statement):
    """``INSERT INTO t [(cols)] VALUES …`` (``rows``) or ``INSERT INTO t [(cols)] SELECT …`` (``query``)."""

    table: ObjectName
    # None: every column of the table, in order.
    columns: tuple[tuple[str, int], ...] | None = None
    rows: tuple[tuple[exp.Expression, ...], ...] = field(default=(), compare=False)
    query: Query | None = field(default=None, compare=False)

    @property
    def tag(self) -> str:
        return "INSERT"


@dataclass(frozen=True, kw_only=True)
class Update(Statement):
    table: ObjectName
    alias: str | None = None
    # (column, its 1-based position, new value).
    assignments: tuple[tuple[str, int, exp.Expression], ...] = field(default=(), compare=False)
    where: exp.Expression | None = field(default=None, compare=False)

    @property
    def tag(self) -> str:
        return "UPDATE"


@dataclass(frozen=True, kw_only=True)
class Delete(Statement):
    table: ObjectName
    alias: str | None = None
    where: exp.Expression | None = field(default=None, compare=False)

    @property
    def tag(self) -> str:
        return "DELETE"


@dataclass(frozen=True, kw_only=True)
class Prepare(Statement):
    """``PREPARE name [(types)] AS <SELECT | INSERT | UPDATE | DELETE>``.

    ``statement`` is parsed from its own text (``statement.text``), so errors
    when it runs point into that text; ``param_types`` are PostgreSQL's names
    (``integer``, ``text``, …) of the first parameters, as declared.
    """

    name: str
    param_types: tuple[str, ...] = ()
    statement: Statement = field(compare=False)

    @property
    def tag(self) -> str:
        return "PREPARE"


@dataclass(frozen=True, kw_only=True)
class Execute(Statement):
    """``EXECUTE name [(args)]``: runs the prepared statement with ``args`` as its parameters."""

    name: str
    args: tuple[exp.Expression, ...] = field(default=(), compare=False)

    @property
    def tag(self) -> str:
        return "EXECUTE"


@dataclass(frozen=True, kw_only=True)
class Deallocate(Statement):
    """``DEALLOCATE [PREPARE] name | ALL`` (``name`` None: all of the session's)."""

    name: str | None

    @property
    def tag(self) -> str:
        return "DEALLOCATE" if self.name is not None else "DEALLOCATE ALL"


@dataclass(frozen=True, kw_only=True)
class Explain(Statement):
    """``EXPLAIN [OPTIMIZED | PHYSICAL] PLAN [WITH (node_ids)] FOR <query> | <kind> <name>``.

    ``stage`` is ``"optimized"`` (MIR) or ``"physical"`` (LIR); a bare
    ``EXPLAIN <query>`` is the optimized plan. Either ``query`` is set, or
    ``object_kind`` (view, materialized-view, index) and ``object_name``: the
    plan of that object's stored definition.
    """

    stage: str = "optimized"
    node_ids: bool = False
    query: Query | None = field(default=None, compare=False)
    object_kind: str = ""
    object_name: ObjectName | None = None

    @property
    def tag(self) -> str:
        return "EXPLAIN"


@dataclass(frozen=True, kw_only=True)
class ExplainAnalyze(Statement):
    """``EXPLAIN ANALYZE {CPU | MEMORY} [, …] [WITH SKEW] | HINTS | HYDRATION FOR
    {INDEX | MATERIALIZED VIEW} name [AS SQL]`` and ``EXPLAIN ANALYZE CLUSTER {CPU |
    MEMORY} [, …] [WITH SKEW] [AS SQL]`` (Materialize's; HYDRATION is Loupe's).

    ``properties``: ``"cpu"``/``"memory"`` in the order written, or ``("hints",)``
    or ``("hydration",)``; ``cluster``: the CLUSTER form (no object);
    ``object_kind``: ``"index"`` or ``"materialized-view"``.
    """

    properties: tuple[str, ...]
    skew: bool = False
    cluster: bool = False
    object_kind: str = ""
    object_name: ObjectName | None = None
    as_sql: bool = False

    @property
    def tag(self) -> str:
        return "EXPLAIN"


@dataclass(frozen=True, kw_only=True)
class CreateView(Statement):
    """``CREATE [MATERIALIZED] VIEW [IF NOT EXISTS] name [IN CLUSTER c] AS <query>``."""

    name: ObjectName
    query: Query = field(compare=False)
    materialized: bool = False
    # Materialized views only; empty means the session's cluster.
    cluster: str = ""
    if_not_exists: bool = False

    @property
    def tag(self) -> str:
        return "CREATE MATERIALIZED VIEW" if self.materialized else "CREATE VIEW"


@dataclass(frozen=True, kw_only=True)
class CreateIndex(Statement):
    """``CREATE [DEFAULT] INDEX [name] [IN CLUSTER c] ON obj [(cols)]``.

    ``columns`` empty means a default index: keyed by all columns.
    """

    name: str = ""
    on: ObjectName
    columns: tuple[tuple[str, int], ...] = ()
    cluster: str = ""
    if_not_exists: bool = False
    # CREATE UNIQUE INDEX on a table: its columns' values must be unique (23505).
    unique: bool = False

    @property
    def tag(self) -> str:
        return "CREATE INDEX"


@dataclass(frozen=True, kw_only=True)
class CreateSource(Statement):
    """``CREATE SOURCE name FROM LOAD GENERATOR TPCH (SCALE FACTOR x)``."""

    name: ObjectName
    generator: str
    scale_factor: float = 0.01

    @property
    def tag(self) -> str:
        return "CREATE SOURCE"


# DROP <kind> -> the catalog item type it drops.
DROP_KINDS = {
    "VIEW": "view",
    "MATERIALIZED VIEW": "materialized-view",
    "INDEX": "index",
    "SOURCE": "source",
}


@dataclass(frozen=True, kw_only=True)
class DropObjects(Statement):
    """``DROP VIEW | MATERIALIZED VIEW | INDEX | SOURCE [IF EXISTS] names [CASCADE]``."""

    kind: str  # a value of DROP_KINDS
    names: tuple[ObjectName, ...]
    if_exists: bool = False
    cascade: bool = False

    @property
    def tag(self) -> str:
        words = {v: k for k, v in DROP_KINDS.items()}
        return f"DROP {words[self.kind]}"


@dataclass(frozen=True, kw_only=True)
class Copy(Statement):
    """``COPY (query) TO STDOUT``, ``COPY t [(columns)] TO STDOUT`` or ``COPY t [(columns)]
    FROM STDIN``, with ``WITH (option value, …)`` (names lower-cased, values as written).

    ``query`` is what COPY TO sends (for the table form, ``SELECT columns FROM t``);
    ``table`` and ``columns`` name what COPY FROM loads (and the table of COPY t TO).
    """

    direction: str  # "TO" or "FROM"
    query: Query | Subscribe | None = field(default=None, compare=False)
    table: ObjectName | None = None
    columns: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()

    @property
    def tag(self) -> str:
        return "COPY"


@dataclass(frozen=True, kw_only=True)
class Subscribe(Statement):
    """``SUBSCRIBE [TO] <object | (query)> [WITH (SNAPSHOT [=] bool)] [AS OF t]``."""

    query: Query = field(compare=False)
    snapshot: bool = True
    as_of: exp.Expression | None = field(default=None, compare=False)
    as_of_position: int = 0

    @property
    def tag(self) -> str:
        return "SUBSCRIBE"


@dataclass(frozen=True, kw_only=True)
class RoleOptions:
    """``[WITH] SUPERUSER | NOSUPERUSER | LOGIN | NOLOGIN | INHERIT | NOINHERIT | PASSWORD …``.

    None: not given. ``password`` is the text as given; ``password_null`` is
    ``PASSWORD NULL`` (no password).
    """

    superuser: bool | None = None
    login: bool | None = None
    inherit: bool | None = None
    password: str | None = field(default=None, repr=False)
    password_null: bool = False


@dataclass(frozen=True, kw_only=True)
class CreateRole(Statement):
    """``CREATE ROLE name [options]``; ``CREATE USER`` is the same with LOGIN by default."""

    name: str
    options: RoleOptions
    user: bool = False

    @property
    def tag(self) -> str:
        return "CREATE ROLE"


@dataclass(frozen=True, kw_only=True)
class AlterRole(Statement):
    name: str
    options: RoleOptions

    @property
    def tag(self) -> str:
        return "ALTER ROLE"


@dataclass(frozen=True, kw_only=True)
class DropRole(Statement):
    names: tuple[str, ...]
    if_exists: bool = False

    @property
    def tag(self) -> str:
        return "DROP ROLE"


@dataclass(frozen=True, kw_only=True)
class GrantRole(Statement):
    """``GRANT roles TO members`` or ``REVOKE roles FROM members``."""

    roles: tuple[str, ...]
    members: tuple[str, ...]
    revoke: bool = False

    @property
    def tag(self) -> str:
        return "REVOKE ROLE" if self.revoke else "GRANT ROLE"


# -- transactions and cursors ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StartTransaction(Statement):
    """``BEGIN [TRANSACTION | WORK]`` / ``START TRANSACTION`` ``[READ ONLY | READ WRITE]``.

    ``access``: "read only", "read write" or None (not said: the first statement decides).
    """

    access: str | None = None

    @property
    def tag(self) -> str:
        return "BEGIN"


@dataclass(frozen=True, kw_only=True)
class Commit(Statement):
    """``COMMIT`` / ``END [TRANSACTION | WORK]``."""

    @property
    def tag(self) -> str:
        return "COMMIT"


@dataclass(frozen=True, kw_only=True)
class Rollback(Statement):
    """``ROLLBACK`` / ``ABORT [TRANSACTION | WORK]``."""

    @property
    def tag(self) -> str:
        return "ROLLBACK"


@dataclass(frozen=True, kw_only=True)
class Declare(Statement):
    """``DECLARE name [NO SCROLL] CURSOR [WITHOUT HOLD] FOR <SELECT | SUBSCRIBE>``."""

    name: str
    statement: Statement = field(compare=False)

    @property
    def tag(self) -> str:
        return "DECLARE CURSOR"


@dataclass(frozen=True, kw_only=True)
class Fetch(Statement):
    """``FETCH [FORWARD] [count | ALL | NEXT] [FROM | IN] name [WITH (timeout = t)]``.

    ``count`` None: ALL. ``timeout`` in seconds; None: not given.
    """

    name: str
    count: int | None = 1
    timeout: float | None = None

    @property
    def tag(self) -> str:
        return "FETCH"


@dataclass(frozen=True, kw_only=True)
class Close(Statement):
    """``CLOSE name | ALL``; ``name`` None: every cursor."""

    name: str | None

    @property
    def tag(self) -> str:
        return "CLOSE CURSOR"
