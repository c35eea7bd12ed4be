"""The compute replica: one process per replica of a cluster.

It speaks the compute protocol (``protocol.py``) with the controller over
NATS, heartbeats its metrics, runs dataflows over storage collections and
answers peeks of their indexes.

Names are imported on first use: the CLI must be able to size polars' thread
pool (``POLARS_MAX_THREADS``) before polars is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ComputeReplica": "loupe.compute_replica.replica",
    "ComputeReplicaSettings": "loupe.compute_replica.settings",
    "command_subject": "loupe.compute_replica.protocol",
    "response_subject": "loupe.compute_replica.protocol",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
