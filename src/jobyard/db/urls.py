"""Small URL helpers shared by the CLI, the test harness and the benchmarks."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def with_database(url: str, dbname: str) -> str:
    """The same server URL pointing at another database (keeps host, socket and query)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


def display_url(url: str) -> str:
    """The URL with any password replaced, safe to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
