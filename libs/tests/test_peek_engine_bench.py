"""The engine's point-peek bench at a small scale: every peek answers as a polars filter does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "peek_engine.py"


def test_point_peeks_of_an_index_in_batches_answer_as_one_filter_does():
    """The bench fails on the first peek whose rows differ from the filter's; the index is
    in several batches (a load, then one-row inserts), as a replica's is."""
    run = subprocess.run(
        [sys.executable, str(BENCH), "--rows", "600", "--steps", "12", "--peeks", "120"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    header = run.stdout.splitlines()[0]
    assert header.startswith("index of 612 rows in "), header
    assert int(header.split(" in ")[1].split()[0]) > 1, "the index should hold several batches"
    assert "engine    point peek" in run.stdout
