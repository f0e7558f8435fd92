"""Wrap Python values for jsonb parameters (so core never imports the driver)."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value)


def jsonb_or_none(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
