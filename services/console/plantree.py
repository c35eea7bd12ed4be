"""The Object page's pure parts: the plan tree out of ``EXPLAIN PHYSICAL PLAN WITH
(node_ids)`` text, and each node's hydration on a replica as the page prints it.

The tree comes from the EXPLAIN text because its node ids are the
``physical_plan_node_id`` of the hydration relations, and it is there whether or
not the cluster logs introspection (``mz_lir_mapping`` is per replica and empty
with ``INTROSPECTION INTERVAL 0``, or before a replica reported).

The text (``libs/loupe/plan/explain.py``): a ``name:`` header, then one line per
node indented two spaces per depth ending in ``// { node_id: N }``, each followed
by its attribute lines one level deeper, then its inputs. ``LetRec``'s ``With
Mutually Recursive`` and ``cte x =`` lines carry no id: they label the node
after them.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loupe.console import format as fmt

NODE_ID = re.compile(r"\s*// \{ node_id: (\d+) \}\s*$")


@dataclass
class PlanNode:
    """One LIR node: its header (``operator``), id, attribute lines and inputs."""

    node_id: int
    operator: str
    depth: int
    attributes: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    children: list[PlanNode] = field(default_factory=list)

    def walk(self) -> Iterator[PlanNode]:
        yield self
        for child in self.children:
            yield from child.walk()


def _indent(line: str) -> int:
    return (len(line) - len(line.lstrip(" "))) // 2


def parse_plan(text: str) -> list[PlanNode]:
    """The roots of the plan in ``text`` (one for an object's plan)."""
    roots: list[PlanNode] = []
    stack: list[PlanNode] = []
    last: PlanNode | None = None
    in_attributes = False
    pending_labels: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        depth = _indent(raw)
        match = NODE_ID.search(raw)
        if match is None:
            if depth == 0 and raw.rstrip().endswith(":"):
                continue  # the "name:" header
            if in_attributes and last is not None and depth == last.depth + 1:
                last.attributes.append(raw.strip())
            else:
                # A label (``With Mutually Recursive``, ``cte x =``): the nodes deeper
                # than it are done; the node it labels hangs under the one above it.
                in_attributes = False
                pending_labels.append(raw.strip())
                while stack and stack[-1].depth > depth:
                    stack.pop()
            continue
        node = PlanNode(int(match.group(1)), raw[: match.start()].strip(), depth)
        node.labels, pending_labels = pending_labels, []
        while stack and stack[-1].depth >= depth:
            stack.pop()
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)
        last = node
        in_attributes = True
    return roots


def eta_seconds(
    records_done: Any,
    records_estimated: Any,
    started_at: datetime.datetime | None,
    as_of: datetime.datetime | None,
    hydrated: bool | None,
) -> float | None:
    """What is left of the estimate at the rate since ``started_at``, as of ``as_of``.

    The formula of ``mz_internal.mz_compute_hydration_progress`` and of the CLI's
    progress line (``hydration_progress`` in services/coordinator/compute.py):
    rate = records done / (as_of - started_at); ETA = (estimated - done) / rate;
    0 once hydrated; None without a rate or once the estimate is passed.
    """
    if hydrated:
        return 0.0
    if started_at is None or as_of is None or not records_done:
        return None
    elapsed = (as_of - started_at).total_seconds()
    left = float(records_estimated or 0) - float(records_done)
    if elapsed <= 0 or left <= 0:
        return None
    return math.ceil(left / (float(records_done) / elapsed) * 1000) / 1000


def eta_text(seconds: float | None, hydrated: bool | None = None) -> str:
    if hydrated:
        return "done"
    if seconds is None:
        return "ETA ?"
    return "ETA " + fmt.duration(datetime.timedelta(seconds=seconds))


def node_hydration(
    hydrated: bool | None,
    records_done: Any,
    records_estimated: Any,
    started_at: datetime.datetime | None,
    updated_at: datetime.datetime | None,
) -> dict[str, Any]:
    """A node's hydration on one replica as the page (and its live updates) print it."""
    state = fmt.hydration_state(hydrated, records_done)
    done = int(records_done) if records_done is not None else None
    estimated = int(records_estimated) if records_estimated is not None else None
    eta = eta_seconds(records_done, records_estimated, started_at, updated_at, hydrated)
    fraction: float | None = None
    if hydrated:
        fraction = 1.0
    elif estimated:
        fraction = min(1.0, (done or 0) / estimated)
    return {
        "state": state,
        "label": fmt.state_label(state),
        "done": done,
        "estimated": estimated,
        "fraction": fraction,
        "percent": f"{fraction * 100:.0f} %" if fraction is not None else "—",
        "records": (
            f"{fmt.number(done)} / {fmt.number(estimated)} records"
            if done is not None or estimated is not None
            else "no progress reported"
        ),
        "eta": eta,
        "eta_text": eta_text(eta, hydrated),
    }
