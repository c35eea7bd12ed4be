"""Name resolution inside one SELECT: which relation column a SQL name refers to."""

from __future__ import annotations

from dataclasses import dataclass, replace

import loupe.plan.mir as mir
from loupe.common.errors import LoupeError, SqlState


@dataclass(frozen=True)
class ScopeColumn:
    """One column visible to expressions.

    ``hidden`` columns (a scalar subquery's value joined onto the FROM) have
    no SQL name: expressions reach them only through the planner, and ``*``
    skips them.
    """

    table: str | None
    name: str
    type: str
    hidden: bool = False
    # The other side's copy of a JOIN … USING column: reachable as table.name only.
    qualified_only: bool = False


@dataclass(frozen=True)
class Scope:
    """The columns of the relation expressions read, by position."""

    columns: tuple[ScopeColumn, ...]
    # The positions ``*`` expands to when not simply the visible columns in order
    # (JOIN … USING puts the merged columns first).
    star: tuple[int, ...] | None = None

    @classmethod
    def of(cls, table: str | None, relation: mir.Relation) -> Scope:
        return cls(tuple(ScopeColumn(table, name, type_) for name, type_ in relation.columns))

    def __add__(self, other: Scope) -> Scope:
        if self.star is None and other.star is None:
            return Scope(self.columns + other.columns)
        width = len(self.columns)
        star = (*self.visible(), *(width + i for i in other.visible()))
        return Scope(self.columns + other.columns, star)

    def using(self, merged: list[int], shadowed: list[int], start: int = 0) -> Scope:
        """After JOIN … USING: ``shadowed`` columns only qualified, ``*`` starting with ``merged``
        (after the columns before ``start``: FROM items before a comma come first)."""
        columns = tuple(
            replace(c, qualified_only=True) if i in shadowed else c
            for i, c in enumerate(self.columns)
        )
        before = [i for i in self.visible() if i < start]
        rest = [i for i in self.visible() if i >= start and i not in merged and i not in shadowed]
        return Scope(columns, (*before, *merged, *rest))

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(c.type for c in self.columns)

    def with_hidden(self, type_: str) -> Scope:
        """This scope with one more, nameless column at the end."""
        hidden = ScopeColumn(None, "?column?", type_, hidden=True)
        return Scope((*self.columns, hidden), self.star)

    def has(self, table: str | None, name: str) -> bool:
        """Whether ``table.name`` (or ``name``) names a column here."""
        return any(self._matches(c, table, name) for c in self.columns)

    def lookup(self, table: str | None, name: str) -> int:
        """The position of column ``name`` (of ``table`` if given); 42703, 42P01 or 42702."""
        hits = [i for i, c in enumerate(self.columns) if self._matches(c, table, name)]
        qualified = f"{table}.{name}" if table else name
        if not hits:
            if table is not None and all(c.table != table for c in self.columns):
                raise LoupeError(
                    SqlState.UNDEFINED_TABLE, f'missing FROM-clause entry for table "{table}"'
                )
            raise LoupeError(SqlState.UNDEFINED_COLUMN, f'column "{qualified}" does not exist')
        if len(hits) > 1:
            raise LoupeError(
                SqlState.AMBIGUOUS_COLUMN, f'column reference "{qualified}" is ambiguous'
            )
        return hits[0]

    def of_table(self, table: str) -> list[int]:
        """The positions of all columns of ``table`` (for ``t.*``)."""
        positions = [i for i, c in enumerate(self.columns) if c.table == table and not c.hidden]
        if not positions:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE, f'missing FROM-clause entry for table "{table}"'
            )
        return positions

    def visible(self) -> list[int]:
        """The positions ``*`` expands to."""
        if self.star is not None:
            return list(self.star)
        return [i for i, c in enumerate(self.columns) if not c.hidden]

    @staticmethod
    def _matches(column: ScopeColumn, table: str | None, name: str) -> bool:
        if column.hidden or column.name != name:
            return False
        return column.table == table if table is not None else not column.qualified_only
