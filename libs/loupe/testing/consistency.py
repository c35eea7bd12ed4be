"""A strict serializability checker for Loupe: concurrent writers and readers, real processes.

Each writer session appends ``(writer, seq)`` rows with ``seq`` = 1, 2, … to
table ``history``, one INSERT at a time, noting when each was sent and when
it was acknowledged. Reader sessions repeatedly read, per writer, the count
and the maximum ``seq`` through three paths: the table itself (a transient
dataflow), an indexed view (a fast-path peek) and a materialized view.
Every read must be explainable by one serial order of the acknowledged writes
that respects real time:

- prefix: a read that sees ``(w, s)`` sees every earlier write of ``w``
  (count = max), since each writer's inserts are sequential;
- no stale read: every write acknowledged before the read was sent is seen;
- no time travel: a read sees at least what any read that finished before it
  was sent saw (per writer, whichever path either used);
- nothing from the future: no write that was not yet sent is seen.

``run_history`` returns the violations (empty when consistent) and counts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from loupe.client import SqlClient

READS = {
    "table": "SELECT w, count(*), max(s) FROM history GROUP BY w",
    "indexed view": "SELECT w, n, m FROM history_per_writer",
    "materialized view": "SELECT w, n, m FROM history_per_writer_mv",
}
SETUP = (
    "CREATE TABLE history (w int, s int)",
    "CREATE VIEW history_per_writer AS SELECT w, count(*) AS n, max(s) AS m FROM history GROUP BY w",
    "CREATE DEFAULT INDEX ON history_per_writer",
    "CREATE MATERIALIZED VIEW history_per_writer_mv AS"
    " SELECT w, count(*) AS n, max(s) AS m FROM history GROUP BY w",
)


@dataclass
class Write:
    writer: int
    seq: int
    sent: float
    acked: float


@dataclass
class Read:
    path: str
    sent: float
    done: float
    seen: dict[int, tuple[int, int]]  # writer -> (count, max seq)


@dataclass
class History:
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def run_history(
    port: int, *, writers: int = 3, readers: int = 3, writes_each: int = 30, host: str = "127.0.0.1"
) -> tuple[list[str], History]:
    """Run the workload on the Loupe at ``port``; (violations, history)."""
    with SqlClient(host, port) as client:
        for statement in SETUP:
            client.execute(statement)
    history = History()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_writer, args=(host, port, w, writes_each, history))
        for w in range(writers)
    ]
    threads += [
        threading.Thread(target=_reader, args=(host, port, r, history, stop))
        for r in range(readers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads[:writers]:
        thread.join()
    stop.set()
    for thread in threads[writers:]:
        thread.join()
    return check(history) + history.errors, history


def _writer(host: str, port: int, writer: int, count: int, history: History) -> None:
    try:
        with SqlClient(host, port) as client:
            for seq in range(1, count + 1):
                sent = time.monotonic()
                client.execute(f"INSERT INTO history VALUES ({writer}, {seq})")
                acked = time.monotonic()
                with history.lock:
                    history.writes.append(Write(writer, seq, sent, acked))
    except Exception as error:  # a failed write is a finding, not a crash of the checker
        with history.lock:
            history.errors.append(f"writer {writer}: {error}")


def _reader(host: str, port: int, reader: int, history: History, stop: threading.Event) -> None:
    paths = list(READS)
    turn = reader
    try:
        with SqlClient(host, port) as client:
            while not stop.is_set():
                path = paths[turn % len(paths)]
                turn += 1
                sent = time.monotonic()
                rows = client.query(READS[path])
                done = time.monotonic()
                seen = {int(w): (int(n), int(m)) for w, n, m in rows}
                with history.lock:
                    history.reads.append(Read(path, sent, done, seen))
    except Exception as error:
        with history.lock:
            history.errors.append(f"reader {reader}: {error}")


def check(history: History) -> list[str]:
    """The violations of strict serializability in ``history``."""
    violations: list[str] = []
    writes_by_writer: dict[int, list[Write]] = {}
    for write in history.writes:
        writes_by_writer.setdefault(write.writer, []).append(write)
    reads = sorted(history.reads, key=lambda r: r.sent)
    finished: list[Read] = sorted(history.reads, key=lambda r: r.done)
    # The most each writer was seen at by reads finished before the current one was sent.
    before: dict[int, tuple[int, str]] = {}
    position = 0
    for read in reads:
        for writer, (count, highest) in read.seen.items():
            if count != highest:
                violations.append(
                    f"{read.path} read saw {count} writes of writer {writer} up to seq {highest}"
                )
        for writer, writes in writes_by_writer.items():
            seen = read.seen.get(writer, (0, 0))[1]
            acked = max((w.seq for w in writes if w.acked < read.sent), default=0)
            if seen < acked:
                violations.append(
                    f"stale {read.path} read: writer {writer} seq {seen} seen, {acked} acknowledged"
                    " before the read was sent"
                )
            sent = max((w.seq for w in writes if w.sent < read.done), default=0)
            if seen > sent:
                violations.append(
                    f"{read.path} read saw writer {writer} seq {seen} before it was sent"
                )
        while position < len(finished) and finished[position].done < read.sent:
            for writer, (_, highest) in finished[position].seen.items():
                if highest > before.get(writer, (0, ""))[0]:
                    before[writer] = (highest, finished[position].path)
            position += 1
        for writer, (highest, path) in before.items():
            seen = read.seen.get(writer, (0, 0))[1]
            if seen < highest:
                violations.append(
                    f"{read.path} read went back in time: writer {writer} seq {seen}"
                    f" after a {path} read saw {highest}"
                )
    return violations
