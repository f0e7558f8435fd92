"""One module per resource, each exposing `ROUTES: tuple[Route, ...]`.

`MODULES` is the explicit list `jobyard.api.routes.all_routes()` assembles, in this order. Add
your module's name here (one line) when you add a resource.
"""

from __future__ import annotations

MODULES: tuple[str, ...] = (
    "auth",
    "orgs",
    "members",
    "invitations",
    "projects",
    "api_keys",
    # The engine's resources (jobs.py before executions.py: same path prefix, fixed first).
    "queues",
    "retry_policies",
    "jobs",
    "workflows",
    "executions",
    "schedules",
    "workers",
    "dlq",
    "metrics",
    "operations",
)
