"""Text that PostgreSQL can store.

A Python string may hold what no `text` or `jsonb` value can: NUL (U+0000) and lone surrogates
(U+D800–U+DFFF without their pair, which UTF-8 cannot encode). Handlers hand such strings over
in exception messages, log lines and results; the driver refuses them, and a refused write
would lose the failure it was recording. What a handler says *about* a job (errors,
tracebacks, log lines, progress) is made storable with both written as visible escapes; what
it returns as data (a result, a payload) is refused instead (`reject_nul`,
`lone_surrogate_in`), never altered.
"""

from __future__ import annotations

import math
from typing import Any

from jobyard.domain.errors import ValidationFailed
from jobyard.domain.limits import MAX_JSON_DEPTH

NUL_ESCAPE = "\\x00"  # as Python's repr writes it
TOO_DEEP = f"[nested more than {MAX_JSON_DEPTH} levels deep]"


def storable(text: str) -> str:
    """`text` with NUL and lone surrogates written as backslash escapes (itself if it has none)."""
    if "\x00" in text:
        text = text.replace("\x00", NUL_ESCAPE)
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def storable_json(value: Any, depth: int = 0) -> Any:
    """`value` as JSON that jsonb holds and the API can write back: every string, keys
    included, made `storable`; what JSON has no form for (NaN, ±Infinity, a set, any other
    object) written as its repr; containers below MAX_JSON_DEPTH levels replaced by a note. For
    what a handler says (a log line's fields), where a best effort beats a lost line."""
    if isinstance(value, str):
        return storable(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict | list | tuple) and depth >= MAX_JSON_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {storable(str(k)): storable_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v, depth + 1) for v in value]
    return storable(repr(value))


def lone_surrogate_in(value: Any) -> bool:
    """Whether a string of this JSON value, keys included, holds a lone surrogate."""
    if isinstance(value, str):
        if value.isascii():
            return False
        try:
            value.encode()
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(lone_surrogate_in(str(k)) or lone_surrogate_in(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(lone_surrogate_in(v) for v in value)
    return False


def reject_nul(value: Any, field: str) -> None:
    """ValidationFailed naming the first string (or object key) inside `value` that holds a NUL.

    PostgreSQL can store NUL neither in text nor anywhere in jsonb (not even as the escape
    \\u0000), and the driver refuses it with an error the db boundary does not translate;
    shared schemas (JobCreate, payloads) do not forbid it themselves, so the API's routes and
    the SDK check here, before any SQL, and name the place.
    """
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationFailed(f"{field}: must not contain the NUL character", field=field)
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{field}.{key}" if field else str(key)
            if isinstance(key, str) and "\x00" in key:
                raise ValidationFailed(
                    f"{field or 'body'}: keys must not contain the NUL character",
                    field=field or "body",
                )
            reject_nul(item, path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            reject_nul(item, f"{field}[{i}]")
