"""Settings: one dataclass per service, filled from defaults, a TOML file,
the environment (``LOUPE_<FIELD>``) and command-line overrides, in that order.

``describe()`` renders them for the start-up log with secrets masked.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T", bound="BaseSettings")

SECRET_MARKERS = ("password", "secret", "token")


class SettingsError(ValueError):
    pass


@dataclasses.dataclass
class BaseSettings:
    """Settings every service shares."""

    data_dir: Path = Path("data")
    nats_url: str = "nats://127.0.0.1:4222"
    log_level: str = "info"
    # "json", "console" or "auto" (console on a terminal).
    log_format: str = "auto"
    # Port of the Prometheus /metrics endpoint; 0 picks a free one.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    # The cluster replica size table as JSON ('' for the default; ``loupe.sizes``).
    # Shared: set it once (environment or top-level TOML key) for every service.
    cluster_replica_sizes: str = ""

    @classmethod
    def load(
        cls: type[T],
        *,
        config_file: Path | str | None = None,
        environ: typing.Mapping[str, str] | None = None,
        section: str | None = None,
        **overrides: Any,
    ) -> T:
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        config_file = config_file or environ.get("LOUPE_CONFIG")
        if config_file:
            path = Path(config_file)
            try:
                document = tomllib.loads(path.read_text())
            except (OSError, tomllib.TOMLDecodeError) as error:
                raise SettingsError(f"cannot read config file {path}: {error}") from error
            values.update({k: v for k, v in document.items() if not isinstance(v, dict)})
            if section and isinstance(document.get(section), dict):
                values.update(document[section])
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in fields:
            raw = environ.get(f"LOUPE_{name.upper()}")
            if raw is not None:
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - set(fields)
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        hints = typing.get_type_hints(cls)
        converted = {name: _convert(name, value, hints[name]) for name, value in values.items()}
        return cls(**converted)

    def describe(self) -> dict[str, Any]:
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if any(marker in field.name for marker in SECRET_MARKERS) and value:
                value = "***"
            elif isinstance(value, str) and "@" in value and "://" in value:
                scheme, _, rest = value.partition("://")
                value = f"{scheme}://***@{rest.split('@', 1)[1]}"
            out[field.name] = str(value) if isinstance(value, Path) else value
        return out


def _convert(name: str, value: Any, hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or value == "":
            return None
        hint = options[0]
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if hint in (int, float, str, Path):
            return hint(value)
    except (TypeError, ValueError) as error:
        raise SettingsError(f"setting {name}: {error}") from error
    return value
