"""Clusters: every cluster's replicas with their status and incarnation, dropped
replicas still listed, and a timeline per replica (CPU and memory over a time window,
crashes and new incarnations marked on it)."""

from __future__ import annotations

import datetime
from typing import Any

from aiohttp import web

from loupe.console.app import render, session_of
from loupe.console.sql import Query, Result, SqlError
from loupe.console.timeline import (
    build_timeline,
    event_of,
    events_by_replica,
    samples_by_replica,
)

routes = web.RouteTableDef()

# window parameter → (label, length, metrics bucket as an SQL interval, bucket)
WINDOWS: dict[str, tuple[str, datetime.timedelta, str, datetime.timedelta]] = {
    "15m": ("15 min", datetime.timedelta(minutes=15), "10 seconds", datetime.timedelta(seconds=10)),
    "1h": ("1 hour", datetime.timedelta(hours=1), "30 seconds", datetime.timedelta(seconds=30)),
    "6h": ("6 hours", datetime.timedelta(hours=6), "3 minutes", datetime.timedelta(minutes=3)),
    "1d": ("1 day", datetime.timedelta(days=1), "10 minutes", datetime.timedelta(minutes=10)),
}
DEFAULT_WINDOW = "1h"
DROPPED_LIMIT = 50

REPLICAS = Query(
    """SELECT c.id AS cluster_id, c.name AS cluster, r.id AS replica_id, r.name AS replica,
       r.size, s.process_id, s.status, s.reason, s.incarnation, s.updated_at
FROM mz_catalog.mz_clusters c
LEFT JOIN mz_catalog.mz_cluster_replicas r ON r.cluster_id = c.id
LEFT JOIN mz_internal.mz_cluster_replica_statuses s ON s.replica_id = r.id
ORDER BY c.name, r.name, s.process_id"""
)

CURRENT_METRICS = Query(
    """SELECT replica_id, process_id, cpu_nano_cores, memory_bytes
FROM mz_internal.mz_cluster_replica_metrics
ORDER BY replica_id, process_id"""
)

# Dropped replicas with the last status they reported.
DROPPED = Query(
    """SELECT h.cluster_id, h.cluster_name AS cluster, h.replica_id, h.replica_name AS replica,
       h.size, h.created_at, h.dropped_at, l.status, l.reason, l.incarnation,
       l.occurred_at AS status_at
FROM mz_internal.mz_cluster_replica_history h
LEFT JOIN (
    SELECT s.replica_id, s.status, s.reason, s.incarnation, s.occurred_at
    FROM mz_internal.mz_cluster_replica_status_history s
    JOIN (SELECT replica_id, max(occurred_at) AS at
          FROM mz_internal.mz_cluster_replica_status_history GROUP BY replica_id) m
      ON m.replica_id = s.replica_id AND m.at = s.occurred_at
) l ON l.replica_id = h.replica_id
WHERE h.dropped_at IS NOT NULL
ORDER BY h.dropped_at DESC
LIMIT %s""",
    (DROPPED_LIMIT,),
)


def metrics_query(bucket: str, window: str) -> Query:
    """Each replica's peak CPU and memory per process and time bucket in the window."""
    return Query(
        """SELECT replica_id, process_id,
       date_bin(%s::interval, occurred_at, TIMESTAMPTZ '2000-01-01 00:00:00+00') AS bucket,
       max(cpu_nano_cores) AS cpu_nano_cores, max(memory_bytes) AS memory_bytes
FROM mz_internal.mz_cluster_replica_metrics_history
WHERE occurred_at >= now() - %s::interval
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3""",
        (bucket, window),
    )


def events_query(window: str) -> Query:
    """Status changes in the window (crashes, restarts as a new incarnation)."""
    return Query(
        """SELECT replica_id, process_id, status, reason, incarnation, occurred_at
FROM mz_internal.mz_cluster_replica_status_history
WHERE occurred_at >= now() - %s::interval
ORDER BY occurred_at""",
        (window,),
    )


def _dicts(result: Result | SqlError) -> list[dict[str, Any]]:
    return result.dicts() if isinstance(result, Result) else []


def live_replicas(replicas: Result | SqlError) -> dict[str, list[dict[str, Any]]]:
    """The live replicas grouped by cluster name (a cluster without any is listed
    empty), each with its processes' statuses, incarnation and whether it is dead
    (a process offline) since when."""
    clusters: dict[str, list[dict[str, Any]]] = {}
    by_id: dict[str, dict[str, Any]] = {}
    for row in _dicts(replicas):
        rows = clusters.setdefault(row["cluster"], [])
        if row["replica_id"] is None:
            continue
        replica = by_id.get(row["replica_id"])
        if replica is None:
            replica = {
                key: row[key] for key in ("cluster", "cluster_id", "replica_id", "replica", "size")
            }
            replica["processes"] = []
            replica["dropped_at"] = None
            by_id[row["replica_id"]] = replica
            rows.append(replica)
        if row["status"] is not None:
            replica["processes"].append(row)
    for replica in by_id.values():
        describe(replica)
    return clusters


def dropped_replicas(dropped: Result | SqlError) -> list[dict[str, Any]]:
    """The dropped replicas with the last status each reported."""
    out = []
    for row in _dicts(dropped):
        replica = dict(row)
        replica["processes"] = (
            [
                {
                    "process_id": "0",
                    "status": row["status"],
                    "reason": row["reason"],
                    "incarnation": row["incarnation"],
                    "updated_at": row["status_at"],
                }
            ]
            if row["status"] is not None
            else []
        )
        describe(replica)
        out.append(replica)
    return out


def describe(replica: dict[str, Any]) -> None:
    processes = replica["processes"]
    offline = [p for p in processes if p["status"] != "online"]
    replica["dead"] = bool(offline)
    # When it died: the time its (first) process went offline.
    replica["died_at"] = min(p["updated_at"] for p in offline) if offline else None
    incarnations = [int(p["incarnation"]) for p in processes if p["incarnation"] is not None]
    replica["incarnation"] = max(incarnations) if incarnations else None
    last = None
    if processes:
        newest = max(processes, key=lambda p: p["updated_at"])
        last = event_of({**newest, "occurred_at": newest["updated_at"]})
    replica["last_status"] = last


def current_metrics(current: Result | SqlError) -> dict[str, dict[str, int]]:
    """Each replica's CPU and memory now, summed over its processes."""
    metrics: dict[str, dict[str, int]] = {}
    for row in _dicts(current):
        sums = metrics.setdefault(row["replica_id"], {"cpu": 0, "memory": 0})
        sums["cpu"] += int(row["cpu_nano_cores"] or 0)
        sums["memory"] += int(row["memory_bytes"] or 0)
    return metrics


@routes.get("/clusters")
async def clusters(request: web.Request) -> web.Response:
    session = session_of(request)
    window = request.query.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    label, length, bucket_sql, bucket = WINDOWS[window]
    window_sql = f"{int(length.total_seconds())} seconds"
    metrics_q = metrics_query(bucket_sql, window_sql)
    events_q = events_query(window_sql)
    replicas, current, dropped, metrics, events = await session.sql.query_all(
        REPLICAS, CURRENT_METRICS, DROPPED, metrics_q, events_q
    )
    live = live_replicas(replicas)
    gone = dropped_replicas(dropped)
    end = datetime.datetime.now(datetime.UTC)
    start = end - length
    samples = samples_by_replica(_dicts(metrics))
    status_events = events_by_replica(_dicts(events))
    # Timelines: every live replica, and the dropped ones that lived in the window.
    charted: dict[str, list[dict[str, Any]]] = {name: list(rows) for name, rows in live.items()}
    for replica in gone:
        if replica["dropped_at"] >= start:
            charted.setdefault(replica["cluster"], []).append(replica)
    timelines = {
        replica["replica_id"]: build_timeline(
            samples.get(replica["replica_id"], []),
            status_events.get(replica["replica_id"], []),
            start,
            end,
            bucket,
            dropped_at=replica["dropped_at"],
            last_status=replica["last_status"],
        )
        for rows in charted.values()
        for replica in rows
    }
    return render(
        request,
        "clusters.html",
        replicas=replicas,
        current=current,
        dropped=dropped,
        metrics=metrics,
        events=events,
        clusters=live,
        gone=gone,
        charted=charted,
        now_metrics=current_metrics(current),
        timelines=timelines,
        windows=[(key, value[0]) for key, value in WINDOWS.items()],
        window=window,
        window_label=label,
    )
