"""Roles: ``CREATE | ALTER | DROP ROLE``, ``GRANT | REVOKE`` role membership.

Superusers only, except that a role may change its own password
(PostgreSQL's rule); the catalog operations are ``loupe.coordinator.access``'s
(which also authenticates sessions against the roles).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loupe.common.errors import LoupeError
from loupe.coordinator import access
from loupe.coordinator.results import StatementResult
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import AlterRole, CreateRole, DropRole, GrantRole

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

OBJECT_IN_USE = "55006"


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
