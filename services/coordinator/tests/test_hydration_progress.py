"""The Progress a CREATE INDEX / MATERIALIZED VIEW streams while it hydrates (issue 13).

``hydration_progress`` turns the replicas' ``Hydration`` reports (as the
controller's ``CollectionStatus`` forwards them) into one ``Progress``: the
replica furthest along, its records against the estimate, and an ETA from
its rate; the gRPC event carries them to the client.
"""

from __future__ import annotations

import math

from loupe.coordinator.compute import hydration_progress
from loupe.coordinator.grpc_api import event_to_proto
from loupe.coordinator.results import Progress
from loupe.proto.compute.v1 import compute_pb2

NAME = "materialize.public.q3"
NOW = 1_800_000_000_000


def _report(**fields: object) -> compute_pb2.Hydration:
    return compute_pb2.Hydration(dataflow_id="u5", **fields)  # type: ignore[arg-type]


def test_eta_is_what_is_left_at_the_rate_since_the_first_update() -> None:
    started = NOW - 8_000
    report = _report(
        nodes_total=7,
        nodes_hydrated=2,
        records_read=900,
        records_done=2_000,
        records_estimated=5_000,
        started_at_ms=started,
    )
    progress = hydration_progress(NAME, [report], NOW)
    rate = 2_000 / (NOW - started)  # records per ms
    assert progress == Progress(
        NAME, 2, 7, 900, False, "nodes", 2_000, 5_000, math.ceil((5_000 - 2_000) / rate)
    )
    assert progress.eta_ms == 12_000


def test_without_a_start_the_rate_runs_from_the_installation() -> None:
    report = _report(records_done=1_000, records_estimated=3_000, installed_at_ms=NOW - 4_000)
    assert hydration_progress(NAME, [report], NOW).eta_ms == 8_000


def test_no_rate_no_eta_and_hydrated_is_zero() -> None:
    not_started = _report(nodes_total=3, records_estimated=100)
    assert hydration_progress(NAME, [not_started], NOW).eta_ms is None
    passed = _report(records_done=120, records_estimated=100, started_at_ms=NOW - 1_000)
    assert hydration_progress(NAME, [passed], NOW).eta_ms is None
    done = _report(hydrated=True, records_done=100, records_estimated=100, started_at_ms=1)
    assert hydration_progress(NAME, [done], NOW).eta_ms == 0
    assert hydration_progress(NAME, [], NOW) == Progress(NAME, 0, 0, 0, False)


def test_the_replica_furthest_along_counts() -> None:
    slow = _report(nodes_total=4, nodes_hydrated=3, records_done=10, records_estimated=100)
    fast = _report(
        nodes_total=4, nodes_hydrated=1, records_done=90, records_estimated=100, started_at_ms=1
    )
    assert hydration_progress(NAME, [slow, fast], NOW).records_done == 90
    hydrated = _report(hydrated=True, nodes_total=4, nodes_hydrated=4)
    assert hydration_progress(NAME, [fast, hydrated], NOW).hydrated


def test_progress_event_carries_records_and_eta_to_the_client() -> None:
    event = event_to_proto(Progress(NAME, 2, 7, 900, False, "nodes", 2_000, 5_000, 12_000))
    assert (event.progress.records_done, event.progress.records_estimated) == (2_000, 5_000)
    assert event.progress.HasField("eta_ms")
    assert event.progress.eta_ms == 12_000
    unknown = event_to_proto(Progress(NAME, 2, 7, 900, False, "nodes", 2_000, 5_000, None))
    assert not unknown.progress.HasField("eta_ms")
