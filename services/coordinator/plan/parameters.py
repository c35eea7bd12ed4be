"""Parameter type inference: the types PostgreSQL gives untyped ``$n`` when it plans them.

A statement prepared without a type for each of its ``$n`` (a PostgreSQL-wire
Parse with OID 0) is planned with each such ``$n`` as a ``Slot``: an untyped
NULL (``unknown``) that remembers its number. Where the planner gives an
untyped literal a type — the other operand of a comparison or an arithmetic
operator (``k = $1``, ``$1 + 1``), each item of ``IN (…)``, a function's
argument whose signature fixes it, a cast (``$1::int8``) — that type is the
parameter's; ``LIMIT``/``OFFSET`` take ``int8``. What stays unresolved is
``text``, as PostgreSQL resolves ``unknown``.

Inference is on only inside ``inferring()``; outside it a ``$n`` must have
been bound to a literal before planning.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from loupe.coordinator.sql.params import parameter_number as number_of  # noqa: F401 (used as parameters.number_of)
from loupe.plan.scalar import Literal

_INFERRED: ContextVar[dict[int, str] | None] = ContextVar("inferred_parameters", default=None)


@dataclass(frozen=True)
class Slot(Literal):
    """An untyped ``$n`` being planned: NULL of type ``unknown`` until its context types it."""

    number: int = 0


@contextmanager
def inferring() -> Iterator[dict[int, str]]:
    """Plan with untyped ``$n`` as slots; the dict fills with the types their contexts give."""
    inferred: dict[int, str] = {}
    token = _INFERRED.set(inferred)
    try:
        yield inferred
    finally:
        _INFERRED.reset(token)


def active() -> bool:
    """Whether the planner is inferring parameter types (a ``$n`` lowers to a ``Slot``)."""
    return _INFERRED.get() is not None


def typed(slot: object, type_: str) -> None:
    """``slot``, if it is a parameter's, takes ``type_`` (its first context wins)."""
    inferred = _INFERRED.get()
    if inferred is not None and isinstance(slot, Slot) and type_ not in ("unknown", ""):
        inferred.setdefault(slot.number, type_)


def typed_number(number: int, type_: str) -> None:
    """Parameter ``number`` takes ``type_`` (LIMIT/OFFSET, INSERT and UPDATE targets)."""
    inferred = _INFERRED.get()
    if inferred is not None:
        inferred.setdefault(number, type_)
