"""The processes of one ``loupe up``, read from /proc: roles, trees, memory, leftovers.

Shared by the chaos test (which kills them and checks none is left behind)
and the soak test (which samples their memory); ``Throttled`` starves one of
them (the hydration story and the console's browser tests watch a replica
hydrate). /proc, not psutil: Loupe does not depend on psutil and these tests
run on Linux.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Proc:
    """A process as seen once: ``start`` (ticks since boot) tells a reused pid apart."""

    pid: int
    ppid: int
    start: int
    state: str
    cmdline: str

    @property
    def role(self) -> str:
        return role_of(self.cmdline)


def read_proc(pid: int) -> Proc | None:
    """The process ``pid`` now, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return Proc(
        pid=pid,
        ppid=int(fields[1]),
        start=int(fields[19]),
        state=fields[0],
        cmdline=cmdline.replace(b"\0", b" ").decode(errors="replace").strip(),
    )


def all_procs() -> list[Proc]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = read_proc(int(entry))
            if proc is not None:
                found.append(proc)
    return found


def descendants(root: int, procs: list[Proc] | None = None) -> list[Proc]:
    """Every live (not zombie) process below ``root`` in the process tree."""
    procs = all_procs() if procs is None else procs
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child.state != "Z":
                found.append(child)
                pending.append(child.pid)
    return found


def alive(proc: Proc) -> bool:
    """Whether the very process ``proc`` (same pid and start time) still runs."""
    now = read_proc(proc.pid)
    return now is not None and now.start == proc.start and now.state != "Z"


def role_of(cmdline: str) -> str:
    """``loupe up``'s children by what they run: service names, ``replica:<id>``, spark, nats."""
    words = cmdline.split()
    if "loupe.cli.main" in words:
        command = words[words.index("loupe.cli.main") + 1 : words.index("loupe.cli.main") + 2]
        if command == ["compute-replica"] and "--replica-id" in words:
            return "replica:" + words[words.index("--replica-id") + 1]
        if command:
            return {"catalog-server": "catalog"}.get(command[0], command[0])
    if words and words[0].endswith("/java") and "org.apache.spark.deploy.SparkSubmit" in words:
        return "spark"
    if words and words[0].endswith("nats-server"):
        return "nats"
    return words[0] if words else "?"


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` (from /proc/<pid>/statm), None when it is gone."""
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident * PAGE_SIZE


def disk_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (files vanishing while walking are skipped)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


class Tracker:
    """Remembers every process ever seen below ``loupe up`` so leftovers can be found:
    a process that outlives its parent is re-parented and no longer in the tree."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, int], Proc] = {}

    def snapshot(self) -> list[Proc]:
        """The tree now (and remember it)."""
        tree = descendants(self.root)
        for proc in tree:
            self.seen[(proc.pid, proc.start)] = proc
        return tree

    def orphans(self) -> list[Proc]:
        """Processes once in the tree, still running, but no longer in it."""
        tree = {(proc.pid, proc.start) for proc in descendants(self.root)}
        return [proc for key, proc in self.seen.items() if key not in tree and alive(proc)]


class Throttled:
    """Runs ``pid`` a small share of the time (``run`` seconds, then ``stop`` seconds
    stopped: SIGSTOP / SIGCONT), as a replica on a starved machine: its hydrations
    take seconds instead of one, long enough to be watched in SQL or a browser. The
    stops stay far below the heartbeat timeout; a process gone meanwhile ends it."""

    def __init__(self, pid: int, run: float = 0.02, stop: float = 0.4) -> None:
        self.pid, self.run, self.stop = pid, run, stop
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.stop)
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(self.run)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Throttled:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join(5)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)

    def freeze(self) -> bool:
        """Stop throttling and leave the process stopped (SIGSTOP) until ``__exit__``.
        False when the process is gone (starved past the heartbeat timeout, it was
        replaced)."""
        self.done.set()
        self.thread.join(5)
        try:
            os.kill(self.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        return True
