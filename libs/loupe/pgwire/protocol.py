"""PostgreSQL wire protocol v3: framing, frontend messages in, backend messages out.

The conversation (PostgreSQL's "Frontend/Backend Protocol" chapter):

- The client opens with a *startup packet*: an int32 length (itself included) and
  an int32 code, no type byte. The code is the protocol version (3.0 =
  ``196608``) followed by ``name\\0value\\0…\\0`` parameters, or a request:
  ``SSLRequest`` (80877103) and ``GSSENCRequest`` (80877104) are answered with one
  byte (``S``/``N``) and the client sends its startup packet again;
  ``CancelRequest`` (80877102) carries a backend pid and secret and closes the
  connection.
- Every later message, both ways, is a type byte, an int32 length (itself
  included, the type byte not) and a body. ``read_message`` parses frontend
  bodies into the dataclasses below; the ``*_message`` functions build backend
  messages as bytes.
- A body that does not parse, a length below 4 or above ``max_message_size`` is a
  ``ProtocolViolation`` (SQLSTATE 08P01): the server answers with an
  ``ErrorResponse`` and closes the connection. The parser never raises anything
  else for bytes a client sends (the fuzz test holds it to that).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PROTOCOL_VIOLATION = "08P01"
PROTOCOL_VERSION_3 = 196608  # 3 << 16
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102
DEFAULT_MAX_MESSAGE_SIZE = 64 * 1024 * 1024
# A startup packet is small; PostgreSQL refuses those over 10000 bytes.
MAX_STARTUP_PACKET_SIZE = 10_000

_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")


class ProtocolViolation(Exception):
    """The client broke the protocol (SQLSTATE 08P01); the connection ends."""

    code = PROTOCOL_VIOLATION

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- frontend messages -------------------------------------------------------------------


@dataclass(frozen=True)
class Startup:
    """A protocol 3.x startup packet with its parameters (user, database, options, …)."""

    version: int
    parameters: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    pass


@dataclass(frozen=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True)
class CancelRequest:
    process_id: int
    secret_key: int


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_oids: tuple[int, ...]


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    # One code for all parameters, one per parameter, or none (all text).
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclass(frozen=True)
class Describe:
    kind: str  # "S" (statement) or "P" (portal)
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int  # 0: no limit


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Close:
    kind: str  # "S" or "P"
    name: str


@dataclass(frozen=True)
class Terminate:
    pass


@dataclass(frozen=True)
class PasswordMessage:
    """A ``p`` message: the cleartext password, or (during SASL) the raw SASL data.

    The type byte is shared by PasswordMessage, SASLInitialResponse and
    SASLResponse; the server knows which it expects (``sasl_initial_response``).
    """

    data: bytes

    @property
    def password(self) -> str:
        return _cstring_only(self.data, "password message")


@dataclass(frozen=True)
class SASLInitialResponse:
    mechanism: str
    data: bytes


@dataclass(frozen=True)
class CopyData:
    data: bytes


@dataclass(frozen=True)
class CopyDone:
    pass


@dataclass(frozen=True)
class CopyFail:
    message: str


FrontendMessage = (
    Query
    | Parse
    | Bind
    | Describe
    | Execute
    | Sync
    | Flush
    | Close
    | Terminate
    | PasswordMessage
    | CopyData
    | CopyDone
    | CopyFail
)
StartupMessage = Startup | SSLRequest | GSSENCRequest | CancelRequest


class _Reader:
    """Reads a message body; running off its end is a ``ProtocolViolation``."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.offset = 0
        self.what = what

    def _take(self, size: int) -> bytes:
        end = self.offset + size
        if size < 0 or end > len(self.data):
            raise ProtocolViolation(f"invalid {self.what} message: too short")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def uint32(self) -> int:
        return int(_UINT32.unpack(self._take(4))[0])

    def byte(self) -> str:
        return self._take(1).decode("latin-1")

    def raw(self, size: int) -> bytes:
        return self._take(size)

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.offset)
        if end < 0:
            raise ProtocolViolation(f"invalid {self.what} message: unterminated string")
        raw = self.data[self.offset : end]
        self.offset = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ProtocolViolation(f"invalid {self.what} message: invalid UTF-8") from None

    def rest(self) -> bytes:
        chunk = self.data[self.offset :]
        self.offset = len(self.data)
        return chunk

    def count(self) -> int:
        """An int16 count of items that follow (never negative)."""
        n = self.int16()
        if n < 0:
            raise ProtocolViolation(f"invalid {self.what} message: negative count")
        return n

    def done(self) -> None:
        if self.offset != len(self.data):
            raise ProtocolViolation(f"invalid {self.what} message: trailing bytes")


def _cstring_only(data: bytes, what: str) -> str:
    reader = _Reader(data, what)
    value = reader.cstring()
    reader.done()
    return value


def parse_startup(body: bytes) -> StartupMessage:
    """A startup packet's body (after its length): version or request code, then its data."""
    reader = _Reader(body, "startup")
    code = reader.int32()
    if code == SSL_REQUEST_CODE:
        reader.done()
        return SSLRequest()
    if code == GSSENC_REQUEST_CODE:
        reader.done()
        return GSSENCRequest()
    if code == CANCEL_REQUEST_CODE:
        process_id, secret = reader.int32(), reader.int32()
        reader.done()
        return CancelRequest(process_id, secret)
    parameters: dict[str, str] = {}
    while True:
        name = reader.cstring()
        if not name:
            break
        parameters[name] = reader.cstring()
    reader.done()
    return Startup(code, parameters)


def parse_message(kind: bytes, body: bytes) -> FrontendMessage:
    """A frontend message of type ``kind`` from its ``body``."""
    match kind:
        case b"Q":
            return Query(_cstring_only(body, "query"))
        case b"P":
            reader = _Reader(body, "parse")
            name, sql = reader.cstring(), reader.cstring()
            oids = tuple(reader.uint32() for _ in range(reader.count()))
            reader.done()
            return Parse(name, sql, oids)
        case b"B":
            return _parse_bind(body)
        case b"D" | b"C":
            what = "describe" if kind == b"D" else "close"
            reader = _Reader(body, what)
            target = reader.byte()
            if target not in ("S", "P"):
                raise ProtocolViolation(f"invalid {what} message subtype {target!r}")
            name = reader.cstring()
            reader.done()
            return Describe(target, name) if kind == b"D" else Close(target, name)
        case b"E":
            reader = _Reader(body, "execute")
            portal, max_rows = reader.cstring(), reader.int32()
            reader.done()
            return Execute(portal, max(max_rows, 0))
        case b"S" | b"H" | b"X" | b"c":
            if body:
                raise ProtocolViolation("invalid message: unexpected body")
            if kind == b"S":
                return Sync()
            if kind == b"H":
                return Flush()
            return Terminate() if kind == b"X" else CopyDone()
        case b"p":
            return PasswordMessage(body)
        case b"d":
            return CopyData(body)
        case b"f":
            return CopyFail(_cstring_only(body, "copy fail"))
    raise ProtocolViolation(f"invalid frontend message type {kind!r}")


def _parse_bind(body: bytes) -> Bind:
    reader = _Reader(body, "bind")
    portal, statement = reader.cstring(), reader.cstring()
    formats = tuple(reader.int16() for _ in range(reader.count()))
    params: list[bytes | None] = []
    for _ in range(reader.count()):
        size = reader.int32()
        if size < -1:
            raise ProtocolViolation("invalid bind message: negative parameter length")
        params.append(None if size == -1 else reader.raw(size))
    results = tuple(reader.int16() for _ in range(reader.count()))
    reader.done()
    if len(formats) > 1 and len(formats) != len(params):
        raise ProtocolViolation(
            f"bind message has {len(formats)} parameter formats but {len(params)} parameters"
        )
    if any(code not in (0, 1) for code in formats + results):
        raise ProtocolViolation("invalid format code in bind message")
    return Bind(portal, statement, formats, tuple(params), results)


def parse_sasl_initial_response(data: bytes) -> SASLInitialResponse:
    """The body of a ``p`` message sent as SASLInitialResponse."""
    reader = _Reader(data, "SASLInitialResponse")
    mechanism = reader.cstring()
    size = reader.int32()
    payload = b"" if size == -1 else reader.raw(size)
    reader.done()
    return SASLInitialResponse(mechanism, payload)


def format_codes(codes: Sequence[int], count: int) -> list[int]:
    """Per-item format codes from a Bind's list (none: all text; one: for all)."""
    if not codes:
        return [0] * count
    if len(codes) == 1:
        return [codes[0]] * count
    if len(codes) != count:
        raise ProtocolViolation(f"expected {count} format codes, got {len(codes)}")
    return list(codes)


# -- reading from a stream --------------------------------------------------------------


async def read_startup(reader: asyncio.StreamReader) -> StartupMessage:
    """The next startup packet (raises ``asyncio.IncompleteReadError`` at EOF)."""
    header = await reader.readexactly(4)
    length = _INT32.unpack(header)[0]
    if length < 8 or length > MAX_STARTUP_PACKET_SIZE:
        raise ProtocolViolation(f"invalid length of startup packet: {length}")
    return parse_startup(await reader.readexactly(length - 4))


async def read_frame(
    reader: asyncio.StreamReader, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> tuple[bytes, bytes]:
    """The next message's type byte and body, unparsed."""
    header = await reader.readexactly(5)
    kind, length = header[:1], _INT32.unpack(header[1:])[0]
    if length < 4:
        raise ProtocolViolation(f"invalid message length {length}")
    if length - 4 > max_message_size:
        raise ProtocolViolation(
            f"message of {length - 4} bytes exceeds the maximum of {max_message_size}"
        )
    return kind, await reader.readexactly(length - 4)


async def read_message(
    reader: asyncio.StreamReader, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> FrontendMessage:
    kind, body = await read_frame(reader, max_message_size)
    return parse_message(kind, body)


# -- backend messages -------------------------------------------------------------------


def _message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + _INT32.pack(len(body) + 4) + body


def _cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def authentication_ok() -> bytes:
    return _message(b"R", _INT32.pack(0))


def authentication_cleartext_password() -> bytes:
    return _message(b"R", _INT32.pack(3))


def authentication_sasl(mechanisms: Iterable[str]) -> bytes:
    return _message(b"R", _INT32.pack(10) + b"".join(_cstr(m) for m in mechanisms) + b"\0")


def authentication_sasl_continue(data: bytes) -> bytes:
    return _message(b"R", _INT32.pack(11) + data)


def authentication_sasl_final(data: bytes) -> bytes:
    return _message(b"R", _INT32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return _message(b"S", _cstr(name) + _cstr(value))


def backend_key_data(process_id: int, secret_key: int) -> bytes:
    return _message(b"K", _INT32.pack(process_id) + _INT32.pack(secret_key))


def ready_for_query(status: str = "I") -> bytes:
    """``I`` idle, ``T`` in a transaction, ``E`` in a failed transaction."""
    return _message(b"Z", status.encode())


@dataclass(frozen=True)
class Field:
    """One column of a RowDescription."""

    name: str
    type_oid: int
    type_size: int = -1
    type_modifier: int = -1
    format: int = 0
    table_oid: int = 0
    column_number: int = 0


def row_description(fields: Sequence[Field]) -> bytes:
    body = [_INT16.pack(len(fields))]
    for f in fields:
        body.append(
            _cstr(f.name)
            + struct.pack(
                "!ihihih",
                f.table_oid,
                f.column_number,
                f.type_oid,
                f.type_size,
                f.type_modifier,
                f.format,
            )
        )
    return _message(b"T", b"".join(body))


def data_row(values: Sequence[bytes | None]) -> bytes:
    body = [_INT16.pack(len(values))]
    for value in values:
        if value is None:
            body.append(_INT32.pack(-1))
        else:
            body.append(_INT32.pack(len(value)))
            body.append(value)
    return _message(b"D", b"".join(body))


def command_complete(tag: str) -> bytes:
    return _message(b"C", _cstr(tag))


def empty_query_response() -> bytes:
    return _message(b"I")


def _fields_message(
    kind: bytes,
    severity: str,
    code: str,
    message: str,
    *,
    detail: str = "",
    hint: str = "",
    position: int = 0,
) -> bytes:
    fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", message)]
    if detail:
        fields.append((b"D", detail))
    if hint:
        fields.append((b"H", hint))
    if position > 0:
        fields.append((b"P", str(position)))
    body = b"".join(key + _cstr(value) for key, value in fields) + b"\0"
    return _message(kind, body)


def error_response(
    code: str,
    message: str,
    *,
    severity: str = "ERROR",
    detail: str = "",
    hint: str = "",
    position: int = 0,
) -> bytes:
    return _fields_message(
        b"E", severity, code, message, detail=detail, hint=hint, position=position
    )


def notice_response(
    message: str, *, severity: str = "NOTICE", code: str = "00000", detail: str = "", hint: str = ""
) -> bytes:
    return _fields_message(b"N", severity, code, message, detail=detail, hint=hint)


def parse_complete() -> bytes:
    return _message(b"1")


def bind_complete() -> bytes:
    return _message(b"2")


def close_complete() -> bytes:
    return _message(b"3")


def no_data() -> bytes:
    return _message(b"n")


def portal_suspended() -> bytes:
    return _message(b"s")


def parameter_description(oids: Sequence[int]) -> bytes:
    return _message(b"t", _INT16.pack(len(oids)) + b"".join(_UINT32.pack(o) for o in oids))


def _copy_response(kind: bytes, overall_format: int, column_formats: Sequence[int]) -> bytes:
    body = bytes([overall_format]) + _INT16.pack(len(column_formats))
    body += b"".join(_INT16.pack(code) for code in column_formats)
    return _message(kind, body)


def copy_out_response(columns: int, overall_format: int = 0) -> bytes:
    return _copy_response(b"H", overall_format, [overall_format] * columns)


def copy_in_response(columns: int, overall_format: int = 0) -> bytes:
    return _copy_response(b"G", overall_format, [overall_format] * columns)


def copy_data(data: bytes) -> bytes:
    return _message(b"d", data)


def copy_done() -> bytes:
    return _message(b"c")
