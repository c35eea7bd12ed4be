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
SESSIONS_REFUSED = Counter(
    "loupe_coordinator_sessions_refused",
    "Sessions refused (53300) because max_connections sessions were open",
)
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
# The admission queues (loupe.coordinator.admission): peek:<cluster id>, ddl, table_write.
QUEUE_WAITING = Gauge(
    "loupe_coordinator_queue_waiting",
    "Statements waiting for a place in a queue (peek:<cluster id>, ddl, table_write)",
    ["queue"],
)
QUEUE_IN_FLIGHT = Gauge(
    "loupe_coordinator_queue_in_flight",
    "Statements holding a place in a queue: peeks sent, DDL or table writes running",
    ["queue"],
)
QUEUE_ADMITTED = Counter(
    "loupe_coordinator_queue_admitted", "Statements let into a queue's work", ["queue"]
)
QUEUE_WAITED = Counter(
    "loupe_coordinator_queue_waited",
    "Statements that had to wait for a place in a queue (the queue was busy)",
    ["queue"],
)
QUEUE_REJECTED = Counter(
    "loupe_coordinator_queue_rejected",
    "Statements refused (53000) because a queue already had its most waiting statements",
    ["queue"],
)
QUEUE_WAIT_SECONDS = Histogram(
    "loupe_coordinator_queue_wait_seconds",
    "Time a statement waited for a place in a queue",
    ["queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
SERVICE_RETRIES = Counter(
    "loupe_coordinator_service_retries",
    "Calls to another service asked again because it was away or slow, by call",
    ["call"],
)
CATALOG_RELATIONS_BEHIND = Gauge(
    "loupe_coordinator_catalog_relations_behind",
    "1 while a DDL commit is not yet in mz_catalog's relations in storage (catching up)",
)
CATALOG_RELATIONS_RETRIES = Counter(
    "loupe_coordinator_catalog_relations_retries",
    "Attempts to bring the catalog relations up to date that failed and were tried again",
)
DDL_ANSWERED_BEHIND = Counter(
    "loupe_coordinator_ddl_answered_behind",
    "DDL statements that answered (with a NOTICE) before mz_catalog showed their commit",
)
PEEKS_DIRECT = Counter(
    "loupe_coordinator_peeks_direct",
    "Peeks sent to a cluster's replicas by the coordinator itself (Peek.direct), by outcome:"
    " answered, or asked of the controller instead (unrouted, timeout, unavailable, error),"
    " or ended by the statement (canceled, dropped)",
    ["outcome"],
)
