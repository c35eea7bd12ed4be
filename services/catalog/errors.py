"""Errors of the durable catalog that are not the user's fault.

The user's errors (a duplicate name, an unknown cluster) are ``LoupeError``s
with a SQLSTATE and travel back to the client; these stop the catalog.
"""

from __future__ import annotations

from loupe.catalog.objects import FenceToken


class CatalogError(RuntimeError):
    """The durable catalog cannot be used."""


class CatalogCorruptError(CatalogError):
    """The catalog file is not a Loupe catalog, or it is damaged.

    Never answered by re-initialising: that would throw away the catalog.
    """


class CatalogReadOnlyError(CatalogError):
    """A write was attempted on a catalog opened read-only."""


class FencedError(CatalogError):
    """Another writer opened the catalog after us: we must stop writing.

    ``ours`` is the token this process opened with, ``current`` the one
    stored now.
    """

    def __init__(self, ours: FenceToken, current: FenceToken) -> None:
        self.ours = ours
        self.current = current
        super().__init__(
            f"catalog fenced: this process holds {ours} but the catalog is now at {current}"
        )

    @property
    def by_newer_deploy(self) -> bool:
        """A newer deployment took over: an orderly hand-over, not a split brain."""
        return self.current.deploy_generation > self.ours.deploy_generation


class CatalogNotInitializedError(CatalogError):
    """The catalog has never been opened for writing: there is nothing to read."""
