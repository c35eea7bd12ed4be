"""``stash-postgres``: the durable catalog in a PostgreSQL schema.

The same layout as ``stash-sqlite``, in the schema ``postgres_schema``
(default ``loupe_catalog``) of the database at ``postgres_url`` (or the
environment's ``LOUPE_CATALOG_POSTGRES_URL``):

- ``config(key, value)``: ``version``, ``epoch``, ``deploy_generation``;
- ``collections(kind, key, value)``: every object as JSON, by kind;
- ``timestamp_oracle(timeline, ts)``: the last write timestamp.

Every write is one transaction that first locks the config rows with
``SELECT … FOR UPDATE`` and checks the fence token it read under that lock:
a concurrent open (which updates those rows) either commits before the lock
is granted, and then the check sees its new epoch, or waits until the write
has committed. So the fence check, the timestamp oracle and the write are one
atomic step, even with writers in other processes. Opens also take a
transaction-scoped advisory lock, so two processes cannot both initialise.

A schema that holds other tables, or tables of the right names with the
wrong columns, is refused with ``CatalogCorruptError`` and left untouched.
One connection (autocommit off); statements are prepared on first use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from loupe.catalog.durable import DurableCatalogState, Loaded, Migrate, next_timestamp, now_ms
from loupe.catalog.errors import CatalogCorruptError, CatalogError, FencedError
from loupe.catalog.migrations import CATALOG_VERSION, Row, Write, apply_writes
from loupe.catalog.objects import FenceToken

URL_ENV = "LOUPE_CATALOG_POSTGRES_URL"
SCHEMA_ENV = "LOUPE_CATALOG_POSTGRES_SCHEMA"
DEFAULT_SCHEMA = "loupe_catalog"
TIMELINE = "catalog"
CONFIG_KEYS = ("version", "epoch", "deploy_generation")
CONNECT_TIMEOUT_S = 10

# table -> {column: type as format_type prints it}; checked at every open.
# Text columns sort bytewise (COLLATE "C"), as SQLite and Python sort them.
LAYOUT: dict[str, dict[str, str]] = {
    "config": {"key": "text", "value": "bigint"},
    "collections": {"kind": "text", "key": "text", "value": "text"},
    "timestamp_oracle": {"timeline": "text", "ts": "bigint"},
}
DDL = (
    'CREATE TABLE {schema}.config (key TEXT COLLATE "C" PRIMARY KEY, value BIGINT NOT NULL)',
    "CREATE TABLE {schema}.collections ("
    ' kind TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, value TEXT NOT NULL,'
    " PRIMARY KEY (kind, key))",
    'CREATE TABLE {schema}.timestamp_oracle (timeline TEXT COLLATE "C" PRIMARY KEY,'
    " ts BIGINT NOT NULL)",
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class _Statements:
    """The SQL of the backend, with the schema name quoted in once."""

    def __init__(self, schema: str) -> None:
        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(schema=sql.Identifier(schema))

        self.create_schema = q("CREATE SCHEMA IF NOT EXISTS {schema}")
        self.create_tables = [q(statement) for statement in DDL]
        self.layout = sql.SQL(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        )
        # Serialises opens (and so initialisation) of one schema across processes.
        self.open_lock = sql.SQL("SELECT pg_advisory_xact_lock(hashtext(%s))")
        self.read_only = sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        self.config = q("SELECT key, value FROM {schema}.config ORDER BY key")
        self.config_for_update = q("SELECT key, value FROM {schema}.config ORDER BY key FOR UPDATE")
        self.insert_config = q("INSERT INTO {schema}.config (key, value) VALUES (%s, %s)")
        self.update_config = q("UPDATE {schema}.config SET value = %s WHERE key = %s")
        self.rows = q("SELECT kind, key, value FROM {schema}.collections ORDER BY kind, key")
        self.upsert = q(
            "INSERT INTO {schema}.collections (kind, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value"
        )
        self.delete = q("DELETE FROM {schema}.collections WHERE kind = %s AND key = %s")
        self.timestamp = q("SELECT ts FROM {schema}.timestamp_oracle WHERE timeline = %s")
        self.insert_timestamp = q(
            "INSERT INTO {schema}.timestamp_oracle (timeline, ts) VALUES (%s, %s)"
        )
        # The oracle advances in the same statement that reads it.
        self.advance_timestamp = q(
            "UPDATE {schema}.timestamp_oracle SET ts = GREATEST(%s, ts + 1) "
            "WHERE timeline = %s RETURNING ts"
        )


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class PostgresCatalogBackend(DurableCatalogState):
    """The durable catalog in tables of one PostgreSQL schema."""

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        deploy_generation: int = 0,
        now: Callable[[], int] = now_ms,
        postgres_url: str | None = None,
        postgres_schema: str | None = None,
    ) -> None:
        super().__init__(deploy_generation=deploy_generation, now=now)
        # Not used for storage; kept so every backend is built the same way.
        self.data_dir = data_dir
        url = postgres_url or os.environ.get(URL_ENV)
        if not url:
            raise CatalogError(
                "the stash-postgres catalog backend needs a PostgreSQL URL: give postgres_url "
                f"(e.g. postgresql://postgres@127.0.0.1:5432/loupe) or set {URL_ENV}"
            )
        self.url = url
        schema = postgres_schema or os.environ.get(SCHEMA_ENV) or DEFAULT_SCHEMA
        if not IDENTIFIER.fullmatch(schema):
            raise CatalogError(f"invalid postgres_schema {schema!r}: expected a plain identifier")
        self.schema = schema
        self._sql = _Statements(schema)
        self._connection: psycopg.Connection[Any] | None = None

    def __repr__(self) -> str:
        return f"PostgresCatalogBackend({redact(self.url)!r}, schema={self.schema!r})"

    @property
    def where(self) -> str:
        """The catalog's location, for messages."""
        return f"PostgreSQL catalog {redact(self.url)} schema {self.schema}"

    # Connection and layout

    def _connect(self) -> psycopg.Connection[Any]:
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            try:
                # prepare_threshold=0: every statement is prepared on its first run.
                connection = psycopg.connect(
                    self.url,
                    autocommit=False,
                    prepare_threshold=0,
                    connect_timeout=CONNECT_TIMEOUT_S,
                    application_name="loupe-catalog",
                )
            except psycopg.Error as error:
                raise CatalogError(
                    f"cannot connect to the {self.where}: {str(error).strip()}"
                ) from error
            self._connection = connection
        return connection

    @contextmanager
    def _transaction(self, *, read_only: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """One transaction: committed on success, rolled back on any error.

        Database errors become ``CatalogError``s; a lost connection is
        reopened by the next transaction.
        """
        connection = self._connect()
        try:
            if read_only:
                connection.execute(self._sql.read_only, prepare=False)
            yield connection
            connection.commit()
        except BaseException as error:
            if not connection.closed and not connection.broken:
                connection.rollback()
            if isinstance(error, psycopg.Error):
                raise CatalogError(f"the {self.where} failed: {str(error).strip()}") from error
            raise

    def _has_layout(self, connection: psycopg.Connection[Any]) -> bool:
        """True for a Loupe catalog, False for a missing or empty schema, else an error."""
        found: dict[str, dict[str, str]] = {}
        for table, column, type_ in connection.execute(self._sql.layout, (self.schema,)):
            found.setdefault(table, {})[column] = type_
        if not found:
            return False
        damaged = sorted(table for table, columns in LAYOUT.items() if found.get(table) != columns)
        if damaged:
            raise CatalogCorruptError(
                f"the {self.where} is not a Loupe catalog (tables: {', '.join(sorted(found))}; "
                f"missing or different: {', '.join(damaged)}); refusing to touch it"
            )
        return True

    def _config(self, connection: psycopg.Connection[Any], *, lock: bool) -> dict[str, int]:
        statement = self._sql.config_for_update if lock else self._sql.config
        config = dict(connection.execute(statement).fetchall())
        missing = [key for key in CONFIG_KEYS if key not in config]
        if missing:
            raise CatalogCorruptError(f"{self.where}: catalog config lacks {', '.join(missing)}")
        return config

    def _stored_fence(self, connection: psycopg.Connection[Any], *, lock: bool) -> FenceToken:
        config = self._config(connection, lock=lock)
        return FenceToken(config["deploy_generation"], config["epoch"])

    def _last_timestamp(self, connection: psycopg.Connection[Any]) -> int:
        row = connection.execute(self._sql.timestamp, (TIMELINE,)).fetchone()
        if row is None:
            raise CatalogCorruptError(f"{self.where}: the timestamp oracle has no timestamp")
        return int(row[0])

    def _initialize(self, connection: psycopg.Connection[Any], rows: list[Row]) -> Loaded:
        connection.execute(self._sql.create_schema, prepare=False)
        for statement in self._sql.create_tables:
            connection.execute(statement, prepare=False)
        fence = FenceToken(self.deploy_generation, 1)
        timestamp = next_timestamp(self._now(), 0)
        with connection.cursor() as cursor:
            cursor.executemany(
                self._sql.insert_config,
                [
                    ("version", CATALOG_VERSION),
                    ("epoch", fence.epoch),
                    ("deploy_generation", fence.deploy_generation),
                ],
            )
        self._apply(connection, rows)
        connection.execute(self._sql.insert_timestamp, (TIMELINE, timestamp))
        return Loaded(CATALOG_VERSION, fence, timestamp, sorted(rows))

    def _apply(self, connection: psycopg.Connection[Any], writes: list[Write] | list[Row]) -> None:
        # Later writes to a key win, so the rest can go in two batches.
        final: dict[tuple[str, str], str | None] = {}
        for kind, key, value in writes:
            final[(kind, key)] = value
        deletes = [(kind, key) for (kind, key), value in final.items() if value is None]
        upserts = [(kind, key, value) for (kind, key), value in final.items() if value is not None]
        with connection.cursor() as cursor:
            if deletes:
                cursor.executemany(self._sql.delete, deletes)
            if upserts:
                cursor.executemany(self._sql.upsert, upserts)

    # DurableCatalogState primitives

    def is_initialized(self) -> bool:
        with self._transaction(read_only=True) as connection:
            return self._has_layout(connection)

    def _load(self, *, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        with self._transaction(read_only=not writable) as connection:
            if writable:
                connection.execute(self._sql.open_lock, (f"loupe-catalog:{self.schema}",))
            if not self._has_layout(connection):
                if not writable:
                    raise CatalogError(f"the {self.where} is not initialised")
                return self._initialize(connection, initial_rows)
            config = self._config(connection, lock=writable)
            stored = FenceToken(config["deploy_generation"], config["epoch"])
            rows: list[Row] = [tuple(row) for row in connection.execute(self._sql.rows)]  # type: ignore[misc]
            version, writes = migrate(config["version"], rows)
            ours = stored
            if writable:
                if stored.deploy_generation > self.deploy_generation:
                    raise FencedError(FenceToken(self.deploy_generation, 0), stored)
                ours = FenceToken(self.deploy_generation, stored.epoch + 1)
                with connection.cursor() as cursor:
                    cursor.executemany(
                        self._sql.update_config,
                        [
                            (ours.epoch, "epoch"),
                            (ours.deploy_generation, "deploy_generation"),
                            (version, "version"),
                        ],
                    )
                self._apply(connection, writes)
            return Loaded(
                version,
                ours,
                self._last_timestamp(connection),
                apply_writes(rows, writes) if writes else rows,
            )

    def _write(self, fence: FenceToken, writes: list[Write], now: int) -> int:
        with self._transaction() as connection:
            # The lock makes a concurrent open wait for us, or us see its epoch.
            stored = self._stored_fence(connection, lock=True)
            if stored != fence:
                raise FencedError(fence, stored)
            row = connection.execute(self._sql.advance_timestamp, (now, TIMELINE)).fetchone()
            if row is None:
                raise CatalogCorruptError(f"{self.where}: the timestamp oracle has no timestamp")
            self._apply(connection, writes)
            return int(row[0])

    def _confirm_fence(self, fence: FenceToken) -> None:
        with self._transaction(read_only=True) as connection:
            stored = self._stored_fence(connection, lock=False)
        if stored != fence:
            raise FencedError(fence, stored)

    def _read_fence(self) -> FenceToken | None:
        with self._transaction(read_only=True) as connection:
            if not self._has_layout(connection):
                return None
            return self._stored_fence(connection, lock=False)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
