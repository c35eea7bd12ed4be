"""The storage writer's input on the wire: ``UpdateBatch`` messages in a JetStream stream.

Every update for a storage-managed collection reaches the writer as part of
an ``storage.v1.UpdateBatch`` published to the stream (``StreamConfig``) with
``Nats-Msg-Id`` = the batch id, so JetStream stores a batch published twice
(a retried ``AppendUpdates``) once. The writer decodes each batch straight
into Arrow tables, one per collection, in the types Spark is handed
(``schema.ingest_type``): rows (``CollectionUpdates.updates``, what
``AppendUpdates`` and ``stage`` send) at a few microseconds per update, the
columnar form (``CollectionUpdates.arrow_ipc``, for bulk writers) without
touching each value in Python.

A batch that does not decode, names an unknown collection or holds a value
of the wrong kind is refused as a whole (``BadBatch``): publishers check
their batches first (``encode_batch`` does), so the writer logs, counts and
skips such a batch instead of stopping on it.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import operator
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from loupe.builtins import BY_ID, BuiltinCollection
from loupe.common.values import EPOCH, NAIVE_EPOCH, to_row, to_value
from loupe.persist import DIFF_COLUMN
from loupe.proto.common.v1 import common_pb2
from loupe.proto.storage.v1 import storage_pb2
from loupe.sqltypes import sql_type
from loupe.storage.schema import ingest_type

STREAM = "LOUPE_STORAGE"
SUBJECT = "loupe.storage.v1.updates"
CONSUMER = "storage-writer"
# The writer's name in every shard's ``progress``: the last stream sequence applied.
PROGRESS_KEY = "storage-writer"
# Which incarnation of the stream that sequence counts in (its creation time, ms):
# a stream deleted and created again starts counting at 1 again.
STREAM_EPOCH_KEY = "storage-writer.stream"
# JetStream drops a second message with the same Nats-Msg-Id within this window.
DUPLICATE_WINDOW_S = 120.0

Update = tuple[str, tuple[Any, ...], int]

_which = common_pb2.Value.WhichOneof

# Types whose wire value is a plain integer that Arrow casts to the column type.
_FROM_INTEGER: dict[str, pa.DataType] = {
    "timestamptz": pa.int64(),
    "timestamp": pa.int64(),
    "date": pa.int32(),
}


# Column types whose values Spark holds in a signed type: a negative one is no value of theirs.
_UNSIGNED = frozenset({"uint2", "uint4", "uint8", "mz_timestamp"})


class BadBatch(ValueError):
    """A batch the writer cannot apply (unknown collection, wrong arity or value kind)."""


class UnknownCollection(BadBatch):
    """A batch names a collection that is not storage-managed."""


@dataclass(frozen=True)
class StreamConfig:
    """Where the writer's input lives: the stream, its subject and the durable consumer."""

    name: str = STREAM
    subject: str = SUBJECT
    consumer: str = CONSUMER
    duplicate_window: float = DUPLICATE_WINDOW_S

    @classmethod
    def scoped(cls, tag: str) -> StreamConfig:
        """A stream of its own (tests and benchmarks sharing one NATS server)."""
        return cls(name=f"{STREAM}_{tag}", subject=f"loupe.storage.v1.{tag}.updates")


# -- encoding (publishers) --------------------------------------------------------


def encode_batch(batch_id: str, updates: Iterable[Update]) -> storage_pb2.UpdateBatch:
    """An ``UpdateBatch`` of ``(collection_id, row, diff)`` updates, grouped by collection."""
    batch = storage_pb2.UpdateBatch(batch_id=batch_id)
    by_collection: dict[str, storage_pb2.CollectionUpdates] = {}
    for collection_id, row, diff in updates:
        collection = by_collection.get(collection_id)
        if collection is None:
            collection = batch.collections.add(collection_id=collection_id)
            by_collection[collection_id] = collection
        collection.updates.add(row=to_row(row), diff=diff)
    return batch


def encode_batch_bytes(batch_id: str, updates: Iterable[Update]) -> bytes:
    """``encode_batch(batch_id, updates).SerializeToString()``, written straight to bytes.

    For publishers on a hot path (the statement log): the protobuf wire form
    of each value is built from its Python type without a message object per
    value, several times faster for rows of text, numbers and timestamps.
    Other values (lists, dates, …) go through ``to_value``.
    """
    by_collection: dict[str, list[bytes]] = {}
    # Texts and timestamps recur within a batch (an execution's id in each of its rows,
    # a session's names in each execution, one time in a began row and its event):
    # each distinct one is encoded once.
    encoded: dict[Any, bytes] = {}
    for collection_id, row, diff in updates:
        parts = []
        for v in row:
            kind = type(v)
            if kind in _RECURRING:
                data = encoded.get(v)
                if data is None:
                    data = encoded[v] = _VALUE_ENCODERS[kind](v)
            else:
                data = _VALUE_ENCODERS.get(kind, _value_via_proto)(v)
            parts.append(data)
        values = b"".join(parts)
        body = b"\n" + _varint(len(values)) + values  # Update.row
        if diff:
            body += b"\x18" + _varint(_zigzag(diff))
        chunks = by_collection.get(collection_id)
        if chunks is None:
            identifier = collection_id.encode()
            chunks = by_collection[collection_id] = [b"\n" + _varint(len(identifier)) + identifier]
        chunks.append(b"\x12" + _varint(len(body)) + body)
    identifier = batch_id.encode()
    out = [b"\n" + _varint(len(identifier)) + identifier] if identifier else []
    for chunks in by_collection.values():
        collection = b"".join(chunks)
        out.append(b"\x12" + _varint(len(collection)) + collection)
    return b"".join(out)


def encode_batch_arrow(batch_id: str, updates: Iterable[Update]) -> bytes:
    """The bytes of an ``UpdateBatch`` of ``updates`` (builtin collections only), each
    collection's in columnar form (``CollectionUpdates.arrow_ipc``).

    For publishers of many rows per batch (the statement log): Arrow builds a
    column from Python values in C, and the writer reads it back without
    touching a value in Python (``decode_arrow``). On statement log batches
    this was 2.5x cheaper to build than ``encode_batch_bytes`` and 5x cheaper
    for the writer to decode, to the same tables. A row of the wrong width, a
    negative unsigned value or a value Arrow cannot convert raises (``BadBatch``
    or Arrow's error). Arrow's conversions are looser than the row form's
    checks (a naive datetime in a ``timestamptz`` column is taken as UTC, a
    number as microseconds): for publishers whose rows are built by Loupe's
    own code, not for values from users.
    """
    by_collection: dict[str, tuple[list[tuple[Any, ...]], list[int]]] = {}
    for collection_id, row, diff in updates:
        entry = by_collection.get(collection_id)
        if entry is None:
            entry = by_collection[collection_id] = ([], [])
        entry[0].append(row)
        entry[1].append(diff)
    batch = storage_pb2.UpdateBatch(batch_id=batch_id)
    for collection_id, (rows, diffs) in by_collection.items():
        collection = BY_ID.get(collection_id)
        if collection is None:
            raise UnknownCollection(f"no storage-managed collection {collection_id!r}")
        _check_width(collection, rows)
        row_type, schema = _arrow_layout(collection_id)
        # One conversion of the rows as structs, not one per column: Arrow's fixed
        # cost per conversion was most of a statement log message's.
        arrays = pa.array(rows, type=row_type).flatten()
        for (name, kind), array in zip(collection.columns, arrays, strict=True):
            _check_unsigned(collection, name, kind, array)
        arrays.append(pa.array(diffs, type=pa.int64()))
        records = pa.RecordBatch.from_arrays(arrays, schema=schema)
        batch.collections.append(encode_arrow(collection_id, records))
    return batch.SerializeToString()


@functools.cache
def _arrow_layout(collection_id: str) -> tuple[pa.StructType, pa.Schema]:
    """A collection's row as an Arrow struct, and its updates' schema (columns + diff)."""
    fields = [pa.field(name, ingest_type(kind)) for name, kind in BY_ID[collection_id].columns]
    return pa.struct(fields), pa.schema([*fields, pa.field(DIFF_COLUMN, pa.int64())])


def _varint(number: int) -> bytes:
    if number < 0x80:
        return _SMALL_VARINTS[number]
    if number < 0x4000:  # a row's or a batch part's length: most of the rest
        return bytes(((number & 0x7F) | 0x80, number >> 7))
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


_SMALL_VARINTS = [bytes([n]) for n in range(0x80)]


def _zigzag(number: int) -> int:
    return (number << 1) ^ (number >> 63)


def _length_delimited(tag: bytes, data: bytes) -> bytes:
    # A Value inside a Row (field 1): the Value's own bytes are the tagged field.
    value = tag + _varint(len(data)) + data
    return b"\n" + _varint(len(value)) + value


def _text_value(value: str) -> bytes:
    data = value.encode()
    if len(data) < len(_SHORT_TEXT_PREFIXES):
        return _SHORT_TEXT_PREFIXES[len(data)] + data
    return _length_delimited(b'"', data)


# Row field, Value length, text_value tag and length of a text short enough for
# one-byte lengths: most of a statement log row.
_SHORT_TEXT_PREFIXES = [bytes([0x0A, n + 2, 0x22, n]) for n in range(0x7E)]


def _int_value(value: int) -> bytes:
    if not -(2**63) <= value < 2**63:
        return _value_via_proto(value)  # let protobuf refuse it as encode_batch would
    field = b"\x10" + _varint(_zigzag(value))
    return b"\n" + _varint(len(field)) + field


def _float_value(value: float) -> bytes:
    return b"\n\t\x19" + struct.pack("<d", value)


def _bool_value(value: bool) -> bytes:
    return b"\n\x02\x08\x01" if value else b"\n\x02\x08\x00"


def _timestamp_value(value: dt.datetime) -> bytes:
    if value.tzinfo is None:  # timestamp_naive_us (field 12)
        field = b"`" + _varint(_zigzag((value - NAIVE_EPOCH) // _MICROSECOND))
    else:  # timestamp_us (field 6)
        field = b"0" + _varint(_zigzag((value - EPOCH) // _MICROSECOND))
    return b"\n" + _varint(len(field)) + field


def _value_via_proto(value: Any) -> bytes:
    data = to_value(value).SerializeToString()
    return b"\n" + _varint(len(data)) + data


_MICROSECOND = dt.timedelta(microseconds=1)
_VALUE_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    type(None): lambda _: b"\n\x00",
    str: _text_value,
    int: _int_value,
    float: _float_value,
    bool: _bool_value,
    dt.datetime: _timestamp_value,
}


# Value types encode_batch_bytes encodes once per distinct value in a batch. Only
# types no value of another one equals (1 == 1.0 == True would share an entry).
_RECURRING = frozenset({str, dt.datetime})


def batch_rows(batch: storage_pb2.UpdateBatch) -> int:
    return sum(len(c.updates) for c in batch.collections)


# -- decoding (the writer) --------------------------------------------------------


def decode_batch(
    data: bytes, collections: Mapping[str, BuiltinCollection]
) -> tuple[str, dict[str, pa.Table]]:
    """The batch id and, per collection, its updates as an Arrow table (columns + ``mz_diff``).

    Raises ``BadBatch`` if any part of the batch cannot be applied.
    """
    try:
        batch = storage_pb2.UpdateBatch.FromString(data)
    except Exception as error:  # protobuf's DecodeError, or worse for garbage
        raise BadBatch(f"not an UpdateBatch: {error}") from None
    return batch.batch_id, decode_collections(batch.collections, collections)


def decode_collections(
    updates: Sequence[storage_pb2.CollectionUpdates],
    collections: Mapping[str, BuiltinCollection],
) -> dict[str, pa.Table]:
    """Per collection id, its updates as one Arrow table in ingest types (zero diffs dropped)."""
    grouped: dict[str, list[Any]] = {}
    columnar: dict[str, list[pa.Table]] = {}
    for entry in updates:
        collection = collections.get(entry.collection_id)
        if collection is None:
            raise UnknownCollection(f"no storage-managed collection {entry.collection_id!r}")
        if entry.updates:
            grouped.setdefault(entry.collection_id, []).append(entry.updates)
        if entry.arrow_ipc:
            columnar.setdefault(entry.collection_id, []).append(
                decode_arrow(collection, entry.arrow_ipc)
            )
    tables = {}
    for collection_id in {**grouped, **columnar}:
        chunks = grouped.get(collection_id, [])
        parts = columnar.get(collection_id, [])
        if chunks:
            rows = chunks[0] if len(chunks) == 1 else list(itertools.chain.from_iterable(chunks))
            parts = [decode_updates(collections[collection_id], rows), *parts]
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        if table.num_rows:
            tables[collection_id] = table
    return tables


def decode_arrow(collection: BuiltinCollection, data: bytes) -> pa.Table:
    """A collection's updates in columnar form (``CollectionUpdates.arrow_ipc``), checked."""
    try:
        table = pa.ipc.open_stream(data).read_all()
    except (pa.ArrowInvalid, OSError) as error:
        raise BadBatch(f"{collection.qualified_name}: not an Arrow IPC stream: {error}") from None
    schema = pa.schema(
        [pa.field(name, ingest_type(kind)) for name, kind in collection.columns]
        + [pa.field(DIFF_COLUMN, pa.int64())]
    )
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise BadBatch(f"{collection.qualified_name}: the Arrow updates lack {missing}")
    try:
        table = table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise BadBatch(f"{collection.qualified_name}: {error}") from None
    if table.num_rows and table.column(DIFF_COLUMN).null_count:
        raise BadBatch(f"{collection.qualified_name}: an update without a diff")
    for name, kind in collection.columns:
        _check_unsigned(collection, name, kind, table.column(name))
    diffs = table.column(DIFF_COLUMN)
    if table.num_rows and pc.any(pc.equal(diffs, 0)).as_py():
        table = table.filter(pc.not_equal(diffs, 0))
    return table


def _check_width(collection: BuiltinCollection, rows: Sequence[Sequence[Any]]) -> None:
    """Refuse rows that do not have one value per column of ``collection``."""
    width = len(collection.columns)
    if any(len(values) != width for values in rows):
        bad = next(len(values) for values in rows if len(values) != width)
        raise BadBatch(
            f"{collection.qualified_name} has {width} columns, an update has {bad} values"
        )


def _check_unsigned(
    collection: BuiltinCollection, name: str, kind: str, column: pa.Array | pa.ChunkedArray
) -> None:
    """Refuse a negative value in a column of an unsigned type (Spark holds it signed)."""
    if kind in _UNSIGNED and column.null_count < len(column) and pc.min(column).as_py() < 0:
        raise BadBatch(f"{collection.qualified_name}.{name}: a negative value in a {kind} column")


def encode_arrow(
    collection_id: str, updates: pa.Table | pa.RecordBatch
) -> storage_pb2.CollectionUpdates:
    """``CollectionUpdates`` carrying ``updates`` (columns + ``mz_diff``) in columnar form."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, updates.schema) as stream:
        stream.write(updates)
    return storage_pb2.CollectionUpdates(
        collection_id=collection_id, arrow_ipc=sink.getvalue().to_pybytes()
    )


def decode_updates(collection: BuiltinCollection, updates: Sequence[Any]) -> pa.Table:
    """``storage.v1.Update`` messages of ``collection`` as an Arrow table (zero diffs dropped)."""
    rows = []
    diffs = []
    for update in updates:  # one pass: every access to an element makes a wrapper
        rows.append(update.row.values)
        diffs.append(update.diff)
    _check_width(collection, rows)
    arrays = [
        _decode_column(collection, name, kind, [values[index] for values in rows])
        for index, (name, kind) in enumerate(collection.columns)
    ]
    arrays.append(pa.array(diffs, type=pa.int64()))
    table = pa.Table.from_arrays(arrays, names=[*collection.column_names, DIFF_COLUMN])
    diffs = table.column(DIFF_COLUMN)
    if table.num_rows and pc.any(pc.equal(diffs, 0)).as_py():
        table = table.filter(pc.not_equal(diffs, 0))
    return table


def _decode_column(
    collection: BuiltinCollection, name: str, kind: str, values: list[Any]
) -> pa.Array:
    kinds = [_which(value, "kind") for value in values]
    present = set(kinds)
    present.discard(None)
    allowed = sql_type(kind).wire_kinds
    wrong = present - set(allowed)
    if wrong:
        raise BadBatch(
            f"{collection.qualified_name}.{name}: a {sorted(wrong)[0]} value in a {kind} column"
        )
    if len(present) == 1 and None not in kinds:
        # The common case, one kind and no NULLs: no per-value Python branch.
        raw = list(map(operator.attrgetter(present.pop()), values))
    else:
        raw = [None if k is None else getattr(v, k) for v, k in zip(values, kinds, strict=True)]
    try:
        return _to_arrow(kind, raw)
    except (pa.ArrowInvalid, OverflowError, TypeError, InvalidOperation) as error:
        raise BadBatch(f"{collection.qualified_name}.{name}: {error}") from None


def _to_arrow(kind: str, raw: list[Any]) -> pa.Array:
    target = ingest_type(kind)
    if kind in _FROM_INTEGER:
        return pa.array(raw, type=_FROM_INTEGER[kind]).cast(target)
    if kind == "float8":
        return pa.array([None if v is None else float(v) for v in raw], type=target)
    if kind == "numeric":  # numeric_value and text_value are decimal text
        return pa.array([None if v is None else Decimal(v) for v in raw], type=target)
    if kind == "interval":  # common.v1.IntervalValue messages
        return pa.array(
            [
                None if v is None else {"months": v.months, "days": v.days, "micros": v.micros}
                for v in raw
            ],
            type=target,
        )
    if kind == "list":
        return pa.array(
            [None if v is None else [_list_item(item) for item in v.values] for v in raw],
            type=target,
        )
    array = pa.array(raw, type=target)
    if kind in _UNSIGNED and array.null_count < len(array) and pc.min(array).as_py() < 0:
        raise BadBatch(f"a negative value in a {kind} column")
    return array


def _list_item(value: Any) -> int | None:
    kind = _which(value, "kind")
    if kind is None:
        return None
    if kind != "int_value":
        raise BadBatch(f"a {kind} value in a list of integers")
    return int(value.int_value)
