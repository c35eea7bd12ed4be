"""``python -m loupe.slt [PATH …]``: run sqllogictest scripts, print the pass rate per file.

PATHs are files or directories (searched for ``*.test``), relative to the
corpus directory (``--dir``, default ``$LOUPE_SLT_DIR`` or
``../shared/sqllogictest`` beside the repository). Loupe is the one at
``--port`` if given, else a fresh ``loupe up`` in a temporary directory.
``--postgres`` also runs every file on PostgreSQL (``--postgres-url``, default
the local server) so each line says what PostgreSQL itself passes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from loupe.slt.records import parse_script
from loupe.slt.runner import FileResult, run_script
from loupe.slt.targets import LoupeTarget, PostgresTarget

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DIR = Path(os.environ.get("LOUPE_SLT_DIR", REPO.parent / "shared" / "sqllogictest"))
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


def scripts(corpus: Path, paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for given in paths or ["."]:
        path = corpus / given  # an absolute path stays as it is
        if not path.exists():
            path = Path(given)
        found.extend(sorted(path.rglob("*.test")) if path.is_dir() else [path])
    return found


@contextlib.contextmanager
def loupe_port(port: int | None) -> Iterator[int]:
    if port is not None:
        yield port
        return
    from loupe.testing.system import LoupeUp

    with tempfile.TemporaryDirectory(prefix="loupe-slt-") as data_dir:
        system = LoupeUp(Path(data_dir))
        print("starting loupe up …", file=sys.stderr, flush=True)
        system.start()
        try:
            yield system.sql_port
        finally:
            system.stop()


def line(result: FileResult, corpus: Path, label: str) -> str:
    try:
        name = str(Path(result.path).relative_to(corpus))
    except ValueError:
        name = result.path
    limited = " (first records only)" if result.records_limited else ""
    views = f", {result.not_views} not views" if result.mode == "views" else ""
    return (
        f"{label:<10} {name:<42} {result.mode:<7} {result.passed:>6}/{result.records:<6}"
        f" {100 * result.pass_rate:6.2f} %  {result.per_second:7.1f} rec/s"
        f"  skipped {result.skipped}{views}{limited}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loupe.slt", description=__doc__)
    parser.add_argument("paths", nargs="*", help="scripts or directories (default: all)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the corpus directory")
    parser.add_argument("--port", type=int, help="a running Loupe's SQL port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--mode", choices=("oneshot", "views", "both"), default="oneshot")
    parser.add_argument("--max-records", type=int, help="run at most this many records a file")
    parser.add_argument("--postgres", action="store_true", help="run on PostgreSQL too")
    parser.add_argument("--postgres-only", action="store_true", help="run on PostgreSQL only")
    parser.add_argument(
        "--postgres-url", default=os.environ.get("LOUPE_SLT_POSTGRES_URL", LOCAL_POSTGRES)
    )
    parser.add_argument("--failures", type=int, default=3, help="failures to print a file")
    args = parser.parse_args(argv)

    files = scripts(args.dir, args.paths)
    if not files:
        print(f"no *.test scripts under {args.dir}", file=sys.stderr)
        return 2
    modes = ("oneshot", "views") if args.mode == "both" else (args.mode,)
    totals: dict[str, list[int]] = {}

    def report(label: str, result: FileResult) -> None:
        print(line(result, args.dir, label), flush=True)
        for failure in result.failures[: args.failures]:
            sql = " ".join(failure.sql.split())
            print(f"    line {failure.line}: {sql[:100]}\n      {failure.reason[:300]}")
        total = totals.setdefault(f"{label} {result.mode}", [0, 0])
        total[0] += result.passed
        total[1] += result.records

    with contextlib.ExitStack() as stack:
        postgres = None
        if args.postgres or args.postgres_only:
            postgres = PostgresTarget(args.postgres_url)
            stack.callback(postgres.close)
        loupe = None
        if not args.postgres_only:
            port = stack.enter_context(loupe_port(args.port))
            loupe = LoupeTarget(args.host, port)
            stack.callback(loupe.close)
        for path in files:
            script = parse_script(path)
            for mode in modes:
                if postgres is not None:
                    report(
                        "postgresql",
                        run_script(postgres, script, mode=mode, max_records=args.max_records),
                    )
                if loupe is not None:
                    report(
                        "loupe", run_script(loupe, script, mode=mode, max_records=args.max_records)
                    )
    for label, (passed, records) in totals.items():
        rate = 100 * passed / records if records else 100.0
        print(f"total {label}: {passed}/{records} records passed ({rate:.2f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
