"""``PostgresConsensus``: consensus in a PostgreSQL table ``<schema>.consensus``.

URI: ``postgres://user:password@host:port/database?schema=loupe_consensus``
(``postgresql://`` too; ``schema`` defaults to ``loupe_consensus``, every other
query option goes to libpq as is).

The table is ``(key text primary key, seqno bigint, value bytea)``. Each
compare-and-set is ONE statement in autocommit mode: ``INSERT … ON CONFLICT DO
NOTHING`` for the first write, ``UPDATE … WHERE key = $1 AND seqno = $2``
after. Under READ COMMITTED a second ``UPDATE`` of the same row waits for the
first to commit and then re-checks its ``WHERE`` on the new row, so of two
writers expecting the same seqno exactly one updates a row.

Connections come from a small pool (one per concurrent caller), so threads
never share a connection.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import psycopg
from psycopg import sql

from loupe.persist.location import Consensus, forget_shared_consensus

DEFAULT_SCHEMA = "loupe_consensus"
CONNECT_TIMEOUT_S = 10
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class PostgresConsensus(Consensus):
    """Linearizable CAS on rows of ``<schema>.consensus`` in the database at ``url``."""

    # One pool per URI and process (see ``open_consensus``).
    shared = True

    def __init__(self, url: str, schema: str = DEFAULT_SCHEMA, *, max_idle: int = 8) -> None:
        if not IDENTIFIER.fullmatch(schema):
            raise ValueError(f"consensus schema {schema!r} is not a plain SQL identifier")
        self.url = url
        self.schema = schema
        self.uri = _with_schema(url, schema)
        self.max_idle = max_idle
        self._idle: list[psycopg.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        table = sql.SQL("{}.consensus").format(sql.Identifier(schema))
        self._head = sql.SQL("SELECT seqno, value FROM {} WHERE key = %s").format(table)
        self._create = sql.SQL(
            "INSERT INTO {} (key, seqno, value) VALUES (%s, 1, %s) ON CONFLICT (key) DO NOTHING"
        ).format(table)
        self._update = sql.SQL(
            "UPDATE {} SET seqno = %s, value = %s WHERE key = %s AND seqno = %s"
        ).format(table)
        self._ensure_table(table)

    @classmethod
    def from_uri(cls, uri: str) -> PostgresConsensus:
        url = urlparse(uri)
        options = parse_qsl(url.query, keep_blank_values=True)
        schema = next((value for key, value in options if key == "schema"), DEFAULT_SCHEMA)
        rest = urlencode([(key, value) for key, value in options if key != "schema"])
        return cls(urlunparse(url._replace(query=rest)), schema)

    def _ensure_table(self, table: sql.Composed) -> None:
        with self._connection() as connection, connection.transaction():
            # CREATE … IF NOT EXISTS races with itself in other processes
            # (duplicate catalog rows): serialise the creators.
            connection.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"loupe.consensus:{self.schema}",)
            )
            connection.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            connection.execute(
                sql.SQL(
                    'CREATE TABLE IF NOT EXISTS {} (key TEXT COLLATE "C" PRIMARY KEY,'
                    " seqno BIGINT NOT NULL, value BYTEA NOT NULL)"
                ).format(table)
            )

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"consensus {self.uri} is closed")
            connection = self._idle.pop() if self._idle else None
        if connection is None or connection.closed:
            connection = psycopg.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
        broken = False
        try:
            yield connection
        except psycopg.OperationalError:
            # The connection may be broken; a fresh one next time.
            broken = True
            raise
        finally:
            with self._lock:
                keep = not (broken or self._closed or len(self._idle) >= self.max_idle)
                if keep:
                    self._idle.append(connection)
            if not keep:
                connection.close()

    def head(self, key: str) -> tuple[int, bytes] | None:
        with self._connection() as connection:
            row = connection.execute(self._head, (key,), prepare=True).fetchone()
        return (int(row[0]), bytes(row[1])) if row else None

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        with self._connection() as connection:
            if expected is None:
                cursor = connection.execute(self._create, (key, value), prepare=True)
            else:
                cursor = connection.execute(
                    self._update, (expected + 1, value, key, expected), prepare=True
                )
            return cursor.rowcount == 1

    def compare_and_set_many(self, writes: Sequence[tuple[str, int | None, bytes]]) -> list[bool]:
        """In one transaction (one commit, one WAL flush), the keys in order: two such
        transactions over the same keys then wait for each other instead of deadlocking."""
        if not writes:
            return []
        outcomes: dict[int, bool] = {}
        order = sorted(range(len(writes)), key=lambda i: writes[i][0])
        with self._connection() as connection, connection.transaction():
            for i in order:
                key, expected, value = writes[i]
                if expected is None:
                    cursor = connection.execute(self._create, (key, value), prepare=True)
                else:
                    cursor = connection.execute(
                        self._update, (expected + 1, value, key, expected), prepare=True
                    )
                outcomes[i] = cursor.rowcount == 1
        return [outcomes[i] for i in range(len(writes))]

    def close(self) -> None:
        forget_shared_consensus(self)
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _with_schema(url: str, schema: str) -> str:
    parsed = urlparse(url)
    query = urlencode([*parse_qsl(parsed.query, keep_blank_values=True), ("schema", schema)])
    return urlunparse(parsed._replace(query=query))
