"""``loupe catalog``: inspect and edit a durable catalog (the seed's debug tool).

    loupe catalog --data-dir DIR [--backend NAME] [backend options] COMMAND

- ``dump [--consolidate] [--output FILE]``: the catalog as JSON. Without
  ``--consolidate`` the rows exactly as stored (stored version, nothing
  migrated or decoded); with it the current objects, as the catalog service
  would see them. Each key and value can be passed to ``edit``/``delete``.
- ``epoch``: the stored fence token.
- ``edit KIND KEY-JSON VALUE-JSON``: replace (or add) one object; prints the
  old value (``null`` if there was none).
- ``delete KIND KEY-JSON``: delete one object; prints the deleted value.
- ``upgrade-check``: whether this Loupe could open (and upgrade) the catalog;
  the exit code says it, nothing is written.

``edit`` and ``delete`` open the catalog for writing, which fences a running
catalog server (it halts), unless ``--cooperative --nats-url URL`` is given:
then the running server makes the edit (``Catalog.EditObject``) and carries
on. Keys and values are checked against the kind's dataclass first: a bad one
is refused with the reason and nothing is written (nor fenced).

Exit codes: 0 done, 1 refused or failed (the message says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loupe.catalog.durable import BACKENDS, DEFAULT_BACKEND, DurableCatalogState, create_backend
from loupe.catalog.errors import CatalogError
from loupe.catalog.kinds import KINDS, ObjectFormatError, kind_named
from loupe.common.errors import LoupeError

EXIT_OK, EXIT_FAILED = 0, 1


class ToolError(Exception):
    """A failure to report in one line, with exit code 1."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = "Inspect and edit the durable catalog."
    parser.epilog = "object kinds: " + ", ".join(KINDS)
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("LOUPE_DATA_DIR", "data"),
        help="Loupe's data directory (LOUPE_DATA_DIR; default ./data)",
    )
    parser.add_argument(
        "--backend",
        default=os.environ.get("LOUPE_CATALOG_BACKEND", DEFAULT_BACKEND),
        help=f"catalog backend plugin (LOUPE_CATALOG_BACKEND; default {DEFAULT_BACKEND})",
    )
    parser.add_argument("--postgres-url", help="stash-postgres: the PostgreSQL URL")
    parser.add_argument("--postgres-schema", help="stash-postgres: the schema of the catalog")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other backend option, e.g. shadow_primary=stash-sqlite (repeatable)",
    )
    commands = parser.add_subparsers(dest="catalog_command", metavar="COMMAND", required=True)

    dump = commands.add_parser("dump", help="print the catalog as JSON")
    dump.add_argument(
        "--consolidate",
        action="store_true",
        help="the current objects (migrated, decoded) instead of the stored rows",
    )
    dump.add_argument("--output", "-o", help="write to this file instead of stdout")

    commands.add_parser("epoch", help="print the stored fence token")

    edit = commands.add_parser("edit", help="replace one object; prints the old value")
    edit.add_argument("kind", metavar="KIND")
    edit.add_argument("key", metavar="KEY-JSON")
    edit.add_argument("value", metavar="VALUE-JSON")
    _add_cooperative(edit)

    delete = commands.add_parser("delete", help="delete one object; prints its value")
    delete.add_argument("kind", metavar="KIND")
    delete.add_argument("key", metavar="KEY-JSON")
    _add_cooperative(delete)

    check = commands.add_parser(
        "upgrade-check", help="exit 0 if this Loupe could open the catalog; writes nothing"
    )
    check.add_argument(
        "--deploy-generation",
        type=int,
        help="the deploy generation that would open it (default: the stored one)",
    )


def _add_cooperative(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cooperative",
        action="store_true",
        help="ask the running catalog server to make the change instead of fencing it",
    )
    parser.add_argument("--nats-url", help="NATS URL of the running catalog server")


def run(args: argparse.Namespace) -> int:
    command = args.catalog_command
    try:
        if command == "dump":
            return _dump(args)
        if command == "epoch":
            return _epoch(args)
        if command in ("edit", "delete"):
            return _edit(args, args.value if command == "edit" else None)
        if command == "upgrade-check":
            return _upgrade_check(args)
    except (ToolError, CatalogError, ObjectFormatError) as error:
        return _fail(str(error))
    except LoupeError as error:
        return _fail(error.message)
    raise AssertionError(command)  # pragma: no cover - argparse allows no other


def _fail(message: str) -> int:
    print(f"loupe catalog: {message}", file=sys.stderr)
    return EXIT_FAILED


# Backends


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if args.postgres_url:
        options["postgres_url"] = args.postgres_url
    if args.postgres_schema:
        options["postgres_schema"] = args.postgres_schema
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ToolError(f"--option takes NAME=VALUE, not {item!r}")
        options[name.replace("-", "_")] = value
    return options


@contextmanager
def _backend(args: argparse.Namespace, deploy_generation: int = 0) -> Iterator[DurableCatalogState]:
    if args.backend not in BACKENDS.names():
        raise ToolError(
            f"unknown catalog backend {args.backend!r}; known: {', '.join(BACKENDS.names())}"
        )
    try:
        backend = create_backend(
            args.backend, Path(args.data_dir), deploy_generation=deploy_generation, **_options(args)
        )
    except TypeError as error:
        raise ToolError(f"bad option for backend {args.backend}: {error}") from None
    try:
        yield backend
    finally:
        backend.close()


def _require_initialized(backend: DurableCatalogState, args: argparse.Namespace) -> None:
    if not backend.is_initialized():
        raise ToolError(
            f"there is no catalog here (backend {args.backend}, data dir {args.data_dir}); "
            "nothing was created"
        )


def _stored_generation(args: argparse.Namespace) -> int:
    """The stored deploy generation: editing under it neither steps up nor is refused."""
    with _backend(args) as backend:
        _require_initialized(backend, args)
        fence = backend.stored_fence()
    return fence.deploy_generation if fence is not None else 0


# Commands


def _dump(args: argparse.Namespace) -> int:
    with _backend(args) as backend:
        _require_initialized(backend, args)
        if args.consolidate:
            backend.open_read_only()
            text = backend.dump()
        else:
            text = backend.dump_stored()
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return EXIT_OK


def _epoch(args: argparse.Namespace) -> int:
    with _backend(args) as backend:
        _require_initialized(backend, args)
        fence = backend.stored_fence()
    assert fence is not None
    print(f'{{"epoch": {fence.epoch}, "deploy_generation": {fence.deploy_generation}}}')
    return EXIT_OK


def _edit(args: argparse.Namespace, value: str | None) -> int:
    kind = kind_named(args.kind)
    key = kind.parse_key(args.key)
    if value is not None:
        kind.parse_value(key, value)
    if args.cooperative:
        if not args.nats_url:
            raise ToolError("--cooperative needs --nats-url of the running catalog server")
        old = asyncio.run(_edit_cooperatively(args.nats_url, args.kind, args.key, value))
    else:
        old = _edit_fencing(args, value)
    if value is None and old is None:
        raise ToolError(f"there is no {args.kind} with key {args.key}")
    print(old if old is not None else "null")
    return EXIT_OK


def _edit_fencing(args: argparse.Namespace, value: str | None) -> str | None:
    generation = _stored_generation(args)
    if value is None:
        # Fence nobody for a delete that would find nothing.
        with _backend(args, deploy_generation=generation) as reader:
            reader.open_read_only()
            if reader.transaction().edit_raw(args.kind, args.key, None) is None:
                return None
    with _backend(args, deploy_generation=generation) as backend:
        backend.open()
        tx = backend.transaction()
        old = tx.edit_raw(args.kind, args.key, value)
        backend.commit_transaction(tx)
        print(
            f"loupe catalog: committed at epoch {backend.epoch}; "
            "a catalog server that was running on this catalog is now fenced and halts",
            file=sys.stderr,
        )
        return old


def _upgrade_check(args: argparse.Namespace) -> int:
    generation = args.deploy_generation
    if generation is None:
        generation = _stored_generation(args)
    with _backend(args, deploy_generation=generation) as backend:
        try:
            check = backend.check_open()
        except CatalogError as error:
            print(f"upgrade check failed: {error}")
            return EXIT_FAILED
    if check.upgrades:
        print(
            f"upgrade check passed: the catalog at version {check.stored_version} "
            f"can be upgraded to version {check.version} ({check.upgrades} migration(s)); "
            "nothing was written"
        )
    else:
        print(
            f"upgrade check passed: the catalog is at version {check.version}, "
            "no migration needed; nothing was written"
        )
    return EXIT_OK


async def _edit_cooperatively(
    nats_url: str, kind: str, key_json: str, value_json: str | None
) -> str | None:
    from loupe.catalog.servicer import SERVICE
    from loupe.common.transport import NatsServiceClient, NatsUnavailable, connect
    from loupe.proto.catalog.v1 import catalog_pb2

    try:
        connection = await connect(nats_url, name="loupe-catalog-tool")
    except NatsUnavailable as error:
        raise ToolError(str(error)) from None
    try:
        client = NatsServiceClient(connection, SERVICE, timeout=10.0)
        try:
            response = await client.EditObject(
                catalog_pb2.EditObjectRequest(
                    kind=kind, key_json=key_json, value_json=value_json or ""
                )
            )
        except LoupeError as error:
            if error.code == "NOT_FOUND":
                return None
            raise ToolError(f"the catalog server refused the edit: {error.message}") from None
        return response.old_value_json or None
    finally:
        await connection.close()
