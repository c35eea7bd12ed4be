"""What the engine hands back: peek results, sink batches, hydration, and ``NotReady``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from loupe.common.errors import LoupeError
from loupe.common.jsonb import Jsonb
from loupe.interval import Interval
from loupe.plan import mir


class NotReady(Exception):
    """The peeked time is not complete yet (``timestamp >= write_frontier``); retry later."""

    def __init__(self, target_id: str, timestamp: int, write_frontier: int) -> None:
        super().__init__(
            f"{target_id}: time {timestamp} is not complete (frontier {write_frontier})"
        )
        self.target_id = target_id
        self.timestamp = timestamp
        self.write_frontier = write_frontier


@dataclass(frozen=True)
class Finishing:
    """A peek's post-processing (RowSetFinishing): ORDER BY, OFFSET, LIMIT, then ``project``.

    ``Finishing(*loupe.plan.codec.finishing_from_proto(message))`` builds one
    from the wire; an empty ``project`` keeps every column.
    """

    order: tuple[mir.OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    project: tuple[int, ...] = ()


@dataclass(frozen=True)
class PeekResult:
    """Rows of a peek: ``frame`` has columns ``c0..`` (one row per occurrence)."""

    frame: pl.DataFrame
    types: tuple[str, ...]

    def rows(self) -> list[tuple[object, ...]]:
        """The rows as Python values, as clients get them (``client_rows``; an interval
        as ``loupe.interval.Interval``)."""
        rows = client_rows(self.frame.rows(), self.types)
        intervals = [i for i, t in enumerate(self.types) if t == "interval"]
        if not intervals or not rows:
            return rows
        return [python_row(row, intervals) for row in rows]


def python_row(row: tuple[object, ...], intervals: list[int]) -> tuple[object, ...]:
    """``row`` with the engine's interval structs at ``intervals`` as ``Interval`` values."""
    values = list(row)
    for i in intervals:
        values[i] = Interval.from_struct(values[i])
    return tuple(values)


def client_rows(rows: list[tuple[Any, ...]], types: Sequence[str]) -> list[tuple[Any, ...]]:
    """Rows of the engine's values as clients get them: a uuid as ``uuid.UUID``, jsonb as
    ``Jsonb`` (its JSON on the wire), other values as they are."""
    convert = [(index, _PYTHON_VALUES[t]) for index, t in enumerate(types) if t in _PYTHON_VALUES]
    if not convert or not rows:
        return rows
    converted = []
    for row in rows:
        values = list(row)
        for index, to_python in convert:
            if values[index] is not None:
                values[index] = to_python(values[index])
        converted.append(tuple(values))
    return converted


# Types whose engine values (polars') are not the Python values clients get.
_PYTHON_VALUES: dict[str, Callable[[Any], object]] = {
    "uuid": uuid.UUID,
    "jsonb": Jsonb,
    "_jsonb": lambda values: [None if v is None else Jsonb(v) for v in values],
    "jsonb list": lambda values: [None if v is None else Jsonb(v) for v in values],
    "_uuid": lambda values: [None if v is None else uuid.UUID(v) for v in values],
    "uuid list": lambda values: [None if v is None else uuid.UUID(v) for v in values],
    "_interval": lambda values: [None if v is None else Interval.from_struct(v) for v in values],
    "interval list": lambda values: [
        None if v is None else Interval.from_struct(v) for v in values
    ],
}


@dataclass(frozen=True)
class SinkBatch:
    """A sink's consolidated updates with times in ``[lower, upper)``, in persist's format.

    ``error`` is set (and ``updates`` empty) when the sinked collection holds
    a dataflow error in that interval. ``snapshot``: the dataflow's first
    batch (``lower`` is its as_of), whose updates at ``lower`` are the
    collection's contents through ``lower``, not only the changes at it.
    """

    sink_id: str
    lower: int
    upper: int
    updates: pa.Table
    error: LoupeError | None = None
    snapshot: bool = False


@dataclass(frozen=True)
class HydrationStatus:
    """Whether LIR node ``lir_id`` of export ``object_id`` is hydrated on ``worker_id``."""

    object_id: str
    lir_id: int
    worker_id: int
    hydrated: bool
