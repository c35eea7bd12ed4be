"""JetStream names shared by the coordinator's statement logger and the storage writer."""

from __future__ import annotations

# Sessions the statement log may not collect yet: key ``<coordinator>.<session id>``
# while the session is open (put and purged by the coordinator's statement logger).
LIVE_SESSIONS_BUCKET = "loupe_statement_log_sessions"
LIVE_SESSIONS_STREAM = f"KV_{LIVE_SESSIONS_BUCKET}"
