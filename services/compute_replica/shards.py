"""What a replica takes for a shard that does not exist yet."""

from __future__ import annotations

# What a shard's upper is taken to be while the shard does not exist yet: it
# has never been written, exactly like a shard whose upper is 0.
NEVER_WRITTEN = 0
