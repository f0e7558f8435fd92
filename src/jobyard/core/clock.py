"""The one Python-side time seam.

Due-ness and lease expiry are decided by the database clock (`coalesce(%(now)s, now())` in SQL),
so production passes `now=None` everywhere. Tests pass a fixed `now` to move time without sleeping.
Python-side time is used only for durations inside one process (monotonic).
"""

from __future__ import annotations

import time
from datetime import datetime


def monotonic() -> float:
    return time.monotonic()


def sql_now(now: datetime | None) -> datetime | None:
    """What core passes as %(now)s: None means "the database's now()"."""
    return now
