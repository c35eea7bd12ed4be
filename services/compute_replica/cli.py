"""``loupe compute-replica``: run one compute replica process.

Started by the controller's orchestrator, e.g.::

    loupe compute-replica --replica-id u1 --incarnation 3 --workers 2 --nats-url nats://…
"""

from __future__ import annotations

import argparse
import os
import sys

from loupe.common.cli_args import add_common_arguments, settings_from_args
from loupe.common.logging import bind_context
from loupe.common.settings import SettingsError
from loupe.compute_replica.os_limit import limit_memory


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replica-id", help="the replica this process is (LOUPE_REPLICA_ID)")
    parser.add_argument("--cluster-id", help="the replica's cluster (known from CreateInstance)")
    parser.add_argument("--incarnation", type=int, help="which life of the replica this process is")
    parser.add_argument("--workers", type=int, help="worker threads (the replica's SIZE)")
    parser.add_argument(
        "--memory-limit-bytes",
        type=int,
        help="the memory budget of the replica's SIZE; the process gets an OS limit above it",
    )
    add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    # Imported late: polars sizes its thread pool once, at import, from the environment.
    from loupe.compute_replica.settings import ComputeReplicaSettings

    try:
        settings = settings_from_args(
            ComputeReplicaSettings,
            args,
            "compute_replica",
            replica_id=args.replica_id,
            cluster_id=args.cluster_id,
            incarnation=args.incarnation,
            workers=args.workers,
            memory_limit_bytes=args.memory_limit_bytes,
        )
        settings.validate()
    except SettingsError as error:
        print(f"compute-replica: {error}", file=sys.stderr)
        return 2
    limit_memory(settings.memory_limit_bytes)
    os.environ.setdefault("POLARS_MAX_THREADS", str(settings.workers))

    from loupe.common.service import configure_for, run_service
    from loupe.compute_replica.replica import ComputeReplica

    configure_for(settings, "compute-replica")
    bind_context(replica_id=settings.replica_id, incarnation=settings.incarnation)
    return run_service(ComputeReplica(settings))
