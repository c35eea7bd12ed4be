"""System variables: the ones ``ALTER SYSTEM SET`` changes, their defaults and checks.

Stored in the catalog as ``system_configuration`` objects (name -> value as
text) only when set; a variable without a stored value has its default, so a
changed default reaches every catalog that never set it. The values are
checked here, where the catalog applies ``SetSystemVariable``, and by the
coordinator before it asks, so a bad value is refused with the reason
whoever sends it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loupe.common.errors import LoupeError, SqlState

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h|days|day|d)?\s*$", re.IGNORECASE)
_SECONDS = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb|kib|mib|gib)?\s*$", re.IGNORECASE)
_BYTES = {"b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9, "kib": 1024, "mib": 2**20, "gib": 2**30}


def check_rate(value: str) -> str:
    """A probability: a float in [0, 1]."""
    try:
        rate = float(value)
    except ValueError:
        raise ValueError("expected a number from 0 to 1") from None
    if not 0.0 <= rate <= 1.0:
        raise ValueError("expected a number from 0 to 1")
    return repr(rate)


def _bool(value: str) -> str:
    lowered = value.strip().lower()
    if lowered in ("on", "true", "t", "yes", "1"):
        return "on"
    if lowered in ("off", "false", "f", "no", "0"):
        return "off"
    raise ValueError("expected on or off")


def _non_negative_int(value: str) -> str:
    match = _SIZE.match(value)
    if match is None:
        raise ValueError("expected a non-negative integer (optionally with a unit: kB, MiB, …)")
    number, unit = match.groups()
    return str(int(number) * _BYTES[(unit or "b").lower()])


def _positive_int(value: str) -> str:
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError("expected a positive integer")
    return str(int(value))


def _duration(value: str) -> str:
    match = _DURATION.match(value)
    if match is None:
        raise ValueError("expected a duration such as '1s', '500ms' or '30d'")
    number, unit = match.groups()
    unit = (unit or "s").lower()
    seconds = float(number) * _SECONDS["d" if unit.startswith("d") else unit]
    if seconds <= 0:
        raise ValueError("expected a positive duration")
    return f"{seconds:g}s"


@dataclass(frozen=True)
class SystemVariable:
    name: str
    default: str
    description: str
    # Returns the canonical value to store; raises ValueError with the reason.
    check: Callable[[str], str]


SYSTEM_VARIABLES: dict[str, SystemVariable] = {
    v.name: v
    for v in (
        SystemVariable(
            "statement_logging_default_sample_rate",
            "0.99",
            "The statement_logging_sample_rate new sessions start with.",
            check_rate,
        ),
        SystemVariable(
            "statement_logging_max_sample_rate",
            "0.99",
            "The highest sample rate any session logs statements at.",
            check_rate,
        ),
        SystemVariable(
            "statement_logging_target_data_rate",
            "2071",
            "Bytes per second statement logging may write on average (throttling).",
            _non_negative_int,
        ),
        SystemVariable(
            "statement_logging_max_data_credit",
            str(50 * 2**20),
            "Bytes statement logging may write in a burst (throttling).",
            _non_negative_int,
        ),
        SystemVariable(
            "statement_logging_use_reproducible_rng",
            "off",
            "Sample statements with a fixed-seed generator (for tests).",
            _bool,
        ),
        SystemVariable(
            "statement_logging_retention",
            "2592000s",
            "How long the statement log keeps executions.",
            _duration,
        ),
        SystemVariable(
            "introspection_retention",
            "86400s",
            "How long the persisted replica introspection collections keep history (AS OF).",
            _duration,
        ),
        SystemVariable(
            "hydration_history_retention",
            "2592000s",
            "How long ended hydration episodes stay in mz_replica_hydration_history and"
            " mz_object_hydration_history.",
            _duration,
        ),
        SystemVariable(
            "max_connections",
            "5000",
            "The most sessions a coordinator keeps open; one more is refused (53300).",
            _positive_int,
        ),
        SystemVariable(
            "storage_flush_interval",
            "1s",
            "How often the storage writer flushes to the builtin collections.",
            _duration,
        ),
    )
}


def _unknown(name: str) -> LoupeError:
    return LoupeError(SqlState.UNDEFINED_OBJECT, f'unrecognized configuration parameter "{name}"')


def system_variable(name: str) -> SystemVariable:
    """The system variable called ``name`` (any case); 42704 if there is none."""
    variable = SYSTEM_VARIABLES.get(name.lower())
    if variable is None:
        raise _unknown(name)
    return variable


def checked_value(name: str, value: str) -> str:
    """The value to store for ``name``; a LoupeError (22023) saying why it is refused."""
    variable = system_variable(name)
    try:
        return variable.check(value)
    except ValueError as error:
        raise LoupeError(
            SqlState.INVALID_PARAMETER_VALUE,
            f'invalid value for parameter "{variable.name}": "{value}": {error}',
        ) from None


def system_value(configuration: Mapping[str, str], name: str) -> str:
    """The value of system variable ``name`` given the stored configuration."""
    variable = system_variable(name)
    return configuration.get(variable.name, variable.default)


def is_system_variable(name: str) -> bool:
    return name.lower() in SYSTEM_VARIABLES
