"""Catalog migrations: versioned layouts with upgrade functions.

The stored catalog carries a version. Opening it runs, in memory and in
order, every upgrade from the stored version to ``CATALOG_VERSION``; the
resulting writes are committed in the same atomic write as the epoch bump of
a writable open, and never committed by a read-only or savepoint open or by
``check_open`` (``loupe catalog upgrade-check``). A catalog written by a newer
Loupe is refused with a clear error and never rewritten.

An upgrade is a function from the rows of version N to the writes that make
them version N + 1. Add one by appending to ``UPGRADES`` and bumping
``CATALOG_VERSION``.
"""

from __future__ import annotations

from collections.abc import Callable

from loupe.catalog.errors import CatalogError

Row = tuple[str, str, str]  # (kind, key JSON, value JSON)
Write = tuple[str, str, str | None]  # (kind, key JSON, value JSON or None to delete)
Upgrade = Callable[[list[Row]], list[Write]]

# UPGRADES[n] turns version n + 1 into version n + 2.
UPGRADES: list[Upgrade] = []
CATALOG_VERSION = 1 + len(UPGRADES)


class CatalogTooNewError(CatalogError):
    """The catalog was written by a newer Loupe than this one."""


def apply_writes(rows: list[Row], writes: list[Write]) -> list[Row]:
    """``rows`` after ``writes`` (later writes to the same key win)."""
    table = {(kind, key): value for kind, key, value in rows}
    for kind, key, value in writes:
        if value is None:
            table.pop((kind, key), None)
        else:
            table[(kind, key)] = value
    return [(kind, key, value) for (kind, key), value in sorted(table.items())]


def migrate(version: int, rows: list[Row]) -> tuple[int, list[Write]]:
    """The writes that bring ``rows`` from ``version`` to ``CATALOG_VERSION``."""
    if version > CATALOG_VERSION:
        raise CatalogTooNewError(
            f"the catalog is at version {version}, newer than this Loupe's {CATALOG_VERSION}; "
            "it was written by a newer Loupe: upgrade Loupe (the catalog was left untouched)"
        )
    if version < 1:
        raise CatalogError(f"the catalog has an invalid version {version}")
    writes: list[Write] = []
    current = rows
    for step in range(version, CATALOG_VERSION):
        step_writes = UPGRADES[step - 1](current)
        current = apply_writes(current, step_writes)
        writes.extend(step_writes)
    return CATALOG_VERSION, writes
