"""The friendly introspection relations: views over the raw logs (``loupe.introspection.logs``).

Each view is written once, as a template, and rendered twice:

- for ``mz_introspection``: Materialize's relation, read on the replica the
  session targets (``SET cluster_replica``);
- for ``mz_internal``: the same relation over the persisted collections, with
  ``replica_id`` and ``incarnation`` in front of its columns, for every replica.

Template placeholders (``render``):

- ``{s}``: the schema of the relations read (``mz_introspection`` or ``mz_internal``);
- ``{r}``: the replica columns in a select list or GROUP BY (empty, or
  ``replica_id, incarnation, ``); ``{r.x}`` the same qualified by alias ``x``;
- ``{ru}``: the replica columns in a ``USING (…)`` list (empty, or
  ``replica_id, incarnation, ``); ``{rj.a.b}``: join conditions tying aliases
  ``a`` and ``b`` to the same replica (empty, or
  ``a.replica_id = b.replica_id AND a.incarnation = b.incarnation AND ``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

INTROSPECTION = "mz_introspection"
INTERNAL = "mz_internal"
_REPLICA = ("replica_id", "incarnation")


@dataclass(frozen=True)
class IntrospectionView:
    """One of Materialize's introspection views: its name, columns and query template."""

    name: str
    columns: tuple[tuple[str, str], ...]
    template: str

    def sql(self, schema: str) -> str:
        return render(self.template, schema)

    def columns_in(self, schema: str) -> tuple[tuple[str, str], ...]:
        if schema == INTERNAL:
            return (("replica_id", "text"), ("incarnation", "uint8"), *self.columns)
        return self.columns


_PLACEHOLDER = re.compile(r"\{(s|r|ru|r\.\w+|rj\.\w+\.\w+)\}")


def render(template: str, schema: str) -> str:
    """``template`` for ``schema`` (see the module docstring)."""
    internal = schema == INTERNAL

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "s":
            return schema
        if not internal:
            return ""
        if key in ("r", "ru"):
            return ", ".join(_REPLICA) + ", "
        if key.startswith("r."):
            alias = key[2:]
            return ", ".join(f"{alias}.{c}" for c in _REPLICA) + ", "
        _, a, b = key.split(".")
        return " AND ".join(f"{a}.{c} = {b}.{c}" for c in _REPLICA) + " AND "

    return _PLACEHOLDER.sub(replace, template)


_VIEWS = (
    IntrospectionView(
        "mz_scheduling_elapsed_per_worker",
        (("id", "uint8"), ("worker_id", "uint8"), ("elapsed_ns", "numeric")),
        "SELECT {r}id, worker_id, count(*) AS elapsed_ns "
        "FROM {s}.mz_scheduling_elapsed_raw GROUP BY {r}id, worker_id",
    ),
    IntrospectionView(
        "mz_scheduling_elapsed",
        (("id", "uint8"), ("elapsed_ns", "numeric")),
        "SELECT {r}id, sum(elapsed_ns) AS elapsed_ns "
        "FROM {s}.mz_scheduling_elapsed_per_worker GROUP BY {r}id",
    ),
    IntrospectionView(
        "mz_dataflow_operators",
        (("id", "uint8"), ("name", "text")),
        "SELECT {r}id, name FROM {s}.mz_dataflow_operators_per_worker WHERE worker_id = 0::uint8",
    ),
)
VIEWS: dict[str, IntrospectionView] = {v.name: v for v in _VIEWS}
