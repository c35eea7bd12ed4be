"""A cluster's compute command history, compacted, for replicas that start later.

Every replica of a cluster must run the same dataflows. The controller keeps
what it told the cluster (``CreateDataflow``, ``Schedule``,
``AllowCompaction``) and replays it to every new incarnation after
``CreateInstance`` (reconciliation by replay). The history stays as small as
the state it describes:

- a dataflow whose exports are all dropped (``AllowCompaction`` with
  ``empty``) vanishes with its commands;
- ``AllowCompaction`` collapses to the latest since per collection;
- a replayed ``CreateDataflow`` starts at the least since of its exports (its
  original as_of if none moved): history before what the controller still
  reads need not be rebuilt, and may already be compacted away in storage.
"""

from __future__ import annotations

from dataclasses import dataclass

from loupe.proto.compute.v1 import compute_pb2, plan_pb2


@dataclass
class _Dataflow:
    description: plan_pb2.DataflowDescription
    # Exports not dropped yet.
    exports: set[str]


def export_ids(dataflow: plan_pb2.DataflowDescription) -> list[str]:
    """Ids of what a dataflow exports: its indexes, then its sinks."""
    return [e.index_id for e in dataflow.index_exports] + [s.sink_id for s in dataflow.sink_exports]


class CommandHistory:
    """The compacted commands of one cluster; the dataflows and sinces they describe."""

    def __init__(self) -> None:
        # Insertion order is creation order: a dataflow may import an index of an earlier one.
        self._dataflows: dict[str, _Dataflow] = {}
        self._owner: dict[str, str] = {}
        self._sinces: dict[str, int] = {}
        # Bumped whenever the set of dataflows or their exports changes.
        self.version = 0

    def __len__(self) -> int:
        return len(self._dataflows)

    def create_dataflow(self, dataflow: plan_pb2.DataflowDescription) -> bool:
        """Record a dataflow; False if one with its id is recorded already."""
        if dataflow.id in self._dataflows:
            return False
        exports = export_ids(dataflow)
        self._dataflows[dataflow.id] = _Dataflow(dataflow, set(exports))
        self.version += 1
        for export_id in exports:
            self._owner[export_id] = dataflow.id
            self._sinces[export_id] = dataflow.as_of
        return True

    def allow_compaction(self, collection_id: str, since: int, empty: bool) -> bool:
        """Record a compaction (``empty``: a drop); False for a collection not recorded."""
        dataflow_id = self._owner.get(collection_id)
        if dataflow_id is None:
            return False
        if not empty:
            self._sinces[collection_id] = max(self._sinces[collection_id], since)
            return True
        del self._owner[collection_id]
        del self._sinces[collection_id]
        self.version += 1
        dataflow = self._dataflows[dataflow_id]
        dataflow.exports.discard(collection_id)
        if not dataflow.exports:
            del self._dataflows[dataflow_id]
        return True

    # -- what it describes ------------------------------------------------------------

    def collections(self) -> list[str]:
        """Every export not dropped, in creation order."""
        return list(self._owner)

    def dataflows(self) -> dict[str, tuple[plan_pb2.DataflowDescription, list[str]]]:
        """Every dataflow recorded, with its exports not dropped yet."""
        return {
            dataflow_id: (dataflow.description, sorted(dataflow.exports))
            for dataflow_id, dataflow in self._dataflows.items()
        }

    def has_dataflow(self, dataflow_id: str) -> bool:
        return dataflow_id in self._dataflows

    def dataflow_of(self, collection_id: str) -> str | None:
        return self._owner.get(collection_id)

    def since(self, collection_id: str) -> int | None:
        """The since the controller holds for ``collection_id``; None if unknown."""
        return self._sinces.get(collection_id)

    def is_subscribe(self, collection_id: str) -> bool:
        dataflow_id = self._owner.get(collection_id)
        if dataflow_id is None:
            return False
        sinks = self._dataflows[dataflow_id].description.sink_exports
        return any(s.sink_id == collection_id and s.HasField("subscribe") for s in sinks)

    # -- replay ---------------------------------------------------------------------------

    def commands(self) -> list[compute_pb2.ComputeCommand]:
        """The compacted history, in the order a new incarnation must see it."""
        commands = []
        for dataflow_id, dataflow in self._dataflows.items():
            description = plan_pb2.DataflowDescription()
            description.CopyFrom(dataflow.description)
            description.as_of = max(
                description.as_of, min(self._sinces[e] for e in dataflow.exports)
            )
            commands.append(
                compute_pb2.ComputeCommand(
                    create_dataflow=compute_pb2.CreateDataflow(dataflow=description)
                )
            )
            commands.append(
                compute_pb2.ComputeCommand(schedule=compute_pb2.Schedule(id=dataflow_id))
            )
        for collection_id, since in self._sinces.items():
            commands.append(
                compute_pb2.ComputeCommand(
                    allow_compaction=compute_pb2.AllowCompaction(
                        collection_id=collection_id, since=since
                    )
                )
            )
        return commands
