"""The cluster replica size table: defaults, the JSON override, lookups and what a size runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest

from loupe import sizes
from loupe.common.errors import LoupeError
from loupe.common.service import configure_sizes
from loupe.common.settings import BaseSettings, SettingsError
from loupe.compute_replica.os_limit import limit_memory
from loupe.controller.service import replica_spec
from loupe.sizes import GIB, MIB


@pytest.fixture(autouse=True)
def default_table() -> Iterator[None]:
    yield
    sizes.install(sizes.DEFAULT_SIZES)


def test_the_default_table_keeps_numbered_sizes_as_worker_counts() -> None:
    one, two = sizes.lookup("1"), sizes.lookup("2")
    assert (one.workers, one.memory_bytes) == (1, 2 * GIB)
    assert (two.workers, two.memory_bytes) == (2, 4 * GIB)
    assert sizes.lookup("2xsmall").memory_bytes == 128 * MIB
    assert [s.size for s in sizes.sizes()][:3] == ["3xsmall", "2xsmall", "xsmall"]
    assert one.row() == ("1", 1, 1, 1_000_000_000, 2 * GIB, 0, Decimal(1))


def test_an_unknown_size_is_22023_listing_the_valid_ones() -> None:
    with pytest.raises(LoupeError) as caught:
        sizes.lookup("3")
    assert caught.value.code == "22023"
    assert caught.value.message == "unknown cluster replica size '3'"
    assert caught.value.hint.startswith("Valid sizes: 3xsmall, 2xsmall, xsmall, 1, 2, 4,")


def test_the_setting_replaces_the_table_in_materializes_words_or_loupes() -> None:
    table = {
        "small": {"workers": 1, "memory_limit": "512MiB", "credits_per_hour": "0.5"},
        "big": {"workers": 4, "memory_bytes": 8 * GIB, "disk_limit": "10GiB"},
    }
    configure_sizes(BaseSettings(cluster_replica_sizes=json.dumps(table)))
    assert [s.size for s in sizes.sizes()] == ["small", "big"]
    small, big = sizes.lookup("small"), sizes.lookup("big")
    assert (small.memory_bytes, small.credits_per_hour) == (512 * MIB, Decimal("0.5"))
    assert (big.workers, big.cpu_nano_cores, big.disk_bytes) == (4, 4_000_000_000, 10 * GIB)
    with pytest.raises(LoupeError):
        sizes.lookup("1")
    configure_sizes(BaseSettings())  # '' is the default table again
    assert sizes.lookup("1").workers == 1


@pytest.mark.parametrize(
    "document",
    [
        "{}",
        "[1]",
        '{"a": 3}',
        '{"a": {"workers": 1}}',
        '{"a": {"workers": 0, "memory_bytes": 1}}',
        '{"a": {"memory_limit": "lots"}}',
        '{"a": {"memory_bytes": 1, "processes": 2}}',
    ],
)
def test_a_malformed_table_is_a_settings_error(document: str) -> None:
    with pytest.raises(SettingsError, match="cluster_replica_sizes"):
        configure_sizes(BaseSettings(cluster_replica_sizes=document))


def test_bytes_parse_with_binary_units() -> None:
    assert sizes.parse_bytes("1GiB") == GIB
    assert sizes.parse_bytes("64 MiB") == 64 * MIB
    assert sizes.parse_bytes("3881MiB") == 3881 * MIB
    assert sizes.parse_bytes("2g") == 2 * GIB
    assert sizes.parse_bytes("4096") == 4096
    assert sizes.format_bytes(1536 * MIB) == "1.5 GiB"


def test_a_replica_runs_with_its_sizes_workers_and_budget() -> None:
    spec = replica_spec("u1", "c1", "2")
    assert (spec.workers, spec.memory_limit_bytes) == (2, 4 * GIB)
    # A size the table no longer lists (changed under an existing catalog): it still runs.
    orphan = replica_spec("u2", "c1", "gone")
    assert (orphan.workers, orphan.memory_limit_bytes) == (1, 0)


def test_the_os_limit_sits_above_the_budget() -> None:
    assert sizes.os_limit_bytes(128 * MIB) == 256 * MIB + GIB
    assert limit_memory(0) is None  # no budget, no limit
