"""Evaluate a plan once, in process, with the engine: Loupe's one evaluator outside replicas.

The coordinator evaluates SQL that needs no replica here: SELECTs that read
no relation (Materialize's "constant" strategy), the rows of ``INSERT``, and
the changes of ``UPDATE``/``DELETE`` over a table's contents. They run
through the same ``ComputeInstance`` (expressions, casts, errors, types) as
every dataflow on a replica, so a scalar means the same wherever it appears.

Inputs are given in persist's format (shard column names, ``mz_timestamp``,
``mz_diff``); everything is read at time 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from loupe.dataflow.instance import ComputeInstance
from loupe.dataflow.results import Finishing, PeekResult
from loupe.dataflow.types import PERSIST_DIFF, PERSIST_TIME
from loupe.plan import lir, mir
from loupe.plan.dataflow import BuildDesc, DataflowDescription, IndexExport, SourceImport

_BUILT = "oneshot"
_INDEX = "oneshot_idx"


@dataclass(frozen=True)
class OneShotInput:
    """A relation a one-shot plan reads (by ``lir.Get`` name): its columns and contents."""

    columns: tuple[tuple[str, str], ...]
    contents: pa.Table


def evaluate_plan(
    plan: lir.Node,
    columns: Sequence[tuple[str, str]],
    inputs: Mapping[str, OneShotInput] | None = None,
    finishing: Finishing | None = None,
) -> PeekResult:
    """The rows of ``plan`` over ``inputs`` (read at time 0), through ``finishing``.

    Raises the ``LoupeError`` the evaluation meets (22012 division by zero,
    22003 out of range, 22P02 bad input…), exactly as a peek of the same
    plan on a replica would.
    """
    inputs = inputs or {}
    read = {node.name for node in lir.walk(plan) if isinstance(node, lir.Get)}
    instance = ComputeInstance(workers=1)
    imports = tuple(
        SourceImport(id=name, shard_id=name, columns=inputs[name].columns) for name in sorted(read)
    )
    instance.create_dataflow(
        DataflowDescription(
            id=_BUILT,
            debug_name=_BUILT,
            source_imports=imports,
            objects_to_build=(BuildDesc(_BUILT, plan, tuple(columns), _BUILT),),
            index_exports=(IndexExport(_INDEX, _BUILT, tuple(range(len(columns)))),),
            as_of=0,
        )
    )
    for source in imports:
        instance.push(source.id, _at_zero(inputs[source.id].contents), 1)
    while instance.step():
        pass
    return instance.peek(_INDEX, 0, finishing=finishing)


def engine_finishing(finishing: mir.Finishing) -> Finishing:
    """A planned query's finishing as the engine's (the same fields)."""
    return Finishing(finishing.order, finishing.limit, finishing.offset, finishing.project)


def _at_zero(contents: pa.Table) -> pa.Table:
    """``contents`` (data columns, maybe with times and diffs) as updates at time 0."""
    names = [n for n in contents.column_names if n not in (PERSIST_TIME, PERSIST_DIFF)]
    data = contents.select(names)
    diffs = (
        contents.column(PERSIST_DIFF)
        if PERSIST_DIFF in contents.column_names
        else pa.array([1] * contents.num_rows, pa.int64())
    )
    times = pa.array([0] * contents.num_rows, pa.uint64())
    return data.append_column(PERSIST_TIME, times).append_column(PERSIST_DIFF, diffs)
