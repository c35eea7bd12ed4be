"""Storage collections: shards of immutable Parquet parts, changed by compare-and-set.

See DESIGN §3. ``Shard`` is the API; ``Blob`` and ``Consensus`` are plugins.
"""

from loupe.persist.location import Blob, Consensus, LocalBlob, SqliteConsensus, open_location
from loupe.persist.shard import (
    DIFF_COLUMN,
    TIMESTAMP_COLUMN,
    Part,
    Shard,
    ShardState,
    SinceError,
    UpperMismatch,
    consolidate,
    expand,
    parts_to_merge,
)

__all__ = [
    "DIFF_COLUMN",
    "TIMESTAMP_COLUMN",
    "Blob",
    "Consensus",
    "LocalBlob",
    "Part",
    "Shard",
    "ShardState",
    "SinceError",
    "SqliteConsensus",
    "UpperMismatch",
    "consolidate",
    "expand",
    "open_location",
    "parts_to_merge",
]
