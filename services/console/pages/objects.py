"""Objects: indexes, materialized views and sources with their hydration on each replica;
an object's plan tree hydrating live, node by node, per replica.

``/objects`` runs a few set-based queries at once (objects, replicas, hydration,
arrangement memory, frontiers) and joins them here, never a query per object.
``/objects/<id>`` draws ``EXPLAIN PHYSICAL PLAN WITH (node_ids)`` as nested lists,
each node with its hydration, progress, ETA, CPU time and memory on each replica
(from the persisted ``mz_internal`` relations, so a crashed replica keeps its last
state). ``/objects/<id>/events`` streams a ``SUBSCRIBE`` to the object's node
statuses and progress while the page is open (server-sent events).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from loupe.console import format as fmt
from loupe.console.app import SETTINGS, render, server_sent_events, session_of
from loupe.console.plantree import PlanNode, node_hydration, parse_plan
from loupe.console.sql import Change, Query, Result, SqlError

routes = web.RouteTableDef()

KINDS = {"index": "INDEX", "materialized-view": "MATERIALIZED VIEW"}
TYPE_LABELS = {"index": "index", "materialized-view": "materialized view", "source": "source"}
# Seconds without a change after which the live stream writes a keep-alive (so a
# closed page is noticed and its SUBSCRIBE ended even when nothing changes).
KEEPALIVE = 5.0

# -- the list ---------------------------------------------------------------------

# An object with its cluster, schema and database (the list's and the page's).
OBJECT_FROM = """SELECT o.id, o.name, o.type, o.cluster_id, c.name AS cluster,
       s.name AS schema, d.name AS database
FROM mz_catalog.mz_objects o
JOIN mz_catalog.mz_schemas s ON s.id = o.schema_id
LEFT JOIN mz_catalog.mz_databases d ON d.id = s.database_id
LEFT JOIN mz_catalog.mz_clusters c ON c.id = o.cluster_id"""

OBJECTS_SQL = (
    OBJECT_FROM
    + """
WHERE o.type IN ('index', 'materialized-view', 'source'){where}
ORDER BY o.id LIKE 's%%', d.name, s.name, o.name"""
)

REPLICAS_SQL = """SELECT r.id AS replica_id, r.name AS replica, r.cluster_id, c.name AS cluster,
       s.status, s.reason, s.updated_at, s.incarnation
FROM mz_catalog.mz_cluster_replicas r
JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id
LEFT JOIN mz_internal.mz_cluster_replica_statuses s ON s.replica_id = r.id{where}
ORDER BY c.name, r.name"""

HYDRATION_SQL = """SELECT p.object_id, p.replica_id, p.hydrated, p.records_done,
       p.records_estimated, p.eta, s.hydration_time
FROM mz_internal.mz_compute_hydration_progress p
LEFT JOIN mz_internal.mz_compute_hydration_statuses s
  ON s.object_id = p.object_id AND s.replica_id = p.replica_id{where}"""

MEMORY_SQL = """SELECT g.replica_id, g.global_id AS object_id, sum(a.size) AS memory_bytes,
       sum(a.records) AS records
FROM mz_internal.mz_dataflow_arrangement_sizes a
JOIN mz_internal.mz_dataflow_global_ids g
  ON g.replica_id = a.replica_id AND g.incarnation = a.incarnation AND g.id = a.id{where}
GROUP BY g.replica_id, g.global_id"""

FRONTIERS_SQL = """SELECT replica_id, export_id AS object_id,
       to_timestamp(time::text::int8 / 1000.0) AS write_frontier,
       now() - to_timestamp(time::text::int8 / 1000.0) AS lag
FROM mz_internal.mz_compute_frontiers{where}"""


def list_queries(
    cluster: str | None, replica: str | None, system: bool
) -> tuple[Query, Query, Query, Query, Query]:
    """The list's queries, filtered in SQL by cluster (id or name) and replica id."""
    objects_where: list[str] = []
    objects_params: list[Any] = []
    if not system:
        objects_where.append("o.id NOT LIKE 's%%'")
    if cluster:
        objects_where.append("(c.id = %s OR c.name = %s)")
        objects_params += [cluster, cluster]
    if replica:
        objects_where.append(
            "o.cluster_id IN (SELECT cluster_id FROM mz_catalog.mz_cluster_replicas WHERE id = %s)"
        )
        objects_params.append(replica)
    replicas_where: list[str] = []
    replicas_params: list[Any] = []
    if cluster:
        replicas_where.append("(c.id = %s OR c.name = %s)")
        replicas_params += [cluster, cluster]
    if replica:
        replicas_where.append("r.id = %s")
        replicas_params.append(replica)

    def where(conditions: list[str], first: str = "\nWHERE ") -> str:
        return first + " AND ".join(conditions) if conditions else ""

    by_replica = ["replica_id = %s"] if replica else []
    params = (replica,) if replica else ()
    return (
        Query(OBJECTS_SQL.format(where=where(objects_where, "\n  AND ")), tuple(objects_params)),
        Query(REPLICAS_SQL.format(where=where(replicas_where)), tuple(replicas_params)),
        Query(HYDRATION_SQL.format(where=where(["p." + c for c in by_replica])), params),
        Query(MEMORY_SQL.format(where=where(["g." + c for c in by_replica])), params),
        Query(FRONTIERS_SQL.format(where=where(by_replica)), params),
    )


def _by_key(result: Result | SqlError, *key: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    if isinstance(result, SqlError):
        return {}
    return {tuple(row[k] for k in key): row for row in result.dicts()}


def replica_state(hydration: dict[str, Any] | None) -> str:
    """An object's state on a replica: no row at all is 'unknown' (no report)."""
    if hydration is None:
        return "unknown"
    return fmt.hydration_state(hydration["hydrated"], hydration["records_done"])


def object_rows(
    objects: Result | SqlError,
    replicas: Result | SqlError,
    hydration: Result | SqlError,
    memory: Result | SqlError,
    frontiers: Result | SqlError,
) -> list[dict[str, Any]]:
    """Each object with one entry per replica of its cluster, joined here in Python."""
    if isinstance(objects, SqlError):
        return []
    per_cluster: dict[str, list[dict[str, Any]]] = {}
    if not isinstance(replicas, SqlError):
        for row in replicas.dicts():
            per_cluster.setdefault(row["cluster_id"], []).append(row)
    hydrations = _by_key(hydration, "object_id", "replica_id")
    memories = _by_key(memory, "object_id", "replica_id")
    lags = _by_key(frontiers, "object_id", "replica_id")
    rows = []
    for obj in objects.dicts():
        entries = []
        for replica in per_cluster.get(obj["cluster_id"], []) if obj["cluster_id"] else []:
            key = (obj["id"], replica["replica_id"])
            found = hydrations.get(key)
            entries.append(
                {
                    "replica": replica,
                    "state": replica_state(found),
                    "hydration": found,
                    "memory": memories.get(key),
                    "frontier": lags.get(key),
                }
            )
        rows.append(
            {**obj, "type_label": TYPE_LABELS.get(obj["type"], obj["type"]), "replicas": entries}
        )
    return rows


@routes.get("/objects")
async def objects_page(request: web.Request) -> web.Response:
    session = session_of(request)
    cluster = request.query.get("cluster") or None
    replica = request.query.get("replica") or None
    system = request.query.get("system") == "1"
    queries = list_queries(cluster, replica, system)
    results = await session.sql.query_all(*queries)
    return render(
        request,
        "objects.html",
        results=results,
        rows=object_rows(*results),
        cluster=cluster,
        replica=replica,
        system=system,
    )


# -- one object -------------------------------------------------------------------

OBJECT_SQL = OBJECT_FROM + "\nWHERE o.id = %s"

# The object's cluster's replicas now, and those that ever hydrated it and were
# dropped since (from the history; a dropped replica's rows are retracted), with
# each one's last time offline (a crash).
OBJECT_REPLICAS_SQL = """SELECT h.replica_id, h.replica_name AS replica, h.created_at, h.dropped_at,
       s.status, s.reason, s.updated_at, s.incarnation, o.offline_at
FROM mz_internal.mz_cluster_replica_history h
LEFT JOIN mz_internal.mz_cluster_replica_statuses s ON s.replica_id = h.replica_id
LEFT JOIN (SELECT replica_id, max(occurred_at) AS offline_at
           FROM mz_internal.mz_cluster_replica_status_history
           WHERE status = 'offline' GROUP BY replica_id) o ON o.replica_id = h.replica_id
WHERE h.cluster_id IN (SELECT cluster_id FROM mz_catalog.mz_objects WHERE id = %s)
  AND (h.dropped_at IS NULL OR h.replica_id IN (
      SELECT replica_id FROM mz_internal.mz_object_hydration_history WHERE object_id = %s))
ORDER BY h.dropped_at IS NOT NULL, h.replica_name, h.created_at"""

# Each node's status and progress on each replica.
NODES_SQL = """SELECT s.replica_id, s.physical_plan_node_id, s.hydrated, p.records_done,
       p.records_estimated, p.updated_at
FROM mz_internal.mz_compute_operator_hydration_statuses s
LEFT JOIN mz_internal.mz_compute_operator_hydration_progress p
  ON p.replica_id = s.replica_id AND p.object_id = s.object_id
 AND p.physical_plan_node_id = s.physical_plan_node_id
WHERE s.object_id = %s"""

OBJECT_PROGRESS_SQL = """SELECT p.replica_id, p.hydrated, p.records_done, p.records_estimated,
       p.started_at, p.updated_at, p.rate, p.eta, s.hydration_time
FROM mz_internal.mz_compute_hydration_progress p
LEFT JOIN mz_internal.mz_compute_hydration_statuses s
  ON s.object_id = p.object_id AND s.replica_id = p.replica_id
WHERE p.object_id = %s"""

# CPU time and arrangement memory per LIR node and replica: EXPLAIN ANALYZE CPU,
# MEMORY's attribution (operators of a node: operator_id_start .. end - 1) over
# every replica's persisted relations, for one object.
NODE_COSTS_SQL = """WITH mlm AS (
    SELECT replica_id, incarnation, lir_id, operator_id_start, operator_id_end
    FROM mz_internal.mz_lir_mapping WHERE global_id = %s
),
cpu AS (
    SELECT mlm.replica_id, mlm.lir_id, sum(mse.elapsed_ns) AS cpu_ns
    FROM mlm
    CROSS JOIN generate_series(mlm.operator_id_start::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
    JOIN mz_internal.mz_scheduling_elapsed_per_worker mse
      ON mse.replica_id = mlm.replica_id AND mse.incarnation = mlm.incarnation AND mse.id = valid_id
    GROUP BY mlm.replica_id, mlm.lir_id
),
memory AS (
    SELECT mlm.replica_id, mlm.lir_id, sum(mas.size) AS memory_bytes, sum(mas.records) AS records
    FROM mlm
    CROSS JOIN generate_series(mlm.operator_id_start::int8, (mlm.operator_id_end - 1)::int8) AS valid_id
    JOIN mz_internal.mz_arrangement_sizes_per_worker mas
      ON mas.replica_id = mlm.replica_id AND mas.incarnation = mlm.incarnation AND mas.operator_id = valid_id
    GROUP BY mlm.replica_id, mlm.lir_id
)
SELECT mlm.replica_id, mlm.lir_id, cpu.cpu_ns, memory.memory_bytes, memory.records
FROM mlm
LEFT JOIN cpu ON cpu.replica_id = mlm.replica_id AND cpu.lir_id = mlm.lir_id
LEFT JOIN memory ON memory.replica_id = mlm.replica_id AND memory.lir_id = mlm.lir_id"""

# What the live page subscribes to: every node's status and progress on every
# replica, with the object's start (for the ETA) and the replica's status.
LIVE_SQL = """SELECT s.replica_id, s.physical_plan_node_id, s.hydrated, p.records_done,
       p.records_estimated, p.updated_at, o.started_at, rs.status, rs.updated_at AS status_at,
       o.hydrated AS object_hydrated, o.records_done AS object_records_done,
       o.records_estimated AS object_records_estimated, o.updated_at AS object_updated_at,
       h.offline_at, rs.incarnation
FROM mz_internal.mz_compute_operator_hydration_statuses s
LEFT JOIN mz_internal.mz_compute_operator_hydration_progress p
  ON p.replica_id = s.replica_id AND p.object_id = s.object_id
 AND p.physical_plan_node_id = s.physical_plan_node_id
LEFT JOIN mz_internal.mz_compute_hydration_progress o
  ON o.replica_id = s.replica_id AND o.object_id = s.object_id
LEFT JOIN mz_internal.mz_cluster_replica_statuses rs ON rs.replica_id = s.replica_id
LEFT JOIN (SELECT replica_id, max(occurred_at) AS offline_at
           FROM mz_internal.mz_cluster_replica_status_history
           WHERE status = 'offline' GROUP BY replica_id) h ON h.replica_id = s.replica_id
WHERE s.object_id = %s"""


def qualified_name(obj: dict[str, Any]) -> str:
    parts = [obj.get("database"), obj.get("schema"), obj["name"]]
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts if p)


def explain_query(obj: dict[str, Any]) -> Query | None:
    kind = KINDS.get(obj["type"])
    if kind is None:
        return None
    return Query(f"EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR {kind} {qualified_name(obj)}")


def replica_mark(replica: dict[str, Any], offline_at: Any) -> dict[str, Any]:
    """How a replica is marked: online, offline since, dropped at (and its last crash)."""
    if replica.get("dropped_at") is not None:
        kind, text = "dropped", f"dropped at {fmt.timestamp(replica['dropped_at'])}"
    elif replica.get("status") == "online":
        kind, text = "online", "online"
    elif replica.get("status"):
        since = replica.get("updated_at") or offline_at
        kind, text = "offline", f"{replica['status']} since {fmt.timestamp(since)}"
    else:
        kind, text = "unknown", "status unknown"
    if offline_at is not None and kind == "online":
        text += f" (last offline at {fmt.timestamp(offline_at)})"
    return {"kind": kind, "text": text}


def node_cells(
    tree: list[PlanNode],
    replicas: list[dict[str, Any]],
    statuses: dict[tuple[Any, ...], dict[str, Any]],
    progress: dict[tuple[Any, ...], dict[str, Any]],
    started: dict[str, Any],
    costs: dict[tuple[Any, ...], dict[str, Any]],
) -> dict[tuple[int, str], dict[str, Any]]:
    """(node id, replica id) -> what the node's line for that replica shows."""
    cells = {}
    for root in tree:
        for node in root.walk():
            for replica in replicas:
                rid = replica["replica_id"]
                key = (rid, str(node.node_id))
                status = statuses.get(key)
                done = progress.get(key, {})
                cell = node_hydration(
                    status["hydrated"] if status else None,
                    done.get("records_done"),
                    done.get("records_estimated"),
                    started.get(rid),
                    done.get("updated_at"),
                )
                cost = costs.get(key, {})
                cell["cpu"] = (
                    fmt.duration(cost.get("cpu_ns")) if cost.get("cpu_ns") is not None else "—"
                )
                cell["memory"] = fmt.size(cost.get("memory_bytes"))
                cells[(node.node_id, rid)] = cell
    return cells


@routes.get("/objects/{id}")
async def object_page(request: web.Request) -> web.Response:
    session = session_of(request)
    object_id = request.match_info["id"]
    chosen = request.query.get("replica") or None
    param = (object_id,)

    async def object_and_plan() -> tuple[Result | SqlError, Result | SqlError | None]:
        """The object, then its plan (EXPLAIN needs its name), beside the other queries."""
        (found,) = await session.sql.query_all(Query(OBJECT_SQL, param))
        if not isinstance(found, Result) or not found.rows:
            return found, None
        explain = explain_query(found.dicts()[0])
        if explain is None:
            return found, None
        (answer,) = await session.sql.query_all(explain)
        return found, answer

    (obj_result, plan), (replicas_r, nodes_r, object_progress_r, costs_r) = await asyncio.gather(
        object_and_plan(),
        session.sql.query_all(
            Query(OBJECT_REPLICAS_SQL, (object_id, object_id)),
            Query(NODES_SQL, param),
            Query(OBJECT_PROGRESS_SQL, param),
            Query(NODE_COSTS_SQL, param),
        ),
    )
    if isinstance(obj_result, Result) and not obj_result.rows:
        raise web.HTTPNotFound(text=f"no index, materialized view or source {object_id}\n")
    obj = obj_result.dicts()[0] if isinstance(obj_result, Result) else None
    tree: list[PlanNode] = []
    if isinstance(plan, Result) and plan.rows:
        tree = parse_plan(plan.rows[0][0])

    all_replicas = []
    for replica in replicas_r.dicts() if isinstance(replicas_r, Result) else []:
        mark = replica_mark(replica, replica["offline_at"])
        all_replicas.append({**replica, "mark": mark})
    shown = [r for r in all_replicas if chosen in (None, r["replica_id"])]
    object_progress = _by_key(object_progress_r, "replica_id")
    started = {k[0]: v["started_at"] for k, v in object_progress.items()}
    cells = node_cells(
        tree,
        shown,
        _by_key(nodes_r, "replica_id", "physical_plan_node_id"),
        _by_key(nodes_r, "replica_id", "physical_plan_node_id"),
        started,
        _by_key(costs_r, "replica_id", "lir_id"),
    )
    summaries = {}
    for replica in all_replicas:
        found = object_progress.get((replica["replica_id"],))
        summary = node_hydration(
            found["hydrated"] if found else None,
            found["records_done"] if found else None,
            found["records_estimated"] if found else None,
            found["started_at"] if found else None,
            found["updated_at"] if found else None,
        )
        summary["row"] = found
        summaries[replica["replica_id"]] = summary
    return render(
        request,
        "object.html",
        object_id=object_id,
        obj=obj,
        obj_result=obj_result,
        plan=plan,
        tree=tree,
        replicas=all_replicas,
        shown=shown,
        chosen=chosen,
        cells=cells,
        summaries=summaries,
        type_labels=TYPE_LABELS,
        replica_results=[obj_result, replicas_r, object_progress_r],
        tree_results=[r for r in (plan, nodes_r, object_progress_r, costs_r) if r],
    )


# -- live -----------------------------------------------------------------------------


class LiveNodes:
    """The subscribed rows, kept current from the SUBSCRIBE's diffs: (replica, node) -> row."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[Any, ...]] = Counter()

    def apply(self, changes: list[Change]) -> set[tuple[str, str]]:
        """Apply a batch; the keys whose row changed."""
        touched: set[tuple[str, str]] = set()
        for change in changes:
            self.counts[change.row] += change.diff
            if self.counts[change.row] <= 0:
                del self.counts[change.row]
            touched.add((change.row[0], str(change.row[1])))
        return touched

    def current(self) -> dict[tuple[str, str], tuple[Any, ...]]:
        return {(row[0], str(row[1])): row for row in self.counts}


def live_event(key: tuple[str, str], row: tuple[Any, ...] | None) -> dict[str, Any]:
    """One node's update on one replica, written as the page writes it."""
    replica_id, node = key
    if row is None:
        cell = node_hydration(None, None, None, None, None)
        return {"replica": replica_id, "node": node, **cell}
    _, _, hydrated, done, estimated, updated_at, started_at, status, status_at = row[:9]
    cell = node_hydration(hydrated, done, estimated, started_at, updated_at)
    return {
        "replica": replica_id,
        "node": node,
        **cell,
        "status": status,
        "status_at": fmt.timestamp(status_at) if status_at else None,
    }


def by_timestamp(batch: list[Change]) -> list[list[Change]]:
    """A SUBSCRIBE batch split by timestamp, in order."""
    groups: dict[int, list[Change]] = {}
    for change in batch:
        groups.setdefault(change.timestamp, []).append(change)
    return [groups[ts] for ts in sorted(groups)]


def replica_event(row: tuple[Any, ...]) -> dict[str, Any]:
    """A replica's status and the object's hydration on it, from a subscribed row."""
    status, status_at, hydrated, done, estimated, updated_at = row[7:13]
    summary = node_hydration(hydrated, done, estimated, row[6], updated_at)
    offline_at = row[13] if len(row) > 13 else None
    return {
        "status": status,
        "at": fmt.timestamp(status_at) if status_at else None,
        "offline_at": fmt.timestamp(offline_at) if offline_at else None,
        "incarnation": row[14] if len(row) > 14 else None,
        "summary": {k: summary[k] for k in ("state", "label", "records", "eta_text")},
    }


async def live_events(
    request: web.Request, object_id: str, replica: str | None
) -> AsyncIterator[tuple[str, Any]]:
    session = session_of(request)
    poll = request.app[SETTINGS].live_poll
    nodes = LiveNodes()
    subscription = session.sql.subscribe(Query(LIVE_SQL, (object_id,)), poll=poll, progress=True)
    quiet_since = time.monotonic()
    try:
        async for batch in subscription:
            if not batch:
                if time.monotonic() - quiet_since >= KEEPALIVE:
                    quiet_since = time.monotonic()
                    yield "keepalive", {"at": datetime.datetime.now(datetime.UTC)}
                continue
            quiet_since = time.monotonic()
            # One event per timestamp: a FETCH that brings several (a replica offline,
            # then online again) must not fold them into the last one.
            for group in by_timestamp(batch):
                touched = nodes.apply(group)
                current = nodes.current()
                updates = [
                    live_event(key, current.get(key))
                    for key in sorted(touched)
                    if replica in (None, key[0])
                ]
                statuses = {
                    row[0]: replica_event(row) for key, row in current.items() if key in touched
                }
                if updates:
                    yield "nodes", {"nodes": updates, "replicas": statuses}
    finally:
        await subscription.aclose()


@routes.get("/objects/{id}/events")
async def object_events(request: web.Request) -> web.StreamResponse:
    object_id = request.match_info["id"]
    replica = request.query.get("replica") or None
    return await server_sent_events(request, live_events(request, object_id, replica))
