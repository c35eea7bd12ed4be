"""Load generators: realistic data written into storage collections.

``loupe.loadgen.tpch`` generates the TPC-H tables (``CREATE SOURCE … FROM
LOAD GENERATOR TPCH``, and the compute benchmarks).
"""

from loupe.loadgen.tpch import (
    TPCH_TABLES,
    Progress,
    generate,
    generate_files,
    load,
    load_files,
    progress_printer,
    storage_updates,
)

__all__ = [
    "TPCH_TABLES",
    "Progress",
    "generate",
    "generate_files",
    "load",
    "load_files",
    "progress_printer",
    "storage_updates",
]
