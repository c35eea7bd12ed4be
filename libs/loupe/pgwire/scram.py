"""SCRAM-SHA-256 (RFC 5802 / RFC 7677), the server side, as PostgreSQL does it.

A role's password is stored as PostgreSQL's verifier,
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (base64), never
the password: ``verifier(password)`` makes one (SASLprep'd password, PBKDF2
with 4096 iterations, 16 random salt bytes, as ``password_encryption =
scram-sha-256`` does) and ``verify_cleartext`` checks a cleartext password
against one.

The exchange (``AuthenticationSASL`` offering ``MECHANISM``, then
``SASLInitialResponse`` / ``SASLResponse`` messages):

1. client-first ``n,,n=<user>,r=<client nonce>`` → ``server_first`` answers
   ``r=<client nonce + server nonce>,s=<salt>,i=<iterations>``
   (``AuthenticationSASLContinue``). The GS2 header is ``n,,`` or ``y,,``:
   Loupe offers no channel binding (no ``SCRAM-SHA-256-PLUS``); ``p=…`` and an
   authorization identity are refused. PostgreSQL ignores the user name in the
   message (the startup packet's counts); so does this.
2. client-final ``c=<base64 GS2 header>,r=<nonce>,p=<proof>`` →
   ``server_final`` checks the channel binding echo, the nonce and the proof
   (in constant time) and answers ``v=<server signature>``
   (``AuthenticationSASLFinal``), or raises ``ScramError``.

An unknown role (``verifier`` None) runs the same exchange against a made-up
verifier whose salt is a keyed hash of the user name (the same every time, as
PostgreSQL's mock salt), and fails at the end: a client cannot tell a missing
role from a wrong password. Errors are ``ScramError`` (a ``LoupeError``):
08P01 for a malformed message, 28P01 when the proof is wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import stringprep
import unicodedata

from loupe.common.errors import LoupeError, SqlState

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096
SALT_BYTES = 16
# PostgreSQL's server nonce is 18 random bytes in base64.
_NONCE_BYTES = 18
_PROTOCOL_VIOLATION = "08P01"
_VERIFIER = re.compile(
    r"SCRAM-SHA-256\$(?P<iterations>\d+):(?P<salt>[A-Za-z0-9+/=]+)"
    r"\$(?P<stored>[A-Za-z0-9+/=]+):(?P<server>[A-Za-z0-9+/=]+)"
)
# Keys the made-up salts of unknown roles: stable while the process runs.
_MOCK_SECRET = secrets.token_bytes(32)


class ScramError(LoupeError):
    """The exchange failed: a malformed message (08P01) or a wrong proof (28P01)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


# -- SASLprep (RFC 4013), as PostgreSQL's pg_saslprep applies it ----------------------------


def _prohibited(character: str) -> bool:
    return (
        stringprep.in_table_c12(character)  # non-ASCII space (mapped before this check)
        or stringprep.in_table_c21_c22(character)  # control characters
        or stringprep.in_table_c3(character)  # private use
        or stringprep.in_table_c4(character)  # non-character code points
        or stringprep.in_table_c5(character)  # surrogates
        or stringprep.in_table_c6(character)  # inappropriate for plain text
        or stringprep.in_table_c7(character)  # inappropriate for canonical representation
        or stringprep.in_table_c8(character)  # change display properties / deprecated
        or stringprep.in_table_c9(character)  # tagging characters
        or stringprep.in_table_a1(character)  # unassigned code points (stored strings)
    )


def saslprep(password: str) -> bytes:
    """The bytes PostgreSQL hashes for ``password``: SASLprep'd, or the password itself
    when SASLprep refuses it (PostgreSQL then uses the raw password, so must we)."""
    if password.isascii():
        # pg_saslprep: pure ASCII is used as it is (control characters included).
        return password.encode()
    mapped = "".join(
        " " if stringprep.in_table_c12(c) else c for c in password if not stringprep.in_table_b1(c)
    )
    normalized = unicodedata.normalize("NFKC", mapped)
    if not normalized or any(_prohibited(c) for c in normalized):
        return password.encode()
    # The bidi rule: with a right-to-left character, no left-to-right one, and R at both ends.
    right_to_left = [stringprep.in_table_d1(c) for c in normalized]
    mixed = any(stringprep.in_table_d2(c) for c in normalized)
    if any(right_to_left) and (mixed or not (right_to_left[0] and right_to_left[-1])):
        return password.encode()
    return normalized.encode()


# -- verifiers --------------------------------------------------------------------------


def _keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of ``password``."""
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)
    client_key = _hmac(salted, b"Client Key")
    return hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key")


def verifier(password: str, *, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    """PostgreSQL's SCRAM-SHA-256 verifier of ``password`` (a new random salt by default)."""
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    stored, server = _keys(password, salt, iterations)
    return f"{MECHANISM}${iterations}:{_b64(salt)}${_b64(stored)}:{_b64(server)}"


def parse_verifier(text: str) -> tuple[int, bytes, bytes, bytes] | None:
    """(iterations, salt, StoredKey, ServerKey) of a verifier; None when ``text`` is none."""
    match = _VERIFIER.fullmatch(text)
    if match is None:
        return None
    try:
        return (
            int(match["iterations"]),
            _unb64(match["salt"]),
            _unb64(match["stored"]),
            _unb64(match["server"]),
        )
    except ValueError:
        return None


def is_verifier(text: str) -> bool:
    return parse_verifier(text) is not None


def verify_cleartext(password: str, verifier: str) -> bool:
    """Whether ``password`` is the one ``verifier`` was made from (constant-time compare)."""
    parsed = parse_verifier(verifier)
    if parsed is None:
        return False
    iterations, salt, stored, server = parsed
    actual_stored, actual_server = _keys(password, salt, iterations)
    return hmac.compare_digest(actual_stored + actual_server, stored + server)


# -- the exchange -------------------------------------------------------------------------


def _malformed(detail: str) -> ScramError:
    return ScramError(_PROTOCOL_VIOLATION, "malformed SCRAM message", detail=detail)


def _attributes(message: str) -> list[tuple[str, str]]:
    """``a=value`` pairs of a SCRAM message, in order."""
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise _malformed(f"Malformed attribute {part!r}.")
        pairs.append((part[0], part[2:]))
    return pairs


class ScramServer:
    """One SCRAM-SHA-256 exchange against ``verifier`` (None: an unknown role; ``user`` then
    seeds its made-up salt). Call ``server_first`` then ``server_final``, once each."""

    def __init__(self, verifier: str | None, *, user: str = "") -> None:
        self.user = user
        parsed = parse_verifier(verifier) if verifier is not None else None
        self._real = parsed is not None
        if parsed is None:
            # Made-up keys: the exchange looks the same and cannot succeed.
            salt = _hmac(_MOCK_SECRET, user.encode())[:SALT_BYTES]
            parsed = (ITERATIONS, salt, secrets.token_bytes(32), secrets.token_bytes(32))
        self.iterations, self.salt, self._stored_key, self._server_key = parsed
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.done = False

    def server_first(self, client_first: bytes) -> bytes:
        """The server-first message for the client's first (SASLInitialResponse data)."""
        if self._server_first:
            raise _malformed("The client sent its first message twice.")
        try:
            text = client_first.decode()
        except UnicodeDecodeError:
            raise _malformed("The client's first message is not UTF-8.") from None
        flag, _, rest = text.partition(",")
        if flag.startswith("p="):
            raise _malformed(
                "The client selected SCRAM-SHA-256 without channel binding, but the SCRAM"
                " message includes channel binding data."
            )
        if flag not in ("n", "y"):
            raise _malformed(f"Unexpected channel-binding flag {flag!r}.")
        authzid, _, bare = rest.partition(",")
        if authzid:
            raise _malformed("client uses authorization identity, but it is not supported")
        attributes = _attributes(bare)
        if attributes and attributes[0][0] == "m":
            raise _malformed("client requires an unsupported SCRAM extension")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise _malformed("Expected n= and r= in the client's first message.")
        client_nonce = attributes[1][1]
        if not client_nonce or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in client_nonce):
            raise _malformed("The client nonce has characters other than printable ASCII.")
        self._gs2_header = f"{flag},,"
        self._client_first_bare = bare
        self._nonce = client_nonce + _b64(secrets.token_bytes(_NONCE_BYTES))
        self._server_first = f"r={self._nonce},s={_b64(self.salt)},i={self.iterations}"
        return self._server_first.encode()

    def server_final(self, client_final: bytes) -> bytes:
        """The server-final message (``v=…``) once the client's proof checks out."""
        if not self._server_first or self.done:
            raise _malformed("The client's final message came out of order.")
        self.done = True
        try:
            text = client_final.decode()
        except UnicodeDecodeError:
            raise _malformed("The client's final message is not UTF-8.") from None
        without_proof, separator, proof_text = text.rpartition(",p=")
        if not separator:
            raise _malformed("The client's final message has no proof.")
        attributes = _attributes(without_proof)
        if len(attributes) < 2 or attributes[0][0] != "c" or attributes[1][0] != "r":
            raise _malformed("Expected c= and r= in the client's final message.")
        try:
            binding = _unb64(attributes[0][1])
            proof = _unb64(proof_text)
        except ValueError:
            raise _malformed("Invalid base64 in the client's final message.") from None
        if binding != self._gs2_header.encode():
            raise _malformed("SCRAM channel binding check failed.")
        if not hmac.compare_digest(attributes[1][1].encode(), self._nonce.encode()):
            raise _malformed("Unexpected SCRAM nonce in the client's final message.")
        if len(proof) != len(self._stored_key):
            raise _malformed("The client's proof has the wrong length.")
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, without_proof)
        ).encode()
        signature = _hmac(self._stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matches = hmac.compare_digest(hashlib.sha256(client_key).digest(), self._stored_key)
        if not (matches and self._real):
            raise ScramError(
                SqlState.INVALID_PASSWORD, f'password authentication failed for user "{self.user}"'
            )
        return f"v={_b64(_hmac(self._server_key, auth_message))}".encode()
