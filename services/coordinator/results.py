"""What running a statement produces, before it is put on the wire.

``Execute`` streams, per statement, a ``Description`` (row-returning
statements only), ``RowBatch``es and a ``Complete`` with the command tag;
``Notice``s may come at any point; a ``Failure`` ends the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from loupe.common.errors import LoupeError

Column = tuple[str, str]


@dataclass(frozen=True)
class Description:
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class RowBatch:
    rows: list[tuple[Any, ...]]
    # Rows of a statement that streams until canceled (SUBSCRIBE).
    streaming: bool = False


@dataclass(frozen=True)
class Complete:
    tag: str


@dataclass(frozen=True)
class Notice:
    severity: str
    message: str
    # The SQLSTATE PostgreSQL gives it (pgwire's NoticeResponse); "" for 00000 / 01000.
    code: str = ""


@dataclass(frozen=True)
class Failure:
    error: LoupeError


@dataclass(frozen=True)
class Progress:
    """How far a statement's work on ``object`` is: a dataflow hydrating (``unit`` nodes,
    records read) or a load generator filling its tables (``unit`` tables, rows written)."""

    object: str
    nodes_hydrated: int
    nodes_total: int
    records_read: int
    hydrated: bool
    unit: str = "nodes"
    # Hydration: updates the LIR nodes processed and the estimate for hydration
    # (sums over nodes and workers; 0, 0 without an estimate), and the time left
    # in ms at the rate so far (None: no rate yet; 0 once hydrated).
    records_done: int = 0
    records_estimated: int = 0
    eta_ms: int | None = None


Event = Description | RowBatch | Complete | Notice | Failure | Progress


@dataclass
class Streaming:
    """A statement whose events come as they happen (SUBSCRIBE, DDL that reports progress).

    The stream ends with a ``Complete`` or a ``Failure``; closing it early
    (the client went away) runs its clean-up.
    """

    stream: AsyncIterator[Event]


@dataclass
class StatementResult:
    """The outcome of one statement: rows (when it returns any) and its tag."""

    tag: str
    columns: tuple[Column, ...] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)

    def events(self, batch_size: int = 500) -> list[Event]:
        events: list[Event] = list(self.notices)
        if self.columns is not None:
            events.append(Description(self.columns))
            for start in range(0, len(self.rows), batch_size):
                events.append(RowBatch(self.rows[start : start + batch_size]))
        events.append(Complete(self.tag))
        return events
