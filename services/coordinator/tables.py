"""User tables: their definitions, and how SQL values become stored values.

A table is a catalog item of type ``table`` whose ``create_sql`` is the
canonical ``CREATE TABLE "db"."schema"."name" ("col" type [NOT NULL], …)``
this module writes; its columns are read back from it. Each table is one
shard (shard id = item id) whose columns have the storage types of
``loupe.sqltypes`` (``integer`` is ``int4``, ``character varying`` is
stored as ``text``).

Values are converted to a column's type as PostgreSQL assigns them: a quoted
literal (``'42'``) has no type of its own and is parsed as the column's type
(22P02/22007 when it does not parse); a typed value must be assignable
(42804 otherwise); NULL in a NOT NULL column is 23502.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from loupe import interval, sqltypes
from loupe.common import jsonb
from loupe.common.errors import LoupeError, SqlState
from loupe.common.jsonb import Jsonb
from loupe.coordinator.sql.statements import ColumnDef, CreateTable, UniqueKey
from loupe.dataflow.expr import evaluate_closed, uuid_text
from loupe.interval import Interval, parse_interval, structs
from loupe.persist import DIFF_COLUMN, TIMESTAMP_COLUMN
from loupe.persist.shard import arrow_schema
from loupe.plan.scalar import Cast, Literal
from loupe.proto.common.v1 import common_pb2
from loupe.sqltypes import SqlType

DATATYPE_MISMATCH = "42804"
INVALID_TEXT_REPRESENTATION = "22P02"
INVALID_DATETIME_FORMAT = "22007"
NUMERIC_VALUE_OUT_OF_RANGE = "22003"
STRING_DATA_RIGHT_TRUNCATION = "22001"
NOT_NULL_VIOLATION = "23502"

_NUMERIC_QUANTUM = Decimal(1).scaleb(-sqltypes.NUMERIC_SCALE)
_WIDE = Context(prec=1000)
INTEGER_RANGES = {
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
    "uint2": (0, 2**16 - 1),
    "uint4": (0, 2**32 - 1),
    "uint8": (0, 2**64 - 1),
    "mz_timestamp": (0, 2**64 - 1),
}
_MODIFIERS = re.compile(r"^([a-z_0-9 \[\]]+?)(?:\((\d+(?:,\d+)?)\))?$")


@dataclass(frozen=True)
class TableColumn:
    """A column of a user table."""

    name: str
    # As PostgreSQL spells it, with modifiers: ``integer``, ``numeric(10,2)``.
    type: str
    nullable: bool = True
    # The DEFAULT expression's SQL; None: NULL.
    default: str | None = None

    @property
    def base_type(self) -> str:
        """The type without modifiers (what mz_columns shows)."""
        return _split_type(self.type)[0]

    @property
    def modifiers(self) -> tuple[int, ...]:
        return _split_type(self.type)[1]

    @property
    def sql_type(self) -> SqlType:
        entry = sqltypes.lookup(self.base_type)
        assert entry is not None, self.base_type  # the parser accepts column types only
        return entry

    @property
    def storage_type(self) -> str:
        return self.sql_type.storage


@functools.cache
def _split_type(spelled: str) -> tuple[str, tuple[int, ...]]:
    match = _MODIFIERS.match(spelled)
    if match is None:  # pragma: no cover - types come from our own parser
        raise ValueError(f"malformed type {spelled!r}")
    modifiers = tuple(int(m) for m in match.group(2).split(",")) if match.group(2) else ()
    return match.group(1), modifiers


class CatalogNamed:
    """Names of a catalog object with ``id``, ``database``, ``schema`` and ``name`` fields."""

    id: str
    database: str
    schema: str
    name: str

    @property
    def qualified_name(self) -> str:
        """``schema.name``: how name resolution finds it within its database."""
        return f"{self.schema}.{self.name}"

    @property
    def full_name(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    @property
    def shard_id(self) -> str:
        """Tables and materialized views: the shard holding their contents, named by the id."""
        return self.id


@dataclass(frozen=True)
class Table(CatalogNamed):
    """A user table as the catalog describes it."""

    id: str
    database: str
    schema: str
    schema_id: str
    name: str
    owner_id: str
    columns: tuple[TableColumn, ...]
    create_sql: str

    @property
    def column_names(self) -> list[str]:
        return [column.name for column in self.columns]

    @property
    def storage_columns(self) -> list[tuple[str, str]]:
        """(name, storage type) of the shard's data columns."""
        return [(column.name, column.storage_type) for column in self.columns]

    def column(self, name: str) -> TableColumn | None:
        return next((column for column in self.columns if column.name == name), None)

    @property
    def keys(self) -> tuple[UniqueKey, ...]:
        """PRIMARY KEY and UNIQUE constraints, from the table's ``create_sql``."""
        return keys_of(self.create_sql)

    def metadata(self, blob_uri: str, consensus_uri: str) -> common_pb2.CollectionMetadata:
        """Where a peek finds the table."""
        return common_pb2.CollectionMetadata(
            collection_id=self.id,
            shard_id=self.shard_id,
            blob_uri=blob_uri,
            consensus_uri=consensus_uri,
            relation_desc=common_pb2.RelationDesc(
                columns=[
                    common_pb2.Column(name=c.name, type=c.storage_type, nullable=c.nullable)
                    for c in self.columns
                ]
            ),
        )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def create_table_sql(
    database: str,
    schema: str,
    name: str,
    columns: Sequence[ColumnDef],
    keys: Sequence[UniqueKey] = (),
) -> str:
    """The canonical ``CREATE TABLE`` stored as the item's ``create_sql``."""
    definitions = [
        f"{_quote(c.name)} {c.type}"
        + ("" if c.nullable else " NOT NULL")
        + (f" DEFAULT {c.default}" if c.default is not None else "")
        for c in columns
    ]
    for key in keys:
        kind = "PRIMARY KEY" if key.primary else "UNIQUE"
        listed = ", ".join(_quote(c) for c in key.columns)
        definitions.append(f"CONSTRAINT {_quote(key.name)} {kind} ({listed})")
    table = f"{_quote(database)}.{_quote(schema)}.{_quote(name)}"
    return f"CREATE TABLE {table} ({', '.join(definitions)})"


@functools.lru_cache(maxsize=4096)
def columns_of(create_sql: str) -> tuple[TableColumn, ...]:
    """The columns of a table, read from its ``create_sql``."""

    statement = _create_table(create_sql)
    return tuple(TableColumn(c.name, c.type, c.nullable, c.default) for c in statement.columns)


@functools.lru_cache(maxsize=4096)
def keys_of(create_sql: str) -> tuple[UniqueKey, ...]:
    """The PRIMARY KEY and UNIQUE constraints of a table, read from its ``create_sql``."""
    return _create_table(create_sql).keys


@functools.lru_cache(maxsize=4096)
def _create_table(create_sql: str) -> CreateTable:
    from loupe.coordinator.sql.parser import parse_one

    statement = parse_one(create_sql)
    if not isinstance(statement, CreateTable):
        raise ValueError(f"not a CREATE TABLE statement: {create_sql[:80]!r}")
    return statement


# -- values ------------------------------------------------------------------------------


class UntypedString(str):
    """A quoted literal: PostgreSQL's ``unknown`` type, parsed as whatever it is assigned to."""

    __slots__ = ()


class NumberLiteral(str):
    """A numeric literal's text (``1``, ``1.50``), kept exact until its column is known."""

    __slots__ = ()


def type_name_of(value: Any) -> str:
    """The PostgreSQL type name of a Python value, for error messages."""
    if isinstance(value, NumberLiteral):
        return "integer" if _is_integral_text(value) else "numeric"
    return sqltypes.display_name(sqltypes.type_of_value(value))


def _is_integral_text(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text.strip()) is not None


class Coercer:
    """Converts values to the columns of one table (errors name the table and column)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def row(self, values: Sequence[Any], columns: Sequence[TableColumn]) -> tuple[Any, ...]:
        """A full row of the table from ``values`` for ``columns`` (the rest NULL)."""
        given = dict(zip((c.name for c in columns), values, strict=True))
        return tuple(self.value(given.get(c.name), c) for c in self.table.columns)

    def value(self, value: Any, column: TableColumn) -> Any:
        if value is None:
            if not column.nullable:
                raise LoupeError(
                    NOT_NULL_VIOLATION,
                    f'null value in column "{column.name}" of relation "{self.table.name}"'
                    " violates not-null constraint",
                )
            return None
        if (
            isinstance(value, float)
            and math.isnan(value)
            and column.base_type != "double precision"
        ):
            raise self._mismatch(value, column)
        convert = _CONVERSIONS[column.sql_type.name]
        return convert(self, value, column)

    # conversions, one per base type ------------------------------------------------

    def _integer(self, value: Any, column: TableColumn) -> int:
        if isinstance(value, bool) or not isinstance(
            value, int | float | Decimal | NumberLiteral | UntypedString
        ):
            raise self._mismatch(value, column)
        if isinstance(value, UntypedString):
            if not _is_integral_text(value):
                raise self._invalid(value, column)
            number = int(value)
        elif isinstance(value, int):
            number = value
        else:
            try:
                exact = Decimal(str(value))
                number = int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
            except (InvalidOperation, ValueError, OverflowError):
                raise self._out_of_range(column) from None
        low, high = INTEGER_RANGES[column.base_type]
        if not low <= number <= high:
            raise self._out_of_range(column)
        return number

    def _float(self, value: Any, column: TableColumn) -> float:
        if isinstance(value, bool) or not isinstance(
            value, int | float | Decimal | NumberLiteral | UntypedString
        ):
            raise self._mismatch(value, column)
        try:
            return float(value)
        except ValueError:
            raise self._invalid(value, column) from None

    def _numeric(self, value: Any, column: TableColumn) -> Decimal:
        # Text too: a text value of an INSERT … SELECT assigns as in a cast.
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
            raise self._mismatch(value, column)
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            raise self._invalid(value, column) from None
        if not number.is_finite():
            raise self._invalid(value, column)
        modifiers = column.modifiers
        if modifiers:
            precision, scale = modifiers[0], (modifiers[1] if len(modifiers) > 1 else 0)
            number = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
            if number.adjusted() >= precision - scale:
                raise LoupeError(
                    NUMERIC_VALUE_OUT_OF_RANGE,
                    "numeric field overflow",
                    detail=f"A field with precision {precision}, scale {scale} must round to an"
                    f" absolute value less than 10^{precision - scale}.",
                )
        # The engine's numeric: rounded to its scale, 22003 beyond its range.
        number = number.quantize(_NUMERIC_QUANTUM, rounding=ROUND_HALF_UP, context=_WIDE)
        if abs(number) >= sqltypes.NUMERIC_LIMIT:
            raise LoupeError(NUMERIC_VALUE_OUT_OF_RANGE, "value overflows numeric format")
        return number

    def _text(self, value: Any, column: TableColumn) -> str:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, dt.datetime):
            text = value.isoformat(sep=" ")
        elif isinstance(value, str | int | float | Decimal | dt.date):
            text = str(value)
        else:
            raise self._mismatch(value, column)
        if column.modifiers and len(text) > column.modifiers[0]:
            raise LoupeError(
                STRING_DATA_RIGHT_TRUNCATION,
                f"value too long for type character varying({column.modifiers[0]})",
            )
        return text

    def _boolean(self, value: Any, column: TableColumn) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, UntypedString):
            lowered = value.strip().lower()
            if lowered in ("t", "true", "y", "yes", "on", "1"):
                return True
            if lowered in ("f", "false", "n", "no", "off", "0"):
                return False
            raise self._invalid(value, column)
        raise self._mismatch(value, column)

    def _timestamp(self, value: Any, column: TableColumn) -> dt.datetime:
        typed = not isinstance(value, UntypedString)
        if isinstance(value, UntypedString):
            try:
                value = dt.datetime.fromisoformat(value.strip())
            except ValueError:
                raise self._invalid(value, column, INVALID_DATETIME_FORMAT) from None
        elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            value = dt.datetime(value.year, value.month, value.day)
        if not isinstance(value, dt.datetime):
            raise self._mismatch(value, column)
        # The session time zone is always UTC: a naive value is UTC, an aware one is
        # converted to it (a timestamp column's input ignores any offset, as PostgreSQL's).
        if column.sql_type.name == "timestamp":
            if value.tzinfo is not None and typed:
                value = value.astimezone(dt.UTC)
            return value.replace(tzinfo=None)
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)

    def _time(self, value: Any, column: TableColumn) -> dt.time:
        if isinstance(value, UntypedString):
            try:
                parsed = dt.time.fromisoformat(value.strip())
            except ValueError:
                raise self._invalid(value, column, INVALID_DATETIME_FORMAT) from None
            return parsed.replace(tzinfo=None)
        if isinstance(value, dt.datetime):  # timestamp -> time is an assignment cast
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC)
            return value.time()
        if isinstance(value, dt.time):
            return value
        raise self._mismatch(value, column)

    def _date(self, value: Any, column: TableColumn) -> dt.date:
        if isinstance(value, UntypedString):
            try:
                return dt.date.fromisoformat(value.strip())
            except ValueError:
                raise self._invalid(value, column, INVALID_DATETIME_FORMAT) from None
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, dt.date):
            return value
        raise self._mismatch(value, column)

    def _interval(self, value: Any, column: TableColumn) -> Interval:
        if isinstance(value, UntypedString):
            return parse_interval(value)
        if isinstance(value, Interval):
            return value
        if isinstance(value, dt.timedelta):
            return Interval.from_timedelta(value)
        raise self._mismatch(value, column)

    def _jsonb(self, value: Any, column: TableColumn) -> str:
        if isinstance(value, Jsonb):
            return str(value)
        if isinstance(value, UntypedString):
            try:
                return jsonb.canonical(value)
            except jsonb.InvalidJson:
                raise LoupeError(
                    INVALID_TEXT_REPRESENTATION, "invalid input syntax for type json"
                ) from None
        if isinstance(value, dict):
            return jsonb.text(value)
        raise self._mismatch(value, column)

    def _uuid(self, value: Any, column: TableColumn) -> str:
        if isinstance(value, uuid.UUID):
            return str(value)
        if isinstance(value, UntypedString):
            try:
                return uuid_text(value)
            except ValueError:
                raise self._invalid(value, column) from None
        raise self._mismatch(value, column)

    def _container(self, value: Any, column: TableColumn) -> list[Any]:
        """An array or list: its text read as the column's type, or a list whose elements
        are assigned to the element type."""
        if isinstance(value, UntypedString):
            parsed = evaluate_closed(Cast(Literal(str(value), "text"), column.sql_type.name))
            assert isinstance(parsed, list)
            return parsed
        if not isinstance(value, list | tuple):
            raise self._mismatch(value, column)
        element = sqltypes.sql_type(column.sql_type.element or "unknown")
        as_element = TableColumn(column.name, element.display)
        convert = _CONVERSIONS[element.name]
        return [None if v is None else convert(self, v, as_element) for v in value]

    # errors ---------------------------------------------------------------------------

    def _mismatch(self, value: Any, column: TableColumn) -> LoupeError:
        return LoupeError(
            DATATYPE_MISMATCH,
            f'column "{column.name}" is of type {column.base_type}'
            f" but expression is of type {type_name_of(value)}",
            hint="You will need to rewrite or cast the expression.",
        )

    @staticmethod
    def _invalid(value: Any, column: TableColumn, code: str = INVALID_TEXT_REPRESENTATION):
        return LoupeError(code, f'invalid input syntax for type {column.base_type}: "{value}"')

    @staticmethod
    def _out_of_range(column: TableColumn) -> LoupeError:
        return LoupeError(NUMERIC_VALUE_OUT_OF_RANGE, f"{column.base_type} out of range")


# Canonical type name -> how a value is assigned to a column of the type.
_CONVERSIONS = {
    "int4": Coercer._integer,
    "int8": Coercer._integer,
    "uint2": Coercer._integer,
    "uint4": Coercer._integer,
    "uint8": Coercer._integer,
    "mz_timestamp": Coercer._integer,
    "float8": Coercer._float,
    "numeric": Coercer._numeric,
    "text": Coercer._text,
    "varchar": Coercer._text,
    "bool": Coercer._boolean,
    "timestamptz": Coercer._timestamp,
    "timestamp": Coercer._timestamp,
    "time": Coercer._time,
    "date": Coercer._date,
    "interval": Coercer._interval,
    "uuid": Coercer._uuid,
    "jsonb": Coercer._jsonb,
}


for _entry in sqltypes.TYPES.values():
    if _entry.element is not None and _entry.element in _CONVERSIONS:
        _CONVERSIONS[_entry.name] = Coercer._container


def updates_table(
    table: Table, updates: Iterable[tuple[tuple[Any, ...], int]], timestamp: int
) -> pa.Table:
    """``(row, diff)`` updates as the shard's Arrow table, all at ``timestamp``."""
    names = table.column_names
    columns: list[list[Any]] = [[] for _ in names]
    diffs: list[int] = []
    for row, diff in updates:
        for index, value in enumerate(row):
            columns[index].append(value)
        diffs.append(diff)
    schema = arrow_schema(table.storage_columns)
    arrays = [
        pa.array(structs(values) if field.type == interval.ARROW else values, type=field.type)
        for field, values in ((schema.field(n), v) for n, v in zip(names, columns, strict=True))
    ]
    arrays.append(pa.array([timestamp] * len(diffs), type=pa.uint64()))
    arrays.append(pa.array(diffs, type=pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


def check_columns(table: Table, names: Iterable[tuple[str, int]]) -> list[TableColumn]:
    """The columns named (with positions, for errors); 42703 / 42701 when they do not fit."""
    found: list[TableColumn] = []
    for name, position in names:
        column = table.column(name)
        if column is None:
            raise LoupeError(
                SqlState.UNDEFINED_COLUMN,
                f'column "{name}" of relation "{table.name}" does not exist',
                position=position,
            )
        if column in found:
            raise LoupeError(
                "42701", f'column "{name}" specified more than once', position=position
            )
        found.append(column)
    return found


__all__ = [
    "DIFF_COLUMN",
    "TIMESTAMP_COLUMN",
    "Coercer",
    "NumberLiteral",
    "Table",
    "TableColumn",
    "UntypedString",
    "check_columns",
    "columns_of",
    "create_table_sql",
    "updates_table",
]
