"""``loupe controller``: run the controller service."""

from __future__ import annotations

import argparse
import sys

from loupe.common.cli_args import add_common_arguments, settings_from_args
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.plugins import PluginError
from loupe.common.service import configure_for, run_service
from loupe.controller.orchestrators.base import ORCHESTRATORS
from loupe.controller.service import ControllerService, ControllerSettings

log = get_logger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--orchestrator", help="how replicas run: an orchestrator plugin (default process)"
    )
    parser.add_argument(
        "--storage-flush-interval",
        type=float,
        help="seconds between storage writer flushes (default 1.0)",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=float,
        help="seconds without a heartbeat before a replica is offline (default 5.0)",
    )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(
        ControllerSettings,
        args,
        "controller",
        orchestrator=args.orchestrator,
        storage_flush_interval=args.storage_flush_interval,
        heartbeat_timeout=args.heartbeat_timeout,
    )
    configure_for(settings, "controller")
    if settings.orchestrator not in ORCHESTRATORS.names():
        print(
            f"controller: unknown orchestrator {settings.orchestrator!r}"
            f" (known: {', '.join(ORCHESTRATORS.names())})",
            file=sys.stderr,
        )
        return 2
    try:
        return run_service(ControllerService(settings))
    except (LoupeError, PluginError) as error:
        print(f"controller: {error}", file=sys.stderr)
        return 1
