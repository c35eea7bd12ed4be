"""``EXPLAIN ANALYZE``: SQL over the introspection relations, written as Materialize writes it.

Materialize plans ``EXPLAIN ANALYZE`` as a query over ``mz_introspection``
(``plan_explain_analyze_object`` and ``plan_explain_analyze_cluster`` in
``src/sql/src/plan/statement/dml.rs``): CTEs attributing arrangement sizes
(``mz_arrangement_sizes_per_worker``) and scheduling time
(``mz_scheduling_elapsed_per_worker``) to LIR nodes through the operator id
ranges of ``mz_lir_mapping``, joined back to the plan's nodes, each indented
by its nesting, for the object ``mz_mappable_objects`` names. ``AS SQL``
returns that query instead of running it. The queries here are the same,
CTE for CTE and column for column, with two differences:

- **Every replica** (Loupe's): without a replica to read (no ``SET
  cluster_replica`` and not exactly one replica), the query reads the
  persisted ``mz_internal`` relations instead, keyed by ``replica_id`` and
  ``incarnation`` (every join and grouping carries them), and adds a
  ``replica`` column (the replica's name) after ``operator`` (``global_id``
  for ``CLUSTER``).
- ``HINTS``: Materialize's query left-joins a parenthesized join that reads
  the left side laterally; here the same rows come from a CTE.

Loupe's own ``EXPLAIN ANALYZE HYDRATION FOR …``: per LIR node and replica,
whether it is hydrated and its progress (``mz_compute_operator_hydration_statuses``
and ``…_progress``, written by the controller for every replica), the node
named and indented as ``mz_lir_mapping`` (persisted) has it.

Templates use ``loupe.introspection.views.render``'s placeholders (``{s}``
the schema, ``{r…}``/``{rj…}``/``{ru}`` the replica columns, empty for
``mz_introspection``).
"""

from __future__ import annotations

from dataclasses import dataclass

from loupe.introspection.views import INTERNAL, INTROSPECTION, render

CPU = "cpu"
MEMORY = "memory"
HINTS = "hints"
HYDRATION = "hydration"

# The operator ids of an LIR node, as Materialize generates them.
_VALID_ID = (
    "generate_series((mlm.operator_id_start)::int8, (mlm.operator_id_end - 1)::int8) AS valid_id"
)


def _attributed(source: str, alias: str, on: str, select: str, group: str) -> str:
    """A CTE body: ``source`` rows attributed to the LIR node whose operators they are."""
    return f"""
  SELECT {{r.mlm}}mlm.global_id AS global_id,
         mlm.lir_id AS lir_id,{select}
    FROM            {{s}}.mz_lir_mapping mlm
         CROSS JOIN {_VALID_ID}
               JOIN {{s}}.{source} {alias}
                 ON ({{rj.{alias}.mlm}}{on} = valid_id)
GROUP BY {{r.mlm}}mlm.global_id, mlm.lir_id{group}"""


_MEMORY_SUMMARY = _attributed(
    "mz_arrangement_sizes_per_worker",
    "mas",
    "mas.operator_id",
    """
         SUM(mas.size) AS total_memory,
         SUM(mas.records) AS total_records,
         CASE WHEN COUNT(DISTINCT mas.worker_id) <> 0 THEN SUM(mas.size) / COUNT(DISTINCT mas.worker_id) ELSE NULL END AS avg_memory,
         CASE WHEN COUNT(DISTINCT mas.worker_id) <> 0 THEN SUM(mas.records) / COUNT(DISTINCT mas.worker_id) ELSE NULL END AS avg_records""",
    "",
)
_MEMORY_PER_WORKER = _attributed(
    "mz_arrangement_sizes_per_worker",
    "mas",
    "mas.operator_id",
    """
         mas.worker_id AS worker_id,
         SUM(mas.size) AS worker_memory,
         SUM(mas.records) AS worker_records""",
    ", mas.worker_id",
)
_MEMORY_TOTALS = _attributed(
    "mz_arrangement_sizes_per_worker",
    "mas",
    "mas.operator_id",
    """
         SUM(mas.size) AS total_memory,
         SUM(mas.records) AS total_records""",
    "",
)
_CPU_SUMMARY = _attributed(
    "mz_scheduling_elapsed_per_worker",
    "mse",
    "mse.id",
    """
         SUM(mse.elapsed_ns) AS total_ns,
         CASE WHEN COUNT(DISTINCT mse.worker_id) <> 0 THEN SUM(mse.elapsed_ns) / COUNT(DISTINCT mse.worker_id) ELSE NULL END AS avg_ns""",
    "",
)
_CPU_PER_WORKER = _attributed(
    "mz_scheduling_elapsed_per_worker",
    "mse",
    "mse.id",
    """
         mse.worker_id AS worker_id,
         SUM(mse.elapsed_ns) AS worker_ns""",
    ", mse.worker_id",
)
_CPU_TOTALS = _attributed(
    "mz_scheduling_elapsed_per_worker",
    "mse",
    "mse.id",
    """
         SUM(mse.elapsed_ns) AS total_ns""",
    "",
)
# HINTS: the advice for the regions among the node's operators (Materialize
# left-joins ``(generate_series(…) AS valid_id JOIN advice ON …)``).
_HINTS = f"""
  SELECT {{r.mlm}}mlm.global_id AS global_id,
         mlm.lir_id AS lir_id,
         megsa.levels AS levels,
         megsa.to_cut AS to_cut,
         megsa.hint AS hint,
         megsa.savings AS savings
    FROM            {{s}}.mz_lir_mapping mlm
               JOIN {{s}}.mz_dataflow_global_ids mdgi
                 ON ({{rj.mlm.mdgi}}mlm.global_id = mdgi.global_id)
         CROSS JOIN {_VALID_ID}
               JOIN {{s}}.mz_expected_group_size_advice megsa
                 ON ({{rj.megsa.mlm}}megsa.region_id = valid_id AND megsa.dataflow_id = mdgi.id)"""


@dataclass(frozen=True)
class Target:
    """What an ``EXPLAIN ANALYZE`` reads: one replica's logs, or every replica's persisted ones.

    ``persisted``: read ``mz_internal`` (every replica, a ``replica`` column);
    ``cluster_id``: with ``persisted``, only that cluster's replicas (``CLUSTER``).
    """

    persisted: bool = False
    cluster_id: str = ""

    @property
    def schema(self) -> str:
        return INTERNAL if self.persisted else INTROSPECTION


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _query(
    target: Target,
    ctes: list[tuple[str, str]],
    columns: list[str],
    from_: list[str],
    predicates: list[str],
    order_by: list[str],
    literals: list[str],
) -> str:
    """The query of these parts; ``literals``: predicates with literals, not templates (an
    object's name could hold a placeholder's text)."""
    schema = target.schema
    with_ = "WITH " + ",\n".join(f"{name} AS ({body})" for name, body in ctes) if ctes else ""
    conditions = [render(p, schema) for p in predicates] + literals
    where = f"\nWHERE {' AND '.join(conditions)}" if conditions else ""
    listed = ",\n       ".join(columns)
    joined = "\n     ".join(from_)
    select = render(f"{with_}\nSELECT {listed}\nFROM {joined}", schema)
    return f"{select}{where}\nORDER BY {render(', '.join(order_by), schema)}".strip()


def object_sql(properties: tuple[str, ...], skew: bool, name: str, target: Target) -> str:
    """``EXPLAIN ANALYZE {CPU | MEMORY} [, …] [WITH SKEW] | HINTS FOR <object name>``'s query.

    ``name``: the object's name as ``mz_mappable_objects`` has it (database.schema.name).
    """
    ctes: list[tuple[str, str]] = []
    columns = ["REPEAT(' ', nesting * 2) || operator AS operator"]
    from_ = ["{s}.mz_lir_mapping mlm"]
    predicates: list[str] = []
    literals = [f"mo.name = {_literal(name)}"]
    order_by = ["mlm.lir_id DESC"]
    if target.persisted:
        columns.append("r.name AS replica")
        order_by.append("replica")
    worker_id: str | None = None
    for prop in dict.fromkeys(properties):
        if prop == MEMORY:
            ctes.append(("summary_memory", _MEMORY_SUMMARY))
            from_.append("LEFT JOIN summary_memory sm USING ({ru}global_id, lir_id)")
            if skew:
                ctes.append(("per_worker_memory", _MEMORY_PER_WORKER))
                from_.append("LEFT JOIN per_worker_memory pwm USING ({ru}global_id, lir_id)")
                if worker_id is not None:
                    predicates.append(f"pwm.worker_id = {worker_id}")
                else:
                    worker_id = "pwm.worker_id"
                    columns.append("pwm.worker_id AS worker_id")
                    order_by.append("worker_id")
                columns.extend(
                    [
                        "CASE WHEN pwm.worker_id IS NOT NULL AND sm.avg_memory <> 0 THEN ROUND(pwm.worker_memory / sm.avg_memory, 2) ELSE NULL END AS memory_ratio",
                        "pg_size_pretty(pwm.worker_memory) AS worker_memory",
                        "pg_size_pretty(sm.avg_memory) AS avg_memory",
                        "pg_size_pretty(sm.total_memory) AS total_memory",
                        "CASE WHEN pwm.worker_id IS NOT NULL AND sm.avg_records <> 0 THEN ROUND(pwm.worker_records / sm.avg_records, 2) ELSE NULL END AS records_ratio",
                        "pwm.worker_records AS worker_records",
                        "sm.avg_records AS avg_records",
                        "sm.total_records AS total_records",
                    ]
                )
            else:
                columns.extend(
                    [
                        "pg_size_pretty(sm.total_memory) AS total_memory",
                        "sm.total_records AS total_records",
                    ]
                )
        elif prop == CPU:
            ctes.append(("summary_cpu", _CPU_SUMMARY))
            from_.append("LEFT JOIN summary_cpu sc USING ({ru}global_id, lir_id)")
            if skew:
                ctes.append(("per_worker_cpu", _CPU_PER_WORKER))
                from_.append("LEFT JOIN per_worker_cpu pwc USING ({ru}global_id, lir_id)")
                if worker_id is not None:
                    predicates.append(f"pwc.worker_id = {worker_id}")
                else:
                    worker_id = "pwc.worker_id"
                    columns.append("pwc.worker_id AS worker_id")
                    order_by.append("worker_id")
                columns.extend(
                    [
                        "CASE WHEN pwc.worker_id IS NOT NULL AND sc.avg_ns <> 0 THEN ROUND(pwc.worker_ns / sc.avg_ns, 2) ELSE NULL END AS cpu_ratio",
                        "pwc.worker_ns / 1000 * '1 microsecond'::INTERVAL AS worker_elapsed",
                        "sc.avg_ns / 1000 * '1 microsecond'::INTERVAL AS avg_elapsed",
                    ]
                )
            columns.append("sc.total_ns / 1000 * '1 microsecond'::INTERVAL AS total_elapsed")
        elif prop == HINTS:
            ctes.append(("hints", _HINTS))
            from_.append("LEFT JOIN hints megsa USING ({ru}global_id, lir_id)")
            columns.extend(
                [
                    "megsa.levels AS levels",
                    "megsa.to_cut AS to_cut",
                    "megsa.hint AS hint",
                    "pg_size_pretty(megsa.savings) AS savings",
                ]
            )
        else:
            raise ValueError(f"not an EXPLAIN ANALYZE property: {prop}")
    from_.append("JOIN {s}.mz_mappable_objects mo ON ({rj.mlm.mo}mlm.global_id = mo.global_id)")
    if target.persisted:
        from_.append("JOIN mz_catalog.mz_cluster_replicas r ON (r.id = mlm.replica_id)")
    return _query(target, ctes, columns, from_, predicates, order_by, literals)


def cluster_sql(properties: tuple[str, ...], skew: bool, target: Target) -> str:
    """``EXPLAIN ANALYZE CLUSTER {CPU | MEMORY} [, …] [WITH SKEW]``'s query."""
    ctes: list[tuple[str, str]] = []
    columns = ["mo.name AS object", "mo.global_id AS global_id"]
    from_ = ["{s}.mz_mappable_objects mo"]
    predicates: list[str] = []
    literals: list[str] = []
    order_by: list[str] = []
    if target.persisted:
        columns.append("r.name AS replica")
        literals.append(f"r.cluster_id = {_literal(target.cluster_id)}")
    worker_id: str | None = None
    for prop in dict.fromkeys(properties):
        if prop == MEMORY and skew:
            set_worker_id = False
            if worker_id is not None:
                predicates.append(f"om.worker_id = {worker_id}")
            else:
                worker_id = "om.worker_id"
                columns.append("om.worker_id AS worker_id")
                set_worker_id = True
            ctes.extend(
                [
                    ("per_operator_memory_summary", _MEMORY_SUMMARY),
                    ("per_operator_memory_per_worker", _MEMORY_PER_WORKER),
                    (
                        "per_operator_memory_ratios",
                        """
  SELECT {r.pompw}pompw.global_id AS global_id,
         pompw.lir_id AS lir_id,
         pompw.worker_id AS worker_id,
         CASE WHEN pompw.worker_id IS NOT NULL AND poms.avg_memory <> 0 THEN ROUND(pompw.worker_memory / poms.avg_memory, 2) ELSE NULL END AS memory_ratio,
         CASE WHEN pompw.worker_id IS NOT NULL AND poms.avg_records <> 0 THEN ROUND(pompw.worker_records / poms.avg_records, 2) ELSE NULL END AS records_ratio
    FROM      per_operator_memory_per_worker pompw
         JOIN per_operator_memory_summary poms
        USING ({ru}global_id, lir_id)""",
                    ),
                    (
                        "object_memory",
                        """
  SELECT {r.pompw}pompw.global_id AS global_id,
         pompw.worker_id AS worker_id,
         MAX(pomr.memory_ratio) AS max_operator_memory_ratio,
         MAX(pomr.records_ratio) AS max_operator_records_ratio,
         SUM(pompw.worker_memory) AS worker_memory,
         SUM(pompw.worker_records) AS worker_records
    FROM      per_operator_memory_per_worker pompw
         JOIN per_operator_memory_ratios pomr
        USING ({ru}global_id, worker_id, lir_id)
GROUP BY {r.pompw}pompw.global_id, pompw.worker_id""",
                    ),
                    (
                        "object_average_memory",
                        """
  SELECT {r.om}om.global_id AS global_id,
         SUM(om.worker_memory) AS total_memory,
         CASE WHEN COUNT(DISTINCT om.worker_id) <> 0 THEN SUM(om.worker_memory) / COUNT(DISTINCT om.worker_id) ELSE NULL END AS avg_memory,
         SUM(om.worker_records) AS total_records,
         CASE WHEN COUNT(DISTINCT om.worker_id) <> 0 THEN SUM(om.worker_records) / COUNT(DISTINCT om.worker_id) ELSE NULL END AS avg_records
    FROM object_memory om
GROUP BY {r.om}om.global_id""",
                    ),
                ]
            )
            from_.append("LEFT JOIN object_memory om USING ({ru}global_id)")
            from_.append("LEFT JOIN object_average_memory oam USING ({ru}global_id)")
            columns.extend(
                [
                    "om.max_operator_memory_ratio AS max_operator_memory_ratio",
                    "pg_size_pretty(om.worker_memory) AS worker_memory",
                    "pg_size_pretty(oam.avg_memory) AS avg_memory",
                    "pg_size_pretty(oam.total_memory) AS total_memory",
                    "om.max_operator_records_ratio AS max_operator_records_ratio",
                    "om.worker_records AS worker_records",
                    "oam.avg_records AS avg_records",
                    "oam.total_records AS total_records",
                ]
            )
            order_by.extend(
                [
                    "max_operator_memory_ratio DESC",
                    "max_operator_records_ratio DESC",
                    "om.worker_memory DESC",
                    "worker_records DESC",
                ]
            )
            if set_worker_id:
                order_by.append("worker_id")
        elif prop == MEMORY:
            ctes.extend(
                [
                    ("per_operator_memory_totals", _MEMORY_TOTALS),
                    (
                        "object_memory_totals",
                        """
  SELECT {r.pomt}pomt.global_id AS global_id,
         SUM(pomt.total_memory) AS total_memory,
         SUM(pomt.total_records) AS total_records
    FROM per_operator_memory_totals pomt
GROUP BY {r.pomt}pomt.global_id""",
                    ),
                ]
            )
            from_.append("LEFT JOIN object_memory_totals omt USING ({ru}global_id)")
            columns.extend(
                [
                    "pg_size_pretty(omt.total_memory) AS total_memory",
                    "omt.total_records AS total_records",
                ]
            )
            order_by.extend(["omt.total_memory DESC", "total_records DESC"])
        elif prop == CPU and skew:
            set_worker_id = False
            if worker_id is not None:
                predicates.append(f"oc.worker_id = {worker_id}")
            else:
                worker_id = "oc.worker_id"
                columns.append("oc.worker_id AS worker_id")
                set_worker_id = True
            ctes.extend(
                [
                    ("per_operator_cpu_summary", _CPU_SUMMARY),
                    ("per_operator_cpu_per_worker", _CPU_PER_WORKER),
                    (
                        "per_operator_cpu_ratios",
                        """
  SELECT {r.pocpw}pocpw.global_id AS global_id,
         pocpw.lir_id AS lir_id,
         pocpw.worker_id AS worker_id,
         CASE WHEN pocpw.worker_id IS NOT NULL AND pocs.avg_ns <> 0 THEN ROUND(pocpw.worker_ns / pocs.avg_ns, 2) ELSE NULL END AS cpu_ratio
    FROM      per_operator_cpu_per_worker pocpw
         JOIN per_operator_cpu_summary pocs
        USING ({ru}global_id, lir_id)""",
                    ),
                    (
                        "object_cpu",
                        """
  SELECT {r.pocpw}pocpw.global_id AS global_id,
         pocpw.worker_id AS worker_id,
         MAX(pomr.cpu_ratio) AS max_operator_cpu_ratio,
         SUM(pocpw.worker_ns) AS worker_ns
    FROM      per_operator_cpu_per_worker pocpw
         JOIN per_operator_cpu_ratios pomr
        USING ({ru}global_id, worker_id, lir_id)
GROUP BY {r.pocpw}pocpw.global_id, pocpw.worker_id""",
                    ),
                    (
                        "object_average_cpu",
                        """
  SELECT {r.oc}oc.global_id AS global_id,
         SUM(oc.worker_ns) AS total_ns,
         CASE WHEN COUNT(DISTINCT oc.worker_id) <> 0 THEN SUM(oc.worker_ns) / COUNT(DISTINCT oc.worker_id) ELSE NULL END AS avg_ns
    FROM object_cpu oc
GROUP BY {r.oc}oc.global_id""",
                    ),
                ]
            )
            from_.append("LEFT JOIN object_cpu oc USING ({ru}global_id)")
            from_.append("LEFT JOIN object_average_cpu oac USING ({ru}global_id)")
            columns.extend(
                [
                    "oc.max_operator_cpu_ratio AS max_operator_cpu_ratio",
                    "oc.worker_ns / 1000 * '1 microsecond'::interval AS worker_elapsed",
                    "oac.avg_ns / 1000 * '1 microsecond'::interval AS avg_elapsed",
                    "oac.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed",
                ]
            )
            order_by.extend(["max_operator_cpu_ratio DESC", "worker_elapsed DESC"])
            if set_worker_id:
                order_by.append("worker_id")
        elif prop == CPU:
            ctes.extend(
                [
                    ("per_operator_cpu_totals", _CPU_TOTALS),
                    (
                        "object_cpu_totals",
                        """
  SELECT {r.poct}poct.global_id AS global_id,
         SUM(poct.total_ns) AS total_ns
    FROM per_operator_cpu_totals poct
GROUP BY {r.poct}poct.global_id""",
                    ),
                ]
            )
            from_.append("LEFT JOIN object_cpu_totals oct USING ({ru}global_id)")
            columns.append("oct.total_ns / 1000 * '1 microsecond'::interval AS total_elapsed")
            order_by.append("total_elapsed DESC")
        else:
            raise ValueError(f"not an EXPLAIN ANALYZE CLUSTER property: {prop}")
    if target.persisted:
        from_.append("JOIN mz_catalog.mz_cluster_replicas r ON (r.id = mo.replica_id)")
        order_by.append("replica")
    order_by.append("mo.name DESC")
    return _query(target, ctes, columns, from_, predicates, order_by, literals)


def hydration_sql(object_id: str, name: str, replica_id: str = "") -> str:
    """``EXPLAIN ANALYZE HYDRATION FOR <object>``'s query: every replica's, or ``replica_id``'s.

    Rows: the object's LIR nodes on each replica, those the controller's
    hydration collections report and those the replica's persisted
    ``mz_lir_mapping`` lists (a node without a report is not hydrated); a
    node's operator and nesting from that mapping (``node <id>`` when the
    replica keeps no introspection).
    """
    nodes = [f"h.object_id = {_literal(object_id)}"]
    mapped = [f"mo.name = {_literal(name)}"]
    if replica_id:
        nodes.append(f"h.replica_id = {_literal(replica_id)}")
        mapped.append(f"mlm.replica_id = {_literal(replica_id)}")
    return f"""WITH
    nodes AS (
        SELECT h.replica_id AS replica_id, h.physical_plan_node_id AS lir_id,
               h.hydrated AS hydrated
        FROM mz_internal.mz_compute_operator_hydration_statuses h
        WHERE {" AND ".join(nodes)}
    ),
    mapping AS (
        SELECT mlm.replica_id AS replica_id, mlm.lir_id AS lir_id,
               mlm.operator AS operator, mlm.nesting AS nesting
        FROM mz_internal.mz_lir_mapping mlm
        JOIN mz_internal.mz_mappable_objects mo
          ON (mlm.replica_id = mo.replica_id AND mlm.incarnation = mo.incarnation
              AND mlm.global_id = mo.global_id)
        WHERE {" AND ".join(mapped)}
    ),
    plan_nodes AS (
        SELECT COALESCE(n.replica_id, m.replica_id) AS replica_id,
               COALESCE(n.lir_id, m.lir_id) AS lir_id,
               m.operator AS operator, m.nesting AS nesting,
               COALESCE(n.hydrated, false) AS hydrated
        FROM nodes n
        FULL JOIN mapping m ON (m.replica_id = n.replica_id AND m.lir_id = n.lir_id)
    )
SELECT COALESCE(REPEAT(' ', pn.nesting * 2) || pn.operator, 'node ' || pn.lir_id::text) AS operator,
       r.name AS replica,
       pn.hydrated AS hydrated,
       p.records_done AS records_done,
       p.records_estimated AS records_estimated
FROM plan_nodes pn
LEFT JOIN mz_internal.mz_compute_operator_hydration_progress p
  ON (p.replica_id = pn.replica_id AND p.object_id = {_literal(object_id)}
      AND p.physical_plan_node_id = pn.lir_id)
JOIN mz_catalog.mz_cluster_replicas r ON (r.id = pn.replica_id)
ORDER BY pn.lir_id DESC, replica"""
