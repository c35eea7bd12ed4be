"""Dataflow descriptions the coordinator sends to clusters (pure: no I/O).

Every dataflow reads relations by global id. A view is inlined (its plan
replaces its ``Get``) unless it has an index on the dataflow's cluster, in
which case that index is imported; tables, materialized views and builtin
collections are imported from storage (``SourceImport``).

- ``index_dataflow``: builds the indexed object (or imports it, for a table or
  materialized view) and exports the index;
- ``materialized_view_dataflow``: builds the view and sinks it to its shard;
- ``transient_dataflow``: a one-off SELECT's result, exported as an index to
  peek (and dropped after), or a SUBSCRIBE's, exported as a subscribe sink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.objects import ComputeObject, gets, inline_views, relation_columns
from loupe.coordinator.plan import optimize
from loupe.plan import lir, mir
from loupe.plan.codec import desc_from_proto
from loupe.plan.dataflow import (
    BuildDesc,
    DataflowDescription,
    IndexExport,
    IndexImport,
    PersistSink,
    Sink,
    SourceImport,
    SubscribeSink,
)
from loupe.proto.common.v1 import common_pb2

# id -> where its storage collection lives (tables, MVs, builtins); None when unknown.
Metadata = Callable[[Any], common_pb2.CollectionMetadata]


@dataclass(frozen=True)
class Inputs:
    """What dataflows on one cluster can read: the catalog's relations and where they live."""

    cluster_id: str
    objects: Mapping[str, ComputeObject]
    # id -> relation (tables, builtin collections, compute objects).
    relations: Mapping[str, Any]
    # The index of each object on this cluster, if it has one.
    indexes: Mapping[str, ComputeObject]
    metadata: Metadata

    def imports(
        self, plan: mir.Relation, exclude: str = ""
    ) -> tuple[mir.Relation, list[SourceImport], list[IndexImport]]:
        """Inline views without an index here (then optimise the whole); the imports it reads."""
        inlined = optimize(
            inline_views(
                plan, self.objects, lambda view: view.id in self.indexes and view.id != exclude
            )
        )
        sources: list[SourceImport] = []
        indexes: list[IndexImport] = []
        for relation_id in gets(inlined):
            index = self.indexes.get(relation_id)
            relation = self.relations.get(relation_id)
            if relation is None:
                raise LoupeError(SqlState.UNDEFINED_TABLE, f"unknown relation id '{relation_id}'")
            if index is not None:
                indexes.append(index_import(index, relation))
            else:
                sources.append(self.source_import(relation))
        return inlined, sources, indexes

    def source_import(self, relation: Any) -> SourceImport:
        metadata = self.metadata(relation)
        return SourceImport(
            id=relation.id,
            shard_id=metadata.shard_id,
            columns=desc_from_proto(metadata.relation_desc),
            blob_uri=metadata.blob_uri,
            consensus_uri=metadata.consensus_uri,
        )


def index_import(index: ComputeObject, relation: Any) -> IndexImport:
    return IndexImport(
        index_id=index.id,
        on_id=index.on_id,
        columns=tuple(relation_columns(relation)),
        key=index.key,
    )


def index_dataflow(index: ComputeObject, inputs: Inputs, as_of: int) -> DataflowDescription:
    """Maintain ``index``: build its object (a view) or import it (table, MV), export the index."""
    target = inputs.relations[index.on_id]
    export = IndexExport(index_id=index.id, on_id=index.on_id, key=index.key)
    if isinstance(target, ComputeObject) and target.type == "view":
        assert target.plan is not None
        build, sources, indexes = _build(target.id, target.plan, inputs, exclude=target.id)
        return DataflowDescription(
            id=index.id,
            debug_name=index.full_name,
            source_imports=tuple(sources),
            index_imports=tuple(indexes),
            objects_to_build=(build,),
            index_exports=(export,),
            as_of=as_of,
        )
    return DataflowDescription(
        id=index.id,
        debug_name=index.full_name,
        source_imports=(inputs.source_import(target),),
        index_exports=(export,),
        as_of=as_of,
    )


def materialized_view_dataflow(
    view: ComputeObject, inputs: Inputs, as_of: int, storage: common_pb2.CollectionMetadata
) -> DataflowDescription:
    """Build ``view`` and write its changes into its shard."""
    assert view.plan is not None
    build, sources, indexes = _build(view.id, view.plan, inputs)
    sink = PersistSink(
        sink_id=view.id,
        from_id=view.id,
        shard_id=storage.shard_id,
        columns=desc_from_proto(storage.relation_desc),
        blob_uri=storage.blob_uri,
        consensus_uri=storage.consensus_uri,
    )
    return DataflowDescription(
        id=view.id,
        debug_name=view.full_name,
        source_imports=tuple(sources),
        index_imports=tuple(indexes),
        objects_to_build=(build,),
        sink_exports=(sink,),
        as_of=as_of,
    )


def transient_dataflow(
    dataflow_id: str,
    plan: mir.Relation,
    inputs: Inputs,
    as_of: int,
    *,
    subscribe: bool = False,
    snapshot: bool = True,
) -> DataflowDescription:
    """A one-off query: exported as index ``<id>_idx`` (all columns), or as subscribe ``<id>``."""
    build, sources, indexes = _build(dataflow_id, plan, inputs)
    index_exports: tuple[IndexExport, ...] = ()
    sinks: tuple[Sink, ...] = ()
    if subscribe:
        sinks = (SubscribeSink(sink_id=dataflow_id, from_id=dataflow_id, snapshot=snapshot),)
    else:
        key = tuple(range(plan.arity))
        index_exports = (
            IndexExport(index_id=peek_index_id(dataflow_id), on_id=dataflow_id, key=key),
        )
    return DataflowDescription(
        id=dataflow_id,
        debug_name=f"transient {dataflow_id}",
        source_imports=tuple(sources),
        index_imports=tuple(indexes),
        objects_to_build=(build,),
        index_exports=index_exports,
        sink_exports=sinks,
        as_of=as_of,
    )


def peek_index_id(dataflow_id: str) -> str:
    """The id of the index a transient peek dataflow exports."""
    return f"{dataflow_id}_idx"


def _build(
    object_id: str, plan: mir.Relation, inputs: Inputs, exclude: str = ""
) -> tuple[BuildDesc, list[SourceImport], list[IndexImport]]:
    inlined, sources, indexes = inputs.imports(plan, exclude=exclude)
    lowered = lir.lower_to_lir(inlined)
    build = BuildDesc(id=object_id, plan=lowered, columns=tuple(inlined.columns))
    return build, sources, indexes


def fast_path(
    plan: mir.Relation, indexes: Mapping[str, ComputeObject]
) -> tuple[str, lir.MapFilterProject] | None:
    """(index id, MFP) when ``plan`` only filters and projects one indexed relation."""
    lowered = lir.lower_to_lir(plan)
    if isinstance(lowered, lir.Get):
        index = indexes.get(lowered.name)
        return (index.id, lir.MapFilterProject.identity(plan.arity)) if index else None
    if isinstance(lowered, lir.Mfp) and isinstance(lowered.input, lir.Get):
        index = indexes.get(lowered.input.name)
        return (index.id, lowered.mfp) if index else None
    return None
