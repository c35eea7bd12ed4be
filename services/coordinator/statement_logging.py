"""Statement logging: a sample of the statements sessions run, how each ended, and from where.

Materialize's design (seed 000) with what it learned shipping it (DESIGN §7):

- Each execution is sampled on its own: ``Bernoulli(min(session's
  statement_logging_sample_rate, statement_logging_max_sample_rate))``; with
  ``statement_logging_use_reproducible_rng`` the generator restarts from a
  fixed seed whenever that switch is turned on, so a test sees a fixed sample.
- Only sampled executions write anything: the session's row once (with its
  first logged statement), the prepared statement once (at its first sampled
  execution; every statement of a simple-protocol ``Execute`` is an unnamed
  statement prepared anew, as in Materialize), its SQL text once per
  ``(prepared_day, sql_hash)`` that this coordinator wrote, the execution
  (a row at its start, replaced by the finished row at its end) and its
  lifecycle events. Every execution row keeps the rate it was sampled at.
- Parameters (issue 6 item 3): an execution's ``params`` are its parameter
  values as text in a PostgreSQL array literal with NULLs kept,
  ``{1,NULL,"a b"}`` (``{}`` without parameters): what Materialize's
  ``text list`` column prints, stored as that text (Loupe's storage has no
  list of text). Values are printed as PostgreSQL prints them (``t``/``f``,
  ``2024-01-02 03:04:05+00``); see ``loupe.coordinator.sql.params``.
- Named prepared statements (``PREPARE``): one row in
  ``mz_prepared_statement_history`` with ``name`` set, written at the first
  logged execution of it (``PreparedLog``); every later logged ``EXECUTE``
  refers to that row, with its own parameters. ``DEALLOCATE`` (or the end of
  the session) forgets the statement: prepared again, it is a new row. An
  ``EXECUTE`` is logged as an execution *of the prepared statement*: its SQL
  text (with ``$n``), statement type and the arguments as ``params``, not the
  text ``EXECUTE p (1)``. Materialize logs a SQL ``EXECUTE`` as its own
  unnamed statement and names rows only for the extended protocol's named
  statements (Parse with a name, then Bind and Execute), where the row holds
  the statement's text and each execution its bound parameters. Loupe's API
  has no Parse/Bind: ``PREPARE``/``EXECUTE`` is how a client names a statement
  and binds its parameters, so it is logged the way Materialize logs a named
  statement — one text for all executions, found by one ``sql_hash``, with
  the values per execution. ``PREPARE`` and ``DEALLOCATE`` themselves are
  logged as ordinary statements; an ``EXECUTE`` that fails before its
  statement runs (unknown name, wrong arguments) is logged as itself.
- Throttling (issue 6 item 4): a token bucket in bytes refilled at
  ``statement_logging_target_data_rate`` bytes/s up to
  ``statement_logging_max_data_credit``. A sampled execution whose records
  (estimated in ``begin``) do not fit is dropped; as in Materialize the drops
  are counted coordinator-wide (not per session) and the count goes into
  ``throttled_count`` of the next prepared statement logged. A prepared
  statement counts as logged only once an execution of it was, so a throttled
  first execution hides nothing.
- Dry run (item 8): every execution, at any rate, adds its estimated records
  and bytes to ``loupe_statement_logging_{records,bytes}_total`` labelled
  ``sample="sampled|unsampled"``: their sum is the volume at rate 1, so an
  operator can judge a rate before enabling it. Throttled executions are
  counted in ``loupe_statement_logging_throttled_executions_total``.
- Little waits in the coordinator: the updates are published, in order, to
  the storage writer's JetStream stream as they happen; under load one
  message per ``PUBLISH_COALESCE_S`` (0.25 s) carries what arrived meanwhile
  (the seed's buffer flushed every ``statement_log_flush_interval``), and the
  controller writes them with Spark at its next flush. A message of at least
  ``COLUMNAR_MIN_UPDATES`` updates is columnar (Arrow IPC,
  ``encode_batch_arrow``): at 500 updates 2x cheaper to build than protobuf
  rows, 5x cheaper for the writer to decode. A smaller one is rows
  (``encode_batch_bytes``): Arrow's fixed cost, ~70 us a collection, made a
  message of one statement ten times dearer in columns. The start of an
  execution still running when a message goes out waits for the next one
  (up to ``HOLD_RUNNING_S``): most end by then, and go out as their finished
  row alone, never written to the bucket of open executions below. Each
  message is a JetStream request, and a changed bucket a second one: at
  ~0.25 ms of coordinator CPU a request, these were most of what logging
  cost a statement.
- Overload (issue 11 item 4): that queue is bounded (``max_queued`` entries,
  gauge ``loupe_statement_logging_queue_depth``). When the stream takes
  records slower than statements make them and the queue is full, a new
  sampled execution is not logged, as a throttled one is not: counted in
  ``loupe_statement_logging_queue_dropped_executions_total`` and in the next
  ``throttled_count``. A statement never waits for its log record (an
  execution already logged still logs its end, so the queue holds at most
  ``max_queued`` plus the executions running).
- The executions a coordinator has open are remembered in a JetStream
  key-value bucket, all in one value under the key ``<coordinator>``
  (execution id -> its began row, JSON), written after each published
  message that changed them: one write per message, none for the executions
  that began and ended within one message (with the start held back, all
  but those that run longer than ``HOLD_RUNNING_S``). A coordinator
  that starts again finds its previous incarnation's open executions there
  (and in keys ``<coordinator>.<execution id>``, one per execution, as
  earlier versions wrote them) and replaces each by an ``aborted`` row.
- A logged session is remembered in another bucket (``LIVE_SESSIONS_BUCKET``,
  key ``<coordinator>.<session id>``) until it closes, or until its
  coordinator starts again (a dead coordinator's sessions are dead): the
  storage writer's retention collects a session's rows and prepared
  statements only once it is not there (``compaction``). Its key is purged
  after the session's last batch is published, so the writer, waiting for
  the stream's backlog after listing the bucket, never misses a reference.

The coordinator calls ``begin`` and ``end`` around each statement; the
compute path says which strategy it took and when it planned with
``note_strategy``/``note_event`` (a context variable finds the execution).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import itertools
import json
import random
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import nats.js.errors
from nats.aio.client import Client as NatsConnection
from prometheus_client import Counter, Gauge
from sqlglot.tokens import Token, TokenType

from loupe.builtins import (
    MZ_PREPARED_STATEMENT_HISTORY,
    MZ_SESSION_HISTORY,
    MZ_SQL_TEXT,
    MZ_STATEMENT_EXECUTION_HISTORY,
    MZ_STATEMENT_LIFECYCLE_HISTORY,
)
from loupe.common.logging import get_logger
from loupe.common.system_vars import SYSTEM_VARIABLES, system_value
from loupe.coordinator.session import Session
from loupe.coordinator.sql.parser import LoupeDialect
from loupe.storage.names import LIVE_SESSIONS_BUCKET, LIVE_SESSIONS_STREAM
from loupe.storage.wire import Update, encode_batch_arrow, encode_batch_bytes

log = get_logger(__name__)

# The storage writer's input subject (the controller's ``storage_subject``).
DEFAULT_SUBJECT = "loupe.storage.v1.updates"
# Open executions, per coordinator: key ``<coordinator>``, all in one value
# (earlier versions: key ``<coordinator>.<execution id>``, one per execution).
OPEN_EXECUTIONS_BUCKET = "loupe_statement_log_open"
# The least time between two statement log messages while records keep coming
# (the first after a quiet spell is published at once): bounds both what a
# coordinator crash can lose and the delay it adds to a record's visibility
# (the storage writer flushes once a second). Each message is a JetStream
# request, and one more when the open executions changed (~0.25 ms of
# coordinator CPU each): at 0.02 s they cost a serial session at 500
# statements/s a tenth of its CPU. At 0.25 s a message carries ~125 statements
# of four busy sessions, over which its requests and the ~0.2 ms of building
# its Arrow tables are spread; Materialize writes its log every 5 s.
PUBLISH_COALESCE_S = 0.25
# How long the began row of a running execution waits to go out with its end:
# one that ends meanwhile (most do) goes out as its finished row alone, and
# never needs the bucket of open executions (a second request per message).
HOLD_RUNNING_S = 2 * PUBLISH_COALESCE_S
_OPEN_EXECUTIONS_STREAM = f"KV_{OPEN_EXECUTIONS_BUCKET}"
# The fewest updates a message sends in columns; below, rows cost less to build
# (``bench/statement_logging.py`` prints both: they cross at about 200).
COLUMNAR_MIN_UPDATES = 200
# A version 4 UUID's fixed bits (RFC 4122 variant, version 4), as uuid.UUID sets them.
_UUID4_KEEP = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)
# The seed of the reproducible generator.
REPRODUCIBLE_SEED = 0
REDACTED = "'<REDACTED>'"

SUCCESS, ERROR, CANCELED, ABORTED = "success", "error", "canceled", "aborted"
FAST_PATH, STANDARD, CONSTANT = "fast-path", "standard", "constant"
EXECUTION_BEGAN = "execution-began"
OPTIMIZATION_FINISHED = "optimization-finished"
DEPENDENCIES_FINISHED = "compute-dependencies-finished"
EXECUTION_FINISHED = "execution-finished"


RECORDS = Counter(
    "loupe_statement_logging_records",
    "Statement log records of executions, sampled or not (estimated: the dry run)",
    ["sample"],
)
BYTES = Counter(
    "loupe_statement_logging_bytes",
    "Estimated bytes of statement log records of executions, sampled or not (the dry run)",
    ["sample"],
)
THROTTLED = Counter(
    "loupe_statement_logging_throttled_executions",
    "Sampled executions dropped because the statement log's byte budget was spent",
)
QUEUE_DEPTH = Gauge(
    "loupe_statement_logging_queue_depth",
    "Statement log entries (an execution's start or end) waiting to be published",
)
QUEUE_DROPPED = Counter(
    "loupe_statement_logging_queue_dropped_executions",
    "Sampled executions not logged because the publish queue was full (overload)",
)
LOST_UPDATES = Counter(
    "loupe_statement_logging_lost_updates",
    "Statement log updates lost because the storage writer's stream did not take them",
)
# Entries (an execution's start or its end) that may wait to be published; past
# it, new executions are not logged (counted) rather than making a client wait.
MAX_QUEUED = 10_000
# Looked up at every execution: the label children, bound once.
_RECORDS_BY_SAMPLE = {True: RECORDS.labels("sampled"), False: RECORDS.labels("unsampled")}
_BYTES_BY_SAMPLE = {True: BYTES.labels("sampled"), False: BYTES.labels("unsampled")}
# What one record costs beyond its text: ids, timestamps, names, the update's diff.
RECORD_OVERHEAD_BYTES = 96
_DIALECT = LoupeDialect()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@functools.lru_cache(maxsize=4096)
def sql_hash(sql: str) -> str:
    """The hex SHA-256 of a statement's text (Materialize hashes the text too).

    Remembered for the texts seen last: a workload runs the same statements again.
    """
    return hashlib.sha256(sql.encode()).hexdigest()


def redact_sql(sql: str) -> str:
    """``sql`` with every literal (strings, numbers) replaced by ``'<REDACTED>'``.

    Done on sqlglot's tokens, not on a parse tree, so statements sqlglot cannot
    parse (Loupe's own DDL) are redacted as well, and the rest of the text is
    kept as the user wrote it.
    """
    try:
        tokens = _DIALECT.tokenize(sql)
    except Exception:
        return REDACTED  # it does not even tokenize: hide all of it
    literal = {TokenType.STRING, TokenType.NUMBER, TokenType.NATIONAL_STRING}
    pieces, cursor = [], 0
    previous: Token | None = None
    for token in tokens:
        after, previous = previous, token
        if token.token_type not in literal:
            continue
        if (
            token.token_type == TokenType.NUMBER
            and after is not None
            and after.token_type == TokenType.PARAMETER
            and after.end + 1 == token.start
        ):
            continue  # $1 is a parameter's number, not a literal (its value is in params)
        # A string token's span covers its quotes; its text does not.
        start = (
            sql.rfind("'", 0, token.start + 1)
            if token.token_type != TokenType.NUMBER
            else token.start
        )
        pieces.append(sql[cursor:start])
        pieces.append(REDACTED)
        cursor = token.end + 1
    pieces.append(sql[cursor:])
    return "".join(pieces)


def statement_type(statement: Any) -> str:
    """Materialize's ``statement_type`` words: ``select``, ``create_cluster``, …"""
    name = type(statement).__name__
    if name == "ExplainAnalyze":  # Materialize has a statement kind for each form
        name += "Cluster" if statement.cluster else "Object"
    words = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    return {"query": "select", "set_variable": "set", "show_variable": "show"}.get(words, words)


@dataclass
class Execution:
    """A sampled execution, from ``begin`` to ``end``."""

    id: str
    prepared_statement_id: str
    began_row: tuple[Any, ...]
    strategy: str | None = None
    execution_timestamp: int | None = None
    rows_returned: int = 0
    result_size: int = 0
    events: list[tuple[str, dt.datetime]] = field(default_factory=list)


@dataclass
class PreparedLog:
    """What the log holds of a named prepared statement (``PREPARE``): one row, once.

    Its row is written with its first logged execution (``logged_id`` is
    then its id); every later logged execution refers to it. The session
    drops it with the statement (DEALLOCATE, the session's end), so a
    statement prepared again under the same name is a new row.
    """

    name: str
    prepared_at: dt.datetime = field(default_factory=lambda: _now())
    logged_id: str | None = None

    @property
    def name_and_time(self) -> tuple[str, dt.datetime]:
        return self.name, self.prepared_at


# The execution the running statement belongs to (None: not sampled).
CURRENT: ContextVar[Execution | None] = ContextVar("statement_logging_execution", default=None)


def note_strategy(strategy: str, *, timestamp: int | None = None) -> None:
    """The compute path says how it answered (``fast-path``, ``standard``, ``constant``)."""
    execution = CURRENT.get()
    if execution is not None:
        execution.strategy = strategy
        if timestamp:
            execution.execution_timestamp = timestamp


def note_event(event_type: str) -> None:
    """A lifecycle event of the running statement (``optimization-finished``, …)."""
    execution = CURRENT.get()
    if execution is not None:
        execution.events.append((event_type, _now()))


def result_size(rows: Iterable[Sequence[Any]]) -> tuple[int, int]:
    """(rows, bytes) of a result; bytes as the text of its values (what a client receives)."""
    count = size = 0
    for row in rows:
        count += 1
        size += sum(len(str(value)) for value in row if value is not None)
    return count, size


def estimated_size(sql: str, *, new_session: bool, params: str = "{}") -> tuple[int, int]:
    """(records, bytes) an execution of ``sql`` writes, estimated without building them.

    Counts the session row if new, the prepared statement, its SQL text (and
    its redacted copy) as if new (an upper bound: the text is written once a
    day, a named prepared statement once), the began and finished execution
    rows (each with the ``params`` text beyond an empty ``{}``) and the two
    lifecycle events every execution has.
    """
    records = 6 + (1 if new_session else 0)
    size = 2 * len(sql.encode()) + 2 * (len(params.encode()) - 2)
    return records, records * RECORD_OVERHEAD_BYTES + size


class TokenBucket:
    """Bytes statement logging may still write: refilled at a rate, up to a credit.

    Rate and credit are read at each ``take`` (they are system variables an
    administrator may change at any time). The bucket starts full.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._balance: float | None = None
        self._last = 0.0

    def take(self, cost: int, rate: float, credit: float) -> bool:
        """Spend ``cost`` bytes if the balance holds them."""
        now = self._clock()
        if self._balance is None:
            self._balance = credit
        else:
            self._balance = min(credit, self._balance + (now - self._last) * rate)
        self._last = now
        if cost > self._balance:
            return False
        self._balance -= cost
        return True


@dataclass
class _SessionLog:
    """What the log already holds of one session."""

    logged: bool = False
    # Its row was counted in the dry-run metrics (as it would be logged at rate 1).
    counted: bool = False


class StatementLogger:
    """Samples executions and publishes their records to the storage writer's stream."""

    def __init__(
        self,
        connection: NatsConnection,
        configuration: Callable[[], Mapping[str, str]],
        *,
        owner: str = "coordinator",
        subject: str = DEFAULT_SUBJECT,
        cluster_id: Callable[[str], str | None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self._nc = connection
        self.max_queued = max_queued
        self._configuration = configuration
        self._owner = owner
        self._subject = subject
        self._cluster_id = cluster_id
        self._boot = uuid.uuid4().hex[:12]
        self._sequence = itertools.count(1)
        self._sessions: dict[str, _SessionLog] = {}
        # The (day, sql hash) texts logged, of the latest day only (``_first_text_of_day``).
        self._sql_texts: set[tuple[dt.datetime, str]] = set()
        self._sql_text_day: dt.datetime | None = None
        self._rng: random.Random = random.Random()
        self._reproducible = False
        self._queue: list[_Queued] = []
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._publisher: asyncio.Task[None] | None = None
        self._js: Any = None
        self._kv: Any = None
        self._sessions_kv: Any = None
        self._bucket = TokenBucket(clock)
        # Sampled executions dropped since the last prepared statement logged.
        self._throttled = 0
        # Execution ids: random UUIDs from a generator seeded once by the OS.
        self._ids = random.Random()
        # Open as of the last message published (execution id -> began row); what
        # was last written to the bucket (execution id -> its JSON); whether that
        # write may not have reached it (then it is written again).
        self._open: dict[str, tuple[Any, ...]] = {}
        self._open_json: dict[str, bytes] = {}
        self._open_stale = False
        # Read when metrics are scraped, not set at every execution (one logger a process).
        QUEUE_DEPTH.set_function(_queue_length(weakref.ref(self)))

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the buckets of open executions and live sessions, abort the previous
        incarnation's executions and forget its sessions, start publishing."""
        js = self._js = self._nc.jetstream()
        self._kv = await _key_value(js, OPEN_EXECUTIONS_BUCKET)
        self._sessions_kv = await _key_value(js, LIVE_SESSIONS_BUCKET)
        await self._abort_previous()
        self._publisher = asyncio.create_task(self._publish_loop())

    async def stop(self) -> None:
        """Publish what is queued (bounded), then stop."""
        if self._publisher is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), 5.0)
        self._publisher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._publisher
        self._publisher = None

    async def drain(self) -> None:
        """Wait until everything logged so far is in the stream."""
        while self._queue or not self._idle.is_set():
            await self._idle.wait()
            await asyncio.sleep(0)

    async def _abort_previous(self) -> None:
        began_rows = await _open_executions(self._nc.jetstream(), self._kv, self._owner)
        now = _now()
        for began in began_rows.values():
            updates: list[Update] = [(MZ_STATEMENT_EXECUTION_HISTORY.id, began, -1)]
            aborted = _finished_row(began, now, ABORTED, None, None, None, None, None)
            updates.append((MZ_STATEMENT_EXECUTION_HISTORY.id, aborted, 1))
            await self._publish(updates, f"stmtlog-aborted-{began[0]}")
        # Purges leave no delete marker behind: the bucket's subjects stay what is open.
        js = self._nc.jetstream()
        await js.purge_stream(_OPEN_EXECUTIONS_STREAM, subject=_open_subject(self._owner))
        await js.purge_stream(_OPEN_EXECUTIONS_STREAM, subject=_open_subject(f"{self._owner}.>"))
        if began_rows:
            log.info("statement executions of a previous run marked aborted", count=len(began_rows))
        # Its sessions died with it: their rows may go once nothing refers to them.
        await self._nc.jetstream().purge_stream(
            LIVE_SESSIONS_STREAM, subject=f"$KV.{LIVE_SESSIONS_BUCKET}.{self._owner}.>"
        )

    # -- sampling -----------------------------------------------------------------------

    def system(self, name: str) -> str:
        return system_value(self._configuration(), name)

    def _sample_rate(self, session: Session, configuration: Mapping[str, str]) -> float:
        rate = float(session.get("statement_logging_sample_rate"))
        return min(rate, float(_system(configuration, "statement_logging_max_sample_rate")))

    def _sampled(self, rate: float, configuration: Mapping[str, str]) -> bool:
        reproducible = _system(configuration, "statement_logging_use_reproducible_rng") == "on"
        if reproducible and not self._reproducible:
            self._rng = random.Random(REPRODUCIBLE_SEED)
        elif not reproducible and self._reproducible:
            self._rng = random.Random()
        self._reproducible = reproducible
        return self._rng.random() < rate

    # -- records ------------------------------------------------------------------------

    def _admitted(self, session: Session, sql: str, params: str = "{}") -> float | None:
        """Sample, count the dry-run metrics, throttle: the rate of a logged execution."""
        configuration = self._configuration()
        rate = self._sample_rate(session, configuration)
        sampled = rate > 0.0 and self._sampled(rate, configuration)
        session_log = self._sessions.get(session.id)
        if session_log is None:
            session_log = self._sessions[session.id] = _SessionLog()
        self._count_dry_run(sql, session_log, sampled, params)
        if not sampled:
            return None
        size = estimated_size(sql, new_session=not session_log.logged, params=params)[1]
        target = float(_system(configuration, "statement_logging_target_data_rate"))
        credit = float(_system(configuration, "statement_logging_max_data_credit"))
        if len(self._queue) >= self.max_queued:
            # Overload: the stream takes records slower than statements make them.
            # Dropped and counted (and in the next throttled_count), never waited for.
            self._throttled += 1
            QUEUE_DROPPED.inc()
            return None
        if not self._bucket.take(size, target, credit):
            self._throttled += 1
            THROTTLED.inc()
            return None
        return rate

    @staticmethod
    def _count_dry_run(
        sql: str, session_log: _SessionLog, sampled: bool, params: str = "{}"
    ) -> None:
        """Add the execution's estimate to the metrics, as rate 1 would log it."""
        records, size = estimated_size(sql, new_session=not session_log.counted, params=params)
        session_log.counted = True
        _RECORDS_BY_SAMPLE[sampled].inc(records)
        _BYTES_BY_SAMPLE[sampled].inc(size)

    def begin(
        self,
        session: Session,
        sql: str,
        kind: str,
        *,
        params: str = "{}",
        prepared: PreparedLog | None = None,
    ) -> Execution | None:
        """Sample one execution of ``sql``; its records if sampled and not throttled.

        ``params``: the execution's parameters as a text array (``{1,NULL}``).
        ``prepared``: the named prepared statement executed (``sql`` and
        ``kind`` are its own); None for an unnamed statement, prepared anew.
        A named statement's row and text are written with its first logged
        execution; later ones refer to that row.
        """
        rate = self._admitted(session, sql, params)
        if rate is None:
            return None
        now = _now()
        updates: list[Update] = []
        session_log = self._sessions[session.id]  # made by _admitted
        opened: dict[str, bool] = {}
        if not session_log.logged:
            session_log.logged = True
            opened[session.id] = True
            row = (session.id, session.connected_at, session.get("application_name"), session.user)
            updates.append((MZ_SESSION_HISTORY.id, row, 1))
        if prepared is not None and prepared.logged_id is not None:
            prepared_id = prepared.logged_id
        else:
            prepared_id = self._new_id()
            name, prepared_at = ("", now) if prepared is None else prepared.name_and_time
            digest = sql_hash(sql)
            throttled, self._throttled = self._throttled, 0
            updates.append(
                (
                    MZ_PREPARED_STATEMENT_HISTORY.id,
                    (prepared_id, session.id, name, digest, prepared_at, kind, throttled),
                    1,
                )
            )
            # Filed under the day it was prepared, as Materialize does: retention keeps
            # a day's text while a prepared statement of that day refers to it.
            day = prepared_at.replace(hour=0, minute=0, second=0, microsecond=0)
            if self._first_text_of_day(day, digest):
                updates.append((MZ_SQL_TEXT.id, (day, digest, sql, redact_sql(sql)), 1))
            if prepared is not None:
                prepared.logged_id = prepared_id
        execution_id = self._new_id()
        cluster = session.cluster
        began = (
            execution_id,
            prepared_id,
            rate,
            self._cluster_id(cluster),
            cluster,
            session.get("application_name"),
            session.database,
            session.search_path,
            session.get("transaction_isolation"),
            None,
            params,
            now,
            None,
            None,
            None,
            None,
            None,
            None,
        )
        # The last _HELD_UPDATES: what ``_ready`` may hold back while it runs.
        updates.append((MZ_STATEMENT_EXECUTION_HISTORY.id, began, 1))
        updates.append((MZ_STATEMENT_LIFECYCLE_HISTORY.id, (execution_id, EXECUTION_BEGAN, now), 1))
        self._enqueue(
            updates, [(execution_id, began)], opened, hold_until=time.monotonic() + HOLD_RUNNING_S
        )
        return Execution(execution_id, prepared_id, began)

    def end(
        self,
        execution: Execution,
        status: str,
        *,
        error_message: str | None = None,
    ) -> None:
        """The execution ended: its finished row replaces its began row."""
        now = _now()
        success = status == SUCCESS
        finished = _finished_row(
            execution.began_row,
            now,
            status,
            error_message,
            execution.result_size if success else None,
            execution.rows_returned if success else None,
            execution.strategy,
            execution.execution_timestamp,
        )
        updates: list[Update] = [
            (MZ_STATEMENT_EXECUTION_HISTORY.id, execution.began_row, -1),
            (MZ_STATEMENT_EXECUTION_HISTORY.id, finished, 1),
        ]
        for event_type, occurred_at in [*execution.events, (EXECUTION_FINISHED, now)]:
            row = (execution.id, event_type, occurred_at)
            updates.append((MZ_STATEMENT_LIFECYCLE_HISTORY.id, row, 1))
        self._enqueue(updates, [(execution.id, None)])

    def session_closed(self, session_id: str) -> None:
        """The session closed: once its records are published, it is no longer live."""
        session_log = self._sessions.pop(session_id, None)
        if session_log is not None and session_log.logged:
            self._enqueue([], [], {session_id: False})

    def _first_text_of_day(self, day: dt.datetime, digest: str) -> bool:
        """Whether ``digest``'s text is to be logged for ``day``: not yet logged today.

        Texts are deduplicated within the current day only, so the set holds
        one day of statements: at a new day the past day's entries go, and a
        text of a past day (a clock going back) is always logged. The storage
        writer may collect a past day's text once no prepared statement of
        that day refers to it; logging it again then is what keeps it there
        for a new one (a duplicate is harmless: the views read DISTINCT text).
        """
        if self._sql_text_day is None or day > self._sql_text_day:
            self._sql_texts.clear()
            self._sql_text_day = day
        elif day < self._sql_text_day:
            return True
        if (day, digest) in self._sql_texts:
            return False
        self._sql_texts.add((day, digest))
        return True

    def _new_id(self) -> str:
        """``str(uuid.UUID(int=self._ids.getrandbits(128), version=4))``, without the object."""
        digits = "%032x" % (self._ids.getrandbits(128) & _UUID4_KEEP | _UUID4_SET)
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"

    # -- publishing ---------------------------------------------------------------------

    def _enqueue(
        self,
        updates: list[Update],
        executions: list[tuple[str, tuple[Any, ...] | None]],
        sessions: Mapping[str, bool] | None = None,
        *,
        hold_until: float = 0.0,
    ) -> None:
        """Queue ``updates``, then the executions opened (id, began row) or closed
        (id, None) and the live sessions (session id -> live), written to their
        buckets once the updates are published. ``hold_until`` (monotonic): an
        execution's start, held back until then unless it ended (``_ready``)."""
        self._queue.append(
            _Queued(updates, executions, dict(sessions) if sessions else {}, hold_until)
        )
        self._idle.clear()
        self._wakeup.set()

    async def _wait_for_work(self) -> None:
        """Until something is queued, or the first held start is due."""
        holds = [entry.hold_until for entry in self._queue]
        if not holds or not all(holds):
            await self._wakeup.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), max(0.0, min(holds) - time.monotonic()))
        self._wakeup.clear()

    async def _publish_loop(self) -> None:
        """Publish queued records in order; what arrives meanwhile goes in the next message."""
        loop = asyncio.get_running_loop()
        last_publish = -PUBLISH_COALESCE_S
        while True:
            await self._wait_for_work()
            while self._queue:
                # Under load, what arrives within PUBLISH_COALESCE_S of the last message
                # waits for it to fill: a JetStream request costs the coordinator more
                # than logging an execution does. After a quiet spell, it goes at once.
                wait = last_publish + PUBLISH_COALESCE_S - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                taken, self._queue = _ready(self._queue, time.monotonic())
                if not taken:
                    break  # only starts of running executions, held: woken when one is due
                last_publish = loop.time()
                updates = message_updates(taken)
                try:
                    await self._publish_with_open(updates, [e.executions for e in taken])
                    for session_id, live in _net_session_ops(e.sessions for e in taken).items():
                        await self._remember_session(session_id, live)
                except Exception as error:
                    # Statement logging may lose records under adverse conditions (seed 000);
                    # counted, so that an operator sees it happen.
                    LOST_UPDATES.inc(len(updates))
                    log.warning(
                        "statement log records lost", error=str(error), updates=len(updates)
                    )
            if not self._queue:
                self._idle.set()

    async def _publish_with_open(
        self,
        updates: list[Update],
        executions: list[list[tuple[str, tuple[Any, ...] | None]]],
    ) -> None:
        """Publish one message and, if it changes them, the open executions after it.

        Both requests go out together and their acknowledgements are awaited
        together: a JetStream request costs the coordinator ~80 us of CPU
        alone, about as much as two round trips' wakeups in one. The server
        stores them in the order sent. If the message is refused, the open
        executions go back to what they were before it and are written again
        (or with the next message if that fails too), so the bucket does not
        keep an execution whose began row was lost, nor forget one whose
        finished row was.
        """
        before = dict(self._open)
        for ops in executions:
            for execution_id, began in ops:
                if began is not None:
                    self._open[execution_id] = began
                else:
                    self._open.pop(execution_id, None)
        writes = []
        if updates:
            batch_id = f"stmtlog-{self._owner}-{self._boot}-{next(self._sequence)}"
            writes.append(self._publish(updates, batch_id))
        # One that began and ended in this message leaves the bucket as it was.
        if self._open_stale or self._open.keys() != self._open_json.keys():
            writes.append(self._write_open())
        results = await asyncio.gather(*writes, return_exceptions=True)
        if updates and isinstance(results[0], BaseException):
            self._open = before
            self._open_stale = True
            with contextlib.suppress(Exception):  # else it is written with the next message
                await self._write_open()
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _write_open(self) -> None:
        """Write the open executions as one value (each one's JSON made once)."""
        for execution_id, began in self._open.items():
            if execution_id not in self._open_json:
                self._open_json[execution_id] = _encode_row(began)
        for execution_id in self._open_json.keys() - self._open.keys():
            del self._open_json[execution_id]
        value = b"{" + b",".join(_open_entry(k, v) for k, v in self._open_json.items()) + b"}"
        self._open_stale = True  # until the server has it
        await self._kv.put(self._owner, value)
        self._open_stale = False

    async def _remember_session(self, session_id: str, live: bool) -> None:
        key = f"{self._owner}.{session_id}"
        if live:
            await self._sessions_kv.put(key, b"live")
        else:
            # Purged like an execution's key: the bucket's subjects are the live sessions.
            await self._nc.jetstream().purge_stream(
                LIVE_SESSIONS_STREAM, subject=f"$KV.{LIVE_SESSIONS_BUCKET}.{key}"
            )

    async def _publish(self, updates: list[Update], batch_id: str) -> None:
        await self._js.publish(
            self._subject,
            encode_message(batch_id, updates),
            headers={"Nats-Msg-Id": batch_id},
        )


def message_updates(entries: Iterable[_Queued]) -> list[Update]:
    """The updates one message of the queued ``entries`` sends (``_consolidated``)."""
    return _consolidated([u for entry in entries for u in entry.updates])


def in_columns(updates: Sequence[Update]) -> bool:
    """Whether a message of ``updates`` goes in columns (else as rows)."""
    return len(updates) >= COLUMNAR_MIN_UPDATES


def encode_message(batch_id: str, updates: list[Update]) -> bytes:
    """One message's bytes: in columns if it has many updates, else as rows."""
    if in_columns(updates):
        return encode_batch_arrow(batch_id, updates)
    return encode_batch_bytes(batch_id, updates)


async def open_execution_keys(nc: Any, owner: str) -> list[str]:
    """``<owner>.<execution id>`` of the executions `owner` began and has not ended."""
    js = nc.jetstream()
    kv = await _key_value(js, OPEN_EXECUTIONS_BUCKET)
    return sorted(
        f"{owner}.{execution_id}" for execution_id in await _open_executions(js, kv, owner)
    )


async def _open_executions(js: Any, kv: Any, owner: str) -> dict[str, tuple[Any, ...]]:
    """The began rows of `owner`'s open executions, by execution id, as the server has them.

    One value under ``<owner>``, and one key per execution that earlier
    versions wrote: those are listed from the stream's subjects on the server,
    not with `KeyValue.keys()`, whose watcher can report an empty bucket when
    the messages are still in flight to it.
    """
    open_rows: dict[str, tuple[Any, ...]] = {}
    with contextlib.suppress(nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
        entry = await kv.get(owner)
        for execution_id, values in json.loads(entry.value or b"{}").items():
            open_rows[execution_id] = _decode_values(values)
    prefix = f"$KV.{OPEN_EXECUTIONS_BUCKET}."
    info = await js.stream_info(
        _OPEN_EXECUTIONS_STREAM, subjects_filter=_open_subject(f"{owner}.>")
    )
    for subject in info.state.subjects or {}:
        key = subject[len(prefix) :]
        with contextlib.suppress(nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            entry = await kv.get(key)  # a delete marker an older version left behind: none
            open_rows[key[len(owner) + 1 :]] = _decode_row(entry.value)
    return open_rows


def _open_subject(key: str) -> str:
    return f"$KV.{OPEN_EXECUTIONS_BUCKET}.{key}"


def _open_entry(execution_id: str, began_json: bytes) -> bytes:
    return b'"' + execution_id.encode() + b'":' + began_json


def _queue_length(logger: weakref.ref[StatementLogger]) -> Callable[[], float]:
    def length() -> float:
        alive = logger()
        return float(len(alive._queue)) if alive is not None else 0.0

    return length


def _system(configuration: Mapping[str, str], name: str) -> str:
    """``system_value`` for a name known to be a system variable's, spelled as stored."""
    return configuration.get(name, SYSTEM_VARIABLES[name].default)


class _Queued(NamedTuple):
    """What the publisher does with one ``_enqueue``: updates, then bucket writes."""

    updates: list[Update]
    # (execution id, began row) opened, or (execution id, None) closed.
    executions: list[tuple[str, tuple[Any, ...] | None]]
    # session id -> live.
    sessions: dict[str, bool]
    # Until when (monotonic) an execution's start may be held back; 0: not at all.
    hold_until: float


# The updates at the end of an execution's start that may be held back: its began
# row and its execution-began event.
_HELD_UPDATES = 2


def _ready(queue: list[_Queued], now: float) -> tuple[list[_Queued], list[_Queued]]:
    """(what the next message takes, what stays queued), both in queue order.

    The start of an execution still running stays until its hold ends: if it
    ends meanwhile, its start and end go out together, which consolidates to
    the finished row alone and leaves the bucket of open executions as it was.
    The rest of its entry (the session's, prepared statement's and text's
    rows) goes with this message. Nothing is held back while a session closes
    (its key is purged only once its last records are out).
    """
    if not any(entry.hold_until > now for entry in queue):
        return queue, []
    if any(not live for entry in queue for live in entry.sessions.values()):
        return queue, []
    ended = {eid for entry in queue for eid, began in entry.executions if began is None}
    taken: list[_Queued] = []
    held: list[_Queued] = []
    for entry in queue:
        updates, executions, sessions, hold_until = entry
        if hold_until <= now or executions[0][0] in ended:
            taken.append(entry)
            continue
        if len(updates) > _HELD_UPDATES or sessions:
            taken.append(_Queued(updates[:-_HELD_UPDATES], [], sessions, 0.0))
            entry = _Queued(updates[-_HELD_UPDATES:], executions, {}, hold_until)
        held.append(entry)
    return taken, held


async def _key_value(js: Any, bucket: str) -> Any:
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        return await js.create_key_value(bucket=bucket)


def _net_session_ops(batches: Iterable[dict[str, bool]]) -> dict[str, bool]:
    """The live-session writes a message needs: a session opened and closed in it needs none."""
    net: dict[str, bool] = {}
    for ops in batches:
        for session_id, live in ops.items():
            if not live and net.get(session_id):
                del net[session_id]
            else:
                net[session_id] = live
    return net


def _consolidated(updates: list[Update]) -> list[Update]:
    """``updates`` with the diffs of each retracted row summed, and rows that sum to 0 left out.

    An execution that began and ended while the previous message was in flight
    has its began row added and retracted in the same message: neither is
    sent (the writer would sum them to nothing), which spares encoding,
    publishing and writing a wide row twice per short statement.

    A row is matched by identity: the logger retracts the very tuple it added
    (``Execution.began_row``), and hashing wide rows by value cost more than
    the rest of this. Equal rows that are distinct objects are sent as they
    are; the writer sums them all the same.
    """
    net: dict[int, int] = {id(row): 0 for _, row, diff in updates if diff < 0}
    if not net:
        return updates
    for _, row, diff in updates:
        key = id(row)
        if key in net:
            net[key] += diff
    consolidated: list[Update] = []
    for update in updates:
        key = id(update[1])
        if key not in net:
            consolidated.append(update)
        elif net[key]:
            consolidated.append((update[0], update[1], net[key]))
            net[key] = 0  # sent once, with the sum of its diffs
    return consolidated


def _finished_row(
    began: tuple[Any, ...],
    finished_at: dt.datetime,
    status: str,
    error_message: str | None,
    size: int | None,
    rows: int | None,
    strategy: str | None,
    execution_timestamp: int | None,
) -> tuple[Any, ...]:
    return (
        *began[:9],
        execution_timestamp,
        began[10],
        began[11],
        finished_at,
        status,
        error_message,
        size,
        rows,
        strategy,
    )


# The began row as stored in the bucket: JSON, with its one timestamp as ISO text.
_BEGAN_AT = 11


def _encode_row(row: tuple[Any, ...]) -> bytes:
    values = list(row)
    values[_BEGAN_AT] = values[_BEGAN_AT].isoformat()
    return json.dumps(values).encode()


def _decode_row(data: bytes) -> tuple[Any, ...]:
    return _decode_values(json.loads(data))


def _decode_values(values: list[Any]) -> tuple[Any, ...]:
    values[_BEGAN_AT] = dt.datetime.fromisoformat(values[_BEGAN_AT])
    return tuple(values)
