"""The Object page's pure helpers: the plan tree from EXPLAIN text, the ETA, a node's cell."""

from __future__ import annotations

import datetime

from loupe.console.pages.objects import (
    LiveNodes,
    live_event,
    object_rows,
    qualified_name,
    replica_event,
)
from loupe.console.plantree import eta_seconds, eta_text, node_hydration, parse_plan
from loupe.console.sql import Change, Query, Result

Q3 = """materialize.public.q3:
  Mfp // { node_id: 12 }
    project=(#0, #3, #1, #2)
    Reduce::Accumulable // { node_id: 11 }
      group_by=(#2, #0, #1)
      aggregates=[sum((#3 * (1 - #4)))]
      Mfp // { node_id: 10 }
        project=(#3, #4, #5, #6, #7)
        Join::Delta // { node_id: 9 }
          equivalences=((#0, #2), (#5, #1))
          ArrangeBy // { node_id: 2 }
            keys=[(#0)]
            Mfp // { node_id: 1 }
              filter=((#6 = 'BUILDING'))
              project=(#0)
              Get::PassArrangements materialize.public.customer // { node_id: 0 }
                raw=true
          ArrangeBy // { node_id: 5 }
            keys=[(#1, #0)]
            Get::PassArrangements materialize.public.orders // { node_id: 3 }
              raw=true
"""

LETREC = """materialize.public.r:
  Return // { node_id: 3 }
    Get::PassArrangements l0 // { node_id: 2 }
      raw=true
  With Mutually Recursive
    cte l0 =
      Union // { node_id: 1 }
        Constant // { node_id: 0 }
          - (1)
"""


def shape(nodes):
    return [(n.node_id, shape(n.children)) for n in nodes]


def test_the_tree_of_a_join_plan():
    roots = parse_plan(Q3)
    assert shape(roots) == [(12, [(11, [(10, [(9, [(2, [(1, [(0, [])])]), (5, [(3, [])])])])])])]
    root = roots[0]
    assert root.operator == "Mfp"
    assert root.attributes == ["project=(#0, #3, #1, #2)"]
    reduce = root.children[0]
    assert reduce.operator == "Reduce::Accumulable"
    assert reduce.attributes == ["group_by=(#2, #0, #1)", "aggregates=[sum((#3 * (1 - #4)))]"]
    gets = [n for n in root.walk() if n.operator.startswith("Get")]
    assert [g.operator for g in gets] == [
        "Get::PassArrangements materialize.public.customer",
        "Get::PassArrangements materialize.public.orders",
    ]
    assert all(g.attributes == ["raw=true"] for g in gets)
    assert sorted(n.node_id for n in root.walk()) == [0, 1, 2, 3, 5, 9, 10, 11, 12]


def test_a_recursive_plan_labels_its_bindings():
    (root,) = parse_plan(LETREC)
    assert shape([root]) == [(3, [(2, []), (1, [(0, [])])])]
    binding = root.children[1]
    assert binding.labels == ["With Mutually Recursive", "cte l0 ="]
    assert binding.children[0].attributes == ["- (1)"]


def test_no_plan_no_nodes():
    assert parse_plan("") == []
    assert parse_plan("materialize.public.x:\n") == []


T0 = datetime.datetime(2026, 11, 26, 12, 0, 0, tzinfo=datetime.UTC)


def test_eta_is_the_left_work_at_the_rate_since_the_start():
    # 1,000 of 4,000 records in 10 s: 100 records/s, 3,000 left: 30 s.
    assert eta_seconds(1000, 4000, T0, T0 + datetime.timedelta(seconds=10), False) == 30.0
    assert eta_seconds(4000, 4000, T0, T0 + datetime.timedelta(seconds=10), True) == 0.0
    # No rate yet: nothing done, no start, no time passed; or the estimate passed.
    assert eta_seconds(0, 4000, T0, T0 + datetime.timedelta(seconds=10), False) is None
    assert eta_seconds(10, 4000, None, T0, False) is None
    assert eta_seconds(10, 4000, T0, T0, False) is None
    assert eta_seconds(5000, 4000, T0, T0 + datetime.timedelta(seconds=1), False) is None
    assert eta_text(30.0) == "ETA 30.0 s"
    assert eta_text(None) == "ETA ?"
    assert eta_text(0.0, True) == "done"


def test_a_node_cell_says_its_state_in_words():
    later = T0 + datetime.timedelta(seconds=10)
    hydrating = node_hydration(False, 1000, 4000, T0, later)
    assert hydrating["state"] == "hydrating"
    assert hydrating["label"] == "◐ hydrating"
    assert hydrating["percent"] == "25 %"
    assert hydrating["records"] == "1,000 / 4,000 records"
    assert hydrating["eta_text"] == "ETA 30.0 s"
    waiting = node_hydration(False, 0, 4000, T0, later)
    assert (waiting["state"], waiting["percent"]) == ("not-started", "0 %")
    done = node_hydration(True, 4000, 4000, T0, later)
    assert (done["state"], done["fraction"], done["eta_text"]) == ("hydrated", 1.0, "done")
    unknown = node_hydration(None, None, None, None, None)
    assert (unknown["label"], unknown["percent"], unknown["records"]) == (
        "? no report",
        "—",
        "no progress reported",
    )


def test_live_rows_follow_the_subscribes_diffs():
    live = LiveNodes()
    old = ("u2", "3", False, 10, 100, T0, T0, "online", T0, False, 10, 100, T0)
    new = ("u2", "3", True, 100, 100, T0, T0, "online", T0, True, 100, 100, T0, T0, 2)
    assert live.apply([Change(1, 1, old)]) == {("u2", "3")}
    assert live.apply([Change(2, 1, new), Change(2, -1, old)]) == {("u2", "3")}
    assert live.current() == {("u2", "3"): new}
    event = live_event(("u2", "3"), new)
    assert (event["node"], event["state"], event["label"]) == ("3", "hydrated", "✓ hydrated")
    replica = replica_event(new)
    assert replica["status"] == "online"
    assert replica["summary"]["label"] == "✓ hydrated"
    assert (replica["offline_at"], replica["incarnation"]) == ("2026-11-26 12:00:00 UTC", 2)
    live.apply([Change(3, -1, new)])
    assert live.current() == {}
    assert live_event(("u2", "3"), None)["state"] == "unknown"


def test_the_list_joins_set_based_answers_per_replica():
    def result(columns, rows):
        return Result(Query("x"), columns, rows)

    objects = result(
        ["id", "name", "type", "cluster_id", "cluster", "schema", "database"],
        [("u10", "q3", "materialized-view", "u2", "heavy", "public", "materialize")],
    )
    replicas = result(
        [
            "replica_id",
            "replica",
            "cluster_id",
            "cluster",
            "status",
            "reason",
            "updated_at",
            "incarnation",
        ],
        [
            ("u2", "r1", "u2", "heavy", "online", None, T0, 1),
            ("u3", "r2", "u2", "heavy", "online", None, T0, 1),
        ],
    )
    hydration = result(
        [
            "object_id",
            "replica_id",
            "hydrated",
            "records_done",
            "records_estimated",
            "eta",
            "hydration_time",
        ],
        [("u10", "u2", True, 5, 5, datetime.timedelta(0), datetime.timedelta(seconds=1))],
    )
    memory = result(
        ["replica_id", "object_id", "memory_bytes", "records"], [("u2", "u10", 2048, 3)]
    )
    frontiers = result(["replica_id", "object_id", "write_frontier", "lag"], [])
    (row,) = object_rows(objects, replicas, hydration, memory, frontiers)
    assert [e["state"] for e in row["replicas"]] == ["hydrated", "unknown"]
    assert row["replicas"][0]["memory"]["memory_bytes"] == 2048
    assert row["replicas"][1]["memory"] is None
    assert qualified_name(row) == '"materialize"."public"."q3"'
