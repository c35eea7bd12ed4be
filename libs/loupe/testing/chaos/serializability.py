"""The strict serializability histories (``loupe.testing.consistency``) as part of a chaos run.

Run after the faults, on the same system: ``rounds`` histories of concurrent
writers and readers, each on a fresh ``history`` table; every violation (and
every failed statement) is a finding.
"""

from __future__ import annotations

from collections.abc import Callable

from loupe.client import SqlClient
from loupe.testing.consistency import run_history
from loupe.testing.system import LoupeUp


def run_rounds(
    system: LoupeUp,
    rounds: int,
    *,
    writers: int = 4,
    readers: int = 4,
    writes: int = 200,
    say: Callable[[str], None] = print,
) -> list[str]:
    findings: list[str] = []
    for round_number in range(1, rounds + 1):
        violations, history = run_history(
            system.sql_port, writers=writers, readers=readers, writes_each=writes
        )
        say(
            f"serializability round {round_number}: {len(history.writes)} writes,"
            f" {len(history.reads)} reads checked, {len(violations)} violations"
        )
        findings += [f"serializability round {round_number}: {v}" for v in violations[:20]]
        with SqlClient("127.0.0.1", system.sql_port) as client:
            client.execute("DROP TABLE history CASCADE")
    return findings
