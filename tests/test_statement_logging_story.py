"""Issue 6's story (statement logging), every service a real process (``loupe up``).

An administrator turns logging up with ``ALTER SYSTEM`` (a non-superuser may
not); only superusers and members of ``mz_monitor`` read the log; at rate 1
every statement of a session is logged with how it ended (success, error,
canceled by ``Cancel``); a session at rate 0 logs nothing; a fixed seed gives
the same sample twice; a coordinator killed while a statement runs marks it
``aborted`` when it comes back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from loupe.cli.probe import query_once
from loupe.client import SqlClient
from loupe.common.errors import LoupeError
from loupe.testing.system import LoupeUp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

HISTORY = """
SELECT t.sql, e.finished_status, e.execution_strategy, e.rows_returned, e.sample_rate,
       e.error_message, p.statement_type
FROM mz_internal.mz_statement_execution_history AS e
JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id
JOIN mz_internal.mz_sql_text AS t ON t.sql_hash = p.sql_hash
WHERE p.session_id = '{session}'
"""


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    loupe = LoupeUp(tmp_path_factory.mktemp("statement-logging") / "data")
    loupe.start()
    loupe.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1")
    loupe.sql("ALTER SYSTEM SET statement_logging_default_sample_rate = 1")
    yield loupe
    loupe.stop()


def client(system: LoupeUp, **kwargs: Any) -> SqlClient:
    return SqlClient("127.0.0.1", system.sql_port, **kwargs)


def history(system: LoupeUp, session: str, last: str, timeout: float = 60.0) -> dict:
    """The logged executions of ``session`` by SQL text, once ``last`` has finished.

    Records reach storage in the order they were published, so every
    execution before ``last`` is there by then too. A read that times out
    on a loaded machine is tried again.
    """
    deadline = time.monotonic() + timeout
    logged: dict = {}
    while True:
        rows = _answers(system, HISTORY.format(session=session))
        logged = logged if rows is None else {row[0]: row[1:] for row in rows}
        if logged.get(last, (None,))[0] is not None:
            return logged
        if time.monotonic() > deadline:
            raise AssertionError(f"{last!r} not logged as finished: {logged}")
        time.sleep(0.5)


def test_alter_system_is_for_superusers_and_checks_values(system):
    with pytest.raises(LoupeError) as refused:
        query_once(
            "127.0.0.1",
            system.sql_port,
            "ALTER SYSTEM SET statement_logging_max_sample_rate = 0.5",
            user="alice",
        )
    assert refused.value.code == "42501"
    with pytest.raises(LoupeError) as out_of_range:
        system.sql("ALTER SYSTEM SET statement_logging_max_sample_rate = 1.5")
    assert out_of_range.value.code == "22023"
    assert "from 0 to 1" in out_of_range.value.message
    with pytest.raises(LoupeError) as unknown:
        system.sql("ALTER SYSTEM SET no_such_variable = 1")
    assert unknown.value.code == "42704"
    # Stored in the catalog: every new session sees it, and RESET restores the default.
    system.sql("ALTER SYSTEM SET statement_logging_retention = '7d'")
    assert system.sql("SHOW statement_logging_retention") == [("604800s",)]
    system.sql("ALTER SYSTEM RESET statement_logging_retention")
    assert system.sql("SHOW statement_logging_retention") == [("2592000s",)]
    # The session rate starts at the system default (set to 1 by the fixture).
    assert system.sql("SHOW statement_logging_sample_rate") == [("1.0",)]


def test_rate_one_logs_every_statement_with_how_it_ended(system):
    with client(system, application_name="story-a") as session:
        session.execute("CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2)")
        assert session.query("SELECT 41 + 1") == [(42,)]
        assert sorted(session.query("SELECT a FROM t")) == [(1,), (2,)]
        with pytest.raises(LoupeError):
            session.execute("SELECT * FROM no_such_table")
        canceled = _subscribe_and_cancel(session)
        session.execute("SELECT 'last'")
        session_id = session.session_id
        logged = history(system, session_id, last="SELECT 'last'")
        rows = system.sql(
            "SELECT initial_application_name, authenticated_user"
            f" FROM mz_internal.mz_session_history WHERE session_id = '{session_id}'"
        )
    assert rows == [("story-a", "materialize")]
    assert logged["SELECT 41 + 1"][:4] == ("success", "constant", 1, 1.0)
    assert logged["SELECT a FROM t"][:3] == ("success", "standard", 2)
    failed = logged["SELECT * FROM no_such_table"]
    assert failed[0] == "error"
    assert "no_such_table" in failed[4]
    assert logged[canceled][0] == "canceled"
    assert logged["INSERT INTO t VALUES (1), (2)"][0] == "success"
    assert logged["CREATE TABLE t (a int)"][5] == "create_table"
    where = f"WHERE session_id = '{session_id}' AND statement_type = 'select'"
    activity = system.sql(
        f"SELECT sql, finished_status FROM mz_internal.mz_recent_activity_log {where}"
    )
    assert ("SELECT 41 + 1", "success") in activity
    assert len(activity) == 4  # the SELECTs: constant, from t, the error, 'last'
    redacted = system.sql(
        f"SELECT redacted_sql FROM mz_internal.mz_recent_activity_log_redacted {where}"
    )
    assert ("SELECT '<REDACTED>' + '<REDACTED>'",) in redacted
    with pytest.raises(LoupeError):
        system.sql("SELECT error_message FROM mz_internal.mz_recent_activity_log_redacted")


def _subscribe_and_cancel(session: SqlClient) -> str:
    """Run a SUBSCRIBE and cancel it with the Cancel RPC; its SQL text."""
    sql = "SUBSCRIBE t"
    errors: list[LoupeError] = []

    def run() -> None:
        try:
            for _ in session.stream(sql):
                pass
        except LoupeError as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not session.cancel():
        assert time.monotonic() < deadline, "the SUBSCRIBE never started"
        time.sleep(0.2)
    thread.join(30)
    assert [error.code for error in errors] == ["57014"]
    return sql


def test_only_monitors_read_the_history(system):
    """alice may not read the statement log until she is granted mz_monitor; a member of
    mz_monitor_redacted reads only the redacted view."""
    system.sql("CREATE ROLE alice LOGIN PASSWORD 'hunter2'")
    system.sql("CREATE ROLE bob LOGIN")
    system.sql("GRANT mz_monitor_redacted TO bob")
    full = "SELECT count(*) FROM mz_internal.mz_recent_activity_log"
    redacted = "SELECT count(*) FROM mz_internal.mz_recent_activity_log_redacted"
    with client(system, user="alice") as alice, client(system, user="bob") as bob:
        for session, sql in ((alice, full), (alice, redacted), (bob, full)):
            with pytest.raises(LoupeError) as refused:
                session.query(sql)
            assert refused.value.code == "42501", sql
        assert bob.query(redacted)[0][0] >= 0
        system.sql("GRANT mz_monitor TO alice")
        assert alice.query(full)[0][0] >= 1
    # The password never reaches the log: the statement is logged redacted.
    texts = "SELECT sql FROM mz_internal.mz_sql_text WHERE sql LIKE 'CREATE ROLE alice%'"
    _eventually(lambda: _answers(system, texts), "CREATE ROLE alice to be logged")
    assert _answers(system, texts) == [("CREATE ROLE alice LOGIN PASSWORD '<REDACTED>'",)]


def test_rate_zero_logs_nothing(system):
    with client(system, options={"statement_logging_sample_rate": "0"}) as session:
        session.execute("SELECT 'not logged'")
        session.execute("SET statement_logging_sample_rate = 1")
        session.execute("SELECT 'logged'")
        logged = history(system, session.session_id, last="SELECT 'logged'")
    assert set(logged) == {"SELECT 'logged'"}


def test_a_prepared_statement_is_logged_once_with_each_executions_params(system):
    """PREPARE/EXECUTE and a request's parameters: one named row, the values of each run."""
    with client(system, application_name="story-params") as session:
        session.execute("PREPARE find AS SELECT $1::int + 1, $2")
        session.execute("EXECUTE find (1, NULL)")
        assert session.query("EXECUTE find (41, 'x')") == [(42, "x")]
        assert session.query("SELECT $1 || '!'", params=["hi"]) == [("hi!",)]
        session.execute("SELECT 'params done'")
        session_id = session.session_id
        history(system, session_id, last="SELECT 'params done'")
    rows = system.sql(
        "SELECT p.name, t.sql, e.params FROM mz_internal.mz_statement_execution_history AS e"
        " JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id"
        " JOIN mz_internal.mz_sql_text AS t ON t.sql_hash = p.sql_hash"
        f" WHERE p.session_id = '{session_id}' AND p.statement_type = 'select'"
    )
    assert sorted(rows) == [
        ("", "SELECT $1 || '!'", "{hi}"),
        ("", "SELECT 'params done'", "{}"),
        ("find", "SELECT $1::int + 1, $2", "{1,NULL}"),
        ("find", "SELECT $1::int + 1, $2", "{41,x}"),
    ]
    named = system.sql(
        "SELECT count(*) FROM mz_internal.mz_prepared_statement_history"
        f" WHERE session_id = '{session_id}' AND name = 'find'"
    )
    assert named == [(1,)]


def test_a_fixed_seed_gives_a_fixed_sample(system):
    samples = []
    for run in range(2):
        with client(system, options={"statement_logging_sample_rate": "0.5"}) as session:
            # Turning the switch on restarts the generator from its seed.
            session.execute("ALTER SYSTEM SET statement_logging_use_reproducible_rng = off")
            session.execute("ALTER SYSTEM SET statement_logging_use_reproducible_rng = on")
            # One Execute, sixteen statements, each sampled on its own.
            session.execute("; ".join(f"SELECT {i}, 'run {run}'" for i in range(16)))
            session.execute("SET statement_logging_sample_rate = 1")
            session.execute("SELECT 'end of run'")
            logged = history(system, session.session_id, last="SELECT 'end of run'")
        samples.append([i for i in range(16) if f"SELECT {i}, 'run {run}'" in logged])
    system.sql("ALTER SYSTEM RESET statement_logging_use_reproducible_rng")
    assert samples[0] == samples[1]
    assert 0 < len(samples[0]) < 16


def test_a_restarted_coordinator_marks_open_executions_aborted(system):
    sql = "SUBSCRIBE (SELECT a FROM t WHERE a > 0)"
    session = client(system)
    session.open()
    thread = threading.Thread(target=_drain, args=(session, sql), daemon=True)
    thread.start()
    query = (
        "SELECT e.finished_status FROM mz_internal.mz_statement_execution_history AS e"
        " JOIN mz_internal.mz_prepared_statement_history AS p ON p.id = e.prepared_statement_id"
        f" WHERE p.session_id = '{session.session_id}'"
    )
    _eventually(
        lambda: _answers(system, query) == [(None,)], "the SUBSCRIBE to be logged as running"
    )
    (pid,) = [pid for pid, cmd in system.processes() if " coordinator " in cmd]
    # `loupe up` restarts the killed coordinator itself.
    os.kill(pid, signal.SIGKILL)
    try:
        _eventually(
            lambda: _answers(system, query) == [("aborted",)], "the execution to be aborted"
        )
    finally:
        session.close()


def _drain(session: SqlClient, sql: str) -> None:
    try:
        for _ in session.stream(sql):
            pass
    except Exception:
        pass  # the coordinator was killed under it


def _answers(system: LoupeUp, query: str) -> Any:
    """The rows of ``query``; None if it failed (the coordinator restarting, a read timing out)."""
    try:
        return system.sql(query)
    except Exception:
        return None


def _eventually(check: Any, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
