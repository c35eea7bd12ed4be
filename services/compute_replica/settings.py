"""Settings of a compute replica process."""

from __future__ import annotations

import dataclasses

from loupe.common.settings import BaseSettings, SettingsError


@dataclasses.dataclass
class ComputeReplicaSettings(BaseSettings):
    """Settings of one compute replica process (TOML section ``compute_replica``)."""

    replica_id: str = ""
    # Known from CreateInstance when not given.
    cluster_id: str = ""
    incarnation: int = 0
    workers: int = 1
    # The budget of the replica's SIZE (``loupe.sizes``), until CreateInstance says; 0: none.
    memory_limit_bytes: int = 0
    heartbeat_interval: float = 1.0
    hello_interval: float = 0.5
    # A peek waits for its index to become readable at its timestamp as long as
    # it takes (the coordinator's statement_timeout is the limit); one waiting
    # longer than this many seconds is logged once.
    slow_peek_log: float = 5.0
    # Frontier, hydration and error changes are coalesced and sent this often.
    report_interval: float = 0.05
    # How often sources are polled for new data between writers' NATS wake-ups.
    source_poll_interval: float = 0.05
    # A source's snapshot is pushed to the engine as it is read, in pieces of its parts of
    # at least this many rows (or one part): hydration progress counts the reading.
    snapshot_piece_rows: int = 250_000
    # A negative port serves no /metrics endpoint (tests run many replicas in one process).
    metrics_port: int = 0
    # An introspection message larger than this (or NATS's max_payload) is dropped,
    # counted, and followed by a snapshot (``introspection.py``).
    introspection_max_message_bytes: int = 8 * 2**20
    # Tests only: honour debug parameters in UpdateConfiguration (``replica._run_debug_commands``).
    debug_commands: bool = False

    def validate(self) -> None:
        if not self.replica_id:
            raise SettingsError("a compute replica needs a replica id (--replica-id)")
        if self.workers < 1:
            raise SettingsError(f"workers must be at least 1, not {self.workers}")
        if self.memory_limit_bytes < 0:
            raise SettingsError(
                f"memory_limit_bytes must not be negative: {self.memory_limit_bytes}"
            )
        if self.heartbeat_interval <= 0 or self.hello_interval <= 0:
            raise SettingsError("heartbeat and hello intervals must be positive")
