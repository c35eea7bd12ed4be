"""Password hashes of roles: PostgreSQL's SCRAM-SHA-256 verifiers, and the legacy scrypt form.

The catalog stores a role's password as PostgreSQL stores it with
``password_encryption = 'scram-sha-256'``:
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (see
``loupe.pgwire.scram``), never the password. That form serves both logins:
a PostgreSQL-wire client proves the password with a SCRAM exchange against
it, and a password sent in cleartext (gRPC, pgwire cleartext) is checked by
re-deriving the keys.

Earlier versions stored ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` (salt and hash
in base64), which no SCRAM exchange can use. ``verify_password`` still
accepts it; the coordinator replaces such a hash with a verifier on the
role's next successful password login (``is_legacy``), and until then the
role logs in over pgwire with a cleartext password. Both derivations are
slow on purpose (PBKDF2 4096 rounds, scrypt about 50 ms): the coordinator
runs them off its event loop.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from loupe.pgwire.scram import is_verifier, verifier, verify_cleartext

_LEGACY_SCHEME = "scrypt"


def hash_password(password: str) -> str:
    """A new SCRAM-SHA-256 verifier of ``password`` (a fresh random salt)."""
    return verifier(password)


def is_legacy(stored: str) -> bool:
    """Whether ``stored`` is a legacy scrypt hash (to be replaced by a verifier)."""
    return stored.startswith(_LEGACY_SCHEME + "$")


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (a verifier or a legacy scrypt hash); False
    for an empty or malformed one."""
    if is_verifier(stored):
        return verify_cleartext(password, stored)
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != _LEGACY_SCHEME:
            return False
        expected = base64.b64decode(digest, validate=True)
        actual = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt, validate=True),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
            maxmem=64 * 2**20,
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)
