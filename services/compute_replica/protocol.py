"""The compute protocol, as seen from a replica.

Directions
    The controller publishes ``ComputeCommand``s on
    ``loupe.compute.v1.<replica_id>.command``; the replica publishes
    ``ComputeResponse``s on ``loupe.compute.v1.<replica_id>.response``
    (``command_subject`` / ``response_subject``). Both are core NATS: nothing
    is stored, a message sent while nobody listens is gone. Introspection
    goes out on ``loupe.compute.v1.<replica_id>.introspection``
    (``introspection.py``), so a flood of logs never delays responses.

Ordering
    Core NATS keeps the order of messages from one connection to one
    subscriber, and the replica handles commands one at a time in arrival
    order, so a ``CancelPeek`` is always seen after the ``Peek`` it cancels.
    Responses of different peeks may arrive in any order (they run
    concurrently); heartbeats interleave freely with everything (they go
    out on a connection of their own, ``heartbeats.py``).

Stages, in order
    0. Hello: from start until it accepts a ``CreateInstance``, the replica
       publishes ``Hello{pid, hostname}`` every ``hello_interval``. The
       controller uses it to learn that a (new) incarnation is listening.
    1. Creation: ``CreateInstance`` carries the instance configuration
       (workers, ``LoggingConfig``, where storage lives). On accepting it the
       replica stops saying hello and publishes a ``Heartbeat`` at once and
       then every ``heartbeat_interval``, from a thread that neither a long
       engine step nor a blocked command loop holds up; each says how many
       engine calls finished, how long the current one runs and how late
       the command loop is, so the controller tells busy from dead.
    2. Initialization: the controller replays its compacted command history,
       then sends ``InitializationComplete``; from then on heartbeats carry
       ``initialized = true``.
    3. Computation: ``Peek``, ``CancelPeek``, ``UpdateConfiguration``,
       ``CreateDataflow``, ``Schedule``, ``AllowCompaction``; the replica
       answers peeks with ``PeekResponse`` and reports its dataflows with
       ``Frontiers``, ``Hydration``, ``CollectionError`` and
       ``SubscribeBatch`` (see ``dataflows.py``).

Promises of the replica
    - Every response carries ``(replica_id, incarnation)`` of this process.
    - Commands whose ``incarnation`` is not this process's are ignored (and
      counted): they are meant for an earlier or later life of the replica.
    - Bytes on the command subject that do not decode as a ``ComputeCommand``
      are logged, counted in ``loupe_bus_malformed_messages_total`` and
      dropped; the replica keeps serving.
    - A repeated ``CreateInstance`` for this incarnation (a restarted
      controller reconciling) is accepted idempotently: the configuration is
      replaced, heartbeats continue, ``initialized`` is kept.
    - Every accepted ``Peek`` gets exactly one ``PeekResponse`` with its uuid:
      rows, an error, or ``canceled``. A bad peek (an unknown index, an
      upper that does not advance in time) is an error response, never a
      crash. A ``Peek`` before ``CreateInstance`` is answered with an error,
      and so is one without ``target_id`` (0A000: peeks name an index).
    - A ``Peek`` whose uuid is still running is a replay and is ignored.
    - ``CreateDataflow`` is idempotent by dataflow id (a replayed history
      builds nothing twice); a dataflow the engine refuses gets a
      ``CollectionError`` for each of its exports, never a crash.
      ``Schedule`` changes nothing: dataflows run from creation on.
    - ``AllowCompaction`` with ``empty`` drops the collection; the replica
      answers ``Frontiers{empty}`` for it and stops feeding sources nothing
      reads any more.
    - ``Frontiers`` are sent for every export whose write (or input)
      frontier changed, coalesced to one per ``report_interval``; write
      frontiers only advance within an incarnation.
    - Every replica writes every persist sink batch by compare-and-append;
      exactly one write lands per time (``dataflows.write_sink_batch``).
    - After ``CancelPeek{uuid}`` the replica sends at most one
      ``PeekResponse`` for that uuid: ``canceled`` if the peek had not been
      answered yet, and none if it already answered (or was never seen).
      Work already under way for a canceled peek is finished and dropped.

Promises expected of the controller
    - It sends ``CreateInstance`` before any other command of an incarnation,
      and stamps every command with the incarnation it means.
    - It drops responses of any incarnation other than the current one.

Peek semantics
    Reads the index export ``target_id`` at ``timestamp`` (0: the latest
    complete time) once its write frontier is past it, waiting (bounded);
    then ``map_filter_project`` and ``finishing`` apply. ``result_desc``
    names the columns; ``max_result_rows`` (0: no limit) caps the rows sent.
    The deprecated ``sql`` and ``sources`` fields are not read.

Only this module and ``replica.py`` touch ``compute_pb2`` messages; the engine
works on the dataclasses below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loupe.common import values
from loupe.common.errors import LoupeError
from loupe.dataflow import Finishing
from loupe.plan import codec
from loupe.plan.lir import MapFilterProject
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2

SUBJECT_PREFIX = "loupe.compute.v1"


def command_subject(replica_id: str) -> str:
    """Where the controller sends ``ComputeCommand``s for ``replica_id``."""
    return f"{SUBJECT_PREFIX}.{replica_id}.command"


def response_subject(replica_id: str) -> str:
    """Where ``replica_id`` publishes its ``ComputeResponse``s."""
    return f"{SUBJECT_PREFIX}.{replica_id}.response"


# -- commands, as domain values ------------------------------------------------


@dataclass(frozen=True)
class StorageLocation:
    """Where shards live: a blob URI and a consensus URI."""

    blob_uri: str
    consensus_uri: str


@dataclass(frozen=True)
class InstanceConfig:
    """What ``CreateInstance`` tells a replica."""

    replica_id: str
    cluster_id: str
    incarnation: int
    workers: int
    storage: StorageLocation
    # The replica's memory budget (0: none): see ``loupe.dataflow.memory``.
    memory_limit_bytes: int = 0
    # Kept as the wire message; ``introspection.py`` applies it (and later
    # ``UpdateConfiguration.logging``).
    logging: compute_pb2.LoggingConfig = field(default_factory=compute_pb2.LoggingConfig)

    @classmethod
    def from_proto(cls, message: compute_pb2.CreateInstance) -> InstanceConfig:
        return cls(
            replica_id=message.replica_id,
            cluster_id=message.cluster_id,
            incarnation=message.incarnation,
            workers=message.workers,
            storage=StorageLocation(message.blob_uri, message.consensus_uri),
            memory_limit_bytes=message.memory_limit_bytes,
            logging=message.logging,
        )


@dataclass(frozen=True)
class PeekRequest:
    """A ``Peek`` command: read index ``target_id``.

    The replica reads that index export at ``timestamp`` through ``mfp`` and
    ``finishing`` and names the result columns after ``result_columns``. An
    empty ``target_id`` is refused (see ``replica.py``).
    """

    uuid: str
    timestamp: int
    max_result_rows: int = 0
    target_id: str = ""
    mfp: MapFilterProject | None = None
    finishing: Finishing | None = None
    result_columns: tuple[ResultColumn, ...] = ()
    # Where the coordinator takes the rows straight from the replica ("": nowhere).
    reply_subject: str = ""
    # Sent by the coordinator itself: every answer goes to ``reply_subject`` only.
    direct: bool = False

    @classmethod
    def from_proto(cls, message: compute_pb2.Peek) -> PeekRequest:
        return cls(
            uuid=message.uuid,
            reply_subject=message.reply_subject,
            direct=message.direct and bool(message.reply_subject),
            timestamp=message.timestamp,
            max_result_rows=message.max_result_rows,
            target_id=message.target_id,
            mfp=(
                codec.mfp_from_proto(message.map_filter_project)
                if message.HasField("map_filter_project")
                else None
            ),
            finishing=(
                Finishing(*codec.finishing_from_proto(message.finishing))
                if message.HasField("finishing")
                else None
            ),
            result_columns=tuple(
                ResultColumn(c.name, c.type, c.nullable) for c in message.result_desc.columns
            ),
        )


# -- responses -------------------------------------------------------------------


@dataclass(frozen=True)
class ResultColumn:
    name: str
    # A PostgreSQL-style type name (text, int8, uint8, timestamptz, …).
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class PeekResult:
    """The rows a peek produced, as Python values."""

    columns: tuple[ResultColumn, ...]
    rows: Sequence[Sequence[Any]]

    def to_proto(self) -> compute_pb2.PeekRows:
        return compute_pb2.PeekRows(
            desc=common_pb2.RelationDesc(
                columns=[
                    common_pb2.Column(name=c.name, type=c.type, nullable=c.nullable)
                    for c in self.columns
                ]
            ),
            rows=[values.to_row(row) for row in self.rows],
        )


@dataclass(frozen=True)
class HeartbeatReport:
    """What a heartbeat reports about the replica process."""

    cpu_nano_cores: int
    memory_bytes: int
    disk_bytes: int
    workers: int
    initialized: bool
    sent_at_ms: int
    process_id: int = 0
    engine_calls: int = 0
    engine_busy_ms: int = 0
    loop_lag_ms: int = 0


class Responses:
    """Builds ``ComputeResponse``s stamped with this process's identity."""

    def __init__(self, replica_id: str, incarnation: int) -> None:
        self.replica_id = replica_id
        self.incarnation = incarnation

    def _response(self, **kind: Any) -> compute_pb2.ComputeResponse:
        return compute_pb2.ComputeResponse(
            replica_id=self.replica_id, incarnation=self.incarnation, **kind
        )

    def hello(self, pid: int, hostname: str) -> compute_pb2.ComputeResponse:
        return self._response(hello=compute_pb2.Hello(pid=pid, hostname=hostname))

    def heartbeat(self, report: HeartbeatReport) -> compute_pb2.ComputeResponse:
        return self._response(
            heartbeat=compute_pb2.Heartbeat(
                process_id=report.process_id,
                cpu_nano_cores=report.cpu_nano_cores,
                memory_bytes=report.memory_bytes,
                disk_bytes=report.disk_bytes,
                workers=report.workers,
                initialized=report.initialized,
                sent_at_ms=report.sent_at_ms,
                engine_calls=report.engine_calls,
                engine_busy_ms=report.engine_busy_ms,
                loop_lag_ms=report.loop_lag_ms,
            )
        )

    def peek_rows(self, uuid: str, result: PeekResult) -> compute_pb2.ComputeResponse:
        return self._response(
            peek_response=compute_pb2.PeekResponse(uuid=uuid, rows=result.to_proto())
        )

    def peek_error(self, uuid: str, error: LoupeError) -> compute_pb2.ComputeResponse:
        return self._response(
            peek_response=compute_pb2.PeekResponse(uuid=uuid, error=error.to_proto())
        )

    def peek_canceled(self, uuid: str) -> compute_pb2.ComputeResponse:
        return self._response(peek_response=compute_pb2.PeekResponse(uuid=uuid, canceled=True))


# -- the peek promises -----------------------------------------------------------------


class PendingPeeks:
    """The peeks that are running and not yet answered, by uuid.

    It is the one place that decides whether a peek may still be answered,
    which is how "at most one ``PeekResponse`` per uuid" holds: whoever takes
    the uuid out first (the finished peek or its ``CancelPeek``) answers.
    Used from the event loop only, so it needs no lock.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def add(self, uuid: str, task: asyncio.Task[None]) -> None:
        self._tasks[uuid] = task

    def finish(self, uuid: str) -> bool:
        """Claim the right to answer ``uuid``; False once canceled or answered."""
        return self._tasks.pop(uuid, None) is not None

    def cancel(self, uuid: str) -> bool:
        """Stop ``uuid``; True if it was unanswered (the caller answers ``canceled``)."""
        task = self._tasks.pop(uuid, None)
        if task is None:
            return False
        task.cancel()
        return True

    def cancel_all(self) -> list[asyncio.Task[None]]:
        """Stop every pending peek without answering (shutdown); returns their tasks."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        return tasks
