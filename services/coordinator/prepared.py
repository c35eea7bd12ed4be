"""A session's prepared statements: ``PREPARE``, ``EXECUTE``, ``DEALLOCATE`` (PostgreSQL's semantics).

- ``PREPARE name [(types)] AS <SELECT | INSERT | UPDATE | DELETE>`` keeps the
  statement in the session under ``name`` (42P05 if taken). It is parsed
  then; its names are resolved and it is planned at each ``EXECUTE``
  (PostgreSQL analyzes it at PREPARE, so an unknown table is reported later
  here).
- ``EXECUTE name [(args)]`` runs it with ``args`` as its ``$1, $2, …``
  (26000 for an unknown name). The arguments are constant expressions
  (PostgreSQL: no subqueries, no columns); a literal is typed as written
  inline (cast by the planner's folding to the declared type, if any), any
  other expression is evaluated once, cast to its declared type. The statement
  needs as many arguments as its declared types or its highest ``$n``,
  whichever is more (42601 ``wrong number of parameters``).
- ``DEALLOCATE [PREPARE] name | ALL`` drops one (26000 if unknown) or all.

A session's prepared statements end with it. What the statement log records
of an ``EXECUTE`` is ``Bound``: the prepared statement's text, type and
``PreparedLog`` with the arguments (``loupe.coordinator.statement_logging``
says why).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from loupe.common.errors import LoupeError, SqlState
from loupe.coordinator.plan.scalars import cast_type
from loupe.coordinator.plan.scalars import literal as typed_literal
from loupe.coordinator.plan.values import fold_cast
from loupe.coordinator.results import Column, StatementResult
from loupe.coordinator.session import Session
from loupe.coordinator.sql.params import (
    Parameter,
    bind,
    highest_parameter,
    params_text,
)
from loupe.coordinator.sql.statements import Deallocate, Execute, Prepare, Query, Statement
from loupe.coordinator.statement_logging import PreparedLog, statement_type

DUPLICATE_PREPARED_STATEMENT = "42P05"
INVALID_SQL_STATEMENT_NAME = "26000"


@dataclass
class PreparedStatement:
    """A statement ``PREPARE`` named; ``log`` is what the statement log holds of it."""

    name: str
    statement: Statement
    param_types: tuple[str, ...] = ()
    log: PreparedLog = field(default_factory=lambda: PreparedLog(""))

    @property
    def param_count(self) -> int:
        return max(len(self.param_types), highest_parameter(self.statement))


@dataclass(frozen=True)
class Bound:
    """A statement ready to run (parameters bound), and how the statement log records it."""

    statement: Statement
    sql: str
    kind: str
    params: tuple[Parameter, ...] = ()
    # The named prepared statement executed; None: an unnamed one, prepared anew.
    prepared: PreparedLog | None = None

    @classmethod
    def unnamed(cls, statement: Statement, params: Sequence[Parameter] = ()) -> Bound:
        return cls(statement, statement.text, statement_type(statement), tuple(params))

    @property
    def params_text(self) -> str:
        return params_text(self.params)


def prepare(session: Session, statement: Prepare) -> StatementResult:
    if statement.name in session.prepared:
        raise LoupeError(
            DUPLICATE_PREPARED_STATEMENT,
            f'prepared statement "{statement.name}" already exists',
            position=statement.position,
        )
    session.prepared[statement.name] = PreparedStatement(
        statement.name,
        statement.statement,
        statement.param_types,
        PreparedLog(statement.name),
    )
    return StatementResult(tag=statement.tag)


def deallocate(session: Session, statement: Deallocate) -> StatementResult:
    if statement.name is None:
        session.prepared.clear()
    elif session.prepared.pop(statement.name, None) is None:
        raise _unknown(statement.name, statement.position)
    return StatementResult(tag=statement.tag)


def lookup(session: Session, statement: Execute) -> PreparedStatement:
    """The prepared statement ``EXECUTE`` names (26000 if none), its arguments checked."""
    prepared = session.prepared.get(statement.name)
    if prepared is None:
        raise _unknown(statement.name, statement.position)
    if len(statement.args) != prepared.param_count:
        raise LoupeError(
            SqlState.SYNTAX_ERROR,
            f'wrong number of parameters for prepared statement "{prepared.name}"',
            detail=f"Expected {prepared.param_count} parameters but got {len(statement.args)}.",
            position=statement.position,
        )
    for arg in statement.args:
        if arg.find(exp.Select, exp.Subquery) is not None:
            raise LoupeError(
                SqlState.FEATURE_NOT_SUPPORTED,
                "cannot use subquery in EXECUTE parameter",
                position=statement.position,
            )
    return prepared


async def bound_execution(
    session: Session,
    statement: Execute,
    evaluate: Callable[[Session, Query], Awaitable[tuple[Sequence[Column], list[tuple[Any, ...]]]]],
) -> Bound:
    """The prepared statement ``EXECUTE`` names with its arguments bound, logged as itself.

    ``evaluate`` runs a query (``sequencer.select.run_query``): the arguments
    that are not literals are evaluated by one ``SELECT``.
    """
    target = lookup(session, statement)
    arguments = _literal_arguments(target, statement)
    expressions = [a for a in arguments if isinstance(a, exp.Expression)]
    if expressions:
        select = exp.select(*(e.copy() for e in expressions))
        query = Query(text=select.sql(dialect="postgres"), offset=0, expression=select)
        columns, rows = await evaluate(session, query)
        values = iter(
            Parameter(value, kind) for (_, kind), value in zip(columns, rows[0], strict=True)
        )
        arguments = [a if isinstance(a, Parameter) else next(values) for a in arguments]
    params = [a for a in arguments if isinstance(a, Parameter)]
    bound = bind(target.statement, params, check_count=False, statement_name=target.name)
    return Bound(
        bound, target.statement.text, statement_type(target.statement), tuple(params), target.log
    )


def _literal_arguments(
    prepared: PreparedStatement, statement: Execute
) -> list[Parameter | exp.Expression]:
    """Each argument as a parameter when it is a literal; else the expression to evaluate.

    An expression comes cast to its declared type, so evaluating it gives the
    parameter's type too.
    """
    arguments: list[Parameter | exp.Expression] = []
    for index, arg in enumerate(statement.args):
        declared = _declared(prepared, index)
        value = _literal(arg)
        if value is None:
            arguments.append(arg if declared is None else exp.cast(arg.copy(), declared))
            continue
        if declared is not None:
            to = cast_type(declared)
            try:
                value = Parameter(fold_cast(value.value, value.type, to), to)
            except ValueError:
                arguments.append(exp.cast(arg.copy(), declared))
                continue
        arguments.append(value)
    return arguments


def _declared(prepared: PreparedStatement, index: int) -> exp.DataType | None:
    if index >= len(prepared.param_types):
        return None
    return exp.DataType.build(prepared.param_types[index], dialect="postgres")


def _literal(arg: exp.Expression) -> Parameter | None:
    """A literal argument as a parameter (typed as written inline); None for other expressions."""
    node = arg.this if isinstance(arg, exp.Paren) else arg
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if not isinstance(node, exp.Literal | exp.Null | exp.Boolean):
        return None
    if negative and not (isinstance(node, exp.Literal) and not node.is_string):
        return None
    scalar = typed_literal(node)
    return Parameter(-scalar.value if negative else scalar.value, scalar.type)


def _unknown(name: str, position: int) -> LoupeError:
    return LoupeError(
        INVALID_SQL_STATEMENT_NAME,
        f'prepared statement "{name}" does not exist',
        position=position,
    )
