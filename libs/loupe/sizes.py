"""Cluster replica sizes: what a SIZE gives a replica (workers and a memory budget).

Like Materialize's ``mz_catalog.mz_cluster_replica_sizes``: a size names a
row of a table, and every service reads the same table. The catalog refuses
a size it does not list (22023), the controller starts a replica of a size
with its workers and its memory budget, and the replica enforces the budget
(a dataflow or peek that would exceed it fails with 53200; see
``loupe.dataflow.memory``) under an OS limit a little above it, so a bug
cannot take the machine.

The table defaults to ``DEFAULT_SIZES``; the shared setting
``cluster_replica_sizes`` (``LOUPE_CLUSTER_REPLICA_SIZES``, or the top-level
TOML key, so every service sees the same one) replaces it with a JSON object
``{"<size>": {"workers": 2, "memory_bytes": 2147483648, ...}, ...}`` (or
``"memory_limit": "2GiB"``, as Materialize writes it). Each service installs
it at start with ``configure``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from loupe.common.errors import LoupeError, SqlState

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
_NANO_CORES = 1_000_000_000
# What a replica process needs besides its dataflows' state (Python, polars,
# pyarrow, NATS): the OS limit is the budget times OS_LIMIT_FACTOR plus this.
OS_LIMIT_BASELINE_BYTES = 1 * GIB
# Operators work on temporaries next to the state the budget accounts for.
OS_LIMIT_FACTOR = 2


@dataclass(frozen=True)
class ReplicaSize:
    """One row of ``mz_cluster_replica_sizes`` (Materialize's columns)."""

    size: str
    workers: int
    memory_bytes: int
    processes: int = 1
    cpu_nano_cores: int = 0
    disk_bytes: int = 0
    credits_per_hour: Decimal = Decimal(0)

    def row(self) -> tuple[Any, ...]:
        """The size as a row of ``mz_cluster_replica_sizes``."""
        return (
            self.size,
            self.processes,
            self.workers,
            self.cpu_nano_cores,
            self.memory_bytes,
            self.disk_bytes,
            self.credits_per_hour,
        )


def os_limit_bytes(memory_bytes: int) -> int:
    """The OS data limit of a replica process with ``memory_bytes`` of budget.

    Above the budget (temporaries, the interpreter), far below the machine.
    """
    return memory_bytes * OS_LIMIT_FACTOR + OS_LIMIT_BASELINE_BYTES


def _scaled(size: str, workers: int, memory_bytes: int, credits: str) -> ReplicaSize:
    return ReplicaSize(
        size,
        workers=workers,
        memory_bytes=memory_bytes,
        cpu_nano_cores=workers * _NANO_CORES,
        credits_per_hour=Decimal(credits),
    )


# Sizes 'n' run n workers with 2 GiB each (tests and the bootstrap clusters use
# '1' and '2'); the 'xsmall' family is for laptops and tests of the budget.
DEFAULT_SIZES: tuple[ReplicaSize, ...] = (
    _scaled("3xsmall", 1, 64 * MIB, "0.0625"),
    _scaled("2xsmall", 1, 128 * MIB, "0.125"),
    _scaled("xsmall", 1, 512 * MIB, "0.25"),
    *(_scaled(str(n), n, n * 2 * GIB, str(n)) for n in (1, 2, 4, 8, 16, 32)),
)

_table: dict[str, ReplicaSize] = {s.size: s for s in DEFAULT_SIZES}

_BYTES = re.compile(r"\s*([0-9]+)\s*([KMGT]i?B?|B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1024 * GIB}


def parse_bytes(text: str | int) -> int:
    """``"512MiB"``, ``"2GiB"``, ``"1073741824"`` (or an int) as a number of bytes."""
    if isinstance(text, int):
        return text
    match = _BYTES.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size in bytes: {text!r}")
    unit = (match.group(2) or "").upper()[:1]
    return int(match.group(1)) * _UNITS[unit]


def parse_sizes(document: str | Mapping[str, Any]) -> tuple[ReplicaSize, ...]:
    """A size table from its JSON form (see the module docstring); ValueError if malformed."""
    raw = json.loads(document) if isinstance(document, str) else document
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("cluster replica sizes must be a non-empty JSON object")
    sizes = []
    for name, spec in raw.items():
        if not isinstance(spec, Mapping):
            raise ValueError(f"size {name!r}: expected an object, not {spec!r}")
        try:
            memory = spec.get("memory_bytes", spec.get("memory_limit"))
            if memory is None:
                raise ValueError("memory_bytes (or memory_limit) is required")
            workers = int(spec.get("workers", 1))
            size = ReplicaSize(
                str(name),
                workers=workers,
                memory_bytes=parse_bytes(memory),
                processes=int(spec.get("processes", spec.get("scale", 1))),
                cpu_nano_cores=int(spec.get("cpu_nano_cores", workers * _NANO_CORES)),
                disk_bytes=parse_bytes(spec.get("disk_bytes", spec.get("disk_limit", 0))),
                credits_per_hour=Decimal(str(spec.get("credits_per_hour", 0))),
            )
        except (TypeError, ValueError, ArithmeticError) as error:
            raise ValueError(f"size {name!r}: {error}") from error
        if size.workers < 1 or size.memory_bytes <= 0 or size.processes != 1:
            raise ValueError(f"size {name!r}: needs workers >= 1, memory > 0 and one process")
        sizes.append(size)
    return tuple(sizes)


def configure(document: str) -> None:
    """Install the size table of the ``cluster_replica_sizes`` setting ('' keeps the default)."""
    install(parse_sizes(document) if document.strip() else DEFAULT_SIZES)


def install(sizes: Sequence[ReplicaSize]) -> None:
    """Make ``sizes`` the table every lookup in this process uses."""
    global _table
    _table = {s.size: s for s in sizes}


def sizes() -> list[ReplicaSize]:
    """The current table, smallest first."""
    return sorted(_table.values(), key=lambda s: (s.memory_bytes, s.workers, s.size))


def lookup(size: str) -> ReplicaSize:
    """The row of ``size``; 22023 naming the valid sizes if there is none."""
    found = _table.get(size)
    if found is None:
        valid = ", ".join(s.size for s in sizes())
        raise LoupeError(
            SqlState.INVALID_PARAMETER_VALUE,
            f"unknown cluster replica size '{size}'",
            hint=f"Valid sizes: {valid}.",
        )
    return found


def format_bytes(count: int) -> str:
    """``count`` bytes for a message: ``64 MiB``, ``1.5 GiB``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"
