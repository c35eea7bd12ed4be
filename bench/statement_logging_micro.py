"""What statement logging costs the coordinator per execution, without the rest of Loupe.

A ``StatementLogger`` against a real nats-server (its publisher included: it
runs in the coordinator's event loop) logs ``--executions`` executions of a
constant SELECT from ``--sessions`` concurrent tasks, each pausing
``--pause-ms`` between statements as a ~1.7 ms constant SELECT does, once at
sample rate 1 and once at rate 0. The coordinator's cost of logging is the
process CPU time per execution at rate 1 less that at rate 0, in
microseconds. Target: well under 50 us (3 % of a ~1.7 ms statement).

``--profile`` prints a cProfile breakdown of the rate-1 run.

Run: ``.venv/bin/python bench/statement_logging_micro.py [--executions 20000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loupe.common.nats_server import NatsServerProcess
from loupe.common.transport import connect, ensure_stream
from loupe.coordinator import statement_logging as stmtlog
from loupe.coordinator.session import SessionManager

STATEMENTS = ("SELECT 1", "SELECT 'x' || 2")


async def _round(
    nc: Any, subject: str, rate: str, args: argparse.Namespace, profile: cProfile.Profile | None
) -> float:
    """CPU seconds per execution of one round at ``rate``."""
    config = {
        "statement_logging_max_sample_rate": "1",
        "statement_logging_target_data_rate": str(10**9),
        "statement_logging_max_data_credit": str(10**10),
    }
    logger = stmtlog.StatementLogger(
        nc, lambda: config, owner=f"bench-{uuid.uuid4().hex[:6]}", subject=subject
    )
    await logger.start()
    manager = SessionManager()
    per_session = args.executions // args.sessions
    pause = args.pause_ms / 1000

    async def session_loop() -> None:
        session = manager.open(
            application_name="bench", defaults={"statement_logging_sample_rate": rate}
        )
        for index in range(per_session):
            sql = STATEMENTS[index % 2]
            execution = logger.begin(session, sql, "select")
            token = stmtlog.CURRENT.set(execution)
            stmtlog.note_event(stmtlog.OPTIMIZATION_FINISHED)
            stmtlog.note_strategy(stmtlog.CONSTANT)
            if execution is not None:
                execution.rows_returned, execution.result_size = stmtlog.result_size([(1,)])
            stmtlog.CURRENT.reset(token)
            await asyncio.sleep(0)  # the statement's answer goes out between begin and end
            if execution is not None:
                logger.end(execution, stmtlog.SUCCESS)
            await asyncio.sleep(pause)
        logger.session_closed(session.id)

    if profile is not None:
        profile.enable()
    started = time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(args.sessions):
            group.create_task(session_loop())
    await logger.drain()
    spent = time.process_time() - started
    if profile is not None:
        profile.disable()
    await logger.stop()
    if rate == "1" and args.verbose:
        info = await nc.jetstream().stream_info("BENCH_STMTLOG")
        print(f"  {info.state.messages} messages in the stream so far")
    return spent / (per_session * args.sessions)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        server = NatsServerProcess(Path(directory) / "nats")
        server.start()
        try:
            nc = await connect(server.url, name="bench")
            subject = "bench.stmtlog.updates"
            await ensure_stream(nc, "BENCH_STMTLOG", [subject])
            await _round(
                nc, subject, "1", argparse.Namespace(**{**vars(args), "executions": 400}), None
            )
            profile = cProfile.Profile() if args.profile else None
            results: dict[str, list[float]] = {"1": [], "0": []}
            for _ in range(args.rounds):
                for rate in ("0", "1"):
                    results[rate].append(
                        await _round(nc, subject, rate, args, profile if rate == "1" else None)
                    )
            await nc.close()
        finally:
            server.stop()
    best = {rate: min(values) * 1e6 for rate, values in results.items()}
    print(
        f"CPU per execution: rate 1 {best['1']:.1f} us, rate 0 {best['0']:.1f} us "
        f"(best of {args.rounds}); logging costs {best['1'] - best['0']:.1f} us/execution"
    )
    if profile is not None:
        pstats.Stats(profile).sort_stats(os.environ.get("SORT", "tottime")).print_stats(
            int(os.environ.get("TOP", "25"))
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=20000)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--pause-ms", type=float, default=1.7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    asyncio.run(main(parser.parse_args()))
