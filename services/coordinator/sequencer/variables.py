"""Variables: ``SET``, ``SHOW``, ``RESET`` of session variables; ``ALTER SYSTEM``.

Session variables live on the ``Session`` (``loupe.coordinator.session``);
``SHOW`` of a system variable reads the catalog's system configuration,
which ``ALTER SYSTEM SET | RESET`` changes (superusers only, committed like
DDL). Some session defaults follow a system variable (``session_defaults``).
``PREPARE``/``EXECUTE``/``DEALLOCATE`` are ``loupe.coordinator.prepared``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loupe.common.errors import LoupeError
from loupe.common.system_vars import checked_value, is_system_variable, system_value
from loupe.coordinator.results import Notice, StatementResult
from loupe.coordinator.sequencer import ddl
from loupe.coordinator.session import Session
from loupe.coordinator.sql.statements import AlterSystem, ResetVariable, SetVariable, ShowVariable
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext


async def set_variable(
    ctx: SequencerContext, session: Session, statement: SetVariable
) -> StatementResult:
    session.set(statement.name, statement.value, position=statement.name_position)
    result = StatementResult(tag="SET")
    name = statement.name.lower()
    if name == "cluster" and await ctx.cluster(session.cluster) is None:
        result.notices.append(Notice("WARNING", f'cluster "{session.cluster}" does not exist'))
    return result


def show_variable(
    ctx: SequencerContext, session: Session, statement: ShowVariable
) -> StatementResult:
    if statement.name.lower() == "all":
        return StatementResult(
            tag="SHOW",
            columns=(("name", "text"), ("setting", "text"), ("description", "text")),
            rows=list(session.show_all()),
        )
    if is_system_variable(statement.name):
        value = system_variable(ctx, statement.name)
    else:
        value = session.get(statement.name, position=statement.name_position)
    return StatementResult(tag="SHOW", columns=((statement.name.lower(), "text"),), rows=[(value,)])


async def alter_system(
    ctx: SequencerContext, session: Session, statement: AlterSystem
) -> StatementResult:
    """Store (or remove) a system variable's value in the catalog; superusers only."""
    ddl.require_superuser(session, statement)
    try:
        value = None if statement.value is None else checked_value(statement.name, statement.value)
    except LoupeError as error:
        raise LoupeError(error.code, error.message, position=statement.name_position) from None
    op = catalog_pb2.CatalogOp(
        set_system_variable=catalog_pb2.SetSystemVariable(
            name=statement.name.lower(), value=value or "", reset=value is None
        )
    )
    _, result = await ddl.transact(ctx, session, statement, [op], advance=False)
    return result


def session_defaults(ctx: SequencerContext) -> dict[str, str]:
    """Session variables whose default a system variable sets, as of now."""
    rate = system_variable(ctx, "statement_logging_default_sample_rate")
    return {"statement_logging_sample_rate": rate}


def system_variable(ctx: SequencerContext, name: str) -> str:
    return system_value(ctx.state.snapshot.system_configuration, name)


def reset_variable(session: Session, statement: ResetVariable) -> StatementResult:
    session.reset(statement.name, position=statement.name_position)
    return StatementResult(tag="RESET")
