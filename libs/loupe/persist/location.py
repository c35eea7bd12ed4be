"""Where shards live: a Blob store for parts and a Consensus store for state.

Built-ins: a local directory blob (``file://``) and a SQLite consensus
(``sqlite://``). The storage issue adds S3 through ``pyarrow.fs``, NATS KV and
PostgreSQL consensus behind the same interfaces.
"""

from __future__ import annotations

import abc
import os
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse


class Blob(abc.ABC):
    """Immutable objects by key."""

    uri: str

    @abc.abstractmethod
    def path(self, key: str) -> str:
        """A path pyarrow and Spark can read and write ``key`` at."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None: ...

    def new_key(self, shard_id: str, suffix: str = ".parquet") -> str:
        return f"{shard_id}/{uuid.uuid4().hex}{suffix}"


class LocalBlob(Blob):
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.uri = f"file://{self.root}"

    def path(self, key: str) -> str:
        return str(self.root / key)

    def put(self, key: str, data: bytes) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        with open(scratch, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        scratch.replace(target)
        # The rename is durable only once its directory is: consensus will
        # point at this part as soon as we return.
        fsync_directory(target.parent)

    def exists(self, key: str) -> bool:
        return (self.root / key).exists()

    def delete(self, key: str) -> None:
        target = self.root / key
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


class Consensus(abc.ABC):
    """Linearizable compare-and-set of versioned values by key."""

    uri: str

    @abc.abstractmethod
    def head(self, key: str) -> tuple[int, bytes] | None:
        """The latest (seqno, value) of ``key``, or None."""

    @abc.abstractmethod
    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        """Write ``value`` as seqno ``expected + 1`` (or 1) iff the head is ``expected``."""


class SqliteConsensus(Consensus):
    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite://{self.path}"
        self._local = threading.local()
        with self._connection() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS consensus ("
                " key TEXT PRIMARY KEY, seqno INTEGER NOT NULL, value BLOB NOT NULL)"
            )

    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            _switch_to_wal(connection)
            connection.execute("PRAGMA synchronous=FULL")
            self._local.connection = connection
        return connection

    def head(self, key: str) -> tuple[int, bytes] | None:
        row = (
            self._connection()
            .execute("SELECT seqno, value FROM consensus WHERE key = ?", (key,))
            .fetchone()
        )
        return (int(row[0]), bytes(row[1])) if row else None

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT seqno FROM consensus WHERE key = ?", (key,)).fetchone()
            current = int(row[0]) if row else None
            if current != expected:
                db.execute("ROLLBACK")
                return False
            db.execute(
                "INSERT INTO consensus (key, seqno, value) VALUES (?, ?, ?)"
                " ON CONFLICT(key) DO UPDATE SET seqno = excluded.seqno, value = excluded.value",
                (key, (expected or 0) + 1, value),
            )
            db.execute("COMMIT")
            return True
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _switch_to_wal(connection: sqlite3.Connection, timeout: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, waiting out connections that create the file with us.

    On a new, empty database the switch fails at once with "database is
    locked" when another connection is creating it at the same moment: SQLite
    does not call the busy handler there. WAL mode is stored in the file, so
    retrying until one of us has switched it is enough.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def open_location(blob_uri: str, consensus_uri: str) -> tuple[Blob, Consensus]:
    """Open the blob and consensus stores named by URI."""
    blob_url = urlparse(blob_uri)
    if blob_url.scheme != "file":
        raise ValueError(f"unsupported blob URI {blob_uri!r} (expected file://)")
    consensus_url = urlparse(consensus_uri)
    if consensus_url.scheme != "sqlite":
        raise ValueError(f"unsupported consensus URI {consensus_uri!r} (expected sqlite://)")
    return LocalBlob(Path(blob_url.path)), SqliteConsensus(
        Path(consensus_url.netloc + consensus_url.path)
    )


def default_uris(data_dir: Path) -> tuple[str, str]:
    storage = Path(data_dir).resolve() / "storage"
    return f"file://{storage / 'blob'}", f"sqlite://{storage / 'consensus.sqlite'}"


def _fsync(path: str | Path, flags: int = os.O_RDONLY) -> None:
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_directory(path: str | Path) -> None:
    """Make renames and creations inside ``path`` durable."""
    _fsync(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_tree(path: str | Path) -> None:
    """fsync every file and directory below ``path``, and ``path``'s own entry.

    For parts written by other writers (Spark does not fsync its output).
    """
    if not os.path.isdir(path):
        return
    for directory, _, files in os.walk(path):
        for name in files:
            _fsync(os.path.join(directory, name))
        fsync_directory(directory)
    fsync_directory(os.path.dirname(str(path).rstrip("/")))
