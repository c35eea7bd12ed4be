"""The house rule of the layout: no service imports another service's package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {
    "coordinator": "loupe.coordinator",
    "catalog": "loupe.catalog",
    "controller": "loupe.controller",
    "compute_replica": "loupe.compute_replica",
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_no_service_imports_another_services_package() -> None:
    """They meet on the wire; what two services share lives in libs (tests may cross)."""
    crossings = []
    for service in SERVICES:
        others = [p for s, p in SERVICES.items() if s != service]
        for path in (ROOT / "services" / service).rglob("*.py"):
            if "tests" in path.relative_to(ROOT).parts:
                continue
            for name in _imports(path):
                if any(name == other or name.startswith(other + ".") for other in others):
                    crossings.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not crossings, "\n".join(crossings)


def test_libs_import_no_service() -> None:
    """libs/loupe is what services share: it never reaches into one of them."""
    crossings = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "libs" / "loupe").rglob("*.py")
        if "proto" not in path.relative_to(ROOT).parts
        for name in _imports(path)
        if any(name == p or name.startswith(p + ".") for p in SERVICES.values())
    ]
    assert not crossings, "\n".join(crossings)
