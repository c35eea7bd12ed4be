"""``loupe catalog``: dump, epoch, edit, delete and upgrade-check on a stored catalog.

The cooperative mode (through a running catalog server) is tested in
``test_service.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loupe.catalog import CATALOG_VERSION, DurableCatalogState, create_backend
from loupe.catalog.backends.sqlite import default_path
from loupe.cli.main import main

V1_ROWS = [
    ("cluster", "s1", '{"id": "s1", "introspection_debugging": false, "introspection_interval_ns": 1000000000, "managed": true, "name": "mz_catalog_server", "owner_id": "s1", "replication_factor": 1, "size": "1"}'),
    ("cluster_replica", "s1", '{"cluster_id": "s1", "id": "s1", "log_collections": {}, "name": "r1", "owner_id": "s1", "size": "1"}'),
    ("id_allocator", "system_cluster", "2"),
    ("id_allocator", "system_replica", "2"),
]  # fmt: skip


class Tool:
    """Runs ``loupe catalog --data-dir DIR …`` in this process."""

    def __init__(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.data_dir = data_dir
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(["catalog", "--data-dir", str(self.data_dir), *args])
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def tool(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> Tool:
    return Tool(data_dir, capsys)


@pytest.fixture
def catalog(data_dir: Path) -> DurableCatalogState:
    """A catalog initialised and closed, as a stopped catalog server leaves it."""
    made = create_backend("stash-sqlite", data_dir)
    made.open()
    made.close()
    return made


def reader(data_dir: Path) -> DurableCatalogState:
    opened = create_backend("stash-sqlite", data_dir)
    opened.open_read_only()
    return opened


def test_dump_prints_stored_rows_or_current_objects(
    catalog: DurableCatalogState, tool: Tool
) -> None:
    """dump is JSON with config and every kind; --consolidate decodes, with every kind listed."""
    code, out, _ = tool("dump")
    assert code == 0
    raw = json.loads(out)
    assert raw["config"] == {"version": CATALOG_VERSION, "epoch": 1, "deploy_generation": 0}
    assert {"key": {"id": "u1"}, "value": {"name": "materialize", "owner_id": "u1"}} in raw[
        "collections"
    ]["database"]
    code, out, _ = tool("dump", "--consolidate")
    assert code == 0
    consolidated = json.loads(out)
    assert consolidated["collections"]["item"] == []
    assert len(consolidated["collections"]) == 15
    assert consolidated["timestamp"] == raw["timestamp"]


def test_dump_of_a_version_1_catalog_shows_it_as_stored(data_dir: Path, tool: Tool) -> None:
    """Without --consolidate the old layout shows (bare keys); with it, the upgraded objects."""
    made = create_backend("stash-sqlite", data_dir)
    made._load(writable=True, initial_rows=[], migrate=lambda v, rows: (v, []))
    made._load(writable=True, initial_rows=[], migrate=lambda v, rows: (1, V1_ROWS))
    made.close()
    code, out, _ = tool("dump")
    assert code == 0
    raw = json.loads(out)
    assert raw["config"]["version"] == 1
    assert raw["collections"]["cluster"][0]["key"] == "s1"
    assert raw["collections"]["id_allocator"][0] == {"key": "system_cluster", "value": 2}
    code, out, _ = tool("dump", "--consolidate")
    assert code == 0
    consolidated = json.loads(out)
    assert consolidated["config"]["version"] == CATALOG_VERSION
    assert consolidated["collections"]["cluster"][0]["key"] == {"id": "s1"}
    assert json.loads(tool("dump")[1])["config"]["version"] == 1


def test_dump_writes_to_a_file(catalog: DurableCatalogState, tool: Tool, tmp_path: Path) -> None:
    """--output writes the dump there and prints nothing."""
    target = tmp_path / "dump.json"
    assert tool("dump", "--output", str(target)) == (0, "", "")
    assert json.loads(target.read_text())["config"]["epoch"] == 1


def test_epoch_prints_the_stored_fence_token(catalog: DurableCatalogState, tool: Tool) -> None:
    """epoch reads without opening: it does not bump the epoch."""
    assert json.loads(tool("epoch")[1]) == {"epoch": 1, "deploy_generation": 0}
    assert json.loads(tool("epoch")[1]) == {"epoch": 1, "deploy_generation": 0}


def test_edit_replaces_an_object_and_prints_the_old_value(
    catalog: DurableCatalogState, tool: Tool, data_dir: Path
) -> None:
    """The new value is stored, the old one printed; the open bumps the epoch."""
    key = '{"id": "u1"}'
    value = (
        '{"name": "quickstart", "owner_id": "u1", "managed": true, "size": "4", '
        '"replication_factor": 1, "introspection_interval_ns": 0, "introspection_debugging": false}'
    )
    code, out, err = tool("edit", "cluster", key, value)
    assert code == 0, err
    old = json.loads(out)
    assert (old["size"], old["introspection_interval_ns"]) == ("1", 1_000_000_000)
    assert "fenced" in err
    opened = reader(data_dir)
    quickstart = next(c for c in opened.get_clusters() if c.id == "u1")
    assert (quickstart.size, quickstart.introspection_interval_ns) == ("4", 0)
    assert opened.epoch == 2
    opened.close()
    code, out, _ = tool("edit", "system_configuration", '{"name": "max_tables"}', '{"value": "9"}')
    assert (code, out.strip()) == (0, "null")


def test_delete_removes_an_object_and_prints_it(
    catalog: DurableCatalogState, tool: Tool, data_dir: Path
) -> None:
    """delete prints the deleted value; a missing key is an error that fences nobody."""
    code, out, _ = tool("delete", "default_privilege", json.dumps({
        "role_id": "p", "database_id": "", "schema_id": "", "object_type": "type", "grantee": "p"
    }))  # fmt: skip
    assert (code, json.loads(out)) == (0, {"privileges": "U"})
    opened = reader(data_dir)
    assert opened.get_default_privileges() == []
    epoch = opened.epoch
    opened.close()
    code, out, err = tool("delete", "setting", '{"name": "nope"}')
    assert (code, out) == (1, "")
    assert 'there is no setting with key {"name": "nope"}' in err
    assert json.loads(tool("epoch")[1])["epoch"] == epoch


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("edit", "clusterz", "{}", "{}"),
            "unknown object kind 'clusterz'; the kinds are: database",
        ),
        (("edit", "cluster", '{"id": "u1"}', '{"name": "x"}'), "Cluster is missing owner_id"),
        (("edit", "cluster", '{"id": "u1"}', "not json"), "bad cluster value 'not json'"),
        (("edit", "setting", '{"name": "a"}', '{"value": 1}'), "Setting.value must be text"),
        (("delete", "cluster", "u1"), "bad cluster key 'u1'"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    catalog: DurableCatalogState, tool: Tool, data_dir: Path, args: tuple[str, ...], message: str
) -> None:
    """A value that does not decode as its kind is a clear error; the file is untouched."""
    before = default_path(data_dir).read_bytes()
    code, out, err = tool(*args)
    assert (code, out) == (1, "")
    assert message in err
    assert err.startswith("loupe catalog: ")
    assert default_path(data_dir).read_bytes() == before


def test_upgrade_check_on_a_version_1_catalog_passes_and_writes_nothing(
    data_dir: Path, tool: Tool
) -> None:
    """Exit 0, saying which versions; the stored version and epoch stay."""
    made = create_backend("stash-sqlite", data_dir)
    made._load(writable=True, initial_rows=[], migrate=lambda v, rows: (v, []))
    made._load(writable=True, initial_rows=[], migrate=lambda v, rows: (1, V1_ROWS))
    made.close()
    before = default_path(data_dir).read_bytes()
    code, out, _ = tool("upgrade-check")
    assert code == 0
    assert f"version 1 can be upgraded to version {CATALOG_VERSION}" in out
    assert default_path(data_dir).read_bytes() == before
    code, out, _ = tool("upgrade-check", "--deploy-generation", "5")
    assert code == 0
    assert default_path(data_dir).read_bytes() == before


def test_upgrade_check_fails_for_an_older_deploy_generation(data_dir: Path, tool: Tool) -> None:
    """A generation older than the stored one could not open it: exit 1."""
    made = create_backend("stash-sqlite", data_dir, deploy_generation=3)
    made.open()
    made.close()
    code, out, _ = tool("upgrade-check", "--deploy-generation", "2")
    assert code == 1
    assert "deploy_generation=3" in out
    assert tool("upgrade-check")[0] == 0


def test_commands_on_a_missing_catalog_fail_and_create_nothing(data_dir: Path, tool: Tool) -> None:
    """No catalog: every command says so, exits 1, and does not initialise one."""
    for args in (
        ("dump",),
        ("dump", "--consolidate"),
        ("epoch",),
        ("upgrade-check",),
        ("edit", "setting", '{"name": "a"}', '{"value": "b"}'),
        ("delete", "setting", '{"name": "a"}'),
    ):
        code, out, err = tool(*args)
        assert (code, out) == (1, ""), args
        assert "there is no catalog here (backend stash-sqlite" in err
    assert not default_path(data_dir).exists()


def test_unknown_backend_and_bad_options_are_clear_errors(data_dir: Path, tool: Tool) -> None:
    """--backend must be a registered plugin; --option must be NAME=VALUE."""
    code, _, err = tool("--backend", "floppy-disk", "epoch")
    assert code == 1
    assert "unknown catalog backend 'floppy-disk'" in err
    code, _, err = tool("--option", "oops", "epoch")
    assert (code, "--option takes NAME=VALUE" in err) == (1, True)


def test_cooperative_edit_needs_a_nats_url(catalog: DurableCatalogState, tool: Tool) -> None:
    """--cooperative without --nats-url is refused before anything happens."""
    code, _, err = tool("delete", "setting", '{"name": "a"}', "--cooperative")
    assert code == 1
    assert "--cooperative needs --nats-url" in err


def test_loupe_catalog_runs_as_a_command(catalog: DurableCatalogState, data_dir: Path) -> None:
    """The console entry point reaches the tool, with plain output."""
    result = subprocess.run(
        [sys.executable, "-m", "loupe.cli.main", "catalog", "--data-dir", str(data_dir), "epoch"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"epoch": 1, "deploy_generation": 0}
    assert "\x1b[" not in result.stdout + result.stderr
