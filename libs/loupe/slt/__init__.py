"""sqllogictest: run SQLite's sqllogictest scripts against Loupe and PostgreSQL.

``python -m loupe.slt`` (``make slt``) runs scripts and reports the pass
rate per file; see ``loupe.slt.runner`` for the modes and the comparison.
"""

from loupe.slt.records import Query, Script, Statement, parse_script
from loupe.slt.runner import FileResult, Target, TargetError, check, format_value, run_script

__all__ = [
    "FileResult",
    "Query",
    "Script",
    "Statement",
    "Target",
    "TargetError",
    "check",
    "format_value",
    "parse_script",
    "run_script",
]
