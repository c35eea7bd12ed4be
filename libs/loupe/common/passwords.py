"""Password hashes of roles: scrypt, salted, in a self-describing text form.

The catalog stores ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (salt and hash in
base64), never the password. Verification re-derives with the stored
parameters and compares in constant time. scrypt is slow on purpose (about
50 ms here): the coordinator runs it off its event loop.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_SCHEME = "scrypt"
# OWASP's minimum for scrypt: N=2^17 costs 128 MiB; 2^14 with r=8 is 16 MiB,
# what PostgreSQL's SCRAM peers and most libraries settle for.
_N, _R, _P = 2**14, 8, 1
_SALT_BYTES, _HASH_BYTES = 16, 32


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, dklen=_HASH_BYTES, maxmem=64 * 2**20
    )


def hash_password(password: str) -> str:
    """A new salted hash of ``password``."""
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = _derive(password, salt, _N, _R, _P)
    b64 = base64.b64encode
    return f"{_SCHEME}${_N}${_R}${_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored``; False for an empty or malformed hash."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != _SCHEME:
            return False
        expected = base64.b64decode(digest, validate=True)
        actual = _derive(password, base64.b64decode(salt, validate=True), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)
