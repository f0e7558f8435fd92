"""Keyset (cursor) pagination. Never OFFSET: a page costs the same at row 10 and row 10 million,
and rows inserted meanwhile neither repeat nor vanish.

A cursor is opaque to clients: urlsafe base64 of JSON `[sort_key, id]` of the last row served.
Handlers fetch `limit + 1` rows ordered by (sort key, id) after the decoded position and call
`make_page`, which trims the extra row and builds `next_cursor` from the last kept one.

    @router handler:
    async def list_things(conn: ConnDep, project: ProjectDep, page: PageDep) -> Page[ThingPublic]:
        after = page.after_id()                     # id-ordered lists
        rows = await core.things_page(conn, project.project_id, after_id=after,
                                      limit=page.limit + 1)
        return make_page(rows, page.limit, key=lambda r: r["id"])

For lists sorted by something else (e.g. created_at DESC), use `page.after()` → (sort_key, id)
or None, and `key=lambda r: (r["created_at"], r["id"])`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel

from jobyard.domain.errors import ValidationFailed

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 200
_MAX_CURSOR_LENGTH: Final = 512
# OpenAPI `format` of cursor parameters: a string only this API makes (generators such as
# schemathesis are told how to make one: tests/api/test_schemathesis.py).
CURSOR_FORMAT: Final = "jobyard-cursor"

T = TypeVar("T")
SortKey = int | str | datetime


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def _encode_value(value: SortKey) -> Any:
    if isinstance(value, datetime):
        return {"t": value.isoformat()}
    return value


def _decode_value(value: Any) -> SortKey:
    if isinstance(value, dict) and set(value) == {"t"} and isinstance(value["t"], str):
        return datetime.fromisoformat(value["t"])
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("bad sort key")
    return value


def encode_cursor(sort_key: SortKey, row_id: int) -> str:
    raw = json.dumps([_encode_value(sort_key), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[SortKey, int]:
    """(sort_key, id) from a cursor; ValidationFailed naming `cursor` (→ 422) if it is not one."""
    bad = ValidationFailed("cursor is not a cursor this API issued", field="cursor")
    if len(cursor) > _MAX_CURSOR_LENGTH:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError("shape")
        sort_key, row_id = value
        if isinstance(row_id, bool) or not isinstance(row_id, int):
            raise ValueError("id")
        return _decode_value(sort_key), row_id
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
        raise bad from None


@dataclass(frozen=True)
class PageParams:
    limit: int
    cursor: str | None

    def after(self) -> tuple[SortKey, int] | None:
        return decode_cursor(self.cursor) if self.cursor else None

    def after_id(self) -> int:
        """For lists ordered by id ascending: the id to continue after (0 on the first page)."""
        after = self.after()
        return after[1] if after else 0


def page_params(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        Query(
            max_length=_MAX_CURSOR_LENGTH,
            description="next_cursor of the last page (opaque; one this API did not issue is a"
            " 422 naming `cursor`).",
            json_schema_extra={"format": CURSOR_FORMAT},
        ),
    ] = None,
) -> PageParams:
    params = PageParams(limit, cursor)
    params.after()  # a bad cursor fails here, as a 422 naming `cursor`
    return params


PageDep = Annotated[PageParams, Depends(page_params)]


def make_page(
    rows: Sequence[T], limit: int, *, key: Callable[[T], int | tuple[SortKey, int]]
) -> Page[T]:
    """Trim the extra row fetched to learn whether there is more, and point the cursor at the last
    row kept. `key` gives the row's id, or its (sort key, id)."""
    items = list(rows[:limit])
    next_cursor = None
    if len(rows) > limit and items:
        k = key(items[-1])
        next_cursor = encode_cursor(k, k) if isinstance(k, int) else encode_cursor(*k)
    return Page[T](items=items, next_cursor=next_cursor)
