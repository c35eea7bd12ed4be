"""The console's settings."""

from __future__ import annotations

import dataclasses

from loupe.common.settings import BaseSettings


@dataclasses.dataclass
class ConsoleSettings(BaseSettings):
    """Settings of the console (section ``[console]``, env ``LOUPE_<FIELD>``)."""

    # Address and port the console's HTTP server listens on; port 0 picks a free one.
    http_host: str = "127.0.0.1"
    http_port: int = 6876
    # The coordinator's PostgreSQL wire protocol, which every page's SQL goes through.
    coordinator_host: str = "127.0.0.1"
    coordinator_pgwire_port: int = 6877
    # Logged in without a form when the coordinator trusts it (a laptop); '' always asks.
    auto_login_user: str = "materialize"
    # Seconds a console session may go unused before it ends (log in again).
    session_timeout: float = 8 * 3600.0
    # Connections to the coordinator one console session may hold at once, and the
    # seconds an unused one stays open (none stay open once nobody looks).
    session_connections: int = 4
    connection_idle_close: float = 30.0
    # statement_timeout of the console's queries.
    statement_timeout: str = "30s"
    # transaction_isolation of the console's queries: "strict serializable" sees
    # every write acknowledged before the page asked; "serializable" reads each
    # query's inputs at their latest complete time, which waits for nothing but can
    # be older than the present by as much as the least recently written input.
    transaction_isolation: str = "strict serializable"
    # Seconds between a live page's polls of its SUBSCRIBE (FETCH … WITH (timeout)).
    live_poll: float = 0.25
