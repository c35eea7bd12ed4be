"""How a PostgreSQL-wire client logs in (``login_plan``), and legacy password hashes becoming
SCRAM-SHA-256 verifiers on the next password login."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from typing import Any

import grpc
import psycopg
import pytest

from loupe.common import passwords
from loupe.common.errors import LoupeError
from loupe.coordinator import access
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.sql.parser import parse_one
from loupe.coordinator.sql.statements import CreateRole
from loupe.coordinator.tests.conftest import SUPERUSER_PASSWORD, _open
from loupe.pgwire import scram
from loupe.proto.catalog.v1 import catalog_pb2

SUPERUSERS = ("materialize", "mz_system")


def legacy_hash(password: str) -> str:
    """A password hash as Loupe stored them before SCRAM (``scrypt$n$r$p$salt$hash``)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    b64 = base64.b64encode
    return f"scrypt${2**14}$8$1${b64(salt).decode()}${b64(digest).decode()}"


def _roles(**password_hashes: str) -> dict[str, catalog_pb2.Role]:
    roles = {
        name: catalog_pb2.Role(id=name, name=name, login=True, inherit=True, password_hash=h)
        for name, h in password_hashes.items()
    }
    roles["materialize"] = catalog_pb2.Role(
        id="u1", name="materialize", superuser=True, login=True, inherit=True
    )
    roles["mz_monitor"] = catalog_pb2.Role(id="s2", name="mz_monitor", login=False)
    return roles


def _plan(roles: dict[str, catalog_pb2.Role], user: str, **settings: Any) -> access.LoginPlan:
    settings.setdefault("authenticator", "password")
    settings.setdefault("superuser_password", SUPERUSER_PASSWORD)
    return access.login_plan(roles, user, superusers=SUPERUSERS, **settings)


def test_trust_asks_nothing_but_nologin_roles_are_refused() -> None:
    roles = _roles(alice=passwords.hash_password("pw"))
    assert _plan(roles, "alice", authenticator="trust") == access.LoginPlan("trust")
    assert _plan(roles, "nobody", authenticator="trust") == access.LoginPlan("trust")
    for authenticator in ("trust", "password"):
        with pytest.raises(LoupeError) as refused:
            _plan(roles, "mz_monitor", authenticator=authenticator)
        assert refused.value.code == "28000"


def test_roles_with_verifiers_use_scram_and_legacy_hashes_use_cleartext() -> None:
    verifier = passwords.hash_password("alice-pw")
    roles = _roles(alice=verifier, old=legacy_hash("old-pw"), empty="")
    assert _plan(roles, "alice") == access.LoginPlan("scram", verifier)
    assert _plan(roles, "old") == access.LoginPlan("cleartext")
    # No password, or no such role: an exchange that fails at its end, alike.
    assert _plan(roles, "empty") == access.LoginPlan("scram", None)
    assert _plan(roles, "nobody") == access.LoginPlan("scram", None)


def test_a_configured_superuser_without_a_password_uses_the_superuser_password() -> None:
    """A verifier of superuser_password, made once and reused."""
    roles = _roles()
    plan = _plan(roles, "materialize")
    assert plan.method == "scram"
    assert plan.verifier is not None
    assert scram.verify_cleartext(SUPERUSER_PASSWORD, plan.verifier)
    assert _plan(roles, "materialize").verifier is plan.verifier
    # Without a superuser password it cannot log in with a password at all.
    assert _plan(roles, "materialize", superuser_password="") == access.LoginPlan("scram")


def test_new_password_hashes_are_scram_verifiers_and_legacy_ones_still_verify() -> None:
    stored = passwords.hash_password("pw")
    assert scram.is_verifier(stored)
    assert not passwords.is_legacy(stored)
    assert passwords.verify_password("pw", stored)
    assert not passwords.verify_password("wrong", stored)
    old = legacy_hash("pw")
    assert passwords.is_legacy(old)
    assert passwords.verify_password("pw", old)
    assert not passwords.verify_password("wrong", old)
    assert not passwords.verify_password("pw", "")


async def test_a_verifier_given_as_the_password_is_stored_as_it_is(postgres_url: str) -> None:
    """As PostgreSQL does (pg_dumpall's roles): the verifier PostgreSQL made for 'x' logs in
    with 'x'."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET password_encryption = 'scram-sha-256'")
        connection.execute("CREATE ROLE loupe_dumped PASSWORD 'x'")
        try:
            row = connection.execute(
                "SELECT rolpassword FROM pg_authid WHERE rolname = 'loupe_dumped'"
            ).fetchone()
        finally:
            connection.execute("DROP ROLE loupe_dumped")
    assert row is not None
    dumped = parse_one(f"CREATE ROLE dumped WITH LOGIN PASSWORD '{row[0]}'")
    assert isinstance(dumped, CreateRole)
    (op,) = await access.role_ops(dumped, grantor="materialize")
    assert op.create_role.password_hash == row[0]
    assert passwords.verify_password("x", op.create_role.password_hash)
    typed = parse_one("CREATE ROLE typed WITH LOGIN PASSWORD 'x'")
    assert isinstance(typed, CreateRole)
    (op,) = await access.role_ops(typed, grantor="materialize")
    assert op.create_role.password_hash != "x"
    assert passwords.verify_password("x", op.create_role.password_hash)


async def _stored_hash(harness: Any, user: str) -> str:
    coordinator = harness.service.coordinator
    state = await coordinator.context.refreshed_state()
    return state.role_objects[user].password_hash


async def _eventually_stored(harness: Any, user: str, check: Any) -> str:
    for _ in range(200):
        stored = await _stored_hash(harness, user)
        if check(stored):
            return stored
        await _tick()
    raise AssertionError(f"{user}'s stored hash never passed the check: {stored!r}")


async def _tick() -> None:
    await asyncio.sleep(0.05)


async def test_a_legacy_hash_becomes_a_verifier_on_the_next_password_login(
    secured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role created with an scrypt hash logs in, and from then on has a SCRAM verifier
    of the same password (its pgwire logins move from cleartext to SCRAM)."""
    admin = await _open(secured, "materialize", SUPERUSER_PASSWORD)
    with monkeypatch.context() as patched:  # what an older Loupe stored
        patched.setattr(access, "hash_password", legacy_hash)
        await secured.tag(admin, "CREATE ROLE alice WITH LOGIN PASSWORD 'alice-pw'")
        await secured.tag(admin, "CREATE ROLE bob WITH LOGIN PASSWORD 'bob-pw'")
    assert passwords.is_legacy(await _stored_hash(secured, "alice"))
    coordinator = secured.service.coordinator
    assert await coordinator.login_plan("alice") == access.LoginPlan("cleartext")

    # A wrong password changes nothing.
    with pytest.raises(grpc.aio.AioRpcError):
        await _open(secured, "alice", "wrong")
    await _open(secured, "alice", "alice-pw")
    stored = await _eventually_stored(secured, "alice", scram.is_verifier)
    assert scram.verify_cleartext("alice-pw", stored)
    assert await coordinator.login_plan("alice") == access.LoginPlan("scram", stored)
    await _open(secured, "alice", "alice-pw")  # the verifier logs in too
    assert passwords.is_legacy(await _stored_hash(secured, "bob"))  # only who logged in


async def test_a_failed_upgrade_is_logged_and_the_login_stands(
    secured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = await _open(secured, "materialize", SUPERUSER_PASSWORD)
    with monkeypatch.context() as patched:
        patched.setattr(access, "hash_password", legacy_hash)
        await secured.tag(admin, "CREATE ROLE carol WITH LOGIN PASSWORD 'carol-pw'")
    attempts: list[str] = []

    async def failing_commit(*args: Any, **kwargs: Any) -> Any:
        attempts.append(kwargs["user"])
        raise LoupeError("UNAVAILABLE", "the catalog is away")

    monkeypatch.setattr(ddl, "commit", failing_commit)
    assert await _open(secured, "carol", "carol-pw")
    for _ in range(100):
        if attempts:
            break
        await _tick()
    assert attempts == ["carol"]
    assert passwords.is_legacy(await _stored_hash(secured, "carol"))
    monkeypatch.undo()
    await _open(secured, "carol", "carol-pw")  # the next login retries, and succeeds
    await _eventually_stored(secured, "carol", scram.is_verifier)
