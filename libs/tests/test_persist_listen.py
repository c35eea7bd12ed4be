"""Shard.listen: new updates batch by batch as the upper advances, woken over NATS."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

from loupe.persist import (
    LocalBlob,
    Shard,
    SinceError,
    SqliteConsensus,
    nats_upper_notifier,
    upper_subject,
)
from loupe.persist.shard import arrow_schema
from loupe.persist.testing import NAME_N_COLUMNS, name_n_updates
from loupe.testing import assert_eventually

COLUMNS = NAME_N_COLUMNS
updates = name_n_updates


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(row.values()) for row in table.to_pylist())


def test_listen_hands_out_each_update_after_as_of_once(shard):
    """Batches cover [previous upper, new upper); times up to as_of are the snapshot's."""
    shard.compare_and_append(updates([("a", 1, 0, 1), ("b", 2, 1, 1)]), 0, 2)
    listener = shard.listen(0)
    batch = listener.poll()
    assert batch is not None
    assert batch.upper == 2
    assert rows(batch.updates) == [("b", 2, 1, 1)]
    assert listener.poll() is None
    shard.compare_and_append(updates([("a", 1, 2, -1), ("c", 3, 4, 1)]), 2, 5)
    shard.compare_and_append(None, 5, 6)
    updates_, upper = listener.next(timeout=5)
    assert upper == 6
    assert rows(updates_) == [("a", 1, 2, -1), ("c", 3, 4, 1)]
    # Only the upper moved: an empty batch says so.
    shard.compare_and_append(None, 6, 9)
    batch = listener.next(timeout=5)
    assert batch.upper == 9
    assert batch.updates.num_rows == 0
    assert batch.updates.schema == arrow_schema(COLUMNS)


def test_listen_from_a_future_time_waits_for_it(shard):
    """as_of at or past the upper: nothing until the upper passes as_of + 1."""
    listener = shard.listen(3)
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 4)
    assert listener.poll() is None
    shard.compare_and_append(updates([("b", 2, 4, 1)]), 4, 5)
    assert rows(listener.next(timeout=5).updates) == [("b", 2, 4, 1)]


def test_listen_to_a_shard_not_created_yet_waits_for_it(tmp_path):
    """A listener may start before the writer creates the shard: it is empty until then."""
    blob, consensus_ = LocalBlob(tmp_path / "blob"), SqliteConsensus(tmp_path / "c.sqlite")
    listener = Shard("later", blob, consensus_).listen(0)
    assert listener.poll() is None
    writer = Shard("later", blob, consensus_)
    writer.ensure(COLUMNS)
    writer.compare_and_append(updates([("a", 1, 1, 1)]), 0, 2)
    assert rows(listener.next(timeout=5).updates) == [("a", 1, 1, 1)]


def test_listen_before_since_is_an_error(shard):
    """A listener cannot start where history is compacted away."""
    shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 5)
    shard.downgrade_since(3)
    with pytest.raises(SinceError, match="compacted up to 3"):
        shard.listen(2)
    batch = shard.listen(3).poll()
    assert (batch.updates.num_rows, batch.upper) == (0, 5)


def test_listener_overtaken_by_the_since_fails_instead_of_repeating(shard):
    """Compaction past what a listener has read would merge old and new: SinceError."""
    listener = shard.listen(0)
    shard.compare_and_append(updates([("a", 1, 1, 1)]), 0, 2)
    shard.compare_and_append(updates([("b", 2, 2, 1)]), 2, 3)
    shard.compact(since=2)
    with pytest.raises(SinceError, match="fell behind"):
        listener.poll()


def test_listener_keeps_going_across_compaction_behind_it(shard):
    """Parts merged below the listener's frontier change nothing it hands out."""
    listener = shard.listen(0)
    shard.compare_and_append(updates([("a", 1, 1, 1)]), 0, 2)
    shard.compare_and_append(updates([("a", 1, 2, -1), ("b", 2, 2, 1)]), 2, 3)
    assert listener.next(timeout=5).upper == 3
    shard.compact(since=2)
    shard.compare_and_append(updates([("c", 3, 3, 1)]), 3, 4)
    assert rows(listener.next(timeout=5).updates) == [("c", 3, 3, 1)]


def test_listener_reads_only_parts_that_can_hold_new_times(shard):
    """Parts wholly before the frontier are not read again (their file may as well be gone)."""
    listener = shard.listen(0)
    shard.compare_and_append(updates([("a", 1, 1, 1)]), 0, 2)
    listener.next(timeout=5)
    read_already = shard.state().parts[0]
    (shard.blob.root / read_already.key).unlink()
    shard.compare_and_append(updates([("b", 2, 2, 1)]), 2, 3)
    assert rows(listener.next(timeout=5).updates) == [("b", 2, 2, 1)]


def test_blocking_iteration_ends_when_closed(shard):
    """`for batch in listener` blocks for new uppers and stops at close()."""
    listener = shard.listen(0, poll_interval=0.01)
    seen: list[int] = []

    def consume() -> None:
        for batch in listener:
            seen.append(batch.upper)

    consumer = threading.Thread(target=consume)
    consumer.start()
    for upper in (2, 3):
        shard.compare_and_append(None, shard.upper, upper)
        deadline = time.monotonic() + 5
        while upper not in seen and time.monotonic() < deadline:
            time.sleep(0.01)
    listener.close()
    consumer.join(5)
    assert not consumer.is_alive()
    assert seen == [2, 3]


def test_a_failing_notify_hook_does_not_fail_the_append(tmp_path):
    """The append is durable before the hook runs; a hook error is only logged."""
    calls: list[tuple[str, int]] = []

    def notify(shard_id: str, upper: int) -> None:
        calls.append((shard_id, upper))
        raise ConnectionError("nats is down")

    shard = Shard(
        "s1", LocalBlob(tmp_path / "blob"), SqliteConsensus(tmp_path / "c.sqlite"), notify=notify
    )
    shard.ensure(COLUMNS)
    assert shard.compare_and_append(updates([("a", 1, 0, 1)]), 0, 1).upper == 1
    assert calls == [("s1", 1)]


async def test_async_listener_wakes_on_the_nats_notification(tmp_path, nats_connection):
    """With a NATS connection a listener answers at once, not at its (long) poll interval."""
    blob, consensus_ = LocalBlob(tmp_path / "blob"), SqliteConsensus(tmp_path / "c.sqlite")
    writer = Shard("s1", blob, consensus_, notify=nats_upper_notifier(nats_connection))
    writer.ensure(COLUMNS)
    reader = Shard("s1", blob, consensus_)
    published: list[bytes] = []

    async def record(message) -> None:
        published.append(message.data)

    spy = await nats_connection.subscribe(upper_subject("s1"), cb=record)
    async with reader.listen(0, nats=nats_connection, poll_interval=60) as listener:
        waiting = asyncio.create_task(listener.anext(timeout=10))
        await asyncio.sleep(0.2)  # the listener has polled once and is asleep
        began = time.monotonic()
        # From another thread, as the storage writer appends.
        await asyncio.to_thread(writer.compare_and_append, updates([("a", 1, 1, 1)]), 0, 2)
        batch = await waiting
        woke_after = time.monotonic() - began
        # And from the loop's own thread.
        writer.compare_and_append(None, 2, 3)
        assert (await listener.anext(timeout=10)).upper == 3
    assert rows(batch.updates) == [("a", 1, 1, 1)]
    assert batch.upper == 2
    assert woke_after < 5

    def both_published() -> None:
        assert published == [b"2", b"3"]

    await assert_eventually(both_published, timeout=5)
    await spy.unsubscribe()


async def test_async_iteration_over_every_consensus(shard):
    """`async for` yields the same batches as blocking iteration."""
    listener = shard.listen(0, poll_interval=0.01)
    shard.compare_and_append(updates([("a", 1, 1, 1)]), 0, 2)
    async for batch in listener:
        assert rows(batch.updates) == [("a", 1, 1, 1)]
        break
    await listener.aclose()
    assert await listener.anext() is None


async def test_cancelling_a_listener_woken_at_that_moment_stops_it(shard):
    """A cancel arriving as the wakeup fires ends the iteration (the chaos run's zombie feeder).

    Python 3.11's ``asyncio.wait_for`` returns the inner result instead of
    raising when the cancel and the inner completion land in one loop turn:
    a replica's source feeder cancelled then (its last reader dropped) kept
    pushing the shard's uppers into the next reader of that source, whose
    dataflow passed its as_of before its snapshot came: a materialized view
    read as empty.
    """
    shard.ensure(COLUMNS)
    listener = shard.listen(0, poll_interval=60.0)
    task = asyncio.create_task(listener.anext())
    for _ in range(20):  # until it waits for the wakeup (after its first poll)
        await asyncio.sleep(0.05)
    assert not task.done()
    assert listener._async_wakeup is not None
    listener._async_wakeup.set()  # a writer's NATS upper notification (set on the loop) ...
    task.cancel()  # ... in the same turn as the feeder's cancel
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    listener.close()
