"""The coordinator: client sessions, SQL parsing and planning, query routing.

``CoordinatorService`` is the process; ``Coordinator`` runs statements;
``loupe.coordinator.sql`` parses and resolves SQL.
"""

from loupe.coordinator.coordinator import Coordinator, CoordinatorConfig
from loupe.coordinator.sequencer.cluster import catalog_op
from loupe.coordinator.service import CoordinatorService, CoordinatorSettings
from loupe.coordinator.session import Session, SessionManager

__all__ = [
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorService",
    "CoordinatorSettings",
    "Session",
    "SessionManager",
    "catalog_op",
]
