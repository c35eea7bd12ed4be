"""Issue 5's story, end to end, every service a real process (``loupe up``).

A table, a view with an index, a materialized view; reads through the fast
path (the index) and the slow path (a transient dataflow); a SUBSCRIBE in a
second ``loupe sql`` that prints a later insert as it happens; DROP refused
while something depends on the table; a division by zero inside a dataflow
is the query's error.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from loupe.common.errors import LoupeError
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROWS = [(1, "x"), (2, "y"), (3, "x"), (4, "y")]


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("compute-story") / "data")
    loupe.start()
    yield loupe
    loupe.stop()


def sql_error(system: LoupeUp, statement: str) -> LoupeError:
    with pytest.raises(LoupeError) as caught:
        system.sql(statement)
    return caught.value


async def test_views_indexes_and_materialized_views(system):
    values = ", ".join(f"({a}, '{b}')" for a, b in ROWS)
    system.sql(f"CREATE TABLE t (a int, b text); INSERT INTO t VALUES {values}")
    system.sql("CREATE VIEW v AS SELECT a, b FROM t WHERE a > 1")
    created = system.cli("-c", "CREATE DEFAULT INDEX ON v")
    assert created.stdout == "CREATE INDEX\n"
    assert "materialize.public.v_primary_idx" in created.stderr  # hydration progress
    system.sql("CREATE MATERIALIZED VIEW mv AS SELECT b, sum(a) AS s FROM t GROUP BY b")

    # Fast path: a filter over the indexed view.
    assert system.sql("SELECT a FROM v WHERE b = 'y' ORDER BY a") == [(2,), (4,)]
    # Slow path: an aggregate over it, in a transient dataflow.
    assert system.sql("SELECT b, count(*) FROM v GROUP BY b ORDER BY b") == [("x", 1), ("y", 2)]
    # The materialized view, from its storage collection.
    assert system.sql("SELECT b, s FROM mv ORDER BY b") == [("x", 4), ("y", 6)]

    system.sql("INSERT INTO t VALUES (5, 'x')")
    assert system.sql("SELECT a FROM v WHERE b = 'x' ORDER BY a") == [(3,), (5,)]
    assert system.sql("SELECT b, s FROM mv ORDER BY b") == [("x", 9), ("y", 6)]


def test_subscribe_prints_a_later_insert(system):
    """``loupe sql -c "SUBSCRIBE v"`` prints the snapshot, then an insert made elsewhere."""
    ((count,),) = system.sql("SELECT count(*) FROM v")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loupe.cli.main",
            "sql",
            "--port",
            str(system.sql_port),
            "-c",
            "SUBSCRIBE v",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout], daemon=True
    ).start()
    try:
        assert lines.get(timeout=60) == "mz_timestamp\tmz_diff\ta\tb\n"
        snapshot = [lines.get(timeout=10).rstrip("\n").split("\t") for _ in range(count)]
        assert {diff for _, diff, _, _ in snapshot} == {"1"}
        # The subscribe is running: a later insert arrives as its own change.
        system.sql("INSERT INTO t VALUES (42, 'sub')")
        timestamp, diff, a, b = lines.get(timeout=60).rstrip("\n").split("\t")
        assert (diff, a, b) == ("1", "42", "sub")
        assert int(timestamp) > int(snapshot[0][0])
    finally:
        process.terminate()
        process.wait(10)


async def test_string_agg_and_regexp_split_are_maintained_across_processes(system):
    """Aggregate ORDER BY keys and table functions travel the plan protocol to the replicas."""
    system.sql("CREATE TABLE words (g int, s text, at timestamp)")
    system.sql(
        "INSERT INTO words VALUES (1, 'b,a', '2024-03-05 04:07:09'), "
        "(1, 'c', '2024-03-06 00:00:00'), (2, 'x', '2024-01-01 12:00:00')"
    )
    system.sql(
        "CREATE MATERIALIZED VIEW joined AS SELECT g, string_agg(s, ';' ORDER BY at DESC) AS s, "
        "string_agg(to_char(at, 'FMDD Mon'), ',' ORDER BY at) AS days FROM words GROUP BY g"
    )
    system.sql("CREATE VIEW pieces AS SELECT g, regexp_split_to_table(s, ',') AS piece FROM words")
    system.sql("CREATE DEFAULT INDEX ON pieces")
    assert system.sql("SELECT g, s, days FROM joined ORDER BY g") == [
        (1, "c;b,a", "5 Mar,6 Mar"),
        (2, "x", "1 Jan"),
    ]
    assert system.sql("SELECT g, piece FROM pieces ORDER BY g, piece") == [
        (1, "a"),
        (1, "b"),
        (1, "c"),
        (2, "x"),
    ]
    system.sql("DELETE FROM words WHERE s = 'c'")
    assert system.sql("SELECT g, s FROM joined ORDER BY g") == [(1, "b,a"), (2, "x")]
    assert system.sql("SELECT piece FROM pieces WHERE g = 1 ORDER BY piece") == [("a",), ("b",)]
    system.sql("DROP TABLE words CASCADE")


async def test_drop_with_dependents_needs_cascade(system):
    error = sql_error(system, "DROP TABLE t")
    assert error.code == "2BP01"
    assert "materialize.public.v" in error.message


async def test_division_by_zero_in_a_dataflow_is_a_query_error(system):
    system.sql("CREATE VIEW z AS SELECT a / (a - a) AS q FROM t")
    error = sql_error(system, "SELECT * FROM z")
    assert error.code == "22012"
    system.sql("DROP TABLE t CASCADE")
    assert system.sql("SELECT name FROM mz_catalog.mz_objects WHERE id LIKE 'u%'") == []


def test_a_restarted_controller_gets_the_dataflows_again(system):
    """kill -9 of the controller (its replicas go with it): once `loupe up` has started a
    new one, the coordinator sends the index's dataflow again and the fast path answers."""
    system.sql("CREATE TABLE r (a int); INSERT INTO r VALUES (1), (2)")
    system.sql("CREATE DEFAULT INDEX ON r")
    assert system.sql("SELECT a FROM r WHERE a = 1") == [(1,)]
    (pid,) = [pid for pid, cmd in system.processes() if " controller " in cmd]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 180
    while True:
        try:
            if system.sql("SELECT a FROM r WHERE a = 2", timeout=10) == [(2,)]:
                break
        except Exception:  # a LoupeError or a timeout: the controller is still starting
            pass
        assert time.monotonic() < deadline, "the index never answered again"
        time.sleep(1)
    assert [p for p, cmd in system.processes() if " controller " in cmd] != [pid]
    system.sql("INSERT INTO r VALUES (3)")
    assert system.sql("SELECT a FROM r WHERE a = 3") == [(3,)]
    indexes = system.sql("SELECT count(*) FROM mz_catalog.mz_indexes WHERE name = 'r_primary_idx'")
    assert indexes == [(1,)]
