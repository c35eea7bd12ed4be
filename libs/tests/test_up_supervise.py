"""``loupe up``'s supervisor restarts a service that died, after its back-off."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from loupe.cli import up


def test_a_killed_child_is_restarted_after_the_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(up, "RESTART_BACKOFF", 0.3)
    supervisor = up.Supervisor(argparse.Namespace(data_dir=str(tmp_path)))
    child = up.Child(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log"
    )
    child.start(dict(os.environ))
    supervisor.children["sleeper"] = child
    supervisor.env = dict(os.environ)
    first = child.process
    assert first is not None
    runner = threading.Thread(target=supervisor.supervise, daemon=True)
    runner.start()
    try:
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while child.process is first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.process is not first, "the supervisor never restarted the killed child"
        assert child.restarts == 1
        assert child.alive()
    finally:
        supervisor.stopping = True
        runner.join(5)
        child.stop(2)
