"""The console's SQL through a real coordinator: queries as the user, SUBSCRIBE, pooling."""

from __future__ import annotations

import asyncio

import pytest

from loupe.console.sql import LoginRefused, Query, SqlError, SqlSession
from loupe.testing.system import LoupeUp

from .browser import PASSWORD

pytestmark = pytest.mark.timeout(300)


def session(system: LoupeUp, password: str | None = PASSWORD) -> SqlSession:
    return SqlSession("127.0.0.1", system.pgwire_port, "materialize", password, idle_close=0.5)


async def test_queries_run_as_the_user_and_errors_keep_their_sqlstate(
    console_system: LoupeUp,
) -> None:
    sql = session(console_system)
    result = await sql.query(Query("SELECT current_user, %s::int + 1 AS n", (41,)))
    assert result.columns == ["current_user", "n"]
    assert result.rows == [("materialize", 42)]
    # The console's reads see every acknowledged write (its transaction_isolation).
    shown = await sql.query(Query("SHOW transaction_isolation"))
    assert shown.rows == [("strict serializable",)]
    with pytest.raises(SqlError) as failed:
        await sql.query(Query("SELECT * FROM no_such_relation"))
    assert failed.value.sqlstate == "42P01"
    assert failed.value.query == Query("SELECT * FROM no_such_relation")
    # Unused connections close: a console nobody looks at holds none.
    assert sql.open_connections >= 1
    await asyncio.sleep(0.6)
    assert await sql.close_idle() >= 1
    assert sql.open_connections == 0
    with pytest.raises(LoginRefused):
        await session(console_system, "wrong").check()


async def test_subscribe_yields_the_snapshot_then_changes(console_system: LoupeUp) -> None:
    console_system.sql("CREATE TABLE IF NOT EXISTS console_sub (a int)")
    console_system.sql("DELETE FROM console_sub")
    console_system.sql("INSERT INTO console_sub VALUES (1)")
    sql = session(console_system)
    changes = sql.subscribe(Query("SELECT a FROM console_sub WHERE a > %s", (0,)), poll=0.2)
    first = await asyncio.wait_for(anext(changes), 30)
    assert [(c.diff, c.row) for c in first] == [(1, (1,))]
    console_system.sql("INSERT INTO console_sub VALUES (2), (-1)")
    second = await asyncio.wait_for(anext(changes), 30)
    assert [(c.diff, c.row) for c in second] == [(1, (2,))]
    assert second[0].timestamp > first[0].timestamp
    await changes.aclose()
