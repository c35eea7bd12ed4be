"""Who may connect, and who may read the statement log.

Authentication (``CoordinatorSettings.authenticator``):

- ``trust``: the user name a client gives is believed, as PostgreSQL's
  ``trust``. Roles that may not log in (``NOLOGIN``, e.g. ``mz_monitor``) are
  still refused. Meant for a laptop (``loupe up``), never for a network.
- ``password``: the role must exist, may log in and has a password that
  matches (SCRAM-SHA-256 verifiers in the catalog, or a legacy scrypt hash
  until the role's next password login replaces it: ``loupe.common.passwords``).
  The configured superusers (``materialize``, ``mz_system``) whose role has no
  password of its own use ``superuser_password`` (Materialize's
  ``external_login_password_mz_system``).

PostgreSQL-wire logins (``login_plan``): ``trust`` asks nothing; a role with a
verifier, a configured superuser using ``superuser_password`` and an unknown
role (a verifier of None: it fails at the end, as a wrong password does) go
through SASL SCRAM-SHA-256; a role with a legacy scrypt hash sends its password
in cleartext (``authenticate``, which then upgrades the hash).

Authorization: DDL, ``ALTER SYSTEM`` and role management are for superusers
(a configured superuser or a role with ``SUPERUSER``). The statement log
(seed 000) is for superusers and members of ``mz_monitor``; members of
``mz_monitor_redacted`` read only what hides literals, parameters and error
messages. Membership is transitive through roles that ``INHERIT``. Checks
apply to the relations a statement names itself: a view runs with the rights
of whoever created it, as PostgreSQL's views do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
from collections.abc import Iterable, Mapping

from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.common.passwords import hash_password, is_legacy, verify_password
from loupe.coordinator.sql.resolve import search_path_schemas
from loupe.coordinator.sql.statements import (
    AlterRole,
    CreateRole,
    DropRole,
    GrantRole,
    Query,
    RoleOptions,
    Statement,
)
from loupe.pgwire import scram
from loupe.proto.catalog.v1 import catalog_pb2

AUTHENTICATORS = ("trust", "password")
MZ_MONITOR = "mz_monitor"
MZ_MONITOR_REDACTED = "mz_monitor_redacted"
# What only superusers and mz_monitor read: the raw history, with literals.
STATEMENT_LOG = frozenset(
    {
        "mz_session_history",
        "mz_prepared_statement_history",
        "mz_sql_text",
        "mz_statement_execution_history",
        "mz_statement_lifecycle_history",
        "mz_recent_activity_log",
    }
)
# What mz_monitor_redacted reads too: no literals, parameters or error messages.
STATEMENT_LOG_REDACTED = frozenset(
    {"mz_recent_activity_log_redacted", "mz_statement_execution_estimates"}
)
_SCHEMA = "mz_internal"


async def authenticate(
    roles: Mapping[str, catalog_pb2.Role],
    user: str,
    password: str,
    *,
    authenticator: str,
    superusers: Iterable[str],
    superuser_password: str,
) -> None:
    """Raise 28000 / 28P01 unless ``user`` may open a session with ``password``."""
    role = roles.get(user)
    if role is not None and not role.login:
        raise LoupeError(
            SqlState.INVALID_AUTHORIZATION, f'role "{user}" is not permitted to log in'
        )
    if authenticator == "trust":
        return
    failed = LoupeError(
        SqlState.INVALID_PASSWORD, f'password authentication failed for user "{user}"'
    )
    if role is None:
        # The same answer as a wrong password: no telling which roles exist.
        raise failed
    if role.password_hash:
        # PBKDF2 / scrypt take milliseconds on purpose: not on the event loop.
        if await asyncio.to_thread(verify_password, password, role.password_hash):
            return
        raise failed
    if (
        user in superusers
        and superuser_password
        and hmac.compare_digest(password.encode(), superuser_password.encode())
    ):
        return
    raise failed


@dataclasses.dataclass(frozen=True)
class LoginPlan:
    """How a PostgreSQL-wire client must authenticate: ``trust`` (nothing asked),
    ``cleartext`` (AuthenticationCleartextPassword, then ``authenticate``) or ``scram``
    (SASL SCRAM-SHA-256 against ``verifier``; then ``Coordinator.admit``)."""

    method: str
    verifier: str | None = None


def check_login(roles: Mapping[str, catalog_pb2.Role], user: str) -> None:
    """28000 if ``user``'s role may not log in (NOLOGIN)."""
    role = roles.get(user)
    if role is not None and not role.login:
        raise LoupeError(
            SqlState.INVALID_AUTHORIZATION, f'role "{user}" is not permitted to log in'
        )


def login_plan(
    roles: Mapping[str, catalog_pb2.Role],
    user: str,
    *,
    authenticator: str,
    superusers: Iterable[str],
    superuser_password: str,
) -> LoginPlan:
    """The method a pgwire login of ``user`` takes; 28000 if its role may not log in.

    ``scram`` with the role's verifier, with a verifier of ``superuser_password``
    for a configured superuser without a password of its own, and with None
    (no verifier: the exchange fails at its end) for an unknown role or one
    without a password, so the answer never tells whether a role exists.
    ``cleartext`` for a legacy scrypt hash, which no SCRAM exchange can use.
    """
    check_login(roles, user)
    if authenticator == "trust":
        return LoginPlan("trust")
    role = roles.get(user)
    if role is None:
        return LoginPlan("scram")
    if role.password_hash:
        if is_legacy(role.password_hash):
            return LoginPlan("cleartext")
        if scram.is_verifier(role.password_hash):
            return LoginPlan("scram", role.password_hash)
        return LoginPlan("scram")
    if user in superusers and superuser_password:
        return LoginPlan("scram", _superuser_verifier(superuser_password))
    return LoginPlan("scram")


@functools.lru_cache(maxsize=4)
def _superuser_verifier(password: str) -> str:
    """A verifier of the configured superuser password, made once (PBKDF2 is slow)."""
    return scram.verifier(password)


def needs_upgrade(roles: Mapping[str, catalog_pb2.Role], user: str) -> bool:
    """Whether ``user``'s stored password is a legacy scrypt hash (to become a verifier)."""
    role = roles.get(user)
    return role is not None and is_legacy(role.password_hash)


def is_superuser(
    roles: Mapping[str, catalog_pb2.Role], user: str, superusers: Iterable[str]
) -> bool:
    role = roles.get(user)
    return user in superusers or (role is not None and role.superuser)


def member_of(roles: Mapping[str, catalog_pb2.Role], user: str, role_name: str) -> bool:
    """Whether ``user`` has the rights of ``role_name``: itself, or through memberships of
    roles that inherit."""
    by_id = {role.id: role for role in roles.values()}
    start = roles.get(user)
    target = roles.get(role_name)
    if start is None or target is None:
        return False
    seen: set[str] = set()
    pending = [start]
    while pending:
        role = pending.pop()
        if role.id == target.id:
            return True
        if role.id in seen or not role.inherit:
            continue
        seen.add(role.id)
        pending.extend(by_id[i] for i in role.member_of if i in by_id)
    return False


def _statement_log_names(statement: Statement, search_path: str) -> set[str]:
    """The statement-log relations ``statement`` names (schema-qualified or on its path)."""
    on_path = _SCHEMA in search_path_schemas(search_path)
    names: set[str] = set()
    for expression in _expressions(statement):
        for table in expression.find_all(exp.Table):
            name = table.name.lower()
            schema = table.db.lower()
            if (schema == _SCHEMA or (not schema and on_path)) and (
                name in STATEMENT_LOG or name in STATEMENT_LOG_REDACTED
            ):
                names.add(name)
    return names


def _expressions(statement: Statement) -> list[exp.Expression]:
    found: list[exp.Expression] = []
    for field in dataclasses.fields(statement):
        value = getattr(statement, field.name)
        if isinstance(value, exp.Expression):
            found.append(value)
        elif isinstance(value, Query):
            found.append(value.expression)
        elif dataclasses.is_dataclass(value) and isinstance(value, Statement):
            found.extend(_expressions(value))
    return found


def check_statement_log_access(
    statement: Statement,
    *,
    user: str,
    superuser: bool,
    search_path: str,
    roles: Mapping[str, catalog_pb2.Role],
) -> None:
    """Raise 42501 if ``statement`` reads statement-log relations ``user`` may not read."""
    names = _statement_log_names(statement, search_path)
    if not names or superuser or member_of(roles, user, MZ_MONITOR):
        return
    full = sorted(names & STATEMENT_LOG)
    if not full and member_of(roles, user, MZ_MONITOR_REDACTED):
        return
    denied = full[0] if full else sorted(names)[0]
    allowed = MZ_MONITOR if full else f"{MZ_MONITOR} or {MZ_MONITOR_REDACTED}"
    raise LoupeError(
        SqlState.INSUFFICIENT_PRIVILEGE,
        f"permission denied for {_SCHEMA}.{denied}",
        detail=f'role "{user}" is neither a superuser nor a member of {allowed}',
        hint=f"a superuser can GRANT {allowed.split(' or ')[0]} TO {user}",
        position=statement.position,
    )


# Role DDL -> catalog operations


async def _password_hash(options: RoleOptions) -> str | None:
    if options.password_null:
        return ""
    if options.password is None:
        return None
    if not options.password:
        raise LoupeError(SqlState.INVALID_PARAMETER_VALUE, "a password must not be empty")
    if scram.is_verifier(options.password):
        # A verifier given as the password is stored as it is, as PostgreSQL does (what
        # pg_dumpall writes): the role keeps its password without anyone knowing it.
        return options.password
    return await asyncio.to_thread(hash_password, options.password)


async def role_ops(
    statement: CreateRole | AlterRole | DropRole | GrantRole, grantor: str
) -> list[catalog_pb2.CatalogOp]:
    """The catalog operations of a role statement (passwords hashed here, never sent)."""
    match statement:
        case CreateRole(name=name, options=options, user=user):
            password_hash = await _password_hash(options)
            create = catalog_pb2.CreateRole(
                name=name,
                superuser=bool(options.superuser),
                login=options.login if options.login is not None else user,
                inherit=options.inherit if options.inherit is not None else True,
                password_hash=password_hash or "",
            )
            return [catalog_pb2.CatalogOp(create_role=create)]
        case AlterRole(name=name, options=options):
            alter = catalog_pb2.AlterRole(name=name)
            for attribute in ("superuser", "login", "inherit"):
                value = getattr(options, attribute)
                if value is not None:
                    setattr(alter, attribute, value)
            password_hash = await _password_hash(options)
            if password_hash is not None:
                alter.password_hash = password_hash
            return [catalog_pb2.CatalogOp(alter_role=alter)]
        case DropRole(names=names, if_exists=if_exists):
            return [
                catalog_pb2.CatalogOp(drop_role=catalog_pb2.DropRole(name=n, if_exists=if_exists))
                for n in names
            ]
        case GrantRole(roles=roles, members=members, revoke=revoke):
            return [
                catalog_pb2.CatalogOp(
                    grant_role=catalog_pb2.GrantRole(
                        role=role, member=member, grantor=grantor, revoke=revoke
                    )
                )
                for role in roles
                for member in members
            ]
    raise TypeError(statement)


def changes_only_own_password(statement: Statement, user: str) -> bool:
    """``ALTER ROLE <user> PASSWORD …`` by ``user`` itself: allowed to anyone who logged in."""
    if not isinstance(statement, AlterRole) or statement.name != user:
        return False
    options = statement.options
    return (
        (options.password is not None or options.password_null)
        and options.superuser is None
        and options.login is None
        and options.inherit is None
    )


def hides_password(statement: Statement) -> bool:
    """Whether ``statement``'s text holds a password (the statement log keeps it redacted)."""
    return isinstance(statement, CreateRole | AlterRole) and statement.options.password is not None
