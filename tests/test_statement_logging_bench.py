"""The statement logging bench at a tiny size: it runs, measures both rates, and logging logged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BENCH = Path(__file__).resolve().parents[1] / "bench" / "statement_logging.py"


def test_bench_reports_overhead_and_visibility_and_logs_at_rate_one():
    """Two short rounds and two markers: both reports print, and rate 1 logged executions."""
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--sessions",
            "2",
            "--seconds",
            "0.5",
            "--rounds",
            "1",
            "--samples",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert re.search(r"^overhead .*target <= 3 %: (PASS|MISS)\)$", run.stdout, re.M), output
    assert re.search(r"^visible .*target < 1: (PASS|MISS)\)$", run.stdout, re.M), output
    flushes = re.search(r"(\d+) data flushes, \d+ ms each on average, (\d+) Spark jobs", output)
    assert flushes, output
    assert int(flushes[1]) > 0, output
    logged = re.search(r"logged (\d+) executions for (\d+) statements run at 1.0", run.stdout)
    assert logged, output
    assert int(logged[1]) >= int(logged[2]) > 0, output


def test_micro_bench_reports_the_loggers_cost_per_execution():
    """The logger alone against a real nats-server: it prints its cost per execution."""
    micro = BENCH.with_name("statement_logging_micro.py")
    run = subprocess.run(
        [sys.executable, str(micro), "--executions", "300", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    match = re.search(r"logging costs (-?[0-9.]+) us/execution", output)
    assert match is not None, output
