"""Compute compaction: the read policy of indexes and materialized views, and read holds.

The controller keeps each compute collection's since and replays a cluster's
dataflows to every new replica incarnation from it (``CommandHistory``). A
since that never moves makes a restarted replica rebuild every change since
the collection was created, one timestamp after another: the longer a system
runs, the longer a replica takes to come back. So the coordinator moves the
sinces on, as Materialize's read policies do: every ``interval`` seconds each
index's and materialized view's since becomes

    min(now - window, its write frontier - 1, the read holds)

where ``now`` is the oracle's read timestamp. ``window`` is how far back
``AS OF`` may read an index (Materialize's default compaction window is one
second). The write frontier bounds it because a replica that peeks at its
latest complete time (a serializable read) must find that time readable.

Read holds keep a since at or before what reads in flight use:

- every strict serializable read holds ``floor``: the oracle's timestamp the
  last round saw, which the read's own timestamp, chosen later, cannot be
  below (the oracle never goes back);
- an explicit transaction holds the timestamp it pinned, while it is open;
- a SUBSCRIBE holds the indexes it imports at its as_of, while it runs
  (a replica that restarts replays it from there).

A read that still misses (a serializable read at an input's latest time, a
race with another coordinator) gets the since error, and a strict serializable
read reads again later (``Compute.select``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Sinces move in whole steps of this many milliseconds: collections whose
# frontiers differ by less share one AllowCompaction.
GRANULE_MS = 1000


@dataclass(frozen=True)
class _Hold:
    timestamp: int
    ids: frozenset[str] | None  # None: every collection


class ReadHolds:
    """Timestamps that reads in flight use or may still choose, per collection."""

    def __init__(self) -> None:
        self._holds: dict[int, _Hold] = {}
        self._tokens = itertools.count()
        # The oracle's read timestamp at the last compaction round: no read that
        # starts now chooses an earlier one.
        self.floor = 0

    @contextlib.contextmanager
    def hold(
        self, timestamp: int | None = None, ids: Iterable[str] | None = None
    ) -> Iterator[None]:
        """Hold ``timestamp`` (default: ``floor``) for ``ids`` (default: all) while inside."""
        token = next(self._tokens)
        at = self.floor if timestamp is None else timestamp
        self._holds[token] = _Hold(at, None if ids is None else frozenset(ids))
        try:
            yield
        finally:
            del self._holds[token]

    def least(self, collection_id: str, also: Iterable[int] = ()) -> int | None:
        """The earliest time held for ``collection_id`` (``also``: more global holds)."""
        held = [
            h.timestamp for h in self._holds.values() if h.ids is None or collection_id in h.ids
        ]
        held += list(also)
        return min(held) if held else None

    def __len__(self) -> int:
        return len(self._holds)


def compaction_target(
    now: int, window_ms: int, write_frontier: int, held: int | None, since: int
) -> int | None:
    """The since to allow for one collection, or None when it should stay where it is."""
    target = min(now - window_ms, write_frontier - 1)
    if held is not None:
        target = min(target, held)
    target -= target % GRANULE_MS
    return target if target > since else None
