"""Values in PostgreSQL's text and binary wire formats, by Loupe type name.

The contract (the server uses only these):

- ``type_oid(type_name) -> int`` and ``type_size(type_name) -> int`` (``pg_type.typlen``,
  -1 for variable length): what a ``RowDescription`` field says.
- ``encode_text(value, type_name) -> bytes`` and ``encode_binary(value, type_name) ->
  bytes``: a non-NULL result value (as the coordinator's events hold it: Python values,
  ``loupe.interval.Interval``, ``Decimal``, lists for arrays) in the format PostgreSQL
  would send for a column of that type.
- ``decode_text(data, oid) -> Any`` and ``decode_binary(data, oid) -> Any``: a Bind
  parameter in that format, into a Python value the coordinator's ``Parameter`` takes;
  ``oid`` 0 (unspecified) decodes text as text. ``ValueError`` when malformed (the server
  answers 22P02 / 08P01).
- ``param_type_name(oid) -> str | None``: the Loupe type name of a parameter OID.
"""

from __future__ import annotations

from typing import Any

from loupe import sqltypes

TEXT_OID = 25
UNKNOWN_OID = 705


def type_oid(type_name: str) -> int:
    try:
        return sqltypes.sql_type(type_name).oid
    except sqltypes.UnknownType:
        return TEXT_OID


def type_size(type_name: str) -> int:
    return {"bool": 1, "int2": 2, "int4": 4, "int8": 8, "float4": 4, "float8": 8}.get(
        type_name, -1
    )


def encode_text(value: Any, type_name: str) -> bytes:
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


def encode_binary(value: Any, type_name: str) -> bytes:
    raise NotImplementedError(type_name)


def decode_text(data: bytes, oid: int) -> Any:
    return data.decode()


def decode_binary(data: bytes, oid: int) -> Any:
    raise NotImplementedError(oid)


def param_type_name(oid: int) -> str | None:
    for sql_type in sqltypes.TYPES.values():
        if sql_type.oid == oid and oid != 16384:
            return sql_type.name
    return None
