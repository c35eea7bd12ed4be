"""``loupe coordinator``: run the coordinator service."""

from __future__ import annotations

import argparse
import sys

from loupe.common.cli_args import add_common_arguments, settings_from_args
from loupe.common.errors import LoupeError
from loupe.common.logging import get_logger
from loupe.common.service import configure_for, run_service
from loupe.common.settings import SettingsError
from loupe.coordinator.service import CoordinatorService, CoordinatorSettings

log = get_logger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--sql-host", help="address of the SQL API (default 127.0.0.1)")
    parser.add_argument("--sql-port", type=int, help="port of the SQL API; 0 = any (default 6875)")
    parser.add_argument(
        "--pgwire-port",
        type=int,
        help="port of the PostgreSQL wire protocol; 0 = any (default 6877)",
    )
    parser.add_argument(
        "--superusers", help="comma-separated superusers (default materialize,mz_system)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(
            CoordinatorSettings,
            args,
            "coordinator",
            sql_host=args.sql_host,
            sql_port=args.sql_port,
            pgwire_port=args.pgwire_port,
            superusers=args.superusers,
        )
    except SettingsError as error:
        print(f"coordinator: {error}", file=sys.stderr)
        return 2
    configure_for(settings, "coordinator")
    log.info("starting coordinator", settings=settings.describe())
    try:
        return run_service(CoordinatorService(settings))
    except LoupeError as error:
        print(f"coordinator: cannot start: {error.message} ({error.code})", file=sys.stderr)
        return 1
