"""Shards: compare-and-append, consolidated snapshots, since."""

from __future__ import annotations

import pyarrow as pa
import pytest

from loupe.persist import LocalBlob, Shard, SinceError, SqliteConsensus, UpperMismatch, expand
from loupe.persist.shard import arrow_schema

COLUMNS = [("name", "text"), ("n", "int8")]


@pytest.fixture
def shard(tmp_path):
    shard = Shard("s1", LocalBlob(tmp_path / "blob"), SqliteConsensus(tmp_path / "c.sqlite"))
    shard.ensure(COLUMNS)
    return shard


def updates(rows):
    names, ns, ts, diffs = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {"name": list(names), "n": list(ns), "mz_timestamp": list(ts), "mz_diff": list(diffs)},
        schema=arrow_schema(COLUMNS),
    )


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
