"""Tables through the coordinator: DDL, DML, timestamps, AS OF and their catalog relations.

These run on the real catalog service (its oracle and item ids), shards on
disk and an in-process replica on the compute engine (``conftest.table_system``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from loupe.catalog.service import QUEUE_GROUP as CATALOG_QUEUE
from loupe.common.transport import connect, subject_for
from loupe.coordinator.coordinator import CATALOG_SERVICE
from loupe.coordinator.tests.conftest import append_as_another_writer
from loupe.persist import TIMESTAMP_COLUMN, Shard, open_location
from loupe.testing import assert_eventually

UTC = dt.UTC


async def test_table_round_trip_with_every_type_and_nulls(tables: Any) -> None:
    """Every column type stores and reads back its values; NULLs stay NULL."""
    session = await tables.session()
    assert (
        await tables.tag(
            session,
            "CREATE TABLE t (i int, b bigint, s text, v varchar(5), f bool, d double precision,"
            " n numeric(6,2), ts timestamptz, tn timestamp, dt date)",
        )
        == "CREATE TABLE"
    )
    tag = await tables.tag(
        session,
        "INSERT INTO t VALUES (1, 9000000000, 'one', 'abc', true, 1.5, 3.14159,"
        " '2024-04-05 12:00:00+02', '2024-04-05 12:00:00', '2024-04-05'),"
        " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    )
    assert tag == "INSERT 0 2"
    rows = await tables.rows(session, "SELECT * FROM t ORDER BY i")
    assert rows == [
        (
            1,
            9_000_000_000,
            "one",
            "abc",
            True,
            1.5,
            Decimal("3.14"),  # numeric(6,2), rounded, exact
            dt.datetime(2024, 4, 5, 10, 0, tzinfo=UTC),
            dt.datetime(2024, 4, 5, 12, 0),  # timestamp without time zone: naive
            dt.date(2024, 4, 5),
        ),
        (2, None, None, None, None, None, None, None, None, None),
    ]
    described = await tables.execute(session, "SELECT i, b, s, f, d, ts, dt FROM t")
    types = [c.type for r in described if r.HasField("description") for c in r.description.columns]
    assert types == ["int4", "int8", "text", "bool", "float8", "timestamptz", "date"]


async def test_insert_with_columns_select_and_expressions(tables: Any) -> None:
    """Column lists fill the rest with NULL; INSERT … SELECT and computed values work."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int NOT NULL, b text)")
    await tables.tag(session, "INSERT INTO public.t (b, a) VALUES ('x', 1)")
    await tables.tag(session, "INSERT INTO materialize.public.t (a) VALUES (1 + 1)")
    assert await tables.tag(session, "INSERT INTO t SELECT a + 10, b FROM t") == "INSERT 0 2"
    assert await tables.rows(session, "SELECT a, b FROM t ORDER BY a") == [
        (1, "x"),
        (2, None),
        (11, "x"),
        (12, None),
    ]


async def test_update_and_delete_change_matching_rows_only(tables: Any) -> None:
    """UPDATE rewrites the rows its WHERE matches (duplicates too); DELETE removes them."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (k int, v text)")
    await tables.tag(session, "INSERT INTO t VALUES (1, 'a'), (1, 'a'), (2, 'b'), (3, NULL)")
    assert await tables.tag(session, "UPDATE t SET v = v || '!', k = k * 10 WHERE k = 1") == (
        "UPDATE 2"
    )
    assert await tables.tag(session, "UPDATE t AS x SET v = 'none' WHERE x.v IS NULL") == (
        "UPDATE 1"
    )
    assert await tables.rows(session, "SELECT k, v FROM t ORDER BY k") == [
        (2, "b"),
        (3, "none"),
        (10, "a!"),
        (10, "a!"),
    ]
    assert await tables.tag(session, "DELETE FROM t WHERE k > 5") == "DELETE 2"
    assert await tables.tag(session, "UPDATE t SET v = 'z' WHERE false") == "UPDATE 0"
    assert await tables.rows(session, "SELECT k, v FROM t ORDER BY k") == [(2, "b"), (3, "none")]
    assert await tables.tag(session, "DELETE FROM t") == "DELETE 2"
    assert await tables.rows(session, "SELECT count(*) FROM t") == [(0,)]


async def test_errors_name_the_table_column_and_type(tables: Any) -> None:
    """Unknown table 42P01, column 42703, types 42804/22P02, NOT NULL 23502."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int NOT NULL, b bool, c date)")
    cases = {
        "INSERT INTO nope VALUES (1)": ("42P01", "unknown catalog item 'nope'"),
        "SELECT * FROM nope": ("42P01", "unknown catalog item 'nope'"),
        "INSERT INTO t (z) VALUES (1)": ("42703", 'column "z" of relation "t" does not exist'),
        "UPDATE t SET a = 1 WHERE zz = 2": ("42703", 'column "zz" does not exist'),
        "INSERT INTO t VALUES (1, 5)": (
            "42804",
            'column "b" is of type boolean but expression is of type integer',
        ),
        "INSERT INTO t VALUES ('x')": ("22P02", 'invalid input syntax for type integer: "x"'),
        "INSERT INTO t VALUES (1, NULL, 'soon')": (
            "22007",
            'invalid input syntax for type date: "soon"',
        ),
        "INSERT INTO t (b) VALUES (true)": (
            "23502",
            'null value in column "a" of relation "t" violates not-null constraint',
        ),
        "INSERT INTO t VALUES (1, true, '2024-01-01', 4)": (
            "42601",
            "INSERT has more expressions than target columns",
        ),
        "INSERT INTO mz_catalog.mz_clusters VALUES ('x')": (
            "42501",
            "system table 'mz_catalog.mz_clusters' cannot be modified",
        ),
        "CREATE TABLE t (a int)": ("42710", '"t" already exists'),
        "CREATE TABLE mz_catalog.x (a int)": (
            "42501",
            "system schema 'mz_catalog' cannot be modified",
        ),
    }
    for sql, (code, message) in cases.items():
        error = await tables.error(session, sql)
        assert (error.code, error.message) == (code, message), sql
    error = await tables.error(session, "INSERT INTO nope VALUES (1)")
    assert error.position == len("INSERT INTO ") + 1
    # Nothing of the failed statements was written.
    assert await tables.rows(session, "SELECT count(*) FROM t") == [(0,)]


async def test_primary_keys_unique_constraints_and_unique_indexes_are_enforced(
    tables: Any,
) -> None:
    """23505 on a duplicate key, by INSERT or UPDATE, as PostgreSQL; NULLs never collide."""
    session = await tables.session()
    await tables.tag(
        session, "CREATE TABLE k (id int PRIMARY KEY, code text UNIQUE, n int DEFAULT 7, m int)"
    )
    assert await tables.tag(session, "INSERT INTO k VALUES (1, 'a'), (2, NULL), (3, NULL)") == (
        "INSERT 0 3"
    )
    duplicate = await tables.error(session, "INSERT INTO k VALUES (1, 'z')")
    assert (duplicate.code, duplicate.message, duplicate.detail) == (
        "23505",
        'duplicate key value violates unique constraint "k_pkey"',
        "Key (id)=(1) already exists.",
    )
    within = await tables.error(session, "INSERT INTO k VALUES (4, 'b'), (5, 'b')")
    assert (within.code, within.message) == (
        "23505",
        'duplicate key value violates unique constraint "k_code_key"',
    )
    primary_null = await tables.error(session, "INSERT INTO k (code) VALUES ('c')")
    assert primary_null.code == "23502"
    collides = await tables.error(session, "UPDATE k SET id = 1 WHERE id = 2")
    assert collides.code == "23505"
    # Moving every key at once leaves them unique: allowed, as in PostgreSQL.
    assert await tables.tag(session, "UPDATE k SET id = id + 10") == "UPDATE 3"
    assert await tables.rows(session, "SELECT id, code, n FROM k ORDER BY id") == [
        (11, "a", 7),
        (12, None, 7),
        (13, None, 7),
    ]
    await tables.tag(session, "CREATE TABLE empty (a int)")
    await tables.tag(session, "CREATE UNIQUE INDEX empty_a ON empty (a DESC)")
    await tables.tag(session, "INSERT INTO empty VALUES (1)")
    assert (await tables.error(session, "INSERT INTO empty VALUES (1)")).code == "23505"
    await tables.tag(session, "CREATE UNIQUE INDEX k_m ON k (m)")
    assert await tables.tag(session, "UPDATE k SET m = id") == "UPDATE 3"
    by_index = await tables.error(session, "INSERT INTO k VALUES (20, 'x', DEFAULT, 11)")
    assert (by_index.code, by_index.message) == (
        "23505",
        'duplicate key value violates unique constraint "k_m"',
    )
    await tables.tag(session, "INSERT INTO k VALUES (20, 'x', DEFAULT, 1), (21, 'y', 0, 2)")
    not_unique = await tables.error(session, "CREATE UNIQUE INDEX k_n ON k (n)")
    assert (not_unique.code, not_unique.detail) == ("23505", "Key (n)=(7) is duplicated.")
    assert await tables.rows(session, "SELECT id, n FROM k WHERE id >= 20 ORDER BY id") == [
        (20, 7),
        (21, 0),
    ]
    # Dropping the table drops its indexes with it, as in PostgreSQL.
    assert await tables.tag(session, "DROP TABLE k") == "DROP TABLE"
    assert (await tables.error(session, "DROP INDEX k_m")).code == "42704"


async def test_literal_defaults_take_their_column_type(tables: Any) -> None:
    """DEFAULT '2024-01-01' on a date column is a date, as a literal in VALUES is."""
    session = await tables.session()
    await tables.tag(
        session,
        "CREATE TABLE d (id int, day date DEFAULT '2024-01-01', "
        "n numeric DEFAULT '1.5', made timestamptz DEFAULT now())",
    )
    await tables.tag(session, "INSERT INTO d (id) VALUES (1)")
    rows = await tables.rows(session, "SELECT id, day::text, n::text FROM d")
    assert rows == [(1, "2024-01-01", "1.5")]
    assert await tables.rows(session, "SELECT made IS NOT NULL FROM d") == [(True,)]


async def test_reads_right_after_writes_see_them(tables: Any) -> None:
    """Each SELECT after an INSERT sees it (the read timestamp follows the write's)."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    for count in range(1, 6):
        await tables.tag(session, f"INSERT INTO t VALUES ({count})")
        assert await tables.rows(session, "SELECT count(*), max(a) FROM t") == [(count, count)]


async def test_mz_now_is_the_read_timestamp(tables: Any) -> None:
    """mz_now() is the time the query reads at: the peek's timestamp, close to the clock."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    before = time.time_ns() // 1_000_000
    ((alone,),) = await tables.rows(session, "SELECT mz_now()")
    ((now, count),) = await tables.rows(session, "SELECT mz_now(), count(*) FROM t")
    peek = tables.controller.peeks[-1].peek
    assert now == peek.timestamp
    assert count == 0
    assert before - 5_000 <= alone <= now <= time.time_ns() // 1_000_000 + 1_000
    described = await tables.execute(session, "SELECT mz_now()")
    (column,) = [c for r in described if r.HasField("description") for c in r.description.columns]
    assert (column.name, column.type) == ("mz_now", "mz_timestamp")


async def test_a_select_asks_the_oracle_before_it_plans(tables: Any, monkeypatch: Any) -> None:
    """The oracle's read timestamp is asked for as a SELECT of a table starts, and the query
    is resolved and planned while it answers; a query that needs the time (mz_now()) plans
    once it is known. Nothing is asked for a query of no table, nor in a serializable
    session. The answers are the same."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    await tables.tag(session, "INSERT INTO t VALUES (1), (2)")
    compute = tables.service.coordinator.compute
    oracle = compute.c.oracle
    events: list[str] = []
    asked, plan = oracle.read_timestamp, compute.plan

    async def read_timestamp() -> int:
        events.append("asked")
        timestamp = await asked()
        events.append("answered")
        return timestamp

    def planned(*args: Any, **kwargs: Any) -> Any:
        events.append("planned" if kwargs.get("query_time") is None else "planned at")
        return plan(*args, **kwargs)

    monkeypatch.setattr(oracle, "read_timestamp", read_timestamp)
    monkeypatch.setattr(compute, "plan", planned)
    assert await tables.rows(session, "SELECT count(*) FROM t WHERE a > 0") == [(2,)]
    assert events == ["asked", "planned", "answered"]
    events.clear()
    ((now, count),) = await tables.rows(session, "SELECT mz_now(), count(*) FROM t")
    assert count == 2
    assert now == tables.controller.peeks[-1].peek.timestamp
    assert events == ["asked", "planned", "answered", "planned at"]
    events.clear()
    assert await tables.rows(session, "SELECT 1") == [(1,)]
    assert events == []
    await tables.tag(session, "SET transaction_isolation = serializable")
    assert await tables.rows(session, "SELECT count(*) FROM t") == [(2,)]
    assert events == ["planned"]


async def test_as_of_an_older_time_shows_the_old_contents(tables: Any) -> None:
    """AS OF a time between two writes shows the table as it was then."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    await tables.tag(session, "INSERT INTO t VALUES (1)")
    ((then,),) = await tables.rows(session, "SELECT mz_now()")
    await tables.tag(session, "INSERT INTO t VALUES (2)")
    await tables.tag(session, "DELETE FROM t WHERE a = 1")
    assert await tables.rows(session, "SELECT a FROM t") == [(2,)]
    assert await tables.rows(session, f"SELECT a FROM t AS OF {then}") == [(1,)]
    # Exact milliseconds (``fromtimestamp(then / 1000)`` may round to the one before).
    at = (dt.datetime.fromtimestamp(0, UTC) + dt.timedelta(milliseconds=then)).isoformat(
        sep=" ", timespec="milliseconds"
    )
    assert await tables.rows(session, f"SELECT a, mz_now() FROM t AS OF '{at}'") == [(1, then)]
    error = await tables.error(session, "SELECT * FROM t AS OF 'yesterday'")
    assert error.code == "22023"


async def test_as_of_before_the_since_is_an_error(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """Tables keep `table_retention` of history; reading before their since is refused."""
    async with start_table_system(
        nats_url,
        data_dir,
        table_tick_interval=0.1,
        table_retention=0.3,
        table_compaction_ticks=1,
    ) as tables:
        session = await tables.session()
        await tables.tag(session, "CREATE TABLE t (a int)")
        await tables.tag(session, "INSERT INTO t VALUES (1)")
        ((then,),) = await tables.rows(session, "SELECT mz_now()")
        ((table_id,),) = await tables.rows(
            session, "SELECT id FROM mz_catalog.mz_tables WHERE name = 't'"
        )
        shard = Shard(table_id, *open_location(*tables.controller_uris()))

        def compacted() -> None:
            assert shard.state().since > then

        await assert_eventually(compacted, timeout=10)
        error = await tables.error(session, f"SELECT * FROM t AS OF {then}")
        assert error.code == "XX000"
        assert f"Timestamp ({then}) is not valid for all inputs: {table_id} since" in error.message
        # The present is still readable.
        assert await tables.rows(session, "SELECT a FROM t") == [(1,)]


async def test_idle_tables_do_not_hold_back_reads(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """Without ticks, a write to one table moves every table's upper: a join reads at once."""
    async with start_table_system(nats_url, data_dir, table_tick_interval=0) as tables:
        session = await tables.session()
        await tables.tag(session, "CREATE TABLE busy (a int)")
        await tables.tag(session, "CREATE TABLE idle (a int)")
        await tables.tag(session, "INSERT INTO idle VALUES (1)")
        for value in range(3):
            await tables.tag(session, f"INSERT INTO busy VALUES ({value})")
            started = time.monotonic()
            rows = await tables.rows(
                session, "SELECT count(*) FROM busy JOIN idle ON busy.a >= idle.a"
            )
            assert rows == [(value,)]
            assert time.monotonic() - started < 1.0


async def test_selects_over_tables_go_to_the_session_cluster(tables: Any) -> None:
    """Queries reading a table peek the session's cluster; system-only ones mz_catalog_server."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    await tables.rows(session, "SELECT * FROM t JOIN mz_catalog.mz_tables m ON m.name = 't'")
    assert tables.controller.peeks[-1].cluster_id == "u1"
    await tables.rows(session, "SELECT * FROM mz_catalog.mz_tables")
    assert tables.controller.peeks[-1].cluster_id == "s1"


async def test_tables_and_columns_join_with_user_tables(tables: Any) -> None:
    """mz_tables, mz_columns and mz_objects list the table and join with it in one query."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int NOT NULL, b text, c date)")
    await tables.tag(session, "INSERT INTO t VALUES (1, 'x', NULL)")
    rows = await tables.rows(
        session,
        "SELECT t.name, count(*) FROM mz_catalog.mz_tables t "
        "JOIN mz_catalog.mz_columns c ON c.id = t.id "
        "WHERE t.name IN ('t', 'mz_clusters') GROUP BY t.name ORDER BY t.name",
    )
    assert rows == [("mz_clusters", 8), ("t", 3)]
    columns = await tables.rows(
        session,
        "SELECT c.name, c.position, c.nullable, c.type FROM mz_columns c "
        "JOIN mz_tables t ON t.id = c.id WHERE t.name = 't' ORDER BY c.position",
    )
    assert columns == [("a", 1, False, "integer"), ("b", 2, True, "text"), ("c", 3, True, "date")]
    (table,) = await tables.rows(
        session,
        "SELECT t.id, s.name, o.type, t.create_sql FROM mz_tables t "
        "JOIN mz_schemas s ON s.id = t.schema_id JOIN mz_objects o ON o.id = t.id "
        "WHERE t.name = 't'",
    )
    assert table[1:] == (
        "public",
        "table",
        'CREATE TABLE "materialize"."public"."t" ("a" integer NOT NULL, "b" text, "c" date)',
    )
    joined = await tables.rows(
        session, "SELECT t.a, m.id FROM t JOIN mz_catalog.mz_tables m ON m.name = 't'"
    )
    assert joined == [(1, table[0])]


async def test_drop_table_removes_it_from_the_relations(tables: Any) -> None:
    """After DROP TABLE the table is gone from mz_tables, mz_objects, mz_columns and from SQL."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    await tables.tag(session, "CREATE TABLE u (a int)")
    assert await tables.tag(session, "DROP TABLE t") == "DROP TABLE"
    for relation in ("mz_tables", "mz_objects"):
        names = await tables.rows(
            session, f"SELECT name FROM mz_catalog.{relation} WHERE name IN ('t', 'u')"
        )
        assert names == [("u",)], relation
    assert await tables.rows(
        session,
        "SELECT count(*) FROM mz_columns c LEFT JOIN mz_objects o ON o.id = c.id WHERE o.id IS NULL",
    ) == [(0,)]
    error = await tables.error(session, "SELECT * FROM t")
    assert error.code == "42P01"
    responses = await tables.execute(session, "DROP TABLE IF EXISTS t, u CASCADE")
    notices = [r.notice.message for r in responses if r.HasField("notice")]
    assert notices == ['table "t" does not exist, skipping']
    assert await tables.rows(session, "SELECT count(*) FROM mz_tables WHERE name = 'u'") == [(0,)]
    events = await tables.rows(
        session,
        "SELECT event_type, object_type FROM mz_audit_events WHERE object_type = 'table' "
        "ORDER BY id",
    )
    assert events == [
        ("create", "table"),
        ("create", "table"),
        ("drop", "table"),
        ("drop", "table"),
    ]


async def test_tables_survive_a_coordinator_restart(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """A new coordinator finds the tables in the catalog and their rows in storage."""
    async with start_table_system(nats_url, data_dir) as tables:
        session = await tables.session()
        await tables.tag(session, "CREATE TABLE t (a int)")
        await tables.tag(session, "INSERT INTO t VALUES (7)")
    async with start_table_system(nats_url, data_dir) as tables:
        session = await tables.session()
        assert await tables.rows(session, "SELECT a FROM t") == [(7,)]
        await tables.tag(session, "INSERT INTO t VALUES (8)")
        assert await tables.rows(session, "SELECT sum(a) FROM t") == [(15,)]


async def test_concurrent_inserts_are_all_kept(tables: Any) -> None:
    """Inserts from several sessions at once all land, each at its own timestamp."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    sessions = [await tables.session() for _ in range(4)]
    await asyncio.gather(
        *(tables.tag(s, f"INSERT INTO t VALUES ({i})") for i, s in enumerate(sessions))
    )
    assert await tables.rows(session, "SELECT count(*), sum(a) FROM t") == [(4, 6)]


async def _table_with_one_row(tables: Any) -> tuple[str, Any, Any, Shard]:
    """A session, the coordinator's table store, table ``t (a int)`` holding 1, its shard."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    await tables.tag(session, "INSERT INTO t VALUES (1)")
    store = tables.service.coordinator.tables
    (table,) = [t for t in tables.service.coordinator.state.tables.values() if t.name == "t"]
    return session, store, table, store.shard(table.id)


async def test_a_write_racing_uppers_that_keep_moving_is_planned_once(tables: Any) -> None:
    """Ticks and reads that move the upper mid-plan add no rows: the write lands past them.

    Before, every such race sent the write back to plan again at a new timestamp;
    a plan slower than the ticks (a loaded machine) then never committed.
    """
    session, store, table, shard = await _table_with_one_row(tables)
    oracle = store.oracle
    plans: list[int] = []

    def plan(contents: Any, rows: list[tuple[Any, ...]]) -> tuple[list[Any], int]:
        plans.append(contents.num_rows if contents is not None else -1)
        # A tick lands while this plan runs, every time it runs: past the write's timestamp.
        append_as_another_writer(shard, table, [], step=50)
        return [(row, 1) for row in rows], len(rows)

    blind = await store.write(table, lambda c: plan(c, [(2,)]))
    assert plans == [-1]
    reading = await store.write(table, lambda c: plan(c, [(3,)]), read=True)
    assert plans == [-1, 2]  # read the two rows once, never again
    assert blind.timestamp < reading.timestamp
    # Acknowledged writes are visible to every later read at the oracle's timestamp.
    assert await oracle.read_timestamp() >= reading.timestamp
    assert await tables.rows(session, "SELECT a FROM t ORDER BY a") == [(1,), (2,), (3,)]


async def test_a_tick_under_way_never_splits_a_transaction_over_two_timestamps(
    tables: Any,
) -> None:
    """A tick (or a read) that moves a table's upper while a transaction commits waits for
    it: every table of the transaction gets its rows at one timestamp.

    Before, a tick already under way when the transaction began could move the second
    table between the check of its upper and its append; its rows then landed at
    another timestamp than the first table's (CI: a SUBSCRIBE saw them at two).
    """
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE w1 (a int)")
    await tables.tag(session, "CREATE TABLE w2 (b text)")
    store = tables.service.coordinator.tables
    by_name = {t.name: t for t in tables.service.coordinator.state.tables.values()}
    first, second = by_name["w1"], by_name["w2"]
    tick_at = await store.oracle.write_timestamp()
    ticks: list[threading.Thread] = []

    def plan_first(contents: Any) -> tuple[list[Any], int]:
        # A tick moves the second table now, while the transaction holds its upper.
        tick = threading.Thread(target=store._advance, args=(tick_at + 5_000, [second]))
        tick.start()
        tick.join(timeout=1.0)
        ticks.append(tick)
        return [((1,), 1), ((2,), 1)], 2

    def plan_second(contents: Any) -> tuple[list[Any], int]:
        return [(("x",), 1)], 1

    total = await store.write_all([(first, plan_first, False), (second, plan_second, False)])
    assert total == 3
    await asyncio.to_thread(ticks[0].join)
    times = set()
    for table in (first, second):
        updates = await asyncio.to_thread(store.shard(table.id).read_updates)
        assert updates.num_rows > 0
        times |= set(updates.column(TIMESTAMP_COLUMN).to_pylist())
    assert len(times) == 1, times
    # The tick went on once the transaction was appended.
    assert store.shard(second.id).upper > tick_at + 5_000
    assert await tables.rows(session, "SELECT b FROM w2") == [("x",)]


async def test_a_read_below_an_upper_already_seen_opens_no_shard(
    nats_url: str, data_dir: Path, start_table_system: Any, monkeypatch: Any
) -> None:
    """Uppers only grow: a read at a time below the upper this coordinator last set or
    read needs no advance, so it reads no consensus state (and takes no thread hop);
    a read past it still moves the upper. (No ticks here: one would move the upper.)"""
    async with start_table_system(nats_url, data_dir, table_tick_interval=0) as tables:
        _, store, table, shard = await _table_with_one_row(tables)
        known = store._known_uppers[table.id]
        assert known == shard.upper  # the insert's append set it
        opened: list[str] = []
        open_shard = store.shard

        def counted(table_id: str) -> Shard:
            opened.append(table_id)
            return open_shard(table_id)

        monkeypatch.setattr(store, "shard", counted)
        await store.advance_to([table], known - 1)
        assert opened == []
        await store.advance_to([table], known + 10)
        assert opened == [table.id]
        assert shard.upper == known + 11
        assert store._known_uppers[table.id] == known + 11


async def test_writes_go_on_when_an_oracle_call_goes_to_a_catalog_that_died(
    tables: Any, nats_url: str
) -> None:
    """A catalog that dies holding an oracle call never answers it: the call is asked
    again after the oracle's call timeout, not after the 30 s request timeout, so the
    writes queued behind it go on once another catalog serves."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int)")
    tables.service.coordinator.oracle.call_timeout = 0.5
    # A catalog that died after taking its share of the oracle's requests: subscribed
    # in the catalog's queue group, it answers nothing.
    connection = await connect(nats_url, name="dead-catalog")
    try:
        for method in ("WriteTimestamp", "ReadTimestamp"):
            await connection.subscribe(
                subject_for(CATALOG_SERVICE, method), queue=CATALOG_QUEUE, cb=_swallow
            )
        await connection.flush()
        # Under the 30 s request timeout one swallowed call is enough to fail an INSERT;
        # with the oracle's 0.5 s here, only many in a row (each half the time) could.
        await tables.tag(session, "SET statement_timeout = '20s'")
        for value in range(8):
            await tables.tag(session, f"INSERT INTO t VALUES ({value})")
    finally:
        await connection.close()
    assert await tables.rows(session, "SELECT count(*), sum(a) FROM t") == [(8, 28)]


async def _swallow(message: Any) -> None:
    """Takes a request and never answers it."""


async def test_a_reading_write_plans_again_when_rows_land_meanwhile(tables: Any) -> None:
    """Rows another writer appends between a DELETE's read and its append are not missed."""
    session, store, table, shard = await _table_with_one_row(tables)
    seen: list[list[int]] = []

    def delete_all(contents: Any) -> tuple[list[Any], int]:
        rows = contents.column("a").to_pylist()
        seen.append(rows)
        if len(seen) == 1:
            # Another writer's row lands after this plan read the table.
            append_as_another_writer(shard, table, [(5,)])
        return [((a,), -1) for a in rows], len(rows)

    result = await store.write(table, delete_all, read=True)
    assert seen == [[1], [1, 5]]
    assert result.count == 2
    assert await tables.rows(session, "SELECT a FROM t") == []


async def test_serializable_reads_the_latest_complete_time(
    nats_url: str, data_dir: Path, start_table_system: Any
) -> None:
    """transaction_isolation = serializable reads where its inputs are complete, not the oracle."""
    async with start_table_system(nats_url, data_dir, table_tick_interval=0) as tables:
        session = await tables.session()
        await tables.tag(session, "CREATE TABLE t (a int)")
        await tables.tag(session, "INSERT INTO t VALUES (1)")
        await tables.tag(session, "SET transaction_isolation = 'serializable'")
        # mz_now() needs a timestamp before planning: the oracle's.
        ((now, _),) = await tables.rows(session, "SELECT mz_now(), a FROM t")
        assert tables.controller.peeks[-1].peek.timestamp == now > 0
        ((table_id,),) = await tables.rows(session, "SELECT id FROM mz_tables WHERE name = 't'")
        upper = Shard(table_id, *open_location(*tables.controller_uris())).state().upper
        # The oracle moves on, the idle table does not (no ticks): a strict read would wait.
        oracle = await tables.service.coordinator.oracle.write_timestamp()
        started = time.monotonic()
        assert await tables.rows(session, "SELECT a FROM t") == [(1,)]
        assert tables.controller.peeks[-1].peek.timestamp == upper - 1 < oracle
        assert time.monotonic() - started < 5


async def test_as_of_applies_to_constant_queries_and_system_relations(tables: Any) -> None:
    """AS OF sets mz_now() even without a relation, and time-travels system relations too."""
    session = await tables.session()
    assert await tables.rows(session, "SELECT mz_now() AS OF 1234") == [(1234,)]
    ((before,),) = await tables.rows(session, "SELECT mz_now()")
    await tables.tag(session, "CREATE TABLE later (a int)")
    assert await tables.rows(session, "SELECT count(*) FROM mz_tables WHERE name = 'later'") == [
        (1,)
    ]
    assert await tables.rows(
        session, f"SELECT count(*) FROM mz_tables WHERE name = 'later' AS OF {before}"
    ) == [(0,)]
    error = await tables.error(session, "SELECT 1 AS OF mz_now()")
    assert error.code == "22023"


async def test_explain_plans_over_user_tables(tables: Any) -> None:
    """EXPLAIN resolves user tables as SELECT does and names them database.schema.name."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE t (a int NOT NULL, b text)")
    [(text,)] = await tables.rows(session, "EXPLAIN SELECT b FROM public.t WHERE a > 1")
    assert text.splitlines()[0] == "Explained Query:"
    assert "Get materialize.public.t" in text
    assert await tables.tag(session, "EXPLAIN PHYSICAL PLAN FOR SELECT * FROM t") == "EXPLAIN"


async def test_show_lists_objects_columns_and_definitions(tables: Any) -> None:
    """SHOW TABLES/VIEWS/INDEXES/OBJECTS/COLUMNS/CREATE read the catalog, as in Materialize."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE shown (a int NOT NULL, b text)")
    await tables.tag(session, "CREATE TABLE other (c int)")
    await tables.tag(session, "CREATE VIEW shown_view AS SELECT a FROM shown")
    await tables.tag(session, "CREATE INDEX shown_a ON shown (a)")
    assert ("shown",) in await tables.rows(session, "SHOW TABLES")
    assert ("other",) in await tables.rows(session, "SHOW TABLES FROM public")
    assert await tables.rows(session, "SHOW VIEWS") == [("shown_view",)]
    assert await tables.rows(session, "SHOW INDEXES ON shown") == [
        ("shown_a", "shown", "quickstart")
    ]
    objects = dict(await tables.rows(session, "SHOW OBJECTS"))
    assert objects["shown"] == "table"
    assert objects["shown_view"] == "view"
    assert await tables.rows(session, "SHOW COLUMNS FROM shown") == [
        ("a", False, "integer"),
        ("b", True, "text"),
    ]
    [(name, create_sql)] = await tables.rows(session, "SHOW CREATE VIEW shown_view")
    assert name == "shown_view"
    assert "SELECT" in create_sql
    assert create_sql.startswith("CREATE VIEW")
    assert ("public",) in await tables.rows(session, "SHOW SCHEMAS")
    assert ("materialize",) in await tables.rows(session, "SHOW DATABASES")
    missing = await tables.error(session, "SHOW COLUMNS FROM nope")
    assert missing.code == "42P01"


async def test_show_create_cluster_recreates_the_cluster(tables: Any) -> None:
    """SHOW CREATE CLUSTER prints a statement that makes the same cluster again."""
    session = await tables.session()
    await tables.tag(
        session,
        "CREATE CLUSTER managed_c (SIZE '2', REPLICATION FACTOR 0, INTROSPECTION INTERVAL '250ms')",
    )
    await tables.tag(session, "CREATE CLUSTER listed_c REPLICAS ()")
    shown = {}
    for name in ("managed_c", "listed_c"):
        [(got_name, create_sql)] = await tables.rows(session, f"SHOW CREATE CLUSTER {name}")
        assert got_name == name
        shown[name] = create_sql
    assert shown["managed_c"] == (
        'CREATE CLUSTER "managed_c" (INTROSPECTION DEBUGGING = false, INTROSPECTION INTERVAL = '
        "'250ms', MANAGED = true, REPLICATION FACTOR = 0, SIZE = '2')"
    )
    assert shown["listed_c"] == 'CREATE CLUSTER "listed_c" REPLICAS ()'
    for name, create_sql in shown.items():
        await tables.tag(session, f"DROP CLUSTER {name}")
        await tables.tag(session, create_sql)
        assert await tables.rows(session, f"SHOW CREATE CLUSTER {name}") == [(name, create_sql)]
    assert (await tables.error(session, "SHOW CREATE CLUSTER nope")).code == "42704"


async def test_statement_timeout_cancels_with_57014_and_zero_means_none(tables: Any) -> None:
    """The only time limit a user meets is the one they set, with PostgreSQL's code and words."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE slow (a int)")
    await tables.tag(session, "INSERT INTO slow SELECT * FROM generate_series(1, 20000)")
    await tables.tag(session, "SET statement_timeout = '1ms'")
    error = await tables.error(session, "SELECT count(*), sum(a) FROM slow WHERE a % 7 = 1")
    assert (error.code, error.message) == ("57014", "canceling statement due to statement timeout")
    bad = await tables.error(session, "SET statement_timeout = 'soon'")
    assert bad.code == "22023"
    await tables.tag(session, "SET statement_timeout = 0")
    assert await tables.rows(session, "SELECT count(*) FROM slow WHERE a % 7 = 1") == [(2858,)]
    assert await tables.rows(session, "SHOW statement_timeout") == [("0",)]


async def test_recursive_views_follow_their_tables(tables: Any) -> None:
    """A WITH MUTUALLY RECURSIVE view, indexed, is the fixpoint after every write."""
    session = await tables.session()
    await tables.tag(session, "CREATE TABLE edges (src int, dst int)")
    await tables.tag(
        session,
        "CREATE VIEW reach AS WITH MUTUALLY RECURSIVE r (src int, dst int) AS ("
        "SELECT src, dst FROM edges UNION "
        "SELECT r.src, edges.dst FROM r JOIN edges ON r.dst = edges.src) SELECT * FROM r",
    )
    await tables.tag(session, "CREATE DEFAULT INDEX ON reach")

    def closure(edges: set[tuple[int, int]]) -> list[tuple[int, int]]:
        reached = set(edges)
        while True:
            more = reached | {(a, d) for a, b in reached for c, d in edges if b == c}
            if more == reached:
                return sorted(reached)
            reached = more

    edges: set[tuple[int, int]] = set()
    steps = [
        ("INSERT INTO edges VALUES (1, 2), (2, 3), (3, 4)", {(1, 2), (2, 3), (3, 4)}, set()),
        ("INSERT INTO edges VALUES (4, 1)", {(4, 1)}, set()),
        ("DELETE FROM edges WHERE src = 2", set(), {(2, 3)}),
    ]
    for statement, added, removed in steps:
        await tables.tag(session, statement)
        edges = (edges | added) - removed
        got = await tables.rows(session, "SELECT src, dst FROM reach ORDER BY src, dst")
        assert got == closure(edges), statement
    one_shot = await tables.rows(
        session,
        "WITH MUTUALLY RECURSIVE (RETURN AT RECURSION LIMIT 2) r (src int, dst int) AS ("
        "SELECT src, dst FROM edges UNION "
        "SELECT r.src, edges.dst FROM r JOIN edges ON r.dst = edges.src) SELECT count(*) FROM r",
    )
    two_hops = {(a, d) for a, b in edges for c, d in edges if b == c}
    assert one_shot == [(len(edges | two_hops),)]
