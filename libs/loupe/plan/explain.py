"""EXPLAIN text for MIR (``OPTIMIZED PLAN``) and LIR (``PHYSICAL PLAN``) trees.

Each node is one line indented two spaces per depth below the ``name:``
header, followed by its attribute lines one level deeper and then its inputs.
With ``node_ids``, every LIR node's line ends in ``// { node_id: N }``
(seed 002); MIR nodes have no ids, so the flag does not change MIR output.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from loupe.plan import lir, mir
from loupe.plan.scalar import Scalar, render, render_value

INDENT = "  "


def explain(
    plan: mir.Relation | lir.Node,
    *,
    node_ids: bool = False,
    name: str,
    finishing: mir.Finishing | None = None,
) -> str:
    """The EXPLAIN text of ``plan`` for the object or query called ``name``.

    A one-off SELECT's ``finishing`` (what its peek does to the rows: ORDER
    BY, LIMIT, OFFSET, the output columns) shows as a ``Finish`` line above
    the plan, as in Materialize, unless it changes nothing.
    """
    lines = [f"{name}:"]
    depth = 1
    arity = plan.arity
    if finishing is not None and not _is_identity(finishing, arity):
        lines.append(INDENT + _finish(finishing))
        depth = 2
    if isinstance(plan, lir.Node):
        lines.extend(_lir_lines(plan, depth, node_ids))
    else:
        lines.extend(_mir_lines(plan, depth))
    return "\n".join(lines) + "\n"


def _is_identity(finishing: mir.Finishing, arity: int) -> bool:
    return (
        not finishing.order
        and finishing.limit is None
        and not finishing.offset
        and finishing.project == tuple(range(arity))
    )


def _finish(finishing: mir.Finishing) -> str:
    parts = ["Finish", _top_k_attributes(finishing.limit, finishing.offset, finishing.order)]
    parts.append("output=[" + ", ".join(f"#{i}" for i in finishing.project) + "]")
    return " ".join(p for p in parts if p)


def _list(items: Sequence[str]) -> str:
    return "(" + ", ".join(items) + ")"


def _scalars(exprs: Sequence[Scalar]) -> str:
    return _list([render(e) for e in exprs])


def _aggregate(aggregate: mir.Aggregate) -> str:
    if aggregate.expr is None:
        return f"{aggregate.func}(*)"
    distinct = "distinct " if aggregate.distinct else ""
    args = "".join(f", {render(a)}" for a in aggregate.args)
    order = ""
    if aggregate.order_by:
        keys = [
            f"{render(k.expr)} {'desc' if k.desc else 'asc'}"
            f" {'nulls_last' if k.nulls_last else 'nulls_first'}"
            for k in aggregate.order_by
        ]
        order = " order_by [" + ", ".join(keys) + "]"
    return f"{aggregate.func}({distinct}{render(aggregate.expr)}{args}{order})"


def _order(keys: Sequence[mir.OrderKey]) -> str:
    parts = []
    for key in keys:
        nulls = "nulls_last" if key.nulls_last else "nulls_first"
        parts.append(f"#{key.column} {'desc' if key.desc else 'asc'} {nulls}")
    return "[" + ", ".join(parts) + "]"


def _top_k_attributes(
    limit: int | None, offset: int, order: Sequence[mir.OrderKey], group_key: Sequence[int] = ()
) -> str:
    parts = ["group_by=" + _list([f"#{c}" for c in group_key])] if group_key else []
    parts += [f"order_by={_order(order)}"] if order else []
    if limit is not None:
        parts.append(f"limit={limit}")
    if offset:
        parts.append(f"offset={offset}")
    return " ".join(parts)


_BOUND_TEXT = {
    "unbounded_preceding": "unbounded preceding",
    "offset_preceding": "{} preceding",
    "current_row": "current row",
    "offset_following": "{} following",
    "unbounded_following": "unbounded following",
}


def _window_function(function: mir.WindowFunction) -> str:
    """``rank()``, ``sum(#2) rows between 1 preceding and current row`` (default frames unsaid)."""
    args = ", ".join(f"#{a}" for a in function.args)
    text = f"{function.func}({args or '*' if function.func == 'count' else args})"
    frame = function.frame
    if function.func in (*mir.RANKING_FUNCTIONS, "lag", "lead") or frame == mir.WindowFrame():
        return text
    start, end = _bound(frame.start), _bound(frame.end)
    return f"{text} {frame.mode} between {start} and {end}"


def _bound(bound: mir.FrameBound) -> str:
    distance = bound.offset if bound.distance is None else render_value(bound.distance.value)
    return _BOUND_TEXT[bound.kind].format(distance)


def _window_attributes(
    partition_by: Sequence[int],
    order: Sequence[mir.OrderKey],
    functions: Sequence[mir.WindowFunction],
) -> str:
    parts = ["partition_by=" + _list([f"#{c}" for c in partition_by])] if partition_by else []
    parts += [f"order_by={_order(order)}"] if order else []
    parts.append("functions=[" + ", ".join(_window_function(f) for f in functions) + "]")
    return " ".join(parts)


def _equivalences(classes: Sequence[Sequence[Scalar]]) -> str:
    return _list([_scalars(c) for c in classes])


# MIR


def _mir_lines(node: mir.Relation, depth: int) -> Iterator[str]:
    if isinstance(node, mir.LetRec):
        yield INDENT * depth + "Return" + _limit(node.limit, node.return_at_limit)
        yield from _mir_lines(node.body, depth + 1)
        yield INDENT * depth + "With Mutually Recursive"
        for name, binding in zip(node.names, node.bindings, strict=True):
            yield INDENT * (depth + 1) + f"cte {name} ="
            yield from _mir_lines(binding, depth + 2)
        return
    yield INDENT * depth + _mir_header(node)
    for child in node.children():
        yield from _mir_lines(child, depth + 1)


def _limit(limit: int | None, return_at_limit: bool) -> str:
    """A recursion limit as Materialize's EXPLAIN shows it."""
    if limit is None:
        return ""
    return f" // {{ limit: {'return_at_' if return_at_limit else ''}recursion_limit={limit} }}"


def _mir_header(node: mir.Relation) -> str:
    if isinstance(node, mir.Get | mir.LocalGet):
        return f"Get {node.name}"
    if isinstance(node, mir.Constant):
        return "Constant " + ", ".join(_list([render_value(v) for v in row]) for row in node.rows)
    if isinstance(node, mir.Map):
        return f"Map {_scalars(node.scalars)}"
    if isinstance(node, mir.FlatMap):
        return f"FlatMap {node.func}{_scalars(node.exprs)}"
    if isinstance(node, mir.Filter):
        return "Filter " + " AND ".join(render(p) for p in node.predicates)
    if isinstance(node, mir.Project):
        return "Project " + _list([f"#{i}" for i in node.outputs])
    if isinstance(node, mir.Join):
        on = f" on={_equivalences(node.equivalences)}" if node.equivalences else ""
        return "Join" + on if on else "CrossJoin"
    if isinstance(node, mir.Reduce):
        group = f" group_by={_scalars(node.group_key)}" if node.group_key else ""
        aggregates = f" aggregates=[{', '.join(_aggregate(a) for a in node.aggregates)}]"
        return "Reduce" + group + (aggregates if node.aggregates else "")
    if isinstance(node, mir.TopK):
        attributes = _top_k_attributes(node.limit, node.offset, node.order, node.group_key)
        return f"TopK {attributes}".rstrip()
    if isinstance(node, mir.Window):
        return f"Window {_window_attributes(node.partition_by, node.order, node.functions)}"
    return type(node).__name__  # Distinct, Negate, Threshold, Union


# LIR


def _lir_lines(node: lir.Node, depth: int, node_ids: bool) -> Iterator[str]:
    suffix = f" // {{ node_id: {node.id} }}" if node_ids else ""
    if isinstance(node, lir.LetRec):
        yield INDENT * depth + "Return" + _limit(node.limit, node.return_at_limit) + suffix
        yield from _lir_lines(node.body, depth + 1, node_ids)
        yield INDENT * depth + "With Mutually Recursive"
        for name, binding in zip(node.names, node.bindings, strict=True):
            yield INDENT * (depth + 1) + f"cte {name} ="
            yield from _lir_lines(binding, depth + 2, node_ids)
        return
    header, attributes = _lir_parts(node)
    yield INDENT * depth + header + suffix
    for attribute in attributes:
        yield INDENT * (depth + 1) + attribute
    for child in node.inputs():
        yield from _lir_lines(child, depth + 1, node_ids)


def _lir_parts(node: lir.Node) -> tuple[str, list[str]]:
    """A node's header line and its attribute lines."""
    if isinstance(node, lir.Get):
        return f"Get::PassArrangements {node.name}", ["raw=true"]
    if isinstance(node, lir.Constant):
        return "Constant", ["- " + _list([render_value(v) for v in row]) for row in node.rows]
    if isinstance(node, lir.Mfp):
        return "Mfp", _mfp_attributes(node.mfp)
    if isinstance(node, lir.FlatMap):
        return f"FlatMap {node.func}{_scalars(node.exprs)}", _mfp_attributes(node.mfp)
    if isinstance(node, lir.ArrangeBy):
        return "ArrangeBy", ["keys=[" + ", ".join(_scalars(k) for k in node.keys) + "]"]
    if isinstance(node, lir.Join):
        return f"Join::{node.kind.value}", [f"equivalences={_equivalences(node.equivalences)}"]
    if isinstance(node, lir.Reduce):
        return f"Reduce::{node.kind.value}", _reduce_attributes(node)
    if isinstance(node, lir.TopK):
        attributes = _top_k_attributes(node.limit, node.offset, node.order, node.group_key)
        return f"TopK::Basic {attributes}".rstrip(), []
    if isinstance(node, lir.Window):
        attributes = _window_attributes(node.partition_by, node.order, node.functions)
        return f"Window::Basic {attributes}", []
    if isinstance(node, lir.Threshold):
        return "Threshold::Basic", []
    return type(node).__name__, []  # Negate, Union


def _mfp_attributes(mfp: lir.MapFilterProject) -> list[str]:
    attributes = []
    if mfp.expressions:
        attributes.append(f"map={_scalars(mfp.expressions)}")
    if mfp.predicates:
        attributes.append(f"filter={_scalars(mfp.predicates)}")
    attributes.append("project=" + _list([f"#{i}" for i in mfp.projection]))
    return attributes


def _reduce_attributes(node: lir.Reduce) -> list[str]:
    attributes = [f"group_by={_scalars(node.group_key)}"]
    if node.aggregates:
        attributes.append("aggregates=[" + ", ".join(_aggregate(a) for a in node.aggregates) + "]")
    return attributes
