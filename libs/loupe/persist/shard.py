"""A shard: an ordered list of immutable Parquet parts of updates.

Every part holds rows ``(data columns…, mz_timestamp uint64, mz_diff int64)``.
The shard's state (parts, since, upper, seqno) lives in Consensus and changes
only by compare-and-set, so concurrent writers can never interleave: of two
``compare_and_append`` calls with the same expected upper exactly one wins.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute
import pyarrow.parquet as pq

from loupe.persist.location import Blob, Consensus
from loupe.proto.common.v1 import common_pb2
from loupe.proto.storage.v1 import storage_pb2

TIMESTAMP_COLUMN = "mz_timestamp"
DIFF_COLUMN = "mz_diff"

ARROW_TYPES: dict[str, pa.DataType] = {
    "text": pa.string(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "uint8": pa.uint64(),
    "float8": pa.float64(),
    "bool": pa.bool_(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "numeric": pa.string(),
    "jsonb": pa.string(),
    "interval": pa.duration("us"),
    "bytea": pa.binary(),
    "list": pa.list_(pa.int64()),
}


class UpperMismatch(Exception):
    """The shard's upper was not the expected one: another writer got there first."""

    def __init__(self, shard_id: str, expected: int, current: int) -> None:
        super().__init__(f"shard {shard_id}: expected upper {expected}, found {current}")
        self.expected = expected
        self.current = current


class SinceError(Exception):
    """A read before the shard's since: that history is compacted away."""


@dataclass(frozen=True)
class Part:
    key: str
    lower: int
    upper: int
    rows: int
    bytes: int = 0


@dataclass
class ShardState:
    shard_id: str
    seqno: int
    since: int
    upper: int
    parts: list[Part] = field(default_factory=list)
    columns: list[tuple[str, str]] = field(default_factory=list)

    def to_proto(self) -> storage_pb2.ShardState:
        return storage_pb2.ShardState(
            shard_id=self.shard_id,
            seqno=self.seqno,
            since=self.since,
            upper=self.upper,
            parts=[
                storage_pb2.Part(
                    key=p.key, lower=p.lower, upper=p.upper, rows=p.rows, bytes=p.bytes
                )
                for p in self.parts
            ],
            relation_desc=common_pb2.RelationDesc(
                columns=[common_pb2.Column(name=n, type=t, nullable=True) for n, t in self.columns]
            ),
        )

    @classmethod
    def from_proto(cls, message: storage_pb2.ShardState, seqno: int) -> ShardState:
        return cls(
            shard_id=message.shard_id,
            seqno=seqno,
            since=message.since,
            upper=message.upper,
            parts=[Part(p.key, p.lower, p.upper, p.rows, p.bytes) for p in message.parts],
            columns=[(c.name, c.type) for c in message.relation_desc.columns],
        )


def arrow_schema(columns: Sequence[tuple[str, str]], *, updates: bool = True) -> pa.Schema:
    fields = [pa.field(name, ARROW_TYPES[kind]) for name, kind in columns]
    if updates:
        fields += [pa.field(TIMESTAMP_COLUMN, pa.uint64()), pa.field(DIFF_COLUMN, pa.int64())]
    return pa.schema(fields)


def consolidate(updates: pa.Table, data_columns: Sequence[str]) -> pa.Table:
    """Sum diffs per distinct row and drop rows whose diff sums to zero."""
    if updates.num_rows == 0:
        return updates.select([*data_columns, DIFF_COLUMN])
    frame = pl.from_arrow(updates.select([*data_columns, DIFF_COLUMN]))
    assert isinstance(frame, pl.DataFrame)
    if data_columns:
        summed = frame.group_by(list(data_columns), maintain_order=True).agg(
            pl.col(DIFF_COLUMN).sum()
        )
    else:
        summed = frame.select(pl.col(DIFF_COLUMN).sum())
    return summed.filter(pl.col(DIFF_COLUMN) != 0).to_arrow()


def expand(consolidated: pa.Table) -> pa.Table:
    """Rows repeated by their (positive) multiplicity, without the diff column."""
    diffs = consolidated.column(DIFF_COLUMN).to_pylist()
    data = consolidated.drop_columns([DIFF_COLUMN])
    if any(d < 0 for d in diffs):
        raise ValueError("negative multiplicity in a snapshot: the collection is not consistent")
    if all(d == 1 for d in diffs):
        return data
    indices = [i for i, d in enumerate(diffs) for _ in range(d)]
    return data.take(pa.array(indices, type=pa.int64()))


class Shard:
    """Handle to one shard; cheap to create, safe to use from several processes."""

    def __init__(self, shard_id: str, blob: Blob, consensus: Consensus) -> None:
        self.shard_id = shard_id
        self.blob = blob
        self.consensus = consensus

    # -- state ------------------------------------------------------------------

    def ensure(self, columns: Sequence[tuple[str, str]]) -> ShardState:
        """Create the shard (upper 0, since 0) if it does not exist yet."""
        state = self.state(missing_ok=True)
        if state is not None:
            return state
        fresh = ShardState(self.shard_id, 0, 0, 0, [], list(columns))
        self.consensus.compare_and_set(self.shard_id, None, fresh.to_proto().SerializeToString())
        return self.state()

    def state(self, *, missing_ok: bool = False) -> ShardState:
        head = self.consensus.head(self.shard_id)
        if head is None:
            if missing_ok:
                return None  # type: ignore[return-value]
            raise KeyError(f"shard {self.shard_id} does not exist")
        seqno, raw = head
        return ShardState.from_proto(storage_pb2.ShardState.FromString(raw), seqno)

    @property
    def upper(self) -> int:
        return self.state().upper

    @property
    def since(self) -> int:
        return self.state().since

    def _cas(self, state: ShardState, new: ShardState) -> bool:
        return self.consensus.compare_and_set(
            self.shard_id, state.seqno, new.to_proto().SerializeToString()
        )

    # -- writes -----------------------------------------------------------------

    def write_part(self, updates: pa.Table) -> Part:
        """Write ``updates`` as a new Parquet part in Blob (not yet in the shard)."""
        timestamps = updates.column(TIMESTAMP_COLUMN)
        buffer = io.BytesIO()
        pq.write_table(updates, buffer)
        key = self.blob.new_key(self.shard_id)
        self.blob.put(key, buffer.getvalue())
        lower = int(pa.compute.min(timestamps).as_py()) if updates.num_rows else 0
        upper = int(pa.compute.max(timestamps).as_py()) + 1 if updates.num_rows else 0
        return Part(key, lower, upper, updates.num_rows, buffer.tell())

    def compare_and_append(
        self,
        updates: pa.Table | Sequence[Part] | None,
        expected_upper: int,
        new_upper: int,
    ) -> ShardState:
        """Append updates (a table, or parts already in Blob) iff the upper is expected.

        Every update must have ``expected_upper <= mz_timestamp < new_upper``.
        Raises ``UpperMismatch`` when another writer moved the upper first.
        """
        if new_upper < expected_upper:
            raise ValueError(f"new upper {new_upper} is before expected upper {expected_upper}")
        parts: list[Part]
        if isinstance(updates, pa.Table):
            if updates.num_rows:
                low = int(pa.compute.min(updates.column(TIMESTAMP_COLUMN)).as_py())
                high = int(pa.compute.max(updates.column(TIMESTAMP_COLUMN)).as_py())
                if low < expected_upper or high >= new_upper:
                    raise ValueError(
                        f"update timestamps [{low}, {high}] outside [{expected_upper}, {new_upper})"
                    )
                parts = [self.write_part(updates)]
            else:
                parts = []
        else:
            parts = [p for p in (updates or []) if p.rows]
        while True:
            state = self.state()
            if state.upper != expected_upper:
                raise UpperMismatch(self.shard_id, expected_upper, state.upper)
            new = ShardState(
                state.shard_id,
                state.seqno,
                state.since,
                new_upper,
                [*state.parts, *parts],
                state.columns,
            )
            if self._cas(state, new):
                return self.state()
            # Lost a race with a since downgrade or compaction: re-read and retry.

    def downgrade_since(self, since: int) -> ShardState:
        while True:
            state = self.state()
            if since <= state.since:
                return state
            new = ShardState(
                state.shard_id, state.seqno, since, state.upper, state.parts, state.columns
            )
            if self._cas(state, new):
                return self.state()

    # -- reads ------------------------------------------------------------------

    def read_updates(self, state: ShardState | None = None) -> pa.Table:
        state = state or self.state()
        schema = arrow_schema(state.columns)
        # Parts may come from writers with a narrower type system (Spark has no
        # unsigned integers), so read each as written and cast to the shard's schema.
        tables = [
            pq.read_table(self.blob.path(p.key)).select(schema.names).cast(schema)
            for p in state.parts
        ]
        if not tables:
            return schema.empty_table()
        return pa.concat_tables(tables)

    def snapshot(self, as_of: int | None = None) -> pa.Table:
        """The consolidated contents at ``as_of`` (default: the latest complete time).

        Returns the data columns and ``mz_diff`` (the multiplicity).
        """
        state = self.state()
        if as_of is None:
            as_of = state.upper - 1
        if as_of < state.since:
            raise SinceError(
                f"shard {self.shard_id}: cannot read at {as_of}, history is compacted up to {state.since}"
            )
        if as_of >= state.upper:
            raise ValueError(
                f"shard {self.shard_id}: {as_of} is not complete yet (upper {state.upper})"
            )
        updates = self.read_updates(state)
        visible = updates.filter(pa.compute.less_equal(updates.column(TIMESTAMP_COLUMN), as_of))
        return consolidate(visible, [name for name, _ in state.columns])

    def wait_for_upper(
        self, beyond: int, timeout: float = 10.0, interval: float = 0.02
    ) -> ShardState:
        """Block until the upper is past ``beyond``; raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if state.upper > beyond:
                return state
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"shard {self.shard_id}: upper {state.upper} did not pass {beyond} in {timeout}s"
                )
            time.sleep(interval)
