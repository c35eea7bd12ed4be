"""Who is looking: console sessions behind a cookie, with the SQL roles' authentication.

Logging in opens a connection to the coordinator's pgwire port with the user's name
and password, so the coordinator decides (trust, cleartext or SCRAM, role
passwords, ``LOGIN``) exactly as for psql. A session is a random token in an
``HttpOnly``, ``SameSite=Strict`` cookie, mapped in memory to the user's
``SqlSession``; it ends at logout, after ``session_timeout`` seconds unused, or when
the console restarts (log in again).

On a laptop (the coordinator's ``trust``), ``auto_login_user`` (default
``materialize``) is logged in without a form: the console tries it once per visit
without a password and shows the form when the coordinator asks for one.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from loupe.common.logging import get_logger
from loupe.console.sql import LoginRefused, SqlSession

log = get_logger(__name__)

COOKIE = "loupe_console_session"


@dataclass
class ConsoleSession:
    token: str
    user: str
    sql: SqlSession
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)


class Sessions:
    """Console sessions by token."""

    def __init__(self, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self._by_token: dict[str, ConsoleSession] = {}

    def get(self, token: str | None) -> ConsoleSession | None:
        session = self._by_token.get(token or "")
        if session is not None:
            session.last_used = time.monotonic()
        return session

    async def login(self, sql: SqlSession) -> ConsoleSession:
        """Check ``sql``'s credentials with the coordinator; ``LoginRefused`` if wrong."""
        await sql.check()
        session = ConsoleSession(secrets.token_urlsafe(32), sql.user, sql)
        self._by_token[session.token] = session
        log.info("console login", user=sql.user)
        return session

    async def logout(self, token: str | None) -> None:
        session = self._by_token.pop(token or "", None)
        if session is not None:
            await session.sql.close()

    async def reap(self) -> None:
        """End sessions unused for ``session_timeout``; close idle connections of the rest."""
        now = time.monotonic()
        for token, session in list(self._by_token.items()):
            if now - session.last_used >= self.session_timeout:
                await self.logout(token)
            else:
                await session.sql.close_idle()

    async def close(self) -> None:
        for token in list(self._by_token):
            await self.logout(token)

    def __len__(self) -> int:
        return len(self._by_token)

    @property
    def open_connections(self) -> int:
        return sum(session.sql.open_connections for session in self._by_token.values())


__all__ = ["COOKIE", "ConsoleSession", "LoginRefused", "Sessions"]
