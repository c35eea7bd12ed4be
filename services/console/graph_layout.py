"""A small layered (Sugiyama-style) graph layout, top to bottom, in pure Python.

``layout(nodes, edges, sizes)`` places a directed graph's nodes in rows (layers) so
that edges point down, with few crossings:

1. **Cycle breaking**: a depth-first search in the nodes' given order reverses the
   edges that close a cycle (a dataflow's feedback edges); self-loops are left out
   of the layout and drawn as a small loop.
2. **Layering**: longest path from the sources, then every node is moved down as far
   as its successors allow (shorter edges, sources next to what they feed).
3. **Dummy nodes** split an edge spanning several layers, one per layer crossed, so
   its bends are placed like nodes.
4. **Crossing reduction**: barycenter sweeps down and up (a few rounds), keeping the
   order with the fewest crossings (counted exactly, per pair of layers).
5. **Coordinates**: each row's nodes go where the mean of their neighbours is, as
   close as possible under a minimum gap (isotonic regression, exact and linear),
   alternating down and up sweeps.

Everything is deterministic: ties keep the nodes' given order. 200 nodes take a few
milliseconds (``services/console/tests/test_graph_layout.py`` measures it).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Node = Hashable

NODE_GAP = 24.0  # horizontal space between two boxes of a row
LAYER_GAP = 56.0  # vertical space between two rows
DUMMY_WIDTH = 12.0  # the horizontal room of an edge passing through a row
SWEEPS = 6  # rounds of barycenter (down and up)
COORDINATE_SWEEPS = 8


@dataclass(frozen=True)
class Box:
    x: float  # left
    y: float  # top
    width: float
    height: float
    layer: int

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height


@dataclass(frozen=True)
class Route:
    """An edge as drawn: ``points`` from ``source``'s box to ``target``'s (its
    direction as given, also when the layout reversed it to break a cycle)."""

    source: Node
    target: Node
    points: tuple[tuple[float, float], ...]
    reversed: bool = False
    self_loop: bool = False


@dataclass
class Layout:
    boxes: dict[Node, Box] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    layers: int = 0
    crossings: int = 0  # of the final order, counted on the layered (acyclic) graph
    reversed_edges: int = 0


def layout(
    nodes: Sequence[Node],
    edges: Iterable[tuple[Node, Node]],
    sizes: Mapping[Node, tuple[float, float]] | None = None,
    *,
    default_size: tuple[float, float] = (160.0, 48.0),
    node_gap: float = NODE_GAP,
    layer_gap: float = LAYER_GAP,
) -> Layout:
    """Place ``nodes`` (in a deterministic order: ties keep it) and route ``edges``
    (pairs of nodes; unknown ends are ignored, duplicates drawn once). Nodes without
    any edge to another node go in rows below the graph, in their order."""
    sizes = sizes or {}
    if len(set(nodes)) != len(nodes):
        raise ValueError("duplicate nodes")
    edges = list(edges)
    known = set(nodes)
    linked = {end for s, t in edges if s != t and s in known and t in known for end in (s, t)}
    connected = [node for node in nodes if node in linked]
    isolated = [node for node in nodes if node not in linked]
    result = _layered(connected, edges, sizes, default_size, node_gap, layer_gap)
    if not isolated:
        return result
    # The isolated nodes: rows as wide as the graph (at least four boxes).
    limit = max(result.width, 4 * (default_size[0] + node_gap) - node_gap)
    y = result.height + layer_gap if connected else 0.0
    x = 0.0
    row_height = 0.0
    layer = result.layers
    for node in isolated:
        width, height = (float(v) for v in sizes.get(node, default_size))
        if x > 0 and x + width > limit:
            y += row_height + node_gap
            x, row_height = 0.0, 0.0
            layer += 1
        result.boxes[node] = Box(x, y, width, height, layer)
        x += width + node_gap
        row_height = max(row_height, height)
        result.width = max(result.width, x - node_gap)
    result.height = y + row_height
    result.layers = layer + 1
    result.routes.extend(
        Route(node, node, _loop_points(result.boxes[node]), self_loop=True)
        for node in isolated
        if (node, node) in set(edges)
    )
    return result


def _loop_points(box: Box) -> tuple[tuple[float, float], ...]:
    right_x = box.x + box.width
    return (
        (right_x, box.y + box.height * 0.3),
        (right_x + 14, box.y + box.height * 0.5),
        (right_x, box.y + box.height * 0.7),
    )


def _layered(
    nodes: Sequence[Node],
    edges: Iterable[tuple[Node, Node]],
    sizes: Mapping[Node, tuple[float, float]],
    default_size: tuple[float, float],
    node_gap: float,
    layer_gap: float,
) -> Layout:
    index = {node: i for i, node in enumerate(nodes)}
    # The distinct edges in a stable order; self-loops apart.
    seen: set[tuple[int, int]] = set()
    pairs: list[tuple[int, int]] = []
    loops: list[int] = []
    for source, target in edges:
        if source not in index or target not in index:
            continue
        pair = (index[source], index[target])
        if pair in seen:
            continue
        seen.add(pair)
        if pair[0] == pair[1]:
            loops.append(pair[0])
        else:
            pairs.append(pair)
    count = len(nodes)
    acyclic, reversed_pairs = break_cycles(count, pairs)
    layer_of = assign_layers(count, acyclic)

    # Split long edges with dummy nodes (ids from ``count`` on).
    layers_total = (max(layer_of) + 1) if layer_of else 0
    layer_of_all = list(layer_of)
    chains: dict[tuple[int, int], list[int]] = {}
    segments: list[tuple[int, int]] = []
    for source, target in acyclic:
        chain = [source]
        for layer in range(layer_of[source] + 1, layer_of[target]):
            layer_of_all.append(layer)
            chain.append(len(layer_of_all) - 1)
        chain.append(target)
        chains[(source, target)] = chain
        segments.extend(itertools.pairwise(chain))
    total = len(layer_of_all)
    up: list[list[int]] = [[] for _ in range(total)]
    down: list[list[int]] = [[] for _ in range(total)]
    for source, target in segments:
        down[source].append(target)
        up[target].append(source)

    rows = initial_order(total, layer_of_all, layers_total, down)
    rows, crossings = reduce_crossings(rows, up, down)

    widths = [
        float(sizes.get(nodes[i], default_size)[0]) if i < count else DUMMY_WIDTH
        for i in range(total)
    ]
    heights = [
        float(sizes.get(nodes[i], default_size)[1]) if i < count else 0.0 for i in range(count)
    ]
    xs = assign_x(rows, up, down, widths, node_gap)

    # Rows' tops: each row as tall as its tallest box.
    row_height = [max((heights[v] for v in row if v < count), default=0.0) for row in rows]
    tops = []
    y = 0.0
    for height in row_height:
        tops.append(y)
        y += height + layer_gap
    height_total = max(y - layer_gap, 0.0)
    left = min((xs[v] for v in range(total)), default=0.0)
    right = max((xs[v] + widths[v] for v in range(total)), default=0.0)

    result = Layout(
        layers=layers_total,
        crossings=crossings,
        reversed_edges=len(reversed_pairs),
        width=right - left,
        height=height_total,
    )
    for v in range(count):
        layer = layer_of_all[v]
        # Boxes of a row share its vertical centre.
        top = tops[layer] + (row_height[layer] - heights[v]) / 2
        result.boxes[nodes[v]] = Box(xs[v] - left, top, widths[v], heights[v], layer)

    def centre(v: int) -> float:
        return xs[v] - left + widths[v] / 2

    for source, target in pairs:
        flipped = (source, target) in reversed_pairs
        chain = chains[(target, source)] if flipped else chains[(source, target)]
        points: list[tuple[float, float]] = []
        first, last = chain[0], chain[-1]
        points.append((centre(first), result.boxes[nodes[first]].bottom))
        for dummy in chain[1:-1]:
            layer = layer_of_all[dummy]
            points.append((centre(dummy), tops[layer]))
            points.append((centre(dummy), tops[layer] + row_height[layer]))
        points.append((centre(last), result.boxes[nodes[last]].y))
        if flipped:
            points.reverse()
        result.routes.append(Route(nodes[source], nodes[target], tuple(points), reversed=flipped))
    for v in loops:
        box = result.boxes[nodes[v]]
        result.routes.append(Route(nodes[v], nodes[v], _loop_points(box), self_loop=True))
    if loops:
        result.width += 16
    return result


def break_cycles(count: int, pairs: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], set]:
    """The edges with every back edge of a depth-first search reversed (iterative, in
    the given order), and the set of the original pairs that were reversed. A reversed
    edge that duplicates an existing one is kept once."""
    successors: list[list[int]] = [[] for _ in range(count)]
    for source, target in pairs:
        successors[source].append(target)
    state = [0] * count  # 0 unvisited, 1 on the stack, 2 done
    back: set[tuple[int, int]] = set()
    # Start from the sources first, so a cycle's entry is where it is entered.
    has_pred = [False] * count
    for _, target in pairs:
        has_pred[target] = True
    starts = [v for v in range(count) if not has_pred[v]] + list(range(count))
    for start in starts:
        if state[start]:
            continue
        state[start] = 1
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            v, i = stack[-1]
            if i < len(successors[v]):
                stack[-1] = (v, i + 1)
                w = successors[v][i]
                if state[w] == 1:
                    back.add((v, w))
                elif state[w] == 0:
                    state[w] = 1
                    stack.append((w, 0))
            else:
                state[v] = 2
                stack.pop()
    acyclic: list[tuple[int, int]] = []
    present: set[tuple[int, int]] = set()
    for source, target in pairs:
        pair = (target, source) if (source, target) in back else (source, target)
        if pair not in present:
            present.add(pair)
            acyclic.append(pair)
    return acyclic, back


def assign_layers(count: int, acyclic: list[tuple[int, int]]) -> list[int]:
    """Longest path from the sources, then each node as low as its successors allow."""
    successors: list[list[int]] = [[] for _ in range(count)]
    predecessors: list[list[int]] = [[] for _ in range(count)]
    for source, target in acyclic:
        successors[source].append(target)
        predecessors[target].append(source)
    order = topological(count, successors, predecessors)
    layer = [0] * count
    for v in order:
        for w in successors[v]:
            if layer[w] < layer[v] + 1:
                layer[w] = layer[v] + 1
    # Pull nodes down towards their successors (never past them): shortens the edges
    # from sources and side branches.
    for v in reversed(order):
        if successors[v]:
            lowest = min(layer[w] for w in successors[v]) - 1
            if lowest > layer[v]:
                layer[v] = lowest
    return layer


def topological(
    count: int, successors: list[list[int]], predecessors: list[list[int]]
) -> list[int]:
    remaining = [len(p) for p in predecessors]
    ready = [v for v in range(count) if remaining[v] == 0]
    ready.reverse()
    order: list[int] = []
    while ready:
        v = ready.pop()
        order.append(v)
        for w in reversed(successors[v]):
            remaining[w] -= 1
            if remaining[w] == 0:
                ready.append(w)
    if len(order) != count:
        raise ValueError("the graph still has a cycle")
    return order


def initial_order(
    total: int, layer_of: list[int], layers: int, down: list[list[int]]
) -> list[list[int]]:
    """Rows in depth-first order from the top: connected nodes start near each other."""
    rows: list[list[int]] = [[] for _ in range(layers)]
    placed = [False] * total
    has_pred = [False] * total
    for v in range(total):
        for w in down[v]:
            has_pred[w] = True
    for start in [v for v in range(total) if not has_pred[v]] + list(range(total)):
        if placed[start]:
            continue
        stack = [start]
        while stack:
            v = stack.pop()
            if placed[v]:
                continue
            placed[v] = True
            rows[layer_of[v]].append(v)
            stack.extend(reversed(down[v]))
    return rows


def reduce_crossings(
    rows: list[list[int]], up: list[list[int]], down: list[list[int]]
) -> tuple[list[list[int]], int]:
    """Barycenter sweeps, alternately down (order by the row above) and up (by the
    row below), keeping the best order seen. Every neighbour of a node is in the
    next row up or down (dummy nodes make it so), so positions are one array."""
    position = [0] * len(up)
    for row in rows:
        for i, v in enumerate(row):
            position[v] = i
    best = [list(row) for row in rows]
    best_crossings = count_all_crossings(best, down, position)
    current = [list(row) for row in rows]
    for sweep in range(SWEEPS):
        if best_crossings == 0:
            break
        if sweep % 2 == 0:
            for i in range(1, len(current)):
                current[i] = barycenter_order(current[i], up, position)
        else:
            for i in range(len(current) - 2, -1, -1):
                current[i] = barycenter_order(current[i], down, position)
        crossings = count_all_crossings(current, down, position)
        if crossings < best_crossings:
            best, best_crossings = [list(row) for row in current], crossings
    return best, best_crossings


def barycenter_order(row: list[int], neighbours: list[list[int]], position: list[int]) -> list[int]:
    """``row`` sorted by the mean position of each node's ``neighbours`` (a node
    without any keeps its slot); ``position`` is updated to the new order."""
    keyed: list[tuple[float, int, int]] = []
    slots: list[int] = []
    for i, v in enumerate(row):
        linked = neighbours[v]
        if linked:
            total = 0
            for w in linked:
                total += position[w]
            keyed.append((total / len(linked), i, v))
            slots.append(i)
    keyed.sort()
    result = list(row)
    for slot, (_, _, v) in zip(slots, keyed, strict=True):
        result[slot] = v
    for i, v in enumerate(result):
        position[v] = i
    return result


def count_all_crossings(rows: list[list[int]], down: list[list[int]], position: list[int]) -> int:
    return sum(
        count_crossings(rows[i], len(rows[i + 1]), down, position) for i in range(len(rows) - 1)
    )


def count_crossings(
    upper: list[int], lower_size: int, down: list[list[int]], position: list[int]
) -> int:
    """Crossings between a row and the next: inversions of the lower ends, edges
    sorted by the upper end (a Fenwick tree, O(E log V))."""
    ends: list[int] = []
    for v in upper:
        ends.extend(sorted([position[w] for w in down[v]]))
    tree = [0] * (lower_size + 1)
    crossings = 0
    for seen, end in enumerate(ends):
        # Edges seen so far ending right of ``end`` cross this one.
        i = end + 1
        not_greater = 0
        while i > 0:
            not_greater += tree[i]
            i -= i & -i
        crossings += seen - not_greater
        i = end + 1
        while i <= lower_size:
            tree[i] += 1
            i += i & -i
    return crossings


def assign_x(
    rows: list[list[int]],
    up: list[list[int]],
    down: list[list[int]],
    widths: list[float],
    gap: float,
) -> list[float]:
    """Left x of every node: rows start packed, then each row moves towards its
    neighbours' centres (alternately above and below), keeping order and gaps."""
    xs = [0.0] * len(widths)
    half = [width / 2 for width in widths]
    for row in rows:
        x = 0.0
        for v in row:
            xs[v] = x
            x += widths[v] + gap
    # Centre the rows on the widest.
    widest = max((row_span(row, widths, gap) for row in rows), default=0.0)
    for row in rows:
        shift = (widest - row_span(row, widths, gap)) / 2
        for v in row:
            xs[v] += shift
    for sweep in range(COORDINATE_SWEEPS):
        order = range(1, len(rows)) if sweep % 2 == 0 else range(len(rows) - 2, -1, -1)
        neighbours = up if sweep % 2 == 0 else down
        for i in order:
            row = rows[i]
            wanted = []
            weights = []
            for v in row:
                linked = neighbours[v]
                if linked:
                    total = 0.0
                    for w in linked:
                        total += xs[w] + half[w]
                    wanted.append(total / len(linked) - half[v])
                    weights.append(float(len(linked)))
                else:
                    wanted.append(xs[v])
                    weights.append(0.25)
            placed = place_row(row, wanted, weights, widths, gap)
            for v, x in zip(row, placed, strict=True):
                xs[v] = x
    return xs


def row_span(row: list[int], widths: list[float], gap: float) -> float:
    return sum(widths[v] for v in row) + gap * max(len(row) - 1, 0)


def place_row(
    row: list[int], wanted: list[float], weights: list[float], widths: list[float], gap: float
) -> list[float]:
    """The x positions closest to ``wanted`` (weighted least squares) with every node
    at least ``gap`` right of the one before: with offsets o_i (the room the nodes
    before i take), y_i = x_i - o_i must not decrease — a weighted isotonic regression
    of ``wanted - o``, solved exactly by pooling adjacent violators."""
    offsets = []
    o = 0.0
    for v in row:
        offsets.append(o)
        o += widths[v] + gap
    # Blocks of (weighted mean, weight, length).
    blocks: list[list[float]] = []
    for target, weight, offset in zip(wanted, weights, offsets, strict=True):
        blocks.append([target - offset, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean2, weight2, length2 = blocks.pop()
            mean1, weight1, length1 = blocks[-1]
            joined = weight1 + weight2
            blocks[-1] = [(mean1 * weight1 + mean2 * weight2) / joined, joined, length1 + length2]
    placed: list[float] = []
    for mean, _, length in blocks:
        placed.extend([mean] * int(length))
    return [y + offset for y, offset in zip(placed, offsets, strict=True)]


def final_crossings(result: Layout) -> int:
    """Crossings of the drawn edges' straight segments (for tests): pairs of segments
    between the same two y levels whose x order swaps."""
    segments: list[tuple[float, float, float, float]] = []
    for route in result.routes:
        if route.self_loop:
            continue
        points = route.points
        for (x1, y1), (x2, y2) in itertools.pairwise(points):
            if y1 > y2:
                x1, y1, x2, y2 = x2, y2, x1, y1
            if y2 - y1 > 1e-9:
                segments.append((round(y1, 6), round(y2, 6), x1, x2))
    crossings = 0
    for i, (a_top, a_bottom, a1, a2) in enumerate(segments):
        for b_top, b_bottom, b1, b2 in segments[i + 1 :]:
            if (a_top, a_bottom) != (b_top, b_bottom):
                continue
            if (a1 - b1) * (a2 - b2) < -1e-9:
                crossings += 1
    return crossings
