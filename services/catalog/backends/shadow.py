"""``shadow``: two catalog backends run side by side, compared on every call.

Seed 004's shadow implementation, for proving a new backend against a
trusted one: every storage primitive runs on the primary, then on the
secondary, and any difference in their results (rows, version, fence token,
timestamp, or which error they raised) is a ``ShadowMismatchError`` naming
the method and both results, logged at error level. The primary's results are
the ones returned. After a mismatch the shadow refuses every further call:
the two stores no longer agree, so neither answer can be trusted.

Time is the primary's: the secondary gets the timestamp the primary chose as
its clock reading, so two correct backends agree on every timestamp.

Options: ``shadow_primary`` (default ``stash-sqlite``) and
``shadow_secondary`` (default ``stash-postgres``) name the two backends;
every other option goes to whichever of them accepts it (``postgres_url``
to ``stash-postgres``, ``path`` to ``stash-sqlite``). Or give two
constructed (unopened) backends as ``primary`` and ``secondary``.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loupe.catalog.durable import (
    BACKENDS,
    DurableCatalogState,
    Loaded,
    Migrate,
    now_ms,
)
from loupe.catalog.errors import CatalogError, FencedError
from loupe.catalog.migrations import Row, Write
from loupe.catalog.objects import FenceToken
from loupe.common.logging import get_logger

log = get_logger(__name__)

DEFAULT_PRIMARY = "stash-sqlite"
DEFAULT_SECONDARY = "stash-postgres"
# How many differing rows a message names.
MAX_ROWS_NAMED = 5
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 200
_short.maxlist = _short.maxtuple = 10


class ShadowMismatchError(CatalogError):
    """The shadow's two backends gave different results for the same call."""

    def __init__(self, method: str, primary: Any, secondary: Any, difference: str) -> None:
        self.method = method
        self.primary = primary
        self.secondary = secondary
        self.difference = difference
        super().__init__(f"shadow catalog mismatch in {method}: {difference}")


@dataclass(frozen=True)
class Outcome:
    """What one backend's call did: returned ``value`` or raised ``error``."""

    value: Any = None
    error: Exception | None = None

    @classmethod
    def of(cls, call: Callable[[], Any]) -> Outcome:
        try:
            return cls(value=call())
        except Exception as error:
            return cls(error=error)

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def __str__(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {self.error}"
        return f"returned {_short.repr(self.value)}"


def difference(primary: Outcome, secondary: Outcome) -> str | None:
    """How two outcomes differ, or None when they agree.

    Errors agree when they are of the same type (and, for a fence, name the
    same tokens): their messages name each backend's own location.
    """
    if primary.error is not None or secondary.error is not None:
        if type(primary.error) is not type(secondary.error):
            return f"primary {primary}, secondary {secondary}"
        if _fence_tokens(primary.error) != _fence_tokens(secondary.error):
            return f"primary {primary}, secondary {secondary}"
        return None
    if primary.value == secondary.value:
        return None
    if isinstance(primary.value, Loaded) and isinstance(secondary.value, Loaded):
        return _loaded_difference(primary.value, secondary.value)
    return f"primary {primary}, secondary {secondary}"


def _fence_tokens(error: Exception | None) -> tuple[FenceToken, FenceToken] | None:
    return (error.ours, error.current) if isinstance(error, FencedError) else None


def _loaded_difference(primary: Loaded, secondary: Loaded) -> str:
    parts = [
        f"{name}: primary {getattr(primary, name)}, secondary {getattr(secondary, name)}"
        for name in ("version", "fence", "timestamp")
        if getattr(primary, name) != getattr(secondary, name)
    ]
    ours = {(kind, key): value for kind, key, value in primary.rows}
    theirs = {(kind, key): value for kind, key, value in secondary.rows}
    differing = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    for kind, key in differing[:MAX_ROWS_NAMED]:
        parts.append(
            f"row {kind}/{key}: primary {_short.repr(ours.get((kind, key)))}, "
            f"secondary {_short.repr(theirs.get((kind, key)))}"
        )
    if len(differing) > MAX_ROWS_NAMED:
        parts.append(f"and {len(differing) - MAX_ROWS_NAMED} more differing rows")
    return "; ".join(parts)


def _accepted_options(backend: type, options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that ``backend``'s constructor takes."""
    parameters = inspect.signature(backend).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(options)
    return {name: value for name, value in options.items() if name in parameters}


class ShadowCatalogBackend(DurableCatalogState):
    """A primary and a secondary backend, compared on every storage call."""

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        deploy_generation: int | None = None,
        now: Callable[[], int] = now_ms,
        shadow_primary: str = DEFAULT_PRIMARY,
        shadow_secondary: str = DEFAULT_SECONDARY,
        primary: DurableCatalogState | None = None,
        secondary: DurableCatalogState | None = None,
        **options: Any,
    ) -> None:
        if (primary is None) != (secondary is None):
            raise CatalogError("a shadow catalog needs both a primary and a secondary backend")
        super().__init__(deploy_generation=deploy_generation or 0, now=now)
        if primary is not None and secondary is not None:
            generations = {primary.deploy_generation, secondary.deploy_generation}
            if deploy_generation is not None:
                generations.add(deploy_generation)
            if len(generations) != 1:
                raise CatalogError(
                    f"shadowed backends disagree on the deploy generation: {sorted(generations)}"
                )
            self.deploy_generation = primary.deploy_generation
            self.primary_name = type(primary).__name__
            self.secondary_name = type(secondary).__name__
        else:
            # Our clock (pinned while opening) is theirs, so they stamp alike.
            primary, secondary = self._build(
                (shadow_primary, shadow_secondary),
                data_dir,
                self.deploy_generation,
                self._now,
                options,
            )
            self.primary_name, self.secondary_name = shadow_primary, shadow_secondary
        self.primary = primary
        self.secondary = secondary
        self._mismatch: ShadowMismatchError | None = None

    @staticmethod
    def _build(
        names: tuple[str, str],
        data_dir: Path | None,
        deploy_generation: int,
        now: Callable[[], int],
        options: dict[str, Any],
    ) -> tuple[DurableCatalogState, DurableCatalogState]:
        classes = [BACKENDS.load(name) for name in names]
        unused = set(options)
        for backend in classes:
            unused -= set(_accepted_options(backend, options))
        if unused:
            # As for any constructor given an unknown keyword.
            raise TypeError(
                f"option(s) {', '.join(sorted(unused))} are taken by neither {names[0]} "
                f"nor {names[1]}"
            )
        primary, secondary = (
            backend(
                data_dir,
                deploy_generation=deploy_generation,
                now=now,
                **_accepted_options(backend, options),
            )
            for backend in classes
        )
        return primary, secondary

    def __repr__(self) -> str:
        return f"ShadowCatalogBackend({self.primary!r}, {self.secondary!r})"

    # Running both

    def _both(
        self,
        method: str,
        primary_call: Callable[[], Any],
        secondary_call: Callable[[Outcome], Any],
    ) -> Any:
        """Run the primary, then the secondary (which may use the primary's outcome).

        Returns the primary's result (or raises its error) when both agree.
        """
        if self._mismatch is not None:
            raise CatalogError(
                f"the shadow catalog refuses {method}: its backends diverged earlier "
                f"({self._mismatch})"
            ) from self._mismatch
        primary = Outcome.of(primary_call)
        secondary = Outcome.of(lambda: secondary_call(primary))
        differs = difference(primary, secondary)
        if differs is not None:
            self._mismatch = ShadowMismatchError(method, primary, secondary, differs)
            log.error(
                "shadow catalog mismatch",
                method=method,
                primary_backend=self.primary_name,
                secondary_backend=self.secondary_name,
                primary=str(primary),
                secondary=str(secondary),
                difference=differs,
            )
            raise self._mismatch
        return primary.unwrap()

    @staticmethod
    @contextmanager
    def _pinned_clock(backend: DurableCatalogState, timestamp: int) -> Iterator[None]:
        """Make ``backend`` read ``timestamp`` as its clock (as an open pins its own)."""
        saved = backend._pinned_now
        backend._pinned_now = timestamp
        try:
            yield
        finally:
            backend._pinned_now = saved

    # DurableCatalogState primitives

    def is_initialized(self) -> bool:
        return bool(
            self._both(
                "is_initialized",
                self.primary.is_initialized,
                lambda _: self.secondary.is_initialized(),
            )
        )

    def _load(self, *, writable: bool, initial_rows: list[Row], migrate: Migrate) -> Loaded:
        # An initialising load stamps the first timestamp from the clock: the
        # primary reads ours (the instant the bootstrap rows were stamped with),
        # the secondary the timestamp the primary chose.
        boot = self._now()

        def primary() -> Loaded:
            with self._pinned_clock(self.primary, boot):
                return self.primary._load(
                    writable=writable, initial_rows=initial_rows, migrate=migrate
                )

        def secondary(primary: Outcome) -> Loaded:
            timestamp = primary.value.timestamp if primary.error is None else boot
            with self._pinned_clock(self.secondary, timestamp):
                return self.secondary._load(
                    writable=writable, initial_rows=initial_rows, migrate=migrate
                )

        loaded: Loaded = self._both("_load", primary, secondary)
        return loaded

    def _write(self, fence: FenceToken, writes: list[Write], now: int) -> int:
        def secondary(primary: Outcome) -> int:
            # The primary's timestamp as the clock: equal oracles then agree on it.
            clock = primary.value if primary.error is None else now
            return self.secondary._write(fence, writes, clock)

        return int(self._both("_write", lambda: self.primary._write(fence, writes, now), secondary))

    def _confirm_fence(self, fence: FenceToken) -> None:
        self._both(
            "_confirm_fence",
            lambda: self.primary._confirm_fence(fence),
            lambda _: self.secondary._confirm_fence(fence),
        )

    def _read_fence(self) -> FenceToken | None:
        fence: FenceToken | None = self._both(
            "_read_fence", self.primary._read_fence, lambda _: self.secondary._read_fence()
        )
        return fence

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.secondary.close()
