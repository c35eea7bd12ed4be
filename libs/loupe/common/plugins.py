"""The plugin registry: name -> dotted path, imported on first use.

Each extension point has an entry-point group (``loupe.orchestrators``,
``loupe.catalog_backends``, ``loupe.consensus``, ``loupe.blob``,
``loupe.log_variants``). Built-ins are declared as entry points in
``pyproject.toml`` too, so they go through the same path as third-party
plugins; ``register`` adds one at run time (tests, embedding).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any


class PluginError(LookupError):
    pass


class Registry:
    """Plugins of one extension point."""

    def __init__(self, group: str, *, builtins: dict[str, str] | None = None) -> None:
        self.group = group
        self._paths: dict[str, str] = dict(builtins or {})
        self._loaded: dict[str, Any] = {}
        self._scanned = False

    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        for entry in entry_points(group=self.group):
            self._paths.setdefault(entry.name, entry.value)

    def register(self, name: str, target: str | Any) -> None:
        """Register a plugin by dotted path (``pkg.mod:Attr``) or by object."""
        if isinstance(target, str):
            self._paths[name] = target
            self._loaded.pop(name, None)
        else:
            self._loaded[name] = target

    def names(self) -> list[str]:
        self._scan()
        return sorted(set(self._paths) | set(self._loaded))

    def load(self, name: str) -> Any:
        if name in self._loaded:
            return self._loaded[name]
        self._scan()
        path = self._paths.get(name)
        if path is None:
            known = ", ".join(self.names()) or "none"
            raise PluginError(f"unknown {self.group} plugin {name!r} (known: {known})")
        module_name, _, attribute = path.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise PluginError(
                f"{self.group} plugin {name!r} could not be imported from {module_name}: "
                f"{error}. Install the package that provides it (pip install ...)."
            ) from error
        target: Any = module
        for part in filter(None, attribute.split(".")):
            target = getattr(target, part)
        self._loaded[name] = target
        return target
