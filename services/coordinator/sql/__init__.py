"""SQL for the coordinator: parsing (Loupe DDL + sqlglot) and name resolution."""

from loupe.coordinator.sql.parser import parse, parse_interval_ns, parse_one
from loupe.coordinator.sql.resolve import ResolvedQuery, resolve_query

__all__ = ["ResolvedQuery", "parse", "parse_interval_ns", "parse_one", "resolve_query"]
