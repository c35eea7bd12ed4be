"""``loupe console``: run the console (HTTP) service."""

from __future__ import annotations

import argparse
import sys

from loupe.common.cli_args import add_common_arguments, settings_from_args
from loupe.common.logging import get_logger
from loupe.common.service import configure_for, run_service
from loupe.common.settings import SettingsError
from loupe.console.service import ConsoleService
from loupe.console.settings import ConsoleSettings

log = get_logger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--http-host", help="address of the console (default 127.0.0.1)")
    parser.add_argument("--http-port", type=int, help="port of the console; 0 = any (default 6876)")
    parser.add_argument("--coordinator-host", help="the coordinator's address (default 127.0.0.1)")
    parser.add_argument(
        "--coordinator-pgwire-port",
        type=int,
        help="the coordinator's PostgreSQL wire protocol port (default 6877)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(
            ConsoleSettings,
            args,
            "console",
            http_host=args.http_host,
            http_port=args.http_port,
            coordinator_host=args.coordinator_host,
            coordinator_pgwire_port=args.coordinator_pgwire_port,
        )
    except SettingsError as error:
        print(f"console: {error}", file=sys.stderr)
        return 2
    configure_for(settings, "console")
    log.info("starting console", settings=settings.describe())
    return run_service(ConsoleService(settings))
