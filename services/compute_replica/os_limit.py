"""The replica process's OS memory limit: a bug past the budget cannot take the machine.

The engine keeps the replica's dataflows within its budget (``loupe.dataflow.memory``);
what it cannot see (operators' temporaries, a leak) is stopped by the
kernel: ``RLIMIT_DATA`` (the data segment and private writable mappings,
which is what Python's, polars' and Arrow's heaps are) set to
``loupe.sizes.os_limit_bytes`` (twice the budget plus 1 GiB for the interpreter).
``RLIMIT_AS`` would count address space polars and Arrow reserve without
using. Past the limit an allocation fails: a Python ``MemoryError`` fails the
dataflow with 53200, polars aborts the process ("memory allocation of N bytes
failed"), which the orchestrator reports as out of memory and restarts.
Only this replica goes; the others on the machine keep their memory.
"""

from __future__ import annotations

import resource

from loupe.common.logging import get_logger
from loupe.sizes import os_limit_bytes

log = get_logger(__name__)


def limit_memory(budget_bytes: int) -> int | None:
    """Set this process's data limit for ``budget_bytes`` (0: none); the limit set, if any.

    Never raises the hard limit (an unprivileged process cannot) and never
    goes above a limit set from outside (a container's ulimit).
    """
    if budget_bytes <= 0:
        return None
    wanted = os_limit_bytes(budget_bytes)
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ValueError, OSError) as error:
        log.warning("cannot set the memory limit", limit_bytes=wanted, error=str(error))
        return None
    return limit
