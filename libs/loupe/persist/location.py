"""Where shards live: a Blob store for parts and a Consensus store for state.

Both are plugins chosen by URI scheme (entry-point groups ``loupe.blob`` and
``loupe.consensus``; ``open_location`` resolves a pair):

- blob ``file://<dir>`` (``LocalBlob``, the default), ``s3://bucket/prefix?…``
  and ``arrowfs-local://<dir>`` (``ArrowFsBlob`` over any ``pyarrow.fs``
  filesystem, see ``loupe.persist.arrowfs``);
- consensus ``sqlite://<file>`` (``SqliteConsensus``, the default of
  ``default_uris``), ``postgres://``/``postgresql://`` (``PostgresConsensus``)
  and ``nats://host:port/bucket`` (``NatsKvConsensus``, JetStream KV).

Every consensus passes one conformance suite (libs/tests/test_persist_conformance.py).
"""

from __future__ import annotations

import abc
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from loupe.common.plugins import PluginError, Registry

# Built-ins are also declared as entry points in pyproject.toml; naming them
# here too keeps the default location working in a checkout whose installed
# metadata predates them.
BLOB_PLUGINS = Registry(
    "loupe.blob",
    builtins={
        "file": "loupe.persist.location:LocalBlob",
        "s3": "loupe.persist.arrowfs:ArrowFsBlob",
        "arrowfs-local": "loupe.persist.arrowfs:ArrowFsBlob",
    },
)
CONSENSUS_PLUGINS = Registry(
    "loupe.consensus",
    builtins={
        "sqlite": "loupe.persist.location:SqliteConsensus",
        "postgres": "loupe.persist.postgres:PostgresConsensus",
        "postgresql": "loupe.persist.postgres:PostgresConsensus",
        "nats": "loupe.persist.nats_kv:NatsKvConsensus",
    },
)


class ValueTooLarge(ValueError):
    """A consensus value over what the store accepts (e.g. NATS' max payload)."""


class Blob(abc.ABC):
    """Immutable objects by key (a part is one object, or a directory of them as Spark writes).

    Plugins are built from a URI by ``from_uri``; ``filesystem_path`` is how
    readers (pyarrow.parquet) reach an object without assuming local paths.
    """

    uri: str

    @classmethod
    def from_uri(cls, uri: str) -> Blob:
        """The blob named by ``uri`` (one of the schemes this plugin is registered for)."""
        raise NotImplementedError(f"{cls.__name__} cannot be opened by URI")

    @abc.abstractmethod
    def path(self, key: str) -> str:
        """Where ``key`` lives, for writers that take a path or URI (Spark, pyarrow)."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` atomically: readers see all of it or nothing."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` (an object or a directory of them); a missing key is fine."""

    def filesystem_path(self, key: str) -> tuple[pafs.FileSystem, str]:
        """A ``pyarrow.fs`` filesystem and the path of ``key`` in it, for readers."""
        return pafs.FileSystem.from_uri(self.path(key))

    def get(self, key: str) -> bytes:
        """The bytes of the object at ``key``; FileNotFoundError if there is none."""
        filesystem, path = self.filesystem_path(key)
        info = filesystem.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"blob {self.uri}: no object {key!r}")
        if info.type != pafs.FileType.File:
            raise IsADirectoryError(f"blob {self.uri}: {key!r} is a directory of objects")
        with filesystem.open_input_stream(path) as stream:
            return stream.read()

    def new_key(self, shard_id: str, suffix: str = ".parquet") -> str:
        return f"{shard_id}/{uuid.uuid4().hex}{suffix}"

    def close(self) -> None:  # noqa: B027 - most blobs hold nothing to release
        """Release connections; the default holds none."""


class LocalBlob(Blob):
    """A local directory; puts are fsynced with their directory entry (durable on return)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.uri = f"file://{self.root}"
        self._filesystem = pafs.LocalFileSystem()

    @classmethod
    def from_uri(cls, uri: str) -> LocalBlob:
        url = urlparse(uri)
        return cls(Path(url.netloc + url.path))

    def path(self, key: str) -> str:
        return str(self.root / key)

    def filesystem_path(self, key: str) -> tuple[pafs.FileSystem, str]:
        return self._filesystem, self.path(key)

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def put(self, key: str, data: bytes) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(scratch, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            scratch.replace(target)
        finally:
            scratch.unlink(missing_ok=True)
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
    """Linearizable compare-and-set of versioned values by key.

    A key's seqno starts at 1 with its first value and grows by one with each
    successful ``compare_and_set``; of several writers expecting the same seqno
    exactly one succeeds.
    """

    uri: str

    @classmethod
    def from_uri(cls, uri: str) -> Consensus:
        """The consensus named by ``uri`` (one of the schemes this plugin is registered for)."""
        raise NotImplementedError(f"{cls.__name__} cannot be opened by URI")

    @abc.abstractmethod
    def head(self, key: str) -> tuple[int, bytes] | None:
        """The latest (seqno, value) of ``key``, or None."""

    @abc.abstractmethod
    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        """Write ``value`` as seqno ``expected + 1`` (or 1) iff the head is ``expected``.

        False when another writer got there first. An exception (a lost
        connection, a timeout) leaves the outcome unknown: read ``head`` to
        learn it.
        """

    def heads(self, keys: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        """``head`` of each of ``keys`` that has a value (a backend may read them at once)."""
        found = {}
        for key in keys:
            head = self.head(key)
            if head is not None:
                found[key] = head
        return found

    def compare_and_set_many(self, writes: Sequence[tuple[str, int | None, bytes]]) -> list[bool]:
        """``compare_and_set`` of each ``(key, expected, value)``, for distinct keys; the
        outcome of each, in order.

        Each write succeeds or fails on its own, as if made alone; a backend may
        make the successful ones durable together (SQLite: one transaction, one
        sync, instead of one each). An exception leaves every outcome unknown.
        """
        return [self.compare_and_set(key, expected, value) for key, expected, value in writes]

    def close(self) -> None:  # noqa: B027 - a store without connections has nothing to do
        """Release connections and threads; the default holds none."""


class SqliteConsensus(Consensus):
    """A table (key, seqno, value) in a SQLite file (WAL, synchronous=FULL)."""

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

    @classmethod
    def from_uri(cls, uri: str) -> SqliteConsensus:
        url = urlparse(uri)
        return cls(Path(url.netloc + url.path))

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

    def heads(self, keys: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        found: dict[str, tuple[int, bytes]] = {}
        db = self._connection()
        for start in range(0, len(keys), _SQLITE_VARIABLES):
            chunk = keys[start : start + _SQLITE_VARIABLES]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key, seqno, value FROM consensus WHERE key IN ({marks})"
            for key, seqno, value in db.execute(query, tuple(chunk)):
                found[key] = (int(seqno), bytes(value))
        return found

    def compare_and_set(self, key: str, expected: int | None, value: bytes) -> bool:
        return self.compare_and_set_many([(key, expected, value)])[0]

    def compare_and_set_many(self, writes: Sequence[tuple[str, int | None, bytes]]) -> list[bool]:
        """All in one transaction: one WAL sync for every write that succeeds."""
        if not writes:
            return []
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            outcomes = []
            for key, expected, value in writes:
                row = db.execute("SELECT seqno FROM consensus WHERE key = ?", (key,)).fetchone()
                current = int(row[0]) if row else None
                outcomes.append(current == expected)
                if current != expected:
                    continue
                db.execute(
                    "INSERT INTO consensus (key, seqno, value) VALUES (?, ?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET seqno = excluded.seqno,"
                    " value = excluded.value",
                    (key, (expected or 0) + 1, value),
                )
            db.execute("COMMIT" if any(outcomes) else "ROLLBACK")
            return outcomes
        except BaseException:
            db.execute("ROLLBACK")
            raise


# Keys per ``heads`` query: SQLite's least limit on a statement's variables.
_SQLITE_VARIABLES = 999


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


def _scheme(uri: str, kind: str, registry: Registry) -> str:
    scheme = urlparse(uri).scheme
    if not scheme:
        raise ValueError(f"{kind} URI {uri!r} has no scheme (known: {', '.join(registry.names())})")
    return scheme


def _plugin(uri: str, kind: str, registry: Registry) -> Any:
    scheme = _scheme(uri, kind, registry)
    try:
        return registry.load(scheme)
    except PluginError as error:
        if scheme not in registry.names():
            raise ValueError(
                f"unsupported {kind} URI {uri!r}: unknown scheme {scheme!r} "
                f"(known: {', '.join(registry.names())})"
            ) from error
        raise


def open_blob(uri: str) -> Blob:
    """The blob store named by ``uri``, by its scheme (registry group ``loupe.blob``)."""
    return _plugin(uri, "blob", BLOB_PLUGINS).from_uri(uri)


# Consensus plugins that hold connections (a pool, a client thread) are opened
# once per URI and process: callers open locations freely.
_shared_consensus: dict[str, Consensus] = {}
_shared_lock = threading.Lock()


def open_consensus(uri: str) -> Consensus:
    """The consensus store named by ``uri``, by its scheme (registry group ``loupe.consensus``).

    Plugins with ``shared = True`` are opened once per URI and process.
    """
    plugin = _plugin(uri, "consensus", CONSENSUS_PLUGINS)
    if not getattr(plugin, "shared", False):
        return plugin.from_uri(uri)
    with _shared_lock:
        opened = _shared_consensus.get(uri)
        if opened is None:
            opened = plugin.from_uri(uri)
            _shared_consensus[uri] = opened
        return opened


def close_consensus(uri: str) -> None:
    """Close the consensus ``open_consensus(uri)`` shares, if it opened one."""
    with _shared_lock:
        opened = _shared_consensus.pop(uri, None)
    if opened is not None:
        opened.close()


def forget_shared_consensus(consensus: Consensus) -> None:
    """Stop handing out ``consensus`` from ``open_consensus`` (it was closed)."""
    with _shared_lock:
        for uri, opened in list(_shared_consensus.items()):
            if opened is consensus:
                del _shared_consensus[uri]


def open_location(blob_uri: str, consensus_uri: str) -> tuple[Blob, Consensus]:
    """Open the blob and consensus stores named by URI (see the module doc for schemes)."""
    return open_blob(blob_uri), open_consensus(consensus_uri)


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
