"""The console's pages: each module here has ``routes`` (an ``aiohttp.web.RouteTableDef``)
and is listed in ``PAGES`` in the order of the navigation bar."""

from __future__ import annotations

import importlib
from types import ModuleType

PAGES = ("clusters", "objects", "activity", "operators")


def modules() -> list[ModuleType]:
    return [importlib.import_module(f"loupe.console.pages.{name}") for name in PAGES]
