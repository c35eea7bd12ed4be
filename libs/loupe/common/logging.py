"""One ``configure_logging()`` for every Loupe process.

JSON lines in production, readable text on a terminal; ISO UTC timestamps;
context variables (``replica_id``, ``session_id``, ``request_id``) bound with
``bind_context`` travel into every line logged under them.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

bind_context = structlog.contextvars.bind_contextvars
clear_context = structlog.contextvars.clear_contextvars


def configure_logging(
    level: str = "info", *, json: bool | None = None, service: str | None = None
) -> None:
    """Configure structlog and the stdlib root logger the same way.

    ``json`` defaults to "not a terminal"; ``NO_COLOR`` or a non-terminal
    disables colours.
    """
    if json is None:
        json = not sys.stderr.isatty()
    colors = sys.stderr.isatty() and "NO_COLOR" not in os.environ
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if service:
        shared.insert(0, _add_service(service))
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=colors)
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processors=[*shared, renderer], foreign_pre_chain=[])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING) if numeric < logging.WARNING else numeric)
    for noisy in ("py4j", "nats", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _add_service(service: str) -> Any:
    def add(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("service", service)
        return event

    return add


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
