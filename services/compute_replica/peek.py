"""The skeleton peek engine: snapshot storage collections, evaluate SQL with polars.

It stands in for the dataflow engine (a later issue renders LIR plans
instead). A peek reads every source shard at one ``as_of``, registers the
snapshots under the sources' names in a ``polars.SQLContext`` and runs the
peek's SQL there. The coordinator hands over PostgreSQL-flavoured SQL written
by sqlglot whose table references are already the source names.

Waiting for uppers is asynchronous (polling consensus from a worker thread
now and then), so a peek waiting for data holds no thread; the snapshot and
the query run in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import polars as pl
import sqlglot
from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.compute_replica.protocol import (
    PeekRequest,
    PeekResult,
    PeekSource,
    ResultColumn,
    StorageLocation,
)
from loupe.persist import Shard, SinceError, expand, open_location
from loupe.persist.location import Blob, Consensus

log = get_logger(__name__)

# What a shard's upper is taken to be while the shard does not exist yet: it
# has never been written, exactly like a shard whose upper is 0.
NEVER_WRITTEN = 0


class ShardCache:
    """Opened blob/consensus stores by URI, shared by every peek (thread-safe)."""

    def __init__(self) -> None:
        self._locations: dict[StorageLocation, tuple[Blob, Consensus]] = {}
        self._lock = threading.Lock()

    def shard(self, shard_id: str, location: StorageLocation) -> Shard:
        with self._lock:
            opened = self._locations.get(location)
            if opened is None:
                opened = open_location(location.blob_uri, location.consensus_uri)
                self._locations[location] = opened
        return Shard(shard_id, *opened)


class PeekEngine:
    """Answers ``PeekRequest``s; every failure is raised as a ``LoupeError``."""

    def __init__(
        self,
        *,
        wait_timeout: float = 10.0,
        poll_interval: float = 0.05,
        shards: ShardCache | None = None,
    ) -> None:
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self._shards = shards or ShardCache()

    async def execute(self, peek: PeekRequest, default_location: StorageLocation) -> PeekResult:
        try:
            # Opening a location touches the disk (directories, SQLite): not on the loop.
            shards = await asyncio.to_thread(self._open_shards, peek.sources, default_location)
            as_of = await self.choose_as_of(shards, peek.timestamp)
            return await asyncio.to_thread(evaluate, shards, as_of, peek.sql, peek.max_result_rows)
        except (LoupeError, asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:
            # BaseException: a panic inside polars surfaces as PanicException,
            # which is not an Exception, and must not take the replica down.
            raise classify(error) from error

    def _open_shards(
        self, sources: Sequence[PeekSource], default_location: StorageLocation
    ) -> dict[str, Shard]:
        return {
            source.name: self._shards.shard(source.shard_id, _location_of(source, default_location))
            for source in sources
        }

    async def choose_as_of(self, shards: dict[str, Shard], timestamp: int) -> int:
        """The time to read at, waiting (bounded) for the sources' uppers.

        ``timestamp == 0``: the latest time complete in every source,
        ``min(upper) - 1``. Otherwise ``timestamp`` itself, once every upper is
        past it; a timestamp before a source's since (its history is
        compacted away) is refused at once, naming the since.
        """
        if not shards:
            return timestamp
        deadline = time.monotonic() + self.wait_timeout
        while True:
            uppers, sinces = await asyncio.to_thread(_read_frontiers, shards)
            if timestamp:
                _check_since(sinces, timestamp)
            if timestamp == 0:
                if all(upper > 0 for upper in uppers.values()):
                    return min(uppers.values()) - 1
            elif all(upper > timestamp for upper in uppers.values()):
                return timestamp
            if time.monotonic() >= deadline:
                raise _upper_timeout(uppers, timestamp, self.wait_timeout)
            await asyncio.sleep(self.poll_interval)


def _location_of(source: PeekSource, default: StorageLocation) -> StorageLocation:
    if source.storage.blob_uri and source.storage.consensus_uri:
        return source.storage
    if not (default.blob_uri and default.consensus_uri):
        raise LoupeError(
            "XX000",
            f"no storage location for source {source.name!r}: neither its collection metadata"
            " nor CreateInstance names a blob and consensus URI",
        )
    return default


def _read_frontiers(shards: dict[str, Shard]) -> tuple[dict[str, int], dict[str, int]]:
    """(upper, since) of every source; a shard that does not exist yet has both at 0."""
    uppers, sinces = {}, {}
    for name, shard in shards.items():
        state = shard.state(missing_ok=True)
        uppers[name] = NEVER_WRITTEN if state is None else state.upper
        sinces[name] = 0 if state is None else state.since
    return uppers, sinces


def _check_since(sinces: dict[str, int], timestamp: int) -> None:
    compacted = {name: since for name, since in sorted(sinces.items()) if since > timestamp}
    if compacted:
        raise since_error(timestamp, compacted)


def since_error(timestamp: int, sinces: dict[str, int]) -> LoupeError:
    """The error of a read at ``timestamp`` before the since of some sources."""
    listed = ", ".join(f"{name} since {since}" for name, since in sinces.items())
    return LoupeError(
        SqlState.INTERNAL_ERROR,
        f"Timestamp ({timestamp}) is not valid for all inputs: {listed}",
        detail="The history before a collection's since is compacted away.",
        hint=f"Read AS OF {max(sinces.values())} or later.",
    )


def _upper_timeout(uppers: dict[str, int], timestamp: int, timeout: float) -> LoupeError:
    behind = ", ".join(
        f"{name} upper {upper}" + (" (never written)" if upper == NEVER_WRITTEN else "")
        for name, upper in sorted(uppers.items())
        if upper <= timestamp
    )
    wanted = "any complete time" if timestamp == 0 else f"timestamp {timestamp}"
    return LoupeError(
        SqlState.INTERNAL_ERROR,
        f"timed out after {timeout:g}s waiting for {wanted} to be readable: {behind}",
    )


# -- evaluation (runs in a worker thread) ----------------------------------------------


def evaluate(
    shards: dict[str, Shard], as_of: int, sql: str, max_result_rows: int = 0
) -> PeekResult:
    """Snapshot every shard at ``as_of`` and run ``sql`` over the snapshots."""
    frames = {}
    for name, shard in shards.items():
        snapshot = expand(shard.snapshot(as_of))
        frame = pl.from_arrow(snapshot)
        assert isinstance(frame, pl.DataFrame)
        frames[name] = frame
    context = pl.SQLContext(frames=frames)
    result = context.execute(sql, eager=True)
    names = output_names(sql, result.columns)
    if max_result_rows:
        result = result.head(max_result_rows)
    columns = tuple(
        ResultColumn(name, pg_type(dtype)) for name, dtype in zip(names, result.dtypes, strict=True)
    )
    return PeekResult(columns, result.rows())


def pg_type(dtype: pl.DataType) -> str:
    """The PostgreSQL-style type name of a polars dtype."""
    base = dtype.base_type()
    if base in (pl.List, pl.Array):
        return "list"
    return _PG_TYPES.get(base, "text")


_PG_TYPES: dict[Any, str] = {
    pl.String: "text",
    pl.Categorical: "text",
    pl.Enum: "text",
    pl.Null: "text",
    pl.Int8: "int2",
    pl.Int16: "int2",
    pl.Int32: "int4",
    pl.Int64: "int8",
    pl.UInt8: "uint2",
    pl.UInt16: "uint2",
    pl.UInt32: "uint4",
    pl.UInt64: "uint8",
    pl.Float32: "float4",
    pl.Float64: "float8",
    pl.Boolean: "bool",
    pl.Decimal: "numeric",
    pl.Datetime: "timestamptz",
    pl.Date: "date",
    pl.Time: "time",
    pl.Duration: "interval",
    pl.Binary: "bytea",
    pl.Struct: "jsonb",
}


def output_names(sql: str, produced: Sequence[str]) -> list[str]:
    """The column names PostgreSQL would give the query's output.

    polars names unaliased expressions after their input (``COUNT(*)`` is
    ``len``) and renames duplicates (``name:1``); PostgreSQL says ``count``
    and keeps duplicates. When the top-level SELECT lists its columns
    explicitly, take the names from it; otherwise (``*``, set operations)
    keep polars' names without its duplicate suffixes.
    """
    fallback = [_DUPLICATE_SUFFIX.sub("", name) for name in produced]
    try:
        statement = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.ParseError:
        return fallback
    if not isinstance(statement, exp.Select):
        return fallback
    projections = statement.expressions
    if len(projections) != len(produced) or any(p.is_star for p in projections):
        return fallback
    return [_pg_output_name(p) for p in projections]


_DUPLICATE_SUFFIX = re.compile(r":[^:]*$")


def _pg_output_name(projection: exp.Expression) -> str:
    if isinstance(projection, exp.Alias):
        return projection.alias
    if isinstance(projection, exp.Column):
        return projection.name
    if isinstance(projection, exp.Cast):
        return _pg_output_name(projection.this)
    if isinstance(projection, exp.Anonymous):
        return projection.name.lower()
    if isinstance(projection, exp.Func):
        return projection.sql_name().lower()
    return "?column?"


# -- errors ------------------------------------------------------------------------------------


_CLASSIFIERS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str, str], ...] = (
    # (exception types, message pattern, SQLSTATE), first match wins.
    (pl.exceptions.ColumnNotFoundError, "", SqlState.UNDEFINED_COLUMN),
    (pl.exceptions.SQLInterfaceError, r"no column named|column .* not found", "42703"),
    (pl.exceptions.SQLInterfaceError, r"relation .* was not found|table .* not found", "42P01"),
    (pl.exceptions.SQLInterfaceError, r"unsupported function", "42883"),
    (pl.exceptions.SQLInterfaceError, r"parser error|expected", SqlState.SYNTAX_ERROR),
    (pl.exceptions.SQLSyntaxError, r"GROUP BY", "42803"),
    (pl.exceptions.SQLSyntaxError, "", SqlState.SYNTAX_ERROR),
    (pl.exceptions.SQLInterfaceError, r"unsupported|not (a |yet )?supported", "0A000"),
    (pl.exceptions.InvalidOperationError, r"conversion from", "22P02"),
    ((pl.exceptions.SchemaError, pl.exceptions.InvalidOperationError), "", "42804"),
    (pl.exceptions.ComputeError, r"division by zero", SqlState.DIVISION_BY_ZERO),
    (SinceError, "", SqlState.INTERNAL_ERROR),
)


def classify(error: BaseException) -> LoupeError:
    """A ``LoupeError`` with a fitting SQLSTATE for a failure during a peek."""
    message = _first_line(error)
    for kinds, pattern, code in _CLASSIFIERS:
        if isinstance(error, kinds) and (not pattern or re.search(pattern, message, re.IGNORECASE)):
            return LoupeError(code, message)
    log.warning("peek failed", error=repr(error))
    return LoupeError(SqlState.INTERNAL_ERROR, f"{type(error).__name__}: {message}")


def _first_line(error: BaseException) -> str:
    # polars appends a multi-line "Resolved plan until failure" to its errors;
    # the first line is the part a person needs.
    text = str(error).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__
