"""``make chaos``: the long chaos run (see ``loupe.testing.chaos``); exit 1 on any finding."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loupe.testing.chaos.checker import CATALOG_BOUND
from loupe.testing.chaos.faults import KINDS
from loupe.testing.chaos.run import RECOVERY_BOUND, Options, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loupe.testing.chaos",
        description="Kill and pause Loupe's processes under a workload; check nothing is lost.",
    )
    parser.add_argument("--faults", type=int, default=30, help="faults to inject (default 30)")
    parser.add_argument(
        "--minutes", type=float, default=None, help="inject faults for this long instead"
    )
    parser.add_argument("--seed", type=int, default=None, help="reproduce a run")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"a subset of {','.join(KINDS)}")
    parser.add_argument(
        "--replicas-of",
        default="replica:",
        metavar="PREFIX",
        help="replica faults hit only targets starting so: replica:u (user), replica:s1",
    )
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument(
        "--min-gap", type=float, default=5.0, help="seconds between faults, at least"
    )
    parser.add_argument(
        "--max-gap", type=float, default=20.0, help="seconds between faults, at most"
    )
    parser.add_argument(
        "--ddl-pause",
        type=float,
        nargs=2,
        default=(0.2, 1.0),
        metavar=("MIN", "MAX"),
        help="seconds the DDL session rests between rounds of 3-5 statements",
    )
    parser.add_argument("--recovery-bound", type=float, default=RECOVERY_BOUND)
    parser.add_argument(
        "--kind-bound",
        action="append",
        default=[],
        metavar="KIND=SECONDS",
        help="hold one kind to another recovery bound (repeatable), e.g. spark-kill=240;"
        " a longer one is also the catalog relations' bound after that kind",
    )
    parser.add_argument(
        "--catalog-bound",
        type=float,
        default=CATALOG_BOUND,
        help="seconds the catalog relations may take to equal the catalog at a check",
    )
    parser.add_argument(
        "--serializability-rounds",
        type=int,
        default=2,
        help="strict serializability histories to check after the faults (0: none)",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the system's data here")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds: {sorted(unknown)}")
    kind_bounds: dict[str, float] = {}
    for entry in args.kind_bound:
        kind, _, seconds = entry.partition("=")
        if kind not in KINDS or not seconds:
            parser.error(f"--kind-bound wants KIND=SECONDS with a known kind, not {entry!r}")
        try:
            kind_bounds[kind] = float(seconds)
        except ValueError:
            parser.error(f"--kind-bound {entry!r}: {seconds!r} is not a number of seconds")
    options = Options(
        faults=args.faults,
        minutes=args.minutes,
        seed=args.seed,
        writers=args.writers,
        readers=args.readers,
        gap=(args.min_gap, args.max_gap),
        ddl_pause=tuple(args.ddl_pause),
        recovery_bound=args.recovery_bound,
        kind_bounds=kind_bounds,
        catalog_bound=args.catalog_bound,
        kinds=kinds,
        replicas_of=args.replicas_of,
        serializability_rounds=args.serializability_rounds,
        data_dir=args.data_dir,
    )
    report = run_chaos(options, say=lambda line: print(line, flush=True))
    print(report.render(), flush=True)
    if args.json:
        args.json.write_text(report.to_json())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
