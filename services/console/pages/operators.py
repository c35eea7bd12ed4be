"""An object's dataflow operators on one replica, as a graph: operators, channels and
message counts from the persisted introspection relations (``mz_internal``), under
one LIR node of its plan (``node``, from ``mz_lir_mapping``) or the whole dataflow.

``GET /objects/<id>/operators?replica=<replica id>&node=<lir id>``: without
``replica``, the first replica (by name) of the object's cluster. The page sends a
``Server-Timing`` header (its queries, the layout, the template) for tests and
curious readers.
"""

from __future__ import annotations

import time

from aiohttp import web

from loupe.console import operator_graph
from loupe.console.app import render, session_of
from loupe.console.sql import Query, Result, SqlError

routes = web.RouteTableDef()

OBJECT = """SELECT o.id, o.name, o.type, s.name AS schema, o.cluster_id, c.name AS cluster
FROM mz_catalog.mz_objects o
JOIN mz_catalog.mz_schemas s ON s.id = o.schema_id
LEFT JOIN mz_catalog.mz_clusters c ON c.id = o.cluster_id
WHERE o.id = %s"""

REPLICAS = """SELECT r.id, r.name
FROM mz_catalog.mz_objects o
JOIN mz_catalog.mz_cluster_replicas r ON r.cluster_id = o.cluster_id
WHERE o.id = %s
ORDER BY r.name, r.id"""

# The dataflow's operators (its own scope operator among them, address of length 1)
# with their scheduling time and arrangement sizes.
OPERATORS = """SELECT dod.id, dod.name, a.address, se.elapsed_ns, ars.records, ars.size,
       dod.dataflow_id, dod.incarnation
FROM mz_internal.mz_compute_exports e
JOIN mz_internal.mz_dataflow_operator_dataflows dod
  ON dod.replica_id = e.replica_id AND dod.incarnation = e.incarnation
 AND dod.dataflow_id = e.dataflow_id
LEFT JOIN mz_internal.mz_dataflow_addresses a
  ON a.replica_id = dod.replica_id AND a.incarnation = dod.incarnation AND a.id = dod.id
LEFT JOIN mz_internal.mz_scheduling_elapsed se
  ON se.replica_id = dod.replica_id AND se.incarnation = dod.incarnation AND se.id = dod.id
LEFT JOIN mz_internal.mz_arrangement_sizes ars
  ON ars.replica_id = dod.replica_id AND ars.incarnation = dod.incarnation
 AND ars.operator_id = dod.id
WHERE e.export_id = %s AND e.replica_id = %s
ORDER BY dod.id"""

# The dataflow's channels with the operators at their ends and what they carried.
CHANNELS = """SELECT co.id, co.from_operator_id, co.to_operator_id, co.type,
       mc.sent, mc.batch_sent
FROM mz_internal.mz_compute_exports e
JOIN mz_internal.mz_dataflow_channel_operators co
  ON co.replica_id = e.replica_id AND co.incarnation = e.incarnation
 AND co.from_operator_address[1] = e.dataflow_id
LEFT JOIN mz_internal.mz_message_counts mc
  ON mc.replica_id = co.replica_id AND mc.incarnation = co.incarnation
 AND mc.channel_id = co.id
WHERE e.export_id = %s AND e.replica_id = %s
ORDER BY co.id"""

LIR = """SELECT lir_id, operator, parent_lir_id, nesting, operator_id_start, operator_id_end
FROM mz_internal.mz_lir_mapping
WHERE global_id = %s AND replica_id = %s
ORDER BY lir_id DESC"""


def rows(result: Result | SqlError) -> list[dict]:
    return result.dicts() if isinstance(result, Result) else []


@routes.get("/objects/{object_id}/operators")
async def operators(request: web.Request) -> web.Response:
    began = time.perf_counter()
    session = session_of(request)
    object_id = request.match_info["object_id"]
    replica_id = request.query.get("replica") or None
    node_text = request.query.get("node") or None
    node_id: int | None = None
    bad_node = False
    if node_text is not None:
        try:
            node_id = int(node_text)
        except ValueError:
            bad_node = True
    replicas_query = Query(REPLICAS, (object_id,))
    if replica_id is None:
        # Which replica: the first of the object's cluster (one more round trip).
        (replicas_first,) = await session.sql.query_all(replicas_query)
        first = rows(replicas_first)
        replica_id = str(first[0]["id"]) if first else None
    queries = [Query(OBJECT, (object_id,)), replicas_query]
    if replica_id is not None:
        queries += [
            Query(OPERATORS, (object_id, replica_id)),
            Query(CHANNELS, (object_id, replica_id)),
            Query(LIR, (object_id, replica_id)),
        ]
    answers = await session.sql.query_all(*queries)
    queried = time.perf_counter()
    obj, replicas = answers[0], answers[1]
    operator_result, channel_result, lir_result = (
        answers[2:] if replica_id is not None else (None, None, None)
    )
    nodes = operator_graph.lir_nodes(rows(lir_result)) if lir_result is not None else []
    graph = None
    graph_svg = None
    if operator_result is not None and channel_result is not None:
        graph = operator_graph.build(rows(operator_result), rows(channel_result), nodes, node_id)
    laid_out = time.perf_counter()
    obj_rows = rows(obj)
    object_row = obj_rows[0] if obj_rows else None
    replica_rows = rows(replicas)
    replica_name = next((r["name"] for r in replica_rows if r["id"] == replica_id), None)
    node = graph.node if graph else None
    if graph is not None and graph.operators:
        what = f"node {node.lir_id} ({node.operator})" if node else "the whole dataflow"
        graph_svg = operator_graph.svg(
            graph,
            f"Operator graph of {what} of {object_row['name'] if object_row else object_id} "
            f"on replica {replica_name or replica_id}: {len(graph.operators)} operators, "
            f"{len(graph.channels)} channels; the tables below list the same",
        )
    response = render(
        request,
        "operators.html",
        object_id=object_id,
        object=object_row,
        object_result=obj,
        replicas=replica_rows,
        replicas_result=replicas,
        replica_id=replica_id,
        replica_name=replica_name,
        node_id=node_id,
        node_text=node_text,
        bad_node=bad_node,
        node=node,
        nodes=nodes,
        graph=graph,
        graph_svg=graph_svg,
        operator_result=operator_result,
        channel_result=channel_result,
        lir_result=lir_result,
    )
    done = time.perf_counter()
    response.headers["Server-Timing"] = (
        f"sql;dur={(queried - began) * 1000:.1f}, "
        f"layout;dur={(laid_out - queried) * 1000:.1f}, "
        f"render;dur={(done - laid_out) * 1000:.1f}"
    )
    return response
