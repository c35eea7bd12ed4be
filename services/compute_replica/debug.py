"""CPU-bound steps for liveness tests: how a replica is made busy on purpose.

Reached only through ``UpdateConfiguration`` parameters of a replica started
with ``debug_commands`` (see ``ComputeReplica._run_debug_commands``). The
kinds differ in how they hold the GIL, which decides whether other threads
(the heartbeat thread) run meanwhile:

``python``
    a pure-Python loop: the interpreter hands the GIL over every switch
    interval (5 ms), so other threads run, slower.
``polars``
    repeated sorts of a large frame: polars releases the GIL while it works.
``gil``
    a regular expression backtracking exponentially: one C call that holds
    the GIL throughout, each round twice as long as the one before (the
    last one about half of ``seconds``), starving every other thread of
    the process. Only the controller's look at the process (CPU time
    advancing) tells such a replica busy rather than dead.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable

import polars as pl


def busy_step(kind: str, seconds: float) -> int:
    """Burn CPU on the calling thread for ``seconds`` the ``kind`` way; returns rounds run (>= 1)."""
    deadline = time.monotonic() + seconds
    work: Callable[[int], None]
    if kind == "python":
        work = _python_round
    elif kind == "polars":
        frame = pl.DataFrame({"a": pl.int_range(0, 2_000_000, eager=True).shuffle(seed=1)})
        work = functools.partial(_polars_round, frame)
    elif kind == "gil":
        work = _gil_round
    else:
        raise ValueError(f"unknown busy step kind {kind!r}: python, polars or gil")
    rounds = 0
    while True:
        work(rounds)
        rounds += 1
        if time.monotonic() >= deadline:
            return rounds


def _python_round(_round: int) -> None:
    sum(i * i for i in range(10_000))


def _polars_round(frame: pl.DataFrame, _round: int) -> None:
    frame.sort("a").select(pl.col("a").cum_sum())


_BACKTRACKING = re.compile(r"(a+)+$")


def _gil_round(round_: int) -> None:
    # Fails to match after trying 2**n ways to split the a's, all in one C call.
    _BACKTRACKING.match("a" * (16 + round_) + "b")
