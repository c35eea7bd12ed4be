"""Retention of the statement log: old finished executions and events go, open ones stay."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from loupe.builtins import MZ_STATEMENT_EXECUTION_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY

pytestmark = [pytest.mark.spark]

UTC = dt.UTC


def execution(id_: str, began_at: dt.datetime, finished_at: dt.datetime | None) -> tuple:
    """An execution row with only its id and times set (the rest NULL)."""
    values: dict[str, Any] = {"id": id_, "began_at": began_at, "finished_at": finished_at}
    if finished_at is not None:
        values["finished_status"] = "success"
    return tuple(values.get(name) for name in MZ_STATEMENT_EXECUTION_HISTORY.column_names)


async def test_statement_log_rows_past_the_retention_are_retracted(make_writer: Any) -> None:
    """Finished executions and events older than 30 days are retracted; an open one is kept.

    An open execution's row is retracted by the coordinator when it finishes,
    so retention must not retract it first, however old it is.
    """
    writer = await make_writer(
        collections=[MZ_STATEMENT_EXECUTION_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY]
    )
    now = dt.datetime.now(UTC)
    old, recent = now - dt.timedelta(days=31), now - dt.timedelta(days=29)
    for row in (execution("old", old, old), execution("recent", recent, recent)):
        writer.stage(MZ_STATEMENT_EXECUTION_HISTORY.id, row, 1)
    writer.stage(MZ_STATEMENT_EXECUTION_HISTORY.id, execution("open", old, None), 1)
    for id_, at in (("old", old), ("recent", recent)):
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()

    await writer.compact()
    executions = writer.snapshot(MZ_STATEMENT_EXECUTION_HISTORY.id)
    assert sorted(row[0] for row in executions) == ["open", "recent"]
    events = writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)
    assert [row[0] for row in events] == ["recent"]


async def test_a_shorter_retention_set_on_the_writer_applies_at_the_next_compaction(
    make_writer: Any,
) -> None:
    """``set_retention`` (from ``statement_logging_retention``) replaces the 30 days."""
    writer = await make_writer(collections=[MZ_STATEMENT_LIFECYCLE_HISTORY])
    now = dt.datetime.now(UTC)
    for id_, age in (("two days", 2), ("now", 0)):
        at = now - dt.timedelta(days=age)
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()

    writer.set_retention([MZ_STATEMENT_LIFECYCLE_HISTORY.id], 24 * 3_600_000)
    await writer.compact()
    events = writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)
    assert [row[0] for row in events] == ["now"]


class _NoReplicas:
    """The compute side of the follower, with no clusters to converge (not under test)."""

    async def apply(self, _clusters: Any, _replicas: Any) -> tuple[list[str], list[str]]:
        return [], []


async def test_the_catalogs_statement_logging_retention_reaches_the_writer(
    make_writer: Any,
) -> None:
    """``ALTER SYSTEM SET statement_logging_retention`` arrives as a catalog snapshot."""
    from loupe.controller.service import CatalogFollower
    from loupe.proto.catalog.v1 import catalog_pb2

    writer = await make_writer(
        collections=[MZ_STATEMENT_EXECUTION_HISTORY, MZ_STATEMENT_LIFECYCLE_HISTORY]
    )
    now = dt.datetime.now(UTC)
    for id_, age in (("two days", 2), ("now", 0)):
        at = now - dt.timedelta(days=age)
        writer.stage(MZ_STATEMENT_LIFECYCLE_HISTORY.id, (id_, "execution-finished", at), 1)
    await writer.flush()
    follower = CatalogFollower(_NoReplicas(), writer)  # type: ignore[arg-type]
    snapshot = catalog_pb2.CatalogSnapshot(epoch=1, timestamp=1)
    snapshot.system_configuration["statement_logging_retention"] = "86400.0s"
    await follower.apply(snapshot)

    await writer.compact()
    assert [row[0] for row in writer.snapshot(MZ_STATEMENT_LIFECYCLE_HISTORY.id)] == ["now"]
