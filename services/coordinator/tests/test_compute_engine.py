"""Compute reads through the real engine, in process: what the client sees.

``EngineController`` runs the replica's ``DataflowRunner`` on the real
``ComputeInstance`` over the shards the coordinator writes, so these tests
check results, not requests: fast and slow paths, materialized views,
SUBSCRIBE, errors inside dataflows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loupe.common.values import from_row
from loupe.coordinator.tests.conftest import EngineController, TableHarness
from loupe.persist import Shard, open_location
from loupe.proto.sql.v1 import sql_pb2
from loupe.testing import assert_eventually

ROWS = [(1, "x"), (2, "y"), (3, "x"), (4, "y"), (5, "z")]
SETUP = (
    "CREATE TABLE t (a int, b text);"
    f"INSERT INTO t VALUES {', '.join(f'({a}, {b!r})' for a, b in ROWS)};"
    "CREATE VIEW v AS SELECT a, b FROM t WHERE a > 1;"
)


async def test_indexed_view_reads_on_both_paths(engine: TableHarness) -> None:
    """A filter on an indexed view (fast path) and an aggregate over it (slow path)."""
    session = await engine.session()
    await engine.execute(session, SETUP)
    assert await engine.tag(session, "CREATE DEFAULT INDEX ON v") == "CREATE INDEX"
    fast = await engine.rows(session, "SELECT b, a FROM v WHERE b <> 'z' ORDER BY a DESC LIMIT 2")
    assert fast == [("y", 4), ("x", 3)]
    slow = await engine.rows(session, "SELECT b, sum(a) AS s FROM v GROUP BY b ORDER BY b")
    expected: dict[str, int] = {}
    for a, b in ROWS:
        if a > 1:
            expected[b] = expected.get(b, 0) + a
    assert slow == sorted(expected.items())


async def test_inserts_show_in_views_and_materialized_views(engine: TableHarness) -> None:
    """The index and the materialized view follow later inserts; reads stay strict serializable."""
    session = await engine.session()
    await engine.execute(session, SETUP)
    await engine.execute(session, "CREATE DEFAULT INDEX ON v")
    assert (
        await engine.tag(
            session, "CREATE MATERIALIZED VIEW mv AS SELECT b, count(*) AS n FROM t GROUP BY b"
        )
        == "CREATE MATERIALIZED VIEW"
    )
    await engine.execute(session, "INSERT INTO t VALUES (6, 'x')")
    assert await engine.rows(session, "SELECT a FROM v WHERE b = 'x' ORDER BY a") == [(3,), (6,)]
    assert await engine.rows(session, "SELECT b, n FROM mv ORDER BY b") == [
        ("x", 3),
        ("y", 2),
        ("z", 1),
    ]


async def test_subscribe_sees_a_later_insert(engine: TableHarness) -> None:
    session, writer = await engine.session(), await engine.session()
    await engine.execute(session, SETUP)
    call = engine.stub.Execute(
        sql_pb2.ExecuteRequest(session_id=session, sql="SUBSCRIBE v WITH (SNAPSHOT = false)")
    )
    responses = call.__aiter__()
    description = await asyncio.wait_for(anext(responses), 20)
    assert description.WhichOneof("kind") == "description"
    await engine.execute(writer, "INSERT INTO t VALUES (7, 'w'), (0, 'ignored')")
    batch = await asyncio.wait_for(anext(responses), 20)
    [(timestamp, diff, a, b)] = [from_row(r) for r in batch.rows.rows]
    assert (diff, a, b) == (1, 7, "w")
    assert timestamp > 0
    call.cancel()


async def test_division_by_zero_is_the_query_error(engine: TableHarness) -> None:
    session = await engine.session()
    await engine.execute(session, SETUP + "CREATE VIEW z AS SELECT a / (a - a) AS q FROM t;")
    error = await engine.error(session, "SELECT * FROM z")
    assert error.code == "22012"
    assert "division by zero" in error.message


async def test_explain_and_drop_with_the_engine(engine: TableHarness) -> None:
    """Dropping the index makes the view read by inlining again, with the same answer."""
    session = await engine.session()
    await engine.execute(session, SETUP + "CREATE INDEX v_b ON v (b);")
    before = await engine.rows(session, "SELECT count(*) FROM v")
    assert await engine.tag(session, "DROP INDEX v_b") == "DROP INDEX"

    async def same() -> Any:
        assert await engine.rows(session, "SELECT count(*) FROM v") == before

    await assert_eventually(same, timeout=10)
    assert before == [(sum(1 for a, _ in ROWS if a > 1),)]


async def test_tpch_load_generator_tables_are_readable(engine: TableHarness) -> None:
    """CREATE SOURCE … LOAD GENERATOR TPCH: the source and its tables, filled and indexable."""
    session = await engine.session()
    assert (
        await engine.tag(session, "CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.01)")
        == "CREATE SOURCE"
    )
    assert await engine.rows(
        session, "SELECT name FROM mz_catalog.mz_sources WHERE id LIKE 'u%'"
    ) == [("tpch",)]
    assert await engine.rows(session, "SELECT count(*) FROM nation") == [(25,)]
    await engine.execute(session, "CREATE DEFAULT INDEX ON region")
    regions = await engine.rows(session, "SELECT r_name FROM region ORDER BY r_name LIMIT 2")
    assert regions == [("AFRICA",), ("AMERICA",)]
    joined = await engine.rows(
        session,
        "SELECT r_name, count(*) FROM nation JOIN region ON n_regionkey = r_regionkey "
        "GROUP BY r_name ORDER BY r_name",
    )
    assert [n for _, n in joined] == [5, 5, 5, 5, 5]


async def test_as_of_before_a_tables_since_is_refused(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """A view read AS OF a time its table has compacted away is an error naming the table."""
    async with start_table_system(
        nats_url,
        data_dir,
        controller_class=EngineController,
        table_tick_interval=0.1,
        table_retention=0.3,
        table_compaction_ticks=1,
    ) as harness:
        session = await harness.session()
        await harness.execute(session, SETUP)
        ((then,),) = await harness.rows(session, "SELECT mz_now()")
        ((table_id,),) = await harness.rows(
            session, "SELECT id FROM mz_catalog.mz_tables WHERE name = 't'"
        )
        shard = Shard(table_id, *open_location(*harness.controller_uris()))

        def compacted() -> None:
            assert shard.state().since > then

        await assert_eventually(compacted, timeout=10)
        error = await harness.error(session, f"SELECT * FROM v AS OF {then}")
        assert f"Timestamp ({then}) is not valid for all inputs: {table_id} since" in error.message


async def test_as_of_before_a_maintained_dataflows_time_names_the_table(
    engine: TableHarness,
) -> None:
    """AS OF a time storage keeps, but the replica feeds the table from later: named, then read.

    The replica feeds a table once to all its dataflows, from the earliest
    time they read (here a materialized view created after ``then``).
    """
    session = await engine.session()
    await engine.tag(session, "CREATE TABLE t (a int)")
    await engine.tag(session, "INSERT INTO t VALUES (1)")
    ((then,),) = await engine.rows(session, "SELECT mz_now()")
    await engine.tag(session, "DELETE FROM t WHERE a = 1")
    await engine.tag(session, "CREATE MATERIALIZED VIEW mv AS SELECT a FROM t")
    await engine.tag(session, "INSERT INTO t VALUES (2)")
    assert await engine.rows(session, "SELECT a FROM mv") == [(2,)]
    error = await engine.error(session, f"SELECT a FROM t AS OF {then}")
    assert error.code == "XX000"
    assert error.message.startswith(
        f"Timestamp ({then}) is not valid for all inputs: cluster 'quickstart' reads "
        "materialize.public.t only from a later time on"
    )
    assert "SET cluster" in error.hint
    await engine.tag(session, "DROP MATERIALIZED VIEW mv")

    async def read_then() -> None:
        assert await engine.rows(session, f"SELECT a FROM t AS OF {then}") == [(1,)]

    await assert_eventually(read_then, timeout=10)


async def test_an_index_holding_an_error_is_created_with_a_warning(engine: TableHarness) -> None:
    """CREATE INDEX on a view that divides by zero succeeds; the error is a warning, then the reads'."""
    session = await engine.session()
    await engine.execute(session, SETUP + "CREATE VIEW z AS SELECT a / (a - a) AS q FROM t;")
    responses = await engine.execute(session, "CREATE DEFAULT INDEX ON z")
    assert responses[-1].complete.tag == "CREATE INDEX"
    warnings = [r.notice.message for r in responses if r.HasField("notice")]
    assert any("materialize.public.z_primary_idx holds an error" in w for w in warnings), warnings
    error = await engine.error(session, "SELECT * FROM z")
    assert error.code == "22012"


async def test_drop_source_takes_its_tables(engine: TableHarness) -> None:
    """DROP SOURCE drops the load generator's tables too; what reads them needs CASCADE."""
    session = await engine.session()
    created = await engine.execute(
        session, "CREATE SOURCE tpch FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.01) FOR ALL TABLES"
    )
    progress = [r.progress for r in created if r.HasField("progress")]
    assert (progress[-1].nodes_hydrated, progress[-1].nodes_total, progress[-1].unit) == (
        8,
        8,
        "tables",
    )
    assert progress[-1].hydrated
    ((lineitems,),) = await engine.rows(session, "SELECT count(*) FROM lineitem")
    assert progress[-1].records_read > lineitems > 0
    await engine.execute(session, "CREATE VIEW regions AS SELECT r_name FROM region")
    refused = await engine.error(session, "DROP SOURCE tpch")
    assert refused.code == "2BP01"
    assert "materialize.public.regions" in refused.message
    wrong = await engine.error(session, "DROP VIEW tpch")
    assert wrong.code == "42809"
    assert await engine.tag(session, "DROP SOURCE tpch CASCADE") == "DROP SOURCE"
    left = await engine.rows(session, "SELECT name FROM mz_catalog.mz_objects WHERE id LIKE 'u%'")
    assert left == []


async def test_window_functions_in_views_indexes_materialized_views_and_selects(
    engine: TableHarness, postgres_url: str
) -> None:
    """A view with windows (indexed), a materialized view and one-off SELECTs follow
    inserts, updates and deletes; after each, every one equals PostgreSQL's answer."""
    import psycopg

    setup = [
        "CREATE TABLE scores (team text, player int, points int)",
        "INSERT INTO scores VALUES ('a', 1, 10), ('a', 2, 30), ('a', 3, 30), ('b', 4, 5), "
        "('b', 5, NULL), ('c', 6, 7)",
        "CREATE VIEW ranked AS SELECT team, player, points, "
        "rank() OVER (PARTITION BY team ORDER BY points DESC NULLS LAST) AS r, "
        "sum(points) OVER (PARTITION BY team) AS team_points, "
        "lag(player) OVER (PARTITION BY team ORDER BY player) AS before FROM scores",
        "CREATE MATERIALIZED VIEW leaders AS SELECT team, player FROM "
        "(SELECT team, player, row_number() OVER (PARTITION BY team "
        "ORDER BY points DESC NULLS LAST, player) AS n FROM scores) s WHERE n = 1",
    ]
    changes = [
        "INSERT INTO scores VALUES ('a', 7, 40), ('c', 8, 7), ('d', 9, 1)",
        "UPDATE scores SET points = 50 WHERE player = 4",
        "DELETE FROM scores WHERE team = 'a' AND points = 30",
        "DELETE FROM scores WHERE team = 'c'",
    ]
    reads = [
        "SELECT * FROM ranked ORDER BY team, player",
        "SELECT * FROM leaders ORDER BY team",
        "SELECT team, sum(points) AS total, "
        "dense_rank() OVER (ORDER BY sum(points) DESC NULLS LAST, team) AS place "
        "FROM scores GROUP BY team ORDER BY place",
    ]
    session = await engine.session()
    with psycopg.connect(postgres_url, autocommit=True) as postgres:
        postgres.execute("DROP TABLE IF EXISTS scores CASCADE")
        for statement in setup:
            # PostgreSQL's materialized views are refreshed by hand: a view is what Loupe keeps.
            postgres.execute(statement.replace("MATERIALIZED VIEW", "VIEW"))
            await engine.execute(session, statement)
        await engine.execute(session, "CREATE DEFAULT INDEX ON ranked")
        for change in [None, *changes]:
            if change is not None:
                postgres.execute(change)
                await engine.execute(session, change)
            for read in reads:
                assert await engine.rows(session, read) == postgres.execute(read).fetchall(), (
                    f"{read} after {change}"
                )
        postgres.execute("DROP TABLE scores CASCADE")
