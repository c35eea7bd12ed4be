"""Loupe's SQL types: one entry per type, read by the planner, engine, persist, tables and wire.

Each ``SqlType`` says everything about a type that is not an algorithm: its
canonical name (PostgreSQL's ``pg_type.typname``, how plans, relation
descriptions and shard schemas name it), how SQL spells it (``integer``,
``int``, ``int4``…) and how ``format_type`` prints it, its OID and type
category, the polars dtype the engine holds its values in, the Arrow type
persist stores it as, the Spark type the storage writer writes it as, the
``common.v1.Value`` kinds that carry it on the wire, and its place in the
implicit numeric promotion order.

Adding a type is adding an entry to ``_TYPES`` (and, where it needs one, an
algorithm: the engine's vectorised text output and input live with the
engine's casts in ``loupe.dataflow.expr``, the Python-value assignment rules
with table writes in the coordinator).

Types a table column may have are those with ``column_type`` set; the
others exist in plans (``unknown``, ``list``) or builtin collections only.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import polars as pl
import pyarrow as pa

from loupe import interval

# PostgreSQL's type categories (``pg_type.typcategory``).
BOOLEAN = "B"
DATETIME = "D"
NUMERIC = "N"
STRING = "S"
TIMESPAN = "T"
USER = "U"
ARRAY = "A"
UNKNOWN = "X"


@dataclass(frozen=True)
class SqlType:
    """One SQL type and its representations."""

    name: str
    # ``format_type``'s name: error messages, mz_columns, CREATE TABLE's canonical text.
    display: str
    oid: int
    category: str
    # How the engine holds values (inside dataflows and one-shot evaluation).
    polars: pl.DataType
    # How a persist shard column of this type is stored.
    arrow: pa.DataType
    # Other spellings SQL accepts for the type (the name and display are always accepted).
    aliases: tuple[str, ...] = ()
    # sqlglot ``DataType.Type`` member names that mean this type.
    sqlglot: tuple[str, ...] = ()
    # The type whose shard column stores it, when the engine's type has no column of its own.
    stored_as: str | None = None
    # The type plans and the engine use for its values, when they have none of its own.
    planned_as: str | None = None
    # A user table column may have this type (CREATE TABLE accepts it).
    column_type: bool = False
    # Modifiers CREATE TABLE accepts: ``precision_scale`` (numeric), ``length`` (varchar).
    modifiers: str | None = None
    # PostgreSQL promotes a mix of numeric types to the highest rank.
    numeric_rank: int | None = None
    # The Spark SQL type the storage writer writes (a function of ``pyspark.sql.types``),
    # and the Arrow type it hands to Spark when that differs from ``arrow``.
    spark: Callable[[Any], Any] | None = None
    spark_arrow: pa.DataType | None = None
    # ``common.v1.Value`` kinds a storage write of this type accepts.
    wire_kinds: tuple[str, ...] = ()
    # Python types whose values are of this type when a client sends them (``type_of_value``);
    # each Python type belongs to one entry (ints and datetimes are decided by value).
    python: tuple[type, ...] = field(default=())
    # Arrays and lists: the type of their elements.
    element: str | None = None

    @property
    def storage(self) -> str:
        """The name of the type whose persist column holds values of this type."""
        return self.stored_as or self.name

    @property
    def planned(self) -> str:
        """The name of the type plans and the engine use for values of this type."""
        return self.planned_as or self.name

    @property
    def ingest_arrow(self) -> pa.DataType:
        """The Arrow type a column is handed to Spark as."""
        return self.spark_arrow if self.spark_arrow is not None else self.arrow


# Every numeric value, in the engine and in persist, is a 128-bit decimal with this many
# digits after the point and 38 in all: exact for + - and sums of values with up to 16
# decimals and up to 22 digits before the point. Products are rounded to 16 decimals,
# quotients and averages too (PostgreSQL picks a scale per value: at least 16
# significant digits). Beyond 22 integer digits is 22003. Output trims trailing zeros,
# as Materialize's does.
NUMERIC_SCALE = 16
NUMERIC_PRECISION = 38
# The largest magnitude a numeric holds (exclusive).
NUMERIC_LIMIT = Decimal(10) ** (NUMERIC_PRECISION - NUMERIC_SCALE)


def _spark(name: str) -> Callable[[Any], Any]:
    return lambda types: getattr(types, name)()


def _spark_interval(types: Any) -> Any:
    return types.StructType(
        [
            types.StructField("months", types.IntegerType()),
            types.StructField("days", types.IntegerType()),
            types.StructField("micros", types.LongType()),
        ]
    )


_TYPES: tuple[SqlType, ...] = (
    SqlType(
        "bool", "boolean", 16, BOOLEAN, pl.Boolean(), pa.bool_(),
        aliases=("boolean",), sqlglot=("BOOLEAN",), column_type=True,
        spark=_spark("BooleanType"), wire_kinds=("bool_value",), python=(bool,),
    ),
    SqlType(
        "int2", "smallint", 21, NUMERIC, pl.Int32(), pa.int32(),
        aliases=("smallint",), sqlglot=("SMALLINT",), stored_as="int4", numeric_rank=0,
    ),
    SqlType(
        "int4", "integer", 23, NUMERIC, pl.Int32(), pa.int32(),
        aliases=("int", "integer"), sqlglot=("INT",), column_type=True, numeric_rank=1,
        spark=_spark("IntegerType"), wire_kinds=("int_value",),
    ),
    SqlType(
        "int8", "bigint", 20, NUMERIC, pl.Int64(), pa.int64(),
        aliases=("bigint",), sqlglot=("BIGINT",), column_type=True, numeric_rank=2,
        spark=_spark("LongType"), wire_kinds=("int_value",),
    ),
    SqlType(
        # Materialize's unsigned integers. Spark has none: uint2 and uint4 travel as the
        # signed type holding them, uint8 as a long (builtins' values stay below 2^63).
        "uint2", "uint2", 16460, NUMERIC, pl.UInt16(), pa.uint16(),
        sqlglot=("USMALLINT",), column_type=True, numeric_rank=1,
        spark=_spark("IntegerType"), spark_arrow=pa.int32(), wire_kinds=("int_value",),
    ),
    SqlType(
        "uint4", "uint4", 16462, NUMERIC, pl.UInt32(), pa.uint32(),
        sqlglot=("UINT",), column_type=True, numeric_rank=2,
        spark=_spark("LongType"), spark_arrow=pa.int64(), wire_kinds=("int_value",),
    ),
    SqlType(
        "uint8", "uint8", 16464, NUMERIC, pl.UInt64(), pa.uint64(),
        sqlglot=("UBIGINT",), column_type=True, numeric_rank=3,
        spark=_spark("LongType"), spark_arrow=pa.int64(), wire_kinds=("int_value", "uint_value"),
    ),
    SqlType(
        # Materialize's logical time: milliseconds since the epoch, unsigned; mz_now()'s type.
        "mz_timestamp", "mz_timestamp", 16552, NUMERIC, pl.UInt64(), pa.uint64(),
        column_type=True, spark=_spark("LongType"), spark_arrow=pa.int64(),
        wire_kinds=("int_value", "uint_value"),
    ),
    SqlType(
        # Exact decimal: 38 digits, NUMERIC_SCALE of them after the point (see NUMERIC_SCALE).
        "numeric", "numeric", 1700, NUMERIC, pl.Decimal(38, NUMERIC_SCALE),
        pa.decimal128(38, NUMERIC_SCALE), aliases=("decimal",), sqlglot=("DECIMAL",),
        column_type=True, modifiers="precision_scale", numeric_rank=3,
        spark=lambda types: types.DecimalType(38, NUMERIC_SCALE),
        wire_kinds=("numeric_value", "text_value"), python=(Decimal,),
    ),
    SqlType(
        "float4", "real", 700, NUMERIC, pl.Float64(), pa.float64(),
        aliases=("real",), sqlglot=("FLOAT",), stored_as="float8", numeric_rank=4,
    ),
    SqlType(
        "float8", "double precision", 701, NUMERIC, pl.Float64(), pa.float64(),
        aliases=("double", "float"), sqlglot=("DOUBLE",), column_type=True, numeric_rank=5,
        spark=_spark("DoubleType"), wire_kinds=("float_value", "int_value"), python=(float,),
    ),
    SqlType(
        "text", "text", 25, STRING, pl.Utf8(), pa.string(),
        aliases=("string",), sqlglot=("TEXT",), column_type=True,
        spark=_spark("StringType"), wire_kinds=("text_value",), python=(str,),
    ),
    SqlType(
        "varchar", "character varying", 1043, STRING, pl.Utf8(), pa.string(),
        # In expressions a varchar is text (its length is checked when a table column is
        # assigned); casts to char(n) are casts to text too.
        sqlglot=("VARCHAR", "CHAR"), stored_as="text", planned_as="text",
        column_type=True, modifiers="length",
    ),
    SqlType(
        "date", "date", 1082, DATETIME, pl.Date(), pa.date32(),
        sqlglot=("DATE",), column_type=True,
        spark=_spark("DateType"), wire_kinds=("date_days",), python=(dt.date,),
    ),
    SqlType(
        "time", "time without time zone", 1083, DATETIME, pl.Time(), pa.time64("us"),
        sqlglot=("TIME",), column_type=True, wire_kinds=("time_us",), python=(dt.time,),
    ),
    SqlType(
        "timestamp", "timestamp without time zone", 1114, DATETIME, pl.Datetime("us"),
        pa.timestamp("us"), sqlglot=("TIMESTAMP",), column_type=True,
        spark=_spark("TimestampNTZType"), wire_kinds=("timestamp_naive_us",),
    ),
    SqlType(
        "timestamptz", "timestamp with time zone", 1184, DATETIME, pl.Datetime("us", "UTC"),
        pa.timestamp("us", tz="UTC"), sqlglot=("TIMESTAMPTZ",), column_type=True,
        spark=_spark("TimestampType"), wire_kinds=("timestamp_us",),
    ),
    SqlType(
        # PostgreSQL's three fields (loupe.interval): a struct in the engine, persist and Spark.
        "interval", "interval", 1186, TIMESPAN, interval.STRUCT, interval.ARROW,
        sqlglot=("INTERVAL",), column_type=True, spark=_spark_interval,
        wire_kinds=("interval_value",), python=(interval.Interval, dt.timedelta),
    ),
    SqlType(
        # Held as its canonical text (loupe.common.jsonb): equal documents, equal texts.
        "jsonb", "jsonb", 3802, USER, pl.Utf8(), pa.string(),
        sqlglot=("JSONB",), column_type=True, spark=_spark("StringType"),
        wire_kinds=("jsonb_value", "text_value"), python=(dict,),
    ),
    SqlType(
        # Held as its canonical lowercase text: its order and equality are the bytes'.
        "uuid", "uuid", 2950, USER, pl.Utf8(), pa.string(),
        sqlglot=("UUID",), column_type=True, spark=_spark("StringType"),
        wire_kinds=("uuid_value", "text_value"), python=(uuid.UUID,),
    ),
    SqlType(
        "bytea", "bytea", 17, USER, pl.Binary(), pa.binary(),
        spark=_spark("BinaryType"), wire_kinds=("bytes_value",), python=(bytes,),
    ),
    SqlType(
        # Materialize's list; Loupe has lists of int8 only (dataflow addresses).
        "list", "list", 16384, USER, pl.List(pl.Int64()), pa.list_(pa.int64()),
        spark=lambda types: types.ArrayType(types.LongType()),
        wire_kinds=("list_value",), python=(list,),
    ),
    SqlType(
        # The type of an untyped NULL literal.
        "unknown", "unknown", 705, UNKNOWN, pl.Null(), pa.null(),
    ),
)  # fmt: skip

# PostgreSQL's one-dimensional arrays and Materialize's lists, of these element types: the
# element's name -> the array type's OID. Every list is OID 16384 on the wire (Materialize's
# lists are anonymous types); "list" itself is the int8 list of builtin collections.
_ARRAY_OIDS = {
    "bool": 1000,
    "int2": 1005,
    "int4": 1007,
    "int8": 1016,
    "float8": 1022,
    "numeric": 1231,
    "text": 1009,
    "date": 1182,
    "time": 1183,
    "timestamp": 1115,
    "timestamptz": 1185,
    "interval": 1187,
    "uuid": 2951,
    "jsonb": 3807,
}
_LIST_OID = 16384


def _container(element: SqlType, oid: int, kind: str) -> SqlType:
    array = kind == "array"

    def spelled(name: str) -> str:
        return f"{name}[]" if array else f"{name} list"

    def spark(types: Any) -> Any:
        assert element.spark is not None
        return types.ArrayType(element.spark(types))

    return SqlType(
        f"_{element.name}" if array else f"{element.name} list",
        spelled(element.display),
        oid,
        ARRAY if array else USER,
        pl.List(element.polars),
        pa.list_(element.arrow),
        aliases=tuple(spelled(a) for a in (element.name, *element.aliases)),
        # numeric is text in persist, converted as a column, not inside a list (yet).
        column_type=element.column_type and element.name != "numeric",
        spark=spark if element.spark is not None else None,
        spark_arrow=pa.list_(element.ingest_arrow),
        wire_kinds=("list_value",),
        element=element.name,
    )


_BY_NAME = {t.name: t for t in _TYPES}
_TYPES = (
    *_TYPES,
    *(_container(_BY_NAME[e], oid, "array") for e, oid in _ARRAY_OIDS.items()),
    *(_container(_BY_NAME[e], _LIST_OID, "list") for e in _ARRAY_OIDS if e != "int8"),
    # Materialize's dataflow addresses (mz_dataflow_addresses.address); PostgreSQL has no uint8[].
    _container(_BY_NAME["uint8"], _LIST_OID, "list"),
)
_TYPES = (
    *_TYPES,
    # Lists of addresses (list_agg(address), the Console's LIR operators).
    _container({t.name: t for t in _TYPES}["uint8 list"], _LIST_OID, "list"),
    # int8 list: the builtin "list" entry's own type under its Materialize name.
    SqlType(
        "int8 list", "bigint list", _LIST_OID, USER, pl.List(pl.Int64()), pa.list_(pa.int64()),
        aliases=("int8 list",), column_type=True, element="int8",
        spark=lambda types: types.ArrayType(types.LongType()), wire_kinds=("list_value",),
    ),
)  # fmt: skip
TYPES: dict[str, SqlType] = {t.name: t for t in _TYPES}
_SPELLINGS: dict[str, SqlType] = {
    spelling: t for t in _TYPES for spelling in (t.name, t.display, *t.aliases)
}
_BY_SQLGLOT: dict[str, SqlType] = {name: t for t in _TYPES for name in t.sqlglot}

# The numeric types in promotion order (PostgreSQL's implicit casts between them).
NUMERIC_RANK: dict[str, int] = {
    t.name: t.numeric_rank for t in _TYPES if t.numeric_rank is not None
}
INTEGER_TYPES = ("int2", "int4", "int8")


def element_type(name: str) -> str | None:
    """The element type of an array or list type (None for other types)."""
    entry = TYPES.get(name)
    return entry.element if entry is not None else None


def is_array(name: str) -> bool:
    entry = TYPES.get(name)
    return entry is not None and entry.element is not None and entry.category == ARRAY


def is_list(name: str) -> bool:
    entry = TYPES.get(name)
    return entry is not None and entry.element is not None and entry.category == USER


def array_of(element: str) -> str:
    """The array type of ``element`` values (UnknownType when Loupe has none)."""
    return sql_type(f"_{element}").name


def list_of(element: str) -> str:
    """The list type of ``element`` values (UnknownType when Loupe has none)."""
    return sql_type(f"{element} list").name


UNSIGNED_TYPES = ("uint2", "uint4", "uint8")
# The numeric types from narrowest to widest, signed and unsigned interleaved.
_PROMOTION_ORDER = (
    "int2",
    "uint2",
    "int4",
    "uint4",
    "int8",
    "uint8",
    "numeric",
    "float4",
    "float8",
)
# Materialize's implicit casts from unsigned integers to integer types (none go the other way).
_UNSIGNED_IMPLICIT = {
    "uint2": ("uint2", "uint4", "uint8", "int4", "int8"),
    "uint4": ("uint4", "uint8", "int8"),
    "uint8": ("uint8",),
}


def _implicitly(source: str, target: str) -> bool:
    if target in ("numeric", "float4", "float8") or source == target:
        return NUMERIC_RANK[source] <= NUMERIC_RANK[target] or source in UNSIGNED_TYPES
    if source in UNSIGNED_TYPES:
        return target in _UNSIGNED_IMPLICIT[source]
    return target in INTEGER_TYPES and NUMERIC_RANK[source] <= NUMERIC_RANK[target]


def common_numeric(types: Sequence[str]) -> str:
    """The numeric type a mix of numeric types is promoted to: the narrowest that each
    converts to implicitly (uint2 and int2 meet at int4, uint8 and int8 at numeric)."""
    known = [t for t in types if t in NUMERIC_RANK]
    if not any(t in UNSIGNED_TYPES for t in known):
        return max(known, key=NUMERIC_RANK.__getitem__)
    return next(c for c in _PROMOTION_ORDER if all(_implicitly(t, c) for t in known))


TIME_TYPES = ("timestamp", "timestamptz")


class UnknownType(ValueError):
    """A type name no entry has."""


def sql_type(name: str) -> SqlType:
    """The entry of the type named ``name`` (canonical name)."""
    try:
        return TYPES[name]
    except KeyError:
        raise UnknownType(f"no such type {name!r}") from None


def lookup(spelling: str) -> SqlType | None:
    """The type SQL spells ``spelling`` (any case and spacing, no modifiers), or None."""
    return _SPELLINGS.get(" ".join(spelling.lower().split()))


def from_sqlglot(type_name: str) -> SqlType | None:
    """The type of a sqlglot ``DataType.Type`` member name (``"DOUBLE"``), or None."""
    return _BY_SQLGLOT.get(type_name)


def display_name(name: str) -> str:
    """How PostgreSQL prints the type named ``name`` (unknown names as they are)."""
    entry = TYPES.get(name)
    return entry.display if entry is not None else name


def storage_type(name: str) -> str:
    """The type of the persist column that stores values of type ``name``."""
    return sql_type(name).storage


def polars_dtype(name: str) -> pl.DataType:
    """The polars dtype the engine holds values of type ``name`` in."""
    try:
        return TYPES[name].polars
    except KeyError:
        raise UnknownType(f"no engine representation for type {name!r}") from None


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a persist column of type ``name``."""
    try:
        return TYPES[name].arrow
    except KeyError:
        raise UnknownType(f"persist cannot store columns of type {name!r}") from None


def type_of_value(value: Any) -> str:
    """The type a Python value has when written inline (how a client's value is typed)."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return "int4"
        # Past bigint (a uint8 a client sent) it is numeric, as such a literal is.
        return "int8" if -(2**63) <= value < 2**63 else "numeric"
    if isinstance(value, dt.datetime):
        return "timestamptz" if value.tzinfo is not None else "timestamp"
    for entry in _TYPES:
        if isinstance(value, entry.python):
            return entry.name
    return "list" if isinstance(value, tuple) else type(value).__name__
