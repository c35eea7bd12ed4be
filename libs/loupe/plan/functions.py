"""The scalar functions and operators a plan may call, with their arities and result types.

The planner reads this registry to accept a function name and type the call;
the engine (``loupe.dataflow.expr``) implements every entry whose
``evaluable`` is true (a test holds it to that). Names are PostgreSQL's, with
PostgreSQL's argument order; operators use the names in
``loupe.plan.scalar.INFIX`` (``add``, ``eq``, ``concat`` for ``||``…).

``now()``/``mz_now()``/``current_timestamp`` are registered but not
evaluable: a dataflow has no "current time", so the planner must fold them
into literals (or refuse the query).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loupe import sqltypes
from loupe.plan.scalar import ARITHMETIC, NUMERIC_RANK, Case, Cast, Column, Literal, Scalar
from loupe.sqltypes import INTEGER_TYPES, TIME_TYPES, common_numeric

TypeRule = Callable[[Sequence[str]], str]

# Calls whose string-literal arguments take the type of the other arguments.
COERCING = {"eq", "neq", "lt", "lte", "gt", "gte", "between", "coalesce", "nullif"}
# Functions whose result is NULL whenever an argument is NULL (PostgreSQL's
# "strict"): with a NULL constant argument the planner folds them to NULL, as
# PostgreSQL does, without evaluating the others. Only functions listed here;
# coalesce, concat(), greatest, AND/OR, BETWEEN, IS [NOT] NULL, nullif are not.
STRICT = frozenset(
    {
        *("add", "sub", "mul", "div", "mod", "neg", "eq", "neq", "lt", "lte", "gt", "gte"),
        *("like", "ilike", "regexp_like", "regexp_replace", "abs", "ceil", "ceiling", "floor"),
        *("round", "trunc", "sqrt", "cbrt", "exp", "ln", "log", "log10", "pow", "power"),
        *("sign", "upper", "lower", "length", "char_length", "character_length"),
        *("octet_length", "substr", "substring", "strpos", "replace", "concat", "lpad"),
        *("rpad", "left", "right", "split_part", "starts_with", "btrim", "ltrim", "rtrim"),
        *(
            "trim",
            "reverse",
            "repeat",
            "translate",
            "pg_size_pretty",
            "date_part",
            "extract",
            "date_trunc",
        ),
        # Not subscript: PostgreSQL folds a[i] with a NULL array only when i is constant too.
        *("make_date", "not", "cardinality", "list_length", "array_length", "list_slice"),
        *("array_contains", "array_contained", "array_overlap", "jsonb_get", "jsonb_get_text"),
        *("jsonb_exists", "jsonb_contains", "jsonb_contained", "jsonb_typeof"),
        "jsonb_array_length",
    }
)
COERCING |= {"greatest", "least"} | ARITHMETIC
# Functions whose implementation refuses argument types or non-constant arguments the
# registry does not describe: the planner compiles calls to them, so the statement fails.
CHECKED_WHEN_PLANNED = frozenset(
    {
        "to_char",
        "timezone",
        "date_bin",
        "chr",
        "ascii",
        "md5",
        "pg_size_pretty",
        "regexp_like",
        "regexp_replace",
        "translate",
        "extract",
        "date_part",
        "date_trunc",
    }
)
# The types string literals take at each argument position of these calls (None: as written).
LITERAL_TYPES: dict[str, tuple[str | None, ...]] = {
    "date_bin": ("interval", None, None),
    "to_timestamp": ("float8",),
    "make_timestamp": ("int4", "int4", "int4", "int4", "int4", "float8"),
    "chr": ("int4",),
    "jsonb_contains": ("jsonb", "jsonb"),
    "jsonb_contained": ("jsonb", "jsonb"),
    **dict.fromkeys(("jsonb_typeof", "jsonb_array_length"), ("jsonb",)),
    **dict.fromkeys(("justify_hours", "justify_days", "justify_interval"), ("interval",)),
    "age": ("timestamp", "timestamp"),
}


@dataclass(frozen=True)
class Function:
    """One registered function: accepted argument counts, result type rule, what it does."""

    name: str
    min_args: int
    max_args: int | None  # None: variadic
    result: TypeRule
    description: str
    evaluable: bool = True

    def accepts(self, count: int) -> bool:
        """Whether ``count`` arguments is a valid call."""
        return count >= self.min_args and (self.max_args is None or count <= self.max_args)


def widest(types: Sequence[str]) -> str:
    """The numeric type PostgreSQL promotes a mix to (ignoring untyped NULLs)."""
    known = [t for t in types if t in NUMERIC_RANK]
    if known:
        return common_numeric(known)
    return next((t for t in types if t != "unknown"), "unknown")


def _fixed(result: str) -> TypeRule:
    return lambda _types: result


def _first(types: Sequence[str]) -> str:
    return types[0] if types else "unknown"


def _common(types: Sequence[str]) -> str:
    """The shared type of COALESCE/GREATEST-style arguments."""
    known = [t for t in types if t != "unknown"]
    if any(t in NUMERIC_RANK for t in known):
        return widest(known)
    if "timestamptz" in known:
        return "timestamptz"
    if "timestamp" in known:
        return "timestamp"
    return known[0] if known else "unknown"


_FAMILIES = ({"int2", "int4", "int8"}, {"float4", "float8"})


def _nullif(types: Sequence[str]) -> str:
    """a's type, unless ``a = b`` must first convert a (PostgreSQL compares int4 with int8
    and real with double precision directly, an integer with numeric as numeric)."""
    first, second = types
    if first not in NUMERIC_RANK or second not in NUMERIC_RANK:
        return first if first != "unknown" else second
    if any({first, second} <= family for family in _FAMILIES):
        return first
    return widest(types)


def _float_unless_numeric(types: Sequence[str]) -> str:
    """``float8`` for float and integer arguments (PostgreSQL prefers float8), ``numeric`` for numeric."""
    return "numeric" if any(t == "numeric" for t in types) else "float8"


def _rounding(types: Sequence[str]) -> str:
    """round/trunc: the two-argument forms exist only for numeric; one argument that is
    not numeric resolves to the float8 form (PostgreSQL's preferred numeric type)."""
    return "numeric" if len(types) == 2 or types[0] == "numeric" else "float8"


def _log(types: Sequence[str]) -> str:
    """log(x) follows its argument; log(base, x) exists for numeric only."""
    return "numeric" if len(types) == 2 else _float_unless_numeric(types)


def _add(types: Sequence[str]) -> str:
    left, right = types
    pair = {left, right}
    if "date" in pair and pair & set(INTEGER_TYPES):
        return "date"
    if "interval" in pair and pair & {"date", *TIME_TYPES}:
        other = (pair - {"interval"}).pop()
        return "timestamp" if other == "date" else other
    if pair == {"interval"}:
        return "interval"
    if pair == {"time", "interval"}:
        return "time"
    return widest(types)


def _sub(types: Sequence[str]) -> str:
    left, right = types
    if left == "date" and right == "date":
        return "int4"
    if left == "date" and right in INTEGER_TYPES:
        return "date"
    if left == "date" and right == "interval":
        return "timestamp"
    if {left, right} <= {"date", *TIME_TYPES}:
        return "interval"
    if left in TIME_TYPES and right == "interval":
        return left
    if left == "interval" and right == "interval":
        return "interval"
    if left == "time" and right in ("time", "interval"):
        return "time" if right == "interval" else "interval"
    return widest(types)


def _scale(types: Sequence[str]) -> str:
    """mul/div: an interval scaled by a number stays an interval."""
    return "interval" if "interval" in types else widest(types)


def _container(kind: str) -> TypeRule:
    """ARRAY[…]/LIST[…]: a container of the elements' common type (text for untyped ones)."""

    def rule(types: Sequence[str]) -> str:
        element = _common(types)
        element = "text" if element == "unknown" else element
        try:
            return sqltypes.array_of(element) if kind == "array" else sqltypes.list_of(element)
        except sqltypes.UnknownType:
            return f"{element}[]" if kind == "array" else f"{element} list"

    return rule


def _element(types: Sequence[str]) -> str:
    return sqltypes.element_type(types[0]) or "unknown"


_FUNCTIONS = (
    # Comparison and logic (operators).
    Function("eq", 2, 2, _fixed("bool"), "a = b"),
    Function("neq", 2, 2, _fixed("bool"), "a <> b"),
    Function("lt", 2, 2, _fixed("bool"), "a < b"),
    Function("lte", 2, 2, _fixed("bool"), "a <= b"),
    Function("gt", 2, 2, _fixed("bool"), "a > b"),
    Function("gte", 2, 2, _fixed("bool"), "a >= b"),
    Function("between", 3, 3, _fixed("bool"), "a BETWEEN low AND high"),
    Function("and", 2, None, _fixed("bool"), "three-valued AND: false wins over NULL and errors"),
    Function("or", 2, None, _fixed("bool"), "three-valued OR: true wins over NULL and errors"),
    Function("not", 1, 1, _fixed("bool"), "NOT a"),
    Function("is_null", 1, 1, _fixed("bool"), "a IS NULL"),
    Function("is_not_null", 1, 1, _fixed("bool"), "a IS NOT NULL"),
    Function("like", 2, 3, _fixed("bool"), "s LIKE pattern [ESCAPE e]: % and _ wildcards"),
    Function("ilike", 2, 3, _fixed("bool"), "s ILIKE pattern [ESCAPE e]: case-insensitive LIKE"),
    # Arithmetic (operators).
    Function("add", 2, 2, _add, "a + b (numbers, date + int, time + interval)"),
    Function("sub", 2, 2, _sub, "a - b (numbers, date - date, time - time, time - interval)"),
    Function("mul", 2, 2, _scale, "a * b; integer overflow is 22003"),
    Function("div", 2, 2, _scale, "a / b; integers truncate toward zero; b = 0 is 22012"),
    Function("mod", 2, 2, widest, "a % b, mod(a, b): the sign of a; b = 0 is 22012"),
    Function("neg", 1, 1, _first, "-a"),
    # Conditionals.
    Function(
        "coalesce", 1, None, _common, "the first non-NULL argument (later ones not evaluated)"
    ),
    Function("nullif", 2, 2, _nullif, "NULL if a = b, else a"),
    Function("greatest", 1, None, _common, "the largest non-NULL argument"),
    Function("least", 1, None, _common, "the smallest non-NULL argument"),
    # Strings.
    Function("concat", 2, 2, _fixed("text"), "a || b: NULL if either is NULL"),
    Function("concat_variadic", 1, None, _fixed("text"), "concat(a, …): NULL arguments skipped"),
    Function("concat_ws", 2, None, _fixed("text"), "concat_ws(sep, a, …): NULLs skipped"),
    Function("upper", 1, 1, _fixed("text"), "upper case"),
    Function("lower", 1, 1, _fixed("text"), "lower case"),
    Function("length", 1, 1, _fixed("int4"), "number of characters (char_length)"),
    Function("octet_length", 1, 1, _fixed("int4"), "number of bytes in UTF-8"),
    Function("bit_length", 1, 1, _fixed("int4"), "number of bits in UTF-8 (8 * octet_length)"),
    Function("substr", 2, 3, _fixed("text"), "substr(s, start [, count]), 1-based"),
    Function("trim", 1, 2, _fixed("text"), "btrim(s [, chars]): strip both ends"),
    Function("ltrim", 1, 2, _fixed("text"), "ltrim(s [, chars]): strip the start"),
    Function("rtrim", 1, 2, _fixed("text"), "rtrim(s [, chars]): strip the end"),
    Function("replace", 3, 3, _fixed("text"), "replace(s, from, to): every occurrence"),
    Function(
        "strpos", 2, 2, _fixed("int4"), "strpos(s, sub) = position(sub IN s): 1-based, 0 if absent"
    ),
    Function("left", 2, 2, _fixed("text"), "left(s, n): first n characters (all but last -n)"),
    Function("right", 2, 2, _fixed("text"), "right(s, n): last n characters (all but first -n)"),
    Function("lpad", 2, 3, _fixed("text"), "lpad(s, length [, fill]): pad or truncate on the left"),
    Function(
        "rpad", 2, 3, _fixed("text"), "rpad(s, length [, fill]): pad or truncate on the right"
    ),
    Function(
        "split_part",
        3,
        3,
        _fixed("text"),
        "split_part(s, delimiter, n): n-th field (negative from the end)",
    ),
    Function("starts_with", 2, 2, _fixed("bool"), "starts_with(s, prefix)"),
    Function("reverse", 1, 1, _fixed("text"), "characters in reverse order"),
    Function(
        "regexp_like", 2, 3, _fixed("bool"), "s ~ pattern (flags 'i'): a regex match anywhere"
    ),
    Function("regexp_ilike", 2, 2, _fixed("bool"), "s ~* pattern: case-insensitive regex match"),
    Function(
        "regexp_replace",
        3,
        4,
        _fixed("text"),
        "regexp_replace(s, pattern, replacement [, flags 'g'/'i']): constant pattern and flags",
    ),
    Function("translate", 3, 3, _fixed("text"), "translate(s, from, to): constant from and to"),
    Function("repeat", 2, 2, _fixed("text"), "repeat(s, n)"),
    Function(
        "pg_size_pretty",
        1,
        1,
        _fixed("text"),
        "a byte count in bytes, kB, MB, GB, TB or PB, PostgreSQL's rounding",
    ),
    Function("ascii", 1, 1, _fixed("int4"), "the code point of the first character (0 for '')"),
    Function(
        "chr", 1, 1, _fixed("text"), "the character of a code point; 0 and invalid ones are 54000"
    ),
    Function("md5", 1, 1, _fixed("text"), "the MD5 digest of the UTF-8 text, in hex"),
    # Numbers.
    Function("abs", 1, 1, _first, "absolute value"),
    Function("sign", 1, 1, _float_unless_numeric, "-1, 0 or 1 (float8, or numeric for numeric)"),
    Function(
        "round",
        1,
        2,
        _rounding,
        "round(x [, digits]): numeric half away from zero, float half even",
    ),
    Function("trunc", 1, 2, _rounding, "trunc(x [, digits]): toward zero"),
    Function("ceil", 1, 1, _float_unless_numeric, "smallest integer >= x (ceiling)"),
    Function("floor", 1, 1, _float_unless_numeric, "largest integer <= x"),
    Function("sqrt", 1, 1, _float_unless_numeric, "square root; negative is 2201F"),
    Function("cbrt", 1, 1, _fixed("float8"), "cube root"),
    Function("power", 2, 2, _float_unless_numeric, "power(a, b) (pow); 0 ^ negative is 2201F"),
    Function("exp", 1, 1, _float_unless_numeric, "e ^ x"),
    Function("ln", 1, 1, _float_unless_numeric, "natural logarithm; x <= 0 is 2201E"),
    Function("log10", 1, 1, _float_unless_numeric, "base-10 logarithm (log(x)); x <= 0 is 2201E"),
    Function("log", 1, 2, _log, "log(x) = log10(x), log(base, x) (numeric only)"),
    Function("degrees", 1, 1, _fixed("float8"), "radians to degrees"),
    Function("radians", 1, 1, _fixed("float8"), "degrees to radians"),
    # Trigonometric and hyperbolic functions: float8 in and out, as in PostgreSQL.
    *(
        Function(name, 1, 1, _fixed("float8"), description)
        for name, description in (
            ("sin", "sine (radians); infinite input is 22003"),
            ("cos", "cosine (radians); infinite input is 22003"),
            ("tan", "tangent (radians); infinite input is 22003"),
            ("cot", "cotangent (radians); cot(0) is Infinity"),
            ("asin", "arcsine; input outside [-1, 1] is 22003"),
            ("acos", "arccosine; input outside [-1, 1] is 22003"),
            ("atan", "arctangent"),
            ("sinh", "hyperbolic sine"),
            ("cosh", "hyperbolic cosine"),
            ("tanh", "hyperbolic tangent"),
            ("asinh", "inverse hyperbolic sine"),
            ("acosh", "inverse hyperbolic cosine; input below 1 is 22003"),
            ("atanh", "inverse hyperbolic tangent; input outside [-1, 1] is 22003"),
        )
    ),
    # Arrays and lists.
    Function("array", 1, None, _container("array"), "ARRAY[a, …]: a one-dimensional array"),
    Function("list", 1, None, _container("list"), "LIST[a, …]: a Materialize list"),
    Function("subscript", 2, 2, _element, "a[i]: the i-th element (from 1), NULL outside"),
    Function(
        "list_slice",
        3,
        3,
        _first,
        "l[a:b]: elements a to b (from 1, clipped to the list; empty when a > b)",
    ),
    Function("cardinality", 1, 1, _fixed("int4"), "the number of elements of an array"),
    Function("list_length", 1, 1, _fixed("int4"), "the number of elements of a list"),
    Function("array_length", 2, 2, _fixed("int4"), "array_length(a, 1): NULL for an empty array"),
    Function(
        "array_to_string",
        2,
        3,
        _fixed("text"),
        "array_to_string(a, delimiter [, null text]): elements' text, NULLs skipped or replaced",
    ),
    Function("array_contains", 2, 2, _fixed("bool"), "a @> b: every element of b is in a"),
    Function("array_contained", 2, 2, _fixed("bool"), "a <@ b: every element of a is in b"),
    Function("array_overlap", 2, 2, _fixed("bool"), "a && b: an element in common"),
    Function("eq_any", 2, 2, _fixed("bool"), "x = ANY(array): x equals an element"),
    Function(
        "container_concat",
        2,
        2,
        lambda t: next((x for x in t if sqltypes.element_type(x) is not None), "unknown"),
        "a || b of arrays or lists: concatenated, or an element appended or prepended",
    ),
    # jsonb.
    Function("jsonb_get", 2, 2, _fixed("jsonb"), "j -> key or j -> n: a member or element"),
    Function("jsonb_get_text", 2, 2, _fixed("text"), "j ->> key or j ->> n: as text"),
    Function("jsonb_exists", 2, 2, _fixed("bool"), "j ? key: a top-level key or string"),
    Function("jsonb_contains", 2, 2, _fixed("bool"), "a @> b: a contains b"),
    Function("jsonb_contained", 2, 2, _fixed("bool"), "a <@ b: b contains a"),
    Function("jsonb_typeof", 1, 1, _fixed("text"), "object, array, string, number, boolean, null"),
    Function("jsonb_array_length", 1, 1, _fixed("int4"), "elements of an array; 22023 otherwise"),
    # Dates and times.
    Function(
        "date_trunc",
        2,
        2,
        # A date becomes timestamptz, PostgreSQL's preferred datetime type.
        lambda t: "timestamptz" if t[1] == "date" else t[1],
        "date_trunc(unit, time or interval)",
    ),
    Function("extract", 2, 2, _fixed("numeric"), "extract(field FROM x): field is a text literal"),
    Function("date_part", 2, 2, _fixed("float8"), "date_part(field, x): field is a text literal"),
    Function(
        "timezone",
        2,
        2,
        # A date is a timestamptz here (PostgreSQL's preferred implicit cast).
        lambda t: "timestamptz" if t[1] == "timestamp" else "timestamp",
        "timezone(zone, time) = time AT TIME ZONE zone: a constant zone name, offset or interval",
    ),
    Function("justify_hours", 1, 1, _fixed("interval"), "whole 24 hours as days"),
    Function("justify_days", 1, 1, _fixed("interval"), "whole 30 days as months"),
    Function(
        "justify_interval",
        1,
        1,
        _fixed("interval"),
        "justify_days and justify_hours, the fields given one sign",
    ),
    Function(
        "interval_span",
        1,
        1,
        _fixed("interval"),
        "the interval of the same total span with fewer than 30 days and 24 hours (floored): "
        "equal intervals ('1 mon', '30 days') have one; what GROUP BY and DISTINCT key them by",
    ),
    Function(
        "age",
        2,
        2,
        _fixed("interval"),
        "age(a, b): years, months and days from b to a by the calendar (age(x): from midnight "
        "today)",
    ),
    Function("make_date", 3, 3, _fixed("date"), "make_date(year, month, day); invalid is 22008"),
    Function(
        "make_timestamp",
        6,
        6,
        _fixed("timestamp"),
        "make_timestamp(year, month, day, hour, min, sec); invalid fields are 22008",
    ),
    Function(
        "to_char",
        2,
        2,
        _fixed("text"),
        "to_char(time, format): PostgreSQL's template patterns; the format is a constant",
    ),
    Function("to_timestamp", 1, 1, _fixed("timestamptz"), "to_timestamp(seconds since the epoch)"),
    Function(
        "date_bin",
        3,
        3,
        lambda t: "timestamp" if t[1] == "date" else t[1],
        "date_bin(stride, time, origin): the start of the stride-wide bin holding time",
    ),
    Function(
        "now",
        0,
        0,
        _fixed("timestamptz"),
        "the transaction time (planner folds it)",
        evaluable=False,
    ),
    Function("current_timestamp", 0, 0, _fixed("timestamptz"), "now()", evaluable=False),
    Function(
        "mz_now",
        0,
        0,
        _fixed("mz_timestamp"),
        "the query's logical time (planner folds it)",
        evaluable=False,
    ),
)

FUNCTIONS: dict[str, Function] = {f.name: f for f in _FUNCTIONS}

# Other spellings of registered functions with the same argument order.
ALIASES = {
    "char_length": "length",
    "character_length": "length",
    "substring": "substr",
    "btrim": "trim",
    "ceiling": "ceil",
    "pow": "power",
    "regexp_i_like": "regexp_ilike",  # sqlglot's name for ~*
}


def lookup(name: str) -> Function | None:
    """The registered function called ``name`` (or one of its aliases)."""
    return FUNCTIONS.get(ALIASES.get(name, name))


def result_type(name: str, arg_types: Sequence[str]) -> str:
    """The PostgreSQL type of ``name(args)``; KeyError for unknown functions."""
    function = lookup(name)
    if function is None:
        raise KeyError(name)
    return function.result(arg_types)


def expr_type(expr: Scalar, input_types: Sequence[str]) -> str:
    """The PostgreSQL type of ``expr`` over columns of ``input_types``."""
    if isinstance(expr, Column):
        return input_types[expr.index]
    if isinstance(expr, Literal | Cast):
        return expr.type
    if isinstance(expr, Case):
        results = [r for _, r in expr.whens] + [expr.otherwise]
        return _common([expr_type(r, input_types) for r in results])
    arg_types = operand_types(expr.func, expr.args, input_types)
    function = lookup(expr.func)
    return function.result(arg_types) if function is not None else "text"


def operand_types(func: str, args: Sequence[Scalar], input_types: Sequence[str]) -> list[str]:
    """The argument types of a call to ``func``, string literals typed by their context.

    A string literal is untyped in PostgreSQL: compared with a date it is a
    date, added to a number a number. Elsewhere (``concat``, ``like``) it
    stays text.
    """
    types = [expr_type(arg, input_types) for arg in args]
    context = next((t for t in types if t not in ("text", "unknown")), None)
    if context is None or func not in COERCING:
        return types
    if func in ARITHMETIC and context not in NUMERIC_RANK:
        return types
    return [
        context if isinstance(arg, Literal) and arg.type == "text" else t
        for arg, t in zip(args, types, strict=True)
    ]
