"""How builtin collections' rows become Spark data: types, checks and write groups.

Spark has no unsigned integers and no ``uint64`` timestamps, so parts are
written with Spark's types (``uint8`` and ``mz_timestamp`` as ``LongType``,
``interval`` as a struct of months, days and microseconds) and
``Shard`` casts each part to the shard's Arrow schema when it reads it.

A flush writes every collection of a *write group* in one Spark job: the
group's rows share one wide schema (the union of the collections' columns,
``NULL`` where a collection has no such column) plus a ``mz_shard`` column the
job partitions by, so each shard gets its own part directory.

Column names clash across collections (``id`` is ``text`` in most, ``uint8``
in some, ``uuid`` in one). An integer column that clashes with a string one
(``text``, ``uuid``, ``jsonb``) is carried as text in the job (its decimal
digits) and cast back to the shard's type when the part is read, so all
builtin collections form ONE group and a flush is one Spark job: a job's
fixed cost (hundreds of milliseconds on a loaded machine) dominates a flush
of a few rows. Other clashes (say ``bool`` and ``interval``) still split
collections into groups. A flush only carries a column as text when the
collections it writes clash (``WriteGroup.narrowed``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from loupe.builtins import BuiltinCollection
from loupe.interval import Interval
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN
from loupe.sqltypes import NUMERIC_LIMIT, TYPES, SqlType

# The column a group's Spark job partitions its output by (one directory per shard).
SHARD_COLUMN = "mz_shard"
RESERVED_COLUMNS = frozenset({TIMESTAMP_COLUMN, DIFF_COLUMN, SHARD_COLUMN})

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UNSIGNED_MAX = {"uint2": 2**16 - 1, "uint4": 2**32 - 1}


def ingest_type(pg_type: str) -> pa.DataType:
    """The Arrow type a column of ``pg_type`` is handed to Spark as."""
    return _writable(pg_type).ingest_arrow


def spark_type(pg_type: str) -> Any:
    """The Spark SQL type a column of ``pg_type`` is written as."""
    from pyspark.sql import types

    spark = _writable(pg_type).spark
    assert spark is not None
    return spark(types)


def _writable(pg_type: str) -> SqlType:
    entry = TYPES.get(pg_type)
    if entry is None or entry.spark is None:
        raise ValueError(f"the storage writer cannot write columns of type {pg_type!r}")
    return entry


# -- checking rows at stage time ------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_value(pg_type: str, value: Any) -> str | None:
    """Why ``value`` cannot be stored in a ``pg_type`` column, or None if it can."""
    if value is None:
        return None
    if pg_type in ("text", "jsonb", "uuid"):
        ok = isinstance(value, str)
    elif pg_type == "numeric":
        ok = isinstance(value, Decimal) and abs(value) < NUMERIC_LIMIT
    elif pg_type in ("int4", "int8"):
        ok = _is_int(value) and _INT64_MIN <= value <= _INT64_MAX
    elif pg_type in ("uint8", "mz_timestamp"):
        # Spark stores it in a signed long; Shard reads it back as uint64.
        ok = _is_int(value) and 0 <= value <= _INT64_MAX
    elif pg_type in _UNSIGNED_MAX:
        ok = _is_int(value) and 0 <= value <= _UNSIGNED_MAX[pg_type]
    elif pg_type == "float8":
        ok = isinstance(value, float) or _is_int(value)
    elif pg_type == "bool":
        ok = isinstance(value, bool)
    elif pg_type == "timestamptz":
        ok = isinstance(value, dt.datetime) and value.tzinfo is not None
        if not ok:
            return f"expected a timezone-aware datetime, got {value!r}"
    elif pg_type == "timestamp":
        ok = isinstance(value, dt.datetime) and value.tzinfo is None
        if not ok:
            return f"expected a naive datetime, got {value!r}"
    elif pg_type == "date":
        ok = isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    elif pg_type == "interval":
        ok = isinstance(value, Interval | dt.timedelta)
    elif pg_type == "bytea":
        ok = isinstance(value, bytes | bytearray)
    elif pg_type == "list":
        ok = isinstance(value, list | tuple) and all(_is_int(v) or v is None for v in value)
    else:
        return f"unsupported column type {pg_type!r}"
    return None if ok else f"{value!r} is not a valid {pg_type}"


def check_row(collection: BuiltinCollection, row: Sequence[Any]) -> None:
    """Raise ValueError unless ``row`` fits ``collection``'s columns.

    Checked when an update is staged, so one bad row can never make every
    later flush fail.
    """
    if len(row) != len(collection.columns):
        raise ValueError(
            f"{collection.qualified_name} has {len(collection.columns)} columns,"
            f" got a row of {len(row)} values"
        )
    for (name, pg_type), value in zip(collection.columns, row, strict=True):
        problem = _check_value(pg_type, value)
        if problem:
            raise ValueError(f"{collection.qualified_name}.{name}: {problem}")


# -- write groups ---------------------------------------------------------------

# Integer types: clashing with each other they share an ``int8`` column, with a type
# Spark writes as a string (``text``, ``uuid``, ``jsonb``) a text one (their decimal
# digits). Either casts back exactly, and ``Shard`` casts every part to its shard's types
# when it reads it.
INTEGER_KINDS = frozenset({"int4", "int8", "uint2", "uint4", "uint8", "mz_timestamp"})


def _integer_or_string(kind: str) -> bool:
    return kind in INTEGER_KINDS or ingest_type(kind) == pa.string()


def shared_kind(kind: str, other: str) -> str | None:
    """The type one job's column is written as for columns of types ``kind`` and
    ``other`` of the same name, or None if they cannot share a column.

    Types Spark writes alike share a column typed as ``kind`` (``int8`` and
    ``uint8``, ``text`` and ``uuid``), other integers share an ``int8`` one,
    and an integer and a string share a text column. So whether collections
    can share a group does not depend on their order, and any of a group's
    subsets can too.
    """
    if ingest_type(kind) == ingest_type(other):
        return kind
    if kind in INTEGER_KINDS and other in INTEGER_KINDS:
        return "int8"
    if _integer_or_string(kind) and _integer_or_string(other):
        return "text"
    return None


def _merged_columns(
    columns: Mapping[str, str], collection: BuiltinCollection
) -> dict[str, str] | None:
    """``columns`` widened by ``collection``'s, or None if one of them cannot share."""
    merged = dict(columns)
    for name, kind in collection.columns:
        if name not in merged:
            merged[name] = kind
            continue
        shared = shared_kind(merged[name], kind)
        if shared is None:
            return None
        merged[name] = shared
    return merged


@dataclass(frozen=True)
class WriteGroup:
    """Collections written together by one Spark job, sharing one wide schema."""

    collections: tuple[BuiltinCollection, ...]
    # (name, pg type) of every data column of the group, in first-seen order.
    columns: tuple[tuple[str, str], ...]

    def narrowed(self, collection_ids: Iterable[str]) -> WriteGroup:
        """The group of just these collections, with just their columns.

        A flush writes the narrowed group of the collections it has updates
        for: every part still holds all of its shard's columns, Spark does
        not carry dozens of all-NULL columns of collections without updates,
        and a column is carried as text only if these collections clash on it.
        """
        wanted = set(collection_ids)
        members = tuple(c for c in self.collections if c.id in wanted)
        # Each column typed as just these members need it (members of one group always
        # share one: ``shared_kind``), in the group's column order.
        kinds: dict[str, str] = {}
        for member in members:
            merged = _merged_columns(kinds, member)
            assert merged is not None, f"{member.qualified_name} left its write group"
            kinds = merged
        return WriteGroup(
            members, tuple((name, kinds[name]) for name, _ in self.columns if name in kinds)
        )

    def spark_schema(self) -> Any:
        """The Spark schema of the group's job: wide columns, then time, diff, shard."""
        from pyspark.sql import types

        fields = [types.StructField(name, spark_type(kind)) for name, kind in self.columns]
        fields += [
            types.StructField(TIMESTAMP_COLUMN, types.LongType()),
            types.StructField(DIFF_COLUMN, types.LongType()),
            types.StructField(SHARD_COLUMN, types.StringType()),
        ]
        return types.StructType(fields)

    def wide_table(self, tables: Mapping[str, pa.Table], timestamp: int | None) -> pa.Table:
        """The group's rows to write: per collection id, a table of its columns (ingest
        types) and ``mz_diff``, widened to the group's columns.

        A flush writes every row at ``timestamp``; a compaction's tables carry
        their rows' own ``mz_timestamp`` (``timestamp`` None).
        """
        wide = []
        for collection in self.collections:
            table = tables.get(collection.id)
            if table is None or table.num_rows == 0:
                continue
            count = table.num_rows
            own = dict(collection.columns)
            arrays = [
                self._column(table, name, own[name], kind)
                if name in own
                else pa.nulls(count, type=ingest_type(kind))
                for name, kind in self.columns
            ]
            if timestamp is None:
                arrays.append(table.column(TIMESTAMP_COLUMN).cast(pa.int64()))
            else:
                arrays.append(pa.repeat(pa.scalar(timestamp, pa.int64()), count))
            arrays.append(table.column(DIFF_COLUMN))
            arrays.append(pa.repeat(pa.scalar(collection.shard_id, pa.string()), count))
            wide.append(pa.Table.from_arrays(arrays, names=self.names))
        if not wide:
            return self.empty_table()
        return pa.concat_tables(wide)

    @staticmethod
    def _column(table: pa.Table, name: str, own_kind: str, kind: str) -> Any:
        """A collection's column in the group's type (an integer as text, on a clash)."""
        column = table.column(name)
        if ingest_type(own_kind) != ingest_type(kind):
            return column.cast(ingest_type(kind))
        return column

    def empty_table(self) -> pa.Table:
        types = [ingest_type(kind) for _, kind in self.columns]
        types += [pa.int64(), pa.int64(), pa.string()]
        return pa.schema(list(zip(self.names, types, strict=True))).empty_table()

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns] + [TIMESTAMP_COLUMN, DIFF_COLUMN, SHARD_COLUMN]


def plan_write_groups(collections: Sequence[BuiltinCollection]) -> list[WriteGroup]:
    """Group collections so each group's columns can share one type (first fit).

    Columns of the same name share a column typed as ``shared_kind`` says
    (``int8``/``uint8`` as the first one seen, an integer and a string as
    text); each shard's reader casts to its own types. Collections with a
    clash no type can carry go to another group.
    """
    groups: list[tuple[list[BuiltinCollection], dict[str, str]]] = []
    for collection in collections:
        for name, kind in collection.columns:
            if name in RESERVED_COLUMNS:
                raise ValueError(f"{collection.qualified_name}: column name {name!r} is reserved")
            spark_type(kind)  # fail at start, not at the first flush
        for index, (members, columns) in enumerate(groups):
            merged = _merged_columns(columns, collection)
            if merged is not None:
                members.append(collection)
                groups[index] = (members, merged)
                break
        else:
            groups.append(([collection], dict(collection.columns)))
    return [WriteGroup(tuple(members), tuple(columns.items())) for members, columns in groups]
