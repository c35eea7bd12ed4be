"""The ``persist`` catalog backend: one shard, fencing by upper, compaction, time travel.

The conformance suite (test_store.py) checks it behaves like every backend;
these check what is particular to it, with real processes where it matters.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from loupe.catalog import (
    CatalogCorruptError,
    CatalogError,
    Cluster,
    ClusterReplica,
    DurableCatalogState,
    FencedError,
    FenceToken,
    create_backend,
)
from loupe.catalog.backends.persist import COLUMNS, PersistCatalogBackend
from loupe.catalog.durable import BACKENDS
from loupe.catalog.objects import Item
from loupe.common.nats_server import die_with_parent
from loupe.persist import Shard, SinceError, open_location
from loupe.persist.location import default_uris
from loupe.persist.shard import arrow_schema

Open = Callable[..., PersistCatalogBackend]


@pytest.fixture
def open_persist(data_dir: Path) -> Iterator[Open]:
    opened: list[PersistCatalogBackend] = []

    def open_(**options: object) -> PersistCatalogBackend:
        catalog = PersistCatalogBackend(data_dir, **options)  # type: ignore[arg-type]
        catalog.open()
        opened.append(catalog)
        return catalog

    yield open_
    for catalog in opened:
        catalog.close()


def catalog_shard(data_dir: Path, shard_id: str = "catalog") -> Shard:
    return Shard(shard_id, *open_location(*default_uris(data_dir)))


def create(catalog: DurableCatalogState, name: str) -> int:
    """CREATE CLUSTER name REPLICAS (r1 (SIZE '1')); returns the commit timestamp."""
    tx = catalog.transaction()
    tx.create_cluster(
        Cluster(
            id="",
            name=name,
            owner_id="",
            managed=False,
            size="",
            replication_factor=1,
            introspection_interval_ns=1_000_000_000,
            introspection_debugging=False,
        ),
        [ClusterReplica(id="", name="r1", cluster_id="", size="1", owner_id="")],
    )
    return catalog.commit_transaction(tx)


def drop(catalog: DurableCatalogState, name: str) -> int:
    tx = catalog.transaction()
    tx.drop_cluster(name)
    return catalog.commit_transaction(tx)


def cluster_names(catalog: DurableCatalogState) -> set[str]:
    return {c.name for c in catalog.get_clusters()}


def blob_part_count(data_dir: Path, shard_id: str = "catalog") -> int:
    return len(list((data_dir / "storage" / "blob" / shard_id).glob("*.parquet")))


# Layout


def test_backend_is_registered_as_persist() -> None:
    """``persist`` resolves through the loupe.catalog_backends entry point."""
    assert BACKENDS.load("persist") is PersistCatalogBackend


def test_catalog_is_one_shard_of_kind_key_value_updates(open_persist: Open, data_dir: Path) -> None:
    """Objects and bookkeeping are rows of one shard; a commit is updates at its timestamp."""
    catalog = open_persist()
    shard = catalog_shard(data_dir)
    before = shard.state()
    timestamp = create(catalog, "c")
    after = shard.state()
    assert [tuple(c) for c in after.columns] == COLUMNS
    # One compare_and_append, at the commit's timestamp.
    assert after.seqno == before.seqno + 1
    assert after.upper == timestamp + 1 == catalog.upper
    changed = {(kind, diff) for kind, _, _, time, diff in catalog.updates() if time == timestamp}
    assert {("cluster", 1), ("cluster_replica", 1), ("id_allocator", -1)} <= changed
    assert {("timestamp", -1), ("timestamp", 1)} <= changed
    rows = {(r["kind"], r["key"]): r["value"] for r in shard.snapshot().to_pylist()}
    assert rows[("config", "epoch")] == "1"
    assert rows[("config", "deploy_generation")] == "0"
    assert rows[("timestamp", "oracle")] == str(timestamp)
    assert ("config", "version") in rows


def test_shard_location_and_id_are_options(data_dir: Path, tmp_path: Path) -> None:
    """Two catalogs in one location under different shard ids do not see each other."""
    blob, consensus = f"file://{tmp_path / 'blob'}", f"sqlite://{tmp_path / 'consensus.sqlite'}"
    a = create_backend("persist", data_dir, blob_uri=blob, consensus_uri=consensus, shard_id="a")
    b = create_backend("persist", data_dir, blob_uri=blob, consensus_uri=consensus, shard_id="b")
    try:
        a.open()
        b.open()
        timestamp = create(a, "only_in_a")
        assert "only_in_a" not in cluster_names(b)
        b.confirm_leadership()
        assert not (data_dir / "storage").exists()
        assert Shard("a", *open_location(blob, consensus)).upper == timestamp + 1
    finally:
        a.close()
        b.close()


def test_not_initialised_until_the_first_open(data_dir: Path) -> None:
    """A fresh location is not initialised, and constructing a backend creates nothing."""
    catalog = PersistCatalogBackend(data_dir)
    assert not (data_dir / "storage").exists()
    assert not catalog.is_initialized()
    assert catalog.stored_fence() is None
    with pytest.raises(CatalogError, match="not initialised"):
        catalog.open_read_only()
    catalog.open()
    assert catalog.is_initialized()
    assert catalog.stored_fence() == FenceToken(0, 1)
    catalog.close()


# Fencing


def test_fenced_commit_writes_nothing(open_persist: Open, data_dir: Path) -> None:
    """The losing compare_and_append leaves the shard's upper and its parts as they were."""
    first = open_persist()
    second = open_persist()
    shard = catalog_shard(data_dir)
    upper, parts = shard.upper, blob_part_count(data_dir)
    with pytest.raises(FencedError) as caught:
        create(first, "zombie")
    assert (caught.value.ours, caught.value.current) == (FenceToken(0, 1), FenceToken(0, 2))
    assert shard.upper == upper
    assert blob_part_count(data_dir) == parts
    assert "zombie" not in cluster_names(second)


def test_cooperating_writer_with_the_same_fence_does_not_fence(
    open_persist: Open, data_dir: Path
) -> None:
    """A write under our own fence (a cooperative edit) moves the upper; we write on top."""
    live = open_persist()
    helper = PersistCatalogBackend(data_dir)
    helper.open_read_only()
    # What the debug tool's `edit --cooperative` amounts to: a write under the live fence.
    helper._write(live.fence, [("id_allocator", '{"name":"probe"}', '{"next_id":7}')], 0)
    live.confirm_leadership()
    timestamp = create(live, "after")
    assert timestamp == live.read_timestamp()
    reader = open_persist()
    assert {"probe": 7}.items() <= {a.name: a.next_id for a in reader.get_id_allocators()}.items()
    assert "after" in cluster_names(reader)


def test_concurrent_opens_get_distinct_epochs(data_dir: Path) -> None:
    """Opens racing on one shard (initialisation included) retry and all succeed, in order."""
    catalogs = [PersistCatalogBackend(data_dir) for _ in range(4)]
    errors: list[BaseException] = []

    def open_(catalog: PersistCatalogBackend) -> None:
        try:
            catalog.open()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=open_, args=(c,)) for c in catalogs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(c.epoch for c in catalogs) == [1, 2, 3, 4]
    last = max(catalogs, key=lambda c: c.epoch)
    last.confirm_leadership()
    for catalog in catalogs:
        if catalog is not last:
            with pytest.raises(FencedError):
                catalog.confirm_leadership()


CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from loupe.catalog import Cluster, ClusterReplica, FencedError, create_backend

    def cluster(name):
        return Cluster(id="", name=name, owner_id="", managed=True, size="1",
                       replication_factor=2, introspection_interval_ns=1_000_000_000,
                       introspection_debugging=False)

    def create(catalog, name):
        tx = catalog.transaction()
        tx.create_cluster(cluster(name), [])
        return catalog.commit_transaction(tx)

    catalog = create_backend("persist", Path(sys.argv[1]))
    catalog.open()
    print("opened", catalog.epoch, flush=True)
    for line in sys.stdin:
        command, name = line.split()
        if command == "commit":
            try:
                print("committed", create(catalog, name), flush=True)
            except FencedError as error:
                print("fenced", json.dumps(str(error)), flush=True)
        elif command == "loop":
            for i in range(1_000_000):
                create(catalog, f"{name}{i}")
                print("acked", i, flush=True)
    """
)


def start_child(data_dir: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    assert child.stdout is not None
    assert child.stdout.readline().split()[0] == "opened"
    return child


def ask(child: subprocess.Popen[str], line: str) -> list[str]:
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()
    return child.stdout.readline().split(maxsplit=1)


def test_second_process_fences_the_first(data_dir: Path) -> None:
    """An open in another process fences this one's next commit, naming both tokens."""
    first = start_child(data_dir)
    second = None
    try:
        assert ask(first, "commit before")[0] == "committed"
        second = start_child(data_dir)
        answer, message = ask(first, "commit zombie")
        assert answer == "fenced"
        assert "(deploy_generation=0, epoch=1)" in json.loads(message)
        assert "(deploy_generation=0, epoch=2)" in json.loads(message)
        assert ask(second, "commit live")[0] == "committed"
    finally:
        for child in (first, second):
            if child is not None:
                child.kill()
                child.wait()
    reader = PersistCatalogBackend(data_dir)
    reader.open_read_only()
    assert reader.epoch == 2
    assert {"before", "live"} <= cluster_names(reader)
    assert "zombie" not in cluster_names(reader)


def test_kill_9_between_and_during_commits_is_all_or_nothing(data_dir: Path) -> None:
    """After kill -9 every acknowledged commit is there, and each commit is whole or absent."""
    for round_ in range(3):
        child = start_child(data_dir)
        try:
            assert child.stdin is not None
            assert child.stdout is not None
            child.stdin.write(f"loop r{round_}c\n")
            child.stdin.flush()
            # Kill it a little after a number of commits, likely mid-commit.
            lines = [child.stdout.readline() for _ in range(5 + 3 * round_)]
            time.sleep(0.002 * round_)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        # The last acknowledgement the child wrote before it died.
        assert child.stdout is not None
        lines += child.stdout.read().splitlines()
        acknowledged = int(lines[-1].split()[1])
        catalog = PersistCatalogBackend(data_dir)
        catalog.open()
        created = sorted(
            (int(c.name.removeprefix(f"r{round_}c")), c)
            for c in catalog.get_clusters()
            if c.name.startswith(f"r{round_}c")
        )
        numbers = [n for n, _ in created]
        # A prefix of the commits: all acknowledged ones, perhaps one more.
        assert numbers == list(range(len(numbers)))
        assert len(numbers) - 1 in (acknowledged, acknowledged + 1)
        replicas = catalog.get_cluster_replicas()
        for _, c in created:
            assert sorted(r.name for r in replicas if r.cluster_id == c.id) == ["r1", "r2"]
        catalog.close()


# Compaction and time travel


def test_compaction_bounds_the_parts_and_keeps_reads(open_persist: Open, data_dir: Path) -> None:
    """Commits keep the part count at max_parts; every read is the same as before compaction."""
    catalog = open_persist(max_parts=1000)
    stamps = [create(catalog, f"c{i}") for i in range(12)]
    stamps += [drop(catalog, f"c{i}") for i in range(0, 12, 3)]
    shard = catalog_shard(data_dir)
    assert len(shard.state().parts) == 1 + len(stamps)
    history = {t: catalog.rows_as_of(t) for t in stamps}
    catalog.close()

    compacting = open_persist(max_parts=3)
    assert len(shard.state().parts) <= 3
    assert blob_part_count(data_dir) == len(shard.state().parts)
    assert {t: compacting.rows_as_of(t) for t in stamps} == history
    for i in range(20):
        create(compacting, f"d{i}")
        assert len(shard.state().parts) <= 3
    reader = PersistCatalogBackend(data_dir)
    reader.open_read_only()
    assert {t: reader.rows_as_of(t) for t in stamps} == history
    assert json.loads(reader.dump())["collections"] == json.loads(compacting.dump())["collections"]
    kept = {f"c{i}" for i in range(12) if i % 3} | {f"d{i}" for i in range(20)}
    assert kept <= cluster_names(reader)
    assert not {f"c{i}" for i in range(0, 12, 3)} & cluster_names(reader)


def test_catalog_reads_as_of_past_write_timestamps(open_persist: Open) -> None:
    """rows_as_of(t) is the catalog after the last commit at or before t."""
    catalog = open_persist(now=lambda: 1_000)
    start = catalog.read_timestamp()
    created = create(catalog, "c")
    dropped = drop(catalog, "c")
    assert (created, dropped) == (start + 1, start + 2)
    assert "c" not in {c.name for c in catalog.state_as_of(start).table("cluster").values()}
    assert "c" in {c.name for c in catalog.state_as_of(created).table("cluster").values()}
    assert "c" not in {c.name for c in catalog.state_as_of(dropped).table("cluster").values()}
    with pytest.raises(CatalogError, match="later commit"):
        catalog.rows_as_of(dropped + 1)
    with pytest.raises(CatalogError, match="did not exist"):
        catalog.rows_as_of(start - 1)
    # Reopening (an epoch bump, no commit) changes no answer.
    reopened = open_persist(now=lambda: 1_000)
    assert reopened.rows_as_of(created) == catalog.rows_as_of(created)


def test_history_beyond_retention_is_compacted_away(open_persist: Open) -> None:
    """With no retained history, reads as of old timestamps say so; the present still reads."""
    catalog = open_persist(max_parts=2, history_ms=0, now=lambda: 5_000)
    stamps = [create(catalog, f"c{i}") for i in range(6)]
    with pytest.raises(SinceError):
        catalog.rows_as_of(stamps[0])
    assert catalog.rows_as_of(stamps[-1]) == catalog.rows_as_of(catalog.read_timestamp())
    assert {f"c{i}" for i in range(6)} <= {
        c.name for c in catalog.state_as_of(stamps[-1]).table("cluster").values()
    }


# Damage


def test_shard_that_is_not_a_catalog_is_refused(data_dir: Path) -> None:
    """A shard with other columns under the catalog's id is an error and is left untouched."""
    shard = catalog_shard(data_dir)
    columns = [("name", "text"), ("n", "int8")]
    shard.ensure(columns)
    rows = pa.table(
        {"name": ["soup"], "n": [1], "mz_timestamp": [0], "mz_diff": [1]},
        schema=arrow_schema(columns),
    )
    shard.compare_and_append(rows, 0, 1)
    before = shard.state()
    with pytest.raises(CatalogCorruptError, match="not a Loupe catalog"):
        PersistCatalogBackend(data_dir).open()
    assert shard.state() == before


def test_damaged_entry_is_refused(open_persist: Open, data_dir: Path) -> None:
    """A key with two values (an update no catalog writer makes) stops the open, unwritten."""
    catalog = open_persist()
    catalog.close()
    shard = catalog_shard(data_dir)
    upper = shard.upper
    kind, key, _ = next(
        (r["kind"], r["key"], r["value"])
        for r in shard.snapshot().to_pylist()
        if r["kind"] == "cluster"
    )
    damage = pa.table(
        {
            "kind": [kind],
            "key": [key],
            "value": ['{"id": 1}'],
            "mz_timestamp": [upper],
            "mz_diff": [1],
        },
        schema=arrow_schema(COLUMNS),
    )
    shard.compare_and_append(damage, upper, upper + 1)
    with pytest.raises(CatalogCorruptError, match="two values"):
        PersistCatalogBackend(data_dir).open()
    assert shard.upper == upper + 1


# Speed


def test_commit_latency(open_persist: Open) -> None:
    """A commit is one small part and one consensus CAS: print its p50 and p99."""
    catalog = open_persist()
    samples = []
    for i in range(60):
        began = time.perf_counter()
        create(catalog, f"c{i}")
        samples.append(time.perf_counter() - began)
    p50 = statistics.median(samples) * 1000
    p99 = sorted(samples)[int(len(samples) * 0.99) - 1] * 1000
    print(f"\npersist catalog commit: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    assert p50 < 100


def test_open_with_ten_thousand_items(open_persist: Open, data_dir: Path) -> None:
    """Opening a catalog of 10,000 items after many commits: print it, bound it loosely."""
    catalog = open_persist()
    tx = catalog.transaction()
    for i in range(10_000):
        tx.create_item(
            Item(
                id="",
                schema_id="u1",
                name=f"t{i}",
                type="table",
                owner_id="",
                create_sql=f"CREATE TABLE t{i} (a int, b text)",
            )
        )
    catalog.commit_transaction(tx)
    for i in range(40):
        create(catalog, f"c{i}")
    catalog.close()
    began = time.perf_counter()
    reopened = open_persist()
    elapsed = time.perf_counter() - began
    parts = len(catalog_shard(data_dir).state().parts)
    print(f"\npersist catalog open with 10,000 items: {elapsed * 1000:.0f} ms ({parts} parts)")
    assert len(reopened.get_items()) == 10_000
    assert elapsed < 5
