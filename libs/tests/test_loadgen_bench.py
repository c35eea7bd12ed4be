"""The compute bench at a small scale: TPC-H views the engine maintains equal DuckDB's answers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compute.py"
# The Pathway baseline's own venv (``make bench-pathway``); tests never create it.
PATHWAY_PYTHON = BENCH.with_name(".venv-pathway") / "bin" / "python"


def run_bench(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCH), "--scale", "0.01", "--inserts", "3", "--rounds", "1"]
    return subprocess.run(
        [*command, *arguments], capture_output=True, text=True, timeout=180, check=False
    )


def test_tpch_views_match_duckdb_after_hydration_and_inserts(tmp_path):
    """Q1, Q3 and Q5 at SF 0.01, hydrated then updated row by row, equal DuckDB's results.

    Without a Pathway venv the bench says its baseline was skipped and why, and runs the rest.
    """
    missing = tmp_path / "no-venv" / "bin" / "python"
    run = run_bench("--pathway-python", str(missing))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"pathway   baseline skipped: {missing} not found" in run.stdout, run.stdout
    assert "Pathway p50" not in run.stdout
    checks = [line for line in run.stdout.splitlines() if line.startswith("check")]
    assert [line.split()[1] for line in checks] == ["q1", "q3", "q5"]
    assert all(line.endswith("equals DuckDB: True") for line in checks), checks


@pytest.mark.skipif(
    not PATHWAY_PYTHON.exists(), reason="no Pathway venv (make bench-pathway creates it)"
)
def test_pathway_baseline_equals_duckdb_and_ratios_print():
    """Pathway's Q1, Q3 and Q5 equal DuckDB's after hydration and after the same inserts."""
    run = run_bench("--pathway-python", str(PATHWAY_PYTHON))
    assert run.returncode == 0, run.stdout + run.stderr
    checks = [line for line in run.stdout.splitlines() if line.startswith("check")]
    pathway_checks = [line for line in checks if "Pathway" in line]
    assert [line.split()[1] for line in pathway_checks] == ["q1", "q3", "q5"], run.stdout
    assert all(
        line.endswith("after hydration equals DuckDB: True, after the inserts: True")
        for line in pathway_checks
    ), pathway_checks
    for ratio in ("x Pathway; target <= 1x", "engine p99 / p50"):
        assert run.stdout.count(ratio) >= 3, run.stdout
