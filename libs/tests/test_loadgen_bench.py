"""The compute bench at a small scale: TPC-H views the engine maintains equal DuckDB's answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compute.py"


def test_tpch_views_match_duckdb_after_hydration_and_inserts():
    """Q1, Q3 and Q5 at SF 0.01, hydrated then updated row by row, equal DuckDB's results."""
    run = subprocess.run(
        [sys.executable, str(BENCH), "--scale", "0.01", "--inserts", "3", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checks = [line for line in run.stdout.splitlines() if line.startswith("check")]
    assert [line.split()[1] for line in checks] == ["q1", "q3", "q5"]
    assert all(line.endswith("equals DuckDB: True") for line in checks), checks
