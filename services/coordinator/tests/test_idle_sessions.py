"""Sessions a client left without CloseSession are closed once idle; busy ones never are."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from loupe.proto.sql.v1 import sql_pb2


async def test_idle_sessions_are_closed_and_busy_ones_kept(nats_url, data_dir, start_table_system):
    async with start_table_system(
        nats_url, data_dir, idle_session_timeout=1.5, storage_settle_timeout=0.1
    ) as harness:
        reaped = REGISTRY.get_sample_value("loupe_coordinator_sessions_reaped_total") or 0.0
        idle = await harness.session()
        active = await harness.session()
        busy = await harness.session()
        await harness.tag(busy, "CREATE TABLE t (a int)")
        subscribe = harness.stub.Execute(sql_pb2.ExecuteRequest(session_id=busy, sql="SUBSCRIBE t"))
        first = await subscribe.read()  # the SUBSCRIBE runs: the session is busy
        assert first.HasField("description")
        # 3+ s: two timeouts for the idle one, never for the active one (1.5 s leaves room
        # for a loaded machine's slow round trips between the active one's requests).
        for _ in range(30):
            await harness.rows(active, "SELECT 1")
            await asyncio.sleep(0.1)
        error = await harness.error(idle, "SELECT 1")
        assert error.code == "08003"
        assert await harness.rows(active, "SELECT 1") == [(1,)]
        assert busy in {s.id for s in harness.service.coordinator.sessions}
        subscribe.cancel()
        after = REGISTRY.get_sample_value("loupe_coordinator_sessions_reaped_total")
        assert after == reaped + 1
