"""``stash-postgres`` on a real PostgreSQL: fencing across processes, atomic
fence checks, refusal of foreign schemas, and the test cluster helper.

The behaviour every backend shares is in ``test_store.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from loupe.catalog import CatalogCorruptError, CatalogError, FencedError, FenceToken
from loupe.catalog.backends.postgres import DEFAULT_SCHEMA, PostgresCatalogBackend
from loupe.catalog.durable import BACKENDS
from loupe.catalog.migrations import CATALOG_VERSION
from loupe.catalog.testing import create_cluster
from loupe.common.nats_server import die_with_parent, free_port
from loupe.testing import assert_eventually
from loupe.testing.postgres import (
    TemporaryPostgresCluster,
    find_postgres_bin,
    postgres_database,
)

Options = dict[str, str]


@pytest.fixture
def backends(postgres_catalog: Options) -> Iterator[list[PostgresCatalogBackend]]:
    """Backends made by ``make``, closed after the test."""
    made: list[PostgresCatalogBackend] = []
    yield made
    for backend in made:
        backend.close()


def make(
    made: list[PostgresCatalogBackend], options: Options, **kwargs: int
) -> PostgresCatalogBackend:
    backend = PostgresCatalogBackend(None, **options, **kwargs)  # type: ignore[arg-type]
    made.append(backend)
    return backend


def sql(options: Options, statement: str, *params: object) -> list[tuple]:
    """Run ``statement`` in the catalog's schema on a connection of its own."""
    with psycopg.connect(options["postgres_url"], autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{options["postgres_schema"]}"')
        cursor = connection.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def test_backend_is_registered_as_stash_postgres() -> None:
    """``stash-postgres`` resolves through the loupe.catalog_backends entry point."""
    assert BACKENDS.load("stash-postgres") is PostgresCatalogBackend


def test_catalog_lives_in_the_named_schema(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """Tables are created in ``postgres_schema``; committed rows are stored there."""
    catalog = make(backends, postgres_catalog)
    assert not catalog.is_initialized()
    catalog.open()
    create_cluster(catalog, "stored")
    tables = sql(
        postgres_catalog,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "ORDER BY table_name",
        postgres_catalog["postgres_schema"],
    )
    assert tables == [("collections",), ("config",), ("timestamp_oracle",)]
    assert sql(postgres_catalog, "SELECT key, value FROM config ORDER BY key") == [
        ("deploy_generation", 0),
        ("epoch", 1),
        ("version", CATALOG_VERSION),
    ]
    values = [v for (v,) in sql(postgres_catalog, "SELECT value FROM collections")]
    assert any('"name":"stored"' in value for value in values)
    assert catalog.is_initialized()


def test_url_and_schema_come_from_options_or_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a URL anywhere the error says how to give one; the schema defaults."""
    monkeypatch.delenv("LOUPE_CATALOG_POSTGRES_URL", raising=False)
    monkeypatch.delenv("LOUPE_CATALOG_POSTGRES_SCHEMA", raising=False)
    with pytest.raises(CatalogError, match="LOUPE_CATALOG_POSTGRES_URL"):
        PostgresCatalogBackend(None)
    monkeypatch.setenv("LOUPE_CATALOG_POSTGRES_URL", "postgresql://u:secret@h:1/db")
    backend = PostgresCatalogBackend(None)
    assert (backend.url, backend.schema) == ("postgresql://u:secret@h:1/db", DEFAULT_SCHEMA)
    assert "secret" not in repr(backend)
    with pytest.raises(CatalogError, match="invalid postgres_schema"):
        PostgresCatalogBackend(None, postgres_schema='x"; DROP TABLE y; --')


def test_unreachable_server_is_a_clear_error() -> None:
    """A server that is not there is a CatalogError naming the URL, without its password."""
    url = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/loupe"
    backend = PostgresCatalogBackend(None, postgres_url=url)
    with pytest.raises(CatalogError, match="cannot connect to the PostgreSQL catalog") as caught:
        backend.open()
    assert "hunter2" not in str(caught.value)
    assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in str(caught.value)


def test_lost_connection_fails_one_commit_and_the_next_reconnects(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """A connection the server dropped is a CatalogError, nothing half-written; the next
    commit runs on a new connection."""
    catalog = make(backends, postgres_catalog)
    catalog.open()
    # With a timeout, pg_terminate_backend waits until the backend has exited.
    killed = sql(
        postgres_catalog,
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        "WHERE application_name = 'loupe-catalog' AND datname = current_database()",
    )
    assert killed == [(True,)]
    with pytest.raises(CatalogError, match=r"PostgreSQL catalog .* failed"):
        create_cluster(catalog, "lost")
    create_cluster(catalog, "kept")
    values = [v for (v,) in sql(postgres_catalog, "SELECT value FROM collections")]
    assert any('"name":"kept"' in value for value in values)
    assert not any('"name":"lost"' in value for value in values)


PROCESS = r"""
import sys
from loupe.catalog.backends.postgres import PostgresCatalogBackend
from loupe.catalog.errors import FencedError
from loupe.catalog.objects import Cluster

catalog = PostgresCatalogBackend(None, postgres_url=sys.argv[1], postgres_schema=sys.argv[2])
catalog.open()
print("open", catalog.epoch, flush=True)
sys.stdin.readline()
tx = catalog.transaction()
tx.create_cluster(Cluster(id="", name=sys.argv[3], owner_id="", managed=False, size="",
                          replication_factor=0, introspection_interval_ns=0,
                          introspection_debugging=False))
try:
    catalog.commit_transaction(tx)
except FencedError as error:
    print("fenced", error, flush=True)
    sys.exit(3)
print("committed", flush=True)
"""


def start_writer(options: Options, cluster_name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            PROCESS,
            options["postgres_url"],
            options["postgres_schema"],
            cluster_name,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )


def test_second_process_fences_the_first(postgres_catalog: Options) -> None:
    """Two processes open one catalog: the first's next commit is fenced, the second's lands."""
    first = start_writer(postgres_catalog, "zombie")
    second = None
    try:
        assert first.stdout is not None
        assert first.stdin is not None
        assert first.stdout.readline().split() == ["open", "1"]
        second = start_writer(postgres_catalog, "live")
        assert second.stdout is not None
        assert second.stdin is not None
        assert second.stdout.readline().split() == ["open", "2"]
        out, _ = first.communicate("go\n", timeout=30)
        assert first.returncode == 3
        assert "(deploy_generation=0, epoch=1)" in out
        assert "(deploy_generation=0, epoch=2)" in out
        out, _ = second.communicate("go\n", timeout=30)
        assert (second.returncode, out.strip()) == (0, "committed")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    names = sql(postgres_catalog, "SELECT value FROM collections WHERE kind = 'cluster'")
    assert any('"live"' in value for (value,) in names)
    assert not any('"zombie"' in value for (value,) in names)


async def test_commit_racing_an_open_waits_for_it_and_is_fenced(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """The fence is checked under the config lock: a commit that starts while another
    writer's open is uncommitted waits for it, then sees its epoch and writes nothing."""
    catalog = make(backends, postgres_catalog)
    catalog.open()
    url, schema = postgres_catalog["postgres_url"], postgres_catalog["postgres_schema"]
    outcome: list[BaseException | int] = []
    with psycopg.connect(url) as opener:
        # What an open does: lock the config and bump the epoch, not yet committed.
        opener.execute(f'SELECT * FROM "{schema}".config FOR UPDATE')
        opener.execute(f"UPDATE \"{schema}\".config SET value = 2 WHERE key = 'epoch'")

        def commit() -> None:
            try:
                outcome.append(create_cluster(catalog, "racer"))
            except BaseException as error:
                outcome.append(error)

        writer = threading.Thread(target=commit)
        writer.start()

        def commit_is_waiting_for_the_lock() -> None:
            waiting = sql(
                postgres_catalog,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = 'loupe-catalog' AND wait_event_type = 'Lock'",
            )
            assert waiting == [(1,)]

        await assert_eventually(commit_is_waiting_for_the_lock, timeout=10)
        assert not outcome
        opener.commit()
        writer.join(timeout=10)
    assert len(outcome) == 1
    assert isinstance(outcome[0], FencedError)
    assert outcome[0].current == FenceToken(0, 2)
    values = sql(postgres_catalog, "SELECT value FROM collections")
    assert not any('"racer"' in value for (value,) in values)


def test_concurrent_first_opens_initialise_once(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """Two writers opening an empty schema at once: one initialises, the other takes epoch 2."""
    catalogs = [make(backends, postgres_catalog) for _ in range(2)]
    errors: list[BaseException] = []

    def open_(catalog: PostgresCatalogBackend) -> None:
        try:
            catalog.open()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_, args=(catalog,)) for catalog in catalogs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(catalog.epoch for catalog in catalogs) == [1, 2]
    assert sql(postgres_catalog, "SELECT count(*) FROM collections WHERE kind = 'cluster'") == [
        (2,)
    ]


# Damage


def test_foreign_schema_is_refused_and_left_alone(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """A schema with someone else's tables is not a catalog, and is not re-initialised."""
    sql(postgres_catalog, f'CREATE SCHEMA "{postgres_catalog["postgres_schema"]}"')
    sql(postgres_catalog, "CREATE TABLE recipes (name TEXT)")
    sql(postgres_catalog, "INSERT INTO recipes VALUES ('soup')")
    catalog = make(backends, postgres_catalog)
    with pytest.raises(CatalogCorruptError, match="recipes"):
        catalog.is_initialized()
    with pytest.raises(CatalogCorruptError, match="not a Loupe catalog"):
        catalog.open()
    tables = sql(
        postgres_catalog,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        postgres_catalog["postgres_schema"],
    )
    assert tables == [("recipes",)]
    assert sql(postgres_catalog, "SELECT name FROM recipes") == [("soup",)]


def test_tables_with_the_right_names_but_other_columns_are_refused(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """Same table names, different columns: refused, naming the table that differs."""
    make(backends, postgres_catalog).open()
    sql(postgres_catalog, "ALTER TABLE config ALTER COLUMN value TYPE text")
    with pytest.raises(CatalogCorruptError, match="different: config"):
        make(backends, postgres_catalog).open()


def test_missing_config_or_oracle_is_refused(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """A catalog whose epoch or timestamp is gone is damaged, not new."""
    make(backends, postgres_catalog).open()
    sql(postgres_catalog, "DELETE FROM timestamp_oracle")
    with pytest.raises(CatalogCorruptError, match="timestamp oracle"):
        make(backends, postgres_catalog).open()
    sql(postgres_catalog, "DELETE FROM config WHERE key = 'epoch'")
    with pytest.raises(CatalogCorruptError, match="config lacks epoch"):
        make(backends, postgres_catalog).open()


def test_damaged_entry_is_refused(
    postgres_catalog: Options, backends: list[PostgresCatalogBackend]
) -> None:
    """A row that does not decode stops the open with its kind and key."""
    make(backends, postgres_catalog).open()
    sql(
        postgres_catalog,
        """UPDATE collections SET value = '{"id": 1}' WHERE kind = 'cluster' AND key = '{"id":"u1"}'""",
    )
    with pytest.raises(CatalogCorruptError, match="cluster"):
        make(backends, postgres_catalog).open()


# The test helper


def test_explicit_test_url_is_used_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOUPE_TEST_POSTGRES_URL wins over every other way of finding a server."""
    monkeypatch.setenv("LOUPE_TEST_POSTGRES_URL", "postgresql://someone@db.invalid/x")
    with postgres_database() as url:
        assert url == "postgresql://someone@db.invalid/x"


@pytest.mark.skipif(find_postgres_bin() is None, reason="no initdb under /usr/lib/postgresql")
def test_temporary_cluster_serves_a_catalog_and_is_removed(data_dir: Path) -> None:
    """The helper's own cluster (initdb + postgres on a free port) holds a catalog,
    then stops and leaves nothing behind."""
    with TemporaryPostgresCluster() as cluster:
        root, process = cluster.root, cluster.process
        assert root is not None
        assert process is not None
        if os.geteuid() == 0:
            assert (root / "data").stat().st_uid != 0
        catalog = PostgresCatalogBackend(data_dir, postgres_url=cluster.url)
        catalog.open()
        assert create_cluster(catalog, "c") >= catalog.read_timestamp() - 1
        catalog.close()
    assert process.poll() is not None
    assert not root.exists()
