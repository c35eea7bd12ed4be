"""pgwire connections: startup, authentication, cancel, TLS, and clients that misbehave."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from loupe.pgwire import protocol as pw


def connect(port: int, **kwargs) -> psycopg.Connection:
    kwargs.setdefault("user", "materialize")
    return psycopg.connect(host="127.0.0.1", port=port, dbname="materialize", **kwargs)


async def raw_session(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A socket past startup (trust), at its first ReadyForQuery."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = struct.pack("!i", pw.PROTOCOL_VERSION_3) + b"user\0materialize\0\0"
    writer.write(struct.pack("!i", len(body) + 4) + body)
    await writer.drain()
    await until_message(reader, b"Z")
    return reader, writer


async def read_backend(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    header = await reader.readexactly(5)
    (length,) = struct.unpack("!i", header[1:])
    return header[:1], await reader.readexactly(length - 4)


async def until_message(reader: asyncio.StreamReader, kind: bytes) -> bytes:
    while True:
        got, body = await asyncio.wait_for(read_backend(reader), 10)
        if got == kind:
            return body
        assert got != b"E", body


def error_fields(body: bytes) -> dict[str, str]:
    return {f[:1].decode(): f[1:].decode() for f in body[:-1].split(b"\0") if f}


async def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_startup_reports_parameters_and_backend_key(engine):
    """ParameterStatus as Materialize sends them; options -c and application_name become variables."""

    def run() -> tuple:
        with connect(
            engine.service.pgwire_port,
            application_name="probe",
            options="-c cluster=elsewhere -c statement_timeout=5s",
        ) as conn:
            info = conn.info
            status = {
                name: info.parameter_status(name)
                for name in (
                    "server_version",
                    "client_encoding",
                    "DateStyle",
                    "TimeZone",
                    "standard_conforming_strings",
                    "integer_datetimes",
                    "IntervalStyle",
                    "is_superuser",
                    "application_name",
                )
            }
            shown = conn.execute("SHOW cluster").fetchone()
            timeout = conn.execute("SHOW statement_timeout").fetchone()
            return status, info.backend_pid, shown, timeout

    status, pid, shown, timeout = await asyncio.to_thread(run)
    assert status == {
        "server_version": "9.5.0",
        "client_encoding": "UTF8",
        "DateStyle": "ISO, MDY",
        "TimeZone": "UTC",
        "standard_conforming_strings": "on",
        "integer_datetimes": "on",
        "IntervalStyle": "postgres",
        "is_superuser": "on",
        "application_name": "probe",
    }
    assert pid > 0
    assert shown == ("elsewhere",)
    assert timeout == ("5000ms",)


async def test_ssl_refused_without_certificate(engine):
    """Without a certificate SSLRequest is answered N: sslmode=prefer connects, require fails."""
    port = engine.service.pgwire_port

    def run() -> None:
        with connect(port, sslmode="prefer") as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError, match="does not support SSL"):
            connect(port, sslmode="require")

    await asyncio.to_thread(run)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key for 127.0.0.1."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_with_a_certificate(nats_url, data_dir, start_table_system, certificate):
    """With pgwire_tls_cert/key the connection is encrypted (sslmode=require)."""
    cert, key = certificate
    async with start_table_system(
        nats_url, data_dir, pgwire_tls_cert=str(cert), pgwire_tls_key=str(key)
    ) as harness:

        def run() -> tuple:
            with connect(harness.service.pgwire_port, sslmode="require") as conn:
                return conn.pgconn.ssl_in_use, conn.execute("SELECT 2").fetchone()

        assert await asyncio.to_thread(run) == (True, (2,))


async def test_password_logins_use_scram(nats_url, data_dir, start_table_system):
    """In password mode the server asks for SCRAM-SHA-256 (AuthenticationSASL); psycopg's
    exchange with the right password logs in, a wrong one is 28P01 and the connection closes."""
    async with start_table_system(
        nats_url, data_dir, authenticator="password", superuser_password="s3cret"
    ) as harness:
        port = harness.service.pgwire_port

        def run() -> tuple:
            with connect(port, password="s3cret") as conn:
                row = conn.execute("SELECT 1").fetchone()
            try:
                connect(port, password="wrong")
            except psycopg.OperationalError as error:
                return row, str(error)
            raise AssertionError("a wrong password logged in")

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = struct.pack("!i", pw.PROTOCOL_VERSION_3) + b"user\0materialize\0\0"
        writer.write(struct.pack("!i", len(body) + 4) + body)
        kind, request = await asyncio.wait_for(read_backend(reader), 10)
        writer.close()
        assert (kind, request) == (b"R", struct.pack("!i", 10) + b"SCRAM-SHA-256\0\0")
        row, refused = await asyncio.to_thread(run)
        assert row == (1,)
        assert 'password authentication failed for user "materialize"' in refused

        def role() -> tuple:
            with connect(port, password="s3cret", autocommit=True) as admin:
                admin.execute("CREATE ROLE alice WITH LOGIN PASSWORD 'alice-pw'")
            with connect(port, user="alice", password="alice-pw") as alice:
                row = alice.execute("SELECT 1").fetchone()
            with pytest.raises(psycopg.OperationalError) as wrong:
                connect(port, user="alice", password="nope")
            return row, str(wrong.value)

        # A role's own password (SCRAM-SHA-256 once the role has a verifier).
        row, refused = await asyncio.to_thread(role)
        assert row == (1,)
        assert 'password authentication failed for user "alice"' in refused


async def test_max_connections_refused_with_53300(engine):
    """Past max_connections a pgwire login is refused with 53300, as over gRPC."""
    port = engine.service.pgwire_port
    coordinator = engine.service.coordinator

    def run() -> str:
        with connect(port, autocommit=True) as admin:
            admin.execute(f"ALTER SYSTEM SET max_connections = {len(coordinator.sessions)}")
            try:
                with pytest.raises(psycopg.OperationalError) as refused:
                    connect(port)
                return str(refused.value)
            finally:
                admin.execute("ALTER SYSTEM RESET max_connections")

    assert "max_connections limit" in await asyncio.to_thread(run)


async def test_cancel_request_stops_copy_subscribe(engine):
    """A CancelRequest with the BackendKeyData ends COPY (SUBSCRIBE …) TO STDOUT with 57014.

    (A raw socket: libpq's blocking cancel holds the GIL the in-process server needs.)
    """
    port = engine.service.pgwire_port

    def create() -> None:
        with connect(port, autocommit=True) as conn:
            conn.execute("CREATE TABLE s (a int)")
            conn.execute("INSERT INTO s VALUES (1)")

    await asyncio.to_thread(create)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = struct.pack("!i", pw.PROTOCOL_VERSION_3) + b"user\0materialize\0\0"
    writer.write(struct.pack("!i", len(body) + 4) + body)
    key = await until_message(reader, b"K")
    await until_message(reader, b"Z")
    await query(writer, "COPY (SUBSCRIBE s) TO STDOUT")
    await until_message(reader, b"H")
    first = await until_message(reader, b"d")
    assert first.rstrip(b"\n").split(b"\t")[-2:] == [b"1", b"1"]
    _, canceller = await asyncio.open_connection("127.0.0.1", port)
    canceller.write(struct.pack("!ii", 16, pw.CANCEL_REQUEST_CODE) + key)
    await canceller.drain()
    while True:
        kind, body = await asyncio.wait_for(read_backend(reader), 10)
        if kind == b"E":
            break
        assert kind == b"d", kind
    assert error_fields(body)["C"] == "57014"
    await until_message(reader, b"Z")
    await query(writer, "SELECT count(*) FROM s")
    assert (await until_message(reader, b"D")).endswith(b"1")  # the connection keeps serving
    writer.close()
    canceller.close()


async def query(writer: asyncio.StreamWriter, sql: str) -> None:
    data = sql.encode() + b"\0"
    writer.write(b"Q" + struct.pack("!i", 4 + len(data)) + data)
    await writer.drain()


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (b"Q" + struct.pack("!i", 4), "unterminated string"),
        (b"Q" + struct.pack("!i", 200 * 1024 * 1024), "exceeds the maximum"),
        (b"!" + struct.pack("!i", 4), "invalid frontend message type"),
    ],
)
async def test_malformed_message_is_08P01_and_closes(engine, message, text):
    """Malformed or oversized: ErrorResponse 08P01, connection closed, session freed, others fine."""
    port = engine.service.pgwire_port
    sessions = engine.service.coordinator.sessions
    other = await raw_session(port)
    reader, writer = await raw_session(port)
    before = len(sessions)
    writer.write(message)
    await writer.drain()
    kind, body = await asyncio.wait_for(read_backend(reader), 10)
    assert kind == b"E"
    fields = error_fields(body)
    assert fields["C"] == "08P01"
    assert text in fields["M"]
    assert await asyncio.wait_for(reader.read(), 10) == b""
    await wait_until(lambda: len(sessions) == before - 1)
    other_reader, other_writer = other
    other_writer.write(b"Q" + struct.pack("!i", 4 + 9) + b"SELECT 1\0")
    await other_writer.drain()
    row = await until_message(other_reader, b"D")
    assert row.endswith(b"1")
    for stream in (writer, other_writer):
        stream.close()


async def test_client_vanishing_mid_subscribe_frees_the_session(engine):
    """A client that closes its socket during COPY (SUBSCRIBE) has its session and dataflow freed."""
    port = engine.service.pgwire_port
    coordinator = engine.service.coordinator

    def create() -> None:
        with connect(port, autocommit=True) as conn:
            conn.execute("CREATE TABLE v (a int)")

    await asyncio.to_thread(create)
    before = {s.id for s in coordinator.sessions}
    reader, writer = await raw_session(port)
    sql = b"COPY (SUBSCRIBE v) TO STDOUT\0"
    writer.write(b"Q" + struct.pack("!i", 4 + len(sql)) + sql)
    await writer.drain()
    await until_message(reader, b"H")  # CopyOutResponse: the subscribe runs
    running = [s for s in coordinator.sessions if s.id not in before and s.running is not None]
    assert running
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    await wait_until(lambda: not {s.id for s in coordinator.sessions} & {s.id for s in running})
    assert all(s.running is None or s.running.done() for s in running)


async def test_jdbc_style_startup_parameters_are_accepted(engine):
    """pgJDBC (DBeaver, Grafana) sends startup parameters: extra_float_digits is a session
    variable (no notice), the others are taken or noticed, the session opens and serves."""
    reader, writer = await asyncio.open_connection("127.0.0.1", engine.service.pgwire_port)
    parameters = {
        "user": "materialize",
        "database": "materialize",
        "client_encoding": "UTF8",
        "DateStyle": "ISO",
        "TimeZone": "UTC",
        "extra_float_digits": "2",
        "application_name": "DBeaver 24.0.0 - Main",
    }
    body = struct.pack("!i", pw.PROTOCOL_VERSION_3)
    body += b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in parameters.items())
    body += b"\0"
    writer.write(struct.pack("!i", len(body) + 4) + body)
    notices = []
    statuses = {}
    while True:
        kind, message = await asyncio.wait_for(read_backend(reader), 10)
        assert kind != b"E", message
        if kind == b"N":
            notices.append(error_fields(message)["M"])
        if kind == b"S":
            name, value, _ = message.split(b"\0")
            statuses[name.decode()] = value.decode()
        if kind == b"Z":
            break
    assert not any("extra_float_digits" in n for n in notices), notices
    assert statuses["application_name"] == "DBeaver 24.0.0 - Main"
    await query(writer, "SHOW extra_float_digits")
    assert (await until_message(reader, b"D")).endswith(b"2")
    writer.close()


async def test_client_vanishing_mid_copy_from_writes_nothing(engine):
    """A client that goes away during COPY FROM STDIN: its session is closed, no row written."""
    port = engine.service.pgwire_port
    coordinator = engine.service.coordinator

    def create() -> None:
        with connect(port, autocommit=True) as conn:
            conn.execute("CREATE TABLE half (a int)")

    await asyncio.to_thread(create)
    before = {s.id for s in coordinator.sessions}
    reader, writer = await raw_session(port)
    ours = {s.id for s in coordinator.sessions} - before
    await query(writer, "COPY half FROM STDIN")
    await until_message(reader, b"G")  # CopyInResponse
    data = b"1\n2\n"
    writer.write(b"d" + struct.pack("!i", 4 + len(data)) + data)
    await writer.drain()
    writer.close()
    await wait_until(lambda: not {s.id for s in coordinator.sessions} & ours)

    def count() -> tuple | None:
        with connect(port) as conn:
            return conn.execute("SELECT count(*) FROM half").fetchone()

    assert await asyncio.to_thread(count) == (0,)


async def test_empty_query_and_notices_as_postgresql_sends_them(engine):
    """An empty query is EmptyQueryResponse; a NOTICE arrives as NoticeResponse with
    PostgreSQL's message (CREATE TABLE IF NOT EXISTS of an existing table)."""
    sql = "CREATE TABLE IF NOT EXISTS twice (a int)"

    def notices(**params) -> list[str]:
        received: list[str] = []
        with psycopg.connect(autocommit=True, **params) as conn:
            if params["port"] == 5432:  # the reference keeps its tables between runs
                conn.execute("DROP TABLE IF EXISTS twice")
            conn.add_notice_handler(lambda d: received.append(d.message_primary or ""))
            conn.execute(sql)
            conn.execute(sql)
            result = conn.execute("").pgresult
            assert result is not None
            assert result.status == psycopg.pq.ExecStatus.EMPTY_QUERY
        return received

    reference = await asyncio.to_thread(
        notices, host="127.0.0.1", port=5432, user="postgres", dbname="postgres"
    )
    loupe = await asyncio.to_thread(
        notices,
        host="127.0.0.1",
        port=engine.service.pgwire_port,
        user="materialize",
        dbname="materialize",
    )
    assert reference  # PostgreSQL did send a notice
    assert loupe == reference


def frontend(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


async def test_suspended_portal_ends_at_sync(engine):
    """A portal suspended by Execute's row limit ends at Sync (outside a transaction
    block), so the next query of the connection runs (it would wait for its statement)."""
    reader, writer = await raw_session(engine.service.pgwire_port)
    sql = b"SELECT 1 AS n UNION ALL SELECT 2 UNION ALL SELECT 3"
    writer.write(
        frontend(b"P", b"\0" + sql + b"\0" + struct.pack("!h", 0))
        + frontend(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
        + frontend(b"E", b"\0" + struct.pack("!i", 1))
        + frontend(b"S", b"")
    )
    await writer.drain()
    kinds = []
    while not kinds or kinds[-1] != b"Z":
        kind, body = await asyncio.wait_for(read_backend(reader), 10)
        assert kind != b"E", body
        kinds.append(kind)
    assert kinds == [b"1", b"2", b"D", b"s", b"Z"]
    await query(writer, "SELECT 42")
    assert (await until_message(reader, b"D")).endswith(b"42")
    writer.close()


async def test_role_that_cannot_log_in_is_refused_with_28000(engine):
    """A NOLOGIN role (CREATE ROLE's default) gets a FATAL 28000 and the connection closes."""
    port = engine.service.pgwire_port

    def create() -> None:
        with connect(port, autocommit=True) as admin:
            admin.execute("CREATE ROLE auditors")

    await asyncio.to_thread(create)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = struct.pack("!i", pw.PROTOCOL_VERSION_3) + b"user\0auditors\0\0"
    writer.write(struct.pack("!i", len(body) + 4) + body)
    kind, message = await asyncio.wait_for(read_backend(reader), 10)
    assert kind == b"E"
    fields = error_fields(message)
    assert (fields["S"], fields["C"]) == ("FATAL", "28000")
    assert fields["M"] == 'role "auditors" is not permitted to log in'
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


async def test_idle_session_timeout_ends_the_connection(nats_url, data_dir, start_table_system):
    """A pgwire session idle past idle_session_timeout is closed; the connection's next
    message gets FATAL 57P05, as PostgreSQL's idle_session_timeout does."""
    async with start_table_system(nats_url, data_dir, idle_session_timeout=0.4) as harness:
        coordinator = harness.service.coordinator
        reader, writer = await raw_session(harness.service.pgwire_port)
        await wait_until(lambda: len(coordinator.sessions) == 0)
        await query(writer, "SELECT 1")
        kind, body = await asyncio.wait_for(read_backend(reader), 10)
        assert kind == b"E"
        assert (error_fields(body)["S"], error_fields(body)["C"]) == ("FATAL", "57P05")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
