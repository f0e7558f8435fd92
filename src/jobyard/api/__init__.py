"""The REST API (FastAPI): routes-as-data, auth, RBAC, rate limits."""
