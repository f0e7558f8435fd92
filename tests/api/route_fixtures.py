"""A valid call for every route in the table: the generated tests need real path params and a
valid body, so that validation can never mask (or fake) the guard's answer.

Add one entry per route, keyed by (method, path) exactly as in its `Route`. The function gets a
`FixtureContext` for the tenant whose resources it should create (via `ctx.conn`, an autocommit
connection to the test database) and returns a `Call`. The generated tests then:

- call it as the owner/admin/… of ANOTHER tenant → must be 404 and leak none of `markers`;
- call it with the caller's own tenant id but this call's other ids → 404 (handlers must scope
  every lookup by the guarded tenant);
- call it with each role below `min_role` → 403;
- call it at exactly `min_role` → must answer `ok_status` (default: the route's status_code).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jobyard.core import auth as core_auth
from jobyard.core import invitations
from jobyard.core.auth import SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import OrgId, ProjectId, UserId
from tests.api.conftest import FIXTURE_PASSWORD, Tenant, make_user

_seq = itertools.count(1)


@dataclass(frozen=True)
class Call:
    path_params: dict[str, int | str]
    json: Any = None  # request body; None sends none
    params: dict[str, Any] = field(default_factory=dict)  # query string
    ok_status: int | None = None  # expected at min_role; None: the Route's status_code
    markers: tuple[str, ...] = ()  # values of the created resources that must not leak


@dataclass(frozen=True)
class FixtureContext:
    conn: Conn
    tenant: Tenant
    keys: SigningKeys

    @property
    def project(self) -> dict[str, int | str]:
        return {"project_id": self.tenant.project_id}

    @property
    def org(self) -> dict[str, int | str]:
        return {"org_id": self.tenant.org_id}


RouteFixture = Callable[[FixtureContext], Awaitable[Call]]


async def _scalar(conn: Conn, query: str, *args: Any) -> Any:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


# ----------------------------------------------------------------------------- auth


async def _login(ctx: FixtureContext) -> Call:
    return Call({}, {"email": ctx.tenant.users[Role.VIEWER].email, "password": FIXTURE_PASSWORD})


async def _refresh(ctx: FixtureContext) -> Call:
    return Call({}, {"refresh_token": ctx.tenant.users[Role.VIEWER].refresh_token})


async def _password(ctx: FixtureContext) -> Call:
    return Call(
        {}, {"current_password": FIXTURE_PASSWORD, "new_password": "another-long-password-1"}
    )


async def _none(ctx: FixtureContext) -> Call:
    return Call({})


# ----------------------------------------------------------------------------- orgs


async def _new_org(ctx: FixtureContext) -> Call:
    n = next(_seq)
    return Call({}, {"name": f"New org {n}", "slug": f"new-org-{n}"})


async def _org(ctx: FixtureContext) -> Call:
    return Call(ctx.org)


async def _org_rename(ctx: FixtureContext) -> Call:
    return Call(ctx.org, {"name": "Renamed org"})


# ----------------------------------------------------------------------------- members


async def _member(ctx: FixtureContext) -> Call:
    user = await make_user(ctx.conn, ctx.keys, email=f"target-{next(_seq)}@example.test")
    await ctx.conn.execute(
        "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, 'member')",
        (ctx.tenant.org_id, user.id),
    )
    return Call({**ctx.org, "user_id": user.id}, markers=(user.email,))


async def _member_update(ctx: FixtureContext) -> Call:
    call = await _member(ctx)
    return Call(call.path_params, {"role": "viewer"}, markers=call.markers)


# ----------------------------------------------------------------------------- invitations


async def _new_invitation(ctx: FixtureContext) -> Call:
    return Call(ctx.org, {"email": f"invitee-{next(_seq)}@example.test", "role": "member"})


async def _issue(ctx: FixtureContext, org_id: int, email: str) -> invitations.IssuedInvitation:
    return await invitations.invite(
        ctx.conn,
        OrgId(org_id),
        email=email,
        role=Role.MEMBER,
        invited_by=UserId(ctx.tenant.users[Role.OWNER].id),
    )


async def _invitation(ctx: FixtureContext) -> Call:
    email = f"invitee-{next(_seq)}@example.test"
    issued = await _issue(ctx, ctx.tenant.org_id, email)
    return Call({**ctx.org, "invitation_id": issued.invitation["id"]}, markers=(email,))


async def _redeem(ctx: FixtureContext) -> Call:
    issued = await _issue(ctx, ctx.tenant.org_id, f"invitee-{next(_seq)}@example.test")
    return Call({}, {"token": issued.token, "password": "a-long-own-password-1"})


async def _accept(ctx: FixtureContext) -> Call:
    """An invitation of the caller (the tenant's viewer) into another organization."""
    n = next(_seq)
    org = await _scalar(
        ctx.conn,
        "INSERT INTO organizations (name, slug) VALUES (%s, %s) RETURNING id",
        f"Inviting org {n}",
        f"inviting-org-{n}",
    )
    issued = await _issue(ctx, org, ctx.tenant.users[Role.VIEWER].email)
    return Call({}, {"token": issued.token})


# ----------------------------------------------------------------------------- projects


async def _new_project(ctx: FixtureContext) -> Call:
    n = next(_seq)
    return Call(ctx.org, {"name": f"New project {n}", "slug": f"new-project-{n}"})


async def _project(ctx: FixtureContext) -> Call:
    return Call(ctx.project)


# ----------------------------------------------------------------------------- API keys


async def _new_key(ctx: FixtureContext) -> Call:
    return Call(ctx.project, {"name": "ci key", "role": "viewer"})


async def _key(ctx: FixtureContext) -> Call:
    _, row = await core_auth.create_api_key(
        ctx.conn,
        ProjectId(ctx.tenant.project_id),
        name=f"victim key {next(_seq)}",
        role=Role.MEMBER,
        created_by=None,
    )
    return Call({**ctx.project, "key_id": row["id"]}, markers=(row["name"], row["prefix"]))


# ----------------------------------------------------------------------------- engine resources


async def _row(conn: Conn, query: str, params: dict[str, Any]) -> dict[str, Any]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return row


async def make_queue_row(ctx: FixtureContext, **values: Any) -> dict[str, Any]:
    return await _row(
        ctx.conn,
        "INSERT INTO queues (project_id, name, max_concurrency) VALUES (%(p)s, %(n)s, %(mc)s)"
        " RETURNING *",
        {
            "p": ctx.tenant.project_id,
            "n": values.get("name", f"queue-{ctx.tenant.label}-{next(_seq)}"),
            "mc": values.get("max_concurrency"),
        },
    )


async def make_job_row(ctx: FixtureContext, *, status: str = "queued") -> dict[str, Any]:
    queue = await make_queue_row(ctx)
    job = await _row(
        ctx.conn,
        """INSERT INTO jobs (project_id, queue_id, handler, payload, status, finished_at)
           VALUES (%(p)s, %(q)s, %(h)s, '{"secret": 1}', %(s)s::job_status,
                   CASE WHEN %(s)s IN ('done', 'dead_letter', 'cancelled') THEN now() END)
           RETURNING *""",
        {"p": ctx.tenant.project_id, "q": queue["id"], "h": f"handler-{next(_seq)}", "s": status},
    )
    return {**job, "queue": queue["name"]}


async def _queues(ctx: FixtureContext) -> Call:
    return Call(ctx.project)


async def _new_queue(ctx: FixtureContext) -> Call:
    return Call(ctx.project, {"name": f"new-queue-{next(_seq)}", "max_concurrency": 3})


async def _queue(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    return Call({**ctx.project, "queue_id": queue["id"]}, markers=(queue["name"],))


async def _queue_update(ctx: FixtureContext) -> Call:
    call = await _queue(ctx)
    return Call(call.path_params, {"priority": 7, "max_concurrency": None}, markers=call.markers)


async def _new_policy(ctx: FixtureContext) -> Call:
    return Call(ctx.project, {"name": f"policy-{next(_seq)}", "backoff": "linear"})


async def _policy(ctx: FixtureContext) -> Call:
    policy = await _row(
        ctx.conn,
        "INSERT INTO retry_policies (project_id, name) VALUES (%(p)s, %(n)s) RETURNING *",
        {"p": ctx.tenant.project_id, "n": f"policy-{ctx.tenant.label}-{next(_seq)}"},
    )
    return Call({**ctx.project, "policy_id": policy["id"]}, markers=(policy["name"],))


async def _policy_update(ctx: FixtureContext) -> Call:
    call = await _policy(ctx)
    return Call(call.path_params, {"max_attempts": 9}, markers=call.markers)


async def _enqueue(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    return Call(ctx.project, {"queue": queue["name"], "handler": "noop", "payload": {"n": 1}})


async def _enqueue_batch(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    items = [{"handler": "noop", "payload": {"n": i}} for i in range(3)]
    return Call(ctx.project, {"queue": queue["name"], "jobs": items})


async def _job(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx)
    return Call({**ctx.project, "job_id": job["id"]}, markers=(job["handler"], job["queue"]))


async def _job_cancel(ctx: FixtureContext) -> Call:
    call = await _job(ctx)  # queued: cancelled at once → 200 (202 is for running jobs)
    return Call(call.path_params, ok_status=200, markers=call.markers)


async def _workflow(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    steps = [
        {"key": "a", "queue": queue["name"], "handler": "noop"},
        {"key": "b", "queue": queue["name"], "handler": "noop", "after": ["a"]},
    ]
    return Call(ctx.project, {"steps": steps})


async def _failed_step(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx, status="dead_letter")
    return Call({**ctx.project, "job_id": job["id"]}, markers=(job["handler"], job["queue"]))


async def _batch(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    batch = await _row(
        ctx.conn,
        "INSERT INTO job_batches (project_id, queue_id, size) VALUES (%(p)s, %(q)s, 1) RETURNING id",
        {"p": ctx.tenant.project_id, "q": queue["id"]},
    )
    return Call({**ctx.project, "batch_id": batch["id"]}, markers=(queue["name"],))


async def _job_with_history(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx, status="done")
    await ctx.conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at, duration_ms, error)
           VALUES (%s, 1, 1, 'succeeded', now(), now(), 5, 'secret-error-text')""",
        (job["id"],),
    )
    await ctx.conn.execute(
        "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'secret-log-line')",
        (job["id"],),
    )
    return Call(
        {**ctx.project, "job_id": job["id"]},
        markers=(job["handler"], "secret-error-text", "secret-log-line"),
    )


async def _new_schedule(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    body = {
        "name": f"schedule-{next(_seq)}",
        "queue_id": queue["id"],
        "cron": "*/5 * * * *",
        "timezone": "Europe/London",
        "handler": "noop",
    }
    return Call(ctx.project, body)


async def _schedule_preview(ctx: FixtureContext) -> Call:
    return Call(ctx.project, params={"cron": "0 9 * * 1-5", "timezone": "Asia/Kolkata", "n": 3})


async def _schedule(ctx: FixtureContext) -> Call:
    queue = await make_queue_row(ctx)
    row = await _row(
        ctx.conn,
        """INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, handler)
           VALUES (%(p)s, %(q)s, %(n)s, '0 * * * *', 'noop') RETURNING *""",
        {
            "p": ctx.tenant.project_id,
            "q": queue["id"],
            "n": f"sched-{ctx.tenant.label}-{next(_seq)}",
        },
    )
    return Call({**ctx.project, "schedule_id": row["id"]}, markers=(row["name"], queue["name"]))


async def _schedule_update(ctx: FixtureContext) -> Call:
    call = await _schedule(ctx)
    return Call(call.path_params, {"enabled": False}, markers=call.markers)


async def _worker(ctx: FixtureContext) -> Call:
    row = await _row(
        ctx.conn,
        """INSERT INTO workers (project_id, name, hostname, concurrency, queues)
           VALUES (%(p)s, %(n)s, 'secret-host', 4, '{default}') RETURNING *""",
        {"p": ctx.tenant.project_id, "n": f"worker-{ctx.tenant.label}-{next(_seq)}"},
    )
    return Call({**ctx.project, "worker_id": row["id"]}, markers=(row["name"], "secret-host"))


async def make_dead_letter_row(ctx: FixtureContext) -> dict[str, Any]:
    queue = await make_queue_row(ctx)
    return await _row(
        ctx.conn,
        """INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason, error,
                                         attempts)
           VALUES (%(p)s, %(q)s, %(h)s, '{"secret": 2}', 'exhausted', 'secret-dlq-error', 3)
           RETURNING *""",
        {"p": ctx.tenant.project_id, "q": queue["id"], "h": f"dlq-handler-{next(_seq)}"},
    )


async def _dead_letter(ctx: FixtureContext) -> Call:
    row = await make_dead_letter_row(ctx)
    return Call({**ctx.project, "dlq_id": row["id"]}, markers=(row["handler"], "secret-dlq-error"))


async def _dead_letter_edit(ctx: FixtureContext) -> Call:
    call = await _dead_letter(ctx)
    return Call(call.path_params, {"payload": {"fixed": True}}, markers=call.markers)


# ----------------------------------------------------------------------------- operations


async def _job_in(ctx: FixtureContext, status: str) -> Call:
    job = await make_job_row(ctx, status=status)
    return Call({**ctx.project, "job_id": job["id"]}, markers=(job["handler"], job["queue"]))


async def _job_dead(ctx: FixtureContext) -> Call:
    return await _job_in(ctx, "dead_letter")


async def _job_scheduled(ctx: FixtureContext) -> Call:
    return await _job_in(ctx, "scheduled")


async def _bulk(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx)
    return Call(ctx.project, {"action": "cancel", "filter": {"queue": job["queue"]}})


async def _bulk_delete(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx, status="done")
    return Call(ctx.project, {"filter": {"queue": job["queue"]}})


async def _failure_group(ctx: FixtureContext) -> Call:
    job = await make_job_row(ctx, status="dead_letter")
    fingerprint = f"{next(_seq):04x}{ctx.tenant.project_id:012x}"
    await ctx.conn.execute(
        "UPDATE jobs SET error_fingerprint = %s, last_error = 'secret-group-error' WHERE id = %s",
        (fingerprint, job["id"]),
    )
    return Call(
        {**ctx.project, "fingerprint": fingerprint},
        markers=(job["handler"], "secret-group-error"),
    )


async def _schedule_trigger(ctx: FixtureContext) -> Call:
    call = await _schedule(ctx)
    return Call(call.path_params, markers=call.markers)


ROUTE_FIXTURES: dict[tuple[str, str], RouteFixture] = {
    # auth
    ("POST", "/auth/login"): _login,
    ("POST", "/auth/refresh"): _refresh,
    ("POST", "/auth/logout"): _none,
    ("POST", "/auth/password"): _password,
    ("GET", "/auth/me"): _none,
    # orgs
    ("GET", "/orgs"): _none,
    ("POST", "/orgs"): _new_org,
    ("GET", "/orgs/{org_id}"): _org,
    ("PATCH", "/orgs/{org_id}"): _org_rename,
    ("DELETE", "/orgs/{org_id}"): _org,
    # members
    ("GET", "/orgs/{org_id}/members"): _org,
    ("PATCH", "/orgs/{org_id}/members/{user_id}"): _member_update,
    ("DELETE", "/orgs/{org_id}/members/{user_id}"): _member,
    # invitations
    ("GET", "/orgs/{org_id}/invitations"): _org,
    ("POST", "/orgs/{org_id}/invitations"): _new_invitation,
    ("POST", "/orgs/{org_id}/invitations/{invitation_id}/resend"): _invitation,
    ("DELETE", "/orgs/{org_id}/invitations/{invitation_id}"): _invitation,
    ("POST", "/invitations/redeem"): _redeem,
    ("POST", "/invitations/accept"): _accept,
    # projects
    ("GET", "/orgs/{org_id}/projects"): _org,
    ("POST", "/orgs/{org_id}/projects"): _new_project,
    ("GET", "/projects/{project_id}"): _project,
    ("DELETE", "/projects/{project_id}"): _project,
    # API keys
    ("GET", "/projects/{project_id}/api-keys"): _project,
    ("POST", "/projects/{project_id}/api-keys"): _new_key,
    ("DELETE", "/projects/{project_id}/api-keys/{key_id}"): _key,
    # ---- other resources: add yours below (queues, retry policies, jobs, executions,
    # schedules, workers, dlq, metrics) ----
    # queues
    ("GET", "/projects/{project_id}/queues"): _queues,
    ("POST", "/projects/{project_id}/queues"): _new_queue,
    ("GET", "/projects/{project_id}/queues/{queue_id}"): _queue,
    ("PATCH", "/projects/{project_id}/queues/{queue_id}"): _queue_update,
    ("POST", "/projects/{project_id}/queues/{queue_id}/pause"): _queue,
    ("POST", "/projects/{project_id}/queues/{queue_id}/resume"): _queue,
    ("DELETE", "/projects/{project_id}/queues/{queue_id}"): _queue,
    # retry policies
    ("GET", "/projects/{project_id}/retry-policies"): _queues,
    ("POST", "/projects/{project_id}/retry-policies"): _new_policy,
    ("GET", "/projects/{project_id}/retry-policies/{policy_id}"): _policy,
    ("PATCH", "/projects/{project_id}/retry-policies/{policy_id}"): _policy_update,
    ("DELETE", "/projects/{project_id}/retry-policies/{policy_id}"): _policy,
    # jobs, executions, logs
    ("GET", "/projects/{project_id}/jobs"): _queues,
    ("POST", "/projects/{project_id}/jobs"): _enqueue,
    ("POST", "/projects/{project_id}/jobs/batch"): _enqueue_batch,
    ("GET", "/projects/{project_id}/jobs/{job_id}"): _job,
    ("POST", "/projects/{project_id}/jobs/{job_id}/cancel"): _job_cancel,
    ("POST", "/projects/{project_id}/workflows"): _workflow,
    ("GET", "/projects/{project_id}/workflows/{job_id}"): _job,
    ("POST", "/projects/{project_id}/workflows/{job_id}/cancel"): _job,
    ("POST", "/projects/{project_id}/workflows/{job_id}/retry"): _failed_step,
    ("GET", "/projects/{project_id}/batches/{batch_id}"): _batch,
    ("POST", "/projects/{project_id}/batches/{batch_id}/cancel"): _batch,
    ("GET", "/projects/{project_id}/jobs/{job_id}/executions"): _job_with_history,
    ("GET", "/projects/{project_id}/jobs/{job_id}/logs"): _job_with_history,
    # schedules
    ("GET", "/projects/{project_id}/schedules"): _queues,
    ("POST", "/projects/{project_id}/schedules"): _new_schedule,
    ("GET", "/projects/{project_id}/schedules/preview"): _schedule_preview,
    ("GET", "/projects/{project_id}/schedules/{schedule_id}"): _schedule,
    ("GET", "/projects/{project_id}/schedules/{schedule_id}/preview"): _schedule,
    ("PATCH", "/projects/{project_id}/schedules/{schedule_id}"): _schedule_update,
    ("DELETE", "/projects/{project_id}/schedules/{schedule_id}"): _schedule,
    # workers
    ("GET", "/projects/{project_id}/workers"): _queues,
    ("GET", "/projects/{project_id}/workers/{worker_id}"): _worker,
    ("POST", "/projects/{project_id}/workers/{worker_id}/pause"): _worker,
    ("POST", "/projects/{project_id}/workers/{worker_id}/resume"): _worker,
    # dead letters
    ("GET", "/projects/{project_id}/dead-letters"): _queues,
    ("GET", "/projects/{project_id}/dead-letters/{dlq_id}"): _dead_letter,
    ("PATCH", "/projects/{project_id}/dead-letters/{dlq_id}"): _dead_letter_edit,
    ("POST", "/projects/{project_id}/dead-letters/{dlq_id}/replay"): _dead_letter,
    ("DELETE", "/projects/{project_id}/dead-letters/{dlq_id}"): _dead_letter,
    # metrics
    ("GET", "/projects/{project_id}/metrics"): _queues,
    ("GET", "/metrics"): _none,
    # operations (why, retry, run now, bulk, failure groups, trigger a schedule)
    ("GET", "/projects/{project_id}/jobs/{job_id}/why"): _job,
    ("POST", "/projects/{project_id}/jobs/{job_id}/retry"): _job_dead,
    ("POST", "/projects/{project_id}/jobs/{job_id}/run-now"): _job_scheduled,
    ("POST", "/projects/{project_id}/jobs/bulk"): _bulk,
    ("POST", "/projects/{project_id}/jobs/bulk-delete"): _bulk_delete,
    ("GET", "/projects/{project_id}/failure-groups"): _queues,
    ("GET", "/projects/{project_id}/failure-groups/{fingerprint}"): _failure_group,
    ("POST", "/projects/{project_id}/failure-groups/{fingerprint}/retry"): _failure_group,
    ("POST", "/projects/{project_id}/failure-groups/{fingerprint}/discard"): _failure_group,
    ("POST", "/projects/{project_id}/schedules/{schedule_id}/trigger"): _schedule_trigger,
}
