"""The pgwire message parser and builders (loupe.pgwire.protocol)."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loupe.pgwire import protocol as pw


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def stream(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_startup_packet_parameters():
    """A 3.0 startup packet carries its name/value parameters."""
    body = struct.pack("!i", pw.PROTOCOL_VERSION_3) + b"user\0alice\0database\0db\0\0"
    assert pw.parse_startup(body) == pw.Startup(196608, {"user": "alice", "database": "db"})


@pytest.mark.parametrize(
    ("code", "expected"),
    [(80877103, pw.SSLRequest()), (80877104, pw.GSSENCRequest())],
)
def test_encryption_requests(code, expected):
    """SSLRequest and GSSENCRequest are recognised by their codes."""
    assert pw.parse_startup(struct.pack("!i", code)) == expected


def test_cancel_request():
    """A CancelRequest names the backend's pid and secret."""
    body = struct.pack("!iii", 80877102, 42, -7)
    assert pw.parse_startup(body) == pw.CancelRequest(42, -7)


async def test_read_startup_refuses_a_huge_length():
    """A startup packet claiming more than 10000 bytes is a protocol violation."""
    with pytest.raises(pw.ProtocolViolation):
        await pw.read_startup(stream(struct.pack("!i", 1_000_000)))


def test_parse_with_parameter_types():
    """Parse: statement name, SQL and the parameter type OIDs."""
    body = b"s1\0SELECT $1\0" + struct.pack("!hI", 1, 23)
    assert pw.parse_message(b"P", body) == pw.Parse("s1", "SELECT $1", (23,))


def test_bind_with_null_and_binary_parameters():
    """Bind: per-parameter formats, a NULL (-1 length) and result formats."""
    body = (
        b"p\0s\0"
        + struct.pack("!hhh", 2, 0, 1)
        + struct.pack("!h", 2)
        + struct.pack("!i", -1)
        + struct.pack("!i", 4)
        + b"\0\0\0\x05"
        + struct.pack("!hh", 1, 1)
    )
    assert pw.parse_message(b"B", body) == pw.Bind("p", "s", (0, 1), (None, b"\0\0\0\x05"), (1,))


def test_bind_with_mismatched_format_count_is_a_violation():
    """Two format codes for one parameter is malformed."""
    body = b"\0\0" + struct.pack("!hhh", 2, 0, 0) + struct.pack("!hi", 1, 1) + b"x" + b"\0\0"
    with pytest.raises(pw.ProtocolViolation):
        pw.parse_message(b"B", body)


def test_messages_without_body():
    """Sync, Flush, Terminate and CopyDone have no body."""
    assert pw.parse_message(b"S", b"") == pw.Sync()
    assert pw.parse_message(b"H", b"") == pw.Flush()
    assert pw.parse_message(b"X", b"") == pw.Terminate()
    assert pw.parse_message(b"c", b"") == pw.CopyDone()


def test_describe_execute_close():
    assert pw.parse_message(b"D", b"Sname\0") == pw.Describe("S", "name")
    assert pw.parse_message(b"E", b"\0" + struct.pack("!i", 10)) == pw.Execute("", 10)
    assert pw.parse_message(b"C", b"P\0") == pw.Close("P", "")


def test_describe_of_something_else_is_a_violation():
    with pytest.raises(pw.ProtocolViolation):
        pw.parse_message(b"D", b"Xname\0")


def test_unterminated_query_is_a_violation():
    with pytest.raises(pw.ProtocolViolation):
        pw.parse_message(b"Q", b"SELECT 1")


def test_unknown_message_type_is_a_violation():
    with pytest.raises(pw.ProtocolViolation):
        pw.parse_message(b"z", b"")


def test_sasl_initial_response():
    body = b"SCRAM-SHA-256\0" + struct.pack("!i", 3) + b"abc"
    assert pw.parse_sasl_initial_response(body) == pw.SASLInitialResponse("SCRAM-SHA-256", b"abc")


async def test_oversized_message_is_refused_before_it_is_read():
    """A length above the maximum is refused from the header alone."""
    data = b"Q" + struct.pack("!i", 1_000_005)
    with pytest.raises(pw.ProtocolViolation, match="exceeds"):
        await pw.read_message(stream(data), max_message_size=1_000_000)


async def test_read_message_from_stream():
    data = frame(b"Q", b"SELECT 1\0") + frame(b"S", b"")
    reader = stream(data)
    assert await pw.read_message(reader) == pw.Query("SELECT 1")
    assert await pw.read_message(reader) == pw.Sync()


def test_error_response_fields():
    """ErrorResponse carries S, V, C, M and P fields, NUL-terminated."""
    message = pw.error_response("42601", "syntax error", position=8)
    assert message[:1] == b"E"
    assert struct.unpack("!i", message[1:5])[0] == len(message) - 1
    body = message[5:]
    assert body.endswith(b"\0\0")
    fields = {f[:1]: f[1:].decode() for f in body[:-1].split(b"\0") if f}
    assert fields == {
        b"S": "ERROR",
        b"V": "ERROR",
        b"C": "42601",
        b"M": "syntax error",
        b"P": "8",
    }


def test_data_row_with_null():
    message = pw.data_row([b"1", None])
    assert message == b"D" + struct.pack("!ihi", 4 + 2 + 4 + 1 + 4, 2, 1) + b"1" + struct.pack(
        "!i", -1
    )


def test_row_description_layout():
    message = pw.row_description([pw.Field("a", 23, 4)])
    assert message == b"T" + struct.pack("!ih", 4 + 2 + 2 + 18, 1) + b"a\0" + struct.pack(
        "!ihihih", 0, 0, 23, 4, -1, 0
    )


KINDS = st.sampled_from([bytes([c]) for c in b"QPBDCESHXpdcfzZ\0"])


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(kind=KINDS, body=st.binary(max_size=64))
def test_fuzz_parser_returns_messages_or_violations(kind, body):
    """Any bytes parse to a frontend message or raise ProtocolViolation, nothing else."""
    try:
        message = pw.parse_message(kind, body)
    except pw.ProtocolViolation:
        return
    assert type(message).__module__ == pw.__name__


@settings(max_examples=1000, deadline=None)
@given(body=st.binary(max_size=48))
def test_fuzz_startup_parser(body):
    """Any startup body parses to a startup message or raises ProtocolViolation."""
    try:
        message = pw.parse_startup(body)
    except pw.ProtocolViolation:
        return
    assert isinstance(message, pw.Startup | pw.SSLRequest | pw.GSSENCRequest | pw.CancelRequest)


@settings(max_examples=1000, deadline=None)
@given(body=st.binary(max_size=48))
def test_fuzz_sasl_initial_response_parser(body):
    """Any SASLInitialResponse body parses or raises ProtocolViolation."""
    try:
        message = pw.parse_sasl_initial_response(body)
    except pw.ProtocolViolation:
        return
    assert isinstance(message, pw.SASLInitialResponse)
