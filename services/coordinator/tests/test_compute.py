"""Views, materialized views, indexes, SUBSCRIBE and compute reads, against the real catalog.

The controller stand-in (``EngineController``) records the dataflows it is
sent and renders them on an in-process replica; these tests check what the
coordinator asks of compute (peeks may be answered with rows the test
chooses); the engine's answers are the replica's and the engine's own tests
(and ``tests/test_compute_story.py`` end to end).
"""

from __future__ import annotations

import asyncio

from loupe.common.errors import LoupeError
from loupe.common.values import from_row, to_row
from loupe.coordinator.tests.conftest import TableHarness
from loupe.plan import codec, lir
from loupe.plan.dataflow import IndexExport, PersistSink, SubscribeSink
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.sql.v1 import sql_pb2

SETUP = """
CREATE TABLE t (a int, b text);
CREATE VIEW v AS SELECT a, b FROM t WHERE a > 1;
"""


async def ids(harness: TableHarness, session: str, relation: str) -> dict[str, str]:
    return dict(await harness.rows(session, f"SELECT name, id FROM mz_catalog.{relation}"))


async def test_view_and_index_are_items_and_the_index_is_a_dataflow(compute: TableHarness) -> None:
    """CREATE VIEW stores the definition; CREATE INDEX installs a dataflow building the view."""
    session = await compute.session()
    await compute.execute(session, SETUP)
    assert await compute.tag(session, "CREATE INDEX v_idx ON v (b)") == "CREATE INDEX"
    tables = await ids(compute, session, "mz_tables")
    # User views (mz_views lists the builtin pg_catalog views too, as Materialize's does).
    views = await compute.rows(
        session, "SELECT name, definition FROM mz_catalog.mz_views WHERE id LIKE 'u%'"
    )
    assert [name for name, _ in views] == ["v"]
    assert '"materialize"."public"."t"' in views[0][1]
    [(index_id, on_id, cluster_id)] = await compute.rows(
        session, "SELECT id, on_id, cluster_id FROM mz_catalog.mz_indexes WHERE name = 'v_idx'"
    )
    view_id = (await ids(compute, session, "mz_views"))["v"]
    assert on_id == view_id
    assert cluster_id == compute.controller.dataflows[index_id][0]
    _, dataflow = compute.controller.dataflows[index_id]
    assert [s.id for s in dataflow.source_imports] == [tables["t"]]
    assert [b.id for b in dataflow.objects_to_build] == [view_id]
    assert dataflow.index_exports == (IndexExport(index_id=index_id, on_id=view_id, key=(1,)),)
    assert dataflow.as_of > 0


async def test_fast_path_peeks_the_index_with_filter_and_finishing(compute: TableHarness) -> None:
    """A filter over an indexed view is a peek of the index: MFP and ORDER BY/LIMIT travel with it."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE DEFAULT INDEX ON v;")
    index_id = (await ids(compute, session, "mz_indexes"))["v_primary_idx"]
    compute.controller.answers[index_id] = [("x", 5)]
    created = len(compute.controller.created)
    rows = await compute.rows(session, "SELECT b, a FROM v WHERE a = 5 ORDER BY a DESC LIMIT 3")
    assert rows == [("x", 5)]
    assert len(compute.controller.created) == created  # no dataflow for a fast-path read
    peek = compute.controller.peeks[-1].peek
    assert peek.target_id == index_id
    mfp = codec.mfp_from_proto(peek.map_filter_project)
    assert mfp.input_arity == 2
    assert mfp.predicates
    assert mfp.projection == (1, 0)
    order, limit, offset, _ = codec.finishing_from_proto(peek.finishing)
    assert (limit, offset) == (3, 0)
    assert [(k.column, k.desc) for k in order] == [(1, True)]


async def test_slow_path_builds_a_transient_dataflow_and_drops_it(compute: TableHarness) -> None:
    """A query the index cannot answer alone runs in a transient dataflow, dropped afterwards."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE DEFAULT INDEX ON v;")
    view_index = (await ids(compute, session, "mz_indexes"))["v_primary_idx"]
    created = len(compute.controller.created)
    rows = await compute.rows(session, "SELECT b, count(*) FROM v GROUP BY b")
    assert rows == []
    [request] = compute.controller.created[created:]
    transient = codec.dataflow_from_proto(request.dataflow)
    assert transient.id.startswith("t")
    assert [i.index_id for i in transient.index_imports] == [view_index]
    assert transient.source_imports == ()
    assert compute.controller.peeks[-1].peek.target_id == transient.index_exports[0].index_id
    await compute.controller.wait_dropped(transient.index_exports[0].index_id)


async def test_unindexed_views_are_inlined(compute: TableHarness) -> None:
    """Reading a view without an index plans its definition over the table."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE VIEW w AS SELECT a FROM v;")
    table_id = (await ids(compute, session, "mz_tables"))["t"]
    created = len(compute.controller.created)
    await compute.rows(session, "SELECT a FROM w")
    transient = codec.dataflow_from_proto(compute.controller.created[created].dataflow)
    assert [s.id for s in transient.source_imports] == [table_id]
    gets = [n for n in lir.walk(transient.objects_to_build[0].plan) if isinstance(n, lir.Get)]
    assert [g.name for g in gets] == [table_id]


async def test_filters_reach_inside_inlined_views(compute: TableHarness) -> None:
    """A filter on a join view is applied to the join's input once the view is inlined."""
    session = await compute.session()
    await compute.execute(
        session,
        "CREATE TABLE l (k int, x text); CREATE TABLE r (k int, y text);"
        "CREATE VIEW j AS SELECT l.k, x, y FROM l JOIN r ON l.k = r.k;",
    )
    created = len(compute.controller.created)
    await compute.rows(session, "SELECT y FROM j WHERE x = 'a'")
    transient = codec.dataflow_from_proto(compute.controller.created[created].dataflow)
    [join] = [n for n in lir.walk(transient.objects_to_build[0].plan) if isinstance(n, lir.Join)]
    filters_below = [
        n for n in lir.walk(join) if isinstance(n, lir.Mfp) and n.mfp.predicates and n is not join
    ]
    assert filters_below, "the predicate on x stays above the join"


async def test_materialized_view_sinks_to_its_own_shard(compute: TableHarness) -> None:
    """CREATE MATERIALIZED VIEW creates the shard and a dataflow with a persist sink into it."""
    session = await compute.session()
    await compute.execute(session, "CREATE TABLE t (a int, b text)")
    responses = await compute.execute(
        session, "CREATE MATERIALIZED VIEW mv AS SELECT b, count(*) AS n FROM t GROUP BY b"
    )
    kinds = [r.WhichOneof("kind") for r in responses]
    assert kinds[-1] == "complete"
    assert set(kinds[:-1]) == {"progress"}
    assert responses[-2].progress.hydrated
    [(mv_id, _cluster_id)] = await compute.rows(
        session, "SELECT id, cluster_id FROM mz_catalog.mz_materialized_views"
    )
    _, dataflow = compute.controller.dataflows[mv_id]
    [sink] = dataflow.sink_exports
    assert isinstance(sink, PersistSink)
    assert (sink.sink_id, sink.from_id, sink.shard_id) == (mv_id, mv_id, mv_id)
    assert sink.columns == (("b", "text"), ("n", "int8"))
    assert compute.service.coordinator.tables.shard(mv_id).state(missing_ok=True) is not None
    # Reading the MV imports its shard.
    created = len(compute.controller.created)
    await compute.rows(session, "SELECT n FROM mv WHERE b = 'x'")
    transient = codec.dataflow_from_proto(compute.controller.created[created].dataflow)
    assert [(s.id, s.shard_id) for s in transient.source_imports] == [(mv_id, mv_id)]


async def test_drop_refuses_dependents_unless_cascade(compute: TableHarness) -> None:
    """Dropping what others depend on is 2BP01 naming them; CASCADE drops them and their dataflows."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE INDEX v_idx ON v (a);")
    index_id = (await ids(compute, session, "mz_indexes"))["v_idx"]
    refused = await compute.error(session, "DROP TABLE t")
    assert refused.code == "2BP01"
    assert "materialize.public.v" in refused.message
    assert "materialize.public.v_idx" in refused.message
    refused = await compute.error(session, "DROP VIEW v")
    assert refused.code == "2BP01"
    assert await compute.tag(session, "DROP TABLE t CASCADE") == "DROP TABLE"
    assert (
        await compute.rows(session, "SELECT name FROM mz_catalog.mz_objects WHERE id LIKE 'u%'")
        == []
    )
    assert index_id in compute.controller.dropped


async def test_drop_index_frees_its_dataflow(compute: TableHarness) -> None:
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE INDEX v_idx ON v (a);")
    index_id = (await ids(compute, session, "mz_indexes"))["v_idx"]
    wrong = await compute.error(session, "DROP VIEW v_idx")
    assert wrong.code == "42809"
    assert await compute.tag(session, "DROP INDEX v_idx") == "DROP INDEX"
    assert index_id in compute.controller.dropped
    assert await compute.tag(session, "DROP VIEW v") == "DROP VIEW"


async def test_dataflow_errors_are_query_errors(compute: TableHarness) -> None:
    """An error the replica reports for a collection (division by zero) is the query's error."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE DEFAULT INDEX ON v;")
    index_id = (await ids(compute, session, "mz_indexes"))["v_primary_idx"]
    compute.controller.answers[index_id] = LoupeError("22012", "division by zero")
    error = await compute.error(session, "SELECT * FROM v")
    assert (error.code, error.message) == ("22012", "division by zero")


async def test_explain_for_view_and_index(compute: TableHarness) -> None:
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE INDEX v_idx ON v (a);")
    [(view_plan,)] = await compute.rows(session, "EXPLAIN PLAN FOR VIEW v")
    assert view_plan.splitlines()[0] == "materialize.public.v:"
    assert "materialize.public.t" in view_plan
    [(index_plan,)] = await compute.rows(session, "EXPLAIN PHYSICAL PLAN FOR INDEX v_idx")
    assert index_plan.splitlines()[0] == "materialize.public.v_idx:"
    # An index on a view builds the view; one on a materialized view reads its storage
    # collection (as its dataflow does): the one node 0 that reports its hydration.
    await compute.execute(
        session, "CREATE MATERIALIZED VIEW mv AS SELECT a FROM t; CREATE INDEX mv_idx ON mv (a);"
    )
    [(mv_index_plan,)] = await compute.rows(
        session, "EXPLAIN PHYSICAL PLAN WITH (node_ids) FOR INDEX mv_idx"
    )
    assert mv_index_plan.splitlines()[1:] == [
        "  Get::PassArrangements materialize.public.mv // { node_id: 0 }",
        "    raw=true",
    ]
    wrong = await compute.error(session, "EXPLAIN MATERIALIZED VIEW v")
    assert wrong.code == "42809"


async def test_subscribe_streams_batches_until_canceled(compute: TableHarness) -> None:
    """SUBSCRIBE streams (mz_timestamp, mz_diff, columns…) from the controller's batches."""
    session = await compute.session()
    await compute.execute(session, SETUP)
    created = len(compute.controller.created)
    call = compute.stub.Execute(sql_pb2.ExecuteRequest(session_id=session, sql="SUBSCRIBE v"))
    iterator = call.__aiter__()
    description = await asyncio.wait_for(iterator.__anext__(), 10)
    assert [c.name for c in description.description.columns] == [
        "mz_timestamp",
        "mz_diff",
        "a",
        "b",
    ]
    transient = codec.dataflow_from_proto(compute.controller.created[created].dataflow)
    [sink] = transient.sink_exports
    assert isinstance(sink, SubscribeSink)
    # Far past the replica's own (empty) batches, which are then duplicates.
    later = 2**62
    batch = compute_pb2.SubscribeBatch(
        lower=later + 1,
        upper=later + 10,
        updates=[
            compute_pb2.UpdateRow(row=to_row((3, "z")), time=later + 7, diff=-1),
            compute_pb2.UpdateRow(row=to_row((2, "y")), time=later + 5, diff=1),
        ],
    )
    await compute.controller.publish_subscribe(sink.sink_id, batch)
    rows = await asyncio.wait_for(iterator.__anext__(), 10)
    assert [from_row(r) for r in rows.rows.rows] == [
        (later + 5, 1, 2, "y"),
        (later + 7, -1, 3, "z"),
    ]
    call.cancel()
    await compute.controller.wait_dropped(sink.sink_id)


async def test_restart_installs_every_index_and_materialized_view_again(
    compute: TableHarness,
) -> None:
    """At start the coordinator re-sends the dataflows of the catalog's indexes and MVs."""
    session = await compute.session()
    await compute.execute(
        session,
        SETUP + "CREATE INDEX v_idx ON v (a); CREATE MATERIALIZED VIEW mv AS SELECT a FROM t;",
    )
    expected = {i for i in compute.controller.dataflows if not i.startswith("t")}
    compute.controller.created.clear()
    await compute.service.coordinator.compute.install_all()
    sent = {codec.dataflow_from_proto(r.dataflow).id for r in compute.controller.created}
    assert sent == expected


async def test_drop_cluster_with_indexes_needs_cascade(compute: TableHarness) -> None:
    """A cluster maintaining an index is only dropped with CASCADE, which drops the index too."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE CLUSTER c (SIZE '1');")
    await compute.execute(session, "CREATE INDEX v_idx IN CLUSTER c ON v (a)")
    index_id = (await ids(compute, session, "mz_indexes"))["v_idx"]
    refused = await compute.error(session, "DROP CLUSTER c")
    assert refused.code == "2BP01"
    assert "materialize.public.v_idx" in refused.message
    assert await compute.tag(session, "DROP CLUSTER c CASCADE") == "DROP CLUSTER"
    assert "v_idx" not in await ids(compute, session, "mz_indexes")
    assert index_id in compute.controller.dropped
    user_views = "SELECT name FROM mz_catalog.mz_views WHERE id LIKE 'u%'"
    assert await compute.rows(session, user_views) == [("v",)]


async def test_cluster_replica_targets_compute_peeks(compute: TableHarness) -> None:
    """SET cluster_replica sends index peeks to that replica only."""
    session = await compute.session()
    await compute.execute(session, SETUP + "CREATE DEFAULT INDEX ON v;")
    await compute.rows(session, "SELECT * FROM v")
    assert compute.controller.peeks[-1].replica_id == ""
    [(replica_id,)] = await compute.rows(
        session,
        "SELECT r.id FROM mz_catalog.mz_cluster_replicas r "
        "JOIN mz_catalog.mz_clusters c ON c.id = r.cluster_id "
        "WHERE c.name = 'quickstart' AND r.name = 'r1'",
    )
    await compute.execute(session, "SET cluster_replica = r1")
    await compute.rows(session, "SELECT * FROM v")
    assert compute.controller.peeks[-1].peek.target_id
    assert compute.controller.peeks[-1].replica_id == replica_id


async def test_subscribe_as_of_starts_there(compute: TableHarness) -> None:
    session = await compute.session()
    await compute.execute(session, SETUP)
    created = len(compute.controller.created)
    call = compute.stub.Execute(
        sql_pb2.ExecuteRequest(session_id=session, sql="SUBSCRIBE (SELECT a FROM v) AS OF 12345")
    )
    iterator = call.__aiter__()
    await asyncio.wait_for(iterator.__anext__(), 10)
    transient = codec.dataflow_from_proto(compute.controller.created[created].dataflow)
    assert transient.as_of == 12345
    call.cancel()
