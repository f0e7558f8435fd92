"""argon2id password hashing with the OWASP parameters (m=19456 KiB, t=2, p=1)."""

from __future__ import annotations

import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_HASHER = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1, hash_len=32, salt_len=16)


@functools.cache
def _dummy_hash() -> str:
    """Verified against when the user does not exist, so a miss costs as much as a hit. Made on
    first use, not at import: a hash takes ~30 ms, and every `jobyard` command imports this."""
    return _HASHER.hash("jobyard-timing-equaliser")


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        checked = _HASHER.verify(password_hash or _dummy_hash(), password)
        return checked and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    return _HASHER.check_needs_rehash(password_hash)
