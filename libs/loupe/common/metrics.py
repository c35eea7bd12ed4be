"""Prometheus metrics shared by all services, and the per-service endpoint."""

from __future__ import annotations

from prometheus_client import Counter, start_http_server

MALFORMED_MESSAGES = Counter(
    "loupe_bus_malformed_messages",
    "Messages on the bus that could not be decoded and were dropped",
    ["subject"],
)
REQUESTS = Counter(
    "loupe_bus_requests",
    "Requests handled over the NATS transport",
    ["method", "outcome"],
)


def serve_metrics(port: int, host: str = "127.0.0.1") -> int:
    """Serve /metrics; returns the bound port (useful when ``port`` is 0)."""
    server, _thread = start_http_server(port, addr=host)
    return int(server.server_address[1])
