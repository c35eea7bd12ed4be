"""``shadow``: two backends compared on every call, failing loudly when they differ.

Most tests shadow ``stash-sqlite`` with a second SQLite catalog, so they need
no PostgreSQL; the default pairing (SQLite primary, PostgreSQL secondary) is
tested on a real PostgreSQL, and by the conformance suite in ``test_store.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import structlog

from loupe.catalog import CatalogError, FencedError, create_backend
from loupe.catalog.backends.postgres import PostgresCatalogBackend
from loupe.catalog.backends.shadow import ShadowCatalogBackend, ShadowMismatchError
from loupe.catalog.backends.sqlite import SqliteCatalogBackend
from loupe.catalog.durable import BACKENDS
from loupe.catalog.testing import create_cluster


def edit_sqlite(data_dir: Path, statement: str) -> None:
    """Change a SQLite catalog behind its backend's back."""
    with sqlite3.connect(data_dir / "catalog" / "catalog.sqlite") as connection:
        connection.execute(statement)
    connection.close()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "primary", tmp_path / "secondary"


@pytest.fixture
def shadows(dirs: tuple[Path, Path]) -> Iterator[list[ShadowCatalogBackend]]:
    made: list[ShadowCatalogBackend] = []
    yield made
    for shadow in made:
        shadow.close()


def sqlite_shadow(
    made: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> ShadowCatalogBackend:
    """A shadow of two SQLite catalogs, built from backend instances."""
    shadow = ShadowCatalogBackend(
        primary=SqliteCatalogBackend(dirs[0]), secondary=SqliteCatalogBackend(dirs[1])
    )
    made.append(shadow)
    return shadow


def test_backend_is_registered_as_shadow() -> None:
    """``shadow`` resolves through the loupe.catalog_backends entry point."""
    assert BACKENDS.load("shadow") is ShadowCatalogBackend


def test_agreeing_backends_hold_the_same_catalog(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """Every commit lands in both stores, with the same timestamps, fences and rows."""
    shadow = sqlite_shadow(shadows, dirs)
    shadow.open()
    stamps = [create_cluster(shadow, f"c{i}") for i in range(3)]
    assert stamps == sorted(set(stamps))
    shadow.close()
    alone = [SqliteCatalogBackend(d) for d in dirs]
    for catalog in alone:
        catalog.open_read_only()
    primary, secondary = alone
    assert primary.dump() == secondary.dump()
    assert primary.read_timestamp() == secondary.read_timestamp() == stamps[-1]
    assert {"c0", "c1", "c2"} <= {c.name for c in primary.get_clusters()}
    for catalog in alone:
        catalog.close()


def test_secondary_with_a_different_clock_gets_the_primarys_timestamps(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """Time is the shadow's, as the primary applies it: a secondary whose clock is far
    behind still agrees on the first timestamp and on every commit's."""
    shadow = ShadowCatalogBackend(
        primary=SqliteCatalogBackend(dirs[0], now=lambda: 5_000_000),
        secondary=SqliteCatalogBackend(dirs[1], now=lambda: 1),
        now=lambda: 7_000_000,
    )
    shadows.append(shadow)
    shadow.open()
    assert shadow.read_timestamp() == 7_000_000
    assert create_cluster(shadow, "c") == 7_000_001
    assert create_cluster(shadow, "d") == 7_000_002


def test_diverged_row_is_a_loud_mismatch(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """A row edited in the secondary only: the next open names the method and both values,
    logs it at error level, and the shadow refuses to go on."""
    shadow = sqlite_shadow(shadows, dirs)
    shadow.open()
    create_cluster(shadow, "c")
    shadow.close()
    edit_sqlite(
        dirs[1],
        'UPDATE collections SET value = replace(value, \'"name":"c"\', \'"name":"sneaky"\') '
        "WHERE kind = 'cluster' AND key = '{\"id\":\"u2\"}'",
    )
    reopened = sqlite_shadow(shadows, dirs)
    with structlog.testing.capture_logs() as logs, pytest.raises(ShadowMismatchError) as caught:
        reopened.open()
    error = caught.value
    assert error.method == "_load"
    assert 'row cluster/{"id":"u2"}' in str(error)
    assert '"name":"c"' in str(error)
    assert '"name":"sneaky"' in str(error)
    assert error.primary.value.rows != error.secondary.value.rows
    [entry] = [e for e in logs if e["event"] == "shadow catalog mismatch"]
    assert (entry["log_level"], entry["method"]) == ("error", "_load")
    assert "sneaky" in entry["difference"]
    with pytest.raises(CatalogError, match="diverged earlier"):
        reopened.is_initialized()


def test_diverged_oracle_fails_the_next_commit(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """A secondary whose timestamp oracle moved on its own disagrees on the next commit."""
    shadow = sqlite_shadow(shadows, dirs)
    shadow.open()
    written = create_cluster(shadow, "c")
    edit_sqlite(dirs[1], f"UPDATE timestamp_oracle SET ts = {written + 1000}")
    with pytest.raises(ShadowMismatchError) as caught:
        create_cluster(shadow, "d")
    assert caught.value.method == "_write"
    assert caught.value.primary.value == written + 1 or caught.value.primary.value > written
    assert caught.value.secondary.value == written + 1001
    assert f"returned {caught.value.primary.value}" in str(caught.value)
    assert f"returned {written + 1001}" in str(caught.value)
    # The shadow's committed state did not take the failed commit.
    assert "d" not in {c.name for c in shadow.get_clusters()}


def test_fenced_primary_and_unfenced_secondary_is_a_mismatch(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """Only one side fenced: the outcomes differ (an error against a timestamp)."""
    shadow = sqlite_shadow(shadows, dirs)
    shadow.open()
    edit_sqlite(dirs[0], "UPDATE config SET value = 9 WHERE key = 'epoch'")
    with pytest.raises(
        ShadowMismatchError, match=r"primary raised FencedError.*secondary returned"
    ):
        shadow.confirm_leadership()


def test_both_fenced_is_the_primarys_fenced_error(
    shadows: list[ShadowCatalogBackend], dirs: tuple[Path, Path]
) -> None:
    """When both agree on an error, the shadow raises it like any backend would."""
    first = sqlite_shadow(shadows, dirs)
    first.open()
    sqlite_shadow(shadows, dirs).open()
    with pytest.raises(FencedError) as caught:
        create_cluster(first, "zombie")
    assert (caught.value.ours.epoch, caught.value.current.epoch) == (1, 2)


def test_shadowed_backends_must_share_a_deploy_generation(dirs: tuple[Path, Path]) -> None:
    """Two instances with different deploy generations cannot be shadowed."""
    with pytest.raises(CatalogError, match="deploy generation"):
        ShadowCatalogBackend(
            primary=SqliteCatalogBackend(dirs[0], deploy_generation=1),
            secondary=SqliteCatalogBackend(dirs[1], deploy_generation=2),
        )


def test_options_go_to_the_backend_that_takes_them(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """``path`` reaches stash-sqlite, ``postgres_*`` stash-postgres; others are refused."""
    shadow = ShadowCatalogBackend(
        dirs[0],
        postgres_url="postgresql://postgres@127.0.0.1:1/x",
        postgres_schema="elsewhere",
        path=tmp_path / "other.sqlite",
    )
    assert isinstance(shadow.primary, SqliteCatalogBackend)
    assert shadow.primary.path == tmp_path / "other.sqlite"
    assert isinstance(shadow.secondary, PostgresCatalogBackend)
    assert shadow.secondary.schema == "elsewhere"
    with pytest.raises(TypeError, match="colour"):
        ShadowCatalogBackend(dirs[0], shadow_secondary="stash-sqlite", colour="blue")


# The default pairing on a real PostgreSQL


def test_default_shadow_is_sqlite_over_postgres(
    data_dir: Path, postgres_catalog: dict[str, str]
) -> None:
    """Built by name, the shadow writes SQLite and PostgreSQL alike; a row changed in
    PostgreSQL behind its back is caught at the next open."""
    shadow = create_backend("shadow", data_dir)
    assert isinstance(shadow, ShadowCatalogBackend)
    shadow.open()
    written = create_cluster(shadow, "both")
    shadow.close()
    mirror = PostgresCatalogBackend(data_dir)
    mirror.open_read_only()
    assert mirror.read_timestamp() == written
    assert "both" in {c.name for c in mirror.get_clusters()}
    mirror.close()
    url, schema = postgres_catalog["postgres_url"], postgres_catalog["postgres_schema"]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            f"DELETE FROM \"{schema}\".collections WHERE kind = 'cluster' AND key = %s",
            ('{"id":"u2"}',),
        )
    reopened = create_backend("shadow", data_dir)
    try:
        with pytest.raises(
            ShadowMismatchError, match=r'_load: row cluster/\{"id":"u2"\}: .* secondary None'
        ):
            reopened.open()
    finally:
        reopened.close()
