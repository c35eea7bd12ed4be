"""``jsonb`` values as PostgreSQL reads and prints them, in Python.

A jsonb value is held as its canonical text, the text PostgreSQL prints:
object keys in PostgreSQL's order (shorter keys first, then by their UTF-8
bytes; a repeated key keeps its last value), ``", "`` between elements,
``": "`` after keys, numbers as ``numeric`` prints them (``1e2`` is ``100``,
``1.50`` keeps its scale), strings escaped as ``escape_json`` does. Equal
documents have equal text, so equality and grouping compare texts.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


class Jsonb(str):
    """The canonical text of a jsonb value, where a Python value needs to say it is one."""

    __slots__ = ()


class InvalidJson(ValueError):
    """Text that is no JSON document (PostgreSQL's 22P02)."""


def _no_constant(name: str) -> Any:
    raise InvalidJson(name)  # NaN and Infinity are no JSON


def parse(text: str) -> Any:
    """The document ``text`` holds: dicts, lists, str, int, Decimal, bool, None."""
    try:
        return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError) as error:
        raise InvalidJson(text) from error


def _key_order(key: str) -> tuple[int, bytes]:
    encoded = key.encode()
    return len(encoded), encoded


def _number(value: int | Decimal) -> str:
    if isinstance(value, int):
        return str(value)
    text = format(value, "f")
    return text.lstrip("-") if value == 0 else text


def text(value: Any) -> str:
    """PostgreSQL's text of the document ``value``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | Decimal):
        return _number(value)
    if isinstance(value, float):
        return _number(Decimal(repr(value)))
    if isinstance(value, dict):
        items = (
            f"{json.dumps(k, ensure_ascii=False)}: {text(value[k])}"
            for k in sorted(value, key=_key_order)
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(text(v) for v in value) + "]"
    raise TypeError(f"no JSON value: {value!r}")


def canonical(document: str) -> str:
    """The canonical text of the JSON ``document``; ``InvalidJson`` when it is none."""
    return text(parse(document))


def type_name(value: Any) -> str:
    """What ``jsonb_typeof`` says of a parsed document."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "number"


def contains(left: Any, right: Any, *, top: bool = True) -> bool:
    """PostgreSQL's ``@>``: objects contain their sub-objects' pairs, arrays every element
    of the other (at the top level an array also contains a scalar it holds)."""
    if isinstance(left, dict):
        return isinstance(right, dict) and all(
            key in left and contains(left[key], value, top=False) for key, value in right.items()
        )
    if isinstance(left, list):
        if isinstance(right, list):
            return all(any(_element_contains(item, r) for item in left) for r in right)
        return (
            top and not isinstance(right, dict) and any(_same_scalar(item, right) for item in left)
        )
    return not isinstance(right, dict | list) and _same_scalar(left, right)


def equal(left: Any, right: Any) -> bool:
    """PostgreSQL's jsonb equality: numbers by value (``2`` = ``2.0``), the rest exactly."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            equal(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, dict | list) or isinstance(right, dict | list):
        return False
    return _same_scalar(left, right)


def _element_contains(left: Any, right: Any) -> bool:
    if isinstance(right, dict | list):
        return isinstance(left, type(right)) and contains(left, right, top=False)
    return _same_scalar(left, right)


def _same_scalar(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool) or left is None or right is None:
        return left is right
    if isinstance(left, str) or isinstance(right, str):
        return isinstance(left, str) and isinstance(right, str) and left == right
    if isinstance(left, dict | list) or isinstance(right, dict | list):
        return False
    return Decimal(left) == Decimal(right)
