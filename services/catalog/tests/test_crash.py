"""Faults with real processes: ``kill -9`` in the middle of commits, and two writers.

A writer process commits, in a loop, transactions that each rewrite many
rows (its own ``ROWS`` system variables and ``ROWS`` shared ones) to the
commit's number, and prints ``ack N`` once a commit returned. Killing it at
random moments must leave every transaction entirely there or entirely
absent: all of a writer's rows hold one number, the last acknowledged one or
(the commit in flight when it died) the next. A second writer fences the
first: the first's next commit fails, and nothing it tried after that is
stored.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from loupe.catalog import create_backend
from loupe.common.nats_server import die_with_parent
from loupe.testing.postgres import CATALOG_URL_ENV

ROWS = 50
EXIT_FENCED = 3

WRITER = f"""
import sys
from pathlib import Path
from loupe.catalog import FencedError, create_backend

name, backend, data_dir = sys.argv[1:4]
catalog = create_backend(backend, Path(data_dir))
catalog.open()
print(f"open {{catalog.epoch}}", flush=True)
n = 0
while True:
    n += 1
    tx = catalog.transaction(user=name)
    for k in range({ROWS}):
        tx.set_system_configuration(f"{{name}}_{{k}}", str(n))
        tx.set_system_configuration(f"shared_{{k}}", f"{{name}}:{{n}}")
    try:
        catalog.commit_transaction(tx)
    except FencedError as error:
        print(f"fenced {{n}} {{error}}", flush=True)
        sys.exit({EXIT_FENCED})
    print(f"ack {{n}}", flush=True)
"""


@pytest.fixture(params=["stash-sqlite", "stash-postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend the writer processes use (stash-postgres: a fresh schema, via the environment)."""
    if request.param == "stash-postgres":
        request.getfixturevalue("postgres_catalog")
    return str(request.param)


class Writer:
    """A writer process and what it acknowledged."""

    def __init__(self, name: str, backend: str, data_dir: Path, log: Path) -> None:
        self.name = name
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, name, backend, str(data_dir)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def acks(self) -> int:
        return max(
            (int(line.split()[1]) for line in self.lines() if line.startswith("ack ")), default=0
        )

    def wait_for_acks(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.acks() < count:
            assert self.process.poll() is None, f"{self.name} exited: {self.lines()[-5:]}"
            assert time.monotonic() < deadline, f"{self.name} acknowledged {self.acks()} commits"
            time.sleep(0.01)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def settle(backend: str) -> None:
    """Wait until PostgreSQL has finished the work of killed writers.

    A writer killed while its COMMIT is on the wire leaves a server backend
    that still completes (or rolls back) that transaction: reading before it
    has ended could miss a commit that then lands. Wait until no other
    catalog connection (``application_name`` loupe-catalog) is inside a
    transaction.
    """
    if backend != "stash-postgres":
        return
    url = os.environ[CATALOG_URL_ENV]
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'loupe-catalog' "
                "AND (state <> 'idle' OR xact_start IS NOT NULL)"
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.05)


def stored_variables(backend: str, data_dir: Path) -> dict[str, str]:
    settle(backend)
    catalog = create_backend(backend, data_dir)
    try:
        catalog.open_read_only()
        return {v.name: v.value for v in catalog.get_system_configurations()}
    finally:
        catalog.close()


def committed_number(variables: dict[str, str], name: str) -> int:
    """The one commit number all of ``name``'s rows hold; fails on a torn transaction."""
    own = {variables.get(f"{name}_{k}") for k in range(ROWS)}
    assert len(own) == 1, f"{name}'s rows are torn: {sorted(own, key=str)}"
    (value,) = own
    return 0 if value is None else int(value)


def test_kill_9_in_the_middle_of_commits_is_all_or_nothing(
    backend: str, data_dir: Path, tmp_path: Path
) -> None:
    """Five writers killed at random moments: no torn transaction, no lost acknowledgement."""
    rng = random.Random(20240806)
    survivors: dict[str, int] = {}
    for round_number in range(5):
        name = f"w{round_number}"
        writer = Writer(name, backend, data_dir, tmp_path / f"{name}.log")
        try:
            writer.wait_for_acks(rng.randint(1, 20))
            time.sleep(rng.uniform(0, 0.05))
        finally:
            writer.kill()
        acknowledged = writer.acks()
        variables = stored_variables(backend, data_dir)
        stored = committed_number(variables, name)
        assert stored in (acknowledged, acknowledged + 1), (stored, acknowledged)
        shared = {variables[f"shared_{k}"] for k in range(ROWS)}
        assert shared == {f"{name}:{stored}"}, f"shared rows are torn: {shared}"
        # Earlier writers' rows are exactly as they were left.
        for earlier, number in survivors.items():
            assert committed_number(variables, earlier) == number
        survivors[name] = stored


def test_two_writers_exactly_one_survives(backend: str, data_dir: Path, tmp_path: Path) -> None:
    """The second writer's open fences the first: its next commit fails and is not stored."""
    first = Writer("a", backend, data_dir, tmp_path / "a.log")
    second = None
    try:
        first.wait_for_acks(3)
        second = Writer("b", backend, data_dir, tmp_path / "b.log")
        second.wait_for_acks(3)
        assert first.process.wait(timeout=30) == EXIT_FENCED
        fenced = [line for line in first.lines() if line.startswith("fenced ")]
        assert len(fenced) == 1
        attempted = int(fenced[0].split()[1])
        assert "(deploy_generation=0, epoch=1)" in fenced[0]
        assert "(deploy_generation=0, epoch=2)" in fenced[0]
        assert first.acks() == attempted - 1
        second.wait_for_acks(second.acks() + 3)
        assert second.process.poll() is None
    finally:
        first.kill()
        if second is not None:
            second.kill()
    variables = stored_variables(backend, data_dir)
    # The fenced commit left nothing: a's rows hold its last acknowledged commit.
    assert committed_number(variables, "a") == attempted - 1
    b_number = committed_number(variables, "b")
    assert b_number >= second.acks()
    assert {variables[f"shared_{k}"] for k in range(ROWS)} == {f"b:{b_number}"}


def test_randomized_history_of_takeovers_and_kills(
    backend: str, data_dir: Path, tmp_path: Path
) -> None:
    """Random takeovers and kill -9s: acknowledged commits stay, fenced ones never land.

    After each round the store must read as one serial history: each
    writer's rows hold one of its commits (the last acknowledged, or the one
    in flight when it was killed, but never one refused by fencing), and the
    shared rows hold the commit of the last writer that committed at all.
    """
    rng = random.Random(7)
    history: list[str] = []
    expected: dict[str, int] = {}
    for round_number in range(4):
        writers = [Writer(f"r{round_number}a", backend, data_dir, tmp_path / f"{round_number}a")]
        try:
            writers[0].wait_for_acks(rng.randint(1, 10))
            if rng.random() < 0.7:
                writers.append(
                    Writer(f"r{round_number}b", backend, data_dir, tmp_path / f"{round_number}b")
                )
                writers[1].wait_for_acks(rng.randint(1, 10))
            time.sleep(rng.uniform(0, 0.03))
        finally:
            for writer in writers:
                writer.kill()
        variables = stored_variables(backend, data_dir)
        for writer in writers:
            stored = committed_number(variables, writer.name)
            if writer.process.returncode == EXIT_FENCED:
                assert stored == writer.acks(), f"{writer.name}: a fenced commit landed"
            else:
                assert stored in (writer.acks(), writer.acks() + 1), writer.name
            expected[writer.name] = stored
            history.append(writer.name)
        for name, number in expected.items():
            assert committed_number(variables, name) == number, f"{name} changed later"
        last = next(name for name in reversed(history) if expected[name] > 0)
        shared = {variables[f"shared_{k}"] for k in range(ROWS)}
        assert shared == {f"{last}:{expected[last]}"}, shared
