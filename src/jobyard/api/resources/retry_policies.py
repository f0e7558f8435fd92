"""Retry policies: how a queue's failed jobs back off (fixed, linear, exponential + jitter) and
how many attempts they get. Reads need viewer; changes need admin."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.json_schema import SkipJsonSchema

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.resources._shared import IdPath, Text, as_page, keyset_after
from jobyard.api.routes import Route, Scope
from jobyard.core import admin, read_models
from jobyard.domain import limits
from jobyard.domain.enums import BackoffKind, Role
from jobyard.domain.schemas import Attempts, BaseDelayMs, MaxDelayMs, check_delay_order

PolicyName = Annotated[Text, StringConstraints(min_length=1, max_length=limits.MAX_NAME_LENGTH)]
# The same bounds (and the same delay rule) as a job's retry override: domain/schemas.py.
BaseDelay = BaseDelayMs
MaxDelay = MaxDelayMs


class RetryPolicyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: PolicyName
    backoff: BackoffKind = BackoffKind.EXPONENTIAL
    base_delay_ms: BaseDelay = 1000
    max_delay_ms: MaxDelay = 3_600_000
    max_attempts: Attempts = 5
    jitter: bool = Field(default=True, description="Full jitter: a uniform draw in [0, delay].")

    @model_validator(mode="after")
    def _ordered(self) -> RetryPolicyCreate:
        check_delay_order(type(self).__name__, self.base_delay_ms, self.max_delay_ms)
        return self


class RetryPolicyUpdate(BaseModel):
    """Only the fields you send change (none of them may be null)."""

    model_config = ConfigDict(extra="forbid")

    # Optional but not nullable: the document says so (null is still refused, naming the field).
    name: PolicyName | SkipJsonSchema[None] = None
    backoff: BackoffKind | SkipJsonSchema[None] = None
    base_delay_ms: BaseDelay | SkipJsonSchema[None] = None
    max_delay_ms: MaxDelay | SkipJsonSchema[None] = None
    max_attempts: Attempts | SkipJsonSchema[None] = None
    jitter: bool | SkipJsonSchema[None] = None


class RetryPolicyPublic(BaseModel):
    id: int
    name: str
    backoff: BackoffKind
    base_delay_ms: int
    max_delay_ms: int
    max_attempts: int
    jitter: bool
    queue_count: int = Field(description="Queues that use this policy.")
    created_at: datetime


async def list_policies(
    project: ProjectDep, conn: ConnDep, page: PageDep
) -> Page[RetryPolicyPublic]:
    result = await read_models.list_policies(
        conn, project.project_id, after_id=keyset_after(page), limit=page.limit
    )
    return as_page(result, RetryPolicyPublic)


async def create_policy(
    body: RetryPolicyCreate, project: ProjectDep, conn: ConnDep
) -> RetryPolicyPublic:
    row = await admin.create_policy(conn, project.project_id, **body.model_dump())
    return RetryPolicyPublic.model_validate(
        await read_models.get_policy(conn, project.project_id, row["id"])
    )


async def get_policy(policy_id: IdPath, project: ProjectDep, conn: ConnDep) -> RetryPolicyPublic:
    return RetryPolicyPublic.model_validate(
        await read_models.get_policy(conn, project.project_id, policy_id)
    )


async def update_policy(
    policy_id: IdPath, body: RetryPolicyUpdate, project: ProjectDep, conn: ConnDep
) -> RetryPolicyPublic:
    changes: dict[str, Any] = body.model_dump(include=body.model_fields_set)
    await admin.update_policy(conn, project.project_id, policy_id, changes)
    return RetryPolicyPublic.model_validate(
        await read_models.get_policy(conn, project.project_id, policy_id)
    )


async def delete_policy(policy_id: IdPath, project: ProjectDep, conn: ConnDep) -> Response:
    """Delete a policy; queues that used it fall back to the default retry behaviour."""
    await admin.delete_policy(conn, project.project_id, policy_id)
    return Response(status_code=204)


TAGS = ("retry policies",)
BASE = "/projects/{project_id}/retry-policies"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_policies, min_role=Role.VIEWER,
          summary="List retry policies", response_model=Page[RetryPolicyPublic], tags=TAGS),
    Route("POST", BASE, Scope.PROJECT, create_policy, min_role=Role.ADMIN, status_code=201,
          summary="Create a retry policy", response_model=RetryPolicyPublic, tags=TAGS,
          responses={409: "the name is taken"}),
    Route("GET", BASE + "/{policy_id}", Scope.PROJECT, get_policy, min_role=Role.VIEWER,
          summary="Get a retry policy", response_model=RetryPolicyPublic, tags=TAGS),
    Route("PATCH", BASE + "/{policy_id}", Scope.PROJECT, update_policy, min_role=Role.ADMIN,
          summary="Update a retry policy", response_model=RetryPolicyPublic, tags=TAGS,
          responses={409: "the name is taken, or one delay sent alone would cross the "
                          "policy's stored other delay"}),
    Route("DELETE", BASE + "/{policy_id}", Scope.PROJECT, delete_policy, min_role=Role.ADMIN,
          status_code=204, summary="Delete a retry policy", tags=TAGS),
)  # fmt: skip
