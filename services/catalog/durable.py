"""``DurableCatalogState``: the one interface every catalog backend implements.

As in seed 004: ``open`` initialises the catalog if needed and bumps the epoch;
the fence token ``(deploy_generation, epoch)`` is checked inside the same
atomic write as every commit, so a writer that another one has replaced gets a
``FencedError`` instead of corrupting the catalog. The timestamp oracle lives
in the same store and advances in the same write, so time never goes
backwards, even across restarts and clock steps.

The base class keeps the last committed state in memory (a writer is the only
one; if it is not, its next commit is fenced), the rules of transactions live
in ``loupe.catalog.transaction`` and migrations in ``loupe.catalog.migrations``.
A backend provides storage only, as rows ``(kind, key JSON, value JSON)`` plus
its bookkeeping (version, fence token, last timestamp), through four atomic
primitives: ``_load`` (initialise, or migrate and bump the epoch), ``_write``
(check the fence, advance the oracle, store a diff), ``_confirm_fence`` and
``_read_fence``.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loupe.catalog.errors import CatalogCorruptError, CatalogError, CatalogReadOnlyError
from loupe.catalog.migrations import CATALOG_VERSION, Row, Write, migrate
from loupe.catalog.objects import CatalogSnapshot, Cluster, ClusterReplica, FenceToken
from loupe.catalog.transaction import CatalogState, Transaction, bootstrap_state
from loupe.common.plugins import Registry

# Stored collections: kind -> attribute of CatalogState.
KINDS = {"cluster": "clusters", "cluster_replica": "replicas", "id_allocator": "id_allocators"}
Migrate = Callable[[int, list[Row]], tuple[int, list[Write]]]


@dataclass
class Loaded:
    """What ``_load`` read (and, for a writable open, wrote)."""

    version: int
    # Ours after a writable open (bumped), the stored one otherwise.
    fence: FenceToken
    # The last write timestamp of the oracle.
    timestamp: int
    # Every object row, migrations applied.
    rows: list[Row]


BACKENDS = Registry("loupe.catalog_backends")
DEFAULT_BACKEND = "stash-sqlite"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def next_timestamp(now: int, last: int) -> int:
    """The timestamp of a new write: the wall clock, but always after ``last``."""
    return max(now, last + 1)


class DurableCatalogState(abc.ABC):
    """The durable catalog: clusters, replicas, id allocators, epoch and timestamps."""

    def __init__(self, *, deploy_generation: int = 0, now: Callable[[], int] = now_ms) -> None:
        self.deploy_generation = deploy_generation
        self._now = now
        self._lock = threading.Lock()
        # The last committed state and its timestamp, replaced as one value so a
        # reader on another thread never pairs a state with the wrong timestamp.
        self._committed: tuple[CatalogState, int] | None = None
        self._fence: FenceToken | None = None
        self._version = CATALOG_VERSION
        self._read_only = False

    # Opening

    @abc.abstractmethod
    def is_initialized(self) -> bool:
        """Whether the catalog has been initialised (by any earlier writable open)."""

    def open(self) -> None:
        """Open for writing: initialise if needed and take over as the writer.

        Bumps the epoch, which fences any earlier writer. Raises
        ``FencedError`` if a newer deploy generation already owns the catalog.
        """
        self._open(writable=True)

    def open_read_only(self) -> None:
        """Open without taking over: no epoch bump, and every write is refused."""
        if not self.is_initialized():
            raise CatalogError("the catalog is not initialised; it cannot be opened read-only")
        self._open(writable=False)

    def _open(self, *, writable: bool) -> None:
        with self._lock:
            loaded = self._load(
                writable=writable, initial_rows=list(state_rows(bootstrap_state())), migrate=migrate
            )
            self._version = loaded.version
            self._fence = loaded.fence
            self._committed = (state_from_rows(loaded.rows), loaded.timestamp)
            self._read_only = not writable

    @property
    def is_open(self) -> bool:
        return self._committed is not None

    @property
    def fence(self) -> FenceToken:
        """Our fence token, as read or set at open."""
        if self._fence is None:
            raise CatalogError("the catalog is not open")
        return self._fence

    @property
    def epoch(self) -> int:
        return self.fence.epoch

    # Reading

    @property
    def state(self) -> CatalogState:
        return self._view()[0]

    def _view(self) -> tuple[CatalogState, int]:
        if self._committed is None:
            raise CatalogError("the catalog is not open")
        return self._committed

    def get_clusters(self) -> list[Cluster]:
        return sorted(self.state.clusters.values(), key=_id_order)

    def get_cluster_replicas(self) -> list[ClusterReplica]:
        return sorted(self.state.replicas.values(), key=_id_order)

    def read_timestamp(self) -> int:
        """A timestamp at which every committed write is visible: the last write's."""
        return self._view()[1]

    def snapshot(self) -> CatalogSnapshot:
        state, timestamp = self._view()
        return CatalogSnapshot(
            fence=self.fence,
            timestamp=timestamp,
            clusters=tuple(sorted(state.clusters.values(), key=_id_order)),
            replicas=tuple(sorted(state.replicas.values(), key=_id_order)),
        )

    # Writing

    def transaction(self) -> Transaction:
        """A transaction on the current state; commit it with ``commit_transaction``."""
        return Transaction(self.state)

    def commit_transaction(self, tx: Transaction) -> int:
        """Make ``tx`` durable, all or nothing; returns its timestamp.

        Raises ``FencedError`` if another writer has opened the catalog since.
        """
        with self._lock:
            if self._read_only:
                raise CatalogReadOnlyError("the catalog was opened read-only")
            if tx.base is not self.state:
                # Two transactions built on the same state: the second would undo the first.
                raise CatalogError("transaction is stale: the catalog changed since it began")
            writes = list(state_diff(tx.base, tx.state))
            timestamp = self._write(self.fence, writes, self._now())
            self._committed = (tx.state, timestamp)
            return timestamp

    def confirm_leadership(self) -> None:
        """Raise ``FencedError`` if another writer has opened the catalog since us."""
        with self._lock:
            self._confirm_fence(self.fence)

    # Backend primitives

    @abc.abstractmethod
    def _load(self, *, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        """Read the catalog, atomically with what a writable open writes.

        Not initialised: if ``writable`` store ``initial_rows`` at version
        ``CATALOG_VERSION`` with fence ``(self.deploy_generation, 1)`` and
        timestamp ``next_timestamp(self._now(), 0)``; else raise CatalogError.
        Initialised: read version, fence, timestamp and rows, then
        ``(version, writes) = migrate(version, rows)`` (it raises for a newer
        catalog). If ``writable``: a stored deploy generation newer than ours
        raises ``FencedError``; otherwise store fence
        ``(self.deploy_generation, stored epoch + 1)``, the new version and
        ``writes`` in the same atomic write. Either way return the rows with
        ``writes`` applied (``migrations.apply_writes``); a read-only load
        writes nothing.
        """

    @abc.abstractmethod
    def _write(self, fence: FenceToken, writes: list[Write], now: int) -> int:
        """Atomically: check ``fence`` is current, advance the oracle, apply ``writes``.

        Returns the new write timestamp, ``next_timestamp(now, last)``.
        """

    @abc.abstractmethod
    def _confirm_fence(self, fence: FenceToken) -> None:
        """Raise ``FencedError`` unless ``fence`` is the stored token."""

    @abc.abstractmethod
    def _read_fence(self) -> FenceToken | None:
        """The stored fence token without opening, or None when not initialised."""

    def dump(self) -> str:
        """Everything open, as human-readable JSON (keys and values as stored)."""
        state, timestamp = self._view()
        collections: dict[str, dict[str, Any]] = {}
        for kind, key, value in sorted(state_rows(state)):
            collections.setdefault(kind, {})[key] = json.loads(value)
        fence = self.fence
        config = {
            "version": self._version,
            "epoch": fence.epoch,
            "deploy_generation": fence.deploy_generation,
        }
        return json.dumps(
            {"config": config, "timestamp": timestamp, "collections": collections}, indent=2
        )

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; idempotent."""


def _id_order(obj: Cluster | ClusterReplica) -> tuple[str, int]:
    # s1 < s2 < s10 < u1: system objects first, then numerically.
    digits = obj.id[1:]
    return (obj.id[:1], int(digits) if digits.isdigit() else 0)


def state_rows(state: CatalogState) -> Iterator[Row]:
    """``state`` as stored rows."""
    for kind, attribute in KINDS.items():
        for key, value in getattr(state, attribute).items():
            yield kind, key, _encode(value)


def state_diff(base: CatalogState, new: CatalogState) -> Iterator[Write]:
    """The writes that turn ``base`` into ``new``."""
    for kind, attribute in KINDS.items():
        before, after = getattr(base, attribute), getattr(new, attribute)
        for key in sorted(before.keys() | after.keys()):
            if key not in after:
                yield kind, key, None
            elif before.get(key) != after[key]:
                yield kind, key, _encode(after[key])


def state_from_rows(rows: Iterable[Row]) -> CatalogState:
    """Rebuild the state from stored rows; damage is a ``CatalogCorruptError``."""
    state = CatalogState()
    for kind, key, value in rows:
        try:
            decoded = json.loads(value)
            if kind == "cluster":
                state.clusters[key] = Cluster.from_json(decoded)
            elif kind == "cluster_replica":
                state.replicas[key] = ClusterReplica.from_json(decoded)
            elif kind == "id_allocator":
                state.id_allocators[key] = int(decoded)
            else:
                raise ValueError(f"unknown kind {kind!r}")
        except (ValueError, KeyError, TypeError) as error:
            raise CatalogCorruptError(f"catalog entry {kind}/{key} is damaged: {error}") from error
    return state


def _encode(value: Any) -> str:
    plain = value.to_json() if hasattr(value, "to_json") else value
    return json.dumps(plain, sort_keys=True)


def create_backend(
    name: str, data_dir: Path, *, deploy_generation: int = 0, now: Callable[[], int] = now_ms
) -> DurableCatalogState:
    """Construct (not open) the catalog backend registered as ``name``."""
    backend = BACKENDS.load(name)
    return backend(data_dir, deploy_generation=deploy_generation, now=now)
