"""Auto-login (trust) logs a visitor in once: a redirect carries the session's cookie.

Opening ``/`` redirects to ``/clusters``; the session logged in for ``/`` must be
the one ``/clusters`` finds, or every first visit would log in twice and leave a
session (and its coordinator connection) behind. No coordinator here: logging
in is replaced by a counter.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from loupe.console.app import SESSIONS, create_app
from loupe.console.auth import COOKIE, ConsoleSession, Sessions
from loupe.console.settings import ConsoleSettings


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> Any:
    logins: list[str] = []

    async def login(self: Sessions, sql: Any) -> ConsoleSession:
        session = ConsoleSession(f"token-{len(logins)}", sql.user, sql)
        logins.append(sql.user)
        self._by_token[session.token] = session
        return session

    monkeypatch.setattr(Sessions, "login", login)
    app = create_app(ConsoleSettings(auto_login_user="materialize"))

    @web.middleware
    async def no_pages(request: web.Request, handler: Any) -> web.StreamResponse:
        # /clusters without its SQL: the session is all this test looks at.
        if request.path == "/clusters":
            return web.Response(text="clusters")
        return await handler(request)  # type: ignore[no-any-return]

    app.middlewares.append(no_pages)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client, logins


async def test_the_redirect_from_home_keeps_the_session_it_logged_in(client: Any) -> None:
    client, logins = client
    response = await client.get("/", headers={"Accept": "text/html"})
    assert response.status == 200
    assert str(response.url).endswith("/clusters")
    assert [r.status for r in response.history] == [303]
    assert COOKIE in response.history[0].cookies
    assert logins == ["materialize"]
    assert len(client.server.app[SESSIONS]) == 1
    # The cookie is HttpOnly and SameSite=Strict on the redirect too.
    cookie = response.history[0].cookies[COOKIE]
    assert cookie["httponly"]
    assert cookie["samesite"] == "Strict"
