"""Command-line options every service shares, mapped onto its settings object."""

from __future__ import annotations

import argparse
from typing import TypeVar

from loupe.common.settings import BaseSettings

S = TypeVar("S", bound=BaseSettings)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML settings file (also LOUPE_CONFIG)")
    parser.add_argument("--data-dir", help="where all state is kept (LOUPE_DATA_DIR)")
    parser.add_argument("--nats-url", help="NATS server URL (LOUPE_NATS_URL)")
    parser.add_argument("--log-level", help="debug, info, warning, error (LOUPE_LOG_LEVEL)")
    parser.add_argument("--log-format", choices=["auto", "json", "console"], help="log format")
    parser.add_argument("--metrics-port", type=int, help="Prometheus /metrics port; 0 = any")


def settings_from_args(cls: type[S], args: argparse.Namespace, section: str, **extra: object) -> S:
    """Build ``cls`` from defaults, file, environment, then the given options."""
    overrides = {
        name: getattr(args, name, None)
        for name in ("data_dir", "nats_url", "log_level", "log_format", "metrics_port")
    }
    overrides.update(extra)
    return cls.load(config_file=getattr(args, "config", None), section=section, **overrides)
