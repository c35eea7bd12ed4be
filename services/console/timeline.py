"""A replica's timeline as inline SVG drawn on the server: CPU and memory over a time
window, with its status changes (crashes, new incarnations, drops) marked on it.

Pure geometry, no I/O: ``build_timeline`` turns the rows the Clusters page read
(metrics buckets and status events) into a ``Timeline`` the template draws, and the
words that say the same without the picture (``summary``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loupe.console import format as fmt

# The drawing's coordinate system (the SVG's viewBox); it scales to the page width.
WIDTH = 640.0
HEIGHT = 218.0
LEFT = 64.0
RIGHT = 10.0
LABEL_ROWS = (11.0, 23.0, 35.0)
CPU_BAND = (44.0, 106.0)  # top, bottom
MEMORY_BAND = (124.0, 188.0)
AXIS_Y = 208.0
CHAR_WIDTH = 6.0  # of the 10px label font, for placing labels apart


def scale(value: float, lo: float, hi: float, out_lo: float, out_hi: float) -> float:
    """``value`` from [lo, hi] mapped linearly onto [out_lo, out_hi], clamped."""
    if hi <= lo:
        return out_lo
    share = (value - lo) / (hi - lo)
    share = min(1.0, max(0.0, share))
    return out_lo + share * (out_hi - out_lo)


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times 10**n not below ``value`` (an axis's top); 1 for 0."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 5.0, 10.0):
        candidate = step * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)  # pragma: no cover (10 times 10**n always fits)


def cores(nano_cores: float) -> str:
    """CPU in cores ('0.32 cores', '1.5 cores')."""
    value = nano_cores / 1e9
    if value == 0:
        return "0 cores"
    if value < 0.01:
        return f"{value:.3f} cores"
    return f"{value:.2f} cores" if value < 10 else f"{value:.1f} cores"


@dataclass(frozen=True)
class Sample:
    """One time bucket's peak CPU (nano cores) and memory (bytes) of a replica."""

    at: datetime.datetime
    cpu: float
    memory: float


@dataclass(frozen=True)
class StatusEvent:
    at: datetime.datetime
    status: str
    reason: str | None
    incarnation: int | None
    process_id: str = "0"


@dataclass(frozen=True)
class Marker:
    """A status change drawn as a vertical line with a label (and a ``<title>``)."""

    x: float
    kind: str  # "crash" | "incarnation" | "online" | "dropped"
    label: str
    title: str
    label_y: float
    label_anchor: str  # "start" or "end" (near the right edge)


@dataclass
class Timeline:
    start: datetime.datetime
    end: datetime.datetime
    cpu_segments: list[str] = field(default_factory=list)  # SVG polyline points
    memory_segments: list[str] = field(default_factory=list)
    cpu_top: float = 1e9
    memory_top: float = 1.0
    peak_cpu: float | None = None
    peak_memory: float | None = None
    markers: list[Marker] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    crashes: list[StatusEvent] = field(default_factory=list)
    events: list[StatusEvent] = field(default_factory=list)
    last_status: StatusEvent | None = None

    # Geometry the template uses.
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    cpu_band: tuple[float, float] = CPU_BAND
    memory_band: tuple[float, float] = MEMORY_BAND
    axis_y: float = AXIS_Y

    @property
    def has_metrics(self) -> bool:
        return self.peak_cpu is not None

    @property
    def cpu_top_label(self) -> str:
        return cores(self.cpu_top)

    @property
    def memory_top_label(self) -> str:
        return fmt.size(self.memory_top)

    def summary(self) -> str:
        """The chart in words (its text alternative)."""
        parts = []
        if self.has_metrics:
            parts.append(
                f"Peak CPU {cores(self.peak_cpu or 0)}, peak memory {fmt.size(self.peak_memory)}"
            )
        else:
            parts.append("No metrics in this window")
        if self.crashes:
            listed = ", ".join(
                f"{event.reason or event.status} at {clock(event.at)}" for event in self.crashes
            )
            count = len(self.crashes)
            parts.append(f"{count} crash{'es' if count != 1 else ''} ({listed})")
        else:
            parts.append("no crash")
        if self.last_status is not None:
            last = self.last_status
            status = last.status + (f" ({last.reason})" if last.reason else "")
            incarnation = f", incarnation {last.incarnation}" if last.incarnation else ""
            parts.append(f"last status {status}{incarnation} since {clock(last.at)}")
        return "; ".join(parts) + "."


def clock(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%H:%M:%S")


def _x(at: datetime.datetime, start: datetime.datetime, end: datetime.datetime) -> float:
    total = (end - start).total_seconds()
    offset = (at - start).total_seconds()
    return round(scale(offset, 0.0, total, LEFT, WIDTH - RIGHT), 1)


def _segments(
    samples: Sequence[Sample],
    value: str,
    top: float,
    band: tuple[float, float],
    start: datetime.datetime,
    end: datetime.datetime,
    gap: datetime.timedelta,
) -> list[str]:
    """Polylines of one series, broken where no sample came for longer than ``gap``
    (the replica was down): a line never bridges an outage."""
    segments: list[list[str]] = []
    previous: Sample | None = None
    for sample in samples:
        if previous is None or sample.at - previous.at > gap:
            segments.append([])
        y = round(scale(float(getattr(sample, value)), 0.0, top, band[1], band[0]), 1)
        segments[-1].append(f"{_x(sample.at, start, end)},{y}")
        previous = sample
    # A lone sample is drawn as a tiny horizontal stroke, so it is visible.
    out = []
    for points in segments:
        if len(points) == 1:
            lone_x, lone_y = points[0].split(",")
            points = [f"{float(lone_x) - 1.5:.1f},{lone_y}", f"{float(lone_x) + 1.5:.1f},{lone_y}"]
        out.append(" ".join(points))
    return out


def _ticks(
    start: datetime.datetime, end: datetime.datetime, count: int = 5
) -> list[tuple[float, str]]:
    span = end - start
    seconds = span.total_seconds() <= 3600
    ticks = []
    for i in range(count):
        at = start + span * (i / (count - 1))
        label = at.astimezone(datetime.UTC).strftime("%H:%M:%S" if seconds else "%H:%M")
        ticks.append((_x(at, start, end), label))
    return ticks


PRIORITY = {"crash": 0, "dropped": 1, "incarnation": 2, "online": 3}


def _place_labels(
    wanted: list[tuple[float, str, str, str]],
) -> list[Marker]:
    """Markers with their labels spread over the label rows so they do not overlap:
    crashes are placed first, then drops, new incarnations, returns online, each in
    the first row free where it goes. A label with no room left is left out (its
    line and ``<title>`` stay), except a crash's, which overlaps rather than hides."""
    rows: list[list[tuple[float, float]]] = [[] for _ in LABEL_ROWS]
    placed: list[tuple[int, Marker]] = []
    order = sorted(range(len(wanted)), key=lambda i: (PRIORITY.get(wanted[i][1], 9), i))
    for index in order:
        x, kind, label, title = wanted[index]
        width = CHAR_WIDTH * len(label) + 4
        anchor = "end" if x + width > WIDTH - RIGHT else "start"
        left = x - width if anchor == "end" else x
        right = left + width
        free = [
            row for row, spans in enumerate(rows) if all(right <= a or left >= b for a, b in spans)
        ]
        if free:
            row = free[0]
        elif kind == "crash":
            row = min(range(len(rows)), key=lambda r: len(rows[r]))
        else:
            placed.append((index, Marker(x, kind, "", title, LABEL_ROWS[-1], anchor)))
            continue
        rows[row].append((left, right))
        placed.append((index, Marker(x, kind, label, title, LABEL_ROWS[row], anchor)))
    return [marker for _, marker in sorted(placed, key=lambda pair: pair[0])]


def status_markers(
    events: Sequence[StatusEvent],
    start: datetime.datetime,
    end: datetime.datetime,
    dropped_at: datetime.datetime | None = None,
) -> list[Marker]:
    """A marker for each crash (status not online), each new incarnation, a return
    online within an incarnation, and the drop."""
    wanted: list[tuple[float, str, str, str]] = []
    incarnations: dict[str, int | None] = {}
    for event in sorted(events, key=lambda e: e.at):
        if event.at < start or event.at > end:
            continue
        x = _x(event.at, start, end)
        when = fmt.timestamp(event.at)
        process = f" (process {event.process_id})" if event.process_id not in ("0", "") else ""
        if event.status != "online":
            what = event.reason or event.status
            title = f"{event.status}{f' ({event.reason})' if event.reason else ''} at {when}"
            if event.incarnation is not None:
                title += f", incarnation {event.incarnation}"
            wanted.append((x, "crash", f"✕ {what}", title + process))
        else:
            seen = incarnations.get(event.process_id, "unseen")
            if seen != event.incarnation:
                verb = "started" if seen == "unseen" else "restarted"
                label = f"↻ incarnation {event.incarnation}"
                title = f"online, {verb} as incarnation {event.incarnation} at {when}"
                wanted.append((x, "incarnation", label, title + process))
            else:
                wanted.append((x, "online", "● online", f"online again at {when}{process}"))
        incarnations[event.process_id] = event.incarnation
    if dropped_at is not None and start <= dropped_at <= end:
        when = fmt.timestamp(dropped_at)
        wanted.append((_x(dropped_at, start, end), "dropped", "⊘ dropped", f"dropped at {when}"))
    return _place_labels(wanted)


def build_timeline(
    samples: Iterable[Sample],
    events: Iterable[StatusEvent],
    start: datetime.datetime,
    end: datetime.datetime,
    bucket: datetime.timedelta,
    dropped_at: datetime.datetime | None = None,
    last_status: StatusEvent | None = None,
) -> Timeline:
    """The timeline of one replica between ``start`` and ``end``; ``samples`` are its
    buckets of ``bucket`` length (any order), ``events`` its status changes."""
    ordered = sorted((s for s in samples if start - bucket <= s.at <= end), key=lambda s: s.at)
    events = sorted(events, key=lambda e: e.at)
    timeline = Timeline(start=start, end=end, events=list(events))
    timeline.crashes = [e for e in events if e.status != "online"]
    timeline.last_status = last_status or (events[-1] if events else None)
    if ordered:
        timeline.peak_cpu = max(s.cpu for s in ordered)
        timeline.peak_memory = max(s.memory for s in ordered)
        timeline.cpu_top = nice_ceiling(max(timeline.peak_cpu, 1e7) / 1e9) * 1e9
        timeline.memory_top = nice_ceiling(max(timeline.peak_memory, 1024 * 1024))
        gap = max(bucket * 2.5, datetime.timedelta(seconds=25))
        timeline.cpu_segments = _segments(
            ordered, "cpu", timeline.cpu_top, CPU_BAND, start, end, gap
        )
        timeline.memory_segments = _segments(
            ordered, "memory", timeline.memory_top, MEMORY_BAND, start, end, gap
        )
    timeline.markers = status_markers(events, start, end, dropped_at)
    timeline.ticks = _ticks(start, end)
    return timeline


def samples_by_replica(rows: Iterable[dict[str, Any]]) -> dict[str, list[Sample]]:
    """Metrics buckets (rows with replica_id, process_id, bucket, cpu, memory) as each
    replica's samples: a replica's processes are summed per bucket."""
    summed: dict[str, dict[datetime.datetime, list[float]]] = {}
    for row in rows:
        bucket = summed.setdefault(row["replica_id"], {}).setdefault(row["bucket"], [0.0, 0.0])
        bucket[0] += float(row["cpu_nano_cores"] or 0)
        bucket[1] += float(row["memory_bytes"] or 0)
    return {
        replica: [Sample(at, cpu, memory) for at, (cpu, memory) in sorted(buckets.items())]
        for replica, buckets in summed.items()
    }


def events_by_replica(rows: Iterable[dict[str, Any]]) -> dict[str, list[StatusEvent]]:
    out: dict[str, list[StatusEvent]] = {}
    for row in rows:
        out.setdefault(row["replica_id"], []).append(event_of(row))
    return out


def event_of(row: dict[str, Any]) -> StatusEvent:
    incarnation = row.get("incarnation")
    return StatusEvent(
        at=row["occurred_at"],
        status=row["status"],
        reason=row.get("reason") or None,
        incarnation=int(incarnation) if incarnation is not None else None,
        process_id=str(row.get("process_id") if row.get("process_id") is not None else "0"),
    )
