"""Opened persist locations, shared by everything on a replica that reads shards."""

from __future__ import annotations

import threading

from loupe.compute_replica.protocol import StorageLocation
from loupe.persist import Shard, open_location
from loupe.persist.location import Blob, Consensus

# What a shard's upper is taken to be while the shard does not exist yet: it
# has never been written, exactly like a shard whose upper is 0.
NEVER_WRITTEN = 0


class ShardCache:
    """Opened blob/consensus stores by URI, shared by every reader (thread-safe).

    Opening a location touches the disk (directories, SQLite); doing it once
    per location rather than once per read keeps sources and sinks cheap.
    """

    def __init__(self) -> None:
        self._locations: dict[StorageLocation, tuple[Blob, Consensus]] = {}
        self._lock = threading.Lock()

    def shard(self, shard_id: str, location: StorageLocation) -> Shard:
        with self._lock:
            opened = self._locations.get(location)
            if opened is None:
                opened = open_location(location.blob_uri, location.consensus_uri)
                self._locations[location] = opened
        return Shard(shard_id, *opened)
