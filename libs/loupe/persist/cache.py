"""Opened persist locations, shared by every reader of shards in a process."""

from __future__ import annotations

import threading
from typing import Protocol

from loupe.persist.location import Blob, Consensus, open_location
from loupe.persist.shard import Shard


class Location(Protocol):
    """Where shards live: anything naming a blob and a consensus store by URI."""

    @property
    def blob_uri(self) -> str: ...

    @property
    def consensus_uri(self) -> str: ...


class ShardCache:
    """Opened blob/consensus stores by URI, shared by every reader (thread-safe).

    Opening a location touches the disk (directories, SQLite); doing it once
    per location rather than once per read keeps sources, sinks and reads of
    shard frontiers cheap.
    """

    def __init__(self) -> None:
        self._locations: dict[tuple[str, str], tuple[Blob, Consensus]] = {}
        self._lock = threading.Lock()

    def shard(self, shard_id: str, location: Location) -> Shard:
        key = (location.blob_uri, location.consensus_uri)
        with self._lock:
            opened = self._locations.get(key)
            if opened is None:
                opened = self._locations[key] = open_location(*key)
        return Shard(shard_id, *opened)
