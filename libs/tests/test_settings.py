"""Settings: defaults < file < environment < command line; secrets masked."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loupe.common.settings import BaseSettings, SettingsError


@dataclasses.dataclass
class ExampleSettings(BaseSettings):
    flush_interval: float = 1.0
    enabled: bool = False
    password: str = ""


def test_precedence_of_sources(tmp_path):
    """Each later source overrides the earlier ones, and values get their field's type."""
    config = tmp_path / "loupe.toml"
    config.write_text('log_level = "debug"\nflush_interval = 5.0\n[svc]\nenabled = true\n')
    settings = ExampleSettings.load(
        config_file=config,
        section="svc",
        environ={"LOUPE_FLUSH_INTERVAL": "2.5", "LOUPE_DATA_DIR": "/tmp/x"},
        metrics_port=9100,
    )
    assert settings.log_level == "debug"
    assert settings.enabled is True
    assert settings.flush_interval == 2.5
    assert settings.data_dir == Path("/tmp/x")
    assert settings.metrics_port == 9100


def test_bad_values_and_unknown_keys_are_clear_errors(tmp_path):
    """A typo in configuration is an error naming the setting, not a silent default."""
    with pytest.raises(SettingsError, match="enabled"):
        ExampleSettings.load(environ={"LOUPE_ENABLED": "maybe"})
    config = tmp_path / "bad.toml"
    config.write_text("flush_intervall = 3\n")
    with pytest.raises(SettingsError, match="flush_intervall"):
        ExampleSettings.load(config_file=config, environ={})


def test_describe_masks_secrets():
    """Settings are printed at start without passwords or URL credentials."""
    settings = ExampleSettings.load(
        environ={}, password="hunter2", nats_url="nats://user:pw@127.0.0.1:4222"
    )
    described = settings.describe()
    assert described["password"] == "***"
    assert "pw" not in described["nats_url"]
    assert described["nats_url"].endswith("127.0.0.1:4222")
