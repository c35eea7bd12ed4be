"""``make soak``: steady mixed load on ``loupe up`` for a long time; memory and disk stay bounded.

The chaos workload (``loupe.testing.chaos.workload``) without faults, paced,
and in steady state: each writer deletes its oldest rows as fast as it adds
new ones, and the DDL session drops what it created two rounds back, so
the data Loupe must hold does not grow. Every ``--interval`` seconds the
resident memory (RSS) of every process below ``loupe up`` (per role:
catalog, controller, coordinator, nats, spark, replica:<id>) and the bytes
under each top-level directory of the data dir are sampled.

Written to ``--out`` (default ``bench/results/soak``): ``soak.csv`` (one row
per sample and series), ``soak.svg`` (both over time) and ``soak.txt`` (the
summary printed at the end). A series is bounded when its least-squares
growth over the second half of the run is at most ``max(10% of its mean
there, 16 MiB)``; the exit status is 1 when one is not, or when the
workload's final check (writes and views, ``chaos.checker``) finds anything.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loupe.testing.chaos.checker import Checker
from loupe.testing.chaos.workload import Workload
from loupe.testing.postgres import postgres_database
from loupe.testing.procs import Tracker, disk_bytes, rss_bytes
from loupe.testing.system import LoupeUp

LOUPE_ROLES = ("catalog", "controller", "coordinator", "nats", "spark")
MIB = 1024 * 1024
GROWTH_FRACTION = 0.10
GROWTH_FLOOR = 16 * MIB


@dataclass
class Sample:
    seconds: float  # since the workload started
    kind: str  # "rss" or "disk"
    series: str  # a process role, or a data dir entry
    value: int  # bytes


def sample(tracker: Tracker, data_dir: Path, seconds: float) -> list[Sample]:
    rss: dict[str, int] = defaultdict(int)
    for proc in tracker.snapshot():
        if proc.role in LOUPE_ROLES or proc.role.startswith("replica:"):
            rss[proc.role] += rss_bytes(proc.pid) or 0  # not Spark's passing `chmod`s
    samples = [Sample(seconds, "rss", role, value) for role, value in sorted(rss.items())]
    for entry in sorted(data_dir.iterdir()):
        if entry.is_dir():
            samples.append(Sample(seconds, "disk", entry.name, disk_bytes(entry)))
    return samples


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


@dataclass
class Verdict:
    kind: str
    series: str
    first: int
    last: int
    peak: int
    growth: float  # bytes over the second half, by the fitted slope
    allowed: float

    @property
    def bounded(self) -> bool:
        return self.growth <= self.allowed

    def line(self) -> str:
        return (
            f"  {self.kind:<5}{self.series:<22}{self.first / MIB:>9.1f}{self.last / MIB:>9.1f}"
            f"{self.peak / MIB:>9.1f}{self.growth / MIB:>+10.1f}{self.allowed / MIB:>9.1f}"
            f"  {'bounded' if self.bounded else 'GROWING'}"
        )


def verdicts(samples: list[Sample]) -> list[Verdict]:
    series: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for s in samples:
        series[(s.kind, s.series)].append((s.seconds, s.value))
    end = max((s.seconds for s in samples), default=0.0)
    found = []
    for (kind, name), points in sorted(series.items()):
        second_half = [(x, float(y)) for x, y in points if x >= end / 2]
        span = (second_half[-1][0] - second_half[0][0]) if second_half else 0.0
        mean = sum(y for _, y in second_half) / len(second_half) if second_half else 0.0
        found.append(
            Verdict(
                kind,
                name,
                first=points[0][1],
                last=points[-1][1],
                peak=max(y for _, y in points),
                growth=slope(second_half) * span,
                allowed=max(GROWTH_FRACTION * mean, GROWTH_FLOOR),
            )
        )
    return found


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def svg(samples: list[Sample], title: str) -> str:
    """Two panels, RSS and disk (MiB) over minutes, one polyline per series; no dependencies."""
    width, panel, margin = 900, 300, 60
    height = 2 * panel + 3 * margin
    end = max((s.seconds for s in samples), default=1.0) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        ' font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
    ]
    for index, kind in enumerate(("rss", "disk")):
        top = margin + index * (panel + margin)
        chosen = [s for s in samples if s.kind == kind]
        peak = max((s.value for s in chosen), default=1) / MIB * 1.1 or 1.0
        left, right = margin, width - 200
        parts.append(
            f'<rect x="{left}" y="{top}" width="{right - left}" height="{panel}"'
            ' fill="none" stroke="#888"/>'
        )
        label = "resident memory per process (MiB)" if kind == "rss" else "data dir (MiB)"
        parts.append(f'<text x="{left}" y="{top - 6}">{label}</text>')
        for tick in range(5):
            y = top + panel - tick * panel / 4
            parts.append(
                f'<text x="{left - 4}" y="{y + 4}" text-anchor="end">{peak * tick / 4:.0f}</text>'
            )
            minutes = end / 60 * tick / 4
            x = left + (right - left) * tick / 4
            parts.append(
                f'<text x="{x}" y="{top + panel + 14}" text-anchor="middle">{minutes:.0f} min</text>'
            )
        names = sorted({s.series for s in chosen})
        for number, name in enumerate(names):
            colour = PALETTE[number % len(PALETTE)]
            points = " ".join(
                f"{left + (right - left) * s.seconds / end:.1f},"
                f"{top + panel - panel * (s.value / MIB) / peak:.1f}"
                for s in chosen
                if s.series == name
            )
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
            y = top + 12 + number * 14
            parts.append(
                f'<rect x="{right + 10}" y="{y - 8}" width="10" height="10" fill="{colour}"/>'
            )
            parts.append(f'<text x="{right + 24}" y="{y + 1}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def write_outputs(out: Path, samples: list[Sample], summary: str, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "soak.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["seconds", "kind", "series", "bytes"])
        for s in samples:
            writer.writerow([f"{s.seconds:.1f}", s.kind, s.series, s.value])
    (out / "soak.svg").write_text(svg(samples, title))
    (out / "soak.txt").write_text(summary + "\n")


def run_soak(
    minutes: float,
    interval: float,
    out: Path,
    *,
    writers: int = 2,
    readers: int = 2,
    pace: float = 0.05,
    keep: int = 500,
    say: Callable[[str], None] = print,
) -> bool:
    with tempfile.TemporaryDirectory(prefix="loupe-soak-") as scratch:
        data_dir = Path(scratch) / "data"
        system = LoupeUp(data_dir)
        system.start()
        assert system.process is not None
        tracker = Tracker(system.process.pid)
        samples: list[Sample] = []
        findings: list[str] = []
        try:
            workload = Workload(
                system.sql_port, writers=writers, readers=readers, pace=pace, keep=keep
            )
            workload.setup()
            workload.start()
            began = time.monotonic()
            end = began + minutes * 60
            next_report = began
            while time.monotonic() < end:
                samples += sample(tracker, data_dir, time.monotonic() - began)
                if time.monotonic() >= next_report:
                    say(_progress(samples, workload))
                    next_report += 60
                time.sleep(max(0.0, min(interval, end - time.monotonic())))
            samples += sample(tracker, data_dir, time.monotonic() - began)
            workload.stop()
            with postgres_database() as postgres_url:
                checker = Checker(system.sql_port, postgres_url)
                findings = checker.data(workload.ledger)
            counts = workload.ledger.counts
        finally:
            system.stop()
    found = verdicts(samples)
    summary = "\n".join(
        [
            f"soak: {minutes:g} min, a sample every {interval:g}s; {counts['insert_acked']} inserts"
            f" ({counts['rows_acked']} rows), {counts['delete_acked']} deletes,"
            f" {counts['ddl_acked']} DDL, {counts['read_ok']} reads acknowledged;"
            f" {counts['insert_maybe'] + counts['read_failed']} failed",
            f"  {'kind':<5}{'series':<22}{'first':>9}{'last':>9}{'peak':>9}{'growth':>10}"
            f"{'allowed':>9}   (MiB; growth = fitted over the second half)",
            *(verdict.line() for verdict in found),
            f"final check: {'; '.join(findings) if findings else 'writes and views correct'}",
        ]
    )
    write_outputs(out, samples, summary, f"Loupe soak, {minutes:g} min of steady mixed load")
    say(summary)
    say(f"written: {out / 'soak.csv'}, {out / 'soak.svg'}, {out / 'soak.txt'}")
    return all(v.bounded for v in found) and not findings


def _progress(samples: list[Sample], workload: Workload) -> str:
    latest = [s for s in samples if s.seconds == max(s.seconds for s in samples)]
    memory = ", ".join(f"{s.series} {s.value / MIB:.0f}" for s in latest if s.kind == "rss")
    disk = sum(s.value for s in latest if s.kind == "disk") / MIB
    rows = workload.ledger.counts["rows_acked"]
    return f"soak {latest[0].seconds / 60:5.1f} min: {rows} rows written; disk {disk:.0f} MiB; RSS MiB: {memory}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loupe.testing.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--out", type=Path, default=Path("bench/results/soak"))
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=2)
    args = parser.parse_args(argv)
    bounded = run_soak(
        args.minutes,
        args.interval,
        args.out,
        writers=args.writers,
        readers=args.readers,
        say=lambda line: print(line, flush=True),
    )
    return 0 if bounded else 1


if __name__ == "__main__":
    sys.exit(main())
