"""``stash-sqlite``: the embedded catalog backend, one SQLite file.

``<data_dir>/catalog/catalog.sqlite`` in WAL mode with ``synchronous=FULL``,
so a commit is on disk when it returns. Tables:

- ``config(key, value)``: ``version``, ``epoch``, ``deploy_generation``;
- ``collections(kind, key, value)``: every object as JSON, by kind
  (``loupe.catalog.kinds``), as in the stash;
- ``timestamp_oracle(timeline, ts)``: the last write timestamp.

Every write runs in ``BEGIN IMMEDIATE`` (SQLite's single-writer lock) and
re-reads the fence token inside it, so the check and the write are one
atomic step even with another process on the same file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from loupe.catalog.durable import DurableCatalogState, Loaded, Migrate, next_timestamp, now_ms
from loupe.catalog.errors import CatalogCorruptError, CatalogError, FencedError
from loupe.catalog.migrations import CATALOG_VERSION, Row, Write, apply_writes
from loupe.catalog.objects import FenceToken

TIMELINE = "catalog"
CONFIG_KEYS = ("version", "epoch", "deploy_generation")

SCHEMA = """
CREATE TABLE config (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE collections (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE TABLE timestamp_oracle (timeline TEXT PRIMARY KEY, ts INTEGER NOT NULL) WITHOUT ROWID;
"""
TABLES = {"config", "collections", "timestamp_oracle"}


def default_path(data_dir: Path) -> Path:
    return Path(data_dir) / "catalog" / "catalog.sqlite"


class SqliteCatalogBackend(DurableCatalogState):
    """The durable catalog in one SQLite file."""

    def __init__(
        self,
        data_dir: Path,
        *,
        deploy_generation: int = 0,
        now: Callable[[], int] = now_ms,
        path: Path | None = None,
    ) -> None:
        super().__init__(deploy_generation=deploy_generation, now=now)
        self.path = Path(path) if path else default_path(data_dir)
        self._connection: sqlite3.Connection | None = None

    # Connection and layout

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are begun explicitly below.
            connection = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=10.0
            )
            try:
                # The first read fails on a file that is not SQLite.
                connection.execute("PRAGMA schema_version").fetchone()
                connection.execute("PRAGMA journal_mode=WAL").fetchone()
                connection.execute("PRAGMA synchronous=FULL")
            except sqlite3.DatabaseError as error:
                connection.close()
                raise CatalogCorruptError(
                    f"{self.path} is not a Loupe catalog (not a SQLite database: {error}); "
                    "refusing to touch it"
                ) from error
            self._connection = connection
        return self._connection

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        connection = self._connect()
        connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield connection
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def _has_layout(self, connection: sqlite3.Connection) -> bool:
        """True for a Loupe catalog, False for an empty database, else an error."""
        tables = {
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        if not tables:
            return False
        if not TABLES.issubset(tables):
            raise CatalogCorruptError(
                f"{self.path} is a SQLite database but not a Loupe catalog "
                f"(tables: {', '.join(sorted(tables))}); refusing to touch it"
            )
        return True

    def _config(self, connection: sqlite3.Connection) -> dict[str, int]:
        config = dict(connection.execute("SELECT key, value FROM config").fetchall())
        missing = [key for key in CONFIG_KEYS if key not in config]
        if missing:
            raise CatalogCorruptError(f"{self.path}: catalog config lacks {', '.join(missing)}")
        return config

    def _stored_fence(self, connection: sqlite3.Connection) -> FenceToken:
        config = self._config(connection)
        return FenceToken(config["deploy_generation"], config["epoch"])

    def _last_timestamp(self, connection: sqlite3.Connection) -> int:
        row = connection.execute(
            "SELECT ts FROM timestamp_oracle WHERE timeline = ?", (TIMELINE,)
        ).fetchone()
        if row is None:
            raise CatalogCorruptError(f"{self.path}: the timestamp oracle has no timestamp")
        return int(row[0])

    def _initialize(self, connection: sqlite3.Connection, rows: list[Row]) -> Loaded:
        for statement in filter(str.strip, SCHEMA.split(";")):
            connection.execute(statement)
        fence = FenceToken(self.deploy_generation, 1)
        timestamp = next_timestamp(self._now(), 0)
        connection.executemany(
            "INSERT INTO config (key, value) VALUES (?, ?)",
            [
                ("version", CATALOG_VERSION),
                ("epoch", fence.epoch),
                ("deploy_generation", fence.deploy_generation),
            ],
        )
        self._apply(connection, rows)
        connection.execute(
            "INSERT INTO timestamp_oracle (timeline, ts) VALUES (?, ?)", (TIMELINE, timestamp)
        )
        return Loaded(CATALOG_VERSION, fence, timestamp, sorted(rows))

    @staticmethod
    def _apply(connection: sqlite3.Connection, writes: list[Write] | list[Row]) -> None:
        for kind, key, value in writes:
            if value is None:
                connection.execute(
                    "DELETE FROM collections WHERE kind = ? AND key = ?", (kind, key)
                )
            else:
                connection.execute(
                    "INSERT INTO collections (kind, key, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value",
                    (kind, key, value),
                )

    # DurableCatalogState primitives

    def is_initialized(self) -> bool:
        if not self.path.exists():
            return False
        with self._transaction(write=False) as connection:
            return self._has_layout(connection)

    def _load(self, *, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        with self._transaction(write=writable) as connection:
            if not self._has_layout(connection):
                if not writable:
                    raise CatalogError(f"{self.path} is not initialised")
                return self._initialize(connection, initial_rows)
            config = self._config(connection)
            stored = FenceToken(config["deploy_generation"], config["epoch"])
            rows = [
                (kind, key, value)
                for kind, key, value in connection.execute(
                    "SELECT kind, key, value FROM collections ORDER BY kind, key"
                )
            ]
            version, writes = migrate(config["version"], rows)
            ours = stored
            if writable:
                if stored.deploy_generation > self.deploy_generation:
                    raise FencedError(FenceToken(self.deploy_generation, 0), stored)
                ours = FenceToken(self.deploy_generation, stored.epoch + 1)
                connection.executemany(
                    "UPDATE config SET value = ? WHERE key = ?",
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
        with self._transaction(write=True) as connection:
            stored = self._stored_fence(connection)
            if stored != fence:
                raise FencedError(fence, stored)
            timestamp = next_timestamp(now, self._last_timestamp(connection))
            connection.execute(
                "UPDATE timestamp_oracle SET ts = ? WHERE timeline = ?", (timestamp, TIMELINE)
            )
            self._apply(connection, writes)
            return timestamp

    def _confirm_fence(self, fence: FenceToken) -> None:
        with self._transaction(write=False) as connection:
            stored = self._stored_fence(connection)
        if stored != fence:
            raise FencedError(fence, stored)

    def _read_fence(self) -> FenceToken | None:
        if not self.is_initialized():
            return None
        with self._transaction(write=False) as connection:
            return self._stored_fence(connection)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
