"""``make chaos``: the strict serializability check, long (``loupe.testing.consistency``).

Starts ``loupe up`` in a temporary directory and runs ``--rounds`` histories
of concurrent writers and readers, each on fresh tables, printing the
violations found (none expected) and how many reads and writes were checked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from loupe.client import SqlClient
from loupe.testing.consistency import run_history
from loupe.testing.system import LoupeUp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--writes", type=int, default=200, help="writes per writer a round")
    options = parser.parse_args(argv)
    found = 0
    with tempfile.TemporaryDirectory(prefix="loupe-chaos-") as scratch:
        system = LoupeUp(Path(scratch) / "data")
        system.start()
        try:
            for round_number in range(1, options.rounds + 1):
                violations, history = run_history(
                    system.sql_port,
                    writers=options.writers,
                    readers=options.readers,
                    writes_each=options.writes,
                )
                found += len(violations)
                print(
                    f"round {round_number}: {len(history.writes)} writes, {len(history.reads)}"
                    f" reads checked, {len(violations)} violations",
                    flush=True,
                )
                for violation in violations[:20]:
                    print(f"  {violation}")
                with SqlClient("127.0.0.1", system.sql_port) as client:
                    client.execute("DROP TABLE history CASCADE")
        finally:
            system.stop()
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
