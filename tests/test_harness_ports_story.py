"""The test harness's ``loupe up`` survives a chosen port taken before its service binds it."""

from __future__ import annotations

import socket
from pathlib import Path

from loupe.testing.system import LoupeUp


def test_a_port_taken_by_another_process_is_chosen_again(tmp_path: Path) -> None:
    """A CI run lost a story when another process bound the coordinator's port first:
    the harness starts again on new ports, and the system then answers there."""
    system = LoupeUp(tmp_path / "data")
    taken = system.sql_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            system.start()
            assert system.sql_port != taken
            assert system.sql("SELECT 1 + 1") == [(2,)]
        finally:
            system.stop()
