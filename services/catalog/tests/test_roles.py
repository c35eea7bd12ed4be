"""Roles in the catalog: CREATE/ALTER/DROP ROLE and memberships (GRANT/REVOKE)."""

from __future__ import annotations

import pytest

from loupe.catalog.bootstrap import bootstrap_state
from loupe.catalog.migrations import upgrade_2_to_3
from loupe.catalog.objects import Cluster
from loupe.catalog.transaction import Transaction
from loupe.common.errors import LoupeError


def _tx() -> Transaction:
    return Transaction(bootstrap_state(1), user="materialize")


def test_a_new_catalog_has_the_monitoring_roles_without_login():
    roles = {r.name: r for r in _tx().table("role").values()}
    assert (roles["mz_monitor"].id, roles["mz_monitor"].login) == ("s2", False)
    assert (roles["mz_monitor_redacted"].id, roles["mz_monitor_redacted"].login) == ("s3", False)
    assert roles["materialize"].superuser
    assert roles["materialize"].login
    assert roles["mz_system"].to_proto().superuser


def test_roles_are_created_altered_and_audited():
    tx = _tx()
    alice = tx.create_role("alice", login=True, password_hash="scrypt$x")
    assert alice.id.startswith("u")
    assert not alice.superuser
    proto = alice.to_proto()
    assert (proto.login, proto.password_hash) == (True, "scrypt$x")
    altered = tx.alter_role("alice", superuser=True, password_hash="")
    assert (altered.superuser, altered.login, altered.password_hash) == (True, True, "")
    events = [(kind, obj, details["name"]) for kind, obj, details in tx._audit]
    assert events == [("create", "role", "alice"), ("alter", "role", "alice")]
    assert tx._audit[-1][2]["password_hash"] is False  # never the hash itself


@pytest.mark.parametrize(
    ("name", "code"),
    [("materialize", "42710"), ("PUBLIC", "42710"), ("mz_mine", "42939"), ("pg_x", "42939")],
)
def test_taken_and_reserved_role_names_are_refused(name, code):
    with pytest.raises(LoupeError) as caught:
        _tx().create_role(name)
    assert caught.value.code == code


def test_memberships_are_granted_revoked_and_never_circular():
    tx = _tx()
    tx.create_role("alice")
    tx.create_role("auditors", login=False)
    tx.grant_role("mz_monitor", "auditors", "materialize")
    member = tx.grant_role("auditors", "alice", "materialize")
    assert dict(member.membership) == {tx.role_by_name("auditors").id: "u1"}
    assert tx.grant_role("auditors", "alice", "materialize") == member  # idempotent
    for role, into in (("alice", "auditors"), ("alice", "alice"), ("alice", "mz_monitor")):
        with pytest.raises(LoupeError) as caught:
            tx.grant_role(role, into, "materialize")
        assert caught.value.code == "0LP01"
    assert dict(tx.revoke_role("auditors", "alice").membership) == {}
    with pytest.raises(LoupeError) as unknown:
        tx.grant_role("nobody", "alice", "materialize")
    assert unknown.value.code == "42704"


def test_dropping_a_role_removes_its_memberships_but_not_while_it_owns_objects():
    tx = _tx()
    auditors = tx.create_role("auditors", login=False)
    tx.create_role("alice")
    tx.grant_role("auditors", "alice", "materialize")
    tx.drop_role("auditors")
    assert dict(tx.role_by_name("alice").membership) == {}
    owner = tx.create_role("owner")
    tx.create_cluster(
        Cluster(
            id="",
            name="owned",
            owner_id=owner.id,
            managed=True,
            size="1",
            replication_factor=0,
            introspection_interval_ns=0,
            introspection_debugging=False,
        ),
        [],
    )
    with pytest.raises(LoupeError) as caught:
        tx.drop_role("owner")
    assert (caught.value.code, caught.value.detail) == ("2BP01", "owner of cluster owned")
    assert tx.drop_role("nobody", if_exists=True) is None
    for system in ("mz_monitor", "mz_system"):
        with pytest.raises(LoupeError, match="system role"):
            tx.drop_role(system)
    assert auditors.id not in {r.id for r in tx.table("role").values()}


def test_version_2_roles_gain_login_and_an_empty_password():
    rows = [
        ("role", '{"id":"s2"}', '{"inherit":true,"membership":{},"name":"mz_monitor","superuser":false}'),
        ("role", '{"id":"u2"}', '{"inherit":true,"membership":{},"name":"bob","superuser":false}'),
        ("cluster", '{"id":"u1"}', "{}"),
    ]  # fmt: skip
    writes = {key: value for _, key, value in upgrade_2_to_3(rows)}
    assert set(writes) == {'{"id":"s2"}', '{"id":"u2"}'}
    assert '"login":false' in writes['{"id":"s2"}']
    assert '"login":true' in writes['{"id":"u2"}']
    assert '"password_hash":""' in writes['{"id":"u2"}']
