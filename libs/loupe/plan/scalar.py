"""Scalar expressions shared by MIR and LIR: evaluated per row over a relation's columns."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loupe import sqltypes

# Operators whose result is boolean, and the text EXPLAIN prints for infix ones.
INFIX = {
    "eq": "=",
    "neq": "!=",
    "lt": "<",
    "lte": "<=",
    "gt": ">",
    "gte": ">=",
    "and": "AND",
    "or": "OR",
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "mod": "%",
    "like": "LIKE",
    "ilike": "ILIKE",
    "concat": "||",
}
BOOLEAN_RESULT = {"eq", "neq", "lt", "lte", "gt", "gte", "and", "or", "not", "like", "ilike"}
BOOLEAN_RESULT |= {"is_null", "is_not_null"}
ARITHMETIC = {"add", "sub", "mul", "div", "mod", "neg"}
NUMERIC_RANK = sqltypes.NUMERIC_RANK


@dataclass(frozen=True)
class Column:
    """The value of input column ``index`` (``#index`` in EXPLAIN)."""

    index: int


@dataclass(frozen=True)
class Literal:
    """A constant of a PostgreSQL type (``value`` None is SQL NULL)."""

    value: Any
    type: str


@dataclass(frozen=True)
class Call:
    """A named function or operator applied to arguments."""

    func: str
    args: tuple[Scalar, ...]


@dataclass(frozen=True)
class Case:
    """``CASE WHEN cond THEN result … ELSE otherwise END``."""

    whens: tuple[tuple[Scalar, Scalar], ...]
    otherwise: Scalar


@dataclass(frozen=True)
class Cast:
    """A cast of ``expr`` to the PostgreSQL type ``type``."""

    expr: Scalar
    type: str


Scalar = Column | Literal | Call | Case | Cast


def scalar_type(expr: Scalar, input_types: tuple[str, ...]) -> str:
    """The PostgreSQL type of ``expr`` over columns of ``input_types``.

    Calls are typed by the function registry (``loupe.plan.functions``),
    which imports this module, hence the late import.
    """
    from loupe.plan.functions import expr_type

    return expr_type(expr, input_types)


def widest_numeric(types: list[str]) -> str:
    """The type PostgreSQL promotes a mix of numeric types to."""
    known = [t for t in types if t in NUMERIC_RANK]
    return sqltypes.common_numeric(known) if known else (types[0] if types else "unknown")


def remap(expr: Scalar, mapping: Callable[[int], int]) -> Scalar:
    """``expr`` with every ``Column(i)`` replaced by ``Column(mapping(i))``."""
    if isinstance(expr, Column):
        return Column(mapping(expr.index))
    if isinstance(expr, Literal):
        return expr
    if isinstance(expr, Call):
        return Call(expr.func, tuple(remap(arg, mapping) for arg in expr.args))
    if isinstance(expr, Cast):
        return Cast(remap(expr.expr, mapping), expr.type)
    whens = tuple((remap(c, mapping), remap(r, mapping)) for c, r in expr.whens)
    return Case(whens, remap(expr.otherwise, mapping))


def shift(expr: Scalar, offset: int) -> Scalar:
    """``expr`` with every column index increased by ``offset``."""
    return remap(expr, lambda index: index + offset)


def columns_of(expr: Scalar) -> set[int]:
    """The input columns ``expr`` reads."""
    if isinstance(expr, Column):
        return {expr.index}
    if isinstance(expr, Literal):
        return set()
    if isinstance(expr, Call):
        return set().union(*(columns_of(arg) for arg in expr.args))
    if isinstance(expr, Cast):
        return columns_of(expr.expr)
    parts = [columns_of(e) for pair in expr.whens for e in pair] + [columns_of(expr.otherwise)]
    return set().union(*parts)


def render(expr: Scalar) -> str:
    """EXPLAIN text of a scalar expression (``(#0 + 1)``, ``upper(#1)``)."""
    if isinstance(expr, Column):
        return f"#{expr.index}"
    if isinstance(expr, Literal):
        return render_value(expr.value)
    if isinstance(expr, Cast):
        inner = render(expr.expr)
        return (
            f"{inner}::{expr.type}"
            if isinstance(expr.expr, Column | Literal)
            else f"({inner})::{expr.type}"
        )
    if isinstance(expr, Case):
        whens = " ".join(f"when {render(c)} then {render(r)}" for c, r in expr.whens)
        return f"case {whens} else {render(expr.otherwise)} end"
    return _render_call(expr)


def _render_call(call: Call) -> str:
    args = [render(arg) for arg in call.args]
    if call.func in INFIX and len(args) == 2:
        return f"({args[0]} {INFIX[call.func]} {args[1]})"
    if call.func in ("and", "or") and len(args) > 2:  # variadic AND/OR
        return "(" + f" {INFIX[call.func]} ".join(args) + ")"
    if call.func == "not":
        return f"NOT({args[0]})"
    if call.func == "neg":
        return f"-{args[0]}"
    if call.func in ("is_null", "is_not_null"):
        return f"({args[0]}) IS {'NOT ' if call.func == 'is_not_null' else ''}NULL"
    return f"{call.func}({', '.join(args)})"


def render_value(value: Any) -> str:
    """A literal value as EXPLAIN prints it (dates and times as PostgreSQL prints them)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, tuple | list):  # an array or list constant
        return "{" + ",".join(render_value(v) for v in value) + "}"
    return str(value)  # an Interval prints as PostgreSQL prints it
