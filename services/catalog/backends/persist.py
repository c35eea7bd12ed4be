"""``persist``: the catalog as one persist shard (seed 004, "Persist Implementation").

The whole catalog is one ``loupe.persist.Shard`` of updates to rows
``(kind text, key text, value text)``: a changed object is the retraction of
its old row and the addition of its new one. The bookkeeping is rows like any
other, written in the same appends as the objects they go with:
``config/version``, ``config/epoch``, ``config/deploy_generation`` and
``timestamp/oracle`` (the last write timestamp), values as JSON.

Every change is ONE ``compare_and_append`` at the upper we cached when we
last read or wrote, so it lands only if nothing else was written since: that
is the fence check inside the atomic write. A losing writer re-reads the
shard; if the stored fence is no longer its own it is fenced (seed:
``confirm_leadership`` compares the shard's upper with the cached one), and
if it still is (a cooperative edit kept the epoch) it retries on top.

Shard times follow the catalog's write timestamps: a commit at catalog
timestamp ``t`` is written at shard time ``max(t, upper)``, which is ``t``
unless an open since the last commit already took that shard time (a clock
standing still or behind). Opens bump the epoch without consuming a catalog
timestamp (the oracle says when the last *commit* was, and the next one gets
``last + 1`` even then), so an open's shard time is ``max(now, upper)`` and
``rows_as_of(t)`` maps a catalog timestamp to a shard time through the
history of the oracle row.

The committed contents live in memory (the seed's cache) along with the
upper. Every append adds a part; once there are more than ``max_parts``, the
newest are compacted (``parts_to_merge``, ``Shard.compact``) down to half as
many, keeping ``history_ms`` of history readable as of past timestamps, so an
open reads a bounded number of parts.

Options (``create_backend("persist", data_dir, **options)``): ``blob_uri`` and
``consensus_uri`` (default: the storage location of ``data_dir``),
``shard_id`` (``catalog``), ``max_parts`` (16) and ``history_ms`` (one hour).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from loupe.catalog.durable import DurableCatalogState, Loaded, Migrate, next_timestamp, now_ms
from loupe.catalog.errors import (
    CatalogCorruptError,
    CatalogError,
    CatalogNotInitializedError,
    FencedError,
)
from loupe.catalog.migrations import CATALOG_VERSION, Row, Write, apply_writes
from loupe.catalog.objects import FenceToken
from loupe.catalog.state import CatalogState
from loupe.common.logging import get_logger
from loupe.persist import (
    DIFF_COLUMN,
    TIMESTAMP_COLUMN,
    Shard,
    ShardState,
    SinceError,
    UpperMismatch,
    consolidate,
    open_location,
    parts_to_merge,
)
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema

log = get_logger(__name__)

COLUMNS = [("kind", "text"), ("key", "text"), ("value", "text")]
SCHEMA = arrow_schema(COLUMNS)
DEFAULT_SHARD_ID = "catalog"
VERSION, EPOCH, DEPLOY_GENERATION = (
    ("config", "version"),
    ("config", "epoch"),
    ("config", "deploy_generation"),
)
ORACLE = ("timestamp", "oracle")
BOOKKEEPING = (VERSION, EPOCH, DEPLOY_GENERATION, ORACLE)
# A lost compare_and_append means someone else wrote in between; with a handful
# of writers at most, a few re-reads settle it.
ATTEMPTS = 5
DEFAULT_MAX_PARTS = 16
DEFAULT_HISTORY_MS = 60 * 60 * 1000

Contents = dict[tuple[str, str], str]


class PersistCatalogBackend(DurableCatalogState):
    """The durable catalog in one persist shard, cached in memory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        deploy_generation: int = 0,
        now: Callable[[], int] = now_ms,
        blob_uri: str | None = None,
        consensus_uri: str | None = None,
        shard_id: str = DEFAULT_SHARD_ID,
        max_parts: int | str = DEFAULT_MAX_PARTS,
        history_ms: int | str = DEFAULT_HISTORY_MS,
    ) -> None:
        super().__init__(deploy_generation=deploy_generation, now=now)
        default_blob, default_consensus = default_uris(data_dir)
        self.blob_uri = blob_uri or default_blob
        self.consensus_uri = consensus_uri or default_consensus
        self.shard_id = shard_id
        # Options may arrive as text from a command line.
        self.max_parts = int(max_parts)
        self.history_ms = int(history_ms)
        self._handle: Shard | None = None
        # Everything in the shard below ``_upper``, bookkeeping included.
        self._contents: Contents = {}
        self._upper = 0

    @property
    def _shard(self) -> Shard:
        # Opened lazily so that constructing a backend touches no files.
        if self._handle is None:
            blob, consensus = open_location(self.blob_uri, self.consensus_uri)
            self._handle = Shard(self.shard_id, blob, consensus)
        return self._handle

    @property
    def upper(self) -> int:
        """The shard's upper as of our last read or write."""
        return self._upper

    # Reading the shard

    def _describe(self) -> str:
        return f"shard {self.shard_id!r} in {self.consensus_uri}"

    def _check_layout(self, state: ShardState) -> None:
        if [tuple(column) for column in state.columns] != COLUMNS:
            raise CatalogCorruptError(
                f"{self._describe()} is not a Loupe catalog (its columns are "
                f"{', '.join(f'{name} {kind}' for name, kind in state.columns) or 'none'}); "
                "refusing to touch it"
            )

    def _read(self, as_of: int | None = None) -> tuple[Contents, ShardState]:
        """The shard's contents at ``as_of`` (default: everything written)."""
        table, state = self._shard.snapshot_with_state(as_of)
        return self._contents_of(table), state

    def _contents_of(self, table: pa.Table) -> Contents:
        kinds, keys, values, diffs = (
            table.column(name).to_pylist() for name in ("kind", "key", "value", DIFF_COLUMN)
        )
        contents: Contents = {}
        for kind, key, value, diff in zip(kinds, keys, values, diffs, strict=True):
            if diff != 1 or kind is None or key is None or value is None:
                raise CatalogCorruptError(
                    f"{self._describe()}: catalog entry {kind}/{key} has multiplicity {diff}"
                )
            if (kind, key) in contents:
                raise CatalogCorruptError(
                    f"{self._describe()}: catalog entry {kind}/{key} has two values"
                )
            contents[(kind, key)] = value
        return contents

    def _config(self, contents: Contents, entry: tuple[str, str]) -> int:
        if entry not in contents:
            raise CatalogCorruptError(f"{self._describe()}: the catalog lacks {'/'.join(entry)}")
        try:
            return int(json.loads(contents[entry]))
        except (ValueError, TypeError) as error:
            raise CatalogCorruptError(
                f"{self._describe()}: {'/'.join(entry)} is damaged: {error}"
            ) from error

    def _fence_of(self, contents: Contents) -> FenceToken:
        return FenceToken(self._config(contents, DEPLOY_GENERATION), self._config(contents, EPOCH))

    @staticmethod
    def _objects(contents: Contents) -> list[Row]:
        return sorted(
            (kind, key, value)
            for (kind, key), value in contents.items()
            if (kind, key) not in BOOKKEEPING
        )

    def _catch_up(self) -> None:
        """Re-read the shard into the cache: someone else wrote since we last did."""
        self._contents, state = self._read()
        self._upper = state.upper

    # Writing the shard

    def _append(self, writes: Iterable[Write], wanted_time: int) -> None:
        """Write ``writes`` in ONE compare_and_append at our cached upper.

        The shard time is ``wanted_time`` or, if that is already past, the
        upper. Raises ``UpperMismatch`` (and changes nothing) if anything was
        written since our last read or write.
        """
        final: dict[tuple[str, str], str | None] = {}
        for kind, key, value in writes:
            final[(kind, key)] = value
        changed = {
            entry: value for entry, value in final.items() if self._contents.get(entry) != value
        }
        time = max(wanted_time, self._upper)
        kinds: list[str] = []
        keys: list[str] = []
        values: list[str] = []
        diffs: list[int] = []
        for (kind, key), value in changed.items():
            # A change is the retraction of the old row and the addition of the new one.
            for row_value, diff in ((self._contents.get((kind, key)), -1), (value, 1)):
                if row_value is not None:
                    kinds.append(kind)
                    keys.append(key)
                    values.append(row_value)
                    diffs.append(diff)
        table = pa.table(
            {
                "kind": kinds,
                "key": keys,
                "value": values,
                TIMESTAMP_COLUMN: [time] * len(kinds),
                DIFF_COLUMN: diffs,
            },
            schema=SCHEMA,
        )
        state = self._shard.compare_and_append(table, self._upper, time + 1)
        # Durable: now the cache follows, in place (a commit costs what it changed).
        for entry, value in changed.items():
            if value is None:
                del self._contents[entry]
            else:
                self._contents[entry] = value
        self._upper = time + 1
        self._maybe_compact(state)

    def _maybe_compact(self, state: ShardState) -> None:
        parts = parts_to_merge(state.parts, self.max_parts)
        if not parts:
            return
        since = max(0, self._upper - 1 - self.history_ms)
        try:
            self._shard.compact(since, parts)
        except Exception:
            # The commit is durable already; the next one tries again.
            log.exception("catalog shard compaction failed", shard_id=self.shard_id)

    # DurableCatalogState primitives

    def is_initialized(self) -> bool:
        state = self._shard.state(missing_ok=True)
        return state is not None and state.upper > 0

    def _load(self, *, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        for _ in range(ATTEMPTS):
            try:
                return self._try_load(writable, initial_rows, migrate)
            except UpperMismatch:
                # Another open or commit landed between our read and our write.
                continue
        raise CatalogError(
            f"{self._describe()}: could not open the catalog, {ATTEMPTS} attempts "
            "lost to concurrent writers"
        )

    def _try_load(self, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        state = self._shard.state(missing_ok=True)
        if state is None or state.upper == 0:
            if not writable:
                raise CatalogNotInitializedError(f"{self._describe()} is not initialised")
            state = self._shard.ensure(COLUMNS)
            self._check_layout(state)
            return self._initialize(initial_rows, state)
        self._check_layout(state)
        contents, state = self._read()
        stored = self._fence_of(contents)
        timestamp = self._config(contents, ORACLE)
        rows = self._objects(contents)
        version, writes = migrate(self._config(contents, VERSION), rows)
        self._contents, self._upper = contents, state.upper
        if not writable:
            return Loaded(version, stored, timestamp, apply_writes(rows, writes))
        if stored.deploy_generation > self.deploy_generation:
            raise FencedError(FenceToken(self.deploy_generation, 0), stored)
        ours = FenceToken(self.deploy_generation, stored.epoch + 1)
        self._append([*writes, *_bookkeeping(version, ours)], self._now())
        return Loaded(version, ours, timestamp, apply_writes(rows, writes))

    def _initialize(self, rows: list[Row], state: ShardState) -> Loaded:
        if state.upper != 0:
            raise UpperMismatch(self.shard_id, 0, state.upper)
        self._contents, self._upper = {}, 0
        fence = FenceToken(self.deploy_generation, 1)
        timestamp = next_timestamp(self._now(), 0)
        self._append(
            [*rows, *_bookkeeping(CATALOG_VERSION, fence), (*ORACLE, json.dumps(timestamp))],
            timestamp,
        )
        return Loaded(CATALOG_VERSION, fence, timestamp, sorted(rows))

    def _write(self, fence: FenceToken, writes: list[Write], now: int) -> int:
        for kind, key, _ in writes:
            if (kind, key) in BOOKKEEPING:
                raise CatalogError(f"{kind}/{key} is the catalog's own bookkeeping")
        for _ in range(ATTEMPTS):
            stored = self._fence_of(self._contents)
            if stored != fence:
                raise FencedError(fence, stored)
            timestamp = next_timestamp(now, self._config(self._contents, ORACLE))
            try:
                self._append([*writes, (*ORACLE, json.dumps(timestamp))], timestamp)
                return timestamp
            except UpperMismatch:
                # Someone else wrote: if they took the fence we are fenced above.
                self._catch_up()
        raise CatalogError(
            f"{self._describe()}: commit lost {ATTEMPTS} times to a cooperating writer"
        )

    def _confirm_fence(self, fence: FenceToken) -> None:
        # Nothing written since our last read or write: the fence cannot have moved.
        if self._shard.state().upper != self._upper:
            self._catch_up()
        stored = self._fence_of(self._contents)
        if stored != fence:
            raise FencedError(fence, stored)

    def _read_fence(self) -> FenceToken | None:
        if not self.is_initialized():
            return None
        contents, _ = self._read()
        return self._fence_of(contents)

    def close(self) -> None:
        self._handle = None
        self._contents, self._upper = {}, 0

    # Time travel

    def updates(self) -> list[tuple[str, str, str, int, int]]:
        """The shard's updates as stored: ``(kind, key, value, shard time, diff)``, by time.

        The catalog's history back to the since, unconsolidated (for a debug dump).
        """
        _, table = self._shard.read()
        columns = [
            table.column(name).to_pylist()
            for name in ("kind", "key", "value", TIMESTAMP_COLUMN, DIFF_COLUMN)
        ]
        return sorted(zip(*columns, strict=True), key=lambda update: (update[3], update[4]))

    def rows_as_of(self, timestamp: int) -> list[Row]:
        """The catalog's object rows as of catalog write timestamp ``timestamp``.

        Raises ``SinceError`` if that history was compacted away (older than
        ``history_ms`` behind the latest write), ``CatalogError`` if
        ``timestamp`` is after the latest write (a later commit may still get it).
        """
        state, updates = self._shard.read()
        oracle = updates.filter(
            pc.and_(
                pc.and_(
                    pc.equal(updates.column("kind"), ORACLE[0]),
                    pc.equal(updates.column("key"), ORACLE[1]),
                ),
                pc.greater(updates.column(DIFF_COLUMN), 0),
            )
        )
        # Each commit added one oracle row at its shard time (compaction keeps
        # them at or after the since). The catalog as of ``timestamp`` is the
        # shard just before the first commit after it.
        stamps = sorted(
            (time, int(json.loads(value)))
            for value, time in zip(
                oracle.column("value").to_pylist(),
                oracle.column(TIMESTAMP_COLUMN).to_pylist(),
                strict=True,
            )
        )
        if not stamps:
            raise CatalogNotInitializedError(f"{self._describe()} is not initialised")
        if timestamp > stamps[-1][1]:
            raise CatalogError(
                f"cannot read the catalog as of {timestamp}: the latest write is at "
                f"{stamps[-1][1]}, and a later commit may still take {timestamp}"
            )
        later = [time for time, stamp in stamps if stamp > timestamp]
        as_of = later[0] - 1 if later else state.upper - 1
        if as_of < state.since:
            raise SinceError(
                f"cannot read the catalog as of {timestamp}: its history before "
                f"shard time {state.since} is compacted away"
            )
        if as_of < stamps[0][0]:
            raise CatalogError(f"the catalog did not exist yet at {timestamp}")
        visible = updates.filter(pc.less_equal(updates.column(TIMESTAMP_COLUMN), as_of))
        data = [name for name, _ in COLUMNS]
        return self._objects(self._contents_of(consolidate(visible, data)))

    def state_as_of(self, timestamp: int) -> CatalogState:
        """The catalog state as of catalog write timestamp ``timestamp`` (see ``rows_as_of``)."""
        return CatalogState.from_rows(self.rows_as_of(timestamp))


def _bookkeeping(version: int, fence: FenceToken) -> list[Write]:
    return [
        (*VERSION, json.dumps(version)),
        (*EPOCH, json.dumps(fence.epoch)),
        (*DEPLOY_GENERATION, json.dumps(fence.deploy_generation)),
    ]
