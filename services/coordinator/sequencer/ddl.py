"""What every DDL statement shares: who may run it, where a new object goes, the commit.

``transact`` commits catalog operations (with the session's user, for the
audit log; one statement at a time, the others wait in the ``ddl`` admission
queue) and follows the commit like any other (``follower.CatalogFollower``:
controller, then the catalog-derived relations in storage) before the client
gets its answer; ``after_ddl`` then moves the oracle past that append, so a
SELECT right after sees the change in ``mz_catalog``. The statement's success
is its commit: when storage is too slow to take the relations' append in
``catalog_relations_wait``, it answers with a NOTICE and the relations catch
up in the background (``CatalogFollower.keep_storage_in_sync``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from loupe.builtins import IMPLICIT_SCHEMAS
from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.coordinator import admission, metrics
from loupe.coordinator.admission import until_answered
from loupe.coordinator.results import Notice, StatementResult
from loupe.coordinator.session import Session
from loupe.coordinator.sql.resolve import search_path_schemas
from loupe.coordinator.sql.statements import ObjectName, Statement
from loupe.proto.catalog.v1 import catalog_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

log = get_logger(__name__)

INVALID_SCHEMA_NAME = "3F000"
INVALID_CATALOG_NAME = "3D000"


def require_superuser(session: Session, statement: Statement) -> None:
    """42501 unless the session's role is a superuser."""
    if not session.is_superuser:
        raise LoupeError(
            SqlState.INSUFFICIENT_PRIVILEGE,
            f'permission denied to {statement.tag}: role "{session.user}" is not a superuser',
            position=statement.position,
        )


def owner_id(ctx: SequencerContext, session: Session) -> str:
    """The role id that owns what ``session`` creates."""
    return ctx.state.role_id(session.user) or session.role_id


def target_schema(
    ctx: SequencerContext, session: Session, name: ObjectName
) -> tuple[str, catalog_pb2.Schema]:
    """(database name, schema) a new object called ``name`` goes to."""
    state = ctx.state
    parts = name.parts
    database = parts[0] if len(parts) == 3 else session.database
    candidates = [parts[-2]] if len(parts) > 1 else search_path_schemas(session.search_path)
    if not any(d.name == database for d in state.databases.values()):
        raise LoupeError(
            INVALID_CATALOG_NAME, f"unknown database '{database}'", position=name.position
        )
    for schema_name in candidates:
        if schema_name in (*IMPLICIT_SCHEMAS, "mz_internal", "mz_introspection", "pg_catalog"):
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE,
                f"system schema '{schema_name}' cannot be modified",
                position=name.position,
            )
        schema = state.schema_named(database, schema_name)
        if schema is not None:
            return database, schema
    if len(parts) > 1:
        raise LoupeError(
            INVALID_SCHEMA_NAME, f"unknown schema '{parts[-2]}'", position=name.position
        )
    raise LoupeError(
        INVALID_SCHEMA_NAME, "no schema has been selected to create in", position=name.position
    )


async def transact(
    ctx: SequencerContext,
    session: Session,
    statement: Statement,
    ops: list[catalog_pb2.CatalogOp],
    *,
    advance: bool = True,
    superuser_only: bool = True,
) -> tuple[catalog_pb2.TransactResponse, StatementResult]:
    """Commit ``ops`` and follow the commit into the controller and storage.

    ``advance``: then move the oracle (and the tables) past the append of
    the commit's catalog relations (``after_ddl``). ``superuser_only``: False
    for what the caller has authorised itself (a role's own password).
    """
    if superuser_only:
        require_superuser(session, statement)
    result = StatementResult(tag=statement.tag)
    response, notices = await commit(ctx, ops, user=session.user, tag=statement.tag)
    result.notices.extend(notices)
    if advance:
        await after_ddl(ctx)
    return response, result


async def commit(
    ctx: SequencerContext, ops: list[catalog_pb2.CatalogOp], *, user: str, tag: str
) -> tuple[catalog_pb2.TransactResponse, list[Notice]]:
    """Commit ``ops`` as ``user`` (one DDL at a time) and follow the commit; the notices
    say what has not caught up yet (``tag`` names the change in them)."""
    notices: list[Notice] = []
    async with ctx.ddl.admitted():
        # Not asked again on a timeout: a commit is not safe to repeat.
        response = await ctx.catalog.Transact(catalog_pb2.TransactRequest(ops=ops, user=user))
        snapshot = (
            response.snapshot
            if response.HasField("snapshot")
            else await until_answered(
                "Snapshot", lambda: ctx.catalog.Snapshot(catalog_pb2.SnapshotRequest())
            )
        )
        ctx.follower.resolve_with(snapshot)
        behind = await follow_commit(ctx, snapshot)
        if behind is not None:
            metrics.DDL_ANSWERED_BEHIND.inc()
            notices.append(
                Notice(
                    "WARNING",
                    f"{tag} committed, but mz_catalog does not show it yet"
                    f" ({behind}); it will once storage has caught up",
                )
            )
        failure = ctx.follower.apply_failure
        if failure:
            notices.append(
                Notice("WARNING", f"the controller has not applied the change yet: {failure}")
            )
    return response, notices


async def follow_commit(ctx: SequencerContext, snapshot: catalog_pb2.CatalogSnapshot) -> str | None:
    """Wait for the commit to reach mz_catalog; None once it has, else why not yet.

    The statement committed: its success does not depend on the catalog
    relations (``CatalogFollower.keep_storage_in_sync`` brings them up to date
    in the background). It waits ``catalog_relations_wait`` seconds at most (within
    its ``statement_timeout``), and only ``follow_timeout`` when storage was
    already behind before it: a storage writer that is down does not make
    every DDL wait the full time.
    """
    already_behind = ctx.follower.storage_behind
    catching_up = ctx.spawn(ctx.follower.reach_storage(snapshot))
    wait = ctx.config.follow_timeout if already_behind else ctx.config.catalog_relations_wait
    deadline = admission.STATEMENT_DEADLINE.get()
    if deadline is not None:
        wait = max(0.0, min(wait, deadline - time.monotonic()))
    done, _ = await asyncio.wait({catching_up}, timeout=wait)
    if not done:
        return ctx.follower.behind_because or f"storage did not confirm it within {wait:.3g}s"
    error = None if catching_up.cancelled() else catching_up.exception()
    if catching_up.cancelled() or error is not None:
        log.error("catching up the catalog relations failed", error=repr(error))
        return "the coordinator could not write it; see its log"
    return None


async def after_ddl(ctx: SequencerContext) -> None:
    """Move the oracle past the storage writer's append of the catalog relations.

    The storage writer picks the time of that append itself; once the
    oracle is past it, every later read timestamp sees the DDL in mz_catalog.
    """
    try:
        await ctx.oracle.write_timestamp(at_least=ctx.writer.last_upper - 1)
    except LoupeError as error:
        log.warning("could not advance the timestamp oracle", error=error.message)
