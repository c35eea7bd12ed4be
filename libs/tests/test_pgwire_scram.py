"""SCRAM-SHA-256: verifiers as PostgreSQL makes them, and the server side of the exchange.

The verifier format and SASLprep are checked against a real PostgreSQL
(``CREATE ROLE … PASSWORD`` with ``password_encryption = 'scram-sha-256'``,
then ``pg_authid.rolpassword``). The exchange is driven by a client written
here from RFC 5802 alone (it shares no code with ``loupe.pgwire.scram``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from loupe.pgwire import scram


class Client:
    """The client side of SCRAM-SHA-256 (RFC 5802 section 3), SASLprep left out: the
    passwords it is given here are ASCII."""

    def __init__(self, password: str, gs2_header: str = "n,,") -> None:
        self.password = password
        self.gs2_header = gs2_header
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.first_bare = f"n=,r={self.nonce}"

    def first(self) -> bytes:
        return (self.gs2_header + self.first_bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None) -> bytes:
        fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
        assert fields["r"].startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac(
            "sha256", self.password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        binding = base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={binding},r={nonce or fields['r']}"
        self.auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, self.auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def expected_server_final(self) -> bytes:
        signature = hmac.new(self.server_key, self.auth_message, hashlib.sha256).digest()
        return b"v=" + base64.b64encode(signature)


def _exchange(server: scram.ScramServer, client: Client) -> bytes:
    return server.server_final(client.final(server.server_first(client.first())))


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET password_encryption = 'scram-sha-256'")
        yield connection


def _postgres_verifier(connection: psycopg.Connection, password: str) -> str:
    """The verifier PostgreSQL stores for ``password`` (a throwaway role)."""
    role = f"loupe_scram_{uuid.uuid4().hex[:12]}"
    connection.execute(
        psycopg.sql.SQL("CREATE ROLE {} PASSWORD {}").format(
            psycopg.sql.Identifier(role), psycopg.sql.Literal(password)
        )
    )
    try:
        row = connection.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", [role]
        ).fetchone()
    finally:
        connection.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
    assert row is not None
    return str(row[0])


PASSWORDS = [
    "x",
    "correct horse battery staple",
    "pa\u00a0ss",  # a non-ASCII space: SASLprep maps it to a space
    "I\u00adX",  # a soft hyphen: mapped to nothing
    "\u2168",  # ROMAN NUMERAL NINE: NFKC makes it "IX"
    "ünïcødé",
    "a\u0007b",  # ASCII control characters: ASCII is used as it is
    "a\u0080b",  # a non-ASCII control character: SASLprep refuses, the raw bytes count
    "\u0627\u0031",  # right-to-left then a digit: refused by the bidi rule, raw bytes
]


@pytest.mark.parametrize("password", PASSWORDS, ids=repr)
def test_verifiers_are_postgresql_verifiers_byte_for_byte(
    postgres: psycopg.Connection, password: str
) -> None:
    """verifier(password, salt=PostgreSQL's salt) is what PostgreSQL stored; it verifies."""
    stored = _postgres_verifier(postgres, password)
    parsed = scram.parse_verifier(stored)
    assert parsed is not None
    iterations, salt, _, _ = parsed
    assert iterations == scram.ITERATIONS
    assert scram.verifier(password, salt=salt) == stored
    assert scram.verify_cleartext(password, stored)
    assert not scram.verify_cleartext(password + "!", stored)


def test_new_verifiers_have_a_fresh_salt_and_postgresql_s_shape() -> None:
    """Two verifiers of one password differ (16 random salt bytes, 4096 iterations)."""
    first, second = scram.verifier("pw"), scram.verifier("pw")
    assert first != second
    parsed = scram.parse_verifier(first)
    assert parsed is not None
    assert (parsed[0], len(parsed[1]), len(parsed[2]), len(parsed[3])) == (4096, 16, 32, 32)
    assert scram.verify_cleartext("pw", second)
    assert not scram.verify_cleartext("pw", "scrypt$16384$8$1$abc$def")
    assert not scram.verify_cleartext("pw", "SCRAM-SHA-256$4096:!!$x:y")


def test_the_exchange_succeeds_with_postgresql_s_verifier_and_proves_the_server(
    postgres: psycopg.Connection,
) -> None:
    """A client that knows the password is admitted and gets the server signature."""
    stored = _postgres_verifier(postgres, "s3cret")
    for header in ("n,,", "y,,"):
        client = Client("s3cret", header)
        assert _exchange(scram.ScramServer(stored), client) == client.expected_server_final()


def test_a_wrong_password_fails_with_28p01() -> None:
    with pytest.raises(scram.ScramError) as failed:
        _exchange(scram.ScramServer(scram.verifier("right"), user="alice"), Client("wrong"))
    assert failed.value.code == "28P01"
    assert failed.value.message == 'password authentication failed for user "alice"'


def test_an_unknown_role_runs_the_exchange_and_fails_like_a_wrong_password() -> None:
    """Same messages, a stable salt per user name, and 28P01 at the end."""
    firsts = []
    for _ in range(2):
        server = scram.ScramServer(None, user="nobody")
        client = Client("anything")
        first = server.server_first(client.first())
        firsts.append(dict(p.split("=", 1) for p in first.decode().split(",")))
        with pytest.raises(scram.ScramError) as failed:
            server.server_final(client.final(first))
        assert failed.value.code == "28P01"
    assert firsts[0]["s"] == firsts[1]["s"]
    assert firsts[0]["i"] == "4096"
    assert len(base64.b64decode(firsts[0]["s"])) == 16
    other = scram.ScramServer(None, user="somebody").server_first(Client("x").first())
    assert dict(p.split("=", 1) for p in other.decode().split(","))["s"] != firsts[0]["s"]


@pytest.mark.parametrize(
    "client_first",
    [
        b"p=tls-server-end-point,,n=,r=abc",  # channel binding: not offered
        b"n,a=alice,n=,r=abc",  # an authorization identity
        b"x,,n=,r=abc",
        b"n,,r=abc",
        b"n,,n=,r=",
        b"n,,m=ext,n=,r=abc",
        b"n,,n=,r=a,b",
        b"\xff",
    ],
)
def test_malformed_first_messages_are_08p01(client_first: bytes) -> None:
    with pytest.raises(scram.ScramError) as refused:
        scram.ScramServer(scram.verifier("pw")).server_first(client_first)
    assert refused.value.code == "08P01"


def test_a_final_message_must_echo_the_binding_and_the_nonce() -> None:
    """A changed nonce, a channel-binding echo that is not the header, no proof: 08P01."""
    verifier = scram.verifier("pw")
    server = scram.ScramServer(verifier)
    client = Client("pw")
    first = server.server_first(client.first())
    with pytest.raises(scram.ScramError) as refused:
        server.server_final(client.final(first, nonce=client.nonce + "forged"))
    assert refused.value.code == "08P01"

    server = scram.ScramServer(verifier)
    client = Client("pw")
    final = client.final(server.server_first(client.first()))
    tampered = final.replace(b"c=biws", b"c=eSws")  # "y,," where the client said "n,,"
    with pytest.raises(scram.ScramError):
        server.server_final(tampered)

    server = scram.ScramServer(verifier)
    client = Client("pw")
    final = client.final(server.server_first(client.first()))
    with pytest.raises(scram.ScramError):
        server.server_final(final.rpartition(b",p=")[0])

    # One exchange per server: a replayed final message is refused.
    server = scram.ScramServer(verifier)
    client = Client("pw")
    final = client.final(server.server_first(client.first()))
    assert server.server_final(final) == client.expected_server_final()
    with pytest.raises(scram.ScramError):
        server.server_final(final)
