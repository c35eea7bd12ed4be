"""The console's aiohttp application: sessions, templates, static files, the pages.

Every page handler gets the viewer's ``ConsoleSession`` from ``session_of(request)``
(the middleware sends a visitor without one to ``/login``, or logs in
``auto_login_user`` where the coordinator trusts it), runs its ``Query``s with
``session.sql.query_all(...)`` and answers ``render(request, "page.html", ...)``.
Live pages stream a ``SUBSCRIBE`` with ``server_sent_events``.

The console is read-only: its only ``POST``s are login and logout, and it runs no
SQL but its own queries. It sends a strict Content-Security-Policy (scripts and
styles from the console itself only; nothing from a CDN, so it works offline).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from aiohttp import web

from loupe.common.logging import get_logger
from loupe.console import format as fmt
from loupe.console.auth import COOKIE, ConsoleSession, Sessions
from loupe.console.settings import ConsoleSettings
from loupe.console.sql import LoginRefused, Query, SqlError, SqlSession

log = get_logger(__name__)

HERE = Path(__file__).parent
SETTINGS = web.AppKey("settings", ConsoleSettings)
SESSIONS = web.AppKey("sessions", Sessions)
TEMPLATES = web.AppKey("templates", jinja2.Environment)
SESSION = web.RequestKey("console_session", ConsoleSession)

# Paths a visitor without a session may open.
PUBLIC = ("/login", "/static/", "/healthz")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(settings: ConsoleSettings) -> web.Application:
    from loupe.console import pages

    app = web.Application(middlewares=[security_headers, authenticate])
    app[SETTINGS] = settings
    app[SESSIONS] = Sessions(settings.session_timeout)
    app[TEMPLATES] = templates()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/", home)
    app.router.add_static("/static/", HERE / "static")
    for module in pages.modules():
        app.add_routes(module.routes)
    app.cleanup_ctx.append(reaper)
    return app


def templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(fmt.FILTERS)
    environment.globals.update(static=static_url, errors=errors, sql_texts=sql_texts)
    return environment


@functools.cache
def static_url(name: str) -> str:
    """``/static/<name>`` with a digest of its content, so a new build is never stale."""
    digest = hashlib.sha256((HERE / "static" / name).read_bytes()).hexdigest()[:12]
    return f"/static/{name}?v={digest}"


def errors(results: Iterable[Any]) -> list[SqlError]:
    """The failed queries of a panel (a ``query_all`` answer is a Result or a SqlError)."""
    return [result for result in results if isinstance(result, SqlError)]


def sql_texts(results: Iterable[Any]) -> list[str]:
    """What "Show SQL" shows for a panel: each query with its parameters written in."""
    texts = []
    for result in results:
        query = getattr(result, "query", result)
        if isinstance(query, Query):
            texts.append(query.pasteable())
    return texts


async def reaper(app: web.Application) -> AsyncIterator[None]:
    """Close idle connections and end stale sessions in the background."""
    sessions = app[SESSIONS]

    async def loop() -> None:
        while True:
            await asyncio.sleep(max(1.0, app[SETTINGS].connection_idle_close / 3))
            try:
                await sessions.reap()
            except Exception:  # keep reaping; one bad connection must not stop it
                log.exception("console session reaper failed")

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await sessions.close()


# -- middleware -----------------------------------------------------------------


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
    return response


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith(PUBLIC):
        return await handler(request)
    sessions = request.app[SESSIONS]
    session = sessions.get(request.cookies.get(COOKIE))
    fresh = None
    if session is None:
        fresh = session = await auto_login(request)
    if session is None:
        if wants_html(request):
            raise web.HTTPSeeOther("/login?next=" + quote(request.path_qs, safe=""))
        raise web.HTTPUnauthorized(text="log in first\n")
    request[SESSION] = session
    try:
        response = await handler(request)
    except web.HTTPException as raised:
        # A redirect (``/`` -> ``/clusters``) keeps the session it logged in, or
        # the next request would log in again and leave this one orphaned.
        if fresh is not None:
            set_cookie(raised, fresh)
        raise
    if fresh is not None and not response.prepared:
        set_cookie(response, fresh)
    return response


async def auto_login(request: web.Request) -> ConsoleSession | None:
    settings = request.app[SETTINGS]
    if not settings.auto_login_user:
        return None
    try:
        return await request.app[SESSIONS].login(sql_session(settings, settings.auto_login_user))
    except LoginRefused:
        return None
    except SqlError as error:
        raise web.HTTPServiceUnavailable(text=f"{error.message}\n") from None


def wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return request.method == "GET" and ("text/html" in accept or not accept or "*/*" in accept)


def set_cookie(response: web.StreamResponse, session: ConsoleSession) -> None:
    response.set_cookie(COOKIE, session.token, httponly=True, samesite="Strict", path="/")


def sql_session(settings: ConsoleSettings, user: str, password: str | None = None) -> SqlSession:
    return SqlSession(
        host=settings.coordinator_host,
        port=settings.coordinator_pgwire_port,
        user=user,
        password=password,
        max_connections=settings.session_connections,
        idle_close=settings.connection_idle_close,
        statement_timeout=settings.statement_timeout,
        transaction_isolation=settings.transaction_isolation,
    )


def session_of(request: web.Request) -> ConsoleSession:
    session: ConsoleSession = request[SESSION]
    return session


# -- rendering ------------------------------------------------------------------


def render(
    request: web.Request, template: str, *, status: int = 200, **context: Any
) -> web.Response:
    """``template`` rendered with ``context`` plus ``user``, ``path`` and ``now``."""
    session = request.get(SESSION)
    page = request.app[TEMPLATES].get_template(template)
    body = page.render(
        user=session.user if session else None,
        path=request.path,
        query_args=dict(request.query),
        now=datetime.datetime.now(datetime.UTC),
        **context,
    )
    return web.Response(text=body, content_type="text/html", charset="utf-8", status=status)


async def server_sent_events(
    request: web.Request, events: AsyncIterator[tuple[str, Any]]
) -> web.StreamResponse:
    """Stream ``(event, data)`` pairs as server-sent events (data as JSON) until the
    page goes away (the iterator is closed then, ending its SUBSCRIBE)."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
            **SECURITY_HEADERS,
        }
    )
    await response.prepare(request)
    try:
        await response.write(b": connected\n\n")
        async for event, data in events:
            payload = json.dumps(data, default=fmt.json_default)
            await response.write(f"event: {event}\ndata: {payload}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    except SqlError as error:
        with contextlib.suppress(ConnectionResetError):
            payload = json.dumps({"message": error.message, "sqlstate": error.sqlstate})
            await response.write(f"event: sql-error\ndata: {payload}\n\n".encode())
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    return response


# -- handlers -------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "sessions": len(request.app[SESSIONS])})


async def home(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/clusters")


def safe_next(target: str | None) -> str:
    """Only a path of this console (no scheme, no host) is followed after login."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


async def login_form(request: web.Request) -> web.Response:
    target = safe_next(request.query.get("next"))
    return render(request, "login.html", error=None, next=target, login_user="")


async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    user = str(form.get("user", "")).strip()
    password = str(form.get("password", ""))
    target = safe_next(str(form.get("next", "/")))
    if not user:
        return render(
            request,
            "login.html",
            status=400,
            error="Enter a user name.",
            next=target,
            login_user="",
        )
    settings = request.app[SETTINGS]
    try:
        session = await request.app[SESSIONS].login(sql_session(settings, user, password or None))
    except LoginRefused as error:
        log.info("console login refused", user=user, sqlstate=error.sqlstate)
        return render(
            request,
            "login.html",
            status=401,
            error=f"Login refused: {error.message}",
            next=target,
            login_user=user,
        )
    except SqlError as error:
        return render(
            request, "login.html", status=503, error=error.message, next=target, login_user=user
        )
    response = web.HTTPSeeOther(target)
    set_cookie(response, session)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    await request.app[SESSIONS].logout(request.cookies.get(COOKIE))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response
