"""The coordinator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

STATEMENTS = Counter(
    "loupe_coordinator_statements",
    "Statements run, by kind and outcome (ok, error, canceled)",
    ["kind", "outcome"],
)
STATEMENT_SECONDS = Histogram(
    "loupe_coordinator_statement_seconds", "Time to run a statement, by kind", ["kind"]
)
SESSIONS = Gauge("loupe_coordinator_sessions", "Open client sessions")
CATALOG_APPENDS = Counter(
    "loupe_coordinator_catalog_appends",
    "Batches of catalog-derived rows appended to storage",
)
CATALOG_RESYNCS = Counter(
    "loupe_coordinator_catalog_resyncs",
    "Times the catalog relations were read from storage again after an unconfirmed append"
    " (behind a barrier), so the next append brings storage to the catalog",
)
CATALOG_COMMITS_MISSED = Counter(
    "loupe_coordinator_catalog_commits_missed",
    "Catalog commits noticed missing from loupe.catalog.v1.changes (a hole in audit event ids)",
)
TABLE_WRITES = Counter(
    "loupe_coordinator_table_writes",
    "Writes to user tables committed, by statement (insert, update, delete)",
    ["kind"],
)
TABLE_WRITE_RETRIES = Counter(
    "loupe_coordinator_table_write_retries",
    "Table writes planned again after another writer moved the table's upper first",
)
TABLE_TICKS = Counter(
    "loupe_coordinator_table_ticks",
    "Ticks moving the timestamp oracle and every table's upper, by outcome",
    ["outcome"],
)
AUTHENTICATION_FAILURES = Counter(
    "loupe_coordinator_authentication_failures",
    "Sessions refused: unknown role, wrong password or a role that may not log in",
)
SESSIONS_REAPED = Counter(
    "loupe_coordinator_sessions_reaped",
    "Sessions closed for being idle longer than idle_session_timeout",
)
