"""Operator actions on jobs: retry now, run now, cancel, delete — one job, an explorer filter's
jobs, or a failure group's.

Every change is a compare-and-set on the from-states the lifecycle map gives the action
(`domain.lifecycle.OPERATOR_ACTIONS`): a job that moved meanwhile is skipped and counted, never
overwritten. Bulk actions walk their selection newest first in bounded batches, each batch in a
transaction of its own, so a large filter never holds one long transaction or lock set.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from jobyard.core.clock import sql_now
from jobyard.core.read_models import JobFilters
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.enums import JobStatus
from jobyard.domain.errors import IllegalTransition, NotFound, ValidationFailed
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.lifecycle import HELD, assert_operator_action, operator_sources

Action = Literal["retry", "run_now", "cancel", "delete"]
# The failure policy's cancel reason (migration 0008's trigger): such a job is revived by
# retrying the parent that failed, never retried on its own.
DEPENDENCY_FAILED: Final = "dependency failed:"
ACTIONS: Final[tuple[Action, ...]] = ("retry", "run_now", "cancel", "delete")
BATCH_SIZE: Final = 500
MAX_BULK: Final = 100_000  # one request never walks more; the answer says whether it stopped


@dataclass(frozen=True)
class Retried:
    retried: list[int]  # queued again
    revived: list[int]  # dependents the failure policy had cancelled, waiting again
    still_blocked: list[int]  # revived, but another parent failed too: cancelled again


async def retry(
    conn: Conn, project_id: ProjectId, ids: list[int], *, now: datetime | None = None
) -> Retried:
    """Retry now, the one mechanism behind the API, the dashboard and the CLI (a job, a filter,
    a failure group, a workflow step): the jobs go back to queued, and the descendants the
    failure policy cancelled because of them go back to waiting, in one transaction, so a
    workflow continues where it failed. A revived job that still has another failed parent is
    cancelled again, naming it."""
    params: dict[str, Any] = {"project_id": project_id, "now": sql_now(now)}
    async with conn.transaction():
        rows = await run.all_rows(
            conn, "action_retry", {**params, "ids": ids, "from_states": _states("retry")}
        )
        retried = [int(r["id"]) for r in rows]
        revived: list[int] = []
        again: list[int] = []
        if retried:
            found = await run.all_rows(conn, "action_revive_dependents", {**params, "ids": retried})
            revived = sorted(int(r["id"]) for r in found)
        if revived:
            found = await run.all_rows(
                conn, "action_recheck_failed_parents", {**params, "ids": revived}
            )
            again = sorted(int(r["id"]) for r in found)
    return Retried(retried, revived, again)


@dataclass(frozen=True)
class BulkResult:
    action: str
    matched: int  # jobs the selection held in a state the action applies to
    changed: int  # jobs the action changed (cancel: cancelled now or asked to stop)
    batches: int
    truncated: bool  # stopped at MAX_BULK: run it again for the rest

    @property
    def skipped(self) -> int:
        """Matched but changed meanwhile by someone else (the compare-and-set lost)."""
        return self.matched - self.changed


def _states(action: str) -> list[str]:
    try:
        return sorted(s.value for s in operator_sources(action))
    except ValueError:
        raise ValidationFailed(
            f"action must be one of {', '.join(ACTIONS)}", field="action"
        ) from None


async def apply(
    conn: Conn,
    project_id: ProjectId,
    action: Action,
    ids: list[int],
    *,
    now: datetime | None = None,
) -> int:
    """Apply `action` to these jobs of the project (one batch); returns how many changed."""
    if not ids:
        return 0
    base: dict[str, Any] = {"project_id": project_id, "ids": ids, "now": sql_now(now)}
    if action == "cancel":
        sources = operator_sources("cancel")
        row = await run.one(
            conn,
            "action_cancel",
            {
                **base,
                "pending_states": sorted(s.value for s in sources - HELD),
                "held_states": sorted(s.value for s in sources & HELD),
            },
        )
        assert row is not None
        return int(row["cancelled"]) + int(row["requested"])
    if action == "retry":
        return len((await retry(conn, project_id, ids, now=now)).retried)
    name = {"run_now": "action_run_now", "delete": "action_delete"}
    rows = await run.all_rows(conn, name[action], {**base, "from_states": _states(action)})
    return len(rows)


async def act_on_job(
    conn: Conn,
    project_id: ProjectId,
    action: Action,
    job_id: JobId,
    *,
    now: datetime | None = None,
) -> None:
    """One job. NotFound if it is not this project's; IllegalTransition (naming its state) if
    the action does not apply to it."""
    _states(action)
    if await apply(conn, project_id, action, [job_id], now=now):
        return
    await _refused(conn, project_id, action, job_id)


async def retry_job(
    conn: Conn, project_id: ProjectId, job_id: JobId, *, now: datetime | None = None
) -> Retried:
    """Retry one job (and revive what its failure cancelled); errors as act_on_job."""
    done = await retry(conn, project_id, [job_id], now=now)
    if not done.retried:
        await _refused(conn, project_id, "retry", job_id)
    return done


def cancelled_by_dependency(cancel_reason: str | None) -> bool:
    """Whether the dependency failure policy cancelled the job: its own retry is refused, the
    failed parent's retry brings it back (it waits again)."""
    return bool(cancel_reason) and str(cancel_reason).startswith(DEPENDENCY_FAILED)


async def _refused(conn: Conn, project_id: ProjectId, action: Action, job_id: JobId) -> None:
    """Raise why `action` changed nothing on this job."""
    row = await run.one(conn, "action_job_status", {"project_id": project_id, "job_id": job_id})
    if row is None:
        raise NotFound("job not found")
    current = JobStatus(row["status"])
    reason = row["cancel_reason"] or ""
    if action == "retry" and row["replayed_as"] is not None:
        raise IllegalTransition(
            f"job {job_id}'s dead letter was already replayed as job {row['replayed_as']}, which "
            "carries its work on; follow that job (a retry here would run the work twice)",
            current=current.value,
            action=action,
        )
    if action == "retry" and current is JobStatus.CANCELLED and cancelled_by_dependency(reason):
        raise IllegalTransition(
            f"job {job_id} was cancelled because a parent failed ({reason}); retry that "
            "parent and this job waits again",
            current=current.value,
            action=action,
        )
    assert_operator_action(action, current)
    # The state allows it, yet nothing changed: a held job already asked to stop, or a race.
    raise IllegalTransition(
        f"the job is {current.value} and did not change (already requested, or it moved "
        "meanwhile); reload and try again",
        current=current.value,
        action=action,
    )


async def _walk(
    conn: Conn,
    project_id: ProjectId,
    action: Action,
    select: str,
    params: dict[str, Any],
    *,
    batch_size: int,
    max_jobs: int,
    also: str | None = None,
    now: datetime | None = None,
) -> BulkResult:
    matched = changed = batches = 0
    before: int | None = None
    while matched < max_jobs:
        limit = min(batch_size, max_jobs - matched)
        async with conn.transaction():
            rows = await run.all_rows(conn, select, {**params, "before_id": before, "limit": limit})
            ids = [int(r["id"]) for r in rows]
            if not ids:
                break
            if also is not None:
                await run.all_rows(conn, also, {"project_id": project_id, "ids": ids})
            changed += await apply(conn, project_id, action, ids, now=now)
        matched += len(ids)
        batches += 1
        before = ids[-1]
        if len(ids) < limit:
            return BulkResult(action, matched, changed, batches, truncated=False)
    return BulkResult(action, matched, changed, batches, truncated=matched >= max_jobs)


def _filter_params(project_id: ProjectId, filters: JobFilters, sources: set[str]) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "statuses": sorted(sources),
        "queue": filters.queue,
        "handler": filters.handler,
        "created_from": filters.created_from,
        "created_to": filters.created_to,
        "fingerprint": filters.error_fingerprint,
    }


def _sources(action: str, filters: JobFilters) -> set[str]:
    sources = set(_states(action))
    if filters.statuses:
        sources &= {s.value for s in filters.statuses}
    return sources


async def count(conn: Conn, project_id: ProjectId, action: Action, filters: JobFilters) -> int:
    """How many jobs `bulk` would select now (up to MAX_BULK): what a confirmation names."""
    sources = _sources(action, filters)
    if not sources:
        return 0
    row = await run.one(
        conn, "action_count", {**_filter_params(project_id, filters, sources), "cap": MAX_BULK}
    )
    assert row is not None
    return int(row["n"])


async def bulk(
    conn: Conn,
    project_id: ProjectId,
    action: Action,
    filters: JobFilters,
    *,
    batch_size: int = BATCH_SIZE,
    max_jobs: int = MAX_BULK,
    now: datetime | None = None,
) -> BulkResult:
    """Apply `action` to every job the explorer filter selects that it applies to."""
    sources = _sources(action, filters)
    if not sources:
        return BulkResult(action, 0, 0, 0, truncated=False)
    params = _filter_params(project_id, filters, sources)
    return await _walk(
        conn,
        project_id,
        action,
        "action_select_batch",
        params,
        batch_size=batch_size,
        max_jobs=max_jobs,
        now=now,
    )


GroupAction = Literal["retry", "discard"]
# A failure group's members: failed, dead-lettered, or scheduled again after an error.
GROUP_STATES: Final = ("dead_letter", "failed", "scheduled")


async def group_action(
    conn: Conn,
    project_id: ProjectId,
    fingerprint: str,
    action: GroupAction,
    *,
    batch_size: int = BATCH_SIZE,
    max_jobs: int = MAX_BULK,
    now: datetime | None = None,
) -> BulkResult:
    """Retry every job of a failure group now, or discard them (delete the jobs and their dead
    letters)."""
    if action == "retry":
        # Retry takes failed and dead-lettered; a job backing off (scheduled) is run now.
        first = await _walk(
            conn, project_id, "retry", "failure_group_ids",
            {"project_id": project_id, "fingerprint": fingerprint,
             "statuses": ["dead_letter", "failed"]},
            batch_size=batch_size, max_jobs=max_jobs, now=now,
        )  # fmt: skip
        second = await _walk(
            conn, project_id, "run_now", "failure_group_ids",
            {"project_id": project_id, "fingerprint": fingerprint, "statuses": ["scheduled"]},
            batch_size=batch_size, max_jobs=max(0, max_jobs - first.matched), now=now,
        )  # fmt: skip
        return BulkResult(
            "retry",
            first.matched + second.matched,
            first.changed + second.changed,
            first.batches + second.batches,
            truncated=first.truncated or second.truncated,
        )
    if action == "discard":
        return await _walk(
            conn, project_id, "delete", "failure_group_ids",
            {"project_id": project_id, "fingerprint": fingerprint, "statuses": list(GROUP_STATES)},
            batch_size=batch_size, max_jobs=max_jobs, also="action_discard_letters", now=now,
        )  # fmt: skip
    raise ValidationFailed("action must be retry or discard", field="action")
