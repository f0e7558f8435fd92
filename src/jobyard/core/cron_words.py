"""A cron expression in words ("At 09:00, Monday through Friday"), by cron-descriptor.

Same field order as core/cron.py: 5 fields, or 6 with a leading seconds field.
"""

from __future__ import annotations

from cron_descriptor import Options, get_description  # type: ignore[import-untyped]


def describe(cron: str) -> str:
    """The expression in words, or "" when the library cannot read it (the caller shows the
    expression itself; core/cron.py is what validates)."""
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    try:
        return str(get_description(cron, options))
    except Exception:  # the library raises its own and ValueError/IndexError on odd input
        return ""
