"""Roles: ``CREATE | ALTER | DROP ROLE``, ``GRANT | REVOKE`` role membership.

Superusers only, except that a role may change its own password
(PostgreSQL's rule); the catalog operations are ``loupe.coordinator.access``'s
(which also authenticates sessions against the roles). A legacy scrypt password
hash becomes a SCRAM-SHA-256 verifier on the role's next password login
(``upgrade_password_hash``), through the same catalog commit as ALTER ROLE.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from loupe.common import passwords
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.coordinator import access
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import AlterRole, CreateRole, DropRole, GrantRole
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

OBJECT_IN_USE = "55006"
log = get_logger(__name__)


async def role_ddl(
    ctx: SequencerContext,
    session: Session,
    statement: CreateRole | AlterRole | DropRole | GrantRole,
) -> StatementResult:
    """CREATE/ALTER/DROP ROLE, GRANT/REVOKE role: superusers only, except that a role
    may change its own password (PostgreSQL's rule)."""
    own_password = access.changes_only_own_password(statement, session.user)
    if not own_password:
        ddl.require_superuser(session, statement)
    if isinstance(statement, DropRole) and session.user in statement.names:
        raise LoupeError(
            OBJECT_IN_USE, "current user cannot be dropped", position=statement.position
        )
    ops = await access.role_ops(statement, grantor=session.user)
    _, result = await ddl.transact(ctx, session, statement, ops, superuser_only=not own_password)
    return result


async def upgrade_password_hash(ctx: SequencerContext, user: str, password: str) -> None:
    """Replace ``user``'s legacy scrypt hash by a SCRAM-SHA-256 verifier of ``password``
    (which just logged it in), as ``ALTER ROLE … PASSWORD`` would store it, so that its
    PostgreSQL-wire logins can use SCRAM. Logged, never raised: the login succeeded."""
    try:
        role = ctx.state.role_objects.get(user)
        if role is None or not passwords.is_legacy(role.password_hash):
            return  # changed meanwhile (ALTER ROLE … PASSWORD, another coordinator)
        verifier = await asyncio.to_thread(passwords.hash_password, password)
        alter = catalog_pb2.AlterRole(name=user, password_hash=verifier)
        await ddl.commit(
            ctx, [catalog_pb2.CatalogOp(alter_role=alter)], user=user, tag="ALTER ROLE"
        )
        log.info("password hash upgraded to SCRAM-SHA-256", user=user)
    except Exception as error:
        log.warning("password hash upgrade failed", user=user, error=str(error))
