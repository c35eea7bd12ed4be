"""A real PostgreSQL for tests: the ``postgres_url`` and ``postgres_catalog`` fixtures.

``postgres_url`` (session) is a fresh, empty database, found in this order:

1. ``LOUPE_TEST_POSTGRES_URL``, used as given;
2. the local server at 127.0.0.1:5432 (user ``postgres``), where a uniquely
   named database is created for the session and dropped at its end;
3. a temporary cluster of its own: ``initdb`` and ``postgres`` from
   ``/usr/lib/postgresql/*/bin`` in a temporary directory on a free port (as
   the ``postgres`` user when running as root: PostgreSQL refuses root),
   stopped and removed at the end, and killed with the test process if that
   dies first;
4. otherwise every test that asks for it is skipped, saying why.

``postgres_catalog`` (per test) points the ``stash-postgres`` catalog backend
at a fresh schema of that database through its environment variables, so
backends built by name (``create_backend``) use it; the schema is dropped
afterwards. The helpers below serve the benchmarks too.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from loupe.common.nats_server import die_with_parent, free_port

TEST_URL_ENV = "LOUPE_TEST_POSTGRES_URL"
LOCAL_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# The stash-postgres backend's settings (see loupe.catalog.backends.postgres).
CATALOG_URL_ENV = "LOUPE_CATALOG_POSTGRES_URL"
CATALOG_SCHEMA_ENV = "LOUPE_CATALOG_POSTGRES_SCHEMA"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL could be found or started; the message says what was tried."""


def reachable(url: str, timeout: float = 2.0) -> bool:
    """Whether a connection to ``url`` succeeds within ``timeout`` seconds."""
    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout))):
            return True
    except psycopg.Error:
        return False


def with_database(url: str, database: str) -> str:
    """``url`` with its database replaced (URLs of the form scheme://authority/db)."""
    base, _, _ = url.partition("?")
    scheme, _, rest = base.partition("://")
    authority = rest.split("/", 1)[0]
    return f"{scheme}://{authority}/{database}"


@contextlib.contextmanager
def scratch_database(admin_url: str, prefix: str = "loupe_test") -> Iterator[str]:
    """A new, uniquely named database on ``admin_url``'s server, dropped at exit."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            # FORCE: connections a test left open must not keep the database alive.
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def find_postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that has initdb and postgres."""
    candidates = [
        Path(path).parent
        for path in glob.glob("/usr/lib/postgresql/*/bin/initdb")
        if (Path(path).parent / "postgres").exists()
    ]

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in bin_dir.parent.name.split(".") if part.isdigit())

    return max(candidates, key=version, default=None)


def _unprivileged_user() -> pwd.struct_passwd | None:
    """The user to run PostgreSQL as when we are root (it refuses to run as root)."""
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    return None


class TemporaryPostgresCluster:
    """A throwaway PostgreSQL cluster: ``initdb`` in a temporary directory, one
    ``postgres`` child process on a free loopback port, removed by ``stop``.

    Not durable (fsync off): it is for tests. Started as the ``postgres`` (or
    ``nobody``) user when running as root. The server process dies with us.
    """

    def __init__(self, bin_dir: Path | None = None, *, port: int = 0) -> None:
        found = bin_dir or find_postgres_bin()
        if found is None:
            raise PostgresUnavailable("no initdb under /usr/lib/postgresql/*/bin")
        self.bin_dir = Path(found)
        self.port = port or free_port()
        self.root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._user = _unprivileged_user() if os.geteuid() == 0 else None
        if os.geteuid() == 0 and self._user is None:
            raise PostgresUnavailable("running as root and no postgres or nobody user to drop to")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run_as(self) -> dict[str, object]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 30.0) -> None:
        # Not under pytest's tmp dirs: those are private to root.
        self.root = Path(tempfile.mkdtemp(prefix="loupe-postgres-"))
        if self._user is not None:
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        data = self.root / "data"
        initdb = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            cwd=self.root,
            capture_output=True,
            check=False,
            **self._run_as(),  # type: ignore[call-overload]
        )
        if initdb.returncode != 0:
            self._remove()
            raise PostgresUnavailable(f"initdb failed: {initdb.stderr.decode(errors='replace')}")
        log = (self.root / "postgres.log").open("wb")
        # postgres itself, not pg_ctl: a direct child can be made to die with us.
        self.process = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.root}",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
            ],
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            **self._run_as(),  # type: ignore[call-overload]
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = (self.root / "postgres.log").read_text(errors="replace")
                self.stop()
                raise PostgresUnavailable(f"postgres exited at start: {output[-2000:]}")
            if reachable(self.url, timeout=1):
                return
            time.sleep(0.1)
        self.stop()
        raise PostgresUnavailable(f"postgres did not accept connections within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGINT is PostgreSQL's fast shutdown: clients are disconnected.
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        self._remove()

    def _remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> TemporaryPostgresCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def postgres_database(*, allow_env: bool = True, allow_local: bool = True) -> Iterator[str]:
    """A fresh, empty database's URL, by the rules of ``postgres_url``.

    Raises ``PostgresUnavailable`` naming everything tried when none works.
    """
    given = os.environ.get(TEST_URL_ENV) if allow_env else None
    if given:
        yield given
        return
    tried = [f"{TEST_URL_ENV} is not set"]
    if allow_local:
        if reachable(LOCAL_ADMIN_URL):
            with scratch_database(LOCAL_ADMIN_URL) as url:
                yield url
            return
        tried.append("no server at 127.0.0.1:5432 (user postgres)")
    try:
        cluster = TemporaryPostgresCluster()
        cluster.start()
    except (PostgresUnavailable, OSError) as error:
        tried.append(f"no temporary cluster ({error})")
        raise PostgresUnavailable("no PostgreSQL for the tests: " + "; ".join(tried)) from error
    try:
        with scratch_database(cluster.url) as url:
            yield url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for the test session (see the module doc)."""
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(postgres_database())
        except PostgresUnavailable as error:
            pytest.skip(str(error))
        yield url


@pytest.fixture
def postgres_catalog(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """A fresh schema for the ``stash-postgres`` catalog, set in its environment variables.

    Yields the backend's options (``postgres_url``, ``postgres_schema``).
    """
    schema = f"loupe_catalog_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv(CATALOG_URL_ENV, postgres_url)
    monkeypatch.setenv(CATALOG_SCHEMA_ENV, schema)
    yield {"postgres_url": postgres_url, "postgres_schema": schema}
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
