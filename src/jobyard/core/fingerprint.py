"""Error fingerprints: the same failure with different ids, numbers or paths gets one hash.

>>> a = fingerprint("ValueError", "user 42 not found")
>>> a == fingerprint("ValueError", "user 977 not found")
True
>>> fingerprint("ValueError", "x") == fingerprint("KeyError", "x")
False
"""

from __future__ import annotations

import hashlib
import re

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<uuid>"),
    (re.compile(r"0x[0-9a-f]+", re.I), "<hex>"),
    (re.compile(r"\b[0-9a-f]{16,}\b", re.I), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"(/[\w.-]+)+"), "<path>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalize(message: str) -> str:
    text = (message.strip().splitlines() or [""])[0][:500]
    for pattern, token in _PATTERNS:
        text = pattern.sub(token, text)
    return text.strip().lower()


def fingerprint(error_type: str, message: str) -> str:
    digest = hashlib.sha256(f"{error_type}:{normalize(message)}".encode())
    return digest.hexdigest()[:16]
