"""The replica's memory budget: what its dataflows and peeks may hold (issue 11).

A replica of a size (``loupe.sizes``) gets a budget in bytes. The engine
accounts, per step, for what the instance holds (``ComputeInstance.footprint``:
arrangements, index histories, source logs, by polars' ``estimated_size``) plus
what the step is about to materialize, and refuses to go past the budget:

- before a join materializes its output, it estimates the output's size
  (``join_rows``: exact match counts from per-key counts, times the row
  width) and reserves it; a reservation past the budget raises 53200;
- after every dataflow step the instance checks its footprint again;
- a peek estimates its result (rows times width, plus the Python values
  handed to the client) before building it.

A dataflow that runs out fails with 53200 for good: its state is released
(``Dataflow.release``) and every read of it answers the error until it is
dropped; the instance's other dataflows keep running. A peek that runs out
just fails. Allocations the accounting does not see (operators' temporaries)
are what the replica process's OS limit is for (``loupe.sizes.os_limit_bytes``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from loupe.common.errors import LoupeError, SqlState
from loupe.sizes import format_bytes

# A Python value (a tuple slot and its object) as a peek hands rows to the client.
PYTHON_VALUE_BYTES = 64

_active: ContextVar[Reservation | None] = ContextVar("memory_reservation", default=None)


def out_of_memory(what: str, needed: int, held: int, limit: int) -> LoupeError:
    """The 53200 of ``what`` needing ``needed`` more bytes while ``held`` of ``limit`` are held."""
    return LoupeError(
        SqlState.OUT_OF_MEMORY,
        f"out of memory: {what} needs about {format_bytes(needed)}, more than the"
        f" replica's memory budget of {format_bytes(limit)} allows",
        detail=f"The replica holds {format_bytes(held)} already.",
        hint="Use a larger cluster size (mz_cluster_replica_sizes), or reduce the data"
        " the query keeps (filter or aggregate before joining).",
    )


@dataclass
class Reservation:
    """What one dataflow step (or peek) may add to what the instance holds."""

    budget: MemoryBudget
    what: str
    held: int
    reserved: int = 0

    def reserve(self, needed: int) -> None:
        """Count ``needed`` more bytes against the budget; 53200 if they do not fit."""
        limit = self.budget.limit_bytes
        if limit and self.held + self.reserved + needed > limit:
            raise out_of_memory(self.what, self.reserved + needed, self.held, limit)
        self.reserved += needed

    def fits(self, needed: int) -> bool:
        limit = self.budget.limit_bytes
        return not limit or self.held + self.reserved + needed <= limit


class MemoryBudget:
    """A replica's budget; ``held`` measures what the instance holds now."""

    def __init__(self, limit_bytes: int, held: Callable[[], int]) -> None:
        # 0: no budget (nothing is refused, nothing measured).
        self.limit_bytes = limit_bytes
        self._held = held

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def held(self) -> int:
        return self._held() if self.enabled else 0

    @contextlib.contextmanager
    def charging(self, what: str, held: int | None = None) -> Iterator[Reservation]:
        """Within the block, ``reserve`` charges ``what``: the operators' hook into the budget.

        ``held`` is what the instance holds now, if the caller knows (else measured).
        """
        held = self.held() if held is None else held
        reservation = Reservation(self, what, held)
        token = _active.set(reservation if self.enabled else None)
        try:
            yield reservation
        finally:
            _active.reset(token)


def return_freed() -> None:
    """Give memory freed by a release back to the OS now, so the replica's RSS goes down.

    Arrow's allocator keeps freed pages for reuse (a source log of 200 MB
    stays resident after it is dropped until this); polars' returns them by
    itself after a few seconds.
    """
    pa.default_memory_pool().release_unused()


def reserve(needed: int) -> None:
    """Charge ``needed`` bytes to the step running now (no-op outside one, or without budget)."""
    reservation = _active.get()
    if reservation is not None:
        reservation.reserve(needed)


def row_bytes(frame: pl.DataFrame) -> float:
    """The average in-memory width of a row of ``frame`` (0 for an empty frame)."""
    return frame.estimated_size() / frame.height if frame.height else 0.0


def join_rows(left: pl.DataFrame, right: pl.DataFrame, on: Sequence[str]) -> int:
    """How many rows the inner join of ``left`` and ``right`` on ``on`` has (a cross join if empty).

    Exact: the sum over keys of the product of both sides' counts of that
    key, computed on the counts, never on the joined rows.
    """
    if not on:
        return left.height * right.height
    counts = left.group_by(on).len("_l").join(right.group_by(on).len("_r"), on=on, how="inner")
    if counts.height == 0:
        return 0
    total = counts.select((pl.col("_l").cast(pl.Int64) * pl.col("_r")).sum()).item()
    return int(total)


def reserve_join(left: pl.DataFrame, right: pl.DataFrame, on: Sequence[str]) -> None:
    """Reserve what joining ``left`` and ``right`` on ``on`` will materialize.

    The product of the heights bounds the row count (a cross join's is
    exact). A keyed join whose bound fits is charged the larger side, the
    usual size of a join on a key (the check after the step sees what it
    really kept); only when the bound does not fit is the exact count
    computed (a group-by per side).
    """
    reservation = _active.get()
    if reservation is None or not left.height or not right.height:
        return
    width = row_bytes(left) + row_bytes(right)
    bound = left.height * right.height
    if on and reservation.fits(int(bound * width)):
        reservation.reserve(int(max(left.height, right.height) * width))
        return
    rows = join_rows(left, right, on) if on else bound
    reservation.reserve(int(rows * width))
