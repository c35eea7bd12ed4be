"""Client sessions: who is connected, their variables, what they are running.

Variable names are case-insensitive. Unknown names are 42704
``unrecognized configuration parameter "x"``; read-only ones may be "set" to
their current value (drivers do that with ``client_encoding``), anything else
is 55P02.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loupe.builtins import DEFAULT_CLUSTER_NAME
from loupe.common.errors import LoupeError, SqlState
from loupe.common.system_vars import check_rate

if TYPE_CHECKING:
    from loupe.coordinator.prepared import PreparedStatement
    from loupe.coordinator.tables import Table

DEFAULT_USER = "materialize"
DEFAULT_SUPERUSERS = ("materialize", "mz_system")
CANT_CHANGE_PARAMETER = "55P02"

# Role ids of the built-in roles, for when the catalog names no role (the
# coordinator asks its catalog first); other users are identified by their name.
ROLE_IDS = {"mz_system": "s1", "materialize": "u1"}


def _transaction_isolation(value: str) -> str:
    lowered = " ".join(value.lower().replace("_", " ").split())
    if lowered not in ("serializable", "strict serializable"):
        raise ValueError("expected 'serializable' or 'strict serializable'")
    return lowered


_DURATION_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: str) -> int:
    """PostgreSQL's duration setting (``'5s'``, ``'100ms'``, ``'2min'``, a bare number of ms)."""
    text = value.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number) :] or "ms"
    if unit not in _DURATION_UNITS or not number:
        raise ValueError('expected a duration such as "5s", "100ms" or "2min"')
    try:
        amount = float(number)
    except ValueError:
        raise ValueError('expected a duration such as "5s", "100ms" or "2min"') from None
    if amount < 0:
        raise ValueError("a duration cannot be negative")
    return round(amount * _DURATION_UNITS[unit])


def _extra_float_digits(value: str) -> str:
    try:
        digits = int(value.strip())
    except ValueError:
        raise ValueError("must be an integer") from None
    if not -15 <= digits <= 3:
        raise ValueError(f"{digits} is outside the valid range for parameter (-15 .. 3)")
    return str(digits)


def _statement_timeout(value: str) -> str:
    milliseconds = duration_ms(value)
    return "0" if milliseconds == 0 else f"{milliseconds}ms"


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    description: str
    read_only: bool = False
    # Returns the value to store; raises ValueError with the reason when invalid.
    check: Callable[[str], str] | None = None


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("cluster", DEFAULT_CLUSTER_NAME, "The cluster queries and DDL default to."),
        Variable("cluster_replica", "", "The replica of the cluster queries target (empty: all)."),
        Variable("database", "materialize", "The current database."),
        Variable("search_path", "public", "Schemas searched for unqualified names."),
        Variable("application_name", "", "The client's name, for logs and introspection."),
        Variable(
            "transaction_isolation",
            "strict serializable",
            "The isolation level of queries.",
            check=_transaction_isolation,
        ),
        Variable(
            "statement_logging_sample_rate",
            "0.99",
            "The share of this session's statements logged (capped by the system's maximum).",
            check=check_rate,
        ),
        Variable(
            "statement_timeout",
            "0",
            "How long a statement may run before it is canceled (57014); 0: no limit.",
            check=_statement_timeout,
        ),
        Variable("client_encoding", "UTF8", "The client's character set.", read_only=True),
        Variable("datestyle", "ISO, MDY", "How dates are displayed.", read_only=True),
        Variable("timezone", "UTC", "The time zone of displayed timestamps.", read_only=True),
        Variable("server_version", "9.5.0", "The PostgreSQL version reported.", read_only=True),
        Variable("server_version_num", "90500", "The same, as a number.", read_only=True),
        Variable(
            "standard_conforming_strings",
            "on",
            "Backslashes are literal in strings.",
            read_only=True,
        ),
        Variable("integer_datetimes", "on", "Datetimes are integers.", read_only=True),
        # JDBC drivers set it on connecting. As in Materialize, floats are always printed
        # in their shortest exact form (PostgreSQL's output for a value of 1 to 3).
        Variable(
            "extra_float_digits",
            "3",
            "Accepted for PostgreSQL clients; floats are always printed shortest-exact.",
            check=_extra_float_digits,
        ),
        Variable("is_superuser", "off", "Whether the user is a superuser.", read_only=True),
    )
}


def parse_superusers(setting: str | Iterable[str]) -> frozenset[str]:
    """``"materialize,mz_system"`` -> the set of names."""
    names = setting.split(",") if isinstance(setting, str) else list(setting)
    return frozenset(name.strip() for name in names if name.strip())


def _unknown(name: str, position: int = 0) -> LoupeError:
    return LoupeError(
        SqlState.UNDEFINED_OBJECT,
        f'unrecognized configuration parameter "{name}"',
        position=position,
    )


# What a transaction has done so far (Materialize's ``TransactionOps``): it may read
# (SELECTs at one timestamp), subscribe (one SUBSCRIBE, nothing else), or write (INSERTs
# of values, committed at COMMIT); never two of these.
# A transaction of one DDL statement runs it at COMMIT (SINGLE, Materialize's
# ``SingleStatement``).
NO_OPS, READS, SUBSCRIBE, WRITES, SINGLE = "none", "reads", "subscribe", "writes", "single"


@dataclass
class Cursor:
    """A ``DECLARE``d cursor: its query runs at the first ``FETCH``.

    ``rows`` were produced and not fetched yet; ``stream`` is the running
    statement's (a SUBSCRIBE's) events, ``pending`` the task waiting for its next
    one (kept across FETCHes: canceling it would end the stream).
    """

    name: str
    statement: Any
    columns: tuple[tuple[str, str], ...] | None = None
    started: bool = False
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    stream: AsyncIterator[Any] | None = None
    pending: asyncio.Future[Any] | None = None
    done: bool = False

    async def close(self) -> None:
        """Stop what it runs (a SUBSCRIBE's dataflow is dropped by its stream's clean-up)."""
        self.done = True
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()
            with contextlib.suppress(BaseException):
                await self.pending
        self.pending = None
        if self.stream is not None:
            with contextlib.suppress(Exception):
                await self.stream.aclose()  # type: ignore[attr-defined]
            self.stream = None


@dataclass
class Transaction:
    """A session's transaction (PostgreSQL's transaction block, with Materialize's rules).

    ``explicit``: opened by BEGIN; otherwise the implicit transaction of a
    multi-statement request, which ends with it. ``access``: as BEGIN said
    ("read only", "read write") or None. ``timestamp``: the read timestamp its
    first read chose; every later read of the transaction reads there.
    ``writes``: INSERTed rows by table, written at COMMIT. ``failed``: a statement
    failed; only COMMIT/ROLLBACK run until it ends.
    """

    explicit: bool
    access: str | None = None
    ops: str = NO_OPS
    timestamp: int | None = None
    writes: list[tuple[Table, list[tuple[Any, ...]]]] = field(default_factory=list)
    failed: bool = False
    cursors: dict[str, Cursor] = field(default_factory=dict)
    # The DDL statement of a single-statement transaction, run at COMMIT.
    single: Any = None


@dataclass
class Session:
    """One client session."""

    user: str
    is_superuser: bool
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    connected_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    values: dict[str, str] = field(default_factory=dict)
    # Defaults fixed when the session opened (from system variables), over VARIABLES'.
    defaults: dict[str, str] = field(default_factory=dict)
    # One statement runs at a time; Cancel cancels it.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    running: asyncio.Task | None = field(default=None, repr=False)
    cancel_requested: bool = False
    # PREPAREd statements by name (``loupe.coordinator.prepared``); they end with the session.
    prepared: dict[str, PreparedStatement] = field(default_factory=dict, repr=False)
    # time.monotonic() of the last request that named the session.
    last_active: float = field(default_factory=time.monotonic, repr=False)
    # The open transaction (explicit, or the implicit one of a multi-statement request).
    transaction: Transaction | None = field(default=None, repr=False)

    @property
    def transaction_status(self) -> str:
        """PostgreSQL's ReadyForQuery status: ``I`` idle, ``T`` in a transaction block,
        ``E`` in a failed one."""
        transaction = self.transaction
        if transaction is None or not transaction.explicit:
            return "I"
        return "E" if transaction.failed else "T"

    def touch(self) -> None:
        self.last_active = time.monotonic()

    @property
    def busy(self) -> bool:
        """Whether a statement is running (a SUBSCRIBE may run for days: not idle)."""
        return self.lock.locked()

    @property
    def role_id(self) -> str:
        return ROLE_IDS.get(self.user, self.user)

    # variables ---------------------------------------------------------------------

    def get(self, name: str, *, position: int = 0) -> str:
        # Loupe's own reads (a few every statement) spell names in lower case, as both
        # dicts key them: folded only when not found so.
        variable = VARIABLES.get(name)
        if variable is None:
            name = name.lower()
            variable = VARIABLES.get(name)
            if variable is None:
                raise _unknown(name, position)
        if name == "is_superuser":
            return "on" if self.is_superuser else "off"
        value = self.values.get(name)
        if value is None:
            value = self.defaults.get(name)
        return variable.default if value is None else value

    def set(self, name: str, value: str | None, *, position: int = 0) -> None:
        """Set ``name``; ``None`` means its default."""
        name = name.lower()
        variable = VARIABLES.get(name)
        if variable is None:
            raise _unknown(name, position)
        if value is None:
            self.values.pop(name, None)
            return
        if variable.read_only:
            if value.lower() != self.get(name).lower():
                raise LoupeError(
                    CANT_CHANGE_PARAMETER,
                    f'parameter "{name}" cannot be changed',
                    position=position,
                )
            return
        if variable.check is not None:
            try:
                value = variable.check(value)
            except ValueError as error:
                raise LoupeError(
                    SqlState.INVALID_PARAMETER_VALUE,
                    f'invalid value for parameter "{name}": "{value}": {error}',
                    position=position,
                ) from None
        self.values[name] = value

    @property
    def statement_timeout(self) -> float | None:
        """``statement_timeout`` in seconds; None when statements may run as long as they take."""
        milliseconds = duration_ms(self.get("statement_timeout"))
        return milliseconds / 1000 if milliseconds else None

    def reset(self, name: str, *, position: int = 0) -> None:
        if name.lower() == "all":
            self.values.clear()
            return
        self.set(name, None, position=position)

    def show_all(self) -> list[tuple[str, str, str]]:
        """(name, setting, description) of every variable, by name."""
        return [(name, self.get(name), VARIABLES[name].description) for name in sorted(VARIABLES)]

    def parameters(self) -> dict[str, str]:
        """Every variable's value, as reported when the session opens."""
        return {name: self.get(name) for name in VARIABLES}

    @property
    def cluster(self) -> str:
        return self.get("cluster")

    @property
    def cluster_replica(self) -> str:
        return self.get("cluster_replica")

    @property
    def search_path(self) -> str:
        return self.get("search_path")

    @property
    def database(self) -> str:
        return self.get("database")


class SessionManager:
    """The coordinator's open sessions."""

    def __init__(self, superusers: Iterable[str] | str = DEFAULT_SUPERUSERS) -> None:
        self.superusers = parse_superusers(superusers)
        self._sessions: dict[str, Session] = {}

    def open(
        self,
        user: str = "",
        *,
        application_name: str = "",
        options: dict[str, str] | None = None,
        defaults: dict[str, str] | None = None,
        is_superuser: bool | None = None,
    ) -> Session:
        """A new session; bad ``options`` are refused (nothing is opened).

        ``defaults``: what RESET goes back to for some variables (e.g.
        ``statement_logging_sample_rate`` from the system's default rate).
        ``is_superuser``: as authentication found (a role may be a superuser
        in the catalog); by default, whether ``user`` is a configured superuser.
        """
        user = user or DEFAULT_USER
        if is_superuser is None:
            is_superuser = user in self.superusers
        session = Session(user=user, is_superuser=is_superuser, defaults=defaults or {})
        if application_name:
            session.set("application_name", application_name)
        for name, value in (options or {}).items():
            session.set(name, value)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        """The session ``session_id`` (08003 if there is none), marked active now."""
        session = self._sessions.get(session_id)
        if session is None:
            raise LoupeError(SqlState.INVALID_SESSION, f"session {session_id!r} does not exist")
        session.touch()
        return session

    def idle(self, timeout: float) -> list[Session]:
        """Sessions no request named for ``timeout`` seconds and running nothing."""
        now = time.monotonic()
        return [s for s in self._sessions.values() if not s.busy and now - s.last_active > timeout]

    def close(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))
