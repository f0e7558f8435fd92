"""Where a scheduler pass over a time-ordered index starts: a position that skips what earlier
passes already handled, and a full pass now and then for what the position passed over.

Under a held xmin horizon every row a pass has moved on (a promoted job, a reaped lease) leaves
a dead entry in the partial index the pass reads, and nothing may remove it until the hold ends.
A pass from the start of the index walks all of them, every pass, and that walk grows with the
hold. From a position it walks only the last few seconds of them (docs/DATABASE.md, "The
scheduler's passes keep a position"). Used by the reaper (lock_expires_at) and the promoter
(run_at).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

# A full pass waits at least this many times its own last duration: under a long hold it walks
# every entry since the hold began, and must not become most of the loop's work.
FULL_PASS_COST_FACTOR: Final = 20.0


@dataclass
class PassPosition:
    """Where the next pass starts (None: from the start) and when the next full pass is due.

    `slack_s` moves the position back from the last complete pass's cutoff: a row written by a
    transaction that committed after that pass's snapshot carries a time computed from the
    transaction's own start, a little earlier than its commit.
    """

    full_every_s: float
    slack_s: float
    since: datetime | None = None
    next_full_at: float = 0.0

    def start(self, at: float) -> datetime | None:
        """The `since` of a pass that begins at monotonic time `at`: None when a full pass is
        due."""
        return None if self.since is None or at >= self.next_full_at else self.since

    def completed(self, cutoff: datetime, *, full: bool, at: float, took_s: float) -> None:
        """A pass handled every due row up to `cutoff` (the database's time at its start); a
        full one that took `took_s` sets when the next is due."""
        self.since = cutoff - timedelta(seconds=self.slack_s)
        if full:
            self.next_full_at = at + max(self.full_every_s, FULL_PASS_COST_FACTOR * took_s)

    def forget(self) -> None:
        """The next pass is a full one (after an outage: nothing about it is known)."""
        self.since = None
