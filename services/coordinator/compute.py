"""The coordinator's compute surface: views, materialized views, indexes, SUBSCRIBE, reads.

- ``CREATE VIEW`` stores the definition (names fully qualified) and builds
  nothing; ``CREATE MATERIALIZED VIEW`` also creates the view's shard and
  installs a dataflow sinking into it; ``CREATE [DEFAULT] INDEX`` installs a
  dataflow exporting the index. Both wait (bounded) for the dataflow to
  hydrate, streaming ``Progress`` events from the controller's
  ``CollectionStatus``.
- ``DROP`` refuses (2BP01) when other objects depend on what it drops,
  unless ``CASCADE``; dropped indexes and materialized views free their
  dataflows (``AllowCompaction(empty)``).
- Every SELECT that reads a relation runs here, on the session's cluster, or
  on ``mz_catalog_server`` when it reads only system relations: the fast
  path peeks an index when the query only filters and projects one object
  indexed on that cluster; otherwise a transient dataflow reading storage
  (and the cluster's indexes) is built, its result index peeked, and the
  dataflow dropped.
- ``SUBSCRIBE`` builds a transient dataflow with a subscribe sink and streams
  the controller's ``loupe.controller.v1.subscribe.<sink>`` batches until the
  client goes away.
- At start every index and materialized view of the catalog is installed
  again (the controller de-duplicates by id).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from loupe.builtins import BY_ID as BUILTIN_BY_ID
from loupe.builtins import BY_QUALIFIED_NAME, SYSTEM_CLUSTER_NAME
from loupe.common.errors import LoupeError, SqlState
from loupe.common.logging import get_logger
from loupe.common.transport import subscribe as nats_subscribe
from loupe.common.values import from_row
from loupe.coordinator import statement_logging
from loupe.coordinator.admission import RETRY_PAUSE, RETRY_PAUSE_CAP, until_answered
from loupe.coordinator.builtin_views import inline_builtin_views
from loupe.coordinator.catalog_state import CatalogState, ClusterInfo
from loupe.coordinator.compaction import compaction_target
from loupe.coordinator.dataflows import (
    Inputs,
    fast_path,
    index_dataflow,
    materialized_view_dataflow,
    peek_index_id,
    transient_dataflow,
)
from loupe.coordinator.dml import check_unique_contents
from loupe.coordinator.introspection import (
    LOG_BY_ID,
    LogRelation,
    ReplicaView,
    introspection_disabled,
    log_detail,
    log_metadata,
    log_names,
    no_history,
    split_replica_view,
    untargeted_read,
)
from loupe.coordinator.objects import (
    ComputeObject,
    dependents,
    full_name,
    id_order,
    index_key,
    index_sql,
    qualify,
    quote,
    relation_columns,
    view_sql,
)
from loupe.coordinator.pg_functions import (
    fold_session_functions,
    regclass_resolver,
    rewrite_catalog_calls,
    session_values,
)
from loupe.coordinator.plan import (
    PlannedQuery,
    TemporalError,
    explain,
    lower_to_lir,
    plan_query,
    plan_select,
)
from loupe.coordinator.results import (
    Complete,
    Description,
    Event,
    Notice,
    Progress,
    RowBatch,
    StatementResult,
    Streaming,
)
from loupe.coordinator.sequencer import ddl, transaction
from loupe.coordinator.sequencer.cluster import catalog_op
from loupe.coordinator.sequencer.peek import peek_target_replica, send_peek
from loupe.coordinator.session import Session
from loupe.coordinator.sql.resolve import resolve_relations, search_path_schemas
from loupe.coordinator.sql.statements import (
    CreateIndex,
    CreateView,
    DropCluster,
    DropClusterReplica,
    DropObjects,
    Explain,
    ObjectName,
    Query,
    Statement,
    Subscribe,
)
from loupe.coordinator.tables import Table
from loupe.coordinator.timestamps import as_of_timestamp
from loupe.persist import ShardState
from loupe.persist.cache import ShardCache
from loupe.plan import codec, mir
from loupe.plan.dataflow import DataflowDescription, SourceImport
from loupe.proto.catalog.v1 import catalog_pb2
from loupe.proto.common.v1 import common_pb2
from loupe.proto.compute.v1 import compute_pb2
from loupe.proto.controller.v1 import controller_pb2

if TYPE_CHECKING:
    from loupe.coordinator.sequencer.context import SequencerContext

log = get_logger(__name__)

DEPENDENT_OBJECTS_STILL_EXIST = "2BP01"
WRONG_OBJECT_TYPE = "42809"
SUBSCRIBE_SUBJECT = "loupe.controller.v1.subscribe.{sink_id}"
SUBSCRIBE_COLUMNS = (("mz_timestamp", "numeric"), ("mz_diff", "int8"))


def finishing_proto(finishing: mir.Finishing) -> compute_pb2.RowSetFinishing:
    return codec.finishing_to_proto(
        finishing.order, finishing.limit, finishing.offset, finishing.project
    )


class Compute:
    """Compute objects and reads for one coordinator (``coordinator`` does the catalog work)."""

    def __init__(self, context: SequencerContext) -> None:
        self.c = context
        # Transient dataflow ids: unique across restarts (the controller keys dataflows by id).
        self._transient = itertools.count(time.time_ns() // 1000)

    @property
    def config(self) -> Any:
        return self.c.config

    @property
    def state(self) -> CatalogState:
        return self.c.state

    # -- reading ------------------------------------------------------------------------

    def resolve(
        self, session: Session, expression: exp.Expression, state: CatalogState
    ) -> tuple[exp.Expression, dict[str, Any]]:
        """Bind the names of a session's query: (normalized query, written name -> relation)."""
        return resolve_relations(
            expression,
            search_path=search_path_schemas(session.search_path),
            database=session.database,
            collections=state.resolvable(session.database),
        )

    def inline_views(self, session: Session, expression: exp.Expression) -> exp.Expression:
        """``expression`` with the builtin views it names (as the session finds them) inlined."""
        relations = self.state.resolvable(session.database)
        search_path = search_path_schemas(session.search_path)
        values = session_values(session)
        # Folded before the rewrite too: string_to_array(current_setting('search_path'), …).
        expression = fold_session_functions(expression, values)
        expression = rewrite_catalog_calls(
            expression,
            search_path=search_path,
            regclass=regclass_resolver(search_path, relations),
        )
        expression = inline_builtin_views(
            expression, search_path=search_path, is_relation=lambda name: name in relations
        )
        return fold_session_functions(expression, values)

    async def resolved(
        self, session: Session, expression: exp.Expression
    ) -> tuple[exp.Expression, dict[str, Any]]:
        return await self.c.resolving(lambda state: self.resolve(session, expression, state))

    @staticmethod
    def plan(
        expression: exp.Expression, relations: Mapping[str, Any], *, query_time: int | None = None
    ) -> PlannedQuery:
        """Plan a resolved one-off query (``Get``s name relations by id) with its finishing.

        ``query_time``: what now() and mz_now() are; without it they are refused.
        """
        return plan_select(expression, Compute._by_id(relations), query_time=query_time)

    @staticmethod
    def _by_id(relations: Mapping[str, Any]) -> Any:
        """A planner resolver naming each relation by its id."""

        def resolve(name: str) -> tuple[str, list[tuple[str, str]]] | None:
            relation = relations.get(name)
            return (relation.id, relation_columns(relation)) if relation is not None else None

        return resolve

    @contextlib.asynccontextmanager
    async def early_timestamp(
        self, session: Session, query: Query
    ) -> AsyncIterator[asyncio.Task[int] | None]:
        """The oracle's read timestamp for ``query``, asked for now: a task, or None when the
        query will not read at one (``AS OF``, an explicit transaction, ``serializable``, or
        no table named at all, as ``SELECT 1``).

        Resolving and planning the query then happen while the oracle answers,
        instead of before it asks. The read hold (``compaction``) is taken
        first, so the timestamp is at or after what it holds, as a timestamp
        chosen later would be. An answer not used is dropped.
        """
        if (
            query.as_of is not None
            or transaction.explicit(session) is not None
            or session.get("transaction_isolation") == "serializable"
            or query.expression.find(exp.Table) is None
        ):
            yield None
            return
        with self.c.read_holds.hold():
            early = asyncio.ensure_future(self.read_timestamp(session, None, 0))
            try:
                # Twice round the loop: the task sends its request, NATS's flusher writes it.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                yield early
            finally:
                if not early.done():
                    early.cancel()
                early.add_done_callback(_retrieved)

    async def select(
        self,
        session: Session,
        query: Query,
        expression: exp.Expression,
        relations: dict[str, Any],
        *,
        early: asyncio.Task[int] | None = None,
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        """Read a query on its cluster (``query_cluster``): fast path or a transient dataflow.

        A strict serializable read whose timestamp a replica can no longer read
        (it keeps its inputs' history only from what its dataflows still need:
        a write that completed meanwhile moved them on) reads again at a later
        timestamp, with the oracle moved there first so no later read goes back.
        It tries again as long as the since it missed moves on (each attempt
        reads at or after the last since, so a failure means progress): under
        a burst of writes a read waits, it does not fail. A since that does not
        move is the error.
        """
        missed = -1
        while True:
            try:
                # Whatever timestamp it chooses is at or after the hold (``compaction``).
                with self.c.read_holds.hold():
                    return await self._select_once(session, query, expression, relations, early)
            except LoupeError as error:
                since = _since_of(error)
                pinned = transaction.explicit(session) is not None
                if query.as_of is not None or since is None or since <= missed or pinned:
                    raise
                missed = since
                early = None  # the next attempt reads after the oracle moved on
                log.info("read timestamp no longer readable; reading later", since=since)
                await until_answered(
                    "WriteTimestamp", functools.partial(self.c.oracle.write_timestamp, since)
                )

    async def _select_once(
        self,
        session: Session,
        query: Query,
        expression: exp.Expression,
        relations: dict[str, Any],
        early: asyncio.Task[int] | None = None,
    ) -> tuple[tuple[tuple[str, str], ...], list[tuple[Any, ...]]]:
        logs = self.logs_read(relations)
        cluster = await self.query_cluster(session, relations)
        replica_id = None
        if logs:
            if query.as_of is not None:
                raise no_history(logs)
            replica_id = await self.log_replica(session, cluster, logs)
        inputs = self.inputs(cluster.id)
        # The logs are read at the oracle's time: no shard tells a latest complete one.
        # A transaction's reads all read at its timestamp, whatever the isolation level.
        serializable = (
            query.as_of is None
            and not logs
            and transaction.explicit(session) is None
            and _is_serializable(session, expression)
        )
        planned = None
        if serializable:
            timestamp = 0
        elif early is not None:
            if not early.done():
                # Planned while the oracle answers: unless it asks what time it is.
                with contextlib.suppress(TemporalError):
                    planned = self.plan(expression, relations)
            timestamp = await early
        else:
            timestamp = await self.read_timestamp(session, query.as_of, query.as_of_position)
        if planned is None:
            planned = self.plan(expression, relations, query_time=timestamp or None)
        if not serializable:
            await self.complete_inputs((r.id for r in relations.values()), timestamp)
        statement_logging.note_event(statement_logging.OPTIMIZATION_FINISHED)
        plan, finishing = planned.relation, planned.finishing
        columns = tuple(planned.columns)
        fast = fast_path(plan, inputs.indexes)
        if fast is not None:
            # A serializable fast path peeks at 0: the index's latest complete time.
            index_id, mfp = fast
            statement_logging.note_strategy(statement_logging.FAST_PATH, timestamp=timestamp)
            statement_logging.note_event(statement_logging.DEPENDENCIES_FINISHED)
            index = self.state.objects.get(index_id)

            def dropped() -> str | None:
                """A dropped input, or the peeked index itself dropped."""
                gone = self.dropped_relation(relations)
                if gone is None and index is not None and index_id not in self.state.objects:
                    gone = f'index "{index.full_name}"'
                return gone

            rows = await self.peek(
                session,
                cluster,
                index_id,
                timestamp,
                finishing,
                columns,
                mfp,
                dropped=dropped,
                replica_id=replica_id,
            )
            return columns, rows
        await self.check_materialized_views(relations)
        dataflow_id = self.transient_id()
        dataflow = transient_dataflow(dataflow_id, plan, inputs, timestamp)
        if serializable:
            timestamp = await self.latest_complete(dataflow)
            dataflow = dataclasses.replace(dataflow, as_of=timestamp)
        elif query.as_of is None and transaction.explicit(session) is None:
            fresh = await self.fresh_builtin_timestamp(dataflow, timestamp)
            if fresh > timestamp:
                timestamp = fresh
                planned = self.plan(expression, relations, query_time=timestamp)
                plan, finishing = planned.relation, planned.finishing
                dataflow = transient_dataflow(dataflow_id, plan, inputs, timestamp)
        if query.as_of is not None:
            await self.check_readable(dataflow)
        # Idempotent by dataflow id: asking a busy or restarting controller again is safe.
        await until_answered("CreateDataflow", lambda: self.create_dataflow(cluster.id, dataflow))
        statement_logging.note_strategy(statement_logging.STANDARD, timestamp=timestamp)
        statement_logging.note_event(statement_logging.DEPENDENCIES_FINISHED)
        try:
            rows = await self.peek(
                session,
                cluster,
                peek_index_id(dataflow_id),
                timestamp,
                finishing,
                columns,
                reinstall=lambda: until_answered(
                    "CreateDataflow", lambda: self.create_dataflow(cluster.id, dataflow)
                ),
                dropped=lambda: self.dropped_relation(relations),
                replica_id=replica_id,
            )
        except LoupeError as error:
            if query.as_of is None or not _is_since_error(error):
                raise
            raise _fed_later(error, dataflow, inputs, cluster) from None
        finally:
            # Dropped before the next statement of the session creates another:
            # a replica feeding one input to a dataflow being dropped and a new
            # one at once may answer the new one from the compacted feed.
            await asyncio.shield(self.drop_dataflows(cluster.id, [peek_index_id(dataflow_id)]))
        return columns, rows

    def tables_under(self, ids: Iterable[str]) -> list[Table]:
        """The user tables that the relations ``ids`` read, through views, indexes and MVs."""
        tables = self.state.tables
        return [tables[i] for i in self._relations_under(ids) if i in tables]

    def _relations_under(self, ids: Iterable[str]) -> list[str]:
        """``ids`` and every relation they read, through views, indexes and MVs."""
        objects = self.state.objects
        seen: dict[str, None] = {}
        pending = list(ids)
        while pending:
            relation_id = pending.pop()
            if relation_id in seen:
                continue
            seen[relation_id] = None
            obj = objects.get(relation_id)
            if obj is not None:
                pending.extend(obj.depends_on)
                if obj.on_id:
                    pending.append(obj.on_id)
        return list(seen)

    async def check_materialized_views(self, relations: Mapping[str, Any]) -> None:
        """Raise the error a materialized view under ``relations`` holds, if one does.

        A materialized view whose dataflow holds an error (53200 out of
        memory, a division by zero) writes nothing more to storage, so a read
        of it would wait for a time it never reaches: the read answers the
        error instead. A controller that does not answer in time is not
        waited for (the read goes on).
        """
        ids = [r.id for r in relations.values() if isinstance(r, Table | ComputeObject)]
        views = [
            obj
            for i in self._relations_under(ids)
            if (obj := self.state.objects.get(i)) is not None and obj.type == "materialized-view"
        ]
        by_cluster: dict[str, list[str]] = {}
        for view in views:
            by_cluster.setdefault(view.cluster_id, []).append(view.id)
        for cluster_id, collection_ids in by_cluster.items():
            try:
                response = await self.c.controller.CollectionStatus(
                    controller_pb2.ListFrontiersRequest(
                        cluster_id=cluster_id, collection_ids=collection_ids
                    ),
                    timeout=5,
                )
            except LoupeError as error:
                log.debug("no collection status", ids=collection_ids, error=error.message)
                continue
            for status in response.collections:
                if status.HasField("error") and status.error.code:
                    raise LoupeError.from_proto(status.error)

    def maintained_with(self, table: Table) -> list[Table]:
        """Tables read together with ``table`` by an index or materialized view."""
        together: dict[str, Table] = {}
        for obj in self.state.objects.values():
            if obj.type == "view":
                continue
            under = self.tables_under([obj.id])
            if any(t.id == table.id for t in under):
                together.update((t.id, t) for t in under)
        together.pop(table.id, None)
        return list(together.values())

    async def complete_inputs(self, ids: Iterable[str], timestamp: int) -> None:
        """Move the uppers of the tables under ``ids`` past ``timestamp`` before reading at it."""
        await self.c.tables.advance_to(self.tables_under(ids), timestamp)

    async def query_cluster(self, session: Session, relations: Mapping[str, Any]) -> ClusterInfo:
        """Where a SELECT runs: ``mz_catalog_server`` when it reads only system relations.

        As Materialize routes catalog queries: unless the session names a
        replica (``SET cluster_replica``), which belongs to its own cluster.
        Anything reading a user relation, or a replica's logs
        (``mz_introspection``), runs on the session's cluster.
        """
        user = (Table, ComputeObject, LogRelation)
        system_only = not any(isinstance(r, user) for r in relations.values())
        if system_only and not session.cluster_replica:
            return await self._named_cluster(SYSTEM_CLUSTER_NAME)
        return await self.session_cluster(session)

    def logs_read(self, relations: Mapping[str, Any]) -> list[str]:
        """The raw logs (``mz_introspection``) a query reads, directly or through views."""
        return log_names(self._relations_under(r.id for r in relations.values()))

    async def log_replica(self, session: Session, cluster: ClusterInfo, logs: list[str]) -> str:
        """The replica whose logs a query reads (Materialize's ``check_log_reads``).

        The one ``SET cluster_replica`` names, else the cluster's only one; a
        cluster with several needs the target, and one that keeps no logs
        (``INTROSPECTION INTERVAL = 0``) has none to read.
        """
        _, replica_id = await peek_target_replica(self.c, session, cluster)
        if not replica_id:
            replicas = self.state.replicas_of(cluster.id)
            if len(replicas) != 1:
                raise untargeted_read(logs)
            replica_id = replicas[0].id
        if not cluster.introspection_interval_ns:
            raise introspection_disabled(logs, cluster.name)
        return replica_id

    async def latest_complete(self, dataflow: DataflowDescription) -> int:
        """The latest time every storage input of ``dataflow`` is complete and readable.

        What a serializable read may use instead of the oracle: the least
        upper - 1 of its inputs, not before any input's since.
        """
        frontiers = await asyncio.gather(
            *(asyncio.to_thread(_shard_frontiers, s) for s in dataflow.source_imports)
        )
        if not frontiers:
            return await until_answered("ReadTimestamp", self.c.oracle.read_timestamp)
        since = max(s for s, _ in frontiers)
        return max(since, min(u for _, u in frontiers) - 1)

    async def fresh_builtin_timestamp(self, dataflow: DataflowDescription, read_ts: int) -> int:
        """Where a strict serializable read of builtin collections only reads: ``read_ts``,
        unless the storage writer has written past it (it picks its flushes' times from
        the wall clock, ahead of the oracle's once-a-second ticks); then the inputs' latest
        complete time, with the oracle moved there first so every later read sees what
        this one does. Without it a statement log row waits up to a tick to show."""
        sources = dataflow.source_imports
        if not sources or any(s.id not in BUILTIN_BY_ID for s in sources):
            return read_ts
        if any(i.on_id not in BUILTIN_BY_ID for i in dataflow.index_imports):
            return read_ts
        frontiers = await asyncio.gather(*(asyncio.to_thread(_shard_newest, s) for s in sources))
        newest = max(n for _, n in frontiers)
        complete = min(u for u, _ in frontiers) - 1
        if newest <= read_ts or complete <= read_ts:
            return read_ts
        try:
            await self.c.oracle.write_timestamp(at_least=complete)
        except LoupeError as error:
            log.warning("could not advance the timestamp oracle", error=error.message)
            return read_ts
        return complete

    async def check_readable(self, dataflow: DataflowDescription) -> None:
        """Refuse an as_of before the since of a storage collection the dataflow reads."""
        for source in dataflow.source_imports:
            since = await asyncio.to_thread(_shard_since, source)
            if since > dataflow.as_of:
                raise LoupeError(
                    SqlState.INTERNAL_ERROR,
                    f"Timestamp ({dataflow.as_of}) is not valid for all inputs: "
                    f"{source.id} since {since}",
                    hint=f"Read AS OF {since} or later.",
                )

    async def read_timestamp(
        self,
        session: Session,
        as_of: exp.Expression | None,
        position: int,
        *,
        subscribe: bool = False,
    ) -> int:
        """``AS OF`` if given, else the oracle's read timestamp (strict serializable).

        In an explicit transaction, the timestamp its first read chose
        (``sequencer.transaction``); a read the transaction may not do fails here.
        """
        pinned = transaction.pinned_timestamp(session, subscribe=subscribe)
        if as_of is not None:
            return as_of_timestamp(as_of, position)
        if pinned is not None:
            return pinned
        timestamp = await until_answered("ReadTimestamp", self.c.oracle.read_timestamp)
        transaction.pin(session, timestamp)
        return timestamp

    async def session_cluster(self, session: Session) -> ClusterInfo:
        cluster = await self.c.cluster(session.cluster)
        if cluster is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{session.cluster}'")
        return cluster

    async def peek(
        self,
        session: Session,
        cluster: ClusterInfo,
        target_id: str,
        timestamp: int,
        finishing: mir.Finishing,
        columns: tuple[tuple[str, str], ...],
        mfp: Any = None,
        reinstall: Callable[[], Awaitable[None]] | None = None,
        dropped: Callable[[], str | None] | None = None,
        replica_id: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """Peek index ``target_id`` at ``timestamp`` on the session's cluster (or replica).

        A controller that does not know the index (it restarted and was not
        sent its dataflows again yet) is waited for: a catalog index comes back
        with every other (``install_all`` on ``ControllerStarted``); a
        transient dataflow is sent again by ``reinstall``. ``dropped`` names a
        relation the read depends on that was dropped (``dropped_relation``):
        the wait then ends with 42704. ``replica_id``: the replica a log read
        targets (``log_replica``), instead of the session's.
        """
        if replica_id is None:
            _, replica_id = await peek_target_replica(self.c, session, cluster)
        peek = compute_pb2.Peek(
            uuid=str(uuid.uuid4()),
            timestamp=timestamp,
            target_id=target_id,
            finishing=finishing_proto(finishing),
            result_desc=codec.desc_to_proto(columns),
        )
        if mfp is not None:
            peek.map_filter_project.CopyFrom(codec.mfp_to_proto(mfp))
        request = controller_pb2.PeekRequest(
            cluster_id=cluster.id,
            replica_id=replica_id,
            peek=peek,
        )
        obj = self.state.objects.get(target_id)
        pause = RETRY_PAUSE
        try:
            while True:
                try:
                    _, rows = await send_peek(
                        self.c, request, reading=self._reading(target_id, cluster), dropped=dropped
                    )
                    break
                except LoupeError as error:
                    installed_again = reinstall is not None or target_id in self.state.objects
                    if error.code != "NOT_FOUND" or not installed_again:
                        raise
                    if pause == RETRY_PAUSE:
                        log.info(
                            "the controller lacks the peeked index; waiting", error=error.message
                        )
                    if reinstall is not None:
                        await reinstall()
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, RETRY_PAUSE_CAP)
        except LoupeError as error:
            # The controller knows what was dropped by id only: name it as the user does.
            if error.code == SqlState.UNDEFINED_OBJECT:
                if obj is not None:
                    error.message = error.message.replace(f'"{target_id}"', f'"{obj.full_name}"')
                error.message = error.message.replace(
                    f"cluster {cluster.id} does not exist", f'cluster "{cluster.name}" was dropped'
                )
            raise
        return rows

    def dropped_relation(self, relations: dict[str, Any]) -> str | None:
        """The first of a read's ``relations`` the catalog no longer has (``table "db.s.t"``).

        A read of a transient dataflow whose input table was dropped while it
        waited would wait forever: the table's upper no longer moves.
        """
        state = self.state
        for relation in relations.values():
            if relation.id in BUILTIN_BY_ID or relation.id in state.tables:
                continue
            if isinstance(relation, LogRelation | ReplicaView):
                continue  # a replica's logs, or persisted builtin collections
            if relation.id in state.objects:
                continue
            kind = "table" if isinstance(relation, Table) else relation.type.replace("-", " ")
            return f'{kind} "{relation.full_name}"'
        return None

    def _reading(self, target_id: str, cluster: ClusterInfo) -> str:
        """What a peek of ``target_id`` reads, in words (for a log line about its wait)."""
        obj = self.state.objects.get(target_id)
        what = obj.full_name if obj is not None else f"transient dataflow {target_id}"
        return f"{what} on cluster '{cluster.name}'"

    def transient_id(self) -> str:
        return f"t{next(self._transient)}"

    # -- dataflows ----------------------------------------------------------------------

    def inputs(self, cluster_id: str, state: CatalogState | None = None) -> Inputs:
        state = state or self.state
        relations: dict[str, Any] = {b.id: b for b in BY_QUALIFIED_NAME.values()}
        relations.update(LOG_BY_ID)
        relations.update(state.tables)
        relations.update({o.id: o for o in state.objects.values() if o.type != "index"})
        indexes: dict[str, ComputeObject] = {}
        for obj in state.objects.values():
            if obj.type == "index" and obj.cluster_id == cluster_id:
                indexes.setdefault(obj.on_id, obj)
        return Inputs(cluster_id, state.compute_objects, relations, indexes, self.metadata)

    def metadata(self, relation: Any) -> common_pb2.CollectionMetadata:
        """Where a table, materialized view, builtin collection or replica's log lives."""
        if isinstance(relation, LogRelation):
            return log_metadata(relation)
        if isinstance(relation, Table):
            self._require_storage()
            return self.c.tables.metadata(relation)
        if isinstance(relation, ComputeObject):
            self._require_storage()
            return common_pb2.CollectionMetadata(
                collection_id=relation.id,
                shard_id=relation.shard_id,
                blob_uri=self.c.tables.blob_uri,
                consensus_uri=self.c.tables.consensus_uri,
                relation_desc=codec.desc_to_proto(relation.storage_columns),
            )
        metadata = self.c.collections.get(relation.id)
        if metadata is None:
            raise LoupeError(
                SqlState.INTERNAL_ERROR,
                f"storage collection of {relation.qualified_name} ({relation.id}) is unknown",
            )
        return metadata

    def _require_storage(self) -> None:
        if not self.c.tables.is_open:
            raise LoupeError("FAILED_PRECONDITION", "storage is not known yet; try again")

    async def create_dataflow(self, cluster_id: str, dataflow: DataflowDescription) -> None:
        log.debug("create dataflow", id=dataflow.id, cluster_id=cluster_id, as_of=dataflow.as_of)
        await self.c.controller.CreateDataflow(
            controller_pb2.CreateDataflowRequest(
                cluster_id=cluster_id, dataflow=codec.dataflow_to_proto(dataflow)
            )
        )

    async def drop_dataflows(self, cluster_id: str, collection_ids: list[str]) -> None:
        """Tell the controller nothing will read ``collection_ids`` again."""
        try:
            await self.c.controller.AllowCompaction(
                controller_pb2.AllowCompactionRequest(
                    cluster_id=cluster_id, collection_ids=collection_ids, empty=True
                )
            )
        except LoupeError as error:
            log.warning("could not drop dataflows", ids=collection_ids, error=error.message)

    def object_dataflow(
        self, obj: ComputeObject, as_of: int, state: CatalogState | None = None
    ) -> DataflowDescription:
        """The dataflow maintaining an index or a materialized view."""
        inputs = self.inputs(obj.cluster_id, state)
        if obj.type == "index":
            return index_dataflow(obj, inputs, as_of)
        return materialized_view_dataflow(obj, inputs, as_of, self.metadata(obj))

    async def install_all(self) -> None:
        """Send every index's and materialized view's dataflow again (at start)."""
        state = self.state
        maintained = [o for o in state.objects.values() if o.type != "view"]
        if not maintained:
            return
        as_of = await self.c.oracle.read_timestamp()
        for obj in maintained:
            try:
                if obj.type == "materialized-view":
                    await self.ensure_shard(obj)
                await self.create_dataflow(obj.cluster_id, self.object_dataflow(obj, as_of, state))
            except LoupeError as error:
                log.warning("could not install a dataflow", id=obj.id, error=error.message)

    async def _install(self, obj: ComputeObject) -> None:
        """Send a new index's or materialized view's dataflow, at the oracle's time."""
        # The indexes it imports must stay readable at that time until it arrives.
        with self.c.read_holds.hold():
            as_of = await self.c.oracle.read_timestamp()
            await self.complete_inputs([obj.id], as_of)
            await self.create_dataflow(obj.cluster_id, self.object_dataflow(obj, as_of))

    async def compact(self, pinned: list[int]) -> None:
        """One round of compute compaction (``compaction``): move every index's and
        materialized view's since to the read policy's, short of the read holds and of
        ``pinned`` (the open transactions' timestamps)."""
        holds = self.c.read_holds
        now = await self.c.oracle.read_timestamp()
        holds.floor = max(holds.floor, now)
        window = int(self.config.compute_compaction_window * 1000)
        by_cluster: dict[str, set[str]] = {}
        for obj in self.state.objects.values():
            if obj.type in ("index", "materialized-view") and obj.cluster_id:
                by_cluster.setdefault(obj.cluster_id, set()).add(obj.id)
        for cluster_id, ids in by_cluster.items():
            try:
                # All of the cluster's: one not created there yet would fail the request.
                response = await self.c.controller.ListFrontiers(
                    controller_pb2.ListFrontiersRequest(cluster_id=cluster_id), timeout=5
                )
            except LoupeError as error:
                log.debug("no frontiers to compact by", cluster_id=cluster_id, error=error.message)
                continue
            moves: dict[int, list[str]] = {}
            for collection in response.collections:
                if collection.collection_id not in ids:
                    continue  # a transient dataflow or a subscribe: held by its reader
                held = holds.least(collection.collection_id, pinned)
                target = compaction_target(
                    now, window, collection.write_frontier, held, collection.since
                )
                if target is not None:
                    moves.setdefault(target, []).append(collection.collection_id)
            for since, collection_ids in moves.items():
                await self.c.controller.AllowCompaction(
                    controller_pb2.AllowCompactionRequest(
                        cluster_id=cluster_id, collection_ids=collection_ids, since=since
                    ),
                    timeout=5,
                )

    async def ensure_shard(self, view: ComputeObject) -> None:
        """Create a materialized view's shard (empty) if it does not exist yet."""
        self._require_storage()
        shard = self.c.tables.shard(view.shard_id)
        await asyncio.to_thread(shard.ensure, view.storage_columns)

    # -- CREATE -------------------------------------------------------------------------

    async def create(self, session: Session, statement: Statement) -> StatementResult | Streaming:
        match statement:
            case CreateView():
                return await self.create_view(session, statement)
            case CreateIndex():
                return await self.create_index(session, statement)
        raise TypeError(f"not a CREATE: {statement!r}")

    async def create_view(
        self, session: Session, statement: CreateView
    ) -> StatementResult | Streaming:
        ddl.require_superuser(session, statement)
        database, schema = ddl.target_schema(self.c, session, statement.name)
        existing = self.state.item_named(schema.id, statement.name.name)
        if existing is not None and statement.if_not_exists:
            return _skipped(statement, statement.name.name)
        query = self.inline_views(session, statement.query.expression)
        expression, relations = await self.resolved(session, query)
        plan_query(expression, self._by_id(relations))  # refuse what does not plan
        kind = "materialized-view" if statement.materialized else "view"
        logs = self.logs_read(relations)
        if statement.materialized and logs:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "materialized view objects cannot depend on log sources",
                detail=log_detail(logs).replace("query references", "object depends on"),
            )
        qualified, _ = qualify(expression, relations)
        name = ".".join(quote(p) for p in (database, schema.name, statement.name.name))
        cluster_id = ""
        if statement.materialized:
            cluster_id = (await self._named_cluster(statement.cluster or session.cluster)).id
        item = catalog_pb2.Item(
            schema_id=schema.id,
            name=statement.name.name,
            type=kind,
            owner_id=ddl.owner_id(self.c, session),
            create_sql=view_sql(kind, name, qualified),
            cluster_id=cluster_id,
        )
        created = await self._create_item(session, statement, item)
        if created is None:
            return _skipped(statement, statement.name.name)
        result, obj = created
        if obj.type == "view":
            return result
        await self.ensure_shard(obj)
        await self._install(obj)
        return Streaming(self._hydrating(obj, result))

    async def create_index(
        self, session: Session, statement: CreateIndex
    ) -> StatementResult | Streaming:
        ddl.require_superuser(session, statement)
        target = await self._relation(session, statement.on)
        columns = relation_columns(target)
        names = [name for name, _ in statement.columns]
        for name, position in statement.columns:
            if name not in {c for c, _ in columns}:
                raise LoupeError(
                    SqlState.UNDEFINED_COLUMN, f'column "{name}" does not exist', position=position
                )
        index_key(columns, names)
        if statement.unique and not isinstance(target, Table):
            raise LoupeError(
                WRONG_OBJECT_TYPE, f"cannot create a unique index on '{statement.on}': not a table"
            )
        if statement.unique:
            contents = await self.c.tables.contents(target)
            check_unique_contents(contents, statement.name or "index", names)
        cluster = await self._named_cluster(statement.cluster or session.cluster)
        index_name = statement.name or _default_index_name(target.qualified_name, names)
        schema = self.state.schemas.get(getattr(target, "schema_id", ""))
        if schema is None:
            raise LoupeError(WRONG_OBJECT_TYPE, f"cannot create an index on '{statement.on}'")
        if statement.if_not_exists and self.state.item_named(schema.id, index_name):
            return _skipped(statement, index_name)
        item = catalog_pb2.Item(
            schema_id=schema.id,
            name=index_name,
            type="index",
            owner_id=ddl.owner_id(self.c, session),
            create_sql=index_sql(
                index_name,
                full_name(target),
                names or [c for c, _ in columns],
                unique=statement.unique,
            ),
            cluster_id=cluster.id,
        )
        created = await self._create_item(session, statement, item)
        if created is None:
            return _skipped(statement, index_name)
        result, obj = created
        await self._install(obj)
        return Streaming(self._hydrating(obj, result))

    async def _create_item(
        self, session: Session, statement: Statement, item: catalog_pb2.Item
    ) -> tuple[StatementResult, ComputeObject] | None:
        """Commit ``item``; (result, its planned object), or None if it existed (IF NOT EXISTS)."""
        op = catalog_pb2.CatalogOp(create_item=catalog_pb2.CreateItem(item=item))
        try:
            response, result = await ddl.transact(self.c, session, statement, [op])
        except LoupeError as error:
            if error.code == SqlState.DUPLICATE_OBJECT and getattr(
                statement, "if_not_exists", False
            ):
                return None
            raise
        created = next(
            (c.item_created for c in response.changes if c.WhichOneof("kind") == "item_created"),
            None,
        ) or self.state.item_named(item.schema_id, item.name)
        obj = self.state.objects.get(created.id) if created is not None else None
        if obj is None:
            raise LoupeError(
                SqlState.INTERNAL_ERROR, f"{statement.tag} committed, but its definition is unknown"
            )
        return result, obj

    async def _hydrating(self, obj: ComputeObject, result: StatementResult) -> AsyncIterator[Event]:
        """The statement's notices, hydration progress until hydrated (bounded), then its tag."""
        for notice in result.notices:
            yield notice
        deadline = time.monotonic() + self.config.hydration_wait
        last: Progress | None = None
        while time.monotonic() < deadline:
            try:
                progress = await self._hydration(obj)
            except LoupeError as error:
                # Committed and maintained: reads of it fail until the data changes.
                yield Notice("WARNING", f"{obj.full_name} holds an error: {error.message}")
                break
            if progress is None:
                break
            # A new report when the work moved (the ETA alone moves with the clock).
            if last is None or dataclasses.replace(progress, eta_ms=None) != dataclasses.replace(
                last, eta_ms=None
            ):
                yield progress
                last = progress
            if progress.hydrated:
                break
            await asyncio.sleep(self.config.hydration_poll_interval)
        yield Complete(result.tag)

    async def _hydration(self, obj: ComputeObject) -> Progress | None:
        """The dataflow's hydration as the controller reports it; None when it reports nothing."""
        try:
            response = await self.c.controller.CollectionStatus(
                controller_pb2.ListFrontiersRequest(
                    cluster_id=obj.cluster_id, collection_ids=[obj.id]
                ),
                timeout=5,
            )
        except LoupeError as error:
            log.debug("no hydration status", id=obj.id, error=error.message)
            return None
        status = next((s for s in response.collections if s.collection_id == obj.id), None)
        if status is None:
            return None
        if status.HasField("error") and status.error.code:
            raise LoupeError.from_proto(status.error)
        return hydration_progress(obj.full_name, status.hydration, time.time_ns() // 1_000_000)

    async def _named_cluster(self, name: str) -> ClusterInfo:
        cluster = await self.c.cluster(name)
        if cluster is None:
            raise LoupeError(SqlState.UNDEFINED_OBJECT, f"unknown cluster '{name}'")
        return cluster

    async def relation_named(self, session: Session, name: ObjectName) -> Any:
        """The relation ``name`` refers to: a table, view, MV or system relation (42P01 if none)."""
        table = exp.to_table(".".join(quote(p) for p in name.parts), dialect="postgres")
        for part in table.parts:
            part.meta["start"] = name.position - 1
        _, relations = await self.resolved(session, exp.select("*").from_(table))
        return next(iter(relations.values()))

    async def _relation(self, session: Session, name: ObjectName) -> Any:
        """The table, view or materialized view ``name`` refers to (42P01 if none)."""
        relation = await self.relation_named(session, name)
        if not isinstance(relation, Table | ComputeObject):
            raise LoupeError(
                SqlState.INSUFFICIENT_PRIVILEGE,
                f"system relation '{relation.qualified_name}' cannot be indexed",
                position=name.position,
            )
        return relation

    # -- DROP ---------------------------------------------------------------------------

    async def drop(self, session: Session, statement: DropObjects) -> StatementResult:
        ddl.require_superuser(session, statement)
        notices: list[Notice] = []
        targets: list[Any] = []
        word = statement.kind.replace("-", " ")
        for name in statement.names:
            found: Any = await self._object_named(session, name)
            if found is None or statement.kind == "source":
                found = await self._source_named(session, name) or found
            if found is None:
                if not statement.if_exists:
                    raise LoupeError(
                        SqlState.UNDEFINED_OBJECT
                        if statement.kind == "index"
                        else SqlState.UNDEFINED_TABLE,
                        f"unknown catalog item '{name}'",
                        position=name.position,
                    )
                notices.append(Notice("NOTICE", f'{word} "{name}" does not exist, skipping'))
                continue
            if found.type != statement.kind:
                raise LoupeError(
                    WRONG_OBJECT_TYPE,
                    f"'{name}' is a {found.type.replace('-', ' ')}, not a {word}",
                    position=name.position,
                )
            targets.append(found)
            if isinstance(found, SourceItem):
                targets.extend(self._source_tables(found))
        if not targets:
            return StatementResult(tag=statement.tag, notices=notices)
        result = await self.drop_items(session, statement, targets, cascade=statement.cascade)
        result.notices[:0] = notices
        return result

    async def drop_items(
        self, session: Session, statement: Statement, targets: list[Any], *, cascade: bool
    ) -> StatementResult:
        """Drop ``targets`` (and, with ``cascade``, what depends on them); 2BP01 otherwise."""
        state = self.state
        ids = list(dict.fromkeys(t.id for t in targets))
        dependent = [d for d in dependents(ids, state.objects) if d.id not in ids]
        # A table's indexes go with it, as in PostgreSQL; other dependents need CASCADE.
        tables = {t.id for t in targets if isinstance(t, Table)}
        blocking = [d for d in dependent if not (d.type == "index" and d.on_id in tables)]
        if blocking and not cascade:
            dependent = blocking
            target = targets[0]
            names = ", ".join(f"{d.type.replace('-', ' ')} {d.full_name}" for d in dependent)
            raise LoupeError(
                DEPENDENT_OBJECTS_STILL_EXIST,
                f"cannot drop {getattr(target, 'full_name', target.id)}: "
                f"still depended upon by {names}",
                detail="Use DROP … CASCADE to drop the dependent objects too.",
                position=statement.position,
            )
        # Dependents first: nothing is ever left reading a dropped object.
        doomed = [*reversed(dependent), *targets]
        ops = [
            catalog_pb2.CatalogOp(drop_item=catalog_pb2.DropItem(id=item_id))
            for item_id in dict.fromkeys(t.id for t in doomed)
        ]
        _, result = await ddl.transact(self.c, session, statement, ops)
        await self._free(doomed)
        return result

    async def _free(self, dropped: list[Any]) -> None:
        """Drop the dataflows of the dropped indexes and materialized views, per cluster."""
        by_cluster: dict[str, list[str]] = {}
        for obj in dropped:
            if isinstance(obj, ComputeObject) and obj.type in ("index", "materialized-view"):
                by_cluster.setdefault(obj.cluster_id, []).append(obj.id)
        for cluster_id, collection_ids in by_cluster.items():
            await self.drop_dataflows(cluster_id, collection_ids)

    async def drop_cluster(self, session: Session, statement: DropCluster) -> StatementResult:
        """``DROP CLUSTER``: its indexes and materialized views (and their dependents) need CASCADE."""
        ddl.require_superuser(session, statement)
        cluster = await self.c.cluster(statement.name)
        state = self.state
        maintained = [
            o for o in state.objects.values() if cluster is not None and o.cluster_id == cluster.id
        ]
        replicas = {r.id for r in state.replicas_of(cluster.id)} if cluster is not None else set()
        doomed = [
            *maintained,
            *dependents([o.id for o in maintained], state.objects),
            *self.replica_view_dependents(replicas),
        ]
        doomed = list({o.id: o for o in doomed}.values())
        if doomed and not statement.cascade:
            names = ", ".join(f"{o.type.replace('-', ' ')} {o.full_name}" for o in doomed)
            raise LoupeError(
                DEPENDENT_OBJECTS_STILL_EXIST,
                f"cannot drop cluster {statement.name!r}: still depended upon by {names}",
                detail="Use DROP CLUSTER … CASCADE to drop the dependent objects too.",
                position=statement.position,
            )
        return await self._drop_with(session, statement, doomed)

    async def drop_cluster_replica(
        self, session: Session, statement: DropClusterReplica
    ) -> StatementResult:
        """``DROP CLUSTER REPLICA``: objects reading its introspection views need ``CASCADE``."""
        ddl.require_superuser(session, statement)
        cluster = await self.c.cluster(statement.cluster)
        replica = self.state.replica(cluster.id, statement.replica) if cluster else None
        doomed = self.replica_view_dependents({replica.id}) if replica is not None else []
        if doomed and not statement.cascade:
            names = ", ".join(f'{o.type.replace("-", " ")} "{o.full_name}"' for o in doomed)
            raise LoupeError(
                DEPENDENT_OBJECTS_STILL_EXIST,
                f'cannot drop cluster replica "{statement.cluster}.{statement.replica}": '
                f"still depended upon by {names}",
                hint="Use DROP ... CASCADE to drop the dependent objects too.",
                position=statement.position,
            )
        return await self._drop_with(session, statement, doomed)

    async def _drop_with(
        self,
        session: Session,
        statement: DropCluster | DropClusterReplica,
        doomed: list[ComputeObject],
    ) -> StatementResult:
        """Commit ``statement`` with the drop of ``doomed`` (newest first), then free their
        dataflows."""
        ordered = sorted(doomed, key=lambda o: id_order(o.id), reverse=True)
        ops = [catalog_pb2.CatalogOp(drop_item=catalog_pb2.DropItem(id=o.id)) for o in ordered]
        ops.append(catalog_op(statement, owner_id=ddl.owner_id(self.c, session)))
        _, result = await ddl.transact(self.c, session, statement, ops)
        await self._free(doomed)
        return result

    def replica_view_dependents(self, replica_ids: set[str]) -> list[ComputeObject]:
        """The objects reading a per-replica introspection view of ``replica_ids``, at any depth."""
        objects = self.state.objects
        views = {
            d
            for obj in objects.values()
            for d in obj.depends_on
            if (split := split_replica_view(d)) is not None and split[1] in replica_ids
        }
        return dependents(views, objects) if views else []

    async def _source_named(self, session: Session, name: ObjectName) -> SourceItem | None:
        """The source item ``name`` refers to, if there is one."""
        for state in (self.state, await self.c.refreshed_state()):
            parts = name.parts
            database = parts[0] if len(parts) == 3 else session.database
            schemas = [parts[-2]] if len(parts) > 1 else search_path_schemas(session.search_path)
            for schema_name in schemas:
                schema = state.schema_named(database, schema_name)
                item = state.item_named(schema.id, name.name) if schema is not None else None
                if item is not None and item.type == "source":
                    return SourceItem(
                        item.id, f"{database}.{schema_name}.{item.name}", item.schema_id
                    )
        return None

    def _source_tables(self, source: SourceItem) -> list[Table]:
        """The tables a load generator source created: the TPC-H tables of its schema."""
        from loupe.loadgen.tpch import TPCH_TABLES

        return [
            t
            for t in self.state.tables.values()
            if t.schema_id == source.schema_id and t.name in TPCH_TABLES
        ]

    async def _object_named(self, session: Session, name: ObjectName) -> ComputeObject | None:
        found = self._find_object(session, name, self.state)
        if found is None:
            found = self._find_object(session, name, await self.c.refreshed_state())
        return found

    @staticmethod
    def _find_object(
        session: Session, name: ObjectName, state: CatalogState
    ) -> ComputeObject | None:
        parts = name.parts
        database = parts[0] if len(parts) == 3 else session.database
        schemas = [parts[-2]] if len(parts) > 1 else search_path_schemas(session.search_path)
        for obj in state.objects.values():
            if obj.database == database and obj.schema in schemas and obj.name == name.name:
                return obj
        return None

    # -- SUBSCRIBE ----------------------------------------------------------------------

    async def subscribe(self, session: Session, statement: Subscribe) -> Streaming:
        query = self.inline_views(session, statement.query.expression)
        expression, relations = await self.resolved(session, query)
        plan = plan_query(expression, self._by_id(relations))
        cluster = await self.session_cluster(session)
        logs = self.logs_read(relations)
        if logs:
            await self.check_log_subscribe(session, cluster, logs, statement.as_of)
        timestamp = await self.read_timestamp(
            session, statement.as_of, statement.as_of_position, subscribe=True
        )
        if statement.as_of is None:
            await self.complete_inputs((r.id for r in relations.values()), timestamp)
        dataflow_id = self.transient_id()
        dataflow = transient_dataflow(
            dataflow_id,
            plan,
            self.inputs(cluster.id),
            timestamp,
            subscribe=True,
            snapshot=statement.snapshot,
        )
        return Streaming(self._subscription(cluster, dataflow, plan))

    async def check_log_subscribe(
        self, session: Session, cluster: ClusterInfo, logs: list[str], as_of: Any
    ) -> None:
        """A SUBSCRIBE to logs: as a read of them, on a cluster with one replica.

        A subscribe's dataflow runs on every replica of the cluster, and its
        batches come from whichever answers first: with several replicas they
        would mix the logs of several, whatever ``cluster_replica`` says.
        """
        if as_of is not None:
            raise no_history(logs)
        replica_id = await self.log_replica(session, cluster, logs)
        if len(self.state.replicas_of(cluster.id)) > 1:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "SUBSCRIBE to log sources needs a cluster with a single replica",
                detail=log_detail(logs),
                hint=f"SUBSCRIBE to the persisted mz_internal relations "
                f"(WHERE replica_id = '{replica_id}') instead.",
            )

    async def _subscription(
        self, cluster: ClusterInfo, dataflow: DataflowDescription, plan: mir.Relation
    ) -> AsyncIterator[Event]:
        """Rows ``(mz_timestamp, mz_diff, columns…)`` as the dataflow's batches arrive."""
        batches: asyncio.Queue[compute_pb2.SubscribeBatch] = asyncio.Queue()

        async def received(batch: compute_pb2.SubscribeBatch, _: Any) -> None:
            batches.put_nowait(batch)

        subscription = await nats_subscribe(
            self.c.connection,
            SUBSCRIBE_SUBJECT.format(sink_id=dataflow.id),
            compute_pb2.SubscribeBatch,
            received,
        )
        # A replica that restarts replays the subscribe from its as_of: the indexes it
        # reads must still be readable there (``compaction``).
        imported = [i.index_id for i in dataflow.index_imports]
        held = (
            self.c.read_holds.hold(dataflow.as_of, imported)
            if imported
            else contextlib.nullcontext()
        )
        with held:
            try:
                await self.create_dataflow(cluster.id, dataflow)
                yield Description((*SUBSCRIBE_COLUMNS, *plan.columns))
                upper = 0
                while True:
                    batch = await batches.get()
                    if batch.HasField("error") and batch.error.code:
                        raise LoupeError.from_proto(batch.error)
                    if batch.upper <= upper:
                        continue  # a duplicate
                    upper = batch.upper
                    updates = sorted(batch.updates, key=lambda u: u.time)
                    rows = [(u.time, u.diff, *from_row(u.row)) for u in updates]
                    if rows:
                        yield RowBatch(rows, streaming=True)
            finally:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
                # Shielded: the stream is usually closed because its task was canceled.
                await asyncio.shield(self.drop_dataflows(cluster.id, [dataflow.id]))

    # -- EXPLAIN ------------------------------------------------------------------------

    async def explain_object(
        self, session: Session, statement: Explain
    ) -> tuple[str, mir.Relation]:
        """(name, plan) of the stored definition ``EXPLAIN … FOR <kind> <name>`` names."""
        assert statement.object_name is not None
        obj = await self._object_named(session, statement.object_name)
        word = statement.object_kind.replace("-", " ")
        if obj is None:
            raise LoupeError(
                SqlState.UNDEFINED_TABLE,
                f"unknown catalog item '{statement.object_name}'",
                position=statement.object_name.position,
            )
        if obj.type != statement.object_kind:
            raise LoupeError(
                WRONG_OBJECT_TYPE,
                f"'{statement.object_name}' is a {obj.type.replace('-', ' ')}, not a {word}",
                position=statement.object_name.position,
            )
        if obj.type == "index":
            target = self.state.objects.get(obj.on_id) or self.state.tables.get(obj.on_id)
            columns = tuple(relation_columns(target)) if target is not None else obj.columns
            name = getattr(target, "full_name", obj.on_id)
            # An index on a view builds the view; one on a materialized view (or a
            # table) reads its storage collection, as its dataflow does.
            if (
                isinstance(target, ComputeObject)
                and target.type == "view"
                and target.query is not None
            ):
                return obj.full_name, self._plan_by_name(target.query)
            return obj.full_name, mir.Get(name, columns)
        assert obj.query is not None
        return obj.full_name, self._plan_by_name(obj.query)

    def _plan_by_name(self, query: exp.Expression) -> mir.Relation:
        """A stored definition's plan with relations named as EXPLAIN shows them."""
        state = self.state

        def resolve(name: str) -> tuple[str, list[tuple[str, str]]] | None:
            relation = state.relation_named(name)
            if relation is None:
                return None
            return plan_name(relation), relation_columns(relation)

        return plan_query(query, resolve)


def hydration_progress(
    name: str, reports: Sequence[compute_pb2.Hydration], now_ms: int
) -> Progress:
    """The ``Progress`` of ``name`` from its replicas' ``Hydration`` reports.

    The replica furthest along counts (the object is usable once one replica
    has it): hydrated first, then the larger share of its estimate done. Its
    rate is the records its nodes processed since its first update
    (``started_at_ms``, wall clock; its installation, ``installed_at_ms``, when
    the replica does not say) over the time since; the ETA is what is left of
    the estimate at that rate (None without a rate or once the estimate is
    passed, 0 once hydrated).
    """
    if not reports:
        return Progress(name, 0, 0, 0, False)

    def share(h: compute_pb2.Hydration) -> float:
        return h.records_done / h.records_estimated if h.records_estimated else 0.0

    best = max(reports, key=lambda h: (h.hydrated, share(h), h.nodes_hydrated, h.records_read))
    eta_ms: int | None = None
    if best.hydrated:
        eta_ms = 0
    else:
        since = best.started_at_ms or best.installed_at_ms
        left = best.records_estimated - best.records_done
        if since and best.records_done and now_ms > since and left > 0:
            rate = best.records_done / (now_ms - since)  # records per ms
            eta_ms = math.ceil(left / rate)
    return Progress(
        name,
        best.nodes_hydrated,
        best.nodes_total,
        best.records_read,
        best.hydrated,
        records_done=best.records_done,
        records_estimated=best.records_estimated,
        eta_ms=eta_ms,
    )


@dataclass(frozen=True)
class SourceItem:
    """A source as DROP sees it: it takes its load generator's tables with it."""

    id: str
    full_name: str
    schema_id: str
    type: str = "source"


def _shard_since(source: SourceImport) -> int:
    return _shard_frontiers(source)[0]


# Every read of an input's frontiers (strict serializable reads of system relations
# among them) goes through one opened location, not a new SQLite connection each.
_SHARDS = ShardCache()


def _shard_state(source: SourceImport) -> ShardState | None:
    return _SHARDS.shard(source.shard_id, source).state(missing_ok=True)


def _shard_frontiers(source: SourceImport) -> tuple[int, int]:
    """(since, upper) of a storage input's shard; (0, 0) before it exists."""
    state = _shard_state(source)
    return (state.since, state.upper) if state is not None else (0, 0)


def _shard_newest(source: SourceImport) -> tuple[int, int]:
    """(upper, the latest time an update of it may have) of a storage input's shard."""
    state = _shard_state(source)
    if state is None:
        return 0, 0
    return state.upper, max((p.upper - 1 for p in state.parts if p.rows), default=0)


def _is_since_error(error: LoupeError) -> bool:
    return error.code == SqlState.INTERNAL_ERROR and "is not valid for all inputs" in error.message


def _since_of(error: LoupeError) -> int | None:
    """The since a replica's "not valid for all inputs" error names, if it is one."""
    if not _is_since_error(error):
        return None
    found = re.search(r"since (\d+)", error.message)
    return int(found.group(1)) if found else None


def _fed_later(
    error: LoupeError, dataflow: DataflowDescription, inputs: Inputs, cluster: ClusterInfo
) -> LoupeError:
    """A replica's since error for an ``AS OF`` read whose inputs storage still has.

    ``check_readable`` found every input readable at the as_of in storage, so
    the replica refused it: a replica feeds each input once to all its
    dataflows and keeps its history only from the earliest time they read
    (the engine's shared source logs). Say which inputs, not the transient
    index the replica names.
    """
    names = ", ".join(
        plan_name(inputs.relations[s.id]) if s.id in inputs.relations else s.id
        for s in dataflow.source_imports
    )
    return LoupeError(
        error.code,
        f"Timestamp ({dataflow.as_of}) is not valid for all inputs: cluster '{cluster.name}' "
        f"reads {names or 'its inputs'} only from a later time on, for the dataflows it maintains",
        detail=error.message,
        hint=f"{error.hint} Or read on a cluster that maintains nothing over them (SET cluster).",
    )


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Done callback of a task whose result may go unused: its exception is seen, not logged
    as never retrieved."""
    if not task.cancelled():
        task.exception()


def _is_serializable(session: Session, expression: exp.Expression) -> bool:
    """Whether a read may use its inputs' latest complete time instead of the oracle's.

    ``transaction_isolation = serializable``, unless the query asks what time
    it is (``mz_now()``, ``now()``): that needs a timestamp before planning.
    """
    if session.get("transaction_isolation") != "serializable":
        return False
    return not any(
        isinstance(node, exp.CurrentTimestamp)
        or (isinstance(node, exp.Anonymous) and str(node.name).lower() == "mz_now")
        for node in expression.walk()
    )


def plan_name(relation: Any) -> str:
    """How EXPLAIN names a relation: ``database.schema.name``, builtins ``schema.name``."""
    return getattr(relation, "full_name", None) or relation.qualified_name


def explain_text(plan: mir.Relation, stage: str, node_ids: bool, name: str) -> str:
    lowered = lower_to_lir(plan) if stage == "physical" else plan
    return explain(lowered, node_ids=node_ids, name=name)


def _default_index_name(qualified_name: str, columns: list[str]) -> str:
    """Materialize's names: ``t_primary_idx`` for a default index, ``t_a_b_idx`` otherwise."""
    base = qualified_name.split(".")[-1]
    return f"{base}_{'_'.join(columns)}_idx" if columns else f"{base}_primary_idx"


def _skipped(statement: Statement, name: str) -> StatementResult:
    result = StatementResult(tag=statement.tag)
    result.notices.append(Notice("NOTICE", f'relation "{name}" already exists, skipping'))
    return result
