"""Helpers the engine resources share (not a resource: it has no ROUTES and is not in MODULES).

- `IdPath` / `Id`: database ids, bounded to bigint so an absurd id is a 422, never a driver error.
- `Text`: strings PostgreSQL can store (no NUL byte, which text columns refuse).
- `keyset_after` / `as_page`: the framework's cursor (api/pagination.py) on top of core's
  `KeysetPage`, so engine lists use the same opaque cursors as every other list.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Final, TypeVar

from fastapi import Path
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from jobyard.api.pagination import Page, PageParams, encode_cursor
from jobyard.core.read_models import KeysetPage
from jobyard.domain import limits
from jobyard.domain.errors import ValidationFailed
from jobyard.domain.schemas import require_offset

MAX_ID: Final = limits.MAX_ID
M = TypeVar("M", bound=BaseModel)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain the NUL character")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


def _not_bool(value: Any) -> Any:
    # JSON true is not an id (pydantic would read it as 1).
    if isinstance(value, bool):
        raise ValueError("must be an integer")
    return value


# Field before the validator: the other way round pydantic writes `ge`/`le`, not JSON Schema's
# `minimum`/`maximum`, into the document, and clients and generators ignore the bounds.
Id = Annotated[int, Field(ge=1, le=MAX_ID), BeforeValidator(_not_bool)]
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]


_NUMBER: Final = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _date_time_text(value: object) -> object:
    """A date-time is an RFC 3339 string. Lax validation would read a number, or a string
    that holds only a number (every query parameter is a string), as a Unix time."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("must be a date-time string (RFC 3339), not a number")
    return value


# For bodies and query parameters alike. With a UTC offset, as run_at (the same check): a
# naive time would be read in the database session's TimeZone.
DateTimeText = Annotated[datetime, BeforeValidator(_date_time_text), AfterValidator(require_offset)]


def utc(value: datetime | None, field: str) -> datetime | None:
    """The same instant in UTC. PostgreSQL refuses UTC offsets beyond ±15:59 that Python
    accepts (up to ±23:59); an instant outside Python's years 1-9999 in UTC is refused here."""
    if value is None:
        return None
    try:
        return value.astimezone(UTC) if value.tzinfo is not None else value
    except OverflowError:
        raise ValidationFailed(f"{field}: out of range", field=field) from None


def keyset_after(page: PageParams) -> int | None:
    """The key of the last row the client saw (None on the first page)."""
    after = page.after()
    if after is None:
        return None
    key = after[1]
    if not 0 <= key <= MAX_ID:
        raise ValidationFailed("cursor is not a cursor this API issued", field="cursor")
    return key


def as_page(
    result: KeysetPage, model: type[M], convert: Callable[[dict[str, Any]], Any] | None = None
) -> Page[M]:
    items: Iterable[Any] = result.items if convert is None else map(convert, result.items)
    cursor = None if result.next_key is None else encode_cursor(result.next_key, result.next_key)
    # The route's response_model (Page[XPublic]) fixes the schema; items are validated here.
    return Page(items=[model.model_validate(item) for item in items], next_cursor=cursor)
