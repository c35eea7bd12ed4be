"""One conformance suite for every consensus and blob plugin of persist.

Consensus: sqlite, postgres (skipped without PostgreSQL), nats-kv (the
session's nats-server). Blob: local, arrowfs-local (``ArrowFsBlob`` on
``pyarrow.fs.LocalFileSystem``: the code path of S3).
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from loupe.persist import Part, Shard, ValueTooLarge, expand, open_blob, open_location
from loupe.persist.arrowfs import ArrowFsBlob
from loupe.persist.location import CONSENSUS_PLUGINS, Consensus, LocalBlob, open_consensus
from loupe.persist.nats_kv import NatsKvConsensus, encode_key
from loupe.persist.shard import arrow_schema

COLUMNS = [("name", "text"), ("n", "int8")]


def second_handle(consensus_uri: str) -> Consensus:
    """Another, independent client of the same store (its own connections)."""
    return CONSENSUS_PLUGINS.load(consensus_uri.split("://")[0]).from_uri(consensus_uri)


# -- consensus ------------------------------------------------------------------


def test_head_of_an_unwritten_key_is_none(consensus):
    """Nothing there is None, not an empty value."""
    assert consensus.head("s1") is None


def test_first_write_is_seqno_one_and_happens_once(consensus):
    """Expecting None creates the key at seqno 1; a second creation is refused."""
    assert consensus.compare_and_set("s1", None, b"first")
    assert consensus.head("s1") == (1, b"first")
    assert not consensus.compare_and_set("s1", None, b"again")
    assert consensus.head("s1") == (1, b"first")


def test_compare_and_set_needs_the_current_seqno(consensus):
    """Each success adds one to the seqno; stale, future and None expectations fail."""
    consensus.compare_and_set("s1", None, b"v1")
    assert consensus.compare_and_set("s1", 1, b"v2")
    assert consensus.head("s1") == (2, b"v2")
    for stale in (1, 3, None):
        assert not consensus.compare_and_set("s1", stale, b"wrong")
    assert consensus.head("s1") == (2, b"v2")
    assert consensus.compare_and_set("s1", 2, b"v3")
    assert consensus.head("s1") == (3, b"v3")


def test_heads_reads_the_keys_that_have_a_value(consensus):
    """``heads`` is ``head`` of many keys: unwritten ones are left out."""
    consensus.compare_and_set("s1", None, b"one")
    consensus.compare_and_set("s2", None, b"two")
    assert consensus.compare_and_set("s2", 1, b"two again")
    assert consensus.heads(["s1", "s2", "never"]) == {"s1": (1, b"one"), "s2": (2, b"two again")}
    assert consensus.heads([]) == {}


def test_compare_and_set_many_decides_each_write_on_its_own(consensus):
    """A stale expectation fails its own write only; the others go in, each seqno + 1."""
    consensus.compare_and_set("s1", None, b"v1")
    consensus.compare_and_set("s2", None, b"v1")
    outcomes = consensus.compare_and_set_many(
        [("s1", 1, b"v2"), ("s2", 7, b"stale"), ("s3", None, b"new"), ("s4", 1, b"nothing there")]
    )
    assert outcomes == [True, False, True, False]
    assert consensus.heads(["s1", "s2", "s3", "s4"]) == {
        "s1": (2, b"v2"),
        "s2": (1, b"v1"),
        "s3": (1, b"new"),
    }
    assert consensus.compare_and_set_many([("s2", 1, b"late")]) == [True]
    assert consensus.compare_and_set_many([]) == []
    assert consensus.head("s2") == (2, b"late")


def test_keys_are_independent_and_values_round_trip(consensus):
    """Any bytes come back as written, per key; odd key characters do not collide."""
    values = {
        "s1": b"",
        "u1": bytes(range(256)) * 3,
        "a/b": b"\x00" * 100_000,
        "x.y": b"dot",
        "x_2Ey": b"looks like an escaped dot",
        "caf\u00e9 d\u00e9j\u00e0": "\u00fcnicode".encode(),
    }
    for key, value in values.items():
        assert consensus.compare_and_set(key, None, value)
    for key, value in values.items():
        assert consensus.head(key) == (1, value)
    assert consensus.compare_and_set("s1", 1, b"moved")
    assert consensus.head("u1") == (1, values["u1"])


def test_two_writers_expecting_the_same_seqno_exactly_one_wins(consensus, consensus_uri):
    """Two independent clients read the same head; only one CAS lands, the other sees why."""
    other = second_handle(consensus_uri)
    try:
        consensus.compare_and_set("s1", None, b"v1")
        assert consensus.head("s1") == other.head("s1") == (1, b"v1")
        assert consensus.compare_and_set("s1", 1, b"mine")
        assert not other.compare_and_set("s1", 1, b"theirs")
        # The loser re-reads and goes on from the winner's value.
        assert other.head("s1") == (2, b"mine")
        assert other.compare_and_set("s1", 2, b"theirs")
        assert consensus.head("s1") == (3, b"theirs")
    finally:
        other.close()


def race(handles: list[Consensus], key: str, expected: int) -> list[bytes]:
    """Every handle's thread tries compare_and_set(expected) at once; the values that won."""
    barrier = threading.Barrier(len(handles))
    wins: list[bytes] = []
    errors: list[BaseException] = []

    def attempt(handle: Consensus, value: bytes) -> None:
        try:
            barrier.wait(10)
            if handle.compare_and_set(key, expected, value):
                wins.append(value)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [
        threading.Thread(target=attempt, args=(handle, f"{expected}-{i}".encode()))
        for i, handle in enumerate(handles)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    return wins


def test_racing_threads_exactly_one_wins_each_round(consensus, consensus_uri):
    """Threads on two clients race the same expected seqno: one winner per round."""
    other = second_handle(consensus_uri)
    handles = [consensus] * 3 + [other] * 3
    try:
        consensus.compare_and_set("race", None, b"start")
        for expected in range(1, 5):
            wins = race(handles, "race", expected)
            assert len(wins) == 1
            assert consensus.head("race") == (expected + 1, wins[0])
    finally:
        other.close()


def test_a_reopened_store_has_every_acknowledged_write(consensus, consensus_uri):
    """A write is in the store, not in the client: a new client reads it."""
    consensus.compare_and_set("s1", None, b"v1")
    consensus.compare_and_set("s1", 1, b"v2")
    other = second_handle(consensus_uri)
    try:
        assert other.head("s1") == (2, b"v2")
    finally:
        other.close()


def test_a_shard_state_beyond_nats_max_payload_is_a_clear_error(nats_url):
    """NATS KV holds one message per value: a too large one fails saying what to do."""
    consensus = NatsKvConsensus(nats_url, "oversized")
    try:
        limit = consensus.max_value
        assert consensus.compare_and_set("s1", None, b"x" * limit)
        with pytest.raises(ValueTooLarge, match="max_payload"):
            consensus.compare_and_set("s1", 1, b"x" * (limit + 1))
        assert consensus.head("s1") == (1, b"x" * limit)
    finally:
        consensus.close()


def test_nats_keys_are_escaped_injectively():
    """Shard ids stay readable; anything NATS would refuse (or read as a token) is escaped."""
    assert encode_key("u1") == "u1"
    assert encode_key("a.b") == "a_2Eb"
    assert encode_key("a_2Eb") == "a_5F2Eb"
    assert encode_key("\u00e9") == "_C3_A9"


def test_open_consensus_shares_clients_that_hold_connections(nats_url, tmp_path):
    """NATS KV (a thread and a connection) is opened once per URI; SQLite each time."""
    uri = f"{nats_url}/shared"
    assert open_consensus(uri) is open_consensus(uri)
    sqlite_uri = f"sqlite://{tmp_path}/c.sqlite"
    assert open_consensus(sqlite_uri) is not open_consensus(sqlite_uri)


def test_unknown_schemes_name_the_known_ones(tmp_path):
    """A typo in a location says which schemes would have worked."""
    with pytest.raises(ValueError, match=r"unknown scheme 'memory'.*nats.*postgres.*sqlite"):
        open_location(f"file://{tmp_path}/blob", "memory://x")
    with pytest.raises(ValueError, match=r"unknown scheme 'gopher'.*arrowfs-local.*file.*s3"):
        open_location("gopher://x", f"sqlite://{tmp_path}/c.sqlite")
    with pytest.raises(ValueError, match="no scheme"):
        open_location("relative/dir", f"sqlite://{tmp_path}/c.sqlite")


# -- blob -----------------------------------------------------------------------


def parquet_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def sample_updates(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    names, ns, ts, diffs = zip(*rows, strict=True)
    return pa.table(
        {"name": names, "n": ns, "mz_timestamp": ts, "mz_diff": diffs},
        schema=arrow_schema(COLUMNS),
    )


def test_blob_put_get_exists_delete(blob):
    """Objects round-trip by key; deleting twice is fine; a missing get says so."""
    assert not blob.exists("s1/a")
    blob.put("s1/a", b"hello")
    blob.put("s1/nested/b", b"")
    assert blob.exists("s1/a")
    assert blob.get("s1/a") == b"hello"
    assert blob.get("s1/nested/b") == b""
    blob.delete("s1/a")
    blob.delete("s1/a")
    assert not blob.exists("s1/a")
    with pytest.raises(FileNotFoundError):
        blob.get("s1/a")


def test_blob_put_is_atomic_for_concurrent_readers(blob):
    """A reader polling while big objects are written sees each one whole or not at all."""
    size = 8 * 1024 * 1024
    keys = [f"s1/big-{i}" for i in range(4)]
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            for key in keys:
                if blob.exists(key):
                    seen.append(len(blob.get(key)))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for key in keys:
            blob.put(key, b"x" * size)
    finally:
        done.set()
        reader.join()
    assert seen
    assert set(seen) == {size}


class FailingWrites(pafs.FileSystemHandler):
    """LocalFileSystem whose writes die after the first few bytes (a full disk, a crash)."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def get_type_name(self) -> str:
        return "failing-local"

    def normalize_path(self, path: str) -> str:
        return path

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        target = self.local.open_output_stream(path)

        class Dying:
            closed = False

            def write(self, data: Any) -> int:
                target.write(bytes(data)[:3])
                target.flush()
                raise OSError("No space left on device")

            def flush(self) -> None:
                target.flush()

            def close(self) -> None:
                self.closed = True
                target.close()

        return pa.PythonFile(Dying(), mode="w")

    # Everything else as the local filesystem does it.

    def get_file_info(self, paths):
        return [self.local.get_file_info(p) for p in paths]

    def get_file_info_selector(self, selector):
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("refusing to empty the root")

    def delete_file(self, path):
        self.local.delete_file(path)

    def move(self, src, dest):
        self.local.move(src, dest)

    def copy_file(self, src, dest):
        self.local.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.local.open_input_stream(path)

    def open_input_file(self, path):
        return self.local.open_input_file(path)

    def open_append_stream(self, path, metadata):
        return self.local.open_append_stream(path)


def test_a_failed_put_leaves_nothing_visible(tmp_path):
    """A write that dies half-way leaves neither the object nor a scratch file."""
    root = tmp_path / "blob"
    blob = ArrowFsBlob(pafs.PyFileSystem(FailingWrites()), str(root))
    with pytest.raises(OSError, match="No space"):
        blob.put("s1/part.parquet", b"0123456789" * 1000)
    assert not blob.exists("s1/part.parquet")
    assert not any(path.is_file() for path in root.rglob("*"))


def test_parquet_parts_are_read_through_the_blobs_filesystem(blob):
    """Readers get (filesystem, path) from the blob: files and Spark-style directories."""
    table = sample_updates([("a", 1, 0, 1), ("b", 2, 0, 1)])
    blob.put("s1/one.parquet", parquet_bytes(table))
    filesystem, path = blob.filesystem_path("s1/one.parquet")
    assert pq.read_table(path, filesystem=filesystem).equals(table)
    # A directory as Spark writes it: data files plus markers readers must skip.
    blob.put("s1/dir/part-00000.parquet", parquet_bytes(table.slice(0, 1)))
    blob.put("s1/dir/part-00001.parquet", parquet_bytes(table.slice(1, 1)))
    blob.put("s1/dir/_SUCCESS", b"")
    blob.put("s1/dir/.part-00000.parquet.crc", b"crc")
    filesystem, path = blob.filesystem_path("s1/dir")
    assert sorted(pq.read_table(path, filesystem=filesystem).to_pylist(), key=str) == sorted(
        table.to_pylist(), key=str
    )
    blob.delete("s1/dir")
    assert not blob.exists("s1/dir")
    assert not blob.exists("s1/dir/part-00000.parquet")


def test_shards_work_over_every_blob_and_consensus(blob, consensus):
    """Append, snapshot, compact and read again through each pair of plugins."""
    shard = Shard("s1", blob, consensus)
    shard.ensure(COLUMNS)
    shard.compare_and_append(sample_updates([("a", 1, 0, 1), ("b", 2, 0, 1)]), 0, 1)
    shard.compare_and_append(sample_updates([("a", 1, 1, -1), ("c", 3, 1, 2)]), 1, 2)
    expected = [("b", 2, 1), ("c", 3, 2)]
    assert sorted(tuple(r.values()) for r in shard.snapshot().to_pylist()) == expected
    old = [p.key for p in shard.state().parts]
    state = shard.compact(since=1)
    assert len(state.parts) == 1
    assert not any(blob.exists(key) for key in old)
    assert sorted(tuple(r.values()) for r in shard.snapshot().to_pylist()) == expected
    assert sorted(expand(shard.snapshot()).column("name").to_pylist()) == ["b", "c", "c"]


def test_spark_style_part_directories_are_appended_and_read(tmp_path):
    """A part that is a directory of files (the storage writer's output) reads as one part."""
    blob = LocalBlob(tmp_path / "blob")
    shard = Shard("s1", blob, open_consensus(f"sqlite://{tmp_path}/c.sqlite"))
    shard.ensure(COLUMNS)
    # Spark writes int64 where the shard says uint64: the reader casts.
    spark_like = sample_updates([("a", 1, 0, 1), ("b", 2, 0, 1)])
    spark_like = spark_like.set_column(
        2, "mz_timestamp", spark_like.column("mz_timestamp").cast(pa.int64())
    )
    directory = tmp_path / "blob" / "flushes" / "f1" / "shard=s1"
    directory.mkdir(parents=True)
    pq.write_table(spark_like.slice(0, 1), directory / "part-00000-x.snappy.parquet")
    pq.write_table(spark_like.slice(1, 1), directory / "part-00001-x.snappy.parquet")
    (directory / "_SUCCESS").write_bytes(b"")
    shard.compare_and_append([Part("flushes/f1/shard=s1", 0, 1, 2)], 0, 1)
    assert sorted(shard.snapshot().column("name").to_pylist()) == ["a", "b"]


def test_s3_uris_configure_pyarrow_s3(tmp_path):
    """s3://bucket/prefix?… becomes an S3FileSystem rooted at bucket/prefix (no request made)."""
    blob = open_blob(
        "s3://bucket/loupe/blob?region=eu-west-1&endpoint_override=127.0.0.1:9&scheme=http"
    )
    assert isinstance(blob, ArrowFsBlob)
    assert blob.filesystem.type_name == "s3"
    assert blob.filesystem.region == "eu-west-1"
    assert blob.filesystem_path("s1/x.parquet")[1] == "bucket/loupe/blob/s1/x.parquet"
    assert blob.path("s1/x.parquet") == "s3://bucket/loupe/blob/s1/x.parquet"
    with pytest.raises(ValueError, match="bogus"):
        open_blob("s3://bucket/prefix?region=eu-west-1&bogus=1")
    local = open_blob(f"arrowfs-local://{tmp_path}/b")
    assert isinstance(local, ArrowFsBlob)
    assert isinstance(local.filesystem, pafs.LocalFileSystem)
    local.put("k", b"v")
    assert Path(tmp_path / "b" / "k").read_bytes() == b"v"
