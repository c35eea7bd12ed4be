"""Heartbeats come from their own thread: a blocked loop or a busy engine does not stop them."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from loupe.compute_replica.debug import busy_step
from loupe.proto.compute.v1 import compute_pb2
from loupe.testing import assert_eventually


def sent_between(heartbeats: list[compute_pb2.Heartbeat], start: float, end: float) -> list[int]:
    """Send times (ms) of the heartbeats sent within [start, end] (wall-clock seconds)."""
    return [h.sent_at_ms for h in heartbeats if start * 1000 <= h.sent_at_ms <= end * 1000]


async def test_heartbeats_go_on_while_the_command_loop_is_blocked(
    start_replica, controller, storage
):
    """The replica's event loop blocked for 1.5 s: heartbeats are still sent, and say the lag."""
    await start_replica(heartbeat_interval=0.1)
    await controller.wait_for("hello")
    await controller.create_instance(storage)
    await controller.wait_for("heartbeat")

    start = time.time()
    time.sleep(1.5)  # noqa: ASYNC251 - on purpose: blocks the loop the in-process replica runs on
    end = time.time()

    def sent_meanwhile_saying_the_lag() -> None:
        heartbeats = controller.of_kind("heartbeat")
        # 15 are due; a loaded machine may delay some, but a loop-bound sender sends none.
        assert len(sent_between(heartbeats, start + 0.1, end)) >= 5
        assert max(h.loop_lag_ms for h in heartbeats) >= 500

    await assert_eventually(sent_meanwhile_saying_the_lag)


async def test_the_heartbeat_thread_ends_with_the_replica(start_replica, controller, storage):
    """Shutdown stops the heartbeat thread and its connection: no heartbeat after it."""
    replica = await start_replica(heartbeat_interval=0.1)
    await controller.wait_for("hello")
    await controller.create_instance(storage)
    await controller.wait_for("heartbeat", count=3)
    sender = replica.heartbeats
    assert sender is not None
    assert sender.alive

    replica.shutdown()
    await assert_eventually(lambda: _assert(not sender.alive))
    sent = len(controller.of_kind("heartbeat"))
    await asyncio.sleep(0.5)
    assert len(controller.of_kind("heartbeat")) == sent


def _assert(condition: bool) -> None:
    assert condition


async def test_heartbeats_report_a_busy_engine_and_keep_their_interval(
    start_replica, controller, storage
):
    """A 3 s pure-Python step on the engine thread: heartbeats say busy, calls are counted."""
    await start_replica(heartbeat_interval=0.2, debug_commands=True)
    await controller.wait_for("hello")
    await controller.create_instance(storage)
    await controller.wait_for("heartbeat")
    await controller.send(
        update_configuration=compute_pb2.UpdateConfiguration(
            parameters={"debug_busy_step": "python:3"}
        )
    )

    def busy_then_done() -> None:
        heartbeats = controller.of_kind("heartbeat")
        assert max(h.engine_busy_ms for h in heartbeats) >= 2000
        assert heartbeats[-1].engine_busy_ms == 0
        assert heartbeats[-1].engine_calls >= 1
        busy = [h.sent_at_ms for h in heartbeats if h.engine_busy_ms > 0]
        gaps = [b - a for a, b in itertools.pairwise(busy)]
        assert max(gaps) < 1500  # every 200 ms, give or take a loaded machine

    await assert_eventually(busy_then_done, timeout=20)


async def test_debug_commands_are_ignored_unless_enabled(start_replica, controller, storage):
    """Without ``debug_commands`` a debug parameter is only recorded: the engine stays idle."""
    replica = await start_replica(heartbeat_interval=0.1)
    await controller.wait_for("hello")
    # Introspection off: with it on, the engine is made at once (its collector ticks there).
    await controller.create_instance(storage, logging=compute_pb2.LoggingConfig())
    await controller.send(
        update_configuration=compute_pb2.UpdateConfiguration(
            parameters={"debug_busy_step": "python:2"}
        )
    )
    await controller.wait_for("heartbeat", count=10)
    assert replica.dataflows is None  # no engine was even made
    assert all(h.engine_busy_ms == 0 for h in controller.of_kind("heartbeat"))


def test_busy_steps_run_for_their_time_and_refuse_unknown_kinds() -> None:
    for kind in ("python", "polars", "gil"):
        began = time.monotonic()
        assert busy_step(kind, 0.2) >= 1
        assert time.monotonic() - began >= 0.2
    with pytest.raises(ValueError, match="python, polars or gil"):
        busy_step("sleepy", 0.1)
