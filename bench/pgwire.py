"""The PostgreSQL wire protocol's costs, each against its baseline in the same run.

With one ``loupe up`` and the local PostgreSQL server (``--postgres``, default the
tests' local one):

- ``SELECT 1`` round trip: psycopg 3 over pgwire with the statement prepared
  (``prepare_threshold=0``: Parse once, then Bind/Execute/Sync), against the
  same statement through the gRPC API (``SqlClient``), and against PostgreSQL
  itself (the floor of the protocol and of psycopg). Interleaved round by round
  so the machine's load hits all three alike.
- fast-path peek of an index over pgwire: ``SELECT * FROM t WHERE k = $1``
  prepared, on a table of ``--rows`` rows with a default index; p50 and p99
  (target p50 < 5 ms), against the same peek through gRPC.
- ``COPY t FROM STDIN`` of ``--copy-rows`` rows (text format, two int columns
  and a text column) into a Loupe table: rows/s, against PostgreSQL's own COPY of
  the same bytes into an unlogged table.
- idle connections: ``--idle`` connections opened over pgwire and left idle:
  the coordinator's resident memory before and after (target < 100 MB for 200),
  and ``SELECT 1`` p50 with them open against without.

Run: ``.venv/bin/python bench/pgwire.py [--rounds 300] [--rows 10000] [--copy-rows 1000000] [--idle 200]``.
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from loupe.client import SqlClient
from loupe.testing.postgres import LOCAL_ADMIN_URL
from loupe.testing.system import LoupeUp, processes_mentioning

PEEK_P50_TARGET_S = 0.005
IDLE_MEMORY_TARGET = 100 * 2**20


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in seconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def line(label: str, samples: list[float], baseline: list[float] | None, name: str = "") -> None:
    p50, p99 = percentiles(samples)
    text = f"{label:<44} p50 {p50 * 1000:7.3f} ms   p99 {p99 * 1000:7.3f} ms"
    if baseline:
        b50, _ = percentiles(baseline)
        text += f"   ({p50 / b50:.2f}x {name})"
    print(text, flush=True)


def timed(work) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def pgwire_url(system: LoupeUp) -> str:
    return f"postgresql://materialize@127.0.0.1:{system.pgwire_port}/materialize"


def coordinator_rss(system: LoupeUp) -> int:
    """The coordinator process's resident memory in bytes (VmRSS)."""
    pattern = re.compile(r"loupe\.cli\.main coordinator\b")
    for pid, cmdline in processes_mentioning(str(system.data_dir)):
        if pattern.search(cmdline):
            status = Path(f"/proc/{pid}/status").read_text()
            return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
    raise RuntimeError("no coordinator process found")


def round_trips(system: LoupeUp, postgres: str, rounds: int) -> None:
    with (
        psycopg.connect(pgwire_url(system), autocommit=True, prepare_threshold=0) as loupe,
        psycopg.connect(postgres, autocommit=True, prepare_threshold=0) as pg,
        SqlClient("127.0.0.1", system.sql_port) as grpc,
    ):
        wire, rpc, floor = [], [], []
        for _ in range(20):  # warm: prepared statements, connections, caches
            loupe.execute("SELECT 1").fetchall()
            pg.execute("SELECT 1").fetchall()
            grpc.query("SELECT 1")
        for _ in range(rounds):
            wire.append(timed(lambda: loupe.execute("SELECT 1").fetchall()))
            rpc.append(timed(lambda: grpc.query("SELECT 1")))
            floor.append(timed(lambda: pg.execute("SELECT 1").fetchall()))
    line("SELECT 1 over pgwire (psycopg, prepared)", wire, floor, "PostgreSQL")
    line("SELECT 1 over gRPC (SqlClient)", rpc, floor, "PostgreSQL")
    line("SELECT 1 on PostgreSQL (the floor)", floor, None)
    b50 = percentiles(rpc)[0]
    print(f"{'':<44} pgwire / gRPC p50: {percentiles(wire)[0] / b50:.2f}x", flush=True)


def peeks(system: LoupeUp, rows: int, rounds: int) -> None:
    with (
        psycopg.connect(pgwire_url(system), autocommit=True, prepare_threshold=0) as loupe,
        SqlClient("127.0.0.1", system.sql_port) as grpc,
    ):
        loupe.execute("CREATE TABLE peeked (k int, v text)")
        with loupe.cursor().copy("COPY peeked FROM STDIN") as copy:
            copy.write("".join(f"{k}\tv{k}\n" for k in range(rows)))
        loupe.execute("CREATE DEFAULT INDEX ON peeked")
        assert loupe.execute("SELECT * FROM peeked WHERE k = %s", (0,)).fetchall() == [(0, "v0")]
        wire, rpc = [], []
        for round_ in range(rounds):
            key = (round_ * 7919) % rows
            began = time.perf_counter()
            result = loupe.execute("SELECT * FROM peeked WHERE k = %s", (key,)).fetchall()
            wire.append(time.perf_counter() - began)
            if result != [(key, f"v{key}")]:
                raise AssertionError(f"k = {key}: {result}")
            rpc.append(timed(lambda k=key: grpc.query(f"SELECT * FROM peeked WHERE k = {k}")))
    line("fast-path peek over pgwire (prepared, $1)", wire, rpc, "gRPC")
    line("fast-path peek over gRPC", rpc, None)
    p50 = percentiles(wire)[0]
    verdict = "met" if p50 < PEEK_P50_TARGET_S else "NOT met"
    print(f"{'':<44} target p50 < {PEEK_P50_TARGET_S * 1000:.0f} ms: {verdict}", flush=True)


def copy_in(system: LoupeUp, postgres: str, rows: int) -> None:
    data = "".join(f"{i}\t{i % 97}\tname {i}\n" for i in range(rows)).encode()

    def load(url: str, create: str) -> float:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(create)
            began = time.perf_counter()
            with conn.cursor().copy("COPY copied FROM STDIN") as copy:
                buffer = io.BytesIO(data)
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
            seconds = time.perf_counter() - began
            (count,) = conn.execute("SELECT count(*) FROM copied").fetchone()  # type: ignore[misc]
            if count != rows:
                raise AssertionError(f"{count} rows after COPY of {rows}")
            return seconds

    loupe_s = load(pgwire_url(system), "CREATE TABLE copied (a bigint, b int, c text)")
    pg_s = load(
        postgres,
        "DROP TABLE IF EXISTS copied; CREATE UNLOGGED TABLE copied (a bigint, b int, c text)",
    )
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute("DROP TABLE copied")
    print(
        f"{f'COPY FROM STDIN, {rows:,} rows':<44} {rows / loupe_s:12,.0f} rows/s"
        f"   ({loupe_s / pg_s:.1f}x PostgreSQL's time: {rows / pg_s:,.0f} rows/s)",
        flush=True,
    )


def idle_connections(system: LoupeUp, count: int, rounds: int) -> None:
    url = pgwire_url(system)
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as active:
        before = [timed(lambda: active.execute("SELECT 1").fetchall()) for _ in range(rounds)]
        rss_before = coordinator_rss(system)
        idle = [psycopg.connect(url, autocommit=True) for _ in range(count)]
        try:
            time.sleep(1.0)
            rss_after = coordinator_rss(system)
            after = [timed(lambda: active.execute("SELECT 1").fetchall()) for _ in range(rounds)]
        finally:
            for conn in idle:
                conn.close()
    grown = rss_after - rss_before
    verdict = "met" if grown < IDLE_MEMORY_TARGET * count / 200 else "NOT met"
    print(
        f"{f'{count} idle pgwire connections':<44} coordinator RSS {grown / 2**20:+.1f} MiB"
        f" ({grown / count / 1024:+.0f} KiB each; target < 100 MB for 200: {verdict})",
        flush=True,
    )
    line("SELECT 1 with them open", after, before, "without")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="round trips timed per client")
    parser.add_argument("--rows", type=int, default=10_000, help="rows of the peeked table")
    parser.add_argument("--copy-rows", type=int, default=1_000_000, help="rows COPYed in")
    parser.add_argument("--idle", type=int, default=200, help="idle connections opened")
    parser.add_argument("--postgres", default=LOCAL_ADMIN_URL, help="the PostgreSQL baseline")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        system = LoupeUp(Path(scratch) / "data")
        try:
            system.start()
            round_trips(system, options.postgres, options.rounds)
            peeks(system, options.rows, options.rounds)
            copy_in(system, options.postgres, options.copy_rows)
            idle_connections(system, options.idle, options.rounds)
        finally:
            system.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
