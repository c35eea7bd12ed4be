"""A test-side compute replica that speaks the compute protocol over real NATS.

It says hello until ``CreateInstance``, heartbeats afterwards, and answers a
peek with one row naming itself, after a configurable delay. Used in-process
by the tests (``FakeReplica``) and as a child process of the ``process``
orchestrator (run as a script with the ``compute-replica`` arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import nats

from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2


@dataclass
class Behaviour:
    """How a fake replica acts; the tests vary it per replica."""

    hello_interval: float = 0.1
    heartbeat_interval: float = 0.1
    # Never heartbeat (a hung replica).
    silent: bool = False
    # Seconds before answering a peek; None never answers.
    peek_delay: float | None = 0.0
    # Answer peeks with an error naming the replica instead of rows.
    peek_error: bool = False


@dataclass
class FakeReplica:
    nats_url: str
    replica_id: str
    incarnation: int
    behaviour: Behaviour = field(default_factory=Behaviour)
    commands: list[compute_pb2.ComputeCommand] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._created = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._nc: nats.NATS | None = None
        self._loops: list[asyncio.Task[None]] = []

    @property
    def command_subject(self) -> str:
        return f"loupe.compute.v1.{self.replica_id}.command"

    @property
    def response_subject(self) -> str:
        return f"loupe.compute.v1.{self.replica_id}.response"

    def kinds(self) -> list[str]:
        return [c.WhichOneof("kind") or "" for c in self.commands]

    async def start(self) -> None:
        self._nc = await nats.connect(self.nats_url, name=f"fake-{self.replica_id}")
        await self._nc.subscribe(self.command_subject, cb=self._on_command)
        await self._nc.flush()
        self._loops = [
            asyncio.create_task(self._hello()),
            asyncio.create_task(self._heartbeat()),
        ]

    async def stop(self) -> None:
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._tasks, return_exceptions=True)
        if self._nc is not None:
            await self._nc.close()

    async def _publish(self, **kind: Any) -> None:
        assert self._nc is not None
        response = compute_pb2.ComputeResponse(
            replica_id=self.replica_id, incarnation=self.incarnation, **kind
        )
        with contextlib.suppress(Exception):
            await self._nc.publish(self.response_subject, response.SerializeToString())

    async def _hello(self) -> None:
        while not self._created.is_set():
            await self._publish(hello=compute_pb2.Hello(pid=os.getpid(), hostname="test"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._created.wait(), self.behaviour.hello_interval)

    async def _heartbeat(self) -> None:
        await self._created.wait()
        while True:
            if not self.behaviour.silent:
                await self._publish(
                    heartbeat=compute_pb2.Heartbeat(
                        cpu_nano_cores=1000, memory_bytes=4096, workers=1, initialized=True
                    )
                )
            await asyncio.sleep(self.behaviour.heartbeat_interval)

    async def _on_command(self, msg: object) -> None:
        command = compute_pb2.ComputeCommand.FromString(msg.data)  # type: ignore[attr-defined]
        if command.incarnation != self.incarnation:
            return
        self.commands.append(command)
        kind = command.WhichOneof("kind")
        if kind == "create_instance":
            self._created.set()
        elif kind == "peek" and self.behaviour.peek_delay is not None:
            task = asyncio.create_task(self._answer(command.peek.uuid))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif kind == "cancel_peek":
            self.canceled.append(command.cancel_peek.uuid)

    async def _answer(self, uuid: str) -> None:
        await asyncio.sleep(self.behaviour.peek_delay or 0.0)
        if uuid in self.canceled:
            await self._publish(peek_response=compute_pb2.PeekResponse(uuid=uuid, canceled=True))
            return
        if self.behaviour.peek_error:
            error = common_pb2.Error(code="XX000", message=f"{self.replica_id} cannot")
            await self._publish(peek_response=compute_pb2.PeekResponse(uuid=uuid, error=error))
            return
        rows = compute_pb2.PeekRows(
            desc=common_pb2.RelationDesc(columns=[common_pb2.Column(name="replica", type="text")]),
            rows=[
                common_pb2.Row(values=[common_pb2.Value(text_value=self.replica_id)]),
            ],
        )
        await self._publish(peek_response=compute_pb2.PeekResponse(uuid=uuid, rows=rows))


async def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", nargs="?")
    parser.add_argument("--replica-id", required=True)
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--incarnation", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--data-dir")
    args = parser.parse_args(argv)
    replica = FakeReplica(args.nats_url, args.replica_id, args.incarnation)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await replica.start()
    print(f"fake replica {args.replica_id} incarnation {args.incarnation} up", flush=True)
    await stop.wait()
    await replica.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
