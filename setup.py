"""Maps Loupe's source folders onto its one import package, ``loupe``.

The repository keeps the layout of DESIGN §8 (``libs/``, ``services/<name>/``),
while code imports ``loupe.common``, ``loupe.coordinator`` and so on. All other
metadata lives in ``pyproject.toml``.
"""

from pathlib import Path

from setuptools import setup

SOURCE_ROOTS = {
    "loupe": "libs/loupe",
    "loupe.coordinator": "services/coordinator",
    "loupe.catalog": "services/catalog",
    "loupe.controller": "services/controller",
    "loupe.compute_replica": "services/compute_replica",
    "loupe.console": "services/console",
}


def discover_packages() -> list[str]:
    """Every folder with an ``__init__.py`` below a source root is a package."""
    found = []
    for package, root in SOURCE_ROOTS.items():
        for init in sorted(Path(root).rglob("__init__.py")):
            relative = init.parent.relative_to(root)
            found.append(".".join((package, *relative.parts)))
    return found


setup(package_dir=SOURCE_ROOTS, packages=discover_packages())
