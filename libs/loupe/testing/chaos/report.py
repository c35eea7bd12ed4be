"""The chaos run's report: faults, writes, what was lost, recovery percentiles per kind."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from loupe.testing.chaos.faults import KINDS, Fault


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class Report:
    seed: int
    recovery_bound: float
    kind_bounds: dict[str, float] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    error_examples: dict[str, str] = field(default_factory=dict)
    lost: list[int] = field(default_factory=list)  # acknowledged rows missing, per check
    checks: int = 0
    catalog_lags: list[float] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # not tied to one fault
    seconds: float = 0.0

    @property
    def all_findings(self) -> list[str]:
        tied = [f"after {f.kind} of {f.target}: {text}" for f in self.faults for text in f.findings]
        return tied + self.findings

    @property
    def ok(self) -> bool:
        return not self.all_findings and not any(self.lost)

    def recovery(self) -> dict[str, dict[str, Any]]:
        """Per fault kind: count and p50/p95/max seconds to query and to write again."""
        table: dict[str, dict[str, Any]] = {}
        for kind in KINDS:
            faults = [f for f in self.faults if f.kind == kind]
            if not faults:
                continue
            row: dict[str, Any] = {"faults": len(faults)}
            for what in ("query", "write"):
                times = [t for f in faults if (t := getattr(f, f"{what}_seconds")) is not None]
                row[what] = (
                    {
                        "p50": round(percentile(times, 0.5), 2),
                        "p95": round(percentile(times, 0.95), 2),
                        "max": round(max(times), 2),
                    }
                    if times
                    else None
                )
                row[f"{what}_unrecovered"] = len(faults) - len(times)
            table[kind] = row
        return table

    def render(self) -> str:
        counts = self.counts
        lines = [
            f"chaos run: seed {self.seed}, {self.seconds:.0f}s, {len(self.faults)} faults injected"
            f" ({', '.join(f'{k} {n}' for k, n in sorted(Counter(f.kind for f in self.faults).items()))})",
            f"writes acknowledged: {counts['insert_acked']} inserts ({counts['rows_acked']} rows),"
            f" {counts['delete_acked']} deletes, {counts['ddl_acked']} DDL statements;"
            f" unknown outcome: {counts['insert_maybe']} inserts, {counts['delete_maybe']} deletes,"
            f" {counts['ddl_maybe']} DDL; refused: {counts['insert_failed'] + counts['delete_failed']}"
            f" writes, {counts['ddl_failed']} DDL",
            f"reads: {counts['read_ok']} answered, {counts['read_failed']} failed",
            f"checks: {self.checks}; acknowledged rows lost: {max(self.lost, default=0)}"
            f" (at the last check: {self.lost[-1] if self.lost else 0})",
        ]
        if self.catalog_lags:
            lines.append(
                f"catalog relations equal to SHOW after: p50 {percentile(self.catalog_lags, 0.5):.1f}s,"
                f" max {max(self.catalog_lags):.1f}s"
            )
        others = "".join(f", {k} {b:.0f}s" for k, b in sorted(self.kind_bounds.items()))
        lines.append(
            f"recovery (seconds from the signal; bound {self.recovery_bound:.0f}s{others}):"
        )
        lines.append(
            f"  {'fault':<18}{'n':>3}  {'query p50/p95/max':>22}  {'write p50/p95/max':>22}"
        )
        for kind, row in self.recovery().items():
            cells = []
            for what in ("query", "write"):
                stats = row[what]
                cell = f"{stats['p50']:.1f}/{stats['p95']:.1f}/{stats['max']:.1f}" if stats else "-"
                if row[f"{what}_unrecovered"]:
                    cell += f" ({row[f'{what}_unrecovered']} never)"
                cells.append(cell)
            lines.append(f"  {kind:<18}{row['faults']:>3}  {cells[0]:>22}  {cells[1]:>22}")
        if self.errors:
            lines.append(
                "client errors seen: " + ", ".join(f"{k} {n}" for k, n in self.errors.most_common())
            )
            lines += [f"  {code}: {text}" for code, text in sorted(self.error_examples.items())]
        findings = self.all_findings
        lines.append(f"findings: {len(findings)}" + ("" if findings else " (all checks passed)"))
        lines += [f"  - {text}" for text in findings]
        return "\n".join(lines)

    def to_json(self) -> str:
        data = asdict(self)
        # asdict rebuilds a Counter from (key, value) pairs, counting the pairs: plain dicts.
        data["counts"], data["errors"] = dict(self.counts), dict(self.errors)
        data["recovery"] = self.recovery()
        data["ok"] = self.ok
        return json.dumps(data, indent=2, default=str)
