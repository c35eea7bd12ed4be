"""Authentication and who reads the statement log, against the real catalog service.

Password mode: the bootstrap superuser logs in with the configured superuser
password, creates roles with passwords, and grants ``mz_monitor`` /
``mz_monitor_redacted``; everyone else is refused the statement log.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from loupe.catalog.bootstrap import bootstrap_state
from loupe.catalog.transaction import Transaction
from loupe.coordinator import access
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.tests.conftest import SUPERUSER_PASSWORD, _open


async def _refused(harness: Any, user: str, password: str) -> tuple[Any, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _open(harness, user, password)
    trailers = dict(caught.value.trailing_metadata() or ())
    return caught.value.code(), trailers.get("loupe-sqlstate", "")


async def test_password_mode_authenticates_every_session(secured):
    assert await _refused(secured, "materialize", "wrong") == (
        grpc.StatusCode.UNAUTHENTICATED,
        "28P01",
    )
    admin = await _open(secured, "materialize", SUPERUSER_PASSWORD)
    assert await secured.tag(admin, "CREATE ROLE alice WITH LOGIN PASSWORD 'alice-pw'") == (
        "CREATE ROLE"
    )
    assert await secured.tag(admin, "CREATE ROLE auditors") == "CREATE ROLE"  # NOLOGIN
    await _open(secured, "alice", "alice-pw")
    assert (await _refused(secured, "alice", "nope"))[1] == "28P01"
    assert (await _refused(secured, "nobody", "x"))[1] == "28P01"  # no telling who exists
    assert (await _refused(secured, "auditors", ""))[1] == "28000"
    assert (await _refused(secured, "mz_monitor", ""))[1] == "28000"
    # A changed password takes effect at the next login; PASSWORD NULL locks the role out.
    await secured.tag(admin, "ALTER ROLE alice PASSWORD 'new-pw'")
    assert (await _refused(secured, "alice", "alice-pw"))[1] == "28P01"
    await _open(secured, "alice", "new-pw")
    # A role changes its own password, nothing else and no one else's.
    alice = await _open(secured, "alice", "new-pw")
    assert await secured.tag(alice, "ALTER ROLE alice PASSWORD 'her-own'") == "ALTER ROLE"
    for sql in ("ALTER ROLE alice SUPERUSER PASSWORD 'x'", "ALTER ROLE auditors PASSWORD 'x'"):
        assert (await secured.error(alice, sql)).code == "42501", sql
    await _open(secured, "alice", "her-own")
    await secured.tag(admin, "ALTER ROLE alice PASSWORD NULL")
    assert (await _refused(secured, "alice", "her-own"))[1] == "28P01"
    roles = await secured.rows(
        admin, "SELECT name, inherit FROM mz_catalog.mz_roles WHERE name IN ('alice', 'auditors')"
    )
    assert sorted(roles) == [("alice", True), ("auditors", True)]
    shown = await secured.rows(admin, "SHOW ROLES")
    assert shown == [("alice",), ("auditors",), ("materialize",)]


async def test_role_management_is_for_superusers(secured):
    admin = await _open(secured, "materialize", SUPERUSER_PASSWORD)
    await secured.tag(admin, "CREATE USER bob PASSWORD 'bob-pw'")  # CREATE USER: LOGIN
    bob = await _open(secured, "bob", "bob-pw")
    for sql in ("CREATE ROLE carol", "GRANT mz_monitor TO bob", "DROP ROLE bob"):
        error = await secured.error(bob, sql)
        assert error.code == "42501", sql
    # Made a superuser in the catalog, bob manages roles from his next session on.
    await secured.tag(admin, "ALTER ROLE bob SUPERUSER")
    bob = await _open(secured, "bob", "bob-pw")
    assert await secured.tag(bob, "CREATE ROLE carol") == "CREATE ROLE"
    assert (await secured.error(bob, "CREATE ROLE carol")).code == "42710"
    assert (await secured.error(bob, "GRANT carol TO carol")).code == "0LP01"
    assert (await secured.error(bob, "DROP ROLE mz_monitor")).code == "42501"
    assert (await secured.error(bob, "DROP ROLE bob")).code == "55006"
    assert await secured.tag(bob, "DROP ROLE carol") == "DROP ROLE"
    events = await secured.rows(
        admin,
        "SELECT id, event_type, details FROM mz_catalog.mz_audit_events WHERE object_type = 'role'",
    )
    # jsonb reaches a client as its JSON value (as psycopg gives it), not as text.
    named = [(kind, details["name"]) for _, kind, details in sorted(events)]
    assert [(kind, name) for kind, name in named if name in ("bob", "carol")] == [
        ("create", "bob"),
        ("alter", "bob"),
        ("create", "carol"),
        ("drop", "carol"),
    ]


READ_FULL = "SELECT count(*) FROM mz_internal.mz_statement_execution_history"
READ_REDACTED = "SELECT count(*) FROM mz_internal.mz_recent_activity_log_redacted"


async def test_only_monitors_read_the_statement_log(secured):
    admin = await _open(secured, "materialize", SUPERUSER_PASSWORD)
    for sql in (
        "CREATE ROLE watcher LOGIN PASSWORD 'w'",
        "CREATE ROLE redactor LOGIN PASSWORD 'r'",
        "CREATE ROLE auditors",
        "GRANT mz_monitor TO auditors",
        "GRANT auditors TO watcher",  # through a role that inherits
        "GRANT mz_monitor_redacted TO redactor",
    ):
        await secured.tag(admin, sql)
    assert (await secured.rows(admin, READ_FULL))[0][0] >= 0
    members = await secured.rows(
        admin,
        "SELECT r.name, m.name, g.name FROM mz_catalog.mz_role_members AS rm"
        " JOIN mz_catalog.mz_roles AS r ON r.id = rm.role_id"
        " JOIN mz_catalog.mz_roles AS m ON m.id = rm.member"
        " JOIN mz_catalog.mz_roles AS g ON g.id = rm.grantor",
    )
    assert sorted(members) == [
        ("auditors", "watcher", "materialize"),
        ("mz_monitor", "auditors", "materialize"),
        ("mz_monitor_redacted", "redactor", "materialize"),
    ]
    watcher = await _open(secured, "watcher", "w")
    redactor = await _open(secured, "redactor", "r")
    assert await secured.rows(watcher, READ_FULL) == await secured.rows(admin, READ_FULL)
    await secured.rows(watcher, READ_REDACTED)
    await secured.rows(redactor, READ_REDACTED)
    denied = await secured.error(redactor, READ_FULL)
    assert denied.code == "42501"
    assert "mz_statement_execution_history" in denied.message
    assert "mz_monitor" in denied.detail
    # Found through the search path too, and in views and subscribes.
    await secured.tag(redactor, "SET search_path = mz_internal, public")
    for sql in (
        "SELECT sql FROM mz_sql_text",
        "CREATE VIEW leak AS SELECT * FROM mz_internal.mz_recent_activity_log",
        "SUBSCRIBE mz_internal.mz_session_history",
        "PREPARE p AS SELECT sql FROM mz_internal.mz_sql_text",
    ):
        assert (await secured.error(redactor, sql)).code == "42501", sql
    # A statement prepared while allowed is checked again when it runs.
    await secured.tag(watcher, f"PREPARE later AS {READ_FULL}")
    await secured.tag(admin, "REVOKE mz_monitor FROM auditors")
    assert (await secured.error(watcher, READ_FULL)).code == "42501"
    assert (await secured.error(watcher, "EXECUTE later")).code == "42501"


def test_membership_follows_only_roles_that_inherit():
    tx = Transaction(bootstrap_state(1))
    tx.create_role("alice")
    tx.create_role("group", inherit=False)
    tx.grant_role("mz_monitor", "group", "materialize")
    tx.grant_role("group", "alice", "materialize")
    roles = {r.name: r.to_proto() for r in tx.table("role").values()}
    assert access.member_of(roles, "alice", "group")
    assert not access.member_of(roles, "alice", "mz_monitor")  # group does not inherit
    # NOINHERIT: not even group itself uses mz_monitor's rights (PostgreSQL's rule).
    assert not access.member_of(roles, "group", "mz_monitor")
    tx.create_role("direct")
    tx.grant_role("mz_monitor", "direct", "materialize")
    roles = {r.name: r.to_proto() for r in tx.table("role").values()}
    assert access.member_of(roles, "direct", "mz_monitor")
    statement = parse_one("SELECT * FROM mz_internal.mz_sql_text")
    with pytest.raises(Exception, match="permission denied"):
        access.check_statement_log_access(
            statement, user="alice", superuser=False, search_path="public", roles=roles
        )
    access.check_statement_log_access(
        statement, user="alice", superuser=True, search_path="public", roles=roles
    )
