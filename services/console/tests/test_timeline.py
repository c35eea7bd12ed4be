"""The replica timeline's geometry: scaling, broken lines at outages, markers whose
labels do not overlap, and the words that say the same as the picture."""

from __future__ import annotations

import datetime

import pytest

from loupe.console import timeline as tl
from loupe.console.timeline import Sample, StatusEvent, build_timeline

T0 = datetime.datetime(2026, 11, 26, 17, 0, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)
BUCKET = datetime.timedelta(seconds=30)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_scale_maps_linearly_and_clamps() -> None:
    assert tl.scale(5, 0, 10, 100, 200) == 150
    assert tl.scale(0, 0, 10, 100, 200) == 100
    assert tl.scale(-3, 0, 10, 100, 200) == 100
    assert tl.scale(30, 0, 10, 100, 200) == 200
    # An inverted output range (SVG's y grows downwards).
    assert tl.scale(10, 0, 10, 96, 34) == 34
    # A degenerate input range maps to the start, never divides by zero.
    assert tl.scale(7, 3, 3, 10, 20) == 10


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (1, 1), (1.2, 2), (2, 2), (2.1, 5), (7, 10), (0.03, 0.05), (276e6, 500e6), (1.001, 2)],
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert tl.nice_ceiling(value) == pytest.approx(ceiling)


def test_cores() -> None:
    assert tl.cores(0) == "0 cores"
    assert tl.cores(318_185_654) == "0.32 cores"
    assert tl.cores(4_000_000) == "0.004 cores"
    assert tl.cores(12e9) == "12.0 cores"


def points(segment: str) -> list[tuple[float, float]]:
    return [tuple(map(float, point.split(","))) for point in segment.split()]  # type: ignore[misc]


def test_lines_stay_inside_their_bands_and_break_at_an_outage() -> None:
    samples = [Sample(at(s), cpu=2e8 + s * 1e5, memory=1e8) for s in range(0, 600, 30)]
    # Down from 600 s to 900 s: no samples; then back.
    samples += [Sample(at(s), cpu=5e8, memory=3e8) for s in range(900, 1200, 30)]
    t = build_timeline(samples, [], T0, T0 + HOUR, BUCKET)
    assert len(t.cpu_segments) == len(t.memory_segments) == 2
    for segment in t.cpu_segments:
        for x, y in points(segment):
            assert tl.LEFT <= x <= tl.WIDTH - tl.RIGHT
            assert tl.CPU_BAND[0] <= y <= tl.CPU_BAND[1]
    for segment in t.memory_segments:
        for _, y in points(segment):
            assert tl.MEMORY_BAND[0] <= y <= tl.MEMORY_BAND[1]
    assert t.peak_cpu == 5e8
    assert t.peak_memory == 3e8
    # x is proportional to time: 0 s at the left edge, 30 min in the middle.
    first = points(t.cpu_segments[0])[0]
    assert first[0] == tl.LEFT
    assert t.ticks[2][0] == pytest.approx((tl.LEFT + tl.WIDTH - tl.RIGHT) / 2, abs=0.1)
    # The top of the axis is a round number above the peak.
    assert t.cpu_top == pytest.approx(5e8)
    assert t.cpu_top_label == "0.50 cores"


def test_a_lone_sample_is_still_drawn() -> None:
    t = build_timeline([Sample(at(100), 1e8, 1e8)], [], T0, T0 + HOUR, BUCKET)
    (segment,) = t.cpu_segments
    assert len(points(segment)) == 2


def test_crashes_incarnations_and_the_drop_are_marked() -> None:
    events = [
        StatusEvent(at(60), "online", None, 1),
        StatusEvent(at(1200), "offline", "oom-killed", 1),
        StatusEvent(at(1205), "online", None, 2),
        StatusEvent(at(2000), "offline", "exited", 2),
        StatusEvent(at(2400), "online", None, 2),
    ]
    t = build_timeline([], events, T0, T0 + HOUR, BUCKET, dropped_at=at(3000))
    kinds = [m.kind for m in t.markers]
    assert kinds == ["incarnation", "crash", "incarnation", "crash", "online", "dropped"]
    crash = t.markers[1]
    assert crash.label == "✕ oom-killed"
    assert "offline (oom-killed) at 2026-11-26 17:20:00 UTC" in crash.title
    assert "incarnation 1" in crash.title
    assert "restarted as incarnation 2" in t.markers[2].title
    assert t.markers[-1].label == "⊘ dropped"
    assert not t.has_metrics
    summary = t.summary()
    assert "No metrics in this window" in summary
    assert "2 crashes (oom-killed at 17:20:00, exited at 17:33:20)" in summary
    assert "last status online, incarnation 2 since 17:40:00" in summary


def test_events_outside_the_window_are_not_drawn() -> None:
    events = [StatusEvent(at(-60), "offline", "killed", 1), StatusEvent(at(30), "online", None, 2)]
    t = build_timeline([], events, T0, T0 + HOUR, BUCKET)
    assert [m.kind for m in t.markers] == ["incarnation"]


def overlaps(markers: list[tl.Marker]) -> list[tuple[str, str]]:
    spans = []
    for m in markers:
        if not m.label:
            continue
        width = tl.CHAR_WIDTH * len(m.label) + 4
        left = m.x - width if m.label_anchor == "end" else m.x
        spans.append((m.label_y, left, left + width, m.label))
    found = []
    for i, (y, a, b, label) in enumerate(spans):
        for y2, a2, b2, label2 in spans[i + 1 :]:
            if y == y2 and a < b2 and a2 < b:
                found.append((label, label2))
    return found


def test_labels_do_not_overlap_and_crashes_keep_theirs() -> None:
    # Five changes within 20 s near the right edge, where labels must go left.
    events = [
        StatusEvent(at(3560), "online", None, 1),
        StatusEvent(at(3565), "offline", "killed", 1),
        StatusEvent(at(3570), "online", None, 2),
        StatusEvent(at(3575), "offline", "exited", 2),
        StatusEvent(at(3580), "online", None, 3),
    ]
    t = build_timeline([], events, T0, T0 + HOUR, BUCKET)
    assert not overlaps(t.markers)
    crashes = [m for m in t.markers if m.kind == "crash"]
    assert [m.label for m in crashes] == ["✕ killed", "✕ exited"]
    # Near the right edge a label is drawn leftwards, inside the picture.
    assert all(m.label_anchor == "end" for m in t.markers if m.label)
    # Every marker keeps its title (the text alternative), labelled or not.
    assert all(m.title for m in t.markers)
    assert len(t.markers) == 5


def test_processes_are_summed_per_bucket() -> None:
    rows = [
        {
            "replica_id": "u1",
            "process_id": "0",
            "bucket": at(0),
            "cpu_nano_cores": "100",
            "memory_bytes": "10",
        },
        {
            "replica_id": "u1",
            "process_id": "1",
            "bucket": at(0),
            "cpu_nano_cores": "50",
            "memory_bytes": "5",
        },
        {
            "replica_id": "u1",
            "process_id": "0",
            "bucket": at(30),
            "cpu_nano_cores": "7",
            "memory_bytes": None,
        },
        {
            "replica_id": "u2",
            "process_id": "0",
            "bucket": at(0),
            "cpu_nano_cores": "1",
            "memory_bytes": "1",
        },
    ]
    samples = tl.samples_by_replica(rows)
    assert samples["u1"] == [Sample(at(0), 150, 15), Sample(at(30), 7, 0)]
    assert samples["u2"] == [Sample(at(0), 1, 1)]


def test_status_rows_become_events() -> None:
    rows = [
        {
            "replica_id": "u1",
            "process_id": "0",
            "status": "offline",
            "reason": "killed",
            "incarnation": "3",
            "occurred_at": at(5),
        },
        {
            "replica_id": "u1",
            "process_id": None,
            "status": "online",
            "reason": "",
            "incarnation": None,
            "occurred_at": at(9),
        },
    ]
    events = tl.events_by_replica(rows)["u1"]
    assert events[0] == StatusEvent(at(5), "offline", "killed", 3, "0")
    assert events[1] == StatusEvent(at(9), "online", None, None, "0")
