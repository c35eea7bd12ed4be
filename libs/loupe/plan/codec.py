"""LIR, scalars and dataflow descriptions to and from protobuf (``compute/v1/plan.proto``).

The coordinator encodes what it planned; a replica decodes it. Every
function here is a bijection on what the planner produces:
``x_from_proto(x_to_proto(v)) == v`` (tested over the planner's output).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from loupe.common.values import from_row, from_value, to_row, to_value
from loupe.plan import lir, mir
from loupe.plan.dataflow import (
    BuildDesc,
    ColumnDesc,
    DataflowDescription,
    IndexExport,
    IndexImport,
    PersistSink,
    Sink,
    SourceImport,
    SubscribeSink,
)
from loupe.plan.scalar import Call, Case, Cast, Column, Literal, Scalar
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2, plan_pb2

# -- scalars ------------------------------------------------------------------------


def scalar_to_proto(expr: Scalar) -> plan_pb2.ScalarExpr:
    if isinstance(expr, Column):
        return plan_pb2.ScalarExpr(column=expr.index)
    if isinstance(expr, Literal):
        literal = plan_pb2.LiteralExpr(value=to_value(expr.value), type=expr.type)
        return plan_pb2.ScalarExpr(literal=literal)
    if isinstance(expr, Call):
        call = plan_pb2.CallExpr(func=expr.func, args=[scalar_to_proto(a) for a in expr.args])
        return plan_pb2.ScalarExpr(call=call)
    if isinstance(expr, Cast):
        return plan_pb2.ScalarExpr(
            cast=plan_pb2.CastExpr(expr=scalar_to_proto(expr.expr), type=expr.type)
        )
    whens = [
        plan_pb2.CaseWhen(condition=scalar_to_proto(c), result=scalar_to_proto(r))
        for c, r in expr.whens
    ]
    case = plan_pb2.CaseExpr(whens=whens, otherwise=scalar_to_proto(expr.otherwise))
    return plan_pb2.ScalarExpr(case=case)


def scalar_from_proto(message: plan_pb2.ScalarExpr) -> Scalar:
    kind = message.WhichOneof("kind")
    if kind == "column":
        return Column(message.column)
    if kind == "literal":
        return Literal(_literal_value(message.literal), message.literal.type)
    if kind == "call":
        return Call(message.call.func, tuple(scalar_from_proto(a) for a in message.call.args))
    if kind == "cast":
        return Cast(scalar_from_proto(message.cast.expr), message.cast.type)
    if kind == "case":
        whens = tuple(
            (scalar_from_proto(w.condition), scalar_from_proto(w.result))
            for w in message.case.whens
        )
        return Case(whens, scalar_from_proto(message.case.otherwise))
    raise ValueError(f"scalar expression without a kind: {message!r}")


def _literal_value(literal: plan_pb2.LiteralExpr) -> Any:
    value = from_value(literal.value)
    # Values carry UTC instants; a `timestamp` (without time zone) is naive.
    if literal.type == "timestamp" and isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, list):  # an array or list constant: a tuple, as plans hold it
        return tuple(value)
    return value


def _scalars(exprs: Sequence[Scalar]) -> list[plan_pb2.ScalarExpr]:
    return [scalar_to_proto(e) for e in exprs]


def _from_scalars(messages: Sequence[plan_pb2.ScalarExpr]) -> tuple[Scalar, ...]:
    return tuple(scalar_from_proto(m) for m in messages)


# -- MFP, aggregates, order keys ----------------------------------------------------


def mfp_to_proto(mfp: lir.MapFilterProject) -> plan_pb2.MapFilterProject:
    return plan_pb2.MapFilterProject(
        input_arity=mfp.input_arity,
        expressions=_scalars(mfp.expressions),
        predicates=_scalars(mfp.predicates),
        projection=list(mfp.projection),
    )


def mfp_from_proto(message: plan_pb2.MapFilterProject) -> lir.MapFilterProject:
    return lir.MapFilterProject(
        message.input_arity,
        _from_scalars(message.expressions),
        _from_scalars(message.predicates),
        tuple(message.projection),
    )


def _aggregate_to_proto(aggregate: mir.Aggregate) -> plan_pb2.AggregateExpr:
    message = plan_pb2.AggregateExpr(func=aggregate.func, distinct=aggregate.distinct)
    if aggregate.expr is not None:
        message.expr.CopyFrom(scalar_to_proto(aggregate.expr))
    message.args.extend(scalar_to_proto(a) for a in aggregate.args)
    message.order_by.extend(
        plan_pb2.AggregateOrder(expr=scalar_to_proto(k.expr), desc=k.desc, nulls_last=k.nulls_last)
        for k in aggregate.order_by
    )
    return message


def _aggregate_from_proto(message: plan_pb2.AggregateExpr) -> mir.Aggregate:
    expr = scalar_from_proto(message.expr) if message.HasField("expr") else None
    order_by = tuple(
        mir.AggregateOrder(scalar_from_proto(k.expr), k.desc, k.nulls_last)
        for k in message.order_by
    )
    return mir.Aggregate(
        message.func, expr, message.distinct, _from_scalars(message.args), order_by
    )


def order_to_proto(keys: Sequence[mir.OrderKey]) -> list[plan_pb2.OrderKey]:
    return [plan_pb2.OrderKey(column=k.column, desc=k.desc, nulls_last=k.nulls_last) for k in keys]


def order_from_proto(messages: Sequence[plan_pb2.OrderKey]) -> tuple[mir.OrderKey, ...]:
    return tuple(mir.OrderKey(m.column, m.desc, m.nulls_last) for m in messages)


def _window_function_to_proto(function: mir.WindowFunction) -> plan_pb2.WindowFunctionExpr:
    frame = function.frame
    return plan_pb2.WindowFunctionExpr(
        func=function.func,
        args=list(function.args),
        mode=frame.mode,
        start=_frame_bound_to_proto(frame.start),
        end=_frame_bound_to_proto(frame.end),
    )


def _frame_bound_to_proto(bound: mir.FrameBound) -> plan_pb2.WindowFrameBound:
    message = plan_pb2.WindowFrameBound(kind=bound.kind, offset=bound.offset)
    if bound.distance is not None:
        message.distance.CopyFrom(scalar_to_proto(bound.distance))
    return message


def _frame_bound_from_proto(message: plan_pb2.WindowFrameBound) -> mir.FrameBound:
    distance = scalar_from_proto(message.distance) if message.HasField("distance") else None
    assert distance is None or isinstance(distance, Literal)
    return mir.FrameBound(message.kind, message.offset, distance)


def _window_function_from_proto(message: plan_pb2.WindowFunctionExpr) -> mir.WindowFunction:
    frame = mir.WindowFrame(
        message.mode, _frame_bound_from_proto(message.start), _frame_bound_from_proto(message.end)
    )
    return mir.WindowFunction(message.func, tuple(message.args), frame)


# -- LIR ----------------------------------------------------------------------------


# LIR levels encoded in one message (see ``lir_to_proto``): a level is two messages
# (the node and its kind), scalar expressions add their own; far below 100.
NESTING_STEP = 12


def lir_to_proto(node: lir.Node) -> plan_pb2.LirNode:
    """``node`` as a message: a DAG, each node encoded once, deep plans cut into parts.

    A plan is a DAG: a node several parents read (an outer join reads its
    left input three times) is encoded in full where a depth-first walk
    (inputs in order) first meets it, and as ``shared`` (its id) after
    that; the decoder, walking in the same order, gives every reference the
    node it decoded. Written as a tree, a chain of outer joins doubles
    per join.

    Protobuf refuses messages nested deeper than 100 levels (upb's limit, on
    both ends), and a plan can be deeper: a chain of outer joins over views
    (Materialize Console's operator query) is hundreds of LIR levels. Every
    ``NESTING_STEP`` levels the subtree is encoded separately and carried as
    ``nested`` bytes, which a decoder parses as a new message, at the same
    point of its walk.
    """
    return _LirEncoder().encode(node, 0)


class _LirEncoder:
    """One plan's encoding: the ids of the nodes encoded so far."""

    def __init__(self) -> None:
        self.encoded: set[int] = set()

    def encode(self, node: lir.Node, depth: int) -> plan_pb2.LirNode:
        """``node`` as a message; at ``NESTING_STEP`` levels, as a message of its own."""
        if node.id in self.encoded:
            return plan_pb2.LirNode(shared=node.id)
        if depth >= NESTING_STEP:
            return plan_pb2.LirNode(nested=self.encode(node, 0).SerializeToString())
        message = _lir_to_proto(self, node, depth)
        self.encoded.add(node.id)
        return message


def _lir_to_proto(encoder: _LirEncoder, node: lir.Node, depth: int) -> plan_pb2.LirNode:
    message = plan_pb2.LirNode(id=node.id, types=list(node.types))
    if isinstance(node, lir.Constant):
        message.constant.rows.extend(to_row(row) for row in node.rows)
    elif isinstance(node, lir.Get):
        message.get.id = node.name
    elif isinstance(node, lir.Mfp):
        message.mfp.input.CopyFrom(encoder.encode(node.input, depth + 1))
        message.mfp.mfp.CopyFrom(mfp_to_proto(node.mfp))
    elif isinstance(node, lir.FlatMap):
        message.flat_map.input.CopyFrom(encoder.encode(node.input, depth + 1))
        message.flat_map.func = node.func
        message.flat_map.exprs.extend(_scalars(node.exprs))
        message.flat_map.mfp.CopyFrom(mfp_to_proto(node.mfp))
    elif isinstance(node, lir.ArrangeBy):
        message.arrange_by.input.CopyFrom(encoder.encode(node.input, depth + 1))
        message.arrange_by.keys.extend(plan_pb2.ScalarList(exprs=_scalars(k)) for k in node.keys)
    elif isinstance(node, lir.Join):
        message.join.inputs.extend(encoder.encode(i, depth + 1) for i in node.join_inputs)
        message.join.equivalences.extend(
            plan_pb2.ScalarList(exprs=_scalars(c)) for c in node.equivalences
        )
        message.join.kind = node.kind.value
    elif isinstance(node, lir.Reduce):
        message.reduce.input.CopyFrom(encoder.encode(node.input, depth + 1))
        message.reduce.group_key.extend(_scalars(node.group_key))
        message.reduce.aggregates.extend(_aggregate_to_proto(a) for a in node.aggregates)
        message.reduce.kind = node.kind.value
    elif isinstance(node, lir.TopK):
        top_k = message.top_k
        top_k.input.CopyFrom(encoder.encode(node.input, depth + 1))
        top_k.order.extend(order_to_proto(node.order))
        if node.limit is not None:
            top_k.limit = node.limit
        top_k.offset = node.offset
        top_k.group_key.extend(node.group_key)
    elif isinstance(node, lir.Window):
        window = message.window
        window.input.CopyFrom(encoder.encode(node.input, depth + 1))
        window.partition_by.extend(node.partition_by)
        window.order.extend(order_to_proto(node.order))
        window.functions.extend(_window_function_to_proto(f) for f in node.functions)
    elif isinstance(node, lir.Negate):
        message.negate.input.CopyFrom(encoder.encode(node.input, depth + 1))
    elif isinstance(node, lir.Threshold):
        message.threshold.input.CopyFrom(encoder.encode(node.input, depth + 1))
    elif isinstance(node, lir.Union):
        message.union.inputs.extend(encoder.encode(i, depth + 1) for i in node.union_inputs)
    elif isinstance(node, lir.LetRec):
        let_rec = message.let_rec
        let_rec.names.extend(node.names)
        let_rec.bindings.extend(encoder.encode(b, depth + 1) for b in node.bindings)
        let_rec.body.CopyFrom(encoder.encode(node.body, depth + 1))
        let_rec.externals.extend(encoder.encode(e, depth + 1) for e in node.externals)
        if node.limit is not None:
            let_rec.limit = node.limit
        let_rec.return_at_limit = node.return_at_limit
    else:
        raise TypeError(f"unknown LIR node {type(node).__name__}")
    return message


def lir_from_proto(message: plan_pb2.LirNode) -> lir.Node:
    """The plan ``message`` encodes (``lir_to_proto``): a DAG again, one object per node id."""
    return _LirDecoder().decode(message)


class _LirDecoder:
    """One plan's decoding: the nodes decoded so far, by id (what ``shared`` refers to)."""

    def __init__(self) -> None:
        self.decoded: dict[int, lir.Node] = {}

    def decode(self, message: plan_pb2.LirNode) -> lir.Node:
        kind = message.WhichOneof("kind")
        if kind == "shared":
            if message.shared not in self.decoded:
                raise ValueError(f"LIR node {message.shared} is read before it is encoded")
            return self.decoded[message.shared]
        if kind == "nested":
            return self.decode(plan_pb2.LirNode.FromString(message.nested))
        node = _lir_from_proto(self, message, kind)
        self.decoded[node.id] = node
        return node


def _lir_from_proto(decoder: _LirDecoder, message: plan_pb2.LirNode, kind: str | None) -> lir.Node:
    node_id, types = message.id, tuple(message.types)
    if kind == "constant":
        rows = tuple(from_row(row) for row in message.constant.rows)
        return lir.Constant(node_id, rows, types=types)
    if kind == "get":
        return lir.Get(node_id, message.get.id, types=types)
    if kind == "mfp":
        mfp = message.mfp
        return lir.Mfp(node_id, decoder.decode(mfp.input), mfp_from_proto(mfp.mfp), types=types)
    if kind == "flat_map":
        fm = message.flat_map
        return lir.FlatMap(
            node_id,
            decoder.decode(fm.input),
            fm.func,
            _from_scalars(fm.exprs),
            mfp_from_proto(fm.mfp),
            types=types,
        )
    if kind == "arrange_by":
        keys = tuple(_from_scalars(k.exprs) for k in message.arrange_by.keys)
        return lir.ArrangeBy(node_id, decoder.decode(message.arrange_by.input), keys, types=types)
    if kind == "join":
        join = message.join
        return lir.Join(
            node_id,
            tuple(decoder.decode(i) for i in join.inputs),
            tuple(_from_scalars(c.exprs) for c in join.equivalences),
            lir.JoinKind(join.kind),
            types=types,
        )
    if kind == "reduce":
        reduce = message.reduce
        return lir.Reduce(
            node_id,
            decoder.decode(reduce.input),
            _from_scalars(reduce.group_key),
            tuple(_aggregate_from_proto(a) for a in reduce.aggregates),
            lir.ReduceKind(reduce.kind),
            types=types,
        )
    if kind == "top_k":
        top_k = message.top_k
        return lir.TopK(
            node_id,
            decoder.decode(top_k.input),
            order_from_proto(top_k.order),
            top_k.limit if top_k.HasField("limit") else None,
            top_k.offset,
            tuple(top_k.group_key),
            types=types,
        )
    if kind == "window":
        window = message.window
        return lir.Window(
            node_id,
            decoder.decode(window.input),
            tuple(window.partition_by),
            order_from_proto(window.order),
            tuple(_window_function_from_proto(f) for f in window.functions),
            types=types,
        )
    if kind == "negate":
        return lir.Negate(node_id, decoder.decode(message.negate.input), types=types)
    if kind == "threshold":
        return lir.Threshold(node_id, decoder.decode(message.threshold.input), types=types)
    if kind == "union":
        inputs = tuple(decoder.decode(i) for i in message.union.inputs)
        return lir.Union(node_id, inputs, types=types)
    if kind == "let_rec":
        let_rec = message.let_rec
        externals = tuple(decoder.decode(e) for e in let_rec.externals)
        assert all(isinstance(e, lir.Get) for e in externals)
        return lir.LetRec(
            node_id,
            tuple(let_rec.names),
            tuple(decoder.decode(b) for b in let_rec.bindings),
            decoder.decode(let_rec.body),
            externals,  # type: ignore[arg-type]
            let_rec.limit if let_rec.HasField("limit") else None,
            let_rec.return_at_limit,
            types=types,
        )
    raise ValueError(f"LIR node {message.id} has no kind")


# -- dataflows ----------------------------------------------------------------------


def desc_to_proto(columns: Sequence[ColumnDesc]) -> common_pb2.RelationDesc:
    return common_pb2.RelationDesc(
        columns=[common_pb2.Column(name=n, type=t, nullable=True) for n, t in columns]
    )


def desc_from_proto(message: common_pb2.RelationDesc) -> tuple[ColumnDesc, ...]:
    return tuple((c.name, c.type) for c in message.columns)


def _collection(
    collection_id: str,
    shard_id: str,
    columns: Sequence[ColumnDesc],
    blob_uri: str,
    consensus_uri: str,
) -> common_pb2.CollectionMetadata:
    return common_pb2.CollectionMetadata(
        collection_id=collection_id,
        shard_id=shard_id,
        blob_uri=blob_uri,
        consensus_uri=consensus_uri,
        relation_desc=desc_to_proto(columns),
    )


def _sink_to_proto(sink: Sink) -> plan_pb2.SinkExport:
    message = plan_pb2.SinkExport(sink_id=sink.sink_id, from_id=sink.from_id)
    if isinstance(sink, PersistSink):
        message.persist.CopyFrom(
            _collection(
                sink.sink_id, sink.shard_id, sink.columns, sink.blob_uri, sink.consensus_uri
            )
        )
    else:
        message.subscribe.snapshot = sink.snapshot
    return message


def _sink_from_proto(message: plan_pb2.SinkExport) -> Sink:
    if message.WhichOneof("target") == "persist":
        persist = message.persist
        return PersistSink(
            message.sink_id,
            message.from_id,
            persist.shard_id,
            desc_from_proto(persist.relation_desc),
            persist.blob_uri,
            persist.consensus_uri,
        )
    return SubscribeSink(message.sink_id, message.from_id, message.subscribe.snapshot)


def dataflow_to_proto(desc: DataflowDescription) -> plan_pb2.DataflowDescription:
    return plan_pb2.DataflowDescription(
        id=desc.id,
        debug_name=desc.debug_name,
        source_imports=[
            plan_pb2.SourceImport(
                id=s.id,
                collection=_collection(s.id, s.shard_id, s.columns, s.blob_uri, s.consensus_uri),
                desc=desc_to_proto(s.columns),
            )
            for s in desc.source_imports
        ],
        index_imports=[
            plan_pb2.IndexImport(
                index_id=i.index_id, on_id=i.on_id, desc=desc_to_proto(i.columns), key=list(i.key)
            )
            for i in desc.index_imports
        ],
        objects_to_build=[
            plan_pb2.BuildDesc(
                id=b.id,
                plan=lir_to_proto(b.plan),
                desc=desc_to_proto(b.columns),
                debug_name=b.debug_name,
            )
            for b in desc.objects_to_build
        ],
        index_exports=[
            plan_pb2.IndexExport(index_id=e.index_id, on_id=e.on_id, key=list(e.key))
            for e in desc.index_exports
        ],
        sink_exports=[_sink_to_proto(s) for s in desc.sink_exports],
        as_of=desc.as_of,
        until=desc.until,
    )


def dataflow_from_proto(message: plan_pb2.DataflowDescription) -> DataflowDescription:
    return DataflowDescription(
        id=message.id,
        debug_name=message.debug_name,
        source_imports=tuple(
            SourceImport(
                s.id,
                s.collection.shard_id,
                desc_from_proto(s.desc),
                s.collection.blob_uri,
                s.collection.consensus_uri,
            )
            for s in message.source_imports
        ),
        index_imports=tuple(
            IndexImport(i.index_id, i.on_id, desc_from_proto(i.desc), tuple(i.key))
            for i in message.index_imports
        ),
        objects_to_build=tuple(
            BuildDesc(b.id, lir_from_proto(b.plan), desc_from_proto(b.desc), b.debug_name)
            for b in message.objects_to_build
        ),
        index_exports=tuple(
            IndexExport(e.index_id, e.on_id, tuple(e.key)) for e in message.index_exports
        ),
        sink_exports=tuple(_sink_from_proto(s) for s in message.sink_exports),
        as_of=message.as_of,
        until=message.until,
    )


# -- peeks --------------------------------------------------------------------------


def finishing_to_proto(
    order: Sequence[mir.OrderKey],
    limit: int | None,
    offset: int,
    project: Sequence[int],
) -> compute_pb2.RowSetFinishing:
    message = compute_pb2.RowSetFinishing(
        order=order_to_proto(order), offset=offset, project=list(project)
    )
    if limit is not None:
        message.limit = limit
    return message


def finishing_from_proto(
    message: compute_pb2.RowSetFinishing,
) -> tuple[tuple[mir.OrderKey, ...], int | None, int, tuple[int, ...]]:
    """``(order, limit, offset, project)``."""
    limit = message.limit if message.HasField("limit") else None
    return order_from_proto(message.order), limit, message.offset, tuple(message.project)
