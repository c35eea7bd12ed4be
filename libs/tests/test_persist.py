"""Shards: compare-and-append, consolidated snapshots, since; over every consensus plugin."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loupe.persist import (
    Append,
    LocalBlob,
    Part,
    Shard,
    SinceError,
    SqliteConsensus,
    UpperMismatch,
    append_all,
    expand,
    parts_to_merge,
    read_states,
)
from loupe.persist.shard import arrow_schema, consolidate
from loupe.persist.testing import NAME_N_COLUMNS, name_n_updates
from loupe.sqltypes import TYPES

COLUMNS = NAME_N_COLUMNS
updates = name_n_updates


def test_snapshot_consolidates_updates(shard):
    """Inserts and retractions of the same row cancel; multiplicities add."""
    shard.compare_and_append(updates([("a", 1, 0, 1), ("b", 2, 0, 1)]), 0, 1)
    shard.compare_and_append(updates([("a", 1, 1, -1), ("b", 2, 1, 1), ("c", 3, 1, 1)]), 1, 2)
    assert shard.snapshot(0).to_pylist() == [
        {"name": "a", "n": 1, "mz_diff": 1},
        {"name": "b", "n": 2, "mz_diff": 1},
    ]
    assert sorted(expand(shard.snapshot()).column("name").to_pylist()) == ["b", "b", "c"]


def test_two_writers_same_upper_exactly_one_wins(shard):
    """compare_and_append is a CAS on the upper."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1)
    with pytest.raises(UpperMismatch) as raised:
        shard.compare_and_append(updates([("z", 9, 0, 1)]), 0, 1)
    assert raised.value.current == 1
    assert expand(shard.snapshot()).column("name").to_pylist() == ["a"]


def test_reading_before_since_is_an_error(shard):
    """History before since is gone, and saying so beats a wrong answer."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 5)
    shard.downgrade_since(3)
    with pytest.raises(SinceError):
        shard.snapshot(2)
    assert shard.snapshot(3).num_rows == 1


def test_updates_outside_the_interval_are_refused(shard):
    """A writer cannot put updates at times it does not own."""
    with pytest.raises(ValueError, match="outside"):
        shard.compare_and_append(updates([("a", 1, 7, 1)]), 0, 5)


def contents(table: pa.Table) -> list[tuple]:
    """A snapshot as sorted tuples: compaction may change the order of rows."""
    return sorted(tuple(row.values()) for row in table.to_pylist())


def blob_files(shard: Shard) -> set[str]:
    root = shard.blob.root / shard.shard_id  # type: ignore[attr-defined]
    return {path.name for path in root.iterdir()} if root.exists() else set()


def append_history(shard: Shard) -> None:
    """Five appends at times 0..4: a counter row updated in place, plus churn."""
    for t in range(5):
        rows = [("counter", t, t, 1), ("churn", 0, t, 1)]
        if t:
            rows += [("counter", t - 1, t, -1), ("churn", 0, t, -1)]
        shard.compare_and_append(updates(rows), t, t + 1)


def test_losing_append_leaves_no_part_behind(shard):
    """The part written for a refused compare_and_append is deleted again."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1)
    before = blob_files(shard)
    with pytest.raises(UpperMismatch):
        shard.compare_and_append(updates([("z", 9, 0, 1)]), 0, 1)
    assert blob_files(shard) == before


def test_compaction_keeps_reads_from_since_on_and_leaves_one_part(shard):
    """Compacting everything: one part, same snapshots at every time >= since."""
    append_history(shard)
    expected = {t: contents(shard.snapshot(t)) for t in range(2, 5)}
    old_parts = blob_files(shard)
    seqno = shard.state().seqno
    state = shard.compact(since=2)
    # Since and parts change in one CAS.
    assert state.seqno == seqno + 1
    assert len(state.parts) == 1
    assert state.since == 2
    assert state.upper == 5
    assert {t: contents(shard.snapshot(t)) for t in range(2, 5)} == expected
    with pytest.raises(SinceError):
        shard.snapshot(1)
    # Forwarding made the churn before 2 cancel out: only the live history is left.
    assert state.parts[0].rows < sum(2 if t == 0 else 4 for t in range(5))
    # The replaced parts are gone from Blob, the new one is there.
    assert blob_files(shard) == {state.parts[0].key.split("/")[-1]}
    assert not old_parts & blob_files(shard)


def test_compaction_of_some_parts_keeps_the_others_in_place(shard):
    """Merging the middle parts puts the merged part where they were."""
    append_history(shard)
    before = shard.state().parts
    expected = contents(shard.snapshot())
    state = shard.compact(parts=before[1:3])
    assert next(p.key for p in state.parts) == before[0].key
    assert [p.key for p in state.parts][2:] == [p.key for p in before[3:]]
    assert state.parts[1].key not in {p.key for p in before}
    assert contents(shard.snapshot()) == expected
    # History is kept where the since allows it.
    assert contents(shard.snapshot(1)) == [("churn", 0, 1), ("counter", 1, 1)]


class AppendingDuringMerge(Shard):
    """A shard handle that lets another writer append while it merges."""

    def _merge(self, state, parts, since):
        merged = super()._merge(state, parts, since)
        other = Shard(self.shard_id, self.blob, self.consensus)
        upper = other.upper
        other.compare_and_append(updates([("late", 7, upper, 1)]), upper, upper + 1)
        return merged


def test_compaction_keeps_an_append_that_lands_meanwhile(shard, tmp_path):
    """The CAS on the seqno is retried against the state with the new part."""
    append_history(shard)
    racing = AppendingDuringMerge(shard.shard_id, shard.blob, shard.consensus)
    state = racing.compact()
    assert len(state.parts) == 2
    assert state.upper == 6
    assert {row[0] for row in contents(shard.snapshot())} == {"counter", "churn", "late"}


class CompactedByAnother(Shard):
    """A handle whose merge loses to another handle's compaction of the same parts."""

    def _merge(self, state, parts, since):
        merged = super()._merge(state, parts, since)
        Shard(self.shard_id, self.blob, self.consensus).compact()
        return merged


def test_compaction_that_loses_the_race_changes_nothing(shard):
    """If another compaction replaced the parts first, ours is dropped, part and all."""
    append_history(shard)
    expected = contents(shard.snapshot())
    losing = CompactedByAnother(shard.shard_id, shard.blob, shard.consensus)
    state = losing.compact()
    assert len(state.parts) == 1
    assert blob_files(shard) == {state.parts[0].key.split("/")[-1]}
    assert contents(shard.snapshot()) == expected


class CompactedUnderfoot(Shard):
    """A reader whose first read finds its parts compacted away by another handle."""

    compacted = False

    def read_updates(self, state=None):
        if not self.compacted:
            self.compacted = True
            Shard(self.shard_id, self.blob, self.consensus).compact()
        return super().read_updates(state)


def test_readers_retry_when_parts_are_compacted_away(shard):
    """A snapshot racing a compaction reads the new state instead of failing."""
    append_history(shard)
    expected = contents(shard.snapshot())
    reader = CompactedUnderfoot(shard.shard_id, shard.blob, shard.consensus)
    assert contents(reader.snapshot()) == expected
    assert reader.compacted
    assert len(shard.state().parts) == 1


def test_parts_to_merge_is_size_tiered_and_bounds_the_count():
    """Small new parts merge among themselves; a big old part waits; the count is bounded."""
    big = Part("big", 0, 1, 10_000)
    small = [Part(f"p{i}", i, i + 1, 4) for i in range(5)]
    assert parts_to_merge([big, *small[:3]], max_parts=4) == []
    assert parts_to_merge([big, *small], max_parts=4) == small
    # A mid-sized part joins once the newer ones add up to its size.
    mid = Part("mid", 0, 1, 20)
    assert parts_to_merge([big, mid, *small], max_parts=6, down_to=6) == [mid, *small]
    bigger_mid = Part("mid", 0, 1, 21)
    assert parts_to_merge([big, bigger_mid, *small], max_parts=6, down_to=6) == small
    # Whatever the sizes, at most down_to parts remain, by default half of max_parts
    # (each older part is bigger than all newer ones together: tiering alone merges two).
    halving = [Part(f"q{i}", i, i + 1, 2 ** (8 - i)) for i in range(8)]
    assert parts_to_merge(halving, max_parts=6) == halving[2:]
    assert parts_to_merge(halving, max_parts=6, down_to=5) == halving[4:]
    with pytest.raises(ValueError, match="down_to"):
        parts_to_merge(halving, max_parts=6, down_to=7)


def test_sqlite_consensus_created_by_many_at_once(tmp_path):
    """Threads creating the same fresh consensus database all get one (WAL switch races)."""
    for round_ in range(50):
        path = tmp_path / f"r{round_}" / "consensus.sqlite"
        errors: list[BaseException] = []

        def create(path=path, errors=errors):
            try:
                SqliteConsensus(path).head("k")
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=create) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []


def test_append_all_appends_each_shard_and_tells_a_lost_race(shard):
    """Of one ``append_all``: a shard another writer moved on raises ``UpperMismatch``
    (its part not added); one only compacted since the read is retried and goes in."""
    shards = [Shard(f"s{i}", shard.blob, shard.consensus) for i in range(1, 5)]
    for each in shards[1:]:
        each.ensure(COLUMNS)
    for each in shards:
        each.compare_and_append(updates([("old", 0, 0, 1)]), 0, 1)
    states = read_states(shards)
    assert [states[s.shard_id].upper for s in shards] == [1, 1, 1, 1]
    shards[1].compare_and_append(updates([("theirs", 1, 1, 1)]), 1, 2)  # another writer
    shards[2].downgrade_since(1)  # changes the seqno, not the upper
    parts = [each.write_part(updates([("ours", 1, 1, 1)])) for each in shards]
    outcomes = append_all(
        [
            Append(each, states[each.shard_id], [part], 5, {"w": 7})
            for each, part in zip(shards, parts, strict=True)
        ]
    )
    assert isinstance(outcomes[1], UpperMismatch)
    for position in (0, 2, 3):
        outcome = outcomes[position]
        assert not isinstance(outcome, Exception)
        assert outcome == shards[position].state()  # the state returned is the state stored
        assert (outcome.upper, outcome.progress) == (5, {"w": 7})
        names = expand(shards[position].snapshot()).column("name").to_pylist()
        assert sorted(names) == ["old", "ours"]
    assert shards[1].state().upper == 2
    assert sorted(expand(shards[1].snapshot()).column("name").to_pylist()) == ["old", "theirs"]
    assert shards[2].state().since == 1


def test_sqlite_makes_many_writes_durable_in_one_transaction(tmp_path):
    """One commit (one WAL sync) for a flush's many shards, not one per shard."""
    consensus = SqliteConsensus(tmp_path / "consensus.sqlite")
    shards = [Shard(f"s{i}", LocalBlob(tmp_path / "blob"), consensus) for i in range(20)]
    for each in shards:
        each.ensure(COLUMNS)
    commits: list[str] = []
    consensus._connection().set_trace_callback(
        lambda sql: commits.append(sql) if sql == "COMMIT" else None
    )
    states = read_states(shards)
    outcomes = append_all([Append(each, states[each.shard_id], [], 3) for each in shards])
    assert [o.upper for o in outcomes if not isinstance(o, Exception)] == [3] * 20
    assert commits == ["COMMIT"]
    assert all(state.upper == 3 for state in read_states(shards).values())


def test_progress_is_recorded_with_the_data_it_covers(shard):
    """A writer's input position lands in the same CAS as its data, and survives other writes."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1, progress={"writer": 41})
    assert shard.state().progress == {"writer": 41}
    shard.compare_and_append(updates([("b", 2, 1, 1)]), 1, 2, progress={"other": 7})
    shard.downgrade_since(1)
    assert shard.state().progress == {"writer": 41, "other": 7}
    with pytest.raises(UpperMismatch):
        shard.compare_and_append(updates([("c", 3, 1, 1)]), 1, 2, progress={"writer": 99})
    assert shard.state().progress["writer"] == 41


def test_an_append_on_a_state_just_read_reads_no_state(shard, monkeypatch):
    """Given the state its caller read, compare_and_append makes its CAS on it and returns
    the state written, without reading consensus; a stale one costs one failed CAS."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1)
    heads = []
    head = shard.consensus.head
    monkeypatch.setattr(shard.consensus, "head", lambda key: heads.append(key) or head(key))
    state = shard.state()
    heads.clear()
    written = shard.compare_and_append(updates([("b", 2, 1, 1)]), 1, 2, state=state)
    assert heads == []
    assert written == shard.state()
    # Stale: the since moved (a new seqno, the same upper). Read again, and appended.
    stale = written
    shard.downgrade_since(1)
    heads.clear()
    again = shard.compare_and_append(updates([("c", 3, 2, 1)]), 2, 3, state=stale)
    assert len(heads) == 1
    assert again == shard.state()
    assert again.since == 1
    # A state at another upper is not taken for the expected one.
    with pytest.raises(UpperMismatch):
        shard.compare_and_append(updates([("d", 4, 2, 1)]), 2, 3, state=stale)
    assert sorted(expand(shard.snapshot()).column("name").to_pylist()) == ["a", "b", "c"]


def test_a_part_of_one_file_is_read_as_a_file_and_a_directory_as_a_dataset(shard, monkeypatch):
    """A table's part (one file) is read without a dataset's discovery; a part that is a
    directory of files (as Spark writes one) still through ``pq.read_table``. Both read
    the same updates."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1)
    key = "s1/spark-part"
    directory = shard.blob.root / key
    directory.mkdir(parents=True)
    pq.write_table(updates([("b", 2, 1, 1)]), directory / "part-00000.parquet")
    pq.write_table(updates([("c", 3, 1, 2)]), directory / "part-00001.parquet")
    shard.compare_and_append([Part(key, 1, 2, 2, 0)], 1, 2)
    datasets: list[str] = []
    read_table = pq.read_table
    monkeypatch.setattr(
        pq, "read_table", lambda path, **kwargs: datasets.append(path) or read_table(path, **kwargs)
    )
    assert sorted(expand(shard.snapshot()).column("name").to_pylist()) == ["a", "b", "c", "c"]
    assert datasets == [str(directory)]


def grouped(updates: pa.Table, data_columns: list[str]) -> pa.Table:
    """consolidate's definition, always by grouping (what the fast path must equal)."""
    frame = pl.from_arrow(updates.select([*data_columns, "mz_diff"]))
    assert isinstance(frame, pl.DataFrame)
    summed = frame.group_by(data_columns, maintain_order=True).agg(pl.col("mz_diff").sum())
    return summed.filter(pl.col("mz_diff") != 0).to_arrow()


def test_consolidate_of_distinct_rows_equals_grouping_for_every_type():
    """The no-duplicates fast path gives the same table (types, order, zero diffs dropped)."""
    # The mz_timestamp type's column would clash with persist's own (uint64 too, so covered).
    columns = [
        (t.name, t.name)
        for t in TYPES.values()
        if t.storage == t.name and t.name not in ("unknown", "mz_timestamp")
    ]
    row = {
        "text": "a",
        "int4": 1,
        "uint8": 3,
        "uint2": 2,
        "uint4": 4,
        "bool": True,
        "timestamptz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "timestamp": dt.datetime(2024, 1, 1, 3, 4, 5),
        "time": dt.time(3, 4, 5),
        "date": dt.date(2024, 1, 1),
        "numeric": Decimal("1.5"),
        "jsonb": "{}",
        "interval": {"months": 1, "days": 2, "micros": 3},
        "bytea": b"x",
        "list": [1, 2],
        "mz_timestamp": 0,
        "uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    }
    diffs = [1, 2, 0, -1, 1]
    # Distinct in int8; float8 has a -0.0 (hashes like 0.0, which no other row has).
    rows = [
        {**row, "int8": i, "float8": -0.0 if i == 3 else float(i), "mz_diff": diff}
        for i, diff in enumerate(diffs)
    ]
    table = pa.Table.from_pylist(rows, schema=arrow_schema(columns))
    names = [name for name, _ in columns]
    result = consolidate(table, names)
    assert result.equals(grouped(table, names))
    assert result.column("mz_diff").to_pylist() == [1, 2, -1, 1]
    # Duplicates (here 0.0 and -0.0, NaN and NaN, equal to polars) still group.
    duplicated = pa.concat_tables([table, table.slice(1, 1)])
    floats = pa.table({"x": [0.0, -0.0, float("nan"), float("nan")], "mz_diff": [1, 1, 1, -1]})
    for updates, data in ((duplicated, names), (floats, ["x"])):
        assert consolidate(updates, data).equals(grouped(updates, data))
    assert consolidate(duplicated, names).column("mz_diff").to_pylist() == [1, 4, -1, 1]
    assert consolidate(floats, ["x"]).to_pylist() == [{"x": 0.0, "mz_diff": 2}]


def test_snapshot_reads_only_the_parts_it_needs(shard):
    """Parts entirely after as_of are not read (here: their file is gone, and nobody notices)."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1)
    shard.compare_and_append(updates([("b", 2, 1, 1)]), 1, 2)
    later = shard.state().parts[1]
    (shard.blob.root / later.key).unlink()  # type: ignore[attr-defined]
    assert shard.snapshot(0).column("name").to_pylist() == ["a"]
    with pytest.raises(FileNotFoundError):
        shard.snapshot(1)
