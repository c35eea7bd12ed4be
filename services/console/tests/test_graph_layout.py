"""The layered layout of the operators page, and its SVG (escaping, one box per operator)."""

from __future__ import annotations

import random
import time
import xml.etree.ElementTree as ET

import pytest

from loupe.console import operator_graph
from loupe.console.graph_layout import Layout, final_crossings, layout

SVG = "{http://www.w3.org/2000/svg}"


def assert_edges_point_down(result: Layout, edges: list[tuple[str, str]] | list) -> None:
    """After cycle breaking every edge goes from a row to a lower one, except the
    reversed (feedback) ones, which go up."""
    for route in result.routes:
        if route.self_loop:
            continue
        source = result.boxes[route.source].layer
        target = result.boxes[route.target].layer
        if route.reversed:
            assert source > target, route
        else:
            assert source < target, route


def assert_no_overlap(result: Layout) -> None:
    boxes = list(result.boxes.values())
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a.x + a.width <= b.x + 1e-6
                or b.x + b.width <= a.x + 1e-6
                or a.y + a.height <= b.y + 1e-6
                or b.y + b.height <= a.y + 1e-6
            )
            assert apart, (a, b)


@pytest.mark.parametrize(
    "edges",
    [
        [("a", "b"), ("b", "c"), ("c", "d")],  # a chain
        [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],  # a diamond
        [("a", "b"), ("a", "c"), ("b", "d"), ("b", "e"), ("c", "f"), ("c", "g")],  # a tree
        # Two chains whose given order would cross: x1→y2, x2→y1.
        [("x1", "y2"), ("x2", "y1"), ("y1", "z1"), ("y2", "z2")],
        # A join of two arranged inputs, as in a dataflow.
        [("s1", "g1"), ("g1", "a1"), ("s2", "g2"), ("g2", "a2"), ("a1", "j"), ("a2", "j")],
        # A long edge next to a chain.
        [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
    ],
)
def test_simple_dags_have_no_crossings(edges: list[tuple[str, str]]) -> None:
    nodes = sorted({end for edge in edges for end in edge})
    result = layout(nodes, edges)
    assert result.crossings == 0
    assert final_crossings(result) == 0
    assert_edges_point_down(result, edges)
    assert_no_overlap(result)
    assert set(result.boxes) == set(nodes)


def test_cycles_are_broken_and_drawn_in_their_direction() -> None:
    # A loop a→b→c→a (feedback c→a) feeding d, and a self-loop on d.
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d")]
    result = layout(["a", "b", "c", "d"], edges)
    assert result.reversed_edges == 1
    feedback = [r for r in result.routes if r.reversed]
    assert [(r.source, r.target) for r in feedback] == [("c", "a")]
    # Drawn from c (below) up to a.
    assert feedback[0].points[0][1] > feedback[0].points[-1][1]
    assert [r.source for r in result.routes if r.self_loop] == ["d"]
    assert_edges_point_down(result, edges)
    assert_no_overlap(result)


def test_layers_respect_edges_in_a_random_graph_with_cycles() -> None:
    rng = random.Random(7)
    nodes = list(range(60))
    edges = [(rng.randrange(60), rng.randrange(60)) for _ in range(120)]
    result = layout(nodes, edges)
    assert_edges_point_down(result, edges)
    assert_no_overlap(result)
    assert result.reversed_edges > 0


def test_isolated_nodes_go_below_the_graph() -> None:
    result = layout(["a", "b", "lonely1", "lonely2"], [("a", "b")])
    bottom = max(result.boxes[n].bottom for n in ("a", "b"))
    assert result.boxes["lonely1"].y > bottom
    assert result.boxes["lonely1"].x < result.boxes["lonely2"].x
    assert_no_overlap(result)


def test_empty_and_unknown_ends() -> None:
    assert layout([], []).boxes == {}
    result = layout(["a"], [("a", "zz"), ("yy", "a")])
    assert list(result.boxes) == ["a"]
    assert result.routes == []
    with pytest.raises(ValueError):
        layout(["a", "a"], [])


def random_dag(count: int, seed: int) -> tuple[list[int], list[tuple[int, int]]]:
    """A dataflow-like DAG: mostly chains, some joins and unions, a few long edges."""
    rng = random.Random(seed)
    edges = []
    for j in range(1, count):
        for i in rng.sample(range(max(0, j - 12), j), min(j, rng.choice([1, 1, 1, 2]))):
            edges.append((i, j))
    return list(range(count)), edges


def test_layout_is_deterministic() -> None:
    nodes, edges = random_dag(120, 3)
    first = layout(nodes, edges)
    second = layout(list(nodes), list(edges))
    assert first.boxes == second.boxes
    assert first.routes == second.routes


def test_two_hundred_nodes_are_fast() -> None:
    nodes, edges = random_dag(200, 11)
    edges += [(150, 20), (199, 5)]  # two feedback edges
    began, cpu = time.perf_counter(), time.process_time()
    result = layout(nodes, edges)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    print(
        f"\n200 nodes, {len(edges)} edges: {elapsed * 1000:.1f} ms "
        f"({cpu * 1000:.1f} ms CPU), {result.layers} layers, "
        f"{result.crossings} crossings, {result.width:.0f}x{result.height:.0f} px"
    )
    assert elapsed < 2.0
    assert len(result.boxes) == 200
    assert_edges_point_down(result, edges)
    assert_no_overlap(result)


def test_crossing_reduction_beats_the_given_order() -> None:
    # Ten pairs wired crosswise in the given order: barycenter sweeps untangle them.
    nodes = [f"u{i}" for i in range(10)] + [f"l{i}" for i in range(10)]
    edges = [(f"u{i}", f"l{9 - i}") for i in range(10)]
    result = layout(nodes, edges)
    assert result.crossings == 0 == final_crossings(result)


# -- the SVG ----------------------------------------------------------------------


def operator_rows(names: list[str]) -> list[dict]:
    rows = [
        {
            "id": 1,
            "name": "dataflow",
            "address": "{1}",
            "elapsed_ns": 5000,
            "records": None,
            "size": None,
        }
    ]
    for i, name in enumerate(names, start=2):
        rows.append(
            {
                "id": i,
                "name": name,
                "address": f"{{1,{i}}}",
                "elapsed_ns": 1000 * i,
                "records": 3 if i == 3 else None,
                "size": 87 if i == 3 else None,
            }
        )
    return rows


def channel_rows(pairs: list[tuple[int, int]], start: int = 100) -> list[dict]:
    return [
        {
            "id": start + k,
            "from_operator_id": a,
            "to_operator_id": b,
            "type": "pipeline",
            "sent": 10 * (k + 1),
            "batch_sent": 1,
        }
        for k, (a, b) in enumerate(pairs)
    ]


def test_svg_escapes_names_and_draws_every_operator() -> None:
    hostile = '<script>alert("x")</script> & "quotes"'
    graph = operator_graph.build(
        operator_rows(["Source(u1)", hostile, "Mfp"]), channel_rows([(2, 3), (3, 4)]), []
    )
    out = str(operator_graph.svg(graph, f"graph of {hostile}"))
    assert "<script>" not in out
    root = ET.fromstring(out)  # well-formed XML
    assert root.get("aria-label") == f"graph of {hostile}"
    boxes = root.findall(f".//{SVG}g[@data-operator-id]")
    assert [b.get("data-operator-id") for b in boxes] == ["2", "3", "4"]  # not the dataflow
    titles = [b.findtext(f"{SVG}title") or "" for b in boxes]
    assert titles[1].startswith(hostile)
    names = [b.findtext(f"{SVG}text") or "" for b in boxes]
    assert names[1] == operator_graph.short(hostile)
    assert len(root.findall(f".//{SVG}g[@data-channel-id]")) == 2


def test_a_node_is_drawn_with_its_neighbours_marked() -> None:
    rows = operator_rows(["Get(u1)", "ArrangeBy", "Join", "Mfp", "Sink"])
    channels = channel_rows([(2, 3), (3, 4), (4, 5), (5, 6)])
    nodes = operator_graph.lir_nodes(
        [
            {
                "lir_id": 1,
                "operator": "Join",
                "parent_lir_id": None,
                "nesting": 0,
                "operator_id_start": 4,
                "operator_id_end": 5,
            }
        ]
    )
    graph = operator_graph.build(rows, channels, nodes, node_id=1)
    assert [(o.id, o.selected, o.context) for o in graph.operators] == [
        (3, False, True),
        (4, True, False),
        (5, False, True),
    ]
    root = ET.fromstring(str(operator_graph.svg(graph, "node 1")))
    texts = {
        b.get("data-operator-id"): b.findtext(f"{SVG}text") or ""
        for b in root.findall(f".//{SVG}g[@data-operator-id]")
    }
    # The selection is a text marker, not only a colour.
    assert texts["4"].startswith("▶ ")
    assert texts["3"].startswith("◌ ")
    assert graph.operators[1].lir_id == 1


def test_address_text_and_list() -> None:
    assert operator_graph.address("{1,3}") == [1, 3]
    assert operator_graph.address([2, 5]) == [2, 5]
    assert operator_graph.address(None) == []
