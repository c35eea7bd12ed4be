"""Scalars evaluated on Python rows, for small deltas: the row path's ``compile_scalar``.

A few rows pay polars' fixed cost per query (tens to hundreds of microseconds)
for every expression an operator evaluates; in Python a row costs a
microsecond. Only what is evaluated here exactly as ``expr`` evaluates it in
polars is compiled: columns, literals, ``+ - *`` of integers and numerics and ``%`` of
integers
(numeric products round half to even at numeric's scale, as polars' decimal
product does). Anything else compiles to None, and a value that would be an
error row (an overflow) raises ``Declined``: the columnar path then evaluates
the whole batch, errors and all.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

from loupe import sqltypes
from loupe.plan.scalar import Call, Column, Literal, Scalar, scalar_type

Row = Sequence[Any]
RowScalar = Callable[[Row], Any]

_INTEGERS = {"int2": 16, "int4": 32, "int8": 64}
# Numeric operands' magnitude (in numeric's last digits) up to which polars' decimal
# product rounds exactly; larger ones are left to it.
_EXACT = 10**28
_SCALE = sqltypes.NUMERIC_SCALE
_QUANTUM = Decimal(1).scaleb(-_SCALE)
_CONTEXT = Context(prec=100, rounding=ROUND_HALF_EVEN)
# ``expr._numeric_op``'s range check: the Float64 approximation of the result.
_UNIT = 10.0**-_SCALE
_LIMIT = float(sqltypes.NUMERIC_LIMIT) * (1 - 1e-9)


class Declined(Exception):
    """A row the row path does not evaluate (it would be an error row): polars decides."""


def units(value: Decimal) -> int:
    """A numeric's 128-bit integer (its value in last digits), as polars holds it."""
    return int(value.scaleb(_SCALE, _CONTEXT))


def compile_row(expr: Scalar, input_types: Sequence[str]) -> RowScalar | None:
    """``expr`` as a function of a row (a tuple of the input columns), or None."""
    types = tuple(input_types)
    if isinstance(expr, Column):
        return _column(expr.index)
    if isinstance(expr, Literal):
        if expr.value is None or expr.type not in (*_INTEGERS, "numeric"):
            return None
        constant = expr.value
        if expr.type == "numeric":  # only what casts to numeric unrounded
            if not isinstance(constant, int | Decimal) or isinstance(constant, bool):
                return None
            exponent = Decimal(constant).as_tuple().exponent
            if not isinstance(exponent, int) or exponent < -_SCALE:
                return None
        return lambda row: constant
    if isinstance(expr, Call) and expr.func in ("add", "sub", "mul", "mod") and len(expr.args) == 2:
        result = scalar_type(expr, types)
        operand_types = [scalar_type(a, types) for a in expr.args]
        if not all(t in _INTEGERS or t == "numeric" for t in operand_types):
            return None
        left, right = (compile_row(a, types) for a in expr.args)
        if left is None or right is None:
            return None
        if result == "numeric":
            return _numeric(expr.func, left, right) if expr.func != "mod" else None
        if result in _INTEGERS and all(t in _INTEGERS for t in operand_types):
            return _integer(expr.func, left, right, _INTEGERS[result])
    return None


def _column(index: int) -> RowScalar:
    return lambda row: row[index]


def _numeric(func: str, left: RowScalar, right: RowScalar) -> RowScalar:
    def evaluate(row: Row) -> Decimal | None:
        a, b = left(row), right(row)
        if a is None or b is None:
            return None
        a, b = Decimal(a), Decimal(b)
        ua, ub = units(a), units(b)
        if abs(ua) >= _EXACT or abs(ub) >= _EXACT:
            raise Declined
        fa, fb = float(ua) * _UNIT, float(ub) * _UNIT
        approximate = fa + fb if func == "add" else fa - fb if func == "sub" else fa * fb
        if abs(approximate) >= _LIMIT:
            raise Declined  # 22003 numeric field overflow, as an error row
        if func == "add":
            exact = _CONTEXT.add(a, b)
        elif func == "sub":
            exact = _CONTEXT.subtract(a, b)
        else:
            exact = _CONTEXT.multiply(a, b)
        return exact.quantize(_QUANTUM, context=_CONTEXT)

    return evaluate


def _integer(func: str, left: RowScalar, right: RowScalar, bits: int) -> RowScalar:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def evaluate(row: Row) -> int | None:
        a, b = left(row), right(row)
        if a is None or b is None:
            return None
        if func == "mod":
            if b == 0:
                raise Declined  # 22012 division by zero, as an error row
            remainder = abs(a) % abs(b)  # the dividend's sign, as PostgreSQL's %
            value = -remainder if a < 0 else remainder
        else:
            value = a + b if func == "add" else a - b if func == "sub" else a * b
        if not low <= value <= high:
            raise Declined  # 22003 integer out of range, as an error row
        return int(value)

    return evaluate


def compile_all(exprs: Sequence[Scalar], input_types: Sequence[str]) -> list[RowScalar] | None:
    """Every one of ``exprs`` compiled, or None if one is not."""
    compiled = [compile_row(e, input_types) for e in exprs]
    if any(c is None for c in compiled):
        return None
    return [c for c in compiled if c is not None]


# Comparisons whose operands compare in Python as in polars: the same type (integers of
# any width together, numerics with integers); no floats (NaN), no intervals or lists.
_COMPARED = {*_INTEGERS, "numeric", "text", "date", "bool"}
_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}


def compile_predicate(expr: Scalar, input_types: Sequence[str]) -> RowScalar | None:
    """A boolean ``expr`` (comparisons under ``and``/``or``/``not``) on a row: True, False or
    None (NULL), as polars' three-valued logic gives it; None if it is not one of these."""
    types = tuple(input_types)
    if isinstance(expr, Call) and expr.func in _COMPARISONS and len(expr.args) == 2:
        operand_types = {scalar_type(a, types) for a in expr.args}
        numbers = operand_types <= {*_INTEGERS, "numeric"}
        if not (numbers or (len(operand_types) == 1 and operand_types <= _COMPARED)):
            return None
        left, right = (_operand(a, types) for a in expr.args)
        if left is None or right is None:
            return None
        compare = _COMPARISONS[expr.func]

        def comparison(row: Row) -> bool | None:
            a, b = left(row), right(row)
            if a is None or b is None:
                return None
            return compare(a, b)

        return comparison
    if isinstance(expr, Call) and expr.func in ("and", "or") and expr.args:
        parts = [compile_predicate(a, types) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return _conjunction([p for p in parts if p is not None], expr.func == "and")
    if isinstance(expr, Call) and expr.func == "not" and len(expr.args) == 1:
        inner = compile_predicate(expr.args[0], types)
        if inner is None:
            return None
        return lambda row: None if (value := inner(row)) is None else not value
    return None


def _operand(expr: Scalar, types: tuple[str, ...]) -> RowScalar | None:
    """A comparison's operand: what ``compile_row`` evaluates, and literals of the compared
    types (a date, a string)."""
    if isinstance(expr, Literal) and expr.type in ("text", "date", "bool"):
        constant = expr.value
        return lambda row: constant
    return compile_row(expr, types)


def _conjunction(parts: list[RowScalar], every: bool) -> RowScalar:
    """AND (``every``) or OR of three-valued parts: a decisive value wins over NULL."""
    decisive = not every  # AND: a False decides; OR: a True decides

    def evaluate(row: Row) -> bool | None:
        unknown = False
        for part in parts:
            value = part(row)
            if value is None:
                unknown = True
            elif value == decisive:
                return decisive
        return None if unknown else every

    return evaluate


class RowMfp:
    """A MapFilterProject on Python rows ``(c0.., time, diff)``: maps by ``compile_row``,
    predicates by ``compile_predicate``, then the projection."""

    def __init__(
        self, maps: list[RowScalar], predicates: list[RowScalar], projection: tuple[int, ...]
    ) -> None:
        self.maps = maps
        self.predicates = predicates
        self.projection = projection

    def apply(self, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
        """The rows that pass, projected (``Declined`` where a map would be an error)."""
        out: list[tuple[Any, ...]] = []
        for row in rows:
            values = list(row[:-2])
            for expression in self.maps:
                values.append(expression(values))
            if all(p(values) for p in self.predicates):
                out.append((*(values[i] for i in self.projection), row[-2], row[-1]))
        return out


def compile_mfp(
    expressions: Sequence[Scalar],
    predicates: Sequence[Scalar],
    projection: tuple[int, ...],
    input_types: Sequence[str],
) -> RowMfp | None:
    """A MapFilterProject for rows, or None if one of its parts is not evaluated here."""
    types = list(input_types)
    maps = []
    for expression in expressions:
        compiled = compile_row(expression, types)
        if compiled is None:
            return None
        maps.append(compiled)
        types.append(scalar_type(expression, tuple(types)))
    tests = [compile_predicate(p, types) for p in predicates]
    if any(t is None for t in tests):
        return None
    return RowMfp(maps, [t for t in tests if t is not None], projection)
