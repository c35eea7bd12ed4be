"""The chaos and soak workload: writers, readers and DDL on real sessions, with a ledger.

Writers insert batches of rows with ids never used before into
``chaos_events`` (and delete some rows they inserted); a write counts as
acknowledged only when its statement returned success. A statement whose
outcome is unknown (the connection broke, a deadline passed, the server
failed internally) leaves its rows "maybe": present once or absent are both
right, twice never is. An index (on ``chaos_by_grp``) and materialized views
(``chaos_by_label``, a join) are maintained over the table; readers peek them
and the table. A DDL session creates and drops tables, views and indexes.

The ``Gate`` lets the checker stop every writing session between statements,
so that what it reads is one state the ledger fully describes.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from loupe.client import SqlClient
from loupe.common.errors import LoupeError

GROUPS = 7
LABELS = ("red", "green", "blue")
SETUP = (
    "CREATE TABLE chaos_dims (grp int NOT NULL, label text NOT NULL)",
    "INSERT INTO chaos_dims VALUES "
    + ", ".join(f"({grp}, '{LABELS[grp % len(LABELS)]}')" for grp in range(GROUPS)),
    "CREATE TABLE chaos_events (id bigint NOT NULL, writer int NOT NULL, grp int NOT NULL,"
    " amount int NOT NULL)",
    "CREATE TABLE chaos_probe (id bigint NOT NULL)",
)
# The workload's objects of schema public besides the DDL session's (materialized views
# are neither tables nor views).
FIXED_TABLES = ("chaos_dims", "chaos_events", "chaos_probe")
FIXED_VIEWS = ("chaos_by_grp",)
# The maintained views: name -> the SELECT that defines it, run as is on PostgreSQL too.
MAINTAINED = {
    "chaos_by_grp": "SELECT grp, count(*) AS n, sum(amount) AS total FROM chaos_events GROUP BY grp",
    "chaos_by_label": (
        "SELECT d.label, count(*) AS n, max(e.amount) AS top, sum(e.amount) AS total"
        " FROM chaos_events e JOIN chaos_dims d ON e.grp = d.grp GROUP BY d.label"
    ),
    "chaos_writers": (
        "SELECT writer, count(DISTINCT grp) AS grps, min(id) AS first, max(id) AS last"
        " FROM chaos_events WHERE amount % 2 = 0 GROUP BY writer"
    ),
}
MAINTAIN = (
    f"CREATE VIEW chaos_by_grp AS {MAINTAINED['chaos_by_grp']}",
    "CREATE DEFAULT INDEX ON chaos_by_grp",
    f"CREATE MATERIALIZED VIEW chaos_by_label AS {MAINTAINED['chaos_by_label']}",
    f"CREATE MATERIALIZED VIEW chaos_writers AS {MAINTAINED['chaos_writers']}",
)
READS = (
    "SELECT grp, n, total FROM chaos_by_grp",  # fast path: the index
    "SELECT label, n, top FROM chaos_by_label",  # the materialized view
    "SELECT count(*), max(id) FROM chaos_events",  # a transient dataflow
    "SELECT writer, last FROM chaos_writers WHERE grps > 1",
)
# SQLSTATE classes whose errors are decided before anything is written, and single codes:
# 53000 is an admission queue refusing the statement before it runs.
DEFINITE_CLASSES = ("22", "23", "42", "2B")
DEFINITE_CODES = ("53000",)
STATEMENT_TIMEOUT = 30.0


class NotSent(Exception):
    """No session could be opened: the statement never left the client."""


def definite_failure(error: Exception) -> bool:
    """Whether ``error`` proves the statement changed nothing; otherwise its outcome is unknown."""
    if isinstance(error, NotSent):
        return True
    if not isinstance(error, LoupeError):
        return False
    return error.code[:2] in DEFINITE_CLASSES or error.code in DEFINITE_CODES


class Gate:
    """Writers pass it around each statement; ``paused()`` closes it and waits for them to leave."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._open = True
        self._inside = 0

    @contextlib.contextmanager
    def passage(self, stop: threading.Event) -> Iterator[bool]:
        """Yields False when the workload stops while waiting at the closed gate."""
        with self._condition:
            while not self._open and not stop.is_set():
                self._condition.wait(0.2)
            if stop.is_set():
                yield False
                return
            self._inside += 1
        try:
            yield True
        finally:
            with self._condition:
                self._inside -= 1
                self._condition.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self._condition:
            self._open = False
            while self._inside:
                self._condition.wait()
        try:
            yield
        finally:
            with self._condition:
                self._open = True
                self._condition.notify_all()


@dataclass
class Ledger:
    """What the workload was told. Row states: ``present`` (insert acknowledged),
    ``maybe`` (insert outcome unknown), ``deleted`` (delete acknowledged),
    ``maybe-deleted`` (delete outcome unknown). Objects of the DDL session:
    ``present``, ``absent`` or ``maybe``."""

    rows: dict[int, str] = field(default_factory=dict)
    batches: list[tuple[int, ...]] = field(default_factory=list)  # inserts of unknown outcome
    objects: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    reads: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # the first message of each error kind
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_error(self, error: Exception) -> None:
        code = error.code if isinstance(error, LoupeError) else type(error).__name__
        with self.lock:
            self.errors[code] += 1
            self.examples.setdefault(code, str(error)[:300])


class Session:
    """One SQL session that reconnects after a failure (a restarted coordinator forgets it)."""

    def __init__(self, port: int, name: str, timeout: float = STATEMENT_TIMEOUT) -> None:
        self.port = port
        self.name = name
        self.timeout = timeout
        self.client: SqlClient | None = None

    def execute(self, sql: str) -> list:
        if self.client is None:
            client = SqlClient(
                "127.0.0.1",
                self.port,
                application_name=self.name,
                connect_timeout=5,
                statement_timeout=self.timeout,
            )
            try:
                client.open()
            except Exception as error:
                raise NotSent(f"{type(error).__name__}: {error}") from error
            self.client = client
        try:
            results = self.client.execute(sql)
        except LoupeError as error:
            if not definite_failure(error):
                self.reset()
            raise
        except Exception:
            self.reset()
            raise
        return results[-1].rows if results else []

    def reset(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        self.client = None

    def close(self) -> None:
        self.reset()


class Workload:
    """``writers`` + ``readers`` + one DDL thread against the Loupe at ``port``."""

    def __init__(
        self,
        port: int,
        *,
        writers: int = 3,
        readers: int = 2,
        ddl: bool = True,
        seed: int = 0,
        pace: float = 0.0,
        keep: int | None = None,
        ddl_pause: tuple[float, float] = (0.2, 1.0),
    ) -> None:
        self.port = port
        self.writers = writers
        self.readers = readers
        self.ddl = ddl
        self.seed = seed
        self.pace = pace  # seconds each session sleeps between statements (on average)
        self.keep = keep  # when set, each writer deletes its oldest rows past this many
        self.ddl_pause = ddl_pause  # seconds the DDL session rests between rounds
        self.ledger = Ledger()
        self.gate = Gate()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self._next_id = 0
        self._id_lock = threading.Lock()

    def setup(self) -> None:
        session = Session(self.port, "chaos-setup", timeout=120)
        try:
            for statement in SETUP + MAINTAIN:
                session.execute(statement)
        finally:
            session.close()

    def start(self) -> None:
        targets: list[tuple[Callable[[int], None], int]]
        targets = [(self._writer, w) for w in range(self.writers)]
        targets += [(self._reader, r) for r in range(self.readers)]
        if self.ddl:
            targets.append((self._ddl, 0))
        for target, number in targets:
            thread = threading.Thread(target=target, args=(number,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(STATEMENT_TIMEOUT + 10)

    def _ids(self, count: int) -> list[int]:
        with self._id_lock:
            first = self._next_id + 1
            self._next_id += count
        return list(range(first, first + count))

    def _failed(self, error: Exception) -> None:
        """Count the error; back off a little, so an outage is not a busy loop."""
        self.ledger.note_error(error)
        self.stop_event.wait(0.25)

    def _sleep(self, rng: random.Random) -> None:
        if self.pace:
            self.stop_event.wait(rng.uniform(0, 2 * self.pace))

    # -- writers -------------------------------------------------------------------

    def _writer(self, writer: int) -> None:
        rng = random.Random(f"{self.seed}-writer-{writer}")
        session = Session(self.port, f"chaos-writer-{writer}")
        mine: list[int] = []  # acknowledged rows of this writer, oldest first, to DELETE
        while not self.stop_event.is_set():
            with self.gate.passage(self.stop_event) as passing:
                if not passing:
                    break
                if self.keep is not None and len(mine) > self.keep:
                    # Steady state (the soak): the oldest rows go as fast as new ones come.
                    oldest, mine[:4] = mine[:4], []
                    self._delete(session, oldest)
                elif mine and rng.random() < 0.1:
                    self._delete(session, [mine.pop(rng.randrange(len(mine)))])
                else:
                    mine.extend(self._insert(session, writer, rng))
            self._sleep(rng)
        session.close()

    def _insert(self, session: Session, writer: int, rng: random.Random) -> list[int]:
        ids = self._ids(rng.randint(1, 4))
        values = ", ".join(f"({i}, {writer}, {i % GROUPS}, {rng.randint(0, 99)})" for i in ids)
        ledger = self.ledger
        try:
            session.execute(f"INSERT INTO chaos_events VALUES {values}")
        except Exception as error:
            self._failed(error)
            with ledger.lock:
                if definite_failure(error):
                    ledger.counts["insert_failed"] += 1
                    return []
                ledger.counts["insert_maybe"] += 1
                ledger.rows.update(dict.fromkeys(ids, "maybe"))
                ledger.batches.append(tuple(ids))
            return []
        with ledger.lock:
            ledger.counts["insert_acked"] += 1
            ledger.counts["rows_acked"] += len(ids)
            ledger.rows.update(dict.fromkeys(ids, "present"))
        return ids

    def _delete(self, session: Session, rows: list[int]) -> None:
        ledger = self.ledger
        listed = ", ".join(str(row) for row in rows)
        try:
            session.execute(f"DELETE FROM chaos_events WHERE id IN ({listed})")
        except Exception as error:
            self._failed(error)
            with ledger.lock:
                if definite_failure(error):
                    ledger.counts["delete_failed"] += 1
                else:
                    ledger.counts["delete_maybe"] += 1
                    ledger.rows.update(dict.fromkeys(rows, "maybe-deleted"))
            return
        with ledger.lock:
            ledger.counts["delete_acked"] += 1
            ledger.rows.update(dict.fromkeys(rows, "deleted"))

    # -- readers -------------------------------------------------------------------

    def _reader(self, reader: int) -> None:
        rng = random.Random(f"{self.seed}-reader-{reader}")
        session = Session(self.port, f"chaos-reader-{reader}")
        turn = reader
        while not self.stop_event.is_set():
            statement = READS[turn % len(READS)]
            turn += 1
            try:
                session.execute(statement)
            except Exception as error:
                self._failed(error)
                with self.ledger.lock:
                    self.ledger.counts["read_failed"] += 1
            else:
                with self.ledger.lock:
                    self.ledger.counts["read_ok"] += 1
            self._sleep(rng)
        session.close()

    # -- DDL -----------------------------------------------------------------------

    def _ddl(self, _number: int) -> None:
        """Create a table, fill it, a view and (every other round) an index on it; drop the
        table of two rounds back with CASCADE. The ledger says which objects must exist."""
        rng = random.Random(f"{self.seed}-ddl")
        session = Session(self.port, "chaos-ddl")
        round_number = 0
        while not self.stop_event.is_set():
            round_number += 1
            table, view = f"chaos_ddl_{round_number}", f"chaos_ddl_v{round_number}"
            steps: list[tuple[str, dict[str, str]]] = [
                (f"CREATE TABLE {table} (a int)", {table: "present"}),
                (f"INSERT INTO {table} VALUES ({round_number})", {}),
                (f"CREATE VIEW {view} AS SELECT a + 1 AS b FROM {table}", {view: "present"}),
            ]
            if round_number % 2 == 0:
                steps.append((f"CREATE DEFAULT INDEX ON {view}", {}))
            if round_number > 2:
                old = round_number - 2
                steps.append(
                    (
                        f"DROP TABLE IF EXISTS chaos_ddl_{old} CASCADE",
                        {f"chaos_ddl_{old}": "absent", f"chaos_ddl_v{old}": "absent"},
                    )
                )
            for statement, effects in steps:
                with self.gate.passage(self.stop_event) as passing:
                    if not passing:
                        break
                    self._ddl_step(session, statement, effects)
                self._sleep(rng)
            self.stop_event.wait(rng.uniform(*self.ddl_pause))
        session.close()

    def _ddl_step(self, session: Session, statement: str, effects: dict[str, str]) -> None:
        ledger = self.ledger
        try:
            session.execute(statement)
        except Exception as error:
            self._failed(error)
            with ledger.lock:
                if definite_failure(error):
                    ledger.counts["ddl_failed"] += 1
                else:
                    ledger.counts["ddl_maybe"] += 1
                    for name in effects:
                        ledger.objects[name] = "maybe"
            return
        with ledger.lock:
            ledger.counts["ddl_acked"] += 1
            ledger.objects.update(effects)
