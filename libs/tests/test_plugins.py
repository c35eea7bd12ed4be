"""The plugin registry: entry points, run-time registration, clear failures."""

from __future__ import annotations

import pytest

from loupe.common.plugins import PluginError, Registry


def test_builtin_orchestrator_is_declared_as_an_entry_point():
    """Built-ins go through the same entry-point path as third-party plugins."""
    assert "process" in Registry("loupe.orchestrators").names()


def test_dotted_path_is_imported_on_first_use():
    """A plugin named by dotted path resolves to the attribute."""
    registry = Registry("loupe.test")
    registry.register("json-dumps", "json:dumps")
    assert registry.load("json-dumps")({"a": 1}) == '{"a": 1}'


def test_unknown_and_uninstallable_plugins_say_what_to_do():
    """A missing plugin lists the known ones; a broken import hints at installing."""
    registry = Registry("loupe.test", builtins={"ghost": "no_such_module_anywhere:Thing"})
    with pytest.raises(PluginError, match="known: ghost"):
        registry.load("nope")
    with pytest.raises(PluginError, match="pip install"):
        registry.load("ghost")
