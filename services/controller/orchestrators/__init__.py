"""Orchestrators: the plugins that run compute replicas (``loupe.orchestrators``).

The controller picks one by its ``orchestrator`` setting through
``loupe.common.plugins.Registry``; ``process`` (child processes) is built in.
"""

from loupe.controller.orchestrators.base import (
    ORCHESTRATORS,
    Orchestrator,
    ReplicaEvent,
    ReplicaListener,
    ReplicaSpec,
    load_orchestrator,
)

__all__ = [
    "ORCHESTRATORS",
    "Orchestrator",
    "ReplicaEvent",
    "ReplicaListener",
    "ReplicaSpec",
    "load_orchestrator",
]
