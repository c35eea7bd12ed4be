"""Transactions and cursors: ``BEGIN``/``COMMIT``/``ROLLBACK``, ``DECLARE``/``FETCH``/``CLOSE``.

Materialize's rules (``src/adapter/src/session.rs``, ``TransactionOps``): an
explicit transaction either reads — every SELECT at the one timestamp its first
read chose (``pin_read``), so its reads see one snapshot —, or runs one
SUBSCRIBE, or writes INSERTs of values to tables, kept in the session and
written at COMMIT in one table write at one timestamp (ROLLBACK forgets them).
Queries that read no relation go with anything. Mixing the kinds fails with
Materialize's errors (25006 "transaction in read-only mode", 25000 "transaction
in write-only mode", 25000 "SUBSCRIBE in transactions must be the only read
statement"). DDL alone in a transaction runs at its COMMIT (Materialize's
single-statement transactions); UPDATE, DELETE and INSERT … SELECT fail with
25001 "… cannot be run inside a transaction block". A failed statement leaves the transaction failed (25P02
for everything but COMMIT/ROLLBACK; COMMIT then rolls back).

The implicit transaction of a multi-statement request (``Coordinator.execute``)
only scopes its cursors: its statements run one after another, each committed on
its own, as Loupe always ran them.

A cursor's statement runs at its first FETCH: a SELECT's rows are kept and
handed out in order; a SUBSCRIBE's stream stays open, and each FETCH takes what
arrived, waiting up to its timeout for ``count`` rows (without a timeout, for at
least one), as Materialize's FETCH does. Cursors end with their transaction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator import metrics
from loupe.coordinator.dml import insert_plan, values_rows
from loupe.coordinator.results import (
    Complete,
    Description,
    Failure,
    Notice,
    RowBatch,
    StatementResult,
    Streaming,
)
from loupe.coordinator.sequencer.table import table_named
from loupe.coordinator.session import (
    NO_OPS,
    READS,
    SINGLE,
    SUBSCRIBE,
    WRITES,
    Cursor,
    Session,
    Transaction,
)
from loupe.coordinator.sql.statements import (
    AlterCluster,
    AlterRole,
    Close,
    Commit,
    CreateCluster,
    CreateClusterReplica,
    CreateIndex,
    CreateRole,
    CreateSource,
    CreateTable,
    CreateView,
    Deallocate,
    Declare,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    DropRole,
    DropTable,
    Explain,
    ExplainAnalyze,
    Fetch,
    Insert,
    Prepare,
    Query,
    ResetVariable,
    Rollback,
    SetVariable,
    ShowClusterReplicas,
    ShowClusters,
    ShowObjects,
    ShowRoles,
    ShowVariable,
    StartTransaction,
    Statement,
    Subscribe,
)
from loupe.coordinator.tables import Table, check_columns

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

ACTIVE_SQL_TRANSACTION = "25001"
NO_ACTIVE_SQL_TRANSACTION = "25P01"
INVALID_TRANSACTION_STATE = "25000"
READ_ONLY_SQL_TRANSACTION = "25006"
IN_FAILED_SQL_TRANSACTION = "25P02"
INVALID_CURSOR_NAME = "34000"
DUPLICATE_CURSOR = "42P03"
# The least a FETCH with a timeout waits for events already on their way (seconds).
MIN_WAIT = 0.005

# Statements an explicit transaction may run whatever it did before (reads are
# checked when they choose their timestamp, ``pin_read``).
ALWAYS_ALLOWED = (
    StartTransaction,
    Commit,
    Rollback,
    Declare,
    Fetch,
    Close,
    Prepare,
    Deallocate,
    Query,
    Subscribe,
    Explain,
    ExplainAnalyze,
    ShowVariable,
    ShowClusters,
    ShowClusterReplicas,
    ShowObjects,
    ShowRoles,
    SetVariable,
    ResetVariable,
)


# DDL whose tag is known before it runs: alone in a transaction, it runs at COMMIT
# (Materialize's single-statement transactions; ``BEGIN; CREATE TABLE …; COMMIT``, as
# psycopg's default mode sends it).
SINGLE_STATEMENT_DDL = (
    CreateTable,
    DropTable,
    CreateView,
    CreateIndex,
    CreateSource,
    DropObjects,
    CreateCluster,
    CreateClusterReplica,
    DropCluster,
    DropClusterReplica,
    AlterCluster,
    CreateRole,
    AlterRole,
    DropRole,
)


def aborted_error() -> LoupeError:
    return LoupeError(
        IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )


def read_only_error() -> LoupeError:
    return LoupeError(
        READ_ONLY_SQL_TRANSACTION,
        "transaction in read-only mode",
        detail="SELECT queries cannot be combined with other query types, including SUBSCRIBE.",
    )


def write_only_error() -> LoupeError:
    return LoupeError(INVALID_TRANSACTION_STATE, "transaction in write-only mode")


def single_statement_error() -> LoupeError:
    return LoupeError(
        INVALID_TRANSACTION_STATE, "this transaction can only execute a single statement"
    )


def subscribe_only_error() -> LoupeError:
    return LoupeError(
        INVALID_TRANSACTION_STATE, "SUBSCRIBE in transactions must be the only read statement"
    )


def explicit(session: Session) -> Transaction | None:
    """The session's explicit transaction (BEGIN), if it is in one."""
    transaction = session.transaction
    return transaction if transaction is not None and transaction.explicit else None


def check_allowed(session: Session, statement: Statement) -> bool:
    """Refuse what an explicit transaction may not run (Materialize's list: DDL, UPDATE,
    DELETE, INSERT … SELECT, …) with 25001; True for DDL it runs at COMMIT instead (a
    transaction of that one statement, ``defer``)."""
    if explicit(session) is None or isinstance(statement, ALWAYS_ALLOWED):
        return False
    if isinstance(statement, Insert) and statement.query is None:
        return False
    if isinstance(statement, SINGLE_STATEMENT_DDL):
        return True
    raise LoupeError(
        ACTIVE_SQL_TRANSACTION,
        f"{statement.text} cannot be run inside a transaction block",
        position=statement.position,
    )


def add_ops(session: Session, ops: str) -> Transaction | None:
    """Record that the explicit transaction does ``ops``; Materialize's error if it may not."""
    transaction = explicit(session)
    if transaction is None:
        return None
    current = transaction.ops
    if ops == WRITES and transaction.access == "read only":
        raise read_only_error()
    if current == NO_OPS or current == ops not in (SUBSCRIBE, SINGLE):
        transaction.ops = ops
        return transaction
    if current == SINGLE:
        raise single_statement_error()
    if current == SUBSCRIBE:
        raise subscribe_only_error()
    if current == WRITES:
        raise write_only_error()
    raise read_only_error()


def pinned_timestamp(session: Session, *, subscribe: bool = False) -> int | None:
    """The explicit transaction's read timestamp, once its first read chose it; a read
    the transaction may not do fails here (``add_ops``)."""
    transaction = add_ops(session, SUBSCRIBE if subscribe else READS)
    return transaction.timestamp if transaction is not None else None


def pin(session: Session, timestamp: int) -> None:
    """The first read of an explicit transaction chose ``timestamp``: the others read there."""
    transaction = explicit(session)
    if transaction is not None and transaction.timestamp is None:
        transaction.timestamp = timestamp


# -- BEGIN, COMMIT, ROLLBACK ----------------------------------------------------------------


def begin(session: Session, statement: StartTransaction) -> StatementResult:
    transaction = session.transaction
    if transaction is not None and transaction.explicit:
        if statement.access == "read write" and transaction.ops in (READS, SUBSCRIBE):
            raise LoupeError(
                INVALID_TRANSACTION_STATE,
                "transaction read-write mode must be set before any query",
            )
        if statement.access is not None:
            transaction.access = statement.access
        return StatementResult(
            tag="BEGIN",
            notices=[
                Notice(
                    "WARNING", "there is already a transaction in progress", ACTIVE_SQL_TRANSACTION
                )
            ],
        )
    if transaction is None:
        session.transaction = Transaction(explicit=True, access=statement.access)
    else:
        # BEGIN inside a multi-statement request: its implicit transaction becomes explicit.
        transaction.explicit = True
        transaction.access = statement.access
    return StatementResult(tag="BEGIN")


def defer(session: Session, statement: Statement) -> StatementResult:
    """DDL in an explicit transaction: its tag now, the statement at COMMIT."""
    transaction = add_ops(session, SINGLE)
    assert transaction is not None
    transaction.single = statement
    return StatementResult(tag=statement.tag)


async def commit(
    ctx: SequencerContext, session: Session, statement: Commit, run: Any
) -> StatementResult:
    """Write what the transaction INSERTed (all of it at one timestamp), or run its one
    DDL statement (``run(statement)``), and end it."""
    transaction = session.transaction
    notices = []
    if transaction is None or not transaction.explicit:
        notices.append(
            Notice("WARNING", "there is no transaction in progress", NO_ACTIVE_SQL_TRANSACTION)
        )
    if transaction is None:
        return StatementResult(tag="COMMIT", notices=notices)
    session.transaction = None
    await close_cursors(transaction)
    if transaction.failed:
        return StatementResult(tag="ROLLBACK", notices=notices)
    if transaction.writes:
        await write(ctx, transaction)
    if transaction.single is not None:
        notices.extend(await _run_to_end(await run(transaction.single)))
    return StatementResult(tag="COMMIT", notices=notices)


async def _run_to_end(result: StatementResult | Streaming) -> list[Notice]:
    """The notices of a statement's result; a streaming one (DDL reporting progress) is
    followed to its end (its failure raised)."""
    if isinstance(result, StatementResult):
        return list(result.notices)
    notices = []
    async for event in result.stream:
        if isinstance(event, Failure):
            raise event.error
        if isinstance(event, Notice):
            notices.append(event)
    return notices


async def rollback(session: Session, statement: Rollback) -> StatementResult:
    transaction = session.transaction
    session.transaction = None
    if transaction is not None:
        await close_cursors(transaction)
    if transaction is None or not transaction.explicit:
        return StatementResult(
            tag="ROLLBACK",
            notices=[
                Notice("WARNING", "there is no transaction in progress", NO_ACTIVE_SQL_TRANSACTION)
            ],
        )
    return StatementResult(tag="ROLLBACK")


async def end(session: Session) -> None:
    """End the session's transaction without writing anything (its request or the session
    ended)."""
    transaction = session.transaction
    session.transaction = None
    if transaction is not None:
        await close_cursors(transaction)


async def close_cursors(transaction: Transaction) -> None:
    cursors = list(transaction.cursors.values())
    transaction.cursors.clear()
    for cursor in cursors:
        await cursor.close()


async def insert(ctx: SequencerContext, session: Session, statement: Insert) -> StatementResult:
    """An INSERT of values in an explicit transaction: checked now, written at COMMIT."""
    transaction = add_ops(session, WRITES)
    assert transaction is not None
    assert statement.query is None
    table = await table_named(ctx, session, statement.table)
    assert table is not None
    columns = check_columns(table, statement.columns) if statement.columns is not None else None
    rows = values_rows(table, columns, statement.rows)
    keep_rows(transaction, table, rows)
    return StatementResult(tag=f"INSERT 0 {len(rows)}")


def keep_rows(transaction: Transaction, table: Table, rows: Sequence[tuple[Any, ...]]) -> None:
    """Rows for ``table`` to write at COMMIT (one write per table)."""
    for pending_table, pending in transaction.writes:
        if pending_table.id == table.id:
            pending.extend(rows)
            return
    transaction.writes.append((table, list(rows)))


async def write(ctx: SequencerContext, transaction: Transaction) -> None:
    """The transaction's INSERTs, every table at one timestamp (``TableStore.write_all``)."""
    from loupe.coordinator.sequencer.dml import unique_keys

    tables = ctx.state.tables
    writes = []
    for table, rows in transaction.writes:
        current = tables.get(table.id)
        if current is None:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE,
                f'table "{table.name}" was dropped before the transaction committed',
            )
        keys = unique_keys(ctx, current)
        writes.append((current, insert_plan(current, rows, keys), bool(keys)))
    along = [t for table, _, _ in writes for t in ctx.compute.maintained_with(table)]
    await ctx.tables.write_all(writes, along=along)
    metrics.TABLE_WRITES.labels("insert").inc(len(writes))


# -- cursors ------------------------------------------------------------------------------


def declare(session: Session, statement: Declare) -> StatementResult:
    """Name a cursor for the transaction; its statement runs at the first FETCH.

    Outside a transaction block (a request of one statement) a cursor would end
    as soon as it is declared: 25P01, as PostgreSQL and Materialize answer.
    """
    transaction = session.transaction
    if transaction is None:
        raise LoupeError(
            NO_ACTIVE_SQL_TRANSACTION, "DECLARE CURSOR can only be used in transaction blocks"
        )
    if statement.name in transaction.cursors:
        raise LoupeError(DUPLICATE_CURSOR, f'cursor "{statement.name}" already exists')
    transaction.cursors[statement.name] = Cursor(statement.name, statement.statement)
    return StatementResult(tag="DECLARE CURSOR")


def cursor_named(session: Session, name: str) -> Cursor:
    transaction = session.transaction
    cursor = transaction.cursors.get(name) if transaction is not None else None
    if cursor is None:
        raise LoupeError(INVALID_CURSOR_NAME, f'cursor "{name}" does not exist')
    return cursor


async def close(session: Session, statement: Close) -> StatementResult:
    transaction = session.transaction
    if statement.name is None:
        if transaction is not None:
            await close_cursors(transaction)
        return StatementResult(tag="CLOSE CURSOR")
    cursor = cursor_named(session, statement.name)
    assert transaction is not None
    del transaction.cursors[statement.name]
    await cursor.close()
    return StatementResult(tag="CLOSE CURSOR")


async def fetch(
    session: Session,
    statement: Fetch,
    run: Any,
) -> StatementResult:
    """Up to ``count`` rows of the cursor; ``run(statement)`` runs its statement the first
    time (a ``StatementResult`` or a ``Streaming``)."""
    cursor = cursor_named(session, statement.name)
    if not cursor.started:
        cursor.started = True
        result = await run(cursor.statement)
        if isinstance(result, Streaming):
            cursor.stream = result.stream
            await _describe(cursor)
        else:
            cursor.columns = result.columns
            cursor.rows = list(result.rows)
            cursor.done = True
    if cursor.stream is not None and not cursor.done:
        await _receive(cursor, statement.count, statement.timeout)
    take = len(cursor.rows) if statement.count is None else statement.count
    rows = cursor.rows[:take]
    del cursor.rows[:take]
    return StatementResult(tag=f"FETCH {len(rows)}", columns=cursor.columns or (), rows=rows)


async def _describe(cursor: Cursor) -> None:
    """Wait for a SUBSCRIBE's columns (its first event, once its dataflow exists)."""
    while cursor.columns is None and not cursor.done:
        await _next_event(cursor, None)


async def _receive(cursor: Cursor, count: int | None, timeout: float | None) -> None:
    """Take a SUBSCRIBE's events until ``count`` rows wait (ALL: until the timeout), or the
    timeout passes; without a timeout, until at least one row waits."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not cursor.done:
        enough = cursor.rows and (
            deadline is None or (count is not None and len(cursor.rows) >= count)
        )
        if enough:
            return
        # A timeout of 0 still takes what already arrived.
        remaining = None if deadline is None else max(deadline - time.monotonic(), MIN_WAIT)
        if not await _next_event(cursor, remaining):
            return


async def _next_event(cursor: Cursor, timeout: float | None) -> bool:
    """Handle the stream's next event; False if none came within ``timeout``."""
    assert cursor.stream is not None
    if cursor.pending is None:
        cursor.pending = asyncio.ensure_future(anext(cursor.stream))
    # Not canceled when the timeout passes: the next FETCH waits for the same event.
    done, _ = await asyncio.wait({cursor.pending}, timeout=timeout)
    if not done:
        return False
    pending, cursor.pending = cursor.pending, None
    try:
        event = pending.result()
    except StopAsyncIteration:
        cursor.done = True
        return True
    match event:
        case Description(columns):
            cursor.columns = columns
        case RowBatch(rows):
            cursor.rows.extend(rows)
        case Failure(error):
            cursor.done = True
            raise error
        case Complete():
            cursor.done = True
    return True
