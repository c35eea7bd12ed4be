"""``loupe catalog-server``: run the catalog service."""

from __future__ import annotations

import argparse

from loupe.catalog.durable import BACKENDS
from loupe.catalog.service import CatalogService, CatalogSettings
from loupe.common.cli_args import add_common_arguments, settings_from_args
from loupe.common.logging import get_logger
from loupe.common.service import configure_for, run_service

log = get_logger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--grpc-port", type=int, help="gRPC admin API port (default 6877; 0 = any)")
    parser.add_argument(
        "--catalog-backend",
        help="catalog storage plugin (default stash-sqlite; LOUPE_CATALOG_BACKEND)",
    )
    parser.add_argument(
        "--deploy-generation",
        type=int,
        help="this deployment's generation; an older one steps down (LOUPE_DEPLOY_GENERATION)",
    )
    parser.add_argument(
        "--postgres-url",
        help="stash-postgres: PostgreSQL URL (LOUPE_POSTGRES_URL)",
    )
    parser.add_argument("--postgres-schema", help="stash-postgres: schema (default loupe_catalog)")


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(
        CatalogSettings,
        args,
        "catalog",
        grpc_port=args.grpc_port,
        catalog_backend=args.catalog_backend,
        deploy_generation=args.deploy_generation,
        postgres_url=args.postgres_url,
        postgres_schema=args.postgres_schema,
    )
    configure_for(settings, "catalog")
    if settings.catalog_backend not in BACKENDS.names():
        log.error(
            "unknown catalog backend",
            backend=settings.catalog_backend,
            known=BACKENDS.names(),
        )
        return 2
    log.info("starting", settings=settings.describe())
    service = CatalogService(settings)
    return run_service(service) or service.exit_code
