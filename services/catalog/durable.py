"""``DurableCatalogState``: the one interface every catalog backend implements.

As in seed 004: ``open`` initialises the catalog if needed and bumps the epoch;
the fence token ``(deploy_generation, epoch)`` is checked inside the same
atomic write as every commit, so a writer that another one has replaced gets a
``FencedError`` instead of corrupting the catalog. The timestamp oracle lives
in the same store and advances in the same write, so time never goes
backwards, even across restarts and clock steps.

Ways to open: ``open`` (the writer), ``open_read_only`` (no epoch bump,
commits refused), ``open_savepoint`` (no epoch bump; commits are kept in
memory and never stored) and ``check_open`` (what ``open`` would do —
initialised? migrations ok? not too new? — without opening or writing).

The base class keeps the last committed state in memory (a writer is the only
one; if it is not, its next commit is fenced); the objects live in
``loupe.catalog.objects`` and ``loupe.catalog.kinds``, the rules of
transactions in ``loupe.catalog.transaction`` and migrations in
``loupe.catalog.migrations``. A backend provides storage only, as rows
``(kind, key JSON, value JSON)`` plus its bookkeeping (version, fence token,
last timestamp), through four atomic primitives: ``_load`` (initialise, or
migrate and bump the epoch), ``_write`` (check the fence, advance the oracle,
store a diff), ``_confirm_fence`` and ``_read_fence``.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loupe.catalog.bootstrap import bootstrap_state
from loupe.catalog.errors import (
    CatalogError,
    CatalogNotInitializedError,
    CatalogReadOnlyError,
    FencedError,
)
from loupe.catalog.kinds import KINDS, kind_named, sorted_objects
from loupe.catalog.migrations import CATALOG_VERSION, Row, Write, apply_writes, migrate
from loupe.catalog.objects import (
    AuditEvent,
    CatalogSnapshot,
    Cluster,
    ClusterReplica,
    Database,
    DefaultPrivilege,
    FenceToken,
    IdAllocator,
    IntrospectionSourceIndex,
    Item,
    Role,
    Schema,
    Setting,
    StorageUsage,
    SystemConfiguration,
    SystemObjectMapping,
    SystemPrivilege,
)
from loupe.catalog.state import CatalogState
from loupe.catalog.transaction import Transaction
from loupe.common.plugins import Registry

Migrate = Callable[[int, list[Row]], tuple[int, list[Write]]]

WRITABLE, READ_ONLY, SAVEPOINT = "writable", "read-only", "savepoint"


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


@dataclass(frozen=True)
class OpenCheck:
    """What ``check_open`` found: opening would succeed."""

    # The stored version and the one opening would upgrade it to.
    stored_version: int
    version: int
    # The stored fence token (opening would bump its epoch).
    fence: FenceToken

    @property
    def upgrades(self) -> int:
        return self.version - self.stored_version


BACKENDS = Registry("loupe.catalog_backends")
DEFAULT_BACKEND = "stash-sqlite"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def next_timestamp(now: int, last: int) -> int:
    """The timestamp of a new write: the wall clock, but always after ``last``."""
    return max(now, last + 1)


class DurableCatalogState(abc.ABC):
    """The durable catalog: every object kind, the epoch fence and the timestamp oracle."""

    def __init__(self, *, deploy_generation: int = 0, now: Callable[[], int] = now_ms) -> None:
        self.deploy_generation = deploy_generation
        self._clock = now
        # While opening: the time the bootstrap objects were stamped with (see _now).
        self._pinned_now: int | None = None
        # Serialises every use of the backend (its connection is not for two threads at once).
        self._lock = threading.RLock()
        # The last committed state and its timestamp, replaced as one value so a
        # reader on another thread never pairs a state with the wrong timestamp.
        self._committed: tuple[CatalogState, int] | None = None
        self._fence: FenceToken | None = None
        self._version = CATALOG_VERSION
        self._mode: str | None = None

    def _now(self) -> int:
        """The clock, as backends must read it.

        During an open it returns the instant the bootstrap objects (their
        audit events) were stamped with, so a new catalog's first timestamp
        and its first events agree. A backend wrapping others (``shadow``)
        passes ``now=self._now`` to them.
        """
        pinned = self._pinned_now
        return self._clock() if pinned is None else pinned

    # Opening

    @abc.abstractmethod
    def is_initialized(self) -> bool:
        """Whether the catalog has been initialised (by any earlier writable open)."""

    def open(self) -> None:
        """Open for writing: initialise if needed, migrate, and take over as the writer.

        Bumps the epoch (in the same atomic write as the migrations), which
        fences any earlier writer. Raises ``FencedError`` if a newer deploy
        generation already owns the catalog, ``CatalogTooNewError`` for a
        catalog written by a newer Loupe (left untouched).
        """
        self._open(WRITABLE)

    def open_read_only(self) -> None:
        """Open without taking over: no epoch bump, and every commit is refused.

        An older catalog is migrated in memory only.
        """
        if not self.is_initialized():
            raise CatalogNotInitializedError(
                "the catalog is not initialised; it cannot be opened read-only"
            )
        self._open(READ_ONLY)

    def open_savepoint(self) -> None:
        """Open as ``open`` would, but never store anything.

        No epoch bump; migrations (and, for a new catalog, the bootstrap) are
        done in memory; commits succeed and are visible to later reads but
        live only in this object.
        """
        if self.is_initialized():
            self._open(SAVEPOINT)
            return
        with self._lock:
            timestamp = next_timestamp(self._clock(), 0)
            self._version = CATALOG_VERSION
            self._fence = FenceToken(self.deploy_generation, 0)
            self._committed = (bootstrap_state(timestamp), timestamp)
            self._mode = SAVEPOINT

    def check_open(self) -> OpenCheck:
        """Check that ``open`` would succeed, without opening or changing anything.

        Raises ``CatalogNotInitializedError`` for a catalog never opened,
        ``CatalogTooNewError`` for one from a newer Loupe,
        ``CatalogCorruptError`` when an object does not decode (after
        migrations), and ``FencedError`` when a newer deploy generation owns
        it.
        """
        if not self.is_initialized():
            raise CatalogNotInitializedError("the catalog is not initialised")
        stored: list[int] = []

        def recording(version: int, rows: list[Row]) -> tuple[int, list[Write]]:
            stored.append(version)
            return self._checked_migrate(version, rows, [])

        with self._lock:
            loaded = self._load(writable=False, initial_rows=[], migrate=recording)
        if loaded.fence.deploy_generation > self.deploy_generation:
            raise FencedError(FenceToken(self.deploy_generation, 0), loaded.fence)
        return OpenCheck(stored[0] if stored else loaded.version, loaded.version, loaded.fence)

    def _open(self, mode: str) -> None:
        with self._lock:
            boot = self._clock()
            initial_rows = list(bootstrap_state(next_timestamp(boot, 0)).rows())
            decoded: list[CatalogState] = []

            def checked(version: int, rows: list[Row]) -> tuple[int, list[Write]]:
                return self._checked_migrate(version, rows, decoded)

            self._pinned_now = boot
            try:
                loaded = self._load(
                    writable=mode == WRITABLE, initial_rows=initial_rows, migrate=checked
                )
            finally:
                self._pinned_now = None
            state = decoded[-1] if decoded else CatalogState.from_rows(loaded.rows)
            self._version = loaded.version
            self._fence = loaded.fence
            self._committed = (state, loaded.timestamp)
            self._mode = mode

    @staticmethod
    def _checked_migrate(
        version: int, rows: list[Row], decoded: list[CatalogState]
    ) -> tuple[int, list[Write]]:
        """``migrate``, then decode the result: damage stops ``_load`` before it writes."""
        new_version, writes = migrate(version, rows)
        decoded.append(CatalogState.from_rows(apply_writes(rows, writes) if writes else rows))
        return new_version, writes

    @property
    def is_open(self) -> bool:
        return self._committed is not None

    @property
    def mode(self) -> str | None:
        """``writable``, ``read-only`` or ``savepoint`` once open; None before."""
        return self._mode

    @property
    def fence(self) -> FenceToken:
        """Our fence token, as read or set at open."""
        if self._fence is None:
            raise CatalogError("the catalog is not open")
        return self._fence

    @property
    def epoch(self) -> int | None:
        """The epoch of our fence token; None until opened."""
        return None if self._fence is None else self._fence.epoch

    @property
    def version(self) -> int:
        """The catalog version of the open state (always ``CATALOG_VERSION``)."""
        return self._version

    def stored_fence(self) -> FenceToken | None:
        """The stored fence token, without opening; None when not initialised."""
        with self._lock:
            return self._read_fence()

    # Reading

    @property
    def state(self) -> CatalogState:
        return self._view()[0]

    def _view(self) -> tuple[CatalogState, int]:
        if self._committed is None:
            raise CatalogError("the catalog is not open")
        return self._committed

    def get_objects(self, kind: str) -> list[Any]:
        """Every object of ``kind`` (a ``loupe.catalog.kinds.KINDS`` name), in key order."""
        kind_named(kind)
        return sorted_objects(self.state.table(kind))  # type: ignore[arg-type]

    def get_databases(self) -> list[Database]:
        return self.get_objects("database")

    def get_schemas(self) -> list[Schema]:
        return self.get_objects("schema")

    def get_roles(self) -> list[Role]:
        return self.get_objects("role")

    def get_clusters(self) -> list[Cluster]:
        return self.get_objects("cluster")

    def get_cluster_replicas(self) -> list[ClusterReplica]:
        return self.get_objects("cluster_replica")

    def get_items(self) -> list[Item]:
        return self.get_objects("item")

    def get_introspection_source_indexes(self) -> list[IntrospectionSourceIndex]:
        return self.get_objects("introspection_source_index")

    def get_id_allocators(self) -> list[IdAllocator]:
        return self.get_objects("id_allocator")

    def get_system_configurations(self) -> list[SystemConfiguration]:
        return self.get_objects("system_configuration")

    def get_settings(self) -> list[Setting]:
        return self.get_objects("setting")

    def get_audit_logs(self) -> list[AuditEvent]:
        return self.get_objects("audit_log")

    def get_storage_usages(self) -> list[StorageUsage]:
        return self.get_objects("storage_usage")

    def get_system_object_mappings(self) -> list[SystemObjectMapping]:
        return self.get_objects("system_object_mapping")

    def get_default_privileges(self) -> list[DefaultPrivilege]:
        return self.get_objects("default_privilege")

    def get_system_privileges(self) -> list[SystemPrivilege]:
        return self.get_objects("system_privilege")

    def audit_events_after(self, after_id: int) -> list[AuditEvent]:
        """Audit events with id > ``after_id``, in id order."""
        events = self.state.table("audit_log")
        return sorted((e for key, e in events.items() if key.id > after_id), key=lambda e: e.id)

    def read_timestamp(self) -> int:
        """A timestamp at which every committed write is visible: the last write's."""
        return self._view()[1]

    def snapshot(self, new_audit_events: Iterable[AuditEvent] = ()) -> CatalogSnapshot:
        """The shared objects; ``new_audit_events`` are those of the commit it follows."""
        state, timestamp = self._view()
        return CatalogSnapshot(
            fence=self.fence,
            timestamp=timestamp,
            clusters=tuple(sorted_objects(state.table("cluster"))),  # type: ignore[arg-type]
            replicas=tuple(sorted_objects(state.table("cluster_replica"))),  # type: ignore[arg-type]
            databases=tuple(sorted_objects(state.table("database"))),  # type: ignore[arg-type]
            schemas=tuple(sorted_objects(state.table("schema"))),  # type: ignore[arg-type]
            roles=tuple(sorted_objects(state.table("role"))),  # type: ignore[arg-type]
            new_audit_events=tuple(new_audit_events),
            items=tuple(sorted_objects(state.table("item"))),  # type: ignore[arg-type]
            system_configuration=tuple(sorted_objects(state.table("system_configuration"))),  # type: ignore[arg-type]
        )

    # Writing

    def transaction(self, *, user: str = "") -> Transaction:
        """A transaction on the current state; commit it with ``commit_transaction``.

        ``user`` is recorded in the audit events the transaction causes.
        """
        return Transaction(self.state, user=user)

    def commit_transaction(self, tx: Transaction) -> int:
        """Make ``tx`` durable, all or nothing; returns its timestamp.

        Raises ``FencedError`` if another writer has opened the catalog since.
        In a savepoint the commit is kept in memory only.
        """
        with self._lock:
            if self._mode == READ_ONLY:
                raise CatalogReadOnlyError("the catalog was opened read-only")
            state, last = self._view()
            if tx.base is not state:
                # Two transactions built on the same state: the second would undo the first.
                raise CatalogError("transaction is stale: the catalog changed since it began")
            # We are the only writer (or fenced), so the stored oracle is at `last`
            # and the backend will give the commit exactly this timestamp, which
            # the audit events carry.
            timestamp = next_timestamp(self._clock(), last)
            tx.seal(timestamp)
            if self._mode != SAVEPOINT:
                timestamp = self._write(self.fence, tx.writes(), timestamp)
            self._committed = (state.updated(tx.pending()), timestamp)
            return timestamp

    def write_timestamp(self) -> int:
        """A new write timestamp from the oracle, durably after every earlier one.

        For writes that are not catalog changes (table INSERTs): a transaction
        without operations stores nothing but the advanced oracle.
        """
        with self._lock:
            return self.commit_transaction(self.transaction())

    def allocate_id(self, allocator: str) -> str:
        """Allocate and durably record one id of ``allocator`` (e.g. ``user_item``)."""
        return self.allocate_ids(allocator, 1)[0]

    def allocate_ids(self, allocator: str, amount: int) -> list[str]:
        with self._lock:
            tx = self.transaction()
            ids = [tx.allocate_id(allocator) for _ in range(amount)]
            self.commit_transaction(tx)
            return ids

    def set_system_object_mappings(self, mappings: Iterable[SystemObjectMapping]) -> bool:
        """Store the builtin objects' ids and fingerprints; True if anything changed."""
        with self._lock:
            tx = self.transaction()
            tx.set_system_object_mappings(mappings)
            if not tx.writes():
                return False
            self.commit_transaction(tx)
            return True

    def confirm_leadership(self) -> None:
        """Raise ``FencedError`` if another writer has opened the catalog since us."""
        with self._lock:
            if self._mode == SAVEPOINT and self.fence.epoch == 0:
                return  # a savepoint of a new catalog: nothing stored to compare with
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

    # Inspection

    def dump(self) -> str:
        """Everything open, as human-readable JSON.

        ``{"config": {version, epoch, deploy_generation}, "timestamp": …,
        "collections": {kind: [{"key": {…}, "value": {…}}, …]}}``; each key
        and value is the JSON ``loupe catalog edit``/``delete`` take.
        """
        state, timestamp = self._view()
        collections: dict[str, list[dict[str, Any]]] = {name: [] for name in KINDS}
        for kind, key, value in state.rows():
            collections[kind].append({"key": json.loads(key), "value": json.loads(value)})
        return _dump_json(self._version, self.fence, timestamp, collections)

    def dump_stored(self) -> str:
        """The stored rows as they are, without opening: no migration, no decoding.

        Same layout as ``dump``, with the stored version; a key or value that
        is not JSON is shown as text.
        """
        with self._lock:
            loaded = self._load(
                writable=False, initial_rows=[], migrate=lambda version, rows: (version, [])
            )
        collections: dict[str, list[dict[str, Any]]] = {}
        for kind, key, value in sorted(loaded.rows):
            collections.setdefault(kind, []).append(
                {"key": _json_or_text(key), "value": _json_or_text(value)}
            )
        return _dump_json(loaded.version, loaded.fence, loaded.timestamp, collections)

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; idempotent."""


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _dump_json(version: int, fence: FenceToken, timestamp: int, collections: dict[str, Any]) -> str:
    """The dump as JSON with one line per object, so a key or value is easy to copy."""
    config = {
        "version": version,
        "epoch": fence.epoch,
        "deploy_generation": fence.deploy_generation,
    }
    lines = [
        "{",
        f'  "config": {json.dumps(config)},',
        f'  "timestamp": {json.dumps(timestamp)},',
        '  "collections": {',
    ]
    kinds = list(collections.items())
    for index, (kind, entries) in enumerate(kinds):
        closing = "," if index < len(kinds) - 1 else ""
        if not entries:
            lines.append(f"    {json.dumps(kind)}: []{closing}")
            continue
        lines.append(f"    {json.dumps(kind)}: [")
        lines.extend(
            f"      {json.dumps(entry)}{',' if i < len(entries) - 1 else ''}"
            for i, entry in enumerate(entries)
        )
        lines.append(f"    ]{closing}")
    lines += ["  }", "}"]
    return "\n".join(lines)


def state_rows(state: CatalogState) -> Iterable[Row]:
    """``state`` as stored rows (``CatalogState.rows``)."""
    return state.rows()


def state_from_rows(rows: Iterable[Row]) -> CatalogState:
    """Decode stored rows (``CatalogState.from_rows``); damage is a ``CatalogCorruptError``."""
    return CatalogState.from_rows(rows)


def create_backend(
    name: str,
    data_dir: Path,
    *,
    deploy_generation: int = 0,
    now: Callable[[], int] = now_ms,
    **options: Any,
) -> DurableCatalogState:
    """Construct (not open) the catalog backend registered as ``name``.

    ``options`` are the backend's own keyword options (e.g. a PostgreSQL URL).
    """
    backend = BACKENDS.load(name)
    return backend(data_dir, deploy_generation=deploy_generation, now=now, **options)
