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

Views read raw logs and other views of the same schema (``{s}.<view>``);
``VIEWS`` lists them in dependency order (each reads only views before it),
the order to create them in. Names, columns and types are Materialize's; the
queries are written for Loupe with the same meaning, except where noted:

- ``mz_arrangement_sizes_per_worker`` unions the nine arrangement logs and
  groups them, instead of Materialize's nine outer joins (same relation; each
  outer join would read its left input twice).
- ``mz_compute_error_counts_per_worker`` is the logged counts: Materialize
  also forwards an index's errors to indexes that reuse it without a dataflow
  (``mz_compute_dependencies``), which Loupe does not have.
- ``mz_expected_group_size_advice`` is Materialize's analysis of hierarchical
  min/max/top-k regions; Loupe renders those as one operator, so on its own
  dataflows the view is empty (see ``_ADVICE``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from loupe.introspection import logs

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


_U8 = "uint8"
_SIZES = (
    ("records", "int8"),
    ("batches", "int8"),
    ("size", "int8"),
    ("capacity", "int8"),
    ("allocations", "int8"),
)
_SUMMED_SIZES = ", ".join(f"sum({c})::int8 AS {c}" for c, _ in _SIZES)


def _view(name: str, columns: tuple[tuple[str, str], ...], template: str) -> IntrospectionView:
    return IntrospectionView(name, columns, " ".join(template.split()))


def _worker_zero(name: str, columns: tuple[tuple[str, str], ...]) -> IntrospectionView:
    """A structure relation: what worker 0 has (every worker builds the same dataflows)."""
    names = ", ".join(c for c, _ in columns)
    return _view(
        name,
        columns,
        f"SELECT {{r}}{names} FROM {{s}}.{name}_per_worker WHERE worker_id = 0::uint8",
    )


def _counted(
    name: str, source: str, keys: tuple[tuple[str, str], ...], count: str
) -> IntrospectionView:
    """A ``_per_worker`` relation over a ``count`` log: the row's multiplicity is the value."""
    names = ", ".join(c for c, _ in keys)
    return _view(
        name,
        (*keys, (count, "int8")),
        f"SELECT {{r}}{names}, pg_catalog.count(*) AS {count} "
        f"FROM {{s}}.{source} GROUP BY {{r}}{names}",
    )


def _summed(
    name: str, keys: tuple[tuple[str, str], ...], sums: tuple[str, ...]
) -> IntrospectionView:
    """A global relation: its ``_per_worker`` form's values summed across workers."""
    names = ", ".join(c for c, _ in keys)
    summed = ", ".join(f"pg_catalog.sum({c}) AS {c}" for c in sums)
    return _view(
        name,
        (*keys, *((c, "numeric") for c in sums)),
        f"SELECT {{r}}{names}, {summed} FROM {{s}}.{name}_per_worker GROUP BY {{r}}{names}",
    )


def _arrangement_sizes_per_worker() -> IntrospectionView:
    """Each arranging operator's records, batches and heap (trace and batcher added up).

    Every raw log counts in its multiplicity. Materialize left-joins the nine
    logs to the operators; here they are one union, grouped per operator, each
    value summed over its own logs (NULL when none of them has a row), which
    is the same relation without a chain of outer joins (each of which would
    read its left input twice).
    """
    logs = {
        "records": ("records", "batcher_records"),
        "batches": ("batches",),
        "size": ("heap_size", "batcher_size"),
        "capacity": ("heap_capacity", "batcher_capacity"),
        "allocations": ("heap_allocations", "batcher_allocations"),
    }
    union = " UNION ALL ".join(
        f"SELECT {{r}}operator_id, worker_id, '{column}' AS value "
        f"FROM {{s}}.mz_arrangement_{raw}_raw"
        for column, raws in logs.items()
        for raw in raws
    )
    values = ", ".join(
        f"sum(CASE WHEN raw.value = '{column}' THEN 1 END)::int8 AS {column}" for column in logs
    )
    return _view(
        "mz_arrangement_sizes_per_worker",
        (("operator_id", _U8), ("worker_id", _U8), *_SIZES),
        f"""
        SELECT {{r.raw}}raw.operator_id, raw.worker_id, {values}
        FROM ({union}) raw
             JOIN {{s}}.mz_dataflow_operators_per_worker ops
               ON {{rj.raw.ops}}raw.operator_id = ops.id AND raw.worker_id = ops.worker_id
        GROUP BY {{r.raw}}raw.operator_id, raw.worker_id
        """,
    )


def _message_counts_per_worker() -> IntrospectionView:
    channel = "channel_id, from_worker_id, to_worker_id"
    parts = {
        "sent": "message_counts_sent",
        "received": "message_counts_received",
        "batch_sent": "message_batch_counts_sent",
        "batch_received": "message_batch_counts_received",
    }
    ctes = ", ".join(
        f"{column} AS (SELECT {{r}}{channel}, pg_catalog.count(*) AS value "
        f"FROM {{s}}.mz_{raw}_raw GROUP BY {{r}}{channel})"
        for column, raw in parts.items()
    )
    joins = " ".join(f"JOIN {c} USING ({{ru}}{channel})" for c in list(parts)[1:])
    values = ", ".join(f"{c}.value AS {c}" for c in parts)
    return _view(
        "mz_message_counts_per_worker",
        (
            ("channel_id", _U8),
            ("from_worker_id", _U8),
            ("to_worker_id", _U8),
            *((c, "int8") for c in parts),
        ),
        f"WITH {ctes} SELECT {{r}}{channel}, {values} FROM sent {joins}",
    )


# mz_expected_group_size_advice: Materialize renders min/max and top-k as a
# hierarchy of levels in one region, each arranging its input ("Arranged TopK
# input", …); a level whose input is barely smaller than the first level's
# does no work, and a smaller GROUP SIZE hint (16^(levels - cut) - 1) removes
# it. The same analysis here, over the operators with those names: a region is
# the operator whose address is one's own without its last index. Loupe's
# engine renders a reduction or top-k as one operator (no hierarchy, no such
# names), so on Loupe's own dataflows this view is empty: there is never a
# level to cut.
_ADVICE_COLUMNS = (
    ("dataflow_id", _U8),
    ("dataflow_name", "text"),
    ("region_id", _U8),
    ("region_name", "text"),
    ("levels", "int8"),
    ("to_cut", "int8"),
    ("savings", "numeric"),
    ("hint", "float8"),
)
_ADVICE = " ".join(
    [
        "WITH",
        "operators",
        "AS",
        "(",
        "SELECT",
        "{r.dod}dod.dataflow_id,",
        "dor.id",
        "AS",
        "region_id,",
        "dod.id,",
        "ars.records,",
        "ars.size",
        "FROM",
        "{s}.mz_dataflow_operator_dataflows",
        "dod",
        "JOIN",
        "{s}.mz_dataflow_addresses",
        "doa",
        "ON",
        "{rj.dod.doa}dod.id",
        "=",
        "doa.id",
        "JOIN",
        "{s}.mz_dataflow_addresses",
        "dra",
        "ON",
        "{rj.dod.dra}dra.address",
        "=",
        "doa.address[:list_length(doa.address)",
        "-",
        "1]",
        "JOIN",
        "{s}.mz_dataflow_operators",
        "dor",
        "ON",
        "{rj.dod.dor}dor.id",
        "=",
        "dra.id",
        "JOIN",
        "{s}.mz_arrangement_sizes",
        "ars",
        "ON",
        "{rj.dod.ars}ars.operator_id",
        "=",
        "dod.id",
        "WHERE",
        "dod.name",
        "IN",
        "(",
        "'Arranged",
        "TopK",
        "input',",
        "'Arranged",
        "MinsMaxesHierarchical",
        "input',",
        "'Arrange",
        "ReduceMinsMaxes'",
        ")",
        "),",
        "levels",
        "AS",
        "(",
        "SELECT",
        "{r}dataflow_id,",
        "region_id,",
        "pg_catalog.count(*)",
        "AS",
        "levels",
        "FROM",
        "operators",
        "GROUP",
        "BY",
        "{r}dataflow_id,",
        "region_id",
        "),",
        "pivot",
        "AS",
        "(",
        "SELECT",
        "{r.o1}o1.dataflow_id,",
        "o1.region_id,",
        "o1.id,",
        "o1.records",
        "FROM",
        "operators",
        "o1",
        "WHERE",
        "o1.id",
        "=",
        "(",
        "SELECT",
        "pg_catalog.min(o2.id)",
        "FROM",
        "operators",
        "o2",
        "WHERE",
        "{rj.o2.o1}o2.dataflow_id",
        "=",
        "o1.dataflow_id",
        "AND",
        "o2.region_id",
        "=",
        "o1.region_id",
        ")",
        "),",
        "candidates",
        "AS",
        "(",
        "SELECT",
        "{r.o}o.dataflow_id,",
        "o.region_id,",
        "o.id,",
        "o.records,",
        "o.size",
        "FROM",
        "operators",
        "o",
        "JOIN",
        "pivot",
        "p",
        "ON",
        "{rj.o.p}o.dataflow_id",
        "=",
        "p.dataflow_id",
        "AND",
        "o.region_id",
        "=",
        "p.region_id",
        "AND",
        "o.id",
        "<>",
        "p.id",
        "WHERE",
        "o.records",
        ">=",
        "p.records",
        "*",
        "(1",
        "-",
        "0.15)",
        "),",
        "cuts",
        "AS",
        "(",
        "SELECT",
        "{r}dataflow_id,",
        "region_id,",
        "pg_catalog.count(*)",
        "AS",
        "to_cut,",
        "pg_catalog.sum(size)",
        "AS",
        "savings",
        "FROM",
        "candidates",
        "GROUP",
        "BY",
        "{r}dataflow_id,",
        "region_id",
        ")",
        "SELECT",
        "{r.c}dod.dataflow_id,",
        "dod.dataflow_name,",
        "dod.id",
        "AS",
        "region_id,",
        "dod.name",
        "AS",
        "region_name,",
        "l.levels,",
        "c.to_cut,",
        "c.savings,",
        "pg_catalog.pow(16,",
        "l.levels",
        "-",
        "c.to_cut)",
        "-",
        "1",
        "AS",
        "hint",
        "FROM",
        "cuts",
        "c",
        "JOIN",
        "levels",
        "l",
        "ON",
        "{rj.c.l}c.dataflow_id",
        "=",
        "l.dataflow_id",
        "AND",
        "c.region_id",
        "=",
        "l.region_id",
        "JOIN",
        "{s}.mz_dataflow_operator_dataflows",
        "dod",
        "ON",
        "{rj.c.dod}dod.dataflow_id",
        "=",
        "c.dataflow_id",
        "AND",
        "dod.id",
        "=",
        "c.region_id",
    ]
)

_VIEWS = (
    # The operator graph, per worker and as worker 0 has it.
    _view(
        "mz_dataflows_per_worker",
        (("id", _U8), ("worker_id", _U8), ("name", "text")),
        """
        SELECT {r.addrs}addrs.address[1] AS id, ops.worker_id, ops.name
        FROM {s}.mz_dataflow_addresses_per_worker addrs,
             {s}.mz_dataflow_operators_per_worker ops
        WHERE {rj.addrs.ops}addrs.id = ops.id AND addrs.worker_id = ops.worker_id
          AND mz_catalog.list_length(addrs.address) = 1
        """,
    ),
    _worker_zero("mz_dataflows", (("id", _U8), ("name", "text"))),
    _worker_zero("mz_dataflow_addresses", (("id", _U8), ("address", "uint8 list"))),
    _worker_zero(
        "mz_dataflow_channels",
        (
            ("id", _U8),
            ("from_index", _U8),
            ("from_port", _U8),
            ("to_index", _U8),
            ("to_port", _U8),
            ("type", "text"),
        ),
    ),
    _worker_zero("mz_dataflow_operators", (("id", _U8), ("name", "text"))),
    _view(
        "mz_dataflow_global_ids",
        (("id", _U8), ("global_id", "text")),
        "SELECT {r}id, global_id FROM {s}.mz_compute_dataflow_global_ids_per_worker "
        "WHERE worker_id = 0::uint8",
    ),
    _view(
        "mz_lir_mapping",
        (
            ("global_id", "text"),
            ("lir_id", _U8),
            ("operator", "text"),
            ("parent_lir_id", _U8),
            ("nesting", "uint2"),
            ("operator_id_start", _U8),
            ("operator_id_end", _U8),
        ),
        """
        SELECT {r}global_id, lir_id, operator, parent_lir_id, nesting,
               operator_id_start, operator_id_end
        FROM {s}.mz_compute_lir_mapping_per_worker WHERE worker_id = 0::uint8
        """,
    ),
    _view(
        "mz_dataflow_operator_dataflows_per_worker",
        (
            ("id", _U8),
            ("name", "text"),
            ("worker_id", _U8),
            ("dataflow_id", _U8),
            ("dataflow_name", "text"),
        ),
        """
        SELECT {r.ops}ops.id, ops.name, ops.worker_id,
               dfs.id AS dataflow_id, dfs.name AS dataflow_name
        FROM {s}.mz_dataflow_operators_per_worker ops,
             {s}.mz_dataflow_addresses_per_worker addrs,
             {s}.mz_dataflows_per_worker dfs
        WHERE {rj.ops.addrs}{rj.dfs.addrs}ops.id = addrs.id
          AND ops.worker_id = addrs.worker_id
          AND dfs.id = addrs.address[1] AND dfs.worker_id = addrs.worker_id
        """,
    ),
    _worker_zero(
        "mz_dataflow_operator_dataflows",
        (("id", _U8), ("name", "text"), ("dataflow_id", _U8), ("dataflow_name", "text")),
    ),
    _worker_zero("mz_compute_exports", (("export_id", "text"), ("dataflow_id", _U8))),
    _view(
        "mz_mappable_objects",
        (("name", "text"), ("global_id", "text")),
        """
        SELECT {r.mce}COALESCE(md.name || '.', '') || ms.name || '.' || mo.name AS name,
               mgi.global_id AS global_id
        FROM mz_catalog.mz_objects mo
             JOIN {s}.mz_compute_exports mce ON mo.id = mce.export_id
             JOIN mz_catalog.mz_schemas ms ON mo.schema_id = ms.id
             JOIN {s}.mz_dataflow_global_ids mgi
               ON {rj.mce.mgi}mce.dataflow_id = mgi.id
             LEFT JOIN mz_catalog.mz_databases md ON ms.database_id = md.id
        """,
    ),
    # Frontiers: the slowest worker's.
    _view(
        "mz_compute_frontiers",
        (("export_id", "text"), ("time", "mz_timestamp")),
        "SELECT {r}export_id, pg_catalog.min(time) AS time "
        "FROM {s}.mz_compute_frontiers_per_worker GROUP BY {r}export_id",
    ),
    _view(
        "mz_compute_import_frontiers",
        (("export_id", "text"), ("import_id", "text"), ("time", "mz_timestamp")),
        "SELECT {r}export_id, import_id, pg_catalog.min(time) AS time "
        "FROM {s}.mz_compute_import_frontiers_per_worker GROUP BY {r}export_id, import_id",
    ),
    # Channels with the operators at their ends: the channel's scope address
    # extended by the operator index at each end.
    _view(
        "mz_dataflow_channel_operators_per_worker",
        (
            ("id", _U8),
            ("worker_id", _U8),
            ("from_operator_id", _U8),
            ("from_operator_address", "uint8 list"),
            ("to_operator_id", _U8),
            ("to_operator_address", "uint8 list"),
            ("type", "text"),
        ),
        """
        WITH channel_operator_addresses AS (
            SELECT {r}id, worker_id, address || from_index AS from_address,
                   address || to_index AS to_address, type
            FROM {s}.mz_dataflow_channels_per_worker
                 JOIN {s}.mz_dataflow_addresses_per_worker USING ({ru}id, worker_id)
        ),
        operator_addresses AS (
            SELECT {r}id, worker_id, address
            FROM {s}.mz_dataflow_addresses_per_worker
                 JOIN {s}.mz_dataflow_operators_per_worker USING ({ru}id, worker_id)
        )
        SELECT {r.coa}coa.id, coa.worker_id,
               from_ops.id AS from_operator_id, coa.from_address AS from_operator_address,
               to_ops.id AS to_operator_id, coa.to_address AS to_operator_address, coa.type
        FROM channel_operator_addresses coa
             LEFT JOIN operator_addresses from_ops
               ON {rj.coa.from_ops}coa.from_address = from_ops.address
              AND coa.worker_id = from_ops.worker_id
             LEFT JOIN operator_addresses to_ops
               ON {rj.coa.to_ops}coa.to_address = to_ops.address
              AND coa.worker_id = to_ops.worker_id
        """,
    ),
    _worker_zero(
        "mz_dataflow_channel_operators",
        (
            ("id", _U8),
            ("from_operator_id", _U8),
            ("from_operator_address", "uint8 list"),
            ("to_operator_id", _U8),
            ("to_operator_address", "uint8 list"),
            ("type", "text"),
        ),
    ),
    # Arrangements.
    _arrangement_sizes_per_worker(),
    _view(
        "mz_arrangement_sizes",
        (("operator_id", _U8), *_SIZES),
        f"SELECT {{r}}operator_id, {_SUMMED_SIZES} "
        "FROM {s}.mz_arrangement_sizes_per_worker GROUP BY {r}operator_id",
    ),
    _counted(
        "mz_arrangement_sharing_per_worker",
        "mz_arrangement_sharing_raw",
        (("operator_id", _U8), ("worker_id", _U8)),
        "count",
    ),
    _view(
        "mz_arrangement_sharing",
        (("operator_id", _U8), ("count", "int8")),
        "SELECT {r}operator_id, count FROM {s}.mz_arrangement_sharing_per_worker "
        "WHERE worker_id = 0::uint8",
    ),
    _view(
        "mz_records_per_dataflow_operator_per_worker",
        (("id", _U8), ("name", "text"), ("worker_id", _U8), ("dataflow_id", _U8), *_SIZES),
        """
        SELECT {r.dod}dod.id, dod.name, dod.worker_id, dod.dataflow_id,
               ar_size.records AS records, ar_size.batches AS batches,
               ar_size.size AS size, ar_size.capacity AS capacity,
               ar_size.allocations AS allocations
        FROM {s}.mz_dataflow_operator_dataflows_per_worker dod
             LEFT JOIN {s}.mz_arrangement_sizes_per_worker ar_size
               ON {rj.dod.ar_size}dod.id = ar_size.operator_id
              AND dod.worker_id = ar_size.worker_id
        """,
    ),
    _view(
        "mz_records_per_dataflow_operator",
        (("id", _U8), ("name", "text"), ("dataflow_id", _U8), *_SIZES),
        f"SELECT {{r}}id, name, dataflow_id, {_SUMMED_SIZES} "
        "FROM {s}.mz_records_per_dataflow_operator_per_worker "
        "GROUP BY {r}id, name, dataflow_id",
    ),
    _view(
        "mz_records_per_dataflow_per_worker",
        (("id", _U8), ("name", "text"), ("worker_id", _U8), *_SIZES),
        """
        SELECT {r.rdo}rdo.dataflow_id AS id, dfs.name, rdo.worker_id,
               sum(rdo.records)::int8 AS records, sum(rdo.batches)::int8 AS batches,
               sum(rdo.size)::int8 AS size, sum(rdo.capacity)::int8 AS capacity,
               sum(rdo.allocations)::int8 AS allocations
        FROM {s}.mz_records_per_dataflow_operator_per_worker rdo,
             {s}.mz_dataflows_per_worker dfs
        WHERE {rj.rdo.dfs}rdo.dataflow_id = dfs.id AND rdo.worker_id = dfs.worker_id
        GROUP BY {r.rdo}rdo.dataflow_id, dfs.name, rdo.worker_id
        """,
    ),
    _view(
        "mz_records_per_dataflow",
        (("id", _U8), ("name", "text"), *_SIZES),
        f"SELECT {{r}}id, name, {_SUMMED_SIZES} "
        "FROM {s}.mz_records_per_dataflow_per_worker GROUP BY {r}id, name",
    ),
    _view(
        "mz_dataflow_arrangement_sizes",
        (("id", _U8), ("name", "text"), *_SIZES),
        """
        SELECT {r.mdod}mdod.dataflow_id AS id, mdod.dataflow_name AS name,
               sum(mas.records)::int8 AS records, sum(mas.batches)::int8 AS batches,
               sum(mas.size)::int8 AS size, sum(mas.capacity)::int8 AS capacity,
               sum(mas.allocations)::int8 AS allocations
        FROM {s}.mz_dataflow_operator_dataflows mdod
             LEFT JOIN {s}.mz_arrangement_sizes mas
               ON {rj.mdod.mas}mdod.id = mas.operator_id
        GROUP BY {r.mdod}mdod.dataflow_id, mdod.dataflow_name
        """,
    ),
    # Histograms and counters: the row's multiplicity is the count.
    _counted(
        "mz_peek_durations_histogram_per_worker",
        "mz_peek_durations_histogram_raw",
        (("worker_id", _U8), ("type", "text"), ("duration_ns", _U8)),
        "count",
    ),
    _summed("mz_peek_durations_histogram", (("type", "text"), ("duration_ns", _U8)), ("count",)),
    _counted(
        "mz_scheduling_elapsed_per_worker",
        "mz_scheduling_elapsed_raw",
        (("id", _U8), ("worker_id", _U8)),
        "elapsed_ns",
    ),
    _summed("mz_scheduling_elapsed", (("id", _U8),), ("elapsed_ns",)),
    _counted(
        "mz_compute_operator_durations_histogram_per_worker",
        "mz_compute_operator_durations_histogram_raw",
        (("id", _U8), ("worker_id", _U8), ("duration_ns", _U8)),
        "count",
    ),
    _summed(
        "mz_compute_operator_durations_histogram",
        (("id", _U8), ("duration_ns", _U8)),
        ("count",),
    ),
    _counted(
        "mz_scheduling_parks_histogram_per_worker",
        "mz_scheduling_parks_histogram_raw",
        (("worker_id", _U8), ("slept_for_ns", _U8), ("requested_ns", _U8)),
        "count",
    ),
    _summed(
        "mz_scheduling_parks_histogram",
        (("slept_for_ns", _U8), ("requested_ns", _U8)),
        ("count",),
    ),
    # Errors. Materialize forwards an index's errors to indexes that reuse it
    # without a dataflow of their own; every Loupe index has its own dataflow
    # and logs its own count, so the logged counts are the whole answer.
    _view(
        "mz_compute_error_counts_per_worker",
        (("export_id", "text"), ("worker_id", _U8), ("count", "int8")),
        "SELECT {r}export_id, worker_id, count FROM {s}.mz_compute_error_counts_raw",
    ),
    _view(
        "mz_compute_error_counts",
        (("export_id", "text"), ("count", "numeric")),
        "SELECT {r}export_id, pg_catalog.sum(count) AS count "
        "FROM {s}.mz_compute_error_counts_per_worker GROUP BY {r}export_id "
        "HAVING pg_catalog.sum(count) <> 0",
    ),
    _message_counts_per_worker(),
    _summed(
        "mz_message_counts",
        (("channel_id", _U8),),
        ("sent", "received", "batch_sent", "batch_received"),
    ),
    _view(
        "mz_active_peeks",
        (("id", "uuid"), ("object_id", "text"), ("type", "text"), ("time", "mz_timestamp")),
        "SELECT {r}id, object_id, type, time FROM {s}.mz_active_peeks_per_worker "
        "WHERE worker_id = 0::uint8",
    ),
    # Reachability: a source of 0 is the operator's own scope, else its child.
    _view(
        "mz_dataflow_operator_reachability_per_worker",
        (
            ("id", _U8),
            ("worker_id", _U8),
            ("port", _U8),
            ("update_type", "text"),
            ("time", "mz_timestamp"),
            ("count", "int8"),
        ),
        """
        SELECT {r.reachability}addr2.id, reachability.worker_id, port, update_type, time,
               pg_catalog.count(*) AS count
        FROM {s}.mz_dataflow_operator_reachability_raw reachability,
             {s}.mz_dataflow_addresses_per_worker addr1,
             {s}.mz_dataflow_addresses_per_worker addr2
        WHERE {rj.reachability.addr1}{rj.reachability.addr2}addr2.address = CASE
                WHEN source = 0 THEN addr1.address ELSE addr1.address || reachability.source
              END
          AND addr1.id = reachability.id AND addr1.worker_id = reachability.worker_id
          AND addr2.worker_id = reachability.worker_id
        GROUP BY {r.reachability}addr2.id, reachability.worker_id, port, update_type, time
        """,
    ),
    _summed(
        "mz_dataflow_operator_reachability",
        (("id", _U8), ("port", _U8), ("update_type", "text"), ("time", "mz_timestamp")),
        ("count",),
    ),
    # Parents: the operator whose address is one's own without its last index.
    _view(
        "mz_dataflow_operator_parents_per_worker",
        (("id", _U8), ("parent_id", _U8), ("worker_id", _U8)),
        """
        WITH operator_addrs AS (
            SELECT {r}id, address, worker_id
            FROM {s}.mz_dataflow_addresses_per_worker
                 JOIN {s}.mz_dataflow_operators_per_worker USING ({ru}id, worker_id)
        ),
        parent_addrs AS (
            SELECT {r}id, address[1:list_length(address) - 1] AS parent_address, worker_id
            FROM operator_addrs
        )
        SELECT {r.pa}pa.id, oa.id AS parent_id, pa.worker_id
        FROM parent_addrs pa
             JOIN operator_addrs oa
               ON {rj.pa.oa}pa.parent_address = oa.address AND pa.worker_id = oa.worker_id
        """,
    ),
    _view(
        "mz_dataflow_operator_parents",
        (("id", _U8), ("parent_id", _U8)),
        "SELECT {r}id, parent_id FROM {s}.mz_dataflow_operator_parents_per_worker "
        "WHERE worker_id = 0::uint8",
    ),
    _view("mz_expected_group_size_advice", _ADVICE_COLUMNS, _ADVICE),
)
VIEWS: dict[str, IntrospectionView] = {v.name: v for v in _VIEWS}


def passed_over(schema: str, name: str, schemas: Sequence[str]) -> bool:
    """Whether an unqualified ``name`` skips ``schema`` on a search path of ``schemas``.

    ``mz_internal`` holds the persisted twin of every introspection relation under
    the same name. In Materialize these names are only ``mz_introspection``'s, so on a
    search path naming both (the Console's ``mz_catalog, mz_internal, …,
    mz_introspection``) an unqualified one means the replica's own relation, as there.
    """
    return (
        schema == INTERNAL and INTROSPECTION in schemas and (name in VIEWS or name in logs.BY_NAME)
    )
