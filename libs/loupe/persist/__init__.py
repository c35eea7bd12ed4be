"""Storage collections: shards of immutable Parquet parts, changed by compare-and-set.

See DESIGN §3. ``Shard`` is the API; ``Blob`` and ``Consensus`` are plugins
chosen by URI scheme (``open_location``; see ``loupe.persist.location``).
"""

from loupe.persist.listen import ListenBatch, Listener, nats_upper_notifier, upper_subject
from loupe.persist.location import (
    Blob,
    Consensus,
    LocalBlob,
    SqliteConsensus,
    ValueTooLarge,
    open_blob,
    open_consensus,
    open_location,
)
from loupe.persist.shard import (
    DIFF_COLUMN,
    TIMESTAMP_COLUMN,
    Append,
    Part,
    Shard,
    ShardState,
    SinceError,
    UpperMismatch,
    append_all,
    consolidate,
    expand,
    parts_to_merge,
    read_states,
)

__all__ = [
    "DIFF_COLUMN",
    "TIMESTAMP_COLUMN",
    "Append",
    "Blob",
    "Consensus",
    "ListenBatch",
    "Listener",
    "LocalBlob",
    "Part",
    "Shard",
    "ShardState",
    "SinceError",
    "SqliteConsensus",
    "UpperMismatch",
    "ValueTooLarge",
    "append_all",
    "consolidate",
    "expand",
    "nats_upper_notifier",
    "open_blob",
    "open_consensus",
    "open_location",
    "parts_to_merge",
    "read_states",
    "upper_subject",
]
