"""The ``loupe`` command: ``up``, ``sql`` and the service entry points.

Each subcommand lives in its own module exposing ``configure_parser(parser)``
and ``run(args) -> int``; modules are imported only when their subcommand
runs, so ``loupe sql`` does not pay for Spark.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("loupe.cli.up", "start the whole system on its embedded defaults"),
    "sql": ("loupe.cli.sql", "run SQL: a REPL, or -c STATEMENTS"),
    "catalog-server": ("loupe.catalog.cli", "run the catalog service"),
    "catalog": ("loupe.catalog.debug_tool", "inspect and edit the durable catalog"),
    "controller": ("loupe.controller.cli", "run the controller service"),
    "coordinator": ("loupe.coordinator.cli", "run the coordinator service"),
    "compute-replica": ("loupe.compute_replica.cli", "run one compute replica process"),
    "console": ("loupe.console.cli", "run the console (introspection in a browser)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loupe", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            importlib.import_module(module_name).configure_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if a in SUBCOMMANDS), None)
    args = build_parser(chosen).parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
