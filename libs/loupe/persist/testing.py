"""pytest fixtures for persist's suites: every consensus and blob plugin, fresh per test.

- ``consensus_uri`` (parametrised: ``sqlite``, ``postgres``, ``nats-kv``): a
  URI of an empty store: a new SQLite file, a new schema in the
  ``postgres_url`` database (skipped without PostgreSQL), a new bucket on the
  session's nats-server. ``consensus`` is it opened.
- ``blob`` (parametrised: ``local``, ``arrowfs-local``): an empty ``LocalBlob``,
  or an ``ArrowFsBlob`` on ``pyarrow.fs.LocalFileSystem`` (S3's code path).

Import the fixtures into a test module to use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from loupe.persist.arrowfs import ArrowFsBlob
from loupe.persist.location import Blob, Consensus, LocalBlob, close_consensus, open_consensus
from loupe.persist.shard import Shard, arrow_schema

CONSENSUS_KINDS = ("sqlite", "postgres", "nats-kv")
BLOB_KINDS = ("local", "arrowfs-local")


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=CONSENSUS_KINDS)
def consensus_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URI of an empty consensus store of each kind (see the module doc)."""
    kind = request.param
    if kind == "sqlite":
        uri = f"sqlite://{tmp_path / _unique('consensus')}.sqlite"
    elif kind == "postgres":
        url = request.getfixturevalue("postgres_url")
        schema = _unique("consensus")
        uri = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    else:
        uri = f"{request.getfixturevalue('nats_url')}/{_unique('consensus')}"
    yield uri
    close_consensus(uri)
    if kind == "postgres":
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def consensus(consensus_uri: str) -> Consensus:
    """``consensus_uri`` opened (closed with it)."""
    return open_consensus(consensus_uri)


@pytest.fixture(params=BLOB_KINDS)
def blob(request: pytest.FixtureRequest, tmp_path: Path) -> Blob:
    """An empty blob store of each kind on a local disk."""
    root = tmp_path / _unique("blob")
    if request.param == "local":
        return LocalBlob(root)
    return ArrowFsBlob(pafs.LocalFileSystem(), str(root))


# A two-column shard for tests: (name text, n int8).
NAME_N_COLUMNS = [("name", "text"), ("n", "int8")]


@pytest.fixture
def shard(tmp_path: Path, consensus: Consensus) -> Shard:
    """A fresh (name, n) shard on a local blob and each consensus plugin."""
    shard = Shard("s1", LocalBlob(tmp_path / "blob"), consensus)
    shard.ensure(NAME_N_COLUMNS)
    return shard


def name_n_updates(rows: list[tuple[str, int, int, int]]) -> pa.Table:
    """Updates ``(name, n, mz_timestamp, mz_diff)`` for the ``shard`` fixture."""
    names, ns, ts, diffs = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {"name": list(names), "n": list(ns), "mz_timestamp": list(ts), "mz_diff": list(diffs)},
        schema=arrow_schema(NAME_N_COLUMNS),
    )
