"""The writer's wire format: UpdateBatch rows and columnar updates, decoded into Arrow."""

from __future__ import annotations

import datetime as dt
import importlib.abc
import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loupe import interval
from loupe.builtins import (
    BY_ID,
    MZ_AUDIT_EVENTS,
    MZ_CLUSTER_REPLICA_STATUSES,
    MZ_CLUSTERS,
)
from loupe.controller.storage import BadBatch, decode_batch, encode_batch
from loupe.interval import Interval
from loupe.proto.storage.v1 import storage_pb2
from loupe.storage.wire import encode_arrow

UTC = dt.UTC
AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
CLUSTER = ("u1", "quickstart", "u1", True, "1", 3, Interval(micros=90_000_000), None)
STATUS = ("u1", 0, "offline", "killed", AT, 2**40)


def test_rows_decode_into_arrow_in_the_types_spark_takes() -> None:
    """Every column type arrives with its value; uint8 as int64; zero diffs are dropped."""
    batch = encode_batch(
        "b1",
        [
            (MZ_CLUSTERS.id, CLUSTER, 1),
            (MZ_CLUSTER_REPLICA_STATUSES.id, STATUS, -2),
            (MZ_CLUSTERS.id, ("u2", *CLUSTER[1:]), 0),
        ],
    )
    batch_id, tables = decode_batch(batch.SerializeToString(), BY_ID)
    assert batch_id == "b1"
    clusters = tables[MZ_CLUSTERS.id]
    assert clusters.num_rows == 1
    assert tuple(clusters.to_pylist()[0].values()) == (
        *CLUSTER[:6],
        CLUSTER[6].to_struct(),
        None,
        1,
    )
    assert clusters.schema.field("replication_factor").type == pa.int64()
    assert clusters.schema.field("introspection_interval").type == interval.ARROW
    statuses = tables[MZ_CLUSTER_REPLICA_STATUSES.id]
    assert tuple(statuses.to_pylist()[0].values()) == (*STATUS, -2)


def test_columnar_updates_decode_like_rows() -> None:
    """The same updates as rows or as an Arrow IPC stream give the same table."""
    rows = [
        (MZ_CLUSTER_REPLICA_STATUSES.id, (f"u{i}", 0, "online", None, AT, i), 1) for i in range(5)
    ]
    as_rows = decode_batch(encode_batch("r", rows).SerializeToString(), BY_ID)[1]
    table = as_rows[MZ_CLUSTER_REPLICA_STATUSES.id]
    columnar = storage_pb2.UpdateBatch(
        batch_id="c", collections=[encode_arrow(MZ_CLUSTER_REPLICA_STATUSES.id, table)]
    )
    as_columns = decode_batch(columnar.SerializeToString(), BY_ID)[1]
    assert as_columns[MZ_CLUSTER_REPLICA_STATUSES.id].equals(table)


def status_batch() -> storage_pb2.UpdateBatch:
    return encode_batch("bad", [(MZ_CLUSTER_REPLICA_STATUSES.id, STATUS, 1)])


def unknown_collection() -> storage_pb2.UpdateBatch:
    batch = status_batch()
    batch.collections[0].collection_id = "s999"
    return batch


def wrong_kind() -> storage_pb2.UpdateBatch:
    batch = status_batch()
    batch.collections[0].updates[0].row.values[0].bool_value = True  # replica_id is text
    return batch


def wrong_arity() -> storage_pb2.UpdateBatch:
    batch = status_batch()
    batch.collections[0].updates[0].row.values.pop()
    return batch


def negative_uint8() -> storage_pb2.UpdateBatch:
    batch = encode_batch("bad", [(MZ_AUDIT_EVENTS.id, (1, "create", "cluster", "{}", "u1", AT), 1)])
    batch.collections[0].updates[0].row.values[0].int_value = -1  # id is uint8
    return batch


def bad_columnar() -> storage_pb2.UpdateBatch:
    batch = status_batch()
    batch.collections[0].arrow_ipc = b"garbage"
    return batch


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (unknown_collection, "no storage-managed collection 's999'"),
        (wrong_kind, "replica_id: a bool_value value in a text column"),
        (wrong_arity, "has 6 columns, an update has 5 values"),
        (negative_uint8, "negative value in a uint8 column"),
        (bad_columnar, "not an Arrow IPC stream"),
    ],
)
def test_batches_that_cannot_be_applied_are_refused_whole(build, reason) -> None:
    """A wrong collection, kind, arity, sign or payload refuses the batch with a clear reason."""
    with pytest.raises(BadBatch, match=reason):
        decode_batch(build().SerializeToString(), BY_ID)


def test_bytes_that_are_no_batch_are_refused() -> None:
    """Garbage on the stream is a BadBatch, not a crash."""
    with pytest.raises(BadBatch, match="not an UpdateBatch"):
        decode_batch(b"\xff\xff\xff", BY_ID)


def test_batch_bytes_are_what_protobuf_serializes_for_every_kind_of_value() -> None:
    """``encode_batch_bytes`` writes the same bytes as ``encode_batch`` (the fast path)."""
    from decimal import Decimal

    from loupe.storage.wire import encode_batch_bytes

    odd = (
        *("", "é" * 200, "x" * 125, "x" * 126),
        *(0, -1, 2**40, -(2**62), 2**63 - 1, True, False, 0.0, -2.5),
        *(dt.datetime(1960, 1, 1), AT, dt.date(2020, 1, 2), [1, None], Decimal("1.5")),
        *({"a": 1}, dt.timedelta(seconds=3), b"xy", None),
    )
    updates = [("c", CLUSTER, 1), ("s", STATUS, -3), ("o", odd, 0), ("c", CLUSTER, 2), ("e", (), 1)]
    for batch_id in ("b-1", ""):
        expected = encode_batch(batch_id, updates).SerializeToString()
        assert encode_batch_bytes(batch_id, updates) == expected


def test_batch_bytes_stay_exact_when_values_recur_within_a_batch() -> None:
    """Texts and timestamps encoded once per batch: equal values of other types keep their own."""
    from loupe.storage.wire import encode_batch_bytes

    execution = "6f1c2a9e-0000-4000-8000-000000000001"
    naive = AT.replace(tzinfo=None)
    updates = [
        ("e", (execution, "select", AT, 1, 1.0, True, naive, "1"), 1),
        ("l", (execution, "x" * 20_000, AT, naive), 1),
        ("l", (execution, True, 1.0, 1, "select", AT), -1),
        ("e", (execution, "select", AT, 1, 1.0, True, naive, "1"), -1),
    ]
    assert encode_batch_bytes("b", updates) == encode_batch("b", updates).SerializeToString()


def test_pyarrow_type_inference_imports_nothing_per_call() -> None:
    """Decoding a batch infers types many times: pyarrow must not look for a module each time
    (it imports dateutil on every inference, a sys.path scan when it is not installed)."""
    pa.scalar(0)
    pa.array(["x"])
    attempts: list[str] = []

    class Recorder(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> None:
            attempts.append(name)

    sys.meta_path.insert(0, Recorder())
    try:
        for _ in range(3):
            pa.scalar(0)
            pa.array(["x"])
            pc.equal(pa.array([1, 2]), 0)
    finally:
        sys.meta_path.pop(0)
    assert attempts == []


def test_columnar_batches_decode_to_what_row_batches_do() -> None:
    """``encode_batch_arrow`` (the statement log's) gives the writer the same tables as
    ``encode_batch_bytes``: NULLs, text of any length, times, floats, unsigned integers,
    zero diffs dropped."""
    from loupe.builtins import (
        MZ_PREPARED_STATEMENT_HISTORY,
        MZ_STATEMENT_EXECUTION_HISTORY,
        MZ_STATEMENT_LIFECYCLE_HISTORY,
    )
    from loupe.storage.wire import encode_batch_arrow, encode_batch_bytes

    execution = "6f1c2a9e-0000-4000-8000-000000000001"
    began: tuple[Any, ...] = (execution, "p1", 0.5, "u1", "quickstart", "psql", "materialize")
    began += ("public", "strict serializable", None, "{1,NULL}", AT, *(None,) * 6)
    ended = (*began[:9], 2**63 - 1, began[10], AT, AT, "error", "é" * 300, 0, -1, "fast-path")
    updates = [
        (MZ_STATEMENT_EXECUTION_HISTORY.id, began, 1),
        (MZ_STATEMENT_LIFECYCLE_HISTORY.id, (execution, "execution-began", AT), 1),
        (MZ_PREPARED_STATEMENT_HISTORY.id, ("p1", "s1", "", "h", AT, "select", 0), 1),
        (MZ_STATEMENT_EXECUTION_HISTORY.id, began, -1),
        (MZ_STATEMENT_EXECUTION_HISTORY.id, ended, 1),
        (MZ_STATEMENT_LIFECYCLE_HISTORY.id, (execution, "compute-dependencies-finished", AT), 0),
    ]
    batch_id, columnar = decode_batch(encode_batch_arrow("b", updates), BY_ID)
    _, rows = decode_batch(encode_batch_bytes("b", updates), BY_ID)
    assert batch_id == "b"
    assert columnar.keys() == rows.keys()
    for collection_id, table in rows.items():
        assert columnar[collection_id].equals(table), collection_id
    assert columnar[MZ_STATEMENT_LIFECYCLE_HISTORY.id].num_rows == 1


def test_columnar_batches_are_checked_before_they_are_sent() -> None:
    """What the writer would refuse, the publisher cannot encode."""
    from loupe.builtins import MZ_PREPARED_STATEMENT_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY
    from loupe.storage.wire import encode_batch_arrow

    prepared = ("p1", "s1", "", "h", AT, "select", -1)
    with pytest.raises(BadBatch, match="negative value in a uint8 column"):
        encode_batch_arrow("b", [(MZ_PREPARED_STATEMENT_HISTORY.id, prepared, 1)])
    with pytest.raises(BadBatch, match="has 3 columns, an update has 2 values"):
        encode_batch_arrow("b", [(MZ_STATEMENT_LIFECYCLE_HISTORY.id, ("x", AT), 1)])
    with pytest.raises(BadBatch, match="no storage-managed collection"):
        encode_batch_arrow("b", [("nope", (), 1)])
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        encode_batch_arrow("b", [(MZ_STATEMENT_LIFECYCLE_HISTORY.id, ("x", 5, AT), 1)])
