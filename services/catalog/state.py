"""The catalog's objects in memory: ``CatalogState`` and per-kind transactions.

A ``CatalogState`` holds, per kind, a dict from key to object. It is never
changed once built: a commit makes a new state that shares the dicts of every
kind the transaction did not touch, so a commit costs what it changed, not
the size of the catalog, and a reader on another thread always sees one
consistent state.

A ``TableTransaction`` overlays its pending changes on one kind's committed
dict (Materialize's ``TableTransaction``): reads see them, ``writes()`` turns
them into rows for the backend, the base dict is never copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from loupe.catalog.errors import CatalogCorruptError
from loupe.catalog.kinds import KINDS, ObjectFormatError, ObjectKind, natural_order
from loupe.catalog.migrations import Row, Write

Table = Mapping[Any, Any]


class CatalogState:
    """Every stored object, by kind and key; immutable once built."""

    __slots__ = ("_item_names", "tables")

    def __init__(self, tables: Mapping[str, Table] | None = None) -> None:
        given = tables or {}
        self.tables: dict[str, Table] = {name: given.get(name, {}) for name in KINDS}
        # (schema_id, name) -> item key, built on first use.
        self._item_names: dict[tuple[str, str], Any] | None = None

    def table(self, kind: str) -> Table:
        return self.tables[kind]

    def item_names(self) -> dict[tuple[str, str], Any]:
        """Items by (schema id, name); built once per state."""
        if self._item_names is None:
            self._item_names = {
                (i.schema_id, i.name): key for key, i in self.tables["item"].items()
            }
        return self._item_names

    def updated(self, pending: Mapping[str, Mapping[Any, Any]]) -> CatalogState:
        """A new state with ``pending`` (kind -> key -> object, None deletes) applied."""
        tables = dict(self.tables)
        for kind, changes in pending.items():
            if not changes:
                continue
            table = dict(tables[kind])
            for key, value in changes.items():
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
            tables[kind] = table
        new = CatalogState(tables)
        item_changes = pending.get("item")
        if self._item_names is not None and item_changes:
            # Patch the name index rather than rebuilding it from every item.
            names = dict(self._item_names)
            old_items = self.tables["item"]
            for key, value in item_changes.items():
                old = old_items.get(key)
                if old is not None:
                    names.pop((old.schema_id, old.name), None)
                if value is not None:
                    names[(value.schema_id, value.name)] = key
            new._item_names = names
        elif not item_changes:
            new._item_names = self._item_names
        return new

    def rows(self) -> Iterator[Row]:
        """Every object as a stored row, kind by kind in key order."""
        for name, kind in KINDS.items():
            table = self.tables[name]
            for key in sorted(table, key=natural_order):
                yield name, kind.encode_key(key), kind.encode_value(table[key])

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> CatalogState:
        """Decode stored rows; a row that does not decode is a ``CatalogCorruptError``."""
        tables: dict[str, dict[Any, Any]] = {name: {} for name in KINDS}
        for kind_name, key_json, value_json in rows:
            kind = KINDS.get(kind_name)
            if kind is None:
                raise CatalogCorruptError(f"catalog entry {kind_name}/{key_json}: unknown kind")
            try:
                key, value = kind.decode(key_json, value_json)
            except ObjectFormatError as error:
                raise CatalogCorruptError(
                    f"catalog entry {kind_name}/{key_json} is damaged: {error}"
                ) from None
            tables[kind_name][key] = value
        return cls(tables)


class TableTransaction:
    """Pending changes to one kind, over its committed objects."""

    def __init__(self, kind: ObjectKind[Any, Any], base: Table) -> None:
        self.kind = kind
        self.base = base
        # key -> new object, or None for a deletion.
        self.pending: dict[Any, Any] = {}
        # Bumped by every change, so indexes over `pending` know when they are stale.
        self.version = 0

    def get(self, key: Any) -> Any | None:
        if key in self.pending:
            return self.pending[key]
        return self.base.get(key)

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def items(self) -> Iterator[tuple[Any, Any]]:
        pending = self.pending
        for key, value in self.base.items():
            if key not in pending:
                yield key, value
        for key, value in pending.items():
            if value is not None:
                yield key, value

    def values(self) -> Iterator[Any]:
        return (value for _, value in self.items())

    def set(self, value: Any) -> Any | None:
        """Insert or replace ``value`` (under its own key); returns the old object."""
        key = self.kind.key_of(value)
        old = self.get(key)
        self.pending[key] = value
        self.version += 1
        return old

    def delete(self, key: Any) -> Any | None:
        """Delete the object under ``key``; returns it (None if there was none)."""
        old = self.get(key)
        if old is not None:
            self.pending[key] = None
            self.version += 1
        return old

    def changes(self) -> dict[Any, Any]:
        """The pending entries that differ from the committed ones."""
        return {key: value for key, value in self.pending.items() if value != self.base.get(key)}

    def writes(self) -> list[Write]:
        kind = self.kind
        out: list[Write] = []
        for key, value in sorted(self.changes().items(), key=lambda kv: natural_order(kv[0])):
            encoded = None if value is None else kind.encode_value(value)
            out.append((kind.name, kind.encode_key(key), encoded))
        return out
