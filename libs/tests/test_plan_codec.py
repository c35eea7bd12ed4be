"""LIR and dataflow descriptions survive the trip through protobuf unchanged."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal

import polars as pl
import pytest
import sqlglot

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan import plan_query
from loupe.dataflow.render import evaluate_once
from loupe.dataflow.types import empty_frame
from loupe.interval import Interval
from loupe.plan import codec, lir, mir
from loupe.plan.dataflow import (
    BuildDesc,
    DataflowDescription,
    IndexExport,
    IndexImport,
    PersistSink,
    SourceImport,
    SubscribeSink,
)
from loupe.plan.scalar import Call, Case, Cast, Column, Literal
from loupe.proto.compute.v1 import plan_pb2

TABLES: dict[str, tuple[str, Sequence[tuple[str, str]]]] = {
    "t": ("u1", [("a", "int4"), ("b", "text")]),
    "u": ("u2", [("x", "int4"), ("y", "int8")]),
}

QUERIES = [
    "SELECT a + 1, upper(b) FROM t WHERE a > 3 AND b IS NOT NULL",
    "SELECT t.b, sum(u.y), count(*) FROM t JOIN u ON t.a = u.x GROUP BY t.b",
    "SELECT max(a), min(b) FROM t",
    "SELECT count(DISTINCT b) FROM t",
    "SELECT DISTINCT b FROM t",
    "SELECT * FROM (SELECT a FROM t ORDER BY a DESC LIMIT 3 OFFSET 1) s",
    "SELECT a FROM t UNION SELECT x FROM u",
    "SELECT a FROM t EXCEPT ALL SELECT x FROM u",
    "SELECT CASE WHEN a > 1 THEN 'big' ELSE 'small' END, a::text FROM t",
    "SELECT t.a FROM t, u, t AS t2 WHERE t.a = u.x AND u.x = t2.a",
    "SELECT a, row_number() OVER (PARTITION BY b ORDER BY a DESC), lag(a, 2, 0) OVER () FROM t",
    "SELECT sum(a) OVER (ORDER BY a ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) FROM t",
    "SELECT count(*) OVER (ORDER BY y RANGE BETWEEN 3 PRECEDING AND CURRENT ROW) FROM u",
    "SELECT a, string_agg(b, ',' ORDER BY a DESC, b) FROM t GROUP BY a",
    "SELECT t.a, u.y, t2.b FROM t LEFT JOIN u ON t.a = u.x LEFT JOIN t AS t2 ON u.x = t2.a",
]


def resolve(name: str) -> tuple[str, Sequence[tuple[str, str]]]:
    if name not in TABLES:
        raise LoupeError(SqlState.UNDEFINED_TABLE, f'unknown catalog item "{name}"')
    return TABLES[name]


def planned(sql: str) -> lir.Node:
    return lir.lower_to_lir(plan_query(sqlglot.parse_one(sql, dialect="postgres"), resolve))


def deep_equal(a: lir.Node, b: lir.Node) -> bool:
    """Equality including ``types`` (which node equality leaves out)."""
    if a != b or a.types != b.types or len(a.inputs()) != len(b.inputs()):
        return False
    return all(deep_equal(x, y) for x, y in zip(a.inputs(), b.inputs(), strict=True))


@pytest.mark.parametrize("sql", QUERIES)
def test_planned_lir_round_trips(sql: str) -> None:
    node = planned(sql)
    message = codec.lir_to_proto(node)
    decoded = codec.lir_from_proto(type(message).FromString(message.SerializeToString()))
    assert deep_equal(decoded, node)
    assert decoded.types, "lowering gives every node its output types"


def test_literals_of_every_type_round_trip() -> None:
    literals = [
        Literal(None, "int4"),
        Literal(True, "bool"),
        Literal(-7, "int8"),
        Literal(2.5, "float8"),
        Literal("it's", "text"),
        Literal(Decimal("12.30"), "numeric"),
        Literal(dt.date(2024, 2, 29), "date"),
        Literal(dt.datetime(2024, 2, 29, 12, 30), "timestamp"),
        Literal(dt.datetime(2024, 2, 29, 12, 30, tzinfo=dt.UTC), "timestamptz"),
        Literal(Interval(14, 1, 5_000_000), "interval"),
    ]
    for literal in literals:
        expr = Case(
            ((Call("eq", (Column(0), literal)), Cast(literal, "text")),), Literal("x", "text")
        )
        assert codec.scalar_from_proto(codec.scalar_to_proto(expr)) == expr


def test_dataflow_description_round_trips() -> None:
    plan = planned("SELECT t.b, count(*) FROM t JOIN u ON t.a = u.x GROUP BY t.b")
    columns = (("b", "text"), ("count", "int8"))
    desc = DataflowDescription(
        id="u9",
        debug_name="materialize.public.counts",
        source_imports=(
            SourceImport("u1", "s-1", (("a", "int4"), ("b", "text")), "file:///b", "sqlite:///c"),
        ),
        index_imports=(IndexImport("u7", "u2", (("x", "int4"), ("y", "int8")), (0,)),),
        objects_to_build=(BuildDesc("u9", plan, columns, "counts"),),
        index_exports=(IndexExport("u10", "u9", (0,)),),
        sink_exports=(
            PersistSink("u9", "u9", "s-9", columns, "file:///b", "sqlite:///c"),
            SubscribeSink("t3", "u9", snapshot=False),
        ),
        as_of=1_700_000_000_000,
        until=1_700_000_100_000,
    )
    decoded = codec.dataflow_from_proto(codec.dataflow_to_proto(desc))
    assert decoded == desc
    assert deep_equal(decoded.objects_to_build[0].plan, plan)
    assert decoded.export_ids() == ("u10", "u9", "t3")
    assert decoded.import_ids() == ("u1", "u2")


def test_finishing_round_trips_with_and_without_a_limit() -> None:
    order = (mir.OrderKey(1, desc=True, nulls_last=False), mir.OrderKey(0))
    for limit in (None, 0, 10):
        message = codec.finishing_to_proto(order, limit, 2, (1, 0))
        assert codec.finishing_from_proto(message) == (order, limit, 2, (1, 0))


def test_a_plan_deeper_than_protobufs_nesting_limit_round_trips() -> None:
    """A chain of 120 unions (deeper than upb's 100 nested messages, as a chain of outer
    joins over views is) goes over the wire in nested parts and comes back whole."""
    node: lir.Node = lir.Get(0, "t", types=("int4",))
    for i in range(1, 121):
        node = lir.Union(i, (node, lir.Get(1000 + i, "u", types=("int4",))), types=("int4",))
    wire = codec.lir_to_proto(node).SerializeToString()
    assert codec.lir_from_proto(plan_pb2.LirNode.FromString(wire)) == node


def _fields(node: lir.Node) -> dict[str, object]:
    """A node's fields, its inputs by id (comparing inputs themselves walks every path)."""
    own: dict[str, object] = {}
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        if isinstance(value, lir.Node):
            value = value.id
        elif isinstance(value, tuple) and value and isinstance(value[0], lir.Node):
            value = tuple(v.id for v in value)
        own[item.name] = value
    return own


def assert_same_dag(decoded: lir.Node, node: lir.Node) -> None:
    """The same nodes, each one object read by every parent that reads it."""
    nodes, found = lir.walk(node), lir.walk(decoded)
    assert [_fields(n) for n in found] == [_fields(n) for n in nodes]
    assert [n.types for n in found] == [n.types for n in nodes]
    assert len({n.id for n in found}) == len(found), "one object per node id"


def test_a_left_join_chain_crosses_the_wire_as_a_dag() -> None:
    """Six chained outer joins read each left input three times: sent once each (the
    message grows linearly, not threefold per join) and decoded as the same objects."""
    joins = " ".join(f"LEFT JOIN u AS u{i} ON t.a = u{i}.x" for i in range(6))
    node = planned(f"SELECT * FROM t {joins}")
    nodes = lir.walk(node)
    assert len(nodes) < 20 * 6
    wire = codec.lir_to_proto(node).SerializeToString()
    assert len(wire) < 400 * len(nodes)
    decoded = codec.lir_from_proto(plan_pb2.LirNode.FromString(wire))
    assert_same_dag(decoded, node)
    readers = Counter(id(i) for n in lir.walk(decoded) for i in n.inputs())
    assert max(readers.values()) >= 3


def test_a_deep_dag_round_trips_in_nested_parts() -> None:
    """Each level reads the one below twice (2^40 paths, 121 nodes, deeper than protobuf's
    nesting limit): references cross nested parts, decoded in the order they were encoded."""
    node: lir.Node = lir.Get(0, "t", types=("int4",))
    for i in range(1, 41):
        doubled = lir.Union(3 * i - 2, (node, node), types=("int4",))
        node = lir.Reduce(
            3 * i - 1, doubled, (Column(0),), (), lir.ReduceKind.DISTINCT, types=("int4",)
        )
        node = lir.Mfp(3 * i, node, lir.MapFilterProject.identity(1), types=("int4",))
    wire = codec.lir_to_proto(node).SerializeToString()
    decoded = codec.lir_from_proto(plan_pb2.LirNode.FromString(wire))
    assert_same_dag(decoded, node)
    level = decoded
    while not isinstance(level, lir.Get):
        assert isinstance(level, lir.Mfp)
        assert isinstance(level.input, lir.Reduce)
        union = level.input.input
        assert isinstance(union, lir.Union)
        assert union.union_inputs[0] is union.union_inputs[1]
        level = union.union_inputs[0]
    rows = pl.DataFrame([(1, 0, 1), (2, 0, 2)], schema=empty_frame(("int4",)).schema, orient="row")
    ok, _ = evaluate_once(decoded, {"t": (("int4",), rows)})
    assert sorted(zip(ok["c0"], ok["diff"], strict=True)) == [(1, 1), (2, 1)]
