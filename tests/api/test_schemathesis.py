"""Generated requests from the OpenAPI document against the real app and database (schemathesis).

Every operation of the document gets valid and invalid requests (positive and negative
generation), half of them aimed at real objects (seeded ids) so handlers run past their 404s,
as the project's owner and, separately, as a viewer. Every response goes through ALL of
schemathesis' checks (`not_a_server_error`, `status_code_conformance`,
`content_type_conformance`, `response_schema_conformance`, `response_headers_conformance`,
`positive_data_acceptance`, `negative_data_rejection`, …) plus our own: every 4xx is the error
envelope with the request id of its X-Request-Id header. Deterministic (derandomize), no
shrinking: a failure is recorded with its request and reported together with the others.

CI runs 500+ cases per role; `make test-slow` (marker `soak`, deselected by default) 2,000+.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.python.asgi import shutdown_lifespans

from jobyard.api.app import create_app
from jobyard.api.auth import issue_access_token
from jobyard.api.pagination import CURSOR_FORMAT, encode_cursor
from jobyard.api.resources._shared import MAX_ID
from jobyard.api.resources.retry_policies import RetryPolicyCreate
from jobyard.api.routes import ALL_ROUTES
from jobyard.core import auth as core_auth
from jobyard.core.auth import SigningKeys
from jobyard.core.cron import parse_cron
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import ValidationFailed
from jobyard.domain.ids import UserId
from jobyard.domain.settings import Settings
from tests.api.conftest import Tenant

pytestmark = pytest.mark.slow

CI_CASES = 500
SOAK_CASES = 2_000
SOAK = (pytest.mark.soak, pytest.mark.timeout(3600))
GHOST_ID = 2**53 - 2  # a valid id that names nothing
# Path ids pinned to GHOST_ID: with a generated (small) id these would delete or demote the
# run's own org, project or owner, and turn the rest of the run into 404s. They still get
# generated bodies and queries, and every check.
PINNED = {
    ("DELETE", "/api/v1/orgs/{org_id}"): ("org_id",),
    ("DELETE", "/api/v1/projects/{project_id}"): ("project_id",),
    ("DELETE", "/api/v1/orgs/{org_id}/members/{user_id}"): ("user_id",),
    ("PATCH", "/api/v1/orgs/{org_id}/members/{user_id}"): ("user_id",),
}
# Logout ends the session of the token it is sent with: each logout case gets a fresh session of
# the same user, so the run's own token stays valid.
FRESH_SESSION = {("POST", "/api/v1/auth/logout")}
# Values of the document's own string formats (cron expressions that fire, IANA zones).
CRONS = st.builds(
    " ".join,
    st.tuples(
        st.sampled_from(["*", "0", "15", "*/5", "0-30", "5,35"]),
        st.sampled_from(["*", "0", "9", "*/2", "8-17"]),
        st.sampled_from(["*", "1", "15", "1-7"]),
        st.sampled_from(["*", "1", "6", "*/3"]),
        st.sampled_from(["*", "1-5", "0", "6"]),
    ),
)
DEFAULT_BASE_DELAY = RetryPolicyCreate.model_fields["base_delay_ms"].default
DEFAULT_MAX_DELAY = RetryPolicyCreate.model_fields["max_delay_ms"].default
ZONES = ["UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Sydney"]
# Credentials are the run's own; auth is tested on its own elsewhere.
AUTH_HEADERS = ("authorization", "x-api-key")


@dataclass
class Tally:
    cases: int = 0
    failed: int = 0
    operations: int = 0
    kinds: Counter[tuple[str, int, str]] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    by_operation: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def _envelope_problem(response: Any) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return "body is not JSON"
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return "body is not {'error': {...}}"
    error = body["error"]
    if set(error) != {"code", "message", "details", "request_id"}:
        return f"error keys are {sorted(error)}"
    if not isinstance(error["code"], str) or not isinstance(error["message"], str):
        return "code/message are not strings"
    # schemathesis gives headers as lowercase keys with list values.
    if [error["request_id"]] != response.headers.get("x-request-id"):
        return "request_id does not match X-Request-Id"
    return None


def check(case: Case, response: Any, tally: Tally, problems: list[str] | None = None) -> None:
    """Count the response; record our envelope check's problem and schemathesis' failures."""
    tally.cases += 1
    tally.by_status[response.status_code] += 1
    tally.by_operation[(f"{case.method} {case.path}", response.status_code)] += 1
    found = list(problems or [])
    if response.status_code >= 500:
        found.append(f"status {response.status_code}")
    elif 400 <= response.status_code < 500:
        problem = _envelope_problem(response)
        if problem:
            found.append(problem)
    if found:
        tally.failed += 1
        new_kind = False
        for problem in found:
            kind = (f"{case.method} {case.path}", response.status_code, problem[:60])
            new_kind = new_kind or kind not in tally.kinds
            tally.kinds[kind] += 1
        if new_kind and len(tally.failures) < 40:  # one example of each kind of failure
            tally.failures.append(
                f"{case.method} {case.formatted_path} query={case.query} body={case.body!r:.300}"
                f" → {response.status_code} {'; '.join(found)}: {response.text[:300]}"
            )


def schemathesis_failures(case: Case, response: Any, headers: dict[str, str]) -> list[str]:
    """Every built-in check schemathesis has (its default set: all of them), as messages."""
    try:
        case.validate_response(response, headers=headers)
    except BaseExceptionGroup as group:
        return [f"{type(e).__name__}: {e}"[:600] for e in group.exceptions]
    except AssertionError as failure:
        return [f"{type(failure).__name__}: {failure}"[:600]]
    return []


async def _seed(conn: Conn, tenant: Tenant) -> dict[str, int]:
    """One object of every kind in the owner's project, so generated calls can hit real ids."""

    async def one(query: str, *args: Any) -> int:
        row = await (await conn.execute(query, args)).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return int(next(iter(row.values())))

    pid = tenant.project_id
    policy = await one(
        "INSERT INTO retry_policies (project_id, name) VALUES (%s, 'std') RETURNING id", pid
    )
    queue = await one(
        "INSERT INTO queues (project_id, name, retry_policy_id) VALUES (%s, 'default', %s)"
        " RETURNING id",
        pid,
        policy,
    )
    job = await one(
        "INSERT INTO jobs (project_id, queue_id, handler) VALUES (%s, %s, 'h') RETURNING id",
        pid,
        queue,
    )
    await conn.execute(
        """INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at) VALUES (%s, 1, 1, 'succeeded', now(), now())""",
        (job,),
    )
    await conn.execute(
        "INSERT INTO job_logs (job_id, execution_seq, message) VALUES (%s, 1, 'hi')", (job,)
    )
    schedule = await one(
        "INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, handler)"
        " VALUES (%s, %s, 'nightly', '0 3 * * *', 'h') RETURNING id",
        pid,
        queue,
    )
    worker = await one(
        "INSERT INTO workers (project_id, name, concurrency) VALUES (%s, 'w', 2) RETURNING id",
        pid,
    )
    dlq = await one(
        "INSERT INTO dead_letter_jobs (project_id, queue_id, handler, payload, reason, attempts)"
        " VALUES (%s, %s, 'h', '{}', 'exhausted', 3) RETURNING id",
        pid,
        queue,
    )
    return {
        "project_id": pid,
        "org_id": tenant.org_id,
        "queue_id": queue,
        "policy_id": policy,
        "job_id": job,
        "schedule_id": schedule,
        "worker_id": worker,
        "dlq_id": dlq,
    }


def _strategies(operation: Any, real: dict[str, int]) -> list[Any]:
    names = {p.name for p in operation.path_parameters}
    pinned = {k: GHOST_ID for k in PINNED.get((operation.method.upper(), operation.path), ())}
    own = {k: v for k, v in real.items() if k in names} | pinned
    tenant_only = {k: v for k, v in own.items() if k in ("project_id", "org_id")} | pinned
    found = []
    for mode, path in (
        (GenerationMode.POSITIVE, own),
        (GenerationMode.POSITIVE, tenant_only),
        (GenerationMode.NEGATIVE, own),
    ):
        try:
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=path or None)
        except Exception:
            continue
        found.append(strategy.map(cross_field_rules) if mode.is_positive else strategy)
    return found


def _fires(cron: object, timezone: object) -> bool:
    try:
        parse_cron(cron, str(timezone))
    except (ValidationFailed, TypeError):
        return False
    return True


def cross_field_rules(case: Case) -> Case:
    """Valid requests also follow the rules JSON Schema cannot state, each documented in
    docs/API.md: `run_at` or `delay_ms`, not both (for a workflow's steps too, whose keys are
    unique); `base_delay_ms` ≤ `max_delay_ms`; a `cron`
    (format `cron`) that fires in its `timezone` (format `iana-timezone`). The generator is
    told them here; negative cases are left as generated."""
    steps = case.body.get("steps") if isinstance(case.body, dict) else None
    # A workflow's steps are jobs too, and their keys are unique (docs/WORKFLOWS.md).
    step_values = [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
    seen: set[object] = set()
    for step in step_values:
        if step.get("key") in seen:
            step["key"] = f"k{len(seen)}"
        seen.add(step.get("key"))
    for values in (case.body, case.query, *step_values):
        if not isinstance(values, dict):
            continue
        if "run_at" in values and "delay_ms" in values:
            del values["delay_ms"]
        if "/retry-policies" in case.operation.path and case.method in ("POST", "PATCH"):
            base = values.get("base_delay_ms", DEFAULT_BASE_DELAY)
            most = values.get("max_delay_ms", DEFAULT_MAX_DELAY)
            if isinstance(base, int | float) and isinstance(most, int | float) and base > most:
                values["base_delay_ms"], values["max_delay_ms"] = most, base
        if "timezone" in values and values["timezone"] not in ZONES:
            values["timezone"] = "UTC"
        if "cron" in values and not _fires(values["cron"], values.get("timezone") or "UTC"):
            values["cron"] = "*/5 * * * *"
    return case


def run_schema(
    schema: Any, headers: dict[str, str], real: dict[str, int], cases: int, fresh: list[str]
) -> Tally:
    tally = Tally()
    operations = [r.ok() for r in schema.get_all_operations()]
    tally.operations = len(operations)
    per_operation = -(-int(cases * 1.15) // len(operations))
    for operation in operations:
        strategies = _strategies(operation, real)
        assert strategies, f"no strategy for {operation.method} {operation.path}"

        @settings(
            max_examples=per_operation,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=st.one_of(*strategies))
        def exercise(case: Case) -> None:
            for name in list(case.headers or {}):
                if name.lower() in AUTH_HEADERS:
                    del case.headers[name]
            key = (case.operation.method.upper(), case.operation.path)
            sent = {"Authorization": f"Bearer {fresh.pop()}"} if key in FRESH_SESSION else headers
            response = case.call(headers=sent)
            check(case, response, tally, schemathesis_failures(case, response, sent))

        exercise()
    return tally


async def _sessions(conn: Conn, keys: SigningKeys, user_id: int, n: int) -> list[str]:
    """`n` access tokens of `n` separate sessions of one user (for logout cases)."""
    tokens = []
    for _ in range(n):
        refresh = await core_auth.start_session(conn, UserId(user_id))
        tokens.append(issue_access_token(keys, UserId(user_id), refresh.family_id)[0])
    return tokens


@pytest.mark.parametrize(
    ("role", "cases"),
    [
        # Every check costs ~0.1-0.2 s per case on 2 shared cores: beyond the default 180 s.
        pytest.param(Role.OWNER, CI_CASES, id="owner", marks=pytest.mark.timeout(900)),
        pytest.param(Role.VIEWER, CI_CASES, id="viewer", marks=pytest.mark.timeout(900)),
        pytest.param(Role.OWNER, SOAK_CASES, id="owner-soak", marks=SOAK),
        pytest.param(Role.VIEWER, SOAK_CASES, id="viewer-soak", marks=SOAK),
    ],
)
async def test_generated_requests_pass_every_schemathesis_check(
    api_settings: Settings,
    conn: Conn,
    tenant_a: Tenant,
    signing_keys: SigningKeys,
    role: Role,
    cases: int,
) -> None:
    real = await _seed(conn, tenant_a)
    user = tenant_a.users[role]
    fresh = await _sessions(
        conn, signing_keys, user.id, -(-int(cases * 1.15) // len(ALL_ROUTES)) + 10
    )
    # The app opens its own pool in schemathesis' event-loop thread (its lifespan).
    app = create_app(api_settings)
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    # The run sends its own real credentials (replacing any generated Authorization header), so
    # generated security parameters would be negative cases nobody sends.
    schema.config.generation.update(with_security_parameters=False)
    # How the document's own formats look (a cursor is a string only this API makes).
    schemathesis.openapi.format(
        CURSOR_FORMAT, st.integers(0, MAX_ID).map(lambda k: encode_cursor(k, k))
    )
    schemathesis.openapi.format("cron", CRONS)
    schemathesis.openapi.format("iana-timezone", st.sampled_from(ZONES))
    # PostgreSQL stores no NUL character, in text or jsonb: the API refuses it (422 naming the
    # field, tests/api/test_conventions.py), so valid requests are generated without it.
    schema.config.generation.update(allow_x00=False)
    try:
        tally = await asyncio.to_thread(run_schema, schema, user.headers, real, cases, fresh)
    finally:
        await asyncio.to_thread(shutdown_lifespans)
    summary = ", ".join(f"{s}: {n}" for s, n in sorted(tally.by_status.items()))
    print(
        f"\nschemathesis as {role}: {tally.cases} cases over {tally.operations} operations,"
        f" {tally.failed} failed ({summary})"
    )
    assert tally.cases >= cases, f"only {tally.cases} cases ({summary})"
    # The run reached past validation and the guard: real successes, not only refusals.
    successes = {op for (op, status) in tally.by_operation if status < 300}
    assert len(successes) >= (40 if role is Role.OWNER else 20), sorted(tally.by_operation.items())
    kinds = "\n".join(f"{n:4} × {op} → {status} {what}" for (op, status, what), n in
                      sorted(tally.kinds.items()))  # fmt: skip
    assert tally.failures == [], f"{tally.failed} failed:\n{kinds}\n" + "\n".join(tally.failures)


def test_the_envelope_check_can_fail() -> None:
    """The custom check itself: a 4xx that is not the envelope, and a 500, are both caught."""

    class Fake:
        def __init__(self, status: int, body: Any, request_id: str = "r1") -> None:
            self.status_code = status
            self._body = body
            self.headers = {"x-request-id": [request_id]}
            self.text = str(body)

        def json(self) -> Any:
            return self._body

    class FakeCase:
        method, path, formatted_path, query, body = "GET", "/x", "/x", {}, None

    good = {"error": {"code": "c", "message": "m", "details": {}, "request_id": "r1"}}
    tally = Tally()
    for response in (
        Fake(404, good),
        Fake(422, {"detail": [{"loc": ["body"]}]}),
        Fake(404, {**good, "error": {**good["error"], "request_id": "other"}}),
        Fake(500, good),
        Fake(200, {"anything": True}),
    ):
        check(FakeCase(), response, tally)  # type: ignore[arg-type]
    assert tally.cases == 5 and len(tally.failures) == 3
    assert list(itertools.chain(tally.by_status)) == [404, 422, 500, 200]
