"""Dataflow descriptions: what a replica builds for one ``CreateDataflow``.

The Python form of ``loupe.proto.compute.v1.DataflowDescription``; the codec
(``loupe.plan.codec``) converts between the two. A dataflow imports storage
collections and other dataflows' indexes, builds objects from LIR plans in
order, and exports indexes (arranged, peekable) and sinks (materialized views
into storage collections, or subscribes).
"""

from __future__ import annotations

from dataclasses import dataclass

from loupe.plan import lir

ColumnDesc = tuple[str, str]  # (name, PostgreSQL type)


@dataclass(frozen=True)
class SourceImport:
    """A storage collection read by the dataflow, by global id."""

    id: str
    shard_id: str
    columns: tuple[ColumnDesc, ...]
    blob_uri: str = ""
    consensus_uri: str = ""


@dataclass(frozen=True)
class IndexImport:
    """Another dataflow's index on ``on_id``, read by ``Get(on_id)``."""

    index_id: str
    on_id: str
    columns: tuple[ColumnDesc, ...]
    key: tuple[int, ...]


@dataclass(frozen=True)
class BuildDesc:
    """An object the dataflow computes from ``plan``."""

    id: str
    plan: lir.Node
    columns: tuple[ColumnDesc, ...]
    debug_name: str = ""


@dataclass(frozen=True)
class IndexExport:
    """Keep ``on_id`` arranged by ``key`` (column positions), readable by peeks."""

    index_id: str
    on_id: str
    key: tuple[int, ...]


@dataclass(frozen=True)
class PersistSink:
    """Write ``from_id``'s changes into a storage collection (materialized view)."""

    sink_id: str
    from_id: str
    shard_id: str
    columns: tuple[ColumnDesc, ...]
    blob_uri: str = ""
    consensus_uri: str = ""


@dataclass(frozen=True)
class SubscribeSink:
    """Stream ``from_id``'s changes as ``SubscribeBatch`` responses."""

    sink_id: str
    from_id: str
    snapshot: bool = True


Sink = PersistSink | SubscribeSink


@dataclass(frozen=True)
class DataflowDescription:
    id: str
    debug_name: str = ""
    source_imports: tuple[SourceImport, ...] = ()
    index_imports: tuple[IndexImport, ...] = ()
    objects_to_build: tuple[BuildDesc, ...] = ()
    index_exports: tuple[IndexExport, ...] = ()
    sink_exports: tuple[Sink, ...] = ()
    as_of: int = 0
    # Exclusive; 0 means never.
    until: int = 0

    def export_ids(self) -> tuple[str, ...]:
        """Ids of everything the dataflow exports (indexes, then sinks)."""
        return tuple(e.index_id for e in self.index_exports) + tuple(
            s.sink_id for s in self.sink_exports
        )

    def import_ids(self) -> tuple[str, ...]:
        """Global ids ``Get`` nodes may name from outside the dataflow."""
        return tuple(s.id for s in self.source_imports) + tuple(i.on_id for i in self.index_imports)
