"""A dataflow's operator graph as the operators page draws it: the rows of its
queries (operators, channels, the LIR mapping) made into a laid-out graph
(``graph_layout``) and an inline SVG.

The SVG is built here, not in a template, so its geometry stays in one place;
every text in it goes through ``markupsafe.escape`` (an operator named
``<script>`` is text), and each box and edge has a ``<title>`` with the full
name and numbers (what a pointer's hover or a screen reader gets).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from loupe.console import format as fmt
from loupe.console.graph_layout import Layout, layout

BOX_WIDTH = 184.0
BOX_HEIGHT = 58.0
NAME_CHARS = 24  # a name longer than this is cut, with "…" (full name in <title>)
MARGIN = 12.0


@dataclass(frozen=True)
class LirNode:
    lir_id: int
    operator: str
    parent_lir_id: int | None
    nesting: int
    start: int  # operator ids start (inclusive) .. end (exclusive)
    end: int

    def contains(self, operator_id: int) -> bool:
        return self.start <= operator_id < self.end


@dataclass
class Operator:
    id: int
    name: str
    address: list[int]
    elapsed_ns: int | None
    records: int | None
    size: int | None
    lir_id: int | None = None
    selected: bool = False  # in the LIR node the page is about
    context: bool = False  # drawn only as the neighbour of a selected operator


@dataclass
class Channel:
    id: int
    source: int | None
    target: int | None
    type: str
    sent: int | None
    batches: int | None


@dataclass
class OperatorGraph:
    operators: list[Operator]  # drawn, in id order
    channels: list[Channel]  # drawn (both ends drawn)
    layout: Layout
    node: LirNode | None
    dataflow: Operator | None  # the dataflow's own operator (the scope), not drawn
    all_operators: list[Operator] = field(default_factory=list)  # but the dataflow's own

    def name_of(self, operator_id: int | None) -> str:
        found = next((o for o in self.all_operators if o.id == operator_id), None)
        return found.name if found else ""


def lir_nodes(rows: Iterable[Mapping[str, Any]]) -> list[LirNode]:
    return [
        LirNode(
            int(row["lir_id"]),
            str(row["operator"]),
            None if row["parent_lir_id"] is None else int(row["parent_lir_id"]),
            int(row["nesting"] or 0),
            int(row["operator_id_start"]),
            int(row["operator_id_end"]),
        )
        for row in rows
    ]


def address(value: Any) -> list[int]:
    """An operator's address: a list, or its text form as psycopg gets a ``uint8 list``
    (``{1,3}``)."""
    if value is None:
        return []
    if isinstance(value, str):
        inner = value.strip().strip("{}[]")
        return [int(part) for part in inner.split(",") if part.strip()]
    return [int(part) for part in value]


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def build(
    operator_rows: Iterable[Mapping[str, Any]],
    channel_rows: Iterable[Mapping[str, Any]],
    nodes: list[LirNode],
    node_id: int | None = None,
) -> OperatorGraph:
    """The graph to draw: every operator of the dataflow (but the dataflow's own), or,
    with ``node_id``, the node's operators and their direct neighbours as context."""
    operators: list[Operator] = []
    dataflow = None
    for row in operator_rows:
        operator = Operator(
            int(row["id"]),
            str(row["name"]),
            address(row["address"]),
            _int(row["elapsed_ns"]),
            _int(row["records"]),
            _int(row["size"]),
        )
        owner = next((n for n in nodes if n.contains(operator.id)), None)
        operator.lir_id = owner.lir_id if owner else None
        if len(operator.address) == 1:
            dataflow = operator
        else:
            operators.append(operator)
    operators.sort(key=lambda o: o.id)
    channels = [
        Channel(
            int(row["id"]),
            _int(row["from_operator_id"]),
            _int(row["to_operator_id"]),
            str(row["type"] or ""),
            _int(row["sent"]),
            _int(row["batch_sent"]),
        )
        for row in channel_rows
    ]
    channels.sort(key=lambda c: c.id)
    node = next((n for n in nodes if n.lir_id == node_id), None) if node_id is not None else None
    by_id = {o.id: o for o in operators}
    if node is not None:
        for operator in operators:
            operator.selected = node.contains(operator.id)
        chosen = {o.id for o in operators if o.selected}
        neighbours: set[int] = set()
        for channel in channels:
            if channel.source in chosen and channel.target in by_id:
                neighbours.add(channel.target)
            if channel.target in chosen and channel.source in by_id:
                neighbours.add(channel.source)
        for i in neighbours - chosen:
            by_id[i].context = True
        drawn = [o for o in operators if o.selected or o.context]
    else:
        drawn = operators
    drawn_ids = {o.id for o in drawn}
    edges = [c for c in channels if c.source in drawn_ids and c.target in drawn_ids]
    placed = layout(
        [o.id for o in drawn],
        [(c.source, c.target) for c in edges],
        {o.id: (BOX_WIDTH, BOX_HEIGHT) for o in drawn},
    )
    return OperatorGraph(drawn, edges, placed, node, dataflow, operators)


def short(name: str, limit: int = NAME_CHARS) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def operator_numbers(operator: Operator) -> str:
    parts = [fmt.duration(operator.elapsed_ns) if operator.elapsed_ns is not None else "—"]
    if operator.records is not None:
        parts.append(f"{fmt.number(operator.records)} rec")
    if operator.size is not None:
        parts.append(fmt.size(operator.size))
    return " · ".join(parts)


def operator_title(operator: Operator, node: LirNode | None) -> str:
    lines = [f"{operator.name} (operator {operator.id})"]
    if operator.lir_id is not None:
        lines.append(f"LIR node {operator.lir_id}")
    if node is not None:
        lines.append(
            "in the selected node" if operator.selected else "outside the selected node (neighbour)"
        )
    lines.append(
        "elapsed "
        + (fmt.duration(operator.elapsed_ns) if operator.elapsed_ns is not None else "none logged")
    )
    if operator.records is not None:
        lines.append(
            f"arrangement: {fmt.number(operator.records)} records, {fmt.size(operator.size)}"
        )
    return "\n".join(lines)


def edge_width(sent: int | None, most: int) -> float:
    """1 px for nothing sent, up to 6 px for the busiest channel (log scale)."""
    if not sent or most <= 0:
        return 1.0
    return round(1.0 + 5.0 * math.log1p(sent) / math.log1p(most), 2)


def _path(points: tuple[tuple[float, float], ...]) -> str:
    """Straight from box to box, with vertical curves through the rows' gaps."""
    x0, y0 = points[0]
    parts = [f"M{x0 + MARGIN:.1f},{y0 + MARGIN:.1f}"]
    for (x1, y1), (x2, y2) in itertools.pairwise(points):
        if abs(y2 - y1) < 1e-6 or abs(x2 - x1) < 1e-6:
            parts.append(f"L{x2 + MARGIN:.1f},{y2 + MARGIN:.1f}")
        else:
            middle = (y1 + y2) / 2 + MARGIN
            parts.append(
                f"C{x1 + MARGIN:.1f},{middle:.1f} {x2 + MARGIN:.1f},{middle:.1f} "
                f"{x2 + MARGIN:.1f},{y2 + MARGIN:.1f}"
            )
    return " ".join(parts)


def svg(graph: OperatorGraph, label: str) -> Markup:
    """The graph as an inline ``<svg>`` at its natural size (1 unit = 1 CSS px)."""
    placed = graph.layout
    width = math.ceil(placed.width + 2 * MARGIN)
    height = math.ceil(placed.height + 2 * MARGIN)
    most = max((c.sent or 0 for c in graph.channels), default=0)
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="operator-graph" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{escape(label)}">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" '
        'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" '
        'orient="auto-start-reverse">'
        '<path d="M0,0 L8,4 L0,8 z" class="arrow"/></marker></defs>',
        '<g class="edges">',
    ]
    routes = {(r.source, r.target): r for r in placed.routes}
    for channel in graph.channels:
        route = routes.get((channel.source, channel.target))
        if route is None:
            continue
        sent = (
            "no messages logged" if channel.sent is None else f"{fmt.number(channel.sent)} messages"
        )
        batches = "" if channel.batches is None else f" in {fmt.number(channel.batches)} batches"
        title = (
            f"channel {channel.id}: operator {channel.source} → {channel.target}, "
            f"{channel.type}, {sent}{batches}"
            + (" (feedback: drawn upwards)" if route.reversed else "")
        )
        classes = ["edge", f"edge-{channel.type}" if channel.type else "edge"]
        if route.reversed:
            classes.append("edge-feedback")
        if route.self_loop:
            d = (
                f"M{route.points[0][0] + MARGIN:.1f},{route.points[0][1] + MARGIN:.1f} "
                f"Q{route.points[1][0] + MARGIN + 10:.1f},{route.points[1][1] + MARGIN:.1f} "
                f"{route.points[2][0] + MARGIN:.1f},{route.points[2][1] + MARGIN:.1f}"
            )
        else:
            d = _path(route.points)
        out.append(
            f'<g class="{" ".join(classes)}" data-channel-id="{channel.id}">'
            f"<title>{escape(title)}</title>"
            f'<path d="{d}" stroke-width="{edge_width(channel.sent, most)}" '
            f'marker-end="url(#arrow)"/>'
        )
        if channel.sent is not None and not route.self_loop:
            # The count sits halfway along the edge's last stretch, right of it.
            (x1, y1), (x2, y2) = route.points[-2], route.points[-1]
            x, y = (x1 + x2) / 2 + MARGIN + 5, (y1 + y2) / 2 + MARGIN + 4
            out.append(
                f'<text class="edge-label" x="{x:.1f}" y="{y:.1f}">'
                f"{escape(fmt.number(channel.sent))}</text>"
            )
        out.append("</g>")
    out.append('</g><g class="operators">')
    for operator in graph.operators:
        box = placed.boxes[operator.id]
        x, y = box.x + MARGIN, box.y + MARGIN
        classes = ["op"]
        marker = ""
        if graph.node is not None:
            if operator.selected:
                classes.append("op-selected")
                marker = "▶ "
            else:
                classes.append("op-context")
                marker = "◌ "
        if operator.records:
            classes.append("op-arranged")
        lir = f" · node {operator.lir_id}" if operator.lir_id is not None else ""
        out.append(
            f'<g class="{" ".join(classes)}" data-operator-id="{operator.id}">'
            f"<title>{escape(operator_title(operator, graph.node))}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{box.width:.0f}" height="{box.height:.0f}" '
            f'rx="5"/>'
            f'<text class="op-name" x="{x + 8:.1f}" y="{y + 17:.1f}">'
            f"{escape(marker + short(operator.name, NAME_CHARS - len(marker)))}</text>"
            f'<text class="op-id" x="{x + 8:.1f}" y="{y + 33:.1f}">'
            f"{escape(f'#{operator.id}{lir}')}</text>"
            f'<text class="op-numbers" x="{x + 8:.1f}" y="{y + 49:.1f}">'
            f"{escape(operator_numbers(operator))}</text>"
            "</g>"
        )
    out.append("</g></svg>")
    return Markup("".join(out))
