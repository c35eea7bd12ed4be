"""Materialize's troubleshooting queries over replica introspection (``troubleshooting.sql``).

The queries of Materialize's documentation ("Dataflow troubleshooting", the
``mz_introspection`` reference), its Console's dataflow pages and the SQL its
``EXPLAIN ANALYZE`` prints, verbatim, each with the path of its source in
Materialize's repository. They are what Materialize's users run to find the
dataflow that uses the most CPU, the operator holding the most memory, or a
skewed worker, and they run unchanged on Loupe (the tests run every one). An
entry Loupe cannot run says why (``skip``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).with_name("troubleshooting.sql")


@dataclass(frozen=True)
class Entry:
    name: str
    source: str
    skip: str
    sql: str


def entries() -> list[Entry]:
    """Every query of the corpus, in file order."""
    found = []
    for chunk in re.split(r"^-- name: ", CORPUS.read_text(), flags=re.M)[1:]:
        name, _, body = chunk.partition("\n")
        source = re.search(r"^-- source: (.*)$", body, flags=re.M)
        skip = re.search(r"^-- skip: (.*)$", body, flags=re.M)
        sql = body.strip().rstrip(";")
        found.append(
            Entry(name, source.group(1) if source else "", skip.group(1) if skip else "", sql)
        )
    return found


def runnable() -> list[Entry]:
    """The queries Loupe runs (all but those with a ``skip`` reason)."""
    return [e for e in entries() if not e.skip]
